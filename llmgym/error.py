"""Typed errors raised by llmgym.

Every message says what was expected, what came, and what to do. Each class also derives
from the matching built-in (``TypeError``, ``ValueError``, ...) so that callers who catch
the built-in keep working.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class Error(Exception):
    """Base class of every llmgym error."""


class UnknownOptionError(Error, TypeError):
    """A constructor or config got an option it does not have."""


class InvalidOptionError(Error, ValueError):
    """An option has a value outside what the env or config can honour."""


class LevelFormatError(Error, ValueError):
    """A level given through ``reset(options={"level": ...})`` cannot be parsed."""


class DatasetError(Error, ValueError):
    """A dataset file is missing, or a row in it is malformed."""


class DependencyNotInstalled(Error, ImportError):
    """An optional dependency is missing; the message names the install command."""


class SandboxUnavailable(Error, RuntimeError):
    """Sandboxed code execution was asked for, and isolation does not hold on this machine.

    The message names what is missing and how to fix it; ``isolation="none"`` runs code
    without isolation instead (only for code you trust).
    """


class UnsafeSandboxWarning(UserWarning):
    """Code will run without isolation, because ``isolation="none"`` was asked for."""


class TrainOnTestWarning(UserWarning):
    """An env was made with ``split="all"``: levels drawn from seeds may be its eval levels."""


class ResetNeeded(Error, RuntimeError):
    """``step`` was called on an episode that has ended, or before the first ``reset``."""


class SnapshotNotSupported(Error, NotImplementedError):
    """``get_state``/``set_state`` cannot capture this env's state; the message says why and what to do."""


class SnapshotMismatch(Error, ValueError):
    """``set_state`` got a state taken from another kind of env (or not a state at all)."""


class SubEnvError(Error, RuntimeError):
    """A sub-env of a vector env raised; carries the sub-env's index and seed."""

    def __init__(self, message: str, *, index: int, seed: int | None) -> None:
        super().__init__(message)
        self.index = index
        self.seed = seed


class WorkerDiedError(SubEnvError):
    """A worker process of a vector env died (killed, crashed, or out of memory)."""


class SubEnvTimeout(SubEnvError, TimeoutError):
    """A sub-env call of a vector env outlived ``step_timeout``; carries the sub-env's index and seed.

    Also a ``TimeoutError``, so code that caught the plain timeout keeps working.
    """


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """Return ``" Did you mean 'x'?"`` for the closest choice, or ``""`` when none is close."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


class RemoteEnvError(Error, RuntimeError):
    """A served env (``llmgym-serve``) answered a request with an error; ``code`` says which kind.

    Codes: ``RESET_NEEDED``, ``EPISODE_ENDED``, ``ACTION_TOO_LONG``, ``INVALID_JSON``,
    ``VALIDATION_ERROR``, ``UNKNOWN_TYPE``, ``UNKNOWN_ENV_ID``, ``CAPACITY_REACHED``,
    ``ENV_ERROR`` (the env refused the request), ``EXECUTION_ERROR`` (the env raised),
    ``UNKNOWN_INDEX`` (a batch item named no env of its ``/ws/batch`` connection),
    ``CONNECTION_LOST``.
    """

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code
