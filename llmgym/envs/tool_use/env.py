"""The tool-use environment: call tools over several turns, then answer."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any, ClassVar, Literal

from llmgym.core import Outcome, TextEnv, level_rng, text_digest
from llmgym.envs.math.verify import parse_number
from llmgym.envs.tool_use.sandbox import IsolationLevel, SandboxConfig
from llmgym.envs.tool_use.tasks import TASK_GENERATORS, TASK_KINDS, ToolTask
from llmgym.envs.tool_use.tools import (
    CalculatorTool, PythonTool, SearchTool, Tool, ToolOutput, signature, tool_schema,
)
from llmgym.error import InvalidOptionError, SnapshotNotSupported, did_you_mean
from llmgym.parsing import extract_answer, extract_tool_calls
from llmgym.splits import Split

TaskName = Literal["mixed", "calculator", "python", "search"]
_TASK_NAMES = ("mixed", *TASK_KINDS)
_TOOL_OPEN = re.compile(r"<\s*tool_call\s*>", re.IGNORECASE)
_TOOL_CLOSE = re.compile(r"<\s*/\s*tool_call\s*>", re.IGNORECASE)
_FORMAT = ('Call a tool with <tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>; '
           "give the final answer as <answer>...</answer>.")
_EXAMPLE = '<tool_call>{"name": "calculator", "arguments": {"expression": "12 * 34"}}</tool_call>'


def parse_tool_use(text: str) -> str | None:
    """The action of a completion: its tool-call blocks if it has any, else its ``<answer>``.

    Tool calls win over an answer in the same completion: the agent has not seen their
    results yet. The returned tool-call text runs from the first ``<tool_call>`` to the last
    ``</tool_call>`` (or the end, for an unterminated block, which is reported as an error).
    """
    if not isinstance(text, str):
        return None
    opening = _TOOL_OPEN.search(text)
    if opening is not None:
        closes = list(_TOOL_CLOSE.finditer(text, opening.end()))
        return text[opening.start() : closes[-1].end() if closes else len(text)]
    return extract_answer(text)


def answers_match(reference: str, answer: str) -> bool:
    """Exact numbers compare as numbers (``1,072`` = ``1072``); other answers compare as words, case-blind."""
    reference_number, answer_number = parse_number(reference), parse_number(answer)
    if reference_number is not None:
        return answer_number == reference_number
    return _words(answer) == _words(reference)


def _words(text: str) -> str:
    words = re.findall(r"[a-z0-9]+", text.lower())
    if words and words[0] == "the":
        words = words[1:]
    return " ".join(words)


class ToolUseEnv(TextEnv):
    """Answer a question with the help of tools: ``python`` (sandbox), ``calculator``, ``search``.

    Tasks (``task=``): ``calculator`` (exact arithmetic on big numbers), ``python``
    (computations that need a program), ``search`` (facts from the local corpus of an invented
    world, some needing two searches), or ``mixed`` (each episode draws one of them).

    Action Space:
        Any string. Tool calls in the Hermes/Qwen format
        ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (up to ``max_tool_calls``
        per turn) run, and their results come back in the next observation, one
        ``<tool_response>{"name": ..., "content": ...}</tool_response>`` block per call. A
        completion without tool calls is read for its final ``<answer>...</answer>``.
        Malformed JSON, unknown tools and bad arguments come back as tool errors.

    Observation Space:
        ``Text``: the question first, then tool responses, then the verdict.
        ``info["tools"]`` at reset holds the tools' OpenAI function schemas, ready for
        ``tokenizer.apply_chat_template(messages, tools=info["tools"])``.
        After a tool turn ``info`` counts the ``tool_calls`` and ``tool_errors`` and names the
        tools that ran without error, in call order (``tools_run``).
        ``info["sandbox_isolation"]`` (at reset and after tool calls) is the python tool's
        isolation level: ``"full"`` or ``"none"``.

    Rewards:
        1 for a correct final answer, 0 for a wrong one or a tool turn; ``invalid_penalty``
        (default -0.1) for a completion with neither a tool call nor an answer.

    Episode End:
        ``terminated`` after the final answer (right or wrong); ``truncated`` after
        ``max_turns`` turns without one.

    Arguments:
        task: ``"mixed"``, ``"calculator"``, ``"python"`` or ``"search"``.
        max_turns: turns before truncation (tool turns and the answer turn alike); None: no limit.
        max_tool_calls: tool calls run per turn; further calls get an error response.
        invalid_penalty: reward of a completion with neither tool call nor answer.
        sandbox_config: limits of the python tool's sandbox.
        isolation: ``"full"`` (default: a bubblewrap sandbox per call; the env refuses to be built,
            raising :class:`~llmgym.error.SandboxUnavailable` with the fix, where it does not
            hold) or ``"none"`` (code runs unisolated, with a warning: trusted code only).
            ``None`` takes ``sandbox_config``'s.
        render_mode: ``None`` or ``"ansi"``.

    Snapshots:
        ``get_state()`` holds the task, the turns used and ``np_random``: the tools keep no
        state between calls (the python sandbox starts every call fresh), so restoring and
        replaying the same completions gives the same results, as far as the model's code is
        deterministic. With ``isolation="none"`` (code could leave files on the host for a later
        call) ``get_state`` raises :class:`~llmgym.error.SnapshotNotSupported`. ``state_key()`` (also
        ``info["state_key"]``) is the turn number and a digest of the task.

    Version History:
        * v0: initial version. Since 2026-11-29 the system prompt lists each tool with its
          arguments and shows one call (levels and rewards are unchanged; before, a model whose
          chat template drops ``tools=`` never read the argument names).
    """

    format_hint: ClassVar[str] = _FORMAT
    level_options: ClassVar[tuple[str, ...]] = ("task",)

    def __init__(
        self,
        *,
        task: TaskName = "mixed",
        max_turns: int | None = 8,
        max_tool_calls: int = 4,
        invalid_penalty: float = -0.1,
        sandbox_config: SandboxConfig | None = None,
        isolation: IsolationLevel | None = None,
        render_mode: str | None = None,
        split: Split = "train",
        held_out_levels: int | None = None,
    ) -> None:
        if task not in _TASK_NAMES:
            raise InvalidOptionError(f"task must be one of {', '.join(_TASK_NAMES)}, got {task!r}."
                                     f"{did_you_mean(str(task), _TASK_NAMES)}")
        if max_tool_calls < 1:
            raise InvalidOptionError(f"max_tool_calls must be >= 1, got {max_tool_calls}.")
        super().__init__(render_mode=render_mode, invalid_penalty=invalid_penalty, max_turns=max_turns,
                         action_parser=parse_tool_use, split=split, held_out_levels=held_out_levels)
        self.task = task
        self.max_tool_calls = max_tool_calls
        self.python = PythonTool(config=_sandbox_config(sandbox_config, isolation))
        tools = (self.python, CalculatorTool(), SearchTool())
        self.tools: dict[str, Tool] = {tool.name: tool for tool in tools}
        self._task = ToolTask("custom", "", "")

    @property
    def system_prompt(self) -> str:
        """The tools, each with its arguments, then the call and answer formats.

        The tools are listed in the prompt itself, since most chat templates drop the
        ``tools=`` schemas (SmolLM2's does): a model that never reads a tool's argument names
        can only guess them.
        """
        listing = "\n".join(f"- {tool.name} {signature(tool.parameters)}: {tool.description}"
                             for tool in self.tools.values())
        return (f"You are a helpful assistant with tools. Use them: do not guess facts or compute large "
                f"numbers by hand.\n{listing}\n{_FORMAT} For example: {_EXAMPLE}. Call tools in one turn "
                f"and read their <tool_response> in the next; answer only once you are sure.")

    def close(self) -> None:
        self.python.close()
        super().close()

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The OpenAI function schemas of the tools (also ``info["tools"]`` at reset)."""
        return [tool_schema(tool) for tool in self.tools.values()]

    def level(self) -> dict[str, Any]:
        return self._task.as_level()

    def solution(self) -> list[str]:
        """A plan of parsed actions that solves the task: tool-call blocks, then the answer.

        Each element plays as a completion when wrapped in ``<answer>...</answer>`` (tool-call
        blocks run whether wrapped or not, since tool calls win over an answer). ``[answer]``
        alone for a custom level without a plan.
        """
        return list(self._task.plan) or [self._task.answer]

    # ------------------------------------------------------------------ TextEnv hooks
    def _reset_task(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        info: dict[str, Any]
        if "level" in options:
            self._task, info = ToolTask.from_level(options["level"]), {"level_id": "custom"}
        else:
            seed = self._draw_level_seed()
            rng = level_rng(seed)
            kind = self.task if self.task != "mixed" else TASK_KINDS[int(rng.integers(len(TASK_KINDS)))]
            self._task, info = TASK_GENERATORS[kind](rng), {"seed": seed}
        info.update(tools=self.tool_schemas(), task=self._task.kind, optimal_steps=len(self.solution()),
                    sandbox_isolation=self.python.sandbox.isolation().level)
        return self._observe(), info

    def _apply(self, action: str) -> Outcome:
        if _TOOL_OPEN.search(action) is not None:
            return self._run_tools(action)
        if answers_match(self._task.answer, action):
            return Outcome("Your answer is correct.", reward=1.0, terminated=True, success=True)
        return Outcome("Your answer is wrong.", reward=0.0, terminated=True)

    def _observe(self) -> str:
        return f"{self._task.question}\n\n{_FORMAT}"

    # ------------------------------------------------------------------ snapshots
    def _task_state(self) -> ToolTask:
        python = self.tools["python"]
        assert isinstance(python, PythonTool)
        if python.sandbox.isolation().level != "full":
            raise SnapshotNotSupported(
                "ToolUseEnv cannot snapshot with isolation='none': its python code runs on the host and can "
                "leave files there that a later call reads, state no snapshot holds. Use isolation='full' "
                "(the default), or replay episodes from their reset seed."
            )
        return self._task  # frozen

    def _restore_task(self, task: ToolTask) -> None:
        self._task = task

    def _state_key(self) -> str:
        # The env keeps no tool results: its state is the task and the turns left.
        return f"turn {self._turn + 1}: {text_digest(self._task.question + chr(0) + self._task.answer)}"

    # ------------------------------------------------------------------ tools
    def _run_tools(self, action: str) -> Outcome:
        calls = extract_tool_calls(action, max_calls=self.max_tool_calls + 1)
        responses, errors, ran = [], 0, []
        for position, call in enumerate(calls):
            if position >= self.max_tool_calls:
                output = ToolOutput(f"only {self.max_tool_calls} tool calls run per turn; call it again",
                                    error=True)
            else:
                output = self._call(call.name, call.arguments, call.error)
            errors += output.error
            if not output.error:
                ran.append(call.name)
            responses.append(_response(call.name, output))
        info = {"tool_calls": len(calls), "tool_errors": errors, "tools_run": tuple(ran),
                "sandbox_isolation": self.python.sandbox.isolation().level}
        return Outcome("\n".join(responses), reward=0.0, info=info)

    def _call(self, name: str, arguments: dict[str, Any], parse_error: str | None) -> ToolOutput:
        if parse_error is not None:
            return ToolOutput(f"Error: {parse_error}", error=True)
        tool = self.tools.get(name)
        if tool is None:
            return ToolOutput(f"Error: unknown tool {name!r}.{did_you_mean(name, self.tools)} "
                              f"Available tools: {', '.join(self.tools)}.", error=True)
        output = tool.run(arguments)
        return ToolOutput(f"Error: {output.content}", error=True) if output.error else output


def _sandbox_config(config: SandboxConfig | None, isolation: str | None) -> SandboxConfig:
    """The python tool's config: ``config`` (default: 4 KiB of output) with ``isolation`` if given."""
    if config is not None and isolation is not None and config.isolation != isolation:
        raise InvalidOptionError(f"isolation={isolation!r} contradicts sandbox_config.isolation="
                                 f"{config.isolation!r}; give one of them.")
    config = config or SandboxConfig(max_output_bytes=4096)
    return config if isolation is None else replace(config, isolation=isolation)


def _response(name: str, output: ToolOutput) -> str:
    payload = json.dumps({"name": name or None, "content": output.content}, ensure_ascii=True)
    return f"<tool_response>\n{payload}\n</tool_response>"
