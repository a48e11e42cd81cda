"""Constrained decoding: replies that can only take a shape the env reads (``rollout.constrain``).

``tool_calls``: every turn is either one call of a tool the env offers, written as the env's
system prompt asks (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, its
arguments those of the tool's JSON schema, in the schema's order), or a final answer
(``<answer>...</answer>``). Which of the two, which tool, and the argument values stay the
model's choice; only the syntax is fixed. The agent's last turn (``rollout.max_turns``) is an
answer: a call there could never be read, and the episode would end unanswered (as agent
loops that force a final answer when their step budget runs out).

A small model that never writes a call the env can run (``benchmarks/tool_call_probe.py``: the
base SmolLM2-135M runs the calculator in 0 of 768 sampled first turns) then gets episodes whose
reward depends on what it chose to compute.

The constraint is a regular expression the generator enforces token by token (vLLM's
structured outputs). The trainer scores the sampled tokens under the model's own distribution,
as it does for free generation; the evaluation plays under the same constraint, so the base
model's figure and the trained one's are measured alike.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Literal

from llmgym.error import InvalidOptionError

Constrain = Literal["none", "tool_calls"]

#: A JSON string without control characters; the escapes a program's text needs are allowed.
JSON_STRING = r'"([^"\\\x00-\x1f]|\\["\\/nt])*"'
#: Values of the JSON-schema types a tool argument may have.
JSON_VALUES = {
    "string": JSON_STRING,
    "integer": r"-?(0|[1-9][0-9]{0,17})",
    "number": r"-?(0|[1-9][0-9]{0,17})(\.[0-9]{1,12})?",
    "boolean": r"(true|false)",
}
#: A final answer: one line of text between the tags.
ANSWER = r"<answer>[^<\n]{1,200}</answer>"


def tool_call_regex(tools: Sequence[dict[str, Any]]) -> str:
    """The replies ``rollout.constrain=tool_calls`` allows: a call of one of ``tools`` or an answer.

    Args:
        tools: OpenAI function schemas, as a tool env's reset ``info["tools"]`` lists them
            (``{"type": "function", "function": {"name", "description", "parameters"}}``).
    """
    if not tools:
        raise InvalidOptionError(
            "rollout.constrain=tool_calls needs an env that lists its tools in the reset info "
            "(info['tools']), as llmgym's ToolUse envs do; this env lists none. Set rollout.constrain=none."
        )
    calls = [_call(tool.get("function", tool)) for tool in tools]
    return "(" + "|".join([*calls, ANSWER]) + ")"


def _call(function: dict[str, Any]) -> str:
    """``<tool_call>{"name": NAME, "arguments": {...}}</tool_call>`` with the schema's required arguments."""
    name = function["name"]
    parameters = function.get("parameters", {})
    properties = parameters.get("properties", {})
    required = parameters.get("required", list(properties))
    fields = []
    for argument in required:
        kind = properties.get(argument, {}).get("type", "string")
        if kind not in JSON_VALUES:
            raise InvalidOptionError(
                f"rollout.constrain=tool_calls writes arguments of the types {sorted(JSON_VALUES)}; the tool "
                f"{name!r} takes {argument!r} of type {kind!r}. Set rollout.constrain=none for this env."
            )
        fields.append(literal(json.dumps(argument) + ": ") + JSON_VALUES[kind])
    arguments = r"\{" + ", ".join(fields) + r"\}"
    head = literal(f'<tool_call>{{"name": {json.dumps(name)}, "arguments": ')
    return head + arguments + literal("}</tool_call>")


def literal(text: str) -> str:
    """``text`` as a regex that matches it alone: regex operators escaped, nothing else (grammar engines read
    fewer escapes than Python's ``re.escape`` writes)."""
    return re.sub(r"([\\.^$|?*+()\[\]{}])", r"\\\1", text)


def reply_regex(constrain: Constrain, info: dict[str, Any], last_turn: bool = False) -> str | None:
    """The regex a reply must match on the agent's last turn or another (``None``: free generation)."""
    if constrain == "none":
        return None
    tools = info.get("tools") or ()
    return ANSWER if last_turn and tools else tool_call_regex(tools)  # an env without tools fails on any turn
