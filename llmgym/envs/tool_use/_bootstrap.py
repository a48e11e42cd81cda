"""The program a sandboxed call runs first: limits, then the agent's code.

:mod:`llmgym.envs.tool_use.sandbox` starts it as ``python -I -S -c <this source> CONFIG``
inside the call's bubblewrap sandbox (or, with ``isolation="none"``, as a plain child
process), so it imports nothing from llmgym and needs no file of the repository. It may be
started before its call comes (a spare). It reads the code from stdin until end-of-file,
tells the parent it has started (one byte on ``ready_fd``: the wall clock of the call
starts then, so a slow start does not eat the code's time), sets the resource limits,
closes every other file descriptor and runs the code in ``__main__``. Its exit status is
the code's (``1`` for an uncaught exception). It imports nothing it does not need: every
call starts a new interpreter, so an import here would cost every call.

``CONFIG`` is ``key=value`` pairs joined by ``;``, all integers: ``cpu_seconds``,
``memory_bytes``, ``file_bytes``, ``open_files``, ``processes`` (``0``: leave the limit
alone) and ``ready_fd``.
"""

import os
import resource
import signal
import sys

#: Exit status that tells the parent the bootstrap itself failed (not the user's code).
SETUP_FAILED = 121


def parse_config(text: str) -> dict:
    return {key: int(value) for key, value in (pair.split("=", 1) for pair in text.split(";"))}


def _limit(config: dict) -> None:
    cpu = config["cpu_seconds"]
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (config["memory_bytes"], config["memory_bytes"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (config["file_bytes"], config["file_bytes"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (config["open_files"], config["open_files"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if config["processes"]:
        resource.setrlimit(resource.RLIMIT_NPROC, (config["processes"], config["processes"]))


def _flush(stream: object) -> None:
    try:
        stream.flush()  # type: ignore[attr-defined]
    except (OSError, ValueError):
        pass


def _read_code() -> str:
    chunks = []
    while True:
        chunk = os.read(0, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return b"".join(chunks).decode("utf-8", "replace")


def _run(code: str) -> None:
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


def main() -> None:
    try:
        config = parse_config(sys.argv[1])
        code = _read_code()
        os.write(config["ready_fd"], b"R")
        os.environ.pop("PWD", None)  # bubblewrap's --chdir sets it; the environment stays PATH, HOME, LANG
        os.umask(0o077)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized write fails with EFBIG instead
        _limit(config)
        os.closerange(3, 1 << 16)
    except BaseException as exc:  # noqa: BLE001 - anything here is the sandbox's failure, not the code's
        sys.stderr.write(f"sandbox setup failed: {exc}\n")
        _flush(sys.stderr)
        os._exit(SETUP_FAILED)
    _run(code)


if __name__ == "__main__":
    main()
