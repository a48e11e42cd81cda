"""The sandbox's fork server: a clean process that forks one isolated process tree per call.

Started once per interpreter by :mod:`llmgym.envs.tool_use.sandbox` as
``python -I -S _bootstrap.py serve FD``, it imports nothing from llmgym (it must work under
any Python that can read it) and never runs user code itself: every call is a fresh
``fork`` of this pristine process, so calls cost a fork instead of an interpreter start and
share no state. It imports the standard-library modules agents use most before serving, so
that their import is free in every call.

Protocol, on the ``SOCK_SEQPACKET`` socket ``FD``: one message per call, holding the call's
config (``key=value`` pairs joined by ``;``, see :func:`parse_config`) and three file
descriptors: a stream socket for this call, and the write ends of the stdout and stderr
pipes. On the call socket the *monitor* (the forked child) first sends its pid, reads the
code until end-of-file, runs it, and finally sends the exit status (``128 + n`` for signal
``n``). The server exits when the control socket reaches end-of-file (its parent is gone).

What one call does, in order (each step only when the config asks for it):

1. The monitor starts a new session (the parent kills the call as one process group), and
   ``unshare``\\s new network, PID, mount, IPC and UTS namespaces (root only). The new network
   namespace has only a downed loopback device, so no socket reaches anything.
2. It makes every mount private and mounts a size-limited tmpfs over ``/tmp``, ``/var/tmp``
   and ``/dev/shm``: the working directory lives there, nothing written reaches the host,
   and all of it disappears with the namespace.
3. It forks PID 1 of the new PID namespace, which mounts a fresh ``/proc`` (host processes
   become invisible) and forks the worker. When PID 1 exits the kernel kills every process
   left inside, so a flood of background children cannot outlive the call.
4. The worker sets the resource limits, drops to the dedicated unprivileged uid (so
   ``RLIMIT_NPROC`` and file permissions bind; they do not bind root), and ``exec``\\s the code.
"""

import ctypes
import os
import resource
import signal
import socket
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MS_REC, MS_PRIVATE = 16384, 1 << 18
PR_SET_CHILD_SUBREAPER = 36
#: Exit status that tells the parent the isolation itself failed (not the user's code).
SETUP_FAILED = 121
#: Imported once here so that calls do not pay for them.
PRELOADED = ("bisect", "collections", "datetime", "decimal", "fractions", "functools", "heapq", "itertools",
             "json", "math", "random", "re", "statistics", "string", "traceback")

_libc = ctypes.CDLL(None, use_errno=True)


def parse_config(text: str) -> dict:
    """``isolate=1;uid=200000;workdir=/tmp/work;cpu_seconds=5;...``: integers, except ``workdir``.

    ``uid`` is empty for "do not change the uid"; ``isolate`` is 0 or 1.
    """
    config: dict = {}
    for pair in text.split(";"):
        key, value = pair.split("=", 1)
        config[key] = value if key == "workdir" else (None if value == "" else int(value))
    config["isolate"] = bool(config["isolate"])
    return config


# ---------------------------------------------------------------------- isolation steps
def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    _check(
        _libc.mount(
            source.encode(), target.encode(), None if fstype is None else fstype.encode(),
            ctypes.c_ulong(flags), None if data is None else data.encode(),
        ),
        f"mount {target}",
    )


def _isolate(config: dict) -> None:
    flags = CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")
    _mount("none", "/", None, MS_REC | MS_PRIVATE, None)
    size = f"size={config['tmpfs_bytes']},mode=1777"
    for path in ("/tmp", "/var/tmp", "/dev/shm"):
        if os.path.isdir(path):
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, size)


def _limit(config: dict) -> None:
    cpu = config["cpu_seconds"]
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (config["memory_bytes"], config["memory_bytes"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (config["file_bytes"], config["file_bytes"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (config["open_files"], config["open_files"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (config["processes"], config["processes"]))


def _drop_privileges(uid: int) -> None:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


# ---------------------------------------------------------------------- the process tree of a call
def _flush(stream: object) -> None:
    try:
        stream.flush()  # type: ignore[attr-defined]
    except (OSError, ValueError):
        pass


def _run_user_code(code: str, config: dict) -> None:
    """The worker: limits, privileges, working directory, a clean environment, then the code."""
    if config["isolate"]:
        os.makedirs(config["workdir"], mode=0o700)
        if config["uid"] is not None:
            os.chown(config["workdir"], config["uid"], config["uid"])
    os.chdir(config["workdir"])
    os.umask(0o077)
    os.environ.clear()
    os.environ.update(PATH="/usr/local/bin:/usr/bin:/bin", HOME=config["workdir"], LANG="C.UTF-8")
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized write fails with EFBIG instead
    _limit(config)
    if config["uid"] is not None:
        _drop_privileges(config["uid"])
    os.closerange(3, 1 << 16)
    sys.argv = ["<sandbox>"]
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    try:
        exec(compile(code, "<sandbox>", "exec"), namespace)  # noqa: S102 - this is the sandbox
    except SystemExit as exc:
        _flush(sys.stdout)
        _flush(sys.stderr)
        status = exc.code
        os._exit(status if isinstance(status, int) else (0 if status is None else 1))
    except BaseException:  # noqa: BLE001 - report every failure of the user's code
        import traceback

        _flush(sys.stdout)
        kind, value, trace = sys.exc_info()
        user_frames = trace.tb_next if trace is not None else None  # hide this file's frame
        sys.stderr.write("".join(traceback.format_exception(kind, value, user_frames)))
        _flush(sys.stderr)
        os._exit(1)
    _flush(sys.stdout)
    _flush(sys.stderr)
    os._exit(0)


def _init_process(code: str, config: dict) -> None:
    """PID 1 of the new namespace: mount /proc, then run the code in a child.

    The code must not run as PID 1 itself: the kernel shields PID 1 from signals it has no
    handler for, including the SIGXCPU and SIGKILL of the CPU limit.
    """
    try:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    except OSError as exc:
        sys.stderr.write(f"sandbox setup failed: {exc}\n")
        os._exit(SETUP_FAILED)
    os._exit(_fork_and_wait(lambda: _run_user_code(code, config)))


def _fork_and_wait(body) -> int:  # noqa: ANN001 - a zero-argument callable that never returns
    """Run ``body`` in a child process; its exit status (signals as 128 + number)."""
    child = os.fork()
    if child == 0:
        try:
            body()
        except BaseException as exc:  # noqa: BLE001 - body only returns by failing during setup
            sys.stderr.write(f"sandbox setup failed: {exc}\n")
            _flush(sys.stderr)
        os._exit(SETUP_FAILED)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _run_call(code: str, config: dict) -> int:
    """The whole process tree of one call; its exit status."""
    if not config["isolate"]:
        return _fork_and_wait(lambda: _run_user_code(code, config))
    try:
        _isolate(config)
    except OSError as exc:
        sys.stderr.write(f"sandbox setup failed: {exc}\n")
        _flush(sys.stderr)
        return SETUP_FAILED
    return _fork_and_wait(lambda: _init_process(code, config))


def _receive_all(connection: socket.socket) -> bytes:
    chunks = []
    while True:
        chunk = connection.recv(1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _monitor(config: dict, call_fd: int, stdout_fd: int, stderr_fd: int) -> None:
    """The forked child of the server for one call: report the pid, run the call, report its status."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the server ignores it; we wait for our child
    os.setsid()
    call = socket.socket(fileno=call_fd)
    call.sendall(f"{os.getpid()}\n".encode())
    code = _receive_all(call).decode("utf-8", "replace")
    null = os.open(os.devnull, os.O_RDONLY)
    for source, target in ((null, 0), (stdout_fd, 1), (stderr_fd, 2)):
        os.dup2(source, target)
        os.close(source)
    status = _run_call(code, config)
    call.sendall(f"{status}\n".encode())
    os._exit(0)


def serve(control_fd: int) -> None:
    """Fork one monitor per message on ``control_fd`` until it reaches end-of-file."""
    for name in PRELOADED:
        __import__(name)
    # Monitors, and the orphans of a killed monitor (adopted as subreaper), are reaped at once.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    control = socket.socket(fileno=control_fd)
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 1 << 16, 3)
        except InterruptedError:
            continue
        if not message or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            if not message:
                return
            continue
        if os.fork() == 0:
            control.close()
            try:
                _monitor(parse_config(message.decode()), *fds)
            finally:
                os._exit(SETUP_FAILED)
        for fd in fds:
            os.close(fd)


if __name__ == "__main__":
    serve(int(sys.argv[2]))
