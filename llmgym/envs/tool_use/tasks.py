"""Tasks that need tools to be solved well, each with its answer and a plan that solves it.

* ``calculator``: exact arithmetic on 6- to 9-digit numbers (error-prone by hand).
* ``python``: computations that need a short program (primes, Fibonacci residues, digit sums).
* ``search``: facts of the invented world in the shipped corpus, some needing two searches.

A plan is a list of parsed actions (see :meth:`llmgym.envs.tool_use.env.ToolUseEnv.solution`):
tool-call blocks, then the final answer.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from llmgym.envs.tool_use.search import QUESTIONS_PATH, default_index
from llmgym.error import LevelFormatError

TaskKind = Literal["calculator", "python", "search"]
TASK_KINDS: tuple[TaskKind, ...] = get_args(TaskKind)


@dataclass(frozen=True)
class ToolTask:
    """One task: the question, the exact answer, and a plan of parsed actions that solves it."""

    kind: str
    question: str
    answer: str
    plan: tuple[str, ...] = ()

    def as_level(self) -> dict[str, Any]:
        return {"kind": self.kind, "question": self.question, "answer": self.answer, "plan": list(self.plan)}

    @classmethod
    def from_level(cls, level: Any) -> ToolTask:
        if not isinstance(level, dict) or not all(isinstance(level.get(key), str) and level[key]
                                                  for key in ("question", "answer")):
            raise LevelFormatError(
                "A tool-use level is a dict with non-empty string fields 'question' and 'answer' (optional: "
                f"'kind', 'plan' list of strings); got {level!r:.200}."
            )
        plan = level.get("plan", [])
        if not isinstance(plan, list) or not all(isinstance(step, str) for step in plan):
            raise LevelFormatError(f"A tool-use level's 'plan' must be a list of strings, got {plan!r:.200}.")
        return cls(str(level.get("kind", "custom")), level["question"], level["answer"], tuple(plan))


def tool_call(name: str, **arguments: Any) -> str:
    """A ``<tool_call>`` block in the Hermes/Qwen format."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


# ---------------------------------------------------------------------- calculator
def calculator_task(rng: np.random.Generator) -> ToolTask:
    """``a * b - c`` or ``(a + b) * c`` with 6- to 9-digit numbers."""
    a, b, c = (int(rng.integers(10 ** int(rng.integers(5, 9)), 10**9)) for _ in range(3))
    if rng.integers(2):
        expression, value = f"{a} * {b} - {c}", a * b - c
    else:
        expression, value = f"({a} + {b}) * {c}", (a + b) * c
    question = f"What is {expression}? Give the exact integer."
    plan = (tool_call("calculator", expression=expression), str(value))
    return ToolTask("calculator", question, str(value), plan)


# ---------------------------------------------------------------------- python
def _primes_below(limit: int) -> list[int]:
    sieve = bytearray([1]) * limit
    sieve[:2] = b"\x00\x00"
    for number in range(2, math.isqrt(limit - 1) + 1):
        if sieve[number]:
            sieve[number * number :: number] = bytearray(len(range(number * number, limit, number)))
    return [number for number in range(limit) if sieve[number]]


def _fibonacci_mod(index: int, modulus: int) -> int:
    previous, current = 0, 1
    for _ in range(index):
        previous, current = current, (previous + current) % modulus
    return previous


def _digit_sum_of_factorial(x: int, y: int) -> int:
    del y
    return sum(int(digit) for digit in str(math.factorial(x)))


def _divisible_by_exactly_one(x: int, y: int) -> int:
    """Inclusion-exclusion: the multiples of y, plus those of 7, less twice those of both."""
    both = y * 7 // math.gcd(y, 7)
    return x // y + x // 7 - 2 * (x // both)


@dataclass(frozen=True)
class _PythonTemplate:
    """A question and its reference program over parameters ``x`` and ``y``, and the exact answer."""

    question: str
    program: str
    reference: Callable[[int, int], int]
    x_range: tuple[int, int]
    y_range: tuple[int, int] = (0, 0)


_SIEVE_PROGRAM = (
    "n = {x}\nsieve = [True] * n\nsieve[0] = sieve[1] = False\nfor i in range(2, int(n ** 0.5) + 1):\n"
    "    if sieve[i]:\n        sieve[i*i::i] = [False] * len(sieve[i*i::i])\n"
    "print(sum(i for i in range(n) if sieve[i]))"
)
_PYTHON_TEMPLATES = (
    _PythonTemplate("What is the sum of all prime numbers below {x}?", _SIEVE_PROGRAM,
                    lambda x, y: sum(_primes_below(x)), (2_000, 60_000)),
    _PythonTemplate("What is F({x}) modulo {y}, where F is the Fibonacci sequence with F(0) = 0 and "
                    "F(1) = 1?",
                    "a, b = 0, 1\nfor _ in range({x}):\n    a, b = b, (a + b) % {y}\nprint(a)",
                    _fibonacci_mod, (200, 5_000), (1_000, 100_000)),
    _PythonTemplate("What is the sum of the decimal digits of {x}! ({x} factorial)?",
                    "import math\nprint(sum(int(d) for d in str(math.factorial({x}))))",
                    _digit_sum_of_factorial, (30, 400)),
    _PythonTemplate("How many integers from 1 to {x} (inclusive) are divisible by {y} or by 7, but not "
                    "by both?",
                    "print(sum(1 for i in range(1, {x} + 1) if (i % {y} == 0) != (i % 7 == 0)))",
                    _divisible_by_exactly_one, (10_000, 200_000), (8, 13)),
)


def python_task(rng: np.random.Generator) -> ToolTask:
    """A computation from one of a few templates, with its reference program as the plan."""
    template = _PYTHON_TEMPLATES[int(rng.integers(len(_PYTHON_TEMPLATES)))]
    x = int(rng.integers(template.x_range[0], template.x_range[1] + 1))
    y = int(rng.integers(template.y_range[0], template.y_range[1] + 1))
    answer = str(template.reference(x, y))
    program = template.program.format(x=x, y=y)
    plan = (tool_call("python", code=program), answer)
    return ToolTask("python", template.question.format(x=x, y=y), answer, plan)


# ---------------------------------------------------------------------- search
@lru_cache(maxsize=1)
def _search_questions(path: str = str(QUESTIONS_PATH)) -> tuple[dict[str, Any], ...]:
    with Path(path).open(encoding="utf-8") as handle:
        return tuple(json.loads(line) for line in handle if line.strip())


def search_task(rng: np.random.Generator) -> ToolTask:
    """A question about the corpus; the plan searches for each passage it needs, then answers."""
    questions = _search_questions()
    record = questions[int(rng.integers(len(questions)))]
    documents = default_index().documents
    queries = [record["question"]] + [documents[doc_id].title for doc_id in record["doc_ids"][1:]]
    plan = tuple(tool_call("search", query=query) for query in queries) + (record["answer"],)
    return ToolTask("search", record["question"], record["answer"], plan)


TASK_GENERATORS: dict[str, Callable[[np.random.Generator], ToolTask]] = {
    "calculator": calculator_task, "python": python_task, "search": search_task,
}
