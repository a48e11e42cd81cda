"""Tool-use environments: python (a real sandbox), calculator and search tools.

* ``llmgym/ToolUse-v0``: each episode draws a calculator, python or search task.
* ``llmgym/ToolUse-Calculator-v0``, ``-Python-v0``, ``-Search-v0``: one kind of task.

See :class:`ToolUseEnv` for the protocol and :mod:`llmgym.envs.tool_use.sandbox` for what
the python sandbox isolates.
"""

from llmgym.envs.tool_use.calculator import Calculator, CalculatorError
from llmgym.envs.tool_use.env import ToolUseEnv, answers_match, parse_tool_use
from llmgym.envs.tool_use.sandbox import Isolation, PythonSandbox, SandboxConfig, SandboxResult
from llmgym.envs.tool_use.search import BM25Index, Document, default_index, load_corpus
from llmgym.envs.tool_use.tasks import TASK_KINDS, ToolTask
from llmgym.envs.tool_use.tools import (
    CalculatorTool,
    PythonTool,
    SearchTool,
    Tool,
    ToolOutput,
    python_description,
    tool_schema,
)

__all__ = [
    "TASK_KINDS", "BM25Index", "Calculator", "CalculatorError", "CalculatorTool", "Document", "Isolation",
    "PythonSandbox", "PythonTool", "SandboxConfig", "SandboxResult", "SearchTool", "Tool", "ToolOutput",
    "ToolTask", "ToolUseEnv", "answers_match", "default_index", "load_corpus", "parse_tool_use",
    "python_description", "tool_schema",
]
