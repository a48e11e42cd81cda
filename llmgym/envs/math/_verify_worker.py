"""The answer-checking worker process: JSON lines in, JSON lines out.

Run as a script (``python _verify_worker.py BACKEND``) by :mod:`llmgym.envs.math.verify`;
it imports nothing from llmgym. It runs math-verify (or the sympy fallback) in its own main
thread, where math-verify's signal-based timeouts work, and the parent kills it when a
request outlives the parent's hard timeout. Its address space is capped so that an answer
that makes sympy build a huge number fails here with ``MemoryError`` instead of swapping.

Protocol: first line out ``{"ready": true, "backend": ...}``; then per request line
``{"gold": str, "answer": str, "timeout": int}`` one line ``{"correct": bool, "error": str|null}``.
"""

import ast
import json
import re
import resource
import sys

_MEMORY_BYTES = 2 * 2**30
#: Largest exponent the sympy fallback evaluates; ``9^{9^{9}}`` is refused, not computed.
_MAX_EXPONENT = 10_000


def _math_verify_backend():  # noqa: ANN202 - returns a checker function
    from math_verify import parse, verify

    def check(gold: str, answer: str, timeout: int) -> bool:
        gold_parsed = parse(_boxed(gold), parsing_timeout=timeout)
        answer_parsed = parse(_boxed(answer), parsing_timeout=timeout)
        if not gold_parsed or not answer_parsed:
            return False
        return bool(verify(gold_parsed, answer_parsed, timeout_seconds=timeout))

    return check


def _boxed(text: str) -> str:
    """Wrap a bare answer in ``$\\boxed{}$`` so math-verify reads it as the final answer."""
    return text if "\\boxed" in text else f"$\\boxed{{{text}}}$"


# ---------------------------------------------------------------------- sympy fallback
_LATEX_REWRITES = (
    (re.compile(r"\\left|\\right|\\!|\\,|\\;|\\ |\$"), ""),
    (re.compile(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}"), r"((\1)/(\2))"),
    (re.compile(r"\\sqrt\{([^{}]*)\}"), r"sqrt(\1)"),
    (re.compile(r"\\cdot|\\times"), "*"),
    (re.compile(r"\\pi"), "pi"),
    (re.compile(r"\^"), "**"),
)


def _latex_to_python(text: str) -> str:
    text = text.strip()
    boxed = text.rfind("\\boxed{")
    if boxed != -1:
        text = text[boxed + len("\\boxed{"): text.rfind("}")]
    if "=" in text:  # "x = 5": the value is what follows the last "="
        text = text.rsplit("=", 1)[1]
    for _ in range(20):  # innermost \frac first, until nothing changes
        rewritten = text
        for pattern, replacement in _LATEX_REWRITES:
            rewritten = pattern.sub(replacement, rewritten)
        if rewritten == text:
            break
        text = rewritten
    return text.replace("{", "(").replace("}", ")")


def _sympy_backend():  # noqa: ANN202 - returns a checker function
    import sympy

    binary = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
              ast.Div: lambda a, b: a / b}
    names = {"pi": sympy.pi, "e": sympy.E, "sqrt": sympy.sqrt}

    def build(node: ast.AST):  # noqa: ANN202 - a sympy expression
        """A sympy expression from a whitelisted Python AST: numbers, + - * / **, sqrt, pi."""
        if isinstance(node, ast.Expression):
            return build(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            if isinstance(node.value, float):
                return sympy.Rational(repr(node.value))
            return sympy.Integer(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = build(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and type(node.op) in binary:
            return binary[type(node.op)](build(node.left), build(node.right))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            base, exponent = build(node.left), build(node.right)
            if not exponent.is_number or abs(exponent) > _MAX_EXPONENT:
                raise ValueError("exponent too large")
            return base**exponent
        if isinstance(node, ast.Name) and node.id in names:
            return names[node.id]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "sqrt" \
                and len(node.args) == 1 and not node.keywords:
            return sympy.sqrt(build(node.args[0]))
        raise ValueError(f"unsupported syntax: {type(node).__name__}")

    def check(gold: str, answer: str, timeout: int) -> bool:
        del timeout  # the parent's hard timeout bounds this backend
        gold_value = build(ast.parse(_latex_to_python(gold), mode="eval"))
        answer_value = build(ast.parse(_latex_to_python(answer), mode="eval"))
        return bool(sympy.simplify(gold_value - answer_value) == 0)

    return check


def _load(backend: str):  # noqa: ANN202 - (name, checker)
    if backend in ("auto", "math_verify"):
        try:
            return "math_verify", _math_verify_backend()
        except ImportError:
            if backend == "math_verify":
                raise
    return "sympy", _sympy_backend()


def main() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (_MEMORY_BYTES, _MEMORY_BYTES))
    name, check = _load(sys.argv[1] if len(sys.argv) > 1 else "auto")
    check("2^3", "\\frac{16}{2}", 5)  # pay the parser's lazy start-up before saying ready
    print(json.dumps({"ready": True, "backend": name}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            reply = {"correct": check(request["gold"], request["answer"], request["timeout"]), "error": None}
        except BaseException as exc:  # noqa: BLE001 - any failure to check is a wrong answer
            if isinstance(exc, KeyboardInterrupt):
                raise
            reply = {"correct": False, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
