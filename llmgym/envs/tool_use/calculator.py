"""Exact arithmetic on untrusted expressions, by walking a whitelisted Python AST (no ``eval``).

Numbers are integers and :class:`fractions.Fraction`, so ``123456789 * 987654321`` and
``1/3 + 1/6`` are exact. Every operation is bounded before it runs: an exponent or a shift
larger than the limits, or a result with more than ``max_digits`` digits, is an error, so no
expression can make the calculator hang or eat memory.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from fractions import Fraction

Number = int | Fraction


class CalculatorError(ValueError):
    """The expression is not allowed or cannot be evaluated; the message is for the agent."""


_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: Fraction(a) / Fraction(b),
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
}


def _sqrt(value: Number) -> Number:
    """Exact square root of a perfect square (integer or fraction of squares)."""
    value = Fraction(value)
    if value < 0:
        raise CalculatorError("sqrt of a negative number")
    numerator, denominator = math.isqrt(value.numerator), math.isqrt(value.denominator)
    if numerator * numerator != value.numerator or denominator * denominator != value.denominator:
        raise CalculatorError("sqrt is exact only for perfect squares; this calculator has no floats")
    return Fraction(numerator, denominator)


_FUNCTIONS: dict[str, Callable[..., Number]] = {
    "abs": lambda value: abs(value),
    "min": min,
    "max": max,
    "gcd": lambda a, b: math.gcd(_integer(a), _integer(b)),
    "sqrt": _sqrt,
}


def _integer(value: Number) -> int:
    if isinstance(value, Fraction):
        if value.denominator != 1:
            raise CalculatorError(f"expected an integer, got {format_number(value)}")
        return value.numerator
    return value


def format_number(value: Number) -> str:
    """``12``, ``-3/4``: integers as integers, other fractions as ``p/q``."""
    value = Fraction(value)
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


class Calculator:
    """Evaluate arithmetic expressions exactly (see the module docstring).

    Allowed: integers, decimals (read exactly), ``+ - * / // % **``, parentheses, and
    ``abs min max gcd sqrt``.
    """

    def __init__(self, max_chars: int = 2000, max_digits: int = 2000, max_exponent: int = 10_000) -> None:
        self.max_chars = max_chars
        self.max_digits = max_digits
        self.max_exponent = max_exponent

    def evaluate(self, expression: str) -> str:
        """The exact value of ``expression`` as text; raises :class:`CalculatorError` on any problem."""
        if not isinstance(expression, str):
            raise CalculatorError(f"expression must be a string, got {type(expression).__name__}")
        if len(expression) > self.max_chars:
            raise CalculatorError(f"expression longer than {self.max_chars} characters")
        text = expression.replace("^", "**").replace("\u00d7", "*")
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            raise CalculatorError(f"cannot parse {expression[:80]!r}: {type(exc).__name__}") from None
        try:
            return format_number(self._eval(tree.body))
        except CalculatorError:
            raise
        except ZeroDivisionError:
            raise CalculatorError("division by zero") from None
        except RecursionError:
            raise CalculatorError("expression nested too deeply") from None
        except (ValueError, OverflowError, MemoryError) as exc:  # e.g. 1e999 is not a finite number
            raise CalculatorError(f"cannot evaluate: {type(exc).__name__}: {str(exc)[:80]}") from None

    def _eval(self, node: ast.AST) -> Number:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):  # not bool
            return Fraction(repr(node.value)) if isinstance(node.value, float) else node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = self._eval(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp):
            return self._binary(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS:
            if node.keywords or not node.args:
                raise CalculatorError(f"{node.func.id}() takes positional arguments only")
            try:
                return self._checked(_FUNCTIONS[node.func.id](*(self._eval(arg) for arg in node.args)))
            except TypeError as exc:
                raise CalculatorError(f"{node.func.id}(): {exc}") from None
        allowed = "numbers, + - * / // % ** (or ^), parentheses, " + " ".join(sorted(_FUNCTIONS))
        raise CalculatorError(f"{type(node).__name__} is not allowed; use only {allowed}")

    def _binary(self, node: ast.BinOp) -> Number:
        left, right = self._eval(node.left), self._eval(node.right)
        if isinstance(node.op, ast.Pow):
            return self._power(left, right)
        operation = _BINARY.get(type(node.op))
        if operation is None:
            raise CalculatorError(f"operator {type(node.op).__name__} is not allowed")
        return self._checked(operation(left, right))

    def _power(self, base: Number, exponent: Number) -> Number:
        exponent = _integer(exponent)
        if abs(exponent) > self.max_exponent:
            raise CalculatorError(f"exponent {exponent} is larger than {self.max_exponent}")
        size = max(abs(Fraction(base).numerator), Fraction(base).denominator, 2)
        if abs(exponent) * math.log10(size) > self.max_digits:
            raise CalculatorError(f"the result would have more than {self.max_digits} digits")
        if exponent < 0:
            return Fraction(1) / Fraction(base) ** -exponent
        return base**exponent

    def _checked(self, value: Number) -> Number:
        fraction = Fraction(value)
        bits = max(fraction.numerator.bit_length(), fraction.denominator.bit_length())
        if bits * 0.30103 > self.max_digits:
            raise CalculatorError(f"the result has more than {self.max_digits} digits")
        return fraction.numerator if fraction.denominator == 1 else fraction
