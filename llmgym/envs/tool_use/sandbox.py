"""A Python sandbox for code written by an agent: one fresh, isolated process tree per call.

Every call is forked from a *fork server* (``_bootstrap.py serve``, one per interpreter and
process) that has imported the standard library but never runs user code, so a call costs
a ``fork`` instead of an interpreter start, and starts from the same pristine state. Each
call gets:

* resource limits: CPU seconds, address space, processes, file size, open files, no core;
* a wall-clock timeout after which the call's whole process group (and every process of its
  uid) is killed;
* an empty working directory, deleted afterwards, and an environment holding only ``PATH``,
  ``HOME`` (the working directory) and ``LANG``;
* when running as root: a dedicated unprivileged uid per concurrent call (``RLIMIT_NPROC`` and
  file permissions do not bind root, and a per-call uid keeps concurrent calls apart), plus
  new network, PID, mount, IPC and UTS namespaces: no network at all (not even loopback),
  host processes invisible, a private size-limited tmpfs for ``/tmp`` and the working dir;
* output cut at ``max_output_bytes``: a process that writes more is stopped.

Nothing survives a call: a fresh fork, a fresh directory and, with namespaces, a fresh PID
namespace whose processes the kernel kills when its first process exits. So no state leaks
between calls, whatever episodes they belong to.

What holds where: :meth:`PythonSandbox.isolation` reports it. Without root, namespaces and
the uid change are unavailable (user namespaces would need the same mount and uid setup and
are not attempted); the sandbox then still has the resource limits, the timeout, the
scrubbed environment and the working directory, but the code can use the network and write
wherever the user can. Pass ``require_isolation=True`` to refuse to run in that case.

``run`` blocks in ``select`` waits, which release the GIL, so threads overlap calls;
``arun`` is the same call for asyncio code.
"""

from __future__ import annotations

import asyncio
import functools
import os
import selectors
import shutil
import socket
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from llmgym.error import DependencyNotInstalled, InvalidOptionError

_BOOTSTRAP = Path(__file__).resolve().parent / "_bootstrap.py"
_SETUP_FAILED = 121
#: Where the working directory is inside the sandbox's private tmpfs.
_ISOLATED_WORKDIR = "/tmp/work"
_ENV_PATH = "/usr/local/bin:/usr/bin:/bin"
_UIDS_PER_PROCESS = 64
#: Seconds a call's output pipes may stay open after its code ended (a leftover process).
_DRAIN_SECONDS = 0.5
_SIGNAL_CAUSES = {signal.SIGXCPU: " (CPU time limit)", signal.SIGKILL: " (CPU time limit or a kill)",
                  signal.SIGSEGV: " (often the memory limit)"}


class _UidPool:
    """The unprivileged uids this process hands to concurrent sandboxed calls, one per call.

    Process-wide on purpose: uids are a machine resource, and two sandboxes in one process
    (say, two envs of a threaded vector env) must never share one. The range is offset by
    the pid so that concurrent llmgym processes on one machine use different uids; the uid
    after the range is kept for the one-time namespace probe.
    """

    def __init__(self, base: int) -> None:
        self.probe_uid = base + _UIDS_PER_PROCESS
        self._free = list(range(base, base + _UIDS_PER_PROCESS))
        self._condition = threading.Condition()

    def acquire(self) -> int:
        with self._condition:
            self._condition.wait_for(lambda: bool(self._free))
            return self._free.pop()

    def release(self, uid: int) -> None:
        with self._condition:
            self._free.append(uid)
            self._condition.notify()


_UIDS = _UidPool(200_000 + (os.getpid() % 4096) * (_UIDS_PER_PROCESS + 1))


@dataclass(frozen=True)
class SandboxConfig:
    """Limits of one sandboxed call. Sizes are in bytes."""

    #: CPU seconds before SIGXCPU (the hard limit one second later is SIGKILL).
    cpu_seconds: int = 5
    #: Wall-clock seconds before the whole process tree is killed.
    wall_timeout: float = 10.0
    #: Address-space limit (RLIMIT_AS) of every process.
    memory_bytes: int = 512 * 2**20
    #: Processes and threads the sandbox's uid may hold (RLIMIT_NPROC; binds only below root).
    processes: int = 16
    #: Largest file the code may write (RLIMIT_FSIZE); a larger write fails with EFBIG.
    file_bytes: int = 8 * 2**20
    #: Size of the private tmpfs holding /tmp and the working directory (namespaces only).
    tmpfs_bytes: int = 32 * 2**20
    #: Open file descriptors (RLIMIT_NOFILE).
    open_files: int = 64
    #: Output (stdout and stderr together) kept; a process that writes more is stopped.
    max_output_bytes: int = 16_384
    #: Interpreter to run; ``None`` picks one the unprivileged uid can read.
    python: str | None = None
    #: Refuse to run (raise at construction) when namespaces or the uid change are unavailable.
    require_isolation: bool = False

    def __post_init__(self) -> None:
        for name in ("cpu_seconds", "memory_bytes", "processes", "file_bytes", "tmpfs_bytes",
                     "open_files", "max_output_bytes"):
            if getattr(self, name) < 1:
                raise InvalidOptionError(f"SandboxConfig.{name} must be >= 1, got {getattr(self, name)}.")
        if self.wall_timeout <= 0:
            raise InvalidOptionError(
                f"SandboxConfig.wall_timeout must be > 0 seconds, got {self.wall_timeout}.")


@dataclass(frozen=True)
class SandboxResult:
    """What one call did. ``ok`` is True only for a normal exit with status 0 within all limits.

    ``exit_code`` is the code's exit status (``128 + n`` when signal ``n`` ended it), or
    ``None`` when the sandbox stopped it (timeout, output cap).
    """

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool = False
    output_truncated: bool = False
    duration: float = 0.0
    #: Human-readable reason the run was stopped or failed, for the agent to read.
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.output_truncated


@dataclass(frozen=True)
class Isolation:
    """Which isolation features hold for a sandbox on this machine, and why not where not."""

    privilege_drop: bool
    namespaces: bool
    interpreter: str
    reasons: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, object]:
        report = asdict(self)
        report["network"] = "none (empty network namespace)" if self.namespaces else "host network"
        return report


class PythonSandbox:
    """Run untrusted Python code in a fresh, limited, isolated process (see the module docstring)."""

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        self._as_root = os.geteuid() == 0
        interpreter, reason = _pick_interpreter(self.config.python, self._as_root)
        namespaces, ns_reason = _namespaces_available(interpreter) if self._as_root else (
            False, "not running as root: namespaces and the uid change need root")
        reasons = tuple(r for r in (reason, ns_reason) if r)
        self._isolation = Isolation(self._as_root, namespaces, interpreter, reasons)
        if self.config.require_isolation and not (self._as_root and namespaces):
            raise DependencyNotInstalled(
                "SandboxConfig(require_isolation=True) but this machine does not allow it: "
                f"{'; '.join(reasons)}. Run as root on Linux with namespaces allowed, or drop "
                "require_isolation."
            )

    def isolation(self) -> Isolation:
        """What holds on this machine (network namespace, privilege drop, ...)."""
        return self._isolation

    async def arun(self, code: str) -> SandboxResult:
        """:meth:`run` for asyncio code: runs in a thread, so calls overlap."""
        return await asyncio.to_thread(self.run, code)

    def run(self, code: str) -> SandboxResult:
        """Run ``code`` and return its (truncated) output; never raises on anything the code does."""
        uid = _UIDS.acquire() if self._as_root else None
        try:
            return self._run(code, uid)
        finally:
            if uid is not None:
                _UIDS.release(uid)

    # ------------------------------------------------------------------ internals
    def _run(self, code: str, uid: int | None) -> SandboxResult:
        isolate = self._isolation.namespaces
        host_workdir = None if isolate else tempfile.mkdtemp(prefix="llmgym-sandbox-")
        workdir = _ISOLATED_WORKDIR if isolate else host_workdir
        assert workdir is not None
        try:
            if host_workdir is not None and uid is not None:
                os.chown(host_workdir, uid, uid)
            config = {
                "isolate": isolate, "uid": uid, "workdir": workdir,
                "cpu_seconds": self.config.cpu_seconds, "memory_bytes": self.config.memory_bytes,
                "file_bytes": self.config.file_bytes, "open_files": self.config.open_files,
                "processes": self.config.processes, "tmpfs_bytes": self.config.tmpfs_bytes,
            }
            return self._execute(code, config, uid)
        finally:
            if uid is not None and not isolate:
                _kill_uid(uid)
            if host_workdir is not None:
                shutil.rmtree(host_workdir, ignore_errors=True)

    def _execute(self, code: str, config: dict[str, object], uid: int | None) -> SandboxResult:
        start = time.monotonic()
        deadline = start + self.config.wall_timeout
        call = _fork_server(self._isolation.interpreter).start_call(_encode_config(config), code, deadline)
        if call is None:
            return SandboxResult("", "", None, duration=time.monotonic() - start,
                                 error="the sandbox's fork server did not answer; try again")
        try:
            stdout, stderr, status, timed_out, overflow = self._collect(call, deadline)
        finally:
            if call.status is None:  # stopped early, or the tree did not end: kill all of it
                _kill_tree(call.pid, uid)
            call.close()
        return self._result(stdout, stderr, status, timed_out, overflow, time.monotonic() - start)

    def _collect(self, call: _Call, deadline: float) -> tuple[bytes, bytes, int | None, bool, bool]:
        """Read the pipes and the exit status until the call ends, the deadline, or the output cap.

        The call has ended when the status has come and both pipes are at end-of-file; a
        process left behind that still holds a pipe gets :data:`_DRAIN_SECONDS`, then is killed.
        """
        limit = self.config.max_output_bytes
        chunks: dict[int, bytearray] = {1: bytearray(), 2: bytearray()}
        timed_out = overflow = False
        with selectors.DefaultSelector() as selector:
            for fileobj, key in ((call.stdout, 1), (call.stderr, 2), (call.socket, 0)):
                selector.register(fileobj, selectors.EVENT_READ, key)
            while True:
                pipes_open = sum(key.data != 0 for key in selector.get_map().values())
                if not pipes_open and (call.status is not None or call.socket not in selector.get_map()):
                    break
                if call.status is not None:
                    deadline = min(deadline, call.ended_at + _DRAIN_SECONDS)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = call.status is None
                    break
                for key, _ in selector.select(remaining):
                    data = call.read_status() if key.data == 0 else os.read(key.fd, 65536)
                    if not data:
                        selector.unregister(key.fileobj)
                    elif key.data:
                        chunks[key.data] += data
                if len(chunks[1]) + len(chunks[2]) > limit:
                    overflow = True
                    break
        return bytes(chunks[1]), bytes(chunks[2]), call.status, timed_out, overflow

    def _result(self, stdout: bytes, stderr: bytes, exit_code: int | None, timed_out: bool,
                overflow: bool, duration: float) -> SandboxResult:
        limit = self.config.max_output_bytes
        out = stdout[:limit].decode("utf-8", "replace")
        err = stderr[: max(0, limit - len(stdout))].decode("utf-8", "replace")
        error = None
        if timed_out:
            error = f"timed out after {self.config.wall_timeout:g} s of wall time; the process was killed"
        elif overflow:
            error = f"output exceeded {limit} bytes; the process was stopped and its output truncated"
        elif exit_code is None:
            error = "the sandboxed process ended without an exit status (it was killed)"
        elif exit_code == _SETUP_FAILED:
            error = "the sandbox could not be set up: " + err.strip()
        elif exit_code > 128 or exit_code < 0:
            number = exit_code - 128 if exit_code > 128 else -exit_code
            error = f"killed by signal {_signal_name(number)}" + _SIGNAL_CAUSES.get(number, "")
        elif exit_code != 0:
            error = f"exited with status {exit_code}"
        return SandboxResult(out, err, exit_code, timed_out, overflow, duration, error)


def _encode_config(config: dict[str, object]) -> str:
    """``config`` as the ``key=value;...`` text that ``_bootstrap.parse_config`` reads."""
    def text(value: object) -> str:
        return "" if value is None else str(int(value)) if isinstance(value, bool) else str(value)

    return ";".join(f"{key}={text(value)}" for key, value in config.items())


class _Call:
    """The parent's end of one call: the monitor's pid, its socket, the output pipes, the status."""

    def __init__(self, pid: int, connection: socket.socket, stdout: int, stderr: int) -> None:
        self.pid = pid
        self.socket = connection
        self.stdout = stdout
        self.stderr = stderr
        self.status: int | None = None
        self.ended_at = 0.0
        self._buffer = b""

    def read_status(self) -> bytes:
        """Read from the socket: ``b""`` at end-of-file, else what came (``b"?"`` if nothing yet).

        Sets ``status`` once its line is complete.
        """
        try:
            data = self.socket.recv(64)
        except BlockingIOError:
            return b"?"
        self._buffer += data
        line, newline, _ = self._buffer.partition(b"\n")
        if self.status is None and newline and line.strip().lstrip(b"-").isdigit():
            self.status = int(line)
            self.ended_at = time.monotonic()
        return data

    def close(self) -> None:
        self.socket.close()
        for fd in (self.stdout, self.stderr):
            os.close(fd)


class _ForkServer:
    """The running ``_bootstrap.py serve`` process of one interpreter, restarted if it dies.

    One per interpreter and process: sandboxes share it. Sending a call's message is the
    only step under the lock; the calls themselves run concurrently.
    """

    def __init__(self, interpreter: str) -> None:
        self.interpreter = interpreter
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None

    def start_call(self, config: str, code: str, deadline: float) -> _Call | None:
        """Fork a monitor for one call and hand it the code; ``None`` if the server is unreachable."""
        stdout_read, stdout_write = os.pipe()
        stderr_read, stderr_write = os.pipe()
        mine, theirs = socket.socketpair()
        try:
            if not self._send(config.encode(), [theirs.fileno(), stdout_write, stderr_write]):
                mine.close()
                os.close(stdout_read)
                os.close(stderr_read)
                return None
        finally:
            theirs.close()
            os.close(stdout_write)
            os.close(stderr_write)
        call = _Call(0, mine, stdout_read, stderr_read)
        try:
            mine.settimeout(max(0.1, deadline - time.monotonic()))
            pid_line = b""
            while not pid_line.endswith(b"\n"):
                chunk = mine.recv(32)
                if not chunk:
                    raise ConnectionError("the monitor ended before reporting its pid")
                pid_line += chunk
            call.pid = int(pid_line)
            mine.sendall(code.encode("utf-8", "replace"))
            mine.shutdown(socket.SHUT_WR)
            mine.setblocking(False)
        except (OSError, ValueError):
            if call.pid:
                _kill_tree(call.pid, None)
            call.close()
            return None
        return call

    def _send(self, message: bytes, fds: list[int]) -> bool:
        with self._lock:
            for _ in range(2):  # a dead server is restarted once
                if self._control is None or self._process is None or self._process.poll() is not None:
                    self._start()
                assert self._control is not None
                try:
                    socket.send_fds(self._control, [message], fds)
                    return True
                except OSError:
                    self._stop()
            return False

    def _start(self) -> None:
        self._stop()
        control, remote = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._process = subprocess.Popen(
            [self.interpreter, "-I", "-S", str(_BOOTSTRAP), "serve", str(remote.fileno())],
            pass_fds=[remote.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, env={"PATH": _ENV_PATH, "LANG": "C.UTF-8"}, cwd="/",
            start_new_session=True,
        )
        remote.close()
        self._control = control

    def _stop(self) -> None:
        if self._control is not None:
            self._control.close()  # the server exits at end-of-file
            self._control = None
        if self._process is not None:
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None


_FORK_SERVERS: dict[str, _ForkServer] = {}
_FORK_SERVERS_LOCK = threading.Lock()


def _fork_server(interpreter: str) -> _ForkServer:
    """The fork server of ``interpreter`` in this process (process-wide: a process resource)."""
    with _FORK_SERVERS_LOCK:
        if interpreter not in _FORK_SERVERS:
            _FORK_SERVERS[interpreter] = _ForkServer(interpreter)
        return _FORK_SERVERS[interpreter]


def _kill_tree(pid: int, uid: int | None) -> None:
    """SIGKILL the call's process group, and every process of the sandbox uid (they may have left it)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if uid is not None:
        _kill_uid(uid)


def _kill_uid(uid: int) -> None:
    """SIGKILL every process whose real uid is ``uid`` (a uid only the sandbox uses)."""
    for _ in range(3):  # processes forking while we scan are caught by the next pass
        found = False
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                if os.stat(entry.path).st_uid != uid:
                    continue
                os.kill(int(entry.name), signal.SIGKILL)
                found = True
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
        if not found:
            return


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


@functools.lru_cache(maxsize=None)
def _pick_interpreter(requested: str | None, as_root: bool) -> tuple[str, str]:
    """An interpreter whose standard library the unprivileged uid can read, and a note if none.

    Running as root, the sandbox drops to an unprivileged uid before the code runs; an
    interpreter installed under a private home directory (``/root/.pyenv``) then cannot
    import its own standard library. The system interpreter usually can.
    """
    if requested is not None:
        return requested, ""
    candidates = [sys.executable, getattr(sys, "_base_executable", sys.executable),
                  shutil.which("python3") or "", "/usr/bin/python3"]
    if not as_root:
        return sys.executable, ""
    for candidate in dict.fromkeys(c for c in candidates if c):
        stdlib = _stdlib_of(candidate)
        if stdlib is not None and _world_readable(stdlib):
            return candidate, ""
    return sys.executable, ("no interpreter with a world-readable standard library was found; "
                            "sandboxed code can import only built-in modules")


def _stdlib_of(interpreter: str) -> str | None:
    try:
        completed = subprocess.run(
            [interpreter, "-I", "-S", "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
            capture_output=True, text=True, timeout=30, env={"PATH": _ENV_PATH},
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return completed.stdout.strip() or None if completed.returncode == 0 else None


def _world_readable(path: str) -> bool:
    """Every directory from ``/`` down to ``path`` lets others traverse it, and ``path`` lets them read."""
    current = Path(path).resolve()
    if not current.is_dir() or not os.stat(current).st_mode & 0o004:
        return False
    return all(os.stat(parent).st_mode & 0o001 for parent in [current, *current.parents])


@functools.lru_cache(maxsize=None)
def _namespaces_available(interpreter: str) -> tuple[bool, str]:
    """Whether the bootstrap's ``unshare`` and mounts work here (tried once per interpreter)."""
    probe = PythonSandbox.__new__(PythonSandbox)
    probe.config = SandboxConfig(wall_timeout=30.0)
    probe._isolation = Isolation(True, True, interpreter)
    uid = _UIDS.probe_uid
    result = probe._execute("print('ready')", {
        "isolate": True, "uid": uid, "workdir": _ISOLATED_WORKDIR, "cpu_seconds": 5,
        "memory_bytes": 256 * 2**20, "file_bytes": 2**20, "open_files": 64, "processes": 8,
        "tmpfs_bytes": 2**20,
    }, uid)
    if result.ok and result.stdout.strip() == "ready":
        return True, ""
    reason = (result.error or result.stderr or "unknown").strip().splitlines()[-1:] or ["unknown"]
    return False, f"namespaces unavailable ({reason[0]}); no network or PID isolation"

