"""Procedural math problems with exact answers: arithmetic, fractions, linear equations, word problems.

Every generator takes a :class:`numpy.random.Generator` and a difficulty and returns a
:class:`Problem`. Answers are computed with integers and :class:`fractions.Fraction`, never
floats, and printed canonically by :func:`format_number` (``-3``, ``7/4``), so a problem's
reference answer is exact and unique.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal, get_args

import numpy as np

from llmgym.error import LevelFormatError

Difficulty = Literal["easy", "medium", "hard"]
ProblemKind = Literal["arithmetic", "fractions", "linear_equation", "word_problem"]
DIFFICULTIES: tuple[Difficulty, ...] = get_args(Difficulty)
PROBLEM_KINDS: tuple[ProblemKind, ...] = get_args(ProblemKind)


@dataclass(frozen=True)
class Problem:
    """One math problem; ``answer`` is the canonical reference answer (see :func:`format_number`)."""

    question: str
    answer: str
    kind: str = "custom"
    difficulty: str = "custom"

    def as_level(self) -> dict[str, str]:
        """The JSON-serializable dict ``reset(options={"level": ...})`` takes."""
        return {"question": self.question, "answer": self.answer, "kind": self.kind,
                "difficulty": self.difficulty}

    @classmethod
    def from_level(cls, level: Any) -> Problem:
        """The problem of a level dict; raises :class:`LevelFormatError` on a malformed one."""
        if not isinstance(level, dict):
            raise LevelFormatError(
                f"A math level is a dict with 'question' and 'answer' strings, got {type(level).__name__}."
            )
        missing = [key for key in ("question", "answer")
                   if not isinstance(level.get(key), str) or not level[key]]
        if missing:
            raise LevelFormatError(
                f"A math level needs non-empty string fields 'question' and 'answer'; missing or "
                f"not a string: {', '.join(missing)}. Got keys: {', '.join(sorted(level)) or 'none'}."
            )
        return cls(level["question"], level["answer"], str(level.get("kind", "custom")),
                   str(level.get("difficulty", "custom")))


def format_number(value: Fraction | int) -> str:
    """The canonical text of an exact number: ``12``, ``-3``, ``7/4``, ``-1/2``."""
    value = Fraction(value)
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def generate_problem(rng: np.random.Generator, difficulty: Difficulty,
                     kinds: tuple[ProblemKind, ...] = PROBLEM_KINDS) -> Problem:
    """A problem of a kind drawn uniformly from ``kinds``, at ``difficulty``."""
    kind = kinds[int(rng.integers(len(kinds)))]
    return GENERATORS[kind](rng, difficulty)


# ---------------------------------------------------------------------- arithmetic
_OPERATORS: dict[str, Callable[[Fraction, Fraction], Fraction]] = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b,
}


def _int(rng: np.random.Generator, low: int, high: int) -> int:
    """An integer in ``[low, high]``."""
    return int(rng.integers(low, high + 1))


def _expression(rng: np.random.Generator, terms: int, high: int, operators: str) -> tuple[str, Fraction]:
    """A random expression of ``terms`` integers with sub-expressions in parentheses, and its value."""
    if terms == 1:
        value = _int(rng, 1, high)
        return str(value), Fraction(value)
    left_terms = _int(rng, 1, terms - 1)
    left_text, left = _expression(rng, left_terms, high, operators)
    right_text, right = _expression(rng, terms - left_terms, high, operators)
    operator = operators[int(rng.integers(len(operators)))]
    if operator == "/" and right == 0:
        operator = "+"
    text = f"({left_text} {operator} {right_text})"
    return text, _OPERATORS[operator](left, right)


#: Per difficulty: (terms, largest integer, operators).
_ARITHMETIC = {"easy": (2, 20, "+-*"), "medium": (4, 50, "+-*"), "hard": (6, 99, "+-*/")}


def arithmetic(rng: np.random.Generator, difficulty: Difficulty) -> Problem:
    """Evaluate an integer expression: two terms (easy), four (medium), six with division (hard)."""
    terms, high, operators = _ARITHMETIC[difficulty]
    text, value = _expression(rng, terms, high, operators)
    text = text[1:-1]  # the outermost parentheses say nothing
    note = " Give the exact value (a fraction if it is not an integer)." if "/" in operators else ""
    return Problem(f"Compute {text}.{note}", format_number(value), "arithmetic", difficulty)


# ---------------------------------------------------------------------- fractions
def _fraction(rng: np.random.Generator, high: int) -> Fraction:
    return Fraction(_int(rng, 1, high), _int(rng, 2, high))


def _fraction_text(value: Fraction) -> str:
    return f"{value.numerator}/{value.denominator}"


#: Per difficulty: (fractions, largest numerator or denominator, operators).
_FRACTIONS = {"easy": (2, 9, "+-"), "medium": (3, 12, "+-*"), "hard": (4, 15, "+-*/")}


def fractions(rng: np.random.Generator, difficulty: Difficulty) -> Problem:
    """Combine fractions: two with + or - (easy), three with * too (medium), four with / (hard)."""
    count, high, operators = _FRACTIONS[difficulty]
    parts = [_fraction(rng, high) for _ in range(count)]
    text, value = _fraction_text(parts[0]), parts[0]
    for part in parts[1:]:
        operator = operators[int(rng.integers(len(operators)))]
        right = _fraction_text(part)
        right = f"({right})" if operator == "/" else right  # x / 5/6 would read as (x/5)/6
        text, value = f"({text}) {operator} {right}", _OPERATORS[operator](value, part)
    text = text.replace("(", "", 1).replace(")", "", 1) if count >= 2 else text
    question = f"Compute {text}. Give the answer as a fraction in lowest terms (or an integer)."
    return Problem(question, format_number(value), "fractions", difficulty)


# ---------------------------------------------------------------------- linear equations
def _nonzero(rng: np.random.Generator, high: int) -> int:
    value = _int(rng, 1, high)
    return value if rng.integers(2) else -value


def _linear_text(coefficient: int, constant: int) -> str:
    """``3x + 4``, ``-x - 2``, ``5x``."""
    head = {1: "x", -1: "-x"}.get(coefficient, f"{coefficient}x")
    if constant == 0:
        return head
    return f"{head} {'+' if constant > 0 else '-'} {abs(constant)}"


def linear_equation(rng: np.random.Generator, difficulty: Difficulty) -> Problem:
    """Solve for x: ``ax + b = c`` (easy), ``ax + b = cx + d`` (medium), and with a fractional root (hard)."""
    if difficulty == "hard":
        a, c = _nonzero(rng, 12), _nonzero(rng, 12)
        while c == a:
            c = _nonzero(rng, 12)
        b, d = _int(rng, -30, 30), _int(rng, -30, 30)
        x = Fraction(d - b, a - c)
        equation = f"{_linear_text(a, b)} = {_linear_text(c, d)}"
    else:
        x = Fraction(_int(rng, -12, 12))
        a = _nonzero(rng, 9 if difficulty == "easy" else 15)
        b = _int(rng, -20, 20)
        if difficulty == "easy":
            equation = f"{_linear_text(a, b)} = {format_number(a * x + b)}"
        else:
            c = _nonzero(rng, 15)
            while c == a:
                c = _nonzero(rng, 15)
            d = int(a * x + b - c * x)
            equation = f"{_linear_text(a, b)} = {_linear_text(c, d)}"
    question = f"Solve for x: {equation}. Give the exact value of x."
    return Problem(question, format_number(x), "linear_equation", difficulty)


# ---------------------------------------------------------------------- word problems
_NAMES = ("Ava", "Ben", "Chloe", "Diego", "Emma", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Kemi", "Liam",
          "Maya", "Noah", "Olga", "Priya", "Quinn", "Rosa", "Sam", "Tariq")
_ITEMS = (("notebook", "notebooks"), ("apple", "apples"), ("pencil", "pencils"), ("ticket", "tickets"),
          ("sticker", "stickers"), ("muffin", "muffins"), ("marble", "marbles"), ("card", "cards"))


def _pick(rng: np.random.Generator, options: tuple[Any, ...]) -> Any:
    return options[int(rng.integers(len(options)))]


def _shopping(rng: np.random.Generator, difficulty: Difficulty) -> tuple[str, int]:
    name, (_, items) = _pick(rng, _NAMES), _pick(rng, _ITEMS)
    count, price = _int(rng, 2, 12), _int(rng, 2, 15)
    total = count * price
    if difficulty == "easy":
        return (f"{name} buys {count} {items} at {price} dollars each. "
                f"How many dollars does {name} spend?", total)
    paid = (total // 10 + _int(rng, 1, 5)) * 10
    if difficulty == "medium":
        return (f"{name} buys {count} {items} at {price} dollars each and pays with {paid} dollars. "
                f"How many dollars of change does {name} get?", paid - total)
    extra, extra_price = _int(rng, 2, 6), _int(rng, 3, 9)
    discount = _pick(rng, (10, 20, 25, 50))
    # Keep the discount exact: the second purchase is a multiple of what the discount divides.
    extra_total = extra * extra_price * (100 // _gcd(100, discount))
    spent = total + extra_total - extra_total * discount // 100
    paid = (spent // 10 + _int(rng, 1, 5)) * 10
    return (f"{name} buys {count} {items} at {price} dollars each, and {extra} boxes at "
            f"{extra_price * (100 // _gcd(100, discount))} dollars each with a {discount}% discount "
            f"on the boxes. "
            f"{name} pays with {paid} dollars. How many dollars of change does {name} get?", paid - spent)


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def _hours(count: int) -> str:
    return f"{count} hour" if count == 1 else f"{count} hours"


def _travel(rng: np.random.Generator, difficulty: Difficulty) -> tuple[str, int]:
    name = _pick(rng, _NAMES)
    speed, hours = _int(rng, 3, 90), _int(rng, 2, 9)
    if difficulty == "easy":
        return (f"{name} drives at {speed} km per hour for {hours} hours. "
                f"How many km does {name} drive?", speed * hours)
    second_speed, second_hours = _int(rng, 3, 90), _int(rng, 1, 6)
    distance = speed * hours + second_speed * second_hours
    if difficulty == "medium":
        return (f"{name} drives {_hours(hours)} at {speed} km per hour, then {_hours(second_hours)} at "
                f"{second_speed} km per hour. How many km does {name} drive in total?", distance)
    total_hours = hours + second_hours
    distance = distance + (-distance) % total_hours  # make the average an integer
    last_leg = distance - speed * hours
    return (f"{name} drives {_hours(hours)} at {speed} km per hour and then {last_leg} km more in "
            f"{_hours(second_hours)}. What is {name}'s average speed over the whole trip, in km per hour?",
            distance // total_hours)


def _sharing(rng: np.random.Generator, difficulty: Difficulty) -> tuple[str, int]:
    name, (_, items) = _pick(rng, _NAMES), _pick(rng, _ITEMS)
    friends, each = _int(rng, 2, 9), _int(rng, 2, 15)
    if difficulty == "easy":
        return (f"{name} shares {friends * each} {items} equally among {friends} friends. "
                f"How many {items} does each friend get?", each)
    kept = _int(rng, 1, 20)
    if difficulty == "medium":
        return (f"{name} has {friends * each + kept} {items}, keeps {kept} and shares the rest equally among "
                f"{friends} friends. How many {items} does each friend get?", each)
    given_away_per_day, days = _int(rng, 1, 4), _int(rng, 2, 6)
    start = friends * each + kept + given_away_per_day * days
    return (f"{name} has {start} {items}. For {days} days {name} gives away {given_away_per_day} each day, "
            f"then keeps {kept} and shares the rest equally among {friends} friends. "
            f"How many {items} does each friend get?", each)


def _ages(rng: np.random.Generator, difficulty: Difficulty) -> tuple[str, int]:
    older, younger = _pick(rng, _NAMES[:10]), _pick(rng, _NAMES[10:])
    young_age, gap = _int(rng, 3, 30), _int(rng, 1, 30)
    if difficulty == "easy":
        return (f"{younger} is {young_age} years old and {older} is {gap} years older. "
                f"How old is {older}?", young_age + gap)
    years = _int(rng, 2, 15)
    if difficulty == "medium":
        return (f"{younger} is {young_age} years old and {older} is {gap} years older. "
                f"How old will {older} be in {years} years?", young_age + gap + years)
    factor = _int(rng, 2, 4)
    young_then = _int(rng, 2, 12)
    old_then = factor * young_then
    return (f"{years} years ago, {older} was {factor} times as old as {younger}, who was {young_then} then. "
            f"What is the sum of their ages today?", old_then + young_then + 2 * years)


_WORD_TEMPLATES = (_shopping, _travel, _sharing, _ages)


def word_problem(rng: np.random.Generator, difficulty: Difficulty) -> Problem:
    """A short story with an integer answer: one step (easy), two (medium), three or more (hard)."""
    template = _WORD_TEMPLATES[int(rng.integers(len(_WORD_TEMPLATES)))]
    question, answer = template(rng, difficulty)
    return Problem(question, str(answer), "word_problem", difficulty)


GENERATORS: dict[str, Callable[[np.random.Generator, Difficulty], Problem]] = {
    "arithmetic": arithmetic, "fractions": fractions, "linear_equation": linear_equation,
    "word_problem": word_problem,
}
