"""The tools a tool-use env offers: ``python``, ``calculator``, ``search``.

A tool has a name, a description and a JSON schema for its arguments; :func:`tool_schema`
gives the OpenAI function dict that ``tokenizer.apply_chat_template(..., tools=[...])``
takes. :meth:`Tool.run` never raises: bad arguments, failures and limits all come back as a
:class:`ToolOutput` with ``error=True`` and a message the agent can read. ``arun`` is the
same call for asyncio code; the python tool's wait on its subprocess releases the GIL, so a
thread-pool vector env overlaps calls.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, ClassVar

from llmgym.envs.tool_use.calculator import Calculator, CalculatorError
from llmgym.envs.tool_use.sandbox import Isolation, PythonSandbox, SandboxConfig
from llmgym.envs.tool_use.search import BM25Index, default_index

_JSON_TYPES = {"string": str, "integer": int}


@dataclass(frozen=True)
class ToolOutput:
    """What a tool call returns to the agent."""

    content: str
    error: bool = False


class Tool:
    """Base of the tools: argument checking against ``parameters``, and ``arun``.

    Subclasses set ``name``, ``description``, ``parameters`` (a JSON schema object with
    ``properties`` of type string or integer, and ``required``) and implement :meth:`_call`.
    """

    name: ClassVar[str]
    description: str
    parameters: ClassVar[dict[str, Any]]

    def run(self, arguments: dict[str, Any]) -> ToolOutput:
        """Check ``arguments`` and call the tool; every failure becomes an error output."""
        problem = check_arguments(self.parameters, arguments)
        if problem is not None:
            return ToolOutput(f"bad arguments for {self.name}: {problem}", error=True)
        try:
            return self._call(arguments)
        except Exception as exc:  # noqa: BLE001 - a tool must never crash the env
            return ToolOutput(f"{self.name} failed: {type(exc).__name__}: {str(exc)[:200]}", error=True)

    async def arun(self, arguments: dict[str, Any]) -> ToolOutput:
        """:meth:`run` without blocking the event loop."""
        return await asyncio.to_thread(self.run, arguments)

    def _call(self, arguments: dict[str, Any]) -> ToolOutput:
        raise NotImplementedError


def check_arguments(schema: dict[str, Any], arguments: Any) -> str | None:
    """What is wrong with ``arguments`` for ``schema`` (missing, unknown, wrong type), or ``None``."""
    if not isinstance(arguments, dict):
        return f"arguments must be a JSON object, got {type(arguments).__name__}"
    properties = schema["properties"]
    missing = [key for key in schema.get("required", []) if key not in arguments]
    if missing:
        return f"missing {', '.join(missing)}; expected {signature(schema)}"
    unknown = [key for key in arguments if key not in properties]
    if unknown:
        return f"unknown argument(s) {', '.join(unknown)}; expected {signature(schema)}"
    for key, value in arguments.items():
        expected = _JSON_TYPES[properties[key]["type"]]
        if not isinstance(value, expected) or isinstance(value, bool):
            return f"{key} must be a {properties[key]['type']}, got {type(value).__name__}"
    return None


def signature(schema: dict[str, Any]) -> str:
    """The arguments of a JSON schema object as a model reads them: ``{"code": string}``."""
    return "{" + ", ".join(f'"{key}": {spec["type"]}' for key, spec in schema["properties"].items()) + "}"


def tool_schema(tool: Tool) -> dict[str, Any]:
    """The OpenAI function schema of ``tool``, as chat templates take it (``tools=[...]``)."""
    return {"type": "function", "function": {"name": tool.name, "description": tool.description,
                                             "parameters": tool.parameters}}


class PythonTool(Tool):
    """Run Python code in the sandbox; returns what it prints.

    Building the tool builds its sandbox, which checks that isolation holds here and raises
    :class:`~llmgym.error.SandboxUnavailable` where it does not (unless the config says
    ``isolation="none"``). The description the model reads claims only what holds.
    """

    name = "python"
    parameters = {"type": "object",
                  "properties": {"code": {"type": "string", "description": "The Python code."}},
                  "required": ["code"]}

    def __init__(self, sandbox: PythonSandbox | None = None, config: SandboxConfig | None = None) -> None:
        self.sandbox = sandbox if sandbox is not None else PythonSandbox(config)
        self.description = python_description(self.sandbox.isolation())

    def close(self) -> None:
        """End the sandbox's spare processes."""
        self.sandbox.close()

    def _call(self, arguments: dict[str, Any]) -> ToolOutput:
        result = self.sandbox.run(arguments["code"])
        content = result.stdout
        if result.stderr:
            content += ("\n" if content and not content.endswith("\n") else "") + result.stderr
        if result.error is not None:
            content += ("\n" if content and not content.endswith("\n") else "") + f"[{result.error}]"
        return ToolOutput(content or "(no output; use print() to see values)", error=not result.ok)


def python_description(isolation: Isolation) -> str:
    """What the model is told about the python tool: isolation claims only where they hold."""
    where = ("in a fresh sandbox with no network and no files from before" if isolation.level == "full"
             else "in a fresh process")
    return (f"Run Python 3 code (standard library only) {where}, and return what it prints (stdout, then "
            "stderr). Use print() to see results. CPU time, memory and output are limited.")


class CalculatorTool(Tool):
    """Exact arithmetic on an expression (integers and fractions)."""

    name = "calculator"
    description = ("Evaluate an arithmetic expression exactly, with integers and fractions of any size. "
                   "Supports + - * / // % ** (or ^), parentheses, abs, min, max, gcd, sqrt (of perfect "
                   "squares). "
                   "Example: 123456789 * 987654321 - 1/3.")
    parameters = {"type": "object",
                  "properties": {"expression": {"type": "string",
                                                "description": "The expression to evaluate."}},
                  "required": ["expression"]}

    def __init__(self, calculator: Calculator | None = None) -> None:
        self.calculator = calculator or Calculator()

    def _call(self, arguments: dict[str, Any]) -> ToolOutput:
        try:
            return ToolOutput(self.calculator.evaluate(arguments["expression"]))
        except CalculatorError as exc:
            return ToolOutput(f"calculator error: {exc}", error=True)


class SearchTool(Tool):
    """BM25 search over the local encyclopedia."""

    name = "search"
    description = ("Search a local encyclopedia of an invented world (countries, cities, rivers, "
                   "mountains, people, universities, festivals) and return the best matching passages with "
                   "their titles.")
    parameters = {"type": "object",
                  "properties": {"query": {"type": "string", "description": "Words to search for."}},
                  "required": ["query"]}

    def __init__(self, index: BM25Index | None = None, results: int = 3) -> None:
        self.index = index or default_index()
        self.results = results

    def _call(self, arguments: dict[str, Any]) -> ToolOutput:
        documents = self.index.search(arguments["query"][:1000], self.results)
        if not documents:
            return ToolOutput("No passage matches the query; try other words.")
        return ToolOutput("\n\n".join(f"[{doc.title}] {doc.text}" for doc in documents))
