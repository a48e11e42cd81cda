"""Answer verification that never hangs and never lies.

Four stages, cheapest first:

1. **Length cap.** An answer longer than ``max_answer_chars`` is wrong without being parsed:
   no reference answer is 10 MB long, and parsing one is how a checker gets stuck.
2. **Exact fast path.** When both the reference and the answer read as plain numbers
   (``12``, ``-3``, ``1,000``, ``0.5``, ``7/4``, ``\\frac{1}{2}``, ``x = 5``, ``$5$``) they are
   compared as :class:`fractions.Fraction` values: exact, and no process is involved. Most
   verifications end here. Decimals count at face value: ``0.333`` is not ``1/3``.
3. **A number, not a computation.** When the reference is a plain number, an answer that is
   still a computation (``5 + 11``, ``3 * 14``, ``3/2 + 8/3``; after its last ``=``, if any) is
   wrong: the problem asks for the number, and math-verify would evaluate the expression and
   accept it, so copying a "Compute ..." question would score. ``10 - 2 = 8`` ends in a number
   and goes on to stage 4.
4. **Worker process.** Everything else goes to a worker running math-verify (reference
   first, as math-verify expects), or a sympy fallback when math-verify is not installed. The
   worker has a hard timeout: math-verify's own timeouts use ``SIGALRM``, which works only on
   a main thread, so inside a thread of a vector env they would silently do nothing. A worker
   that outlives the timeout is killed and replaced; the answer counts as wrong. When the
   reference is a plain number, the worker gets only what follows the answer's last ``=``
   (``2 * 63 = 126 km``: ``126 km``): the answer's stated value, not its working.

Workers are kept and reused (a small pool, shared by the envs of a process), because
starting one costs the import of sympy.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import json
import os
import re
import selectors
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Literal

from llmgym.error import InvalidOptionError

Backend = Literal["auto", "math_verify", "sympy"]
VerdictSource = Literal["fast", "computation", "worker", "too_long", "timeout", "error"]

_WORKER = Path(__file__).resolve().parent / "_verify_worker.py"
_STARTUP_TIMEOUT = 120.0

#: LaTeX that does not change a number: math delimiters, \left/\right, thin spaces (``1\,000``).
_WRAPPERS = re.compile(r"\\left|\\right|\\!|\\,|\\;|\\ |\$|\\\(|\\\)|\\\[|\\\]")
#: Spaces around ``=`` and ``/`` and after a leading sign; other spaces keep "2 3" from reading as 23.
_LOOSE_SPACES = re.compile(r"\s*([=/])\s*|^([+-])\s+")
_VARIABLE_PREFIX = re.compile(r"^[a-zA-Z]=")
_INTEGER = re.compile(r"[+-]?\d+")
_GROUPED = re.compile(r"[+-]?\d{1,3}(,\d{3})+(\.\d+)?")
_DECIMAL = re.compile(r"[+-]?(\d+\.\d*|\.\d+)")
_SLASH = re.compile(r"([+-]?\d+)/([+-]?\d+)")
#: ``\frac{a}{b}``, ``\dfrac``, ``\tfrac``, and the brace-less ``\frac12`` (one digit per argument).
_LATEX_FRACTION = re.compile(r"([+-]?)\\[dt]?frac(?:\{([+-]?\d+)\}|(\d))(?:\{([+-]?\d+)\}|(\d))")
_BOXED = re.compile(r"^\\boxed\{(.*)\}$")
#: Two numbers joined by an arithmetic operator: ``5 + 11``, ``2*(-9)``, ``\\frac{3}{2} + 1``, ``2^3``.
_COMPUTATION = re.compile(r"[\d)}]\s*(?:[-+*/^×÷·]|\\cdot|\\times|\\div)(?:[\s(\[{+-]|\\[a-zA-Z]+)*\d")
#: Longest text the fast path tries to read as a number.
_FAST_PATH_CHARS = 200


@dataclass(frozen=True)
class Verdict:
    """The outcome of one check. ``source`` says which stage decided (see the module docstring)."""

    correct: bool
    source: VerdictSource
    detail: str | None = None


def parse_number(text: str) -> Fraction | None:
    """``text`` as an exact number when it is plainly one, else ``None``.

    >>> parse_number("\\\\frac{-3}{4}"), parse_number("1,000"), parse_number("x = 0.5")
    (Fraction(-3, 4), Fraction(1000, 1), Fraction(1, 2))
    """
    if len(text) > _FAST_PATH_CHARS:
        return None
    text = _WRAPPERS.sub("", text).strip().rstrip(".")
    text = _LOOSE_SPACES.sub(lambda match: match.group(1) or match.group(2), text)
    boxed = _BOXED.match(text)
    if boxed:
        text = boxed.group(1).strip()
    text = _VARIABLE_PREFIX.sub("", text)
    if _INTEGER.fullmatch(text) or _DECIMAL.fullmatch(text):
        return Fraction(text)
    if _GROUPED.fullmatch(text):
        return Fraction(text.replace(",", ""))
    match = _SLASH.fullmatch(text)
    if match:
        numerator, denominator = int(match.group(1)), int(match.group(2))
        return Fraction(numerator, denominator) if denominator else None
    match = _LATEX_FRACTION.fullmatch(text)
    if match:
        numerator = int(match.group(2) or match.group(3))
        denominator = int(match.group(4) or match.group(5))
        if not denominator:
            return None
        value = Fraction(numerator, denominator)
        return -value if match.group(1) == "-" else value
    return None


def is_computation(answer: str) -> bool:
    """Whether ``answer`` (after its last ``=``) is arithmetic still to be done rather than a number.

    >>> is_computation("3 * 14"), is_computation("x = 42"), is_computation("-7/4"), is_computation("40 + 2 = 42")
    (True, False, False, False)
    """
    text = _WRAPPERS.sub("", answer).rsplit("=", 1)[-1]
    return parse_number(text) is None and _COMPUTATION.search(text) is not None


def fast_verdict(gold: str, answer: str) -> bool | None:
    """``True``/``False`` when the answer can be decided exactly without a worker, else ``None``."""
    if answer.strip() == gold.strip():
        return True
    gold_value = parse_number(gold)
    if gold_value is None:
        return None
    answer_value = parse_number(answer)
    if answer_value is None and "=" in answer:
        # ``16 * 6} = 9``: the value after the last ``=`` is the answer, whatever comes before it
        # (math-verify, given the whole text, can read the computation instead).
        answer_value = parse_number(stated_value(answer))
    return None if answer_value is None else answer_value == gold_value


def stated_value(answer: str) -> str:
    """The part of ``answer`` that states its value: the text after its last ``=``, else all of it.

    An ``=`` inside braces (``\\boxed{x = 5}``) leaves the answer whole.

    >>> stated_value("2 * 63}{km} = 156 km"), stated_value("\\\\boxed{x = 5}"), stated_value("42")
    (' 156 km', '\\\\boxed{x = 5}', '42')
    """
    if "=" not in answer:
        return answer
    tail = answer.rsplit("=", 1)[1]
    return answer if tail.count("}") > tail.count("{") else tail


class _Worker:
    """One verification worker process and its line-buffered stdout."""

    def __init__(self, backend: Backend) -> None:
        env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
        self.process = subprocess.Popen(
            [sys.executable, "-I", str(_WORKER), backend],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
        )
        self._buffer = b""
        ready = self.read_line(time.monotonic() + _STARTUP_TIMEOUT)
        if ready is None:
            self.kill()
            raise RuntimeError("the verification worker did not start")
        self.backend: str = json.loads(ready)["backend"]

    def ask(self, gold: str, answer: str, timeout: float) -> dict[str, object] | None:
        """Send one request; the reply, or ``None`` when the worker missed the deadline or died."""
        assert self.process.stdin is not None
        request = {"gold": gold, "answer": answer, "timeout": max(1, int(timeout))}
        try:
            self.process.stdin.write(json.dumps(request).encode() + b"\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        line = self.read_line(time.monotonic() + timeout)
        return None if line is None else json.loads(line)

    def read_line(self, deadline: float) -> bytes | None:
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not selector.select(remaining):
                    return None
                chunk = os.read(fd, 65536)
                if not chunk:
                    return None
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


class AnswerVerifier:
    """Checks answers against reference answers (see the module docstring).

    Arguments:
        timeout: hard limit in seconds on one worker check; past it the answer is wrong.
        max_answer_chars: longer answers are wrong without being parsed.
        backend: ``"auto"`` (math-verify when installed, else sympy), or one of them.
        workers: worker processes kept for concurrent checks (threads wait for a free one).

    Bounds: a check that reaches a worker returns within ``timeout`` of getting one. At most
    ``workers`` checks run at once; another waits for a free worker (each frees within
    ``timeout``). A worker killed by a timeout is replaced in the background; the first
    check of a cold pool waits for a worker to start (use :meth:`warm_up` to pay that early),
    so that a slow start never turns a right answer into a wrong one.

    Thread-safe. Usable across ``fork``: a child process starts its own workers.
    """

    def __init__(self, timeout: float = 5.0, max_answer_chars: int = 1000, backend: Backend = "auto",
                 workers: int = 2) -> None:
        if timeout <= 0:
            raise InvalidOptionError(f"timeout must be > 0 seconds, got {timeout}.")
        if max_answer_chars < 1 or workers < 1:
            raise InvalidOptionError(
                f"max_answer_chars and workers must be >= 1, got {max_answer_chars} and {workers}.")
        if backend not in ("auto", "math_verify", "sympy"):
            raise InvalidOptionError(f"backend must be 'auto', 'math_verify' or 'sympy', got {backend!r}.")
        self.timeout = timeout
        self.max_answer_chars = max_answer_chars
        self.backend: Backend = backend
        self.workers = workers
        self._idle: list[_Worker] = []
        self._started = 0
        self._condition = threading.Condition()
        self._pid = os.getpid()
        atexit.register(self.close)

    def verify(self, gold: str, answer: str) -> Verdict:
        """Whether ``answer`` equals the reference ``gold``; never raises, never blocks past the timeout."""
        if len(answer) > self.max_answer_chars:
            return Verdict(False, "too_long",
                           f"answers longer than {self.max_answer_chars} characters are not checked")
        decided = fast_verdict(gold, answer)
        if decided is not None:
            return Verdict(decided, "fast")
        if parse_number(gold) is None:
            return self._ask_worker(gold, answer)
        if is_computation(answer):
            return Verdict(False, "computation", "the answer is a computation; the problem asks for its value")
        # A number is asked for: the worker reads only what the answer states it to be. Given
        # ``2 * 63}{km} = 156 km`` whole, math-verify reads ``2 * 63`` and scores 126 right.
        return self._ask_worker(gold, stated_value(answer))

    async def averify(self, gold: str, answer: str) -> Verdict:
        """:meth:`verify` for asyncio code (runs in a thread; the worker wait releases the GIL)."""
        return await asyncio.to_thread(self.verify, gold, answer)

    def warm_up(self) -> None:
        """Start every worker now (in parallel), so that no later check waits for one to import sympy."""
        with self._condition:
            missing = self.workers - self._started
            self._started += missing
        starters = [threading.Thread(target=self._start_worker) for _ in range(missing)]
        for starter in starters:
            starter.start()
        for starter in starters:
            starter.join()

    def close(self) -> None:
        """Stop the idle workers (busy ones stop when their check ends and they find no pool)."""
        with self._condition:
            idle, self._idle = self._idle, []
        if os.getpid() == self._pid:
            for worker in idle:
                worker.kill()

    # ------------------------------------------------------------------ internals
    def _ask_worker(self, gold: str, answer: str) -> Verdict:
        try:
            worker = self._acquire()
        except (OSError, RuntimeError) as exc:
            return Verdict(False, "error", f"no verification worker: {exc}")
        reply = worker.ask(gold, answer, self.timeout)
        if reply is None:
            worker.process.kill()  # reaping it and starting a replacement happen off this call
            self._replace_in_background(worker)
            return Verdict(False, "timeout", f"the check took longer than {self.timeout:g} s")
        self._release(worker)
        if reply.get("error"):
            return Verdict(False, "error", str(reply["error"]))
        return Verdict(bool(reply["correct"]), "worker")

    def _acquire(self) -> _Worker:
        with self._condition:
            if os.getpid() != self._pid:  # forked: the parent's workers are not ours to use
                self._idle, self._started, self._pid = [], 0, os.getpid()
            self._condition.wait_for(lambda: bool(self._idle) or self._started < self.workers)
            if self._idle:
                return self._idle.pop()
            self._started += 1
        try:
            return _Worker(self.backend)
        except BaseException:
            self._forget()
            raise

    def _replace_in_background(self, dead: _Worker) -> None:
        """Reap ``dead`` and start a worker for the pool in a thread, so no check waits for either."""

        def replace() -> None:
            dead.kill()
            self._start_worker()

        threading.Thread(target=replace, name="llmgym-verifier-start", daemon=True).start()

    def _start_worker(self) -> None:
        """Start a worker already counted in ``_started`` and put it in the pool."""
        try:
            self._release(_Worker(self.backend))
        except (OSError, RuntimeError):
            self._forget()

    def _release(self, worker: _Worker) -> None:
        with self._condition:
            self._idle.append(worker)
            self._condition.notify()

    def _forget(self) -> None:
        with self._condition:
            self._started -= 1
            self._condition.notify()


@functools.lru_cache(maxsize=None)
def default_verifier() -> AnswerVerifier:
    """The verifier the math envs share unless given their own (one worker pool per process)."""
    return AnswerVerifier()
