"""The python sandbox: each escape attempt is contained, reported in time as a tool error; the env goes on.

Escape attempts run through the tool-use env, as an agent would send them. Where the machine
does not allow an isolation feature (no root, no namespaces) the tests that need it are
skipped with the reason the sandbox reports.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from llmgym.envs.tool_use import PythonSandbox, SandboxConfig, ToolUseEnv
from llmgym.envs.tool_use.tasks import tool_call

WALL_TIMEOUT = 3.0
#: Time to start the interpreter, kill the process tree and reap it on a loaded 2-core machine.
SLACK = 2.5
CONFIG = SandboxConfig(cpu_seconds=1, wall_timeout=WALL_TIMEOUT, memory_bytes=256 * 2**20, processes=16,
                       file_bytes=2**20, max_output_bytes=4096)


@pytest.fixture(scope="module")
def sandbox():
    return PythonSandbox(CONFIG)


@pytest.fixture(scope="module")
def env():
    environment = ToolUseEnv(task="python", sandbox_config=CONFIG)
    environment.reset(seed=0)
    return environment


def _isolated(sandbox: PythonSandbox) -> None:
    isolation = sandbox.isolation()
    if not (isolation.privilege_drop and isolation.namespaces):
        pytest.skip(f"isolation unavailable here: {'; '.join(isolation.reasons)}")


def _run_in_env(env: ToolUseEnv, code: str) -> tuple[dict, dict, float]:
    """Send ``code`` as one python tool call; the decoded tool response, step info, seconds taken."""
    start = time.monotonic()
    observation, reward, terminated, truncated, info = env.step(tool_call("python", code=code))
    elapsed = time.monotonic() - start
    body = re.fullmatch(r"<tool_response>\n(.*)\n</tool_response>", observation, re.DOTALL)
    assert body is not None, observation
    assert (reward, terminated, truncated) == (0.0, False, False)
    return json.loads(body.group(1)), info, elapsed


def _assert_contained(env: ToolUseEnv, code: str, expect: str) -> str:
    """The call is a tool error mentioning ``expect``, within the timeout, and the env still works."""
    env.reset(seed=0)
    response, info, elapsed = _run_in_env(env, code)
    assert info["tool_errors"] == 1, response
    assert response["content"].startswith("Error:"), response
    assert re.search(expect, response["content"]), response["content"]
    assert elapsed < WALL_TIMEOUT + SLACK, f"took {elapsed:.1f} s"
    after, after_info, _ = _run_in_env(env, "print(6 * 7)")
    assert (after["content"].strip(), after_info["tool_errors"]) == ("42", 0)
    for action in env.solution():  # and a whole episode still solves
        observation, reward, terminated, _, _ = env.step(f"<answer>{action}</answer>")
    assert (reward, terminated) == (1.0, True), observation
    return response["content"]


def _sandbox_processes() -> list[int]:
    """Pids of live processes owned by a sandbox uid (the sandbox's uids start at 200,000)."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if os.stat(entry.path).st_uid >= 200_000:
                    pids.append(int(entry.name))
            except FileNotFoundError:
                continue
    return pids


# ---------------------------------------------------------------------- escape attempts
def test_infinite_busy_loop_is_stopped(env):
    _assert_contained(env, "while True:\n    pass", r"SIGXCPU|timed out")


def test_infinite_sleeping_loop_is_stopped_by_the_wall_clock(env):
    _assert_contained(env, "import time\nwhile True:\n    time.sleep(1)", r"timed out after 3 s")


def test_process_flood_hits_the_process_limit_and_leaves_nothing_behind(env, sandbox):
    _isolated(sandbox)
    code = ("import os, time\nfor _ in range(300):\n    if os.fork() == 0:\n        time.sleep(60)\n"
            "        os._exit(0)\n")
    _assert_contained(env, code, r"Resource temporarily unavailable|BlockingIOError")
    time.sleep(0.2)
    assert _sandbox_processes() == []


def test_memory_bomb_fails_with_memory_error(env):
    code = "blocks = []\nwhile True:\n    blocks.append(bytearray(32 * 2**20))"
    _assert_contained(env, code, r"MemoryError")


def test_writing_outside_the_working_directory_is_refused(env, sandbox):
    _isolated(sandbox)
    name = f"llmgym-escape-{uuid.uuid4().hex}"
    outside, host_tmp = Path(__file__).resolve().parent / name, Path("/tmp") / name
    system = Path("/etc") / name  # exists in the sandbox too, and belongs to root
    code = (f"open({str(host_tmp)!r}, 'w').write('x')\n"  # lands in the sandbox's private tmpfs
            f"try:\n    open({str(outside)!r}, 'w').write('x')\nexcept OSError as error:\n    print(error)\n"
            f"open({str(system)!r}, 'w').write('x')\n")
    _assert_contained(env, code, r"PermissionError|Permission denied")
    # Under /tmp the repo is hidden by the sandbox's private tmpfs (FileNotFoundError); elsewhere
    # the unprivileged uid may not write there (PermissionError). Either way nothing lands.
    assert not outside.exists() and not host_tmp.exists() and not system.exists()


def test_parent_environment_variables_are_invisible(env, sandbox, monkeypatch):
    _isolated(sandbox)
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    monkeypatch.setenv("LLMGYM_TEST_SECRET", secret)
    code = (f"import os\nprint(sorted(os.environ))\nprint(os.environ.get('LLMGYM_TEST_SECRET'))\n"
            f"print(open('/proc/{os.getpid()}/environ').read())\n")
    content = _assert_contained(env, code, r"FileNotFoundError|PermissionError")
    assert secret not in content
    assert "['HOME', 'LANG', 'PATH']" in content and "\nNone\n" in content


def test_socket_to_a_listening_loopback_port_cannot_connect(env, sandbox):
    _isolated(sandbox)
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    try:
        code = (f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
                f"s.sendall(b'escaped')\n")
        _assert_contained(env, code, r"Network is unreachable|Connection refused|OSError")
        with pytest.raises(TimeoutError):
            server.accept()
    finally:
        server.close()


def test_hundred_megabytes_of_output_are_cut(env):
    code = "import sys\nsys.stdout.write('x' * 100_000_000)"
    content = _assert_contained(env, code, r"output exceeded 4096 bytes")
    assert len(content) < 4096 + 200


def test_signalling_the_parent_process_fails_and_the_parent_survives(env, sandbox):
    _isolated(sandbox)
    parent = os.getpid()
    code = ("import os, signal\nfor target in (os.getppid(), 1):\n    try:\n"
            "        os.kill(target, signal.SIGKILL)\n"
            "    except OSError as exc:\n        print('refused', target, exc)\n"
            f"os.kill({parent}, signal.SIGKILL)\n")
    content = _assert_contained(env, code, r"ProcessLookupError|PermissionError")
    assert content.count("refused") == 2
    os.kill(parent, 0)  # still here


# ---------------------------------------------------------------------- isolation properties
def test_isolation_report_on_this_machine(sandbox):
    report = sandbox.isolation().as_dict()
    if os.geteuid() == 0:
        assert report["privilege_drop"] is True
    assert set(report) >= {"privilege_drop", "namespaces", "interpreter", "reasons", "network"}


def test_code_runs_unprivileged_in_an_empty_directory_with_a_scrubbed_environment(sandbox):
    _isolated(sandbox)
    result = sandbox.run("import os, json\nprint(json.dumps([os.getuid(), os.getcwd(), os.listdir('.'), "
                         "dict(os.environ), len([p for p in os.listdir('/proc') if p.isdigit()])]))")
    assert result.ok, result
    uid, cwd, listing, environment, processes = json.loads(result.stdout)
    assert uid >= 200_000 and listing == [] and cwd == environment["HOME"]
    assert sorted(environment) == ["HOME", "LANG", "PATH"]
    assert processes <= 3  # a fresh PID namespace: init, the code, nothing of the host


def test_no_state_leaks_between_calls(sandbox):
    _isolated(sandbox)
    first = sandbox.run("import os, json\njson.leaked = True\nopen('note.txt', 'w').write('from call 1')\n"
                        "os.makedirs('/dev/shm/x', exist_ok=True)\n"
                        "if os.fork() == 0:\n    os.setsid()\n    import time\n    time.sleep(60)\n"
                        "print('ok')")
    assert first.ok and first.stdout.strip() == "ok", first
    second = sandbox.run("import os, json\n"
                         "print(os.listdir('.'), os.listdir('/tmp'), os.listdir('/dev/shm'), hasattr(json, 'leaked'))")
    assert second.stdout.strip() == "[] ['work'] [] False", second
    assert _sandbox_processes() == []


def test_file_size_and_process_limits_bind(sandbox):
    _isolated(sandbox)
    big = sandbox.run("open('big', 'wb').write(b'x' * (2 * 2**20))")
    assert not big.ok and "File too large" in big.stderr
    flood = sandbox.run("import os, time\nn = 0\ntry:\n    for _ in range(100):\n        if os.fork() == 0:\n"
                        "            time.sleep(30)\n            os._exit(0)\n        n += 1\n"
                        "except OSError:\n"
                        "    print(n)")
    assert flood.ok and int(flood.stdout) < CONFIG.processes


def test_threads_overlap_sandbox_calls(sandbox):
    results = []
    start = time.monotonic()
    def sleep_one_second() -> None:
        results.append(sandbox.run("import time; time.sleep(1); print(1)"))

    threads = [threading.Thread(target=sleep_one_second) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - start
    assert [r.stdout.strip() for r in results] == ["1"] * 4
    assert elapsed < 3.5, f"4 one-second calls took {elapsed:.1f} s: they did not overlap"


def test_arun_runs_calls_concurrently(sandbox):
    import asyncio

    async def both():
        return await asyncio.gather(sandbox.arun("print(1)"), sandbox.arun("print(2)"))

    assert [r.stdout.strip() for r in asyncio.run(both())] == ["1", "2"]

