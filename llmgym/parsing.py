"""Pure extractors that turn a raw model completion into an action string.

Every function here is total: any string (empty, huge, unicode, broken tags) gives a result
or ``None``, never an exception, and runs in time linear in the input.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

ActionParser = Callable[[str], "str | None"]

_ANSWER_OPEN = re.compile(r"<\s*answer\s*>", re.IGNORECASE)
_ANSWER_CLOSE = re.compile(r"<\s*/\s*answer\s*>", re.IGNORECASE)
_TOOL_OPEN = re.compile(r"<\s*tool_call\s*>", re.IGNORECASE)
_TOOL_CLOSE = re.compile(r"<\s*/\s*tool_call\s*>", re.IGNORECASE)


def _last_match(pattern: re.Pattern[str], text: str, end: int | None = None) -> re.Match[str] | None:
    last = None
    for last in pattern.finditer(text, 0, len(text) if end is None else end):  # noqa: B007
        pass
    return last


def extract_tagged(text: str, open_tag: re.Pattern[str], close_tag: re.Pattern[str]) -> str | None:
    """Content of the last ``open ... close`` pair in ``text``, stripped; ``None`` if absent or empty."""
    if not isinstance(text, str):
        return None
    close = _last_match(close_tag, text)
    if close is None:
        return None
    opening = _last_match(open_tag, text, close.start())
    if opening is None:
        return None
    content = text[opening.end() : close.start()].strip()
    return content or None


def extract_answer(text: str) -> str | None:
    """The last ``<answer>...</answer>`` in ``text`` (tags case-insensitive, spaces allowed).

    >>> extract_answer("I think <answer>Up</answer> no, < ANSWER > left </answer >")
    'left'
    """
    return extract_tagged(text, _ANSWER_OPEN, _ANSWER_CLOSE)


def extract_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` in ``text``, braces balanced.

    >>> extract_boxed(r"so \\boxed{\\frac{1}{2}}.")
    '\\\\frac{1}{2}'
    """
    if not isinstance(text, str):
        return None
    start = text.rfind("\\boxed")
    while start != -1:
        brace = start + len("\\boxed")
        while brace < len(text) and text[brace] == " ":
            brace += 1
        if brace < len(text) and text[brace] == "{":
            depth = 0
            for position in range(brace, len(text)):
                char = text[position]
                if char == "{":
                    depth += 1
                elif char == "}":
                    depth -= 1
                    if depth == 0:
                        content = text[brace + 1 : position].strip()
                        return content or None
            return None  # unbalanced: the completion was cut off
        start = text.rfind("\\boxed", 0, start)
    return None


def extract_answer_or_boxed(text: str) -> str | None:
    """``<answer>`` content if present, else ``\\boxed{}`` content (math envs accept both)."""
    answer = extract_answer(text)
    if answer is None:
        return extract_boxed(text)
    boxed = extract_boxed(answer)
    return boxed if boxed is not None else answer


def lenient_parser(action_names: tuple[str, ...] | list[str]) -> ActionParser:
    """A parser that takes ``<answer>...</answer>`` when present, else the last action name said.

    Small base models often name a move without the tags ("I will go Down."); this parser
    lets such a model earn reward from its first step, so RL has a signal to start from.
    The strict default stays :func:`extract_answer`.
    """
    pattern = re.compile(r"\b(" + "|".join(re.escape(name) for name in action_names) + r")\b", re.IGNORECASE)

    def parse(text: str) -> str | None:
        answer = extract_answer(text)
        if answer is not None or not isinstance(text, str):
            return answer
        last = _last_match(pattern, text)
        return None if last is None else last.group(1)

    return parse


#: Parsers that can be chosen by name (from a YAML config or the command line).
NAMED_PARSERS = ("answer", "boxed", "answer_or_boxed", "lenient")


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` block.

    ``error`` is set (and ``name``/``arguments`` may be empty) when the block is not valid
    JSON of that shape; the env reports it back to the agent as a tool error.
    """

    name: str
    arguments: dict[str, Any]
    error: str | None = None


def extract_tool_calls(text: str, max_calls: int = 8) -> list[ToolCall]:
    """Every ``<tool_call>`` block in ``text``, in order, at most ``max_calls``."""
    if not isinstance(text, str):
        return []
    calls: list[ToolCall] = []
    position = 0
    while len(calls) < max_calls:
        opening = _TOOL_OPEN.search(text, position)
        if opening is None:
            break
        close = _TOOL_CLOSE.search(text, opening.end())
        if close is None:
            calls.append(ToolCall("", {}, "unterminated <tool_call>: close it with </tool_call>"))
            break
        calls.append(_parse_tool_call(text[opening.end() : close.start()]))
        position = close.end()
    return calls


def _parse_tool_call(body: str) -> ToolCall:
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError) as exc:
        return ToolCall("", {}, f"tool call is not valid JSON ({str(exc)[:120]})")
    if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
        return ToolCall("", {}, 'tool call must be a JSON object {"name": str, "arguments": object}')
    arguments = payload.get("arguments", {})
    if isinstance(arguments, str):  # some models emit the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            pass
    if not isinstance(arguments, dict):
        return ToolCall(payload["name"], {}, '"arguments" must be a JSON object')
    return ToolCall(payload["name"], arguments)
