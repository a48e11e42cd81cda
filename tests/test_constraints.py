"""Constrained replies (``rollout.constrain=tool_calls``): the regex the generator enforces; its checks."""

from __future__ import annotations

import json
import re
from typing import Any

import gymnasium as gym
import pytest

import llmgym  # noqa: F401  (registers the ids)
from llmgym.error import InvalidOptionError
from llmgym_train.config import load_config
from llmgym_train.constraints import reply_regex, tool_call_regex
from llmgym_train.eval.policy import PlaySettings
from llmgym_train.generation.base import SamplingSpec
from llmgym_train.generation.hf_backend import HfGenerator


def canonical_call(solution_step: str) -> str:
    """A gold tool call of ``solution()`` in the one spelling the constraint allows (no newlines)."""
    call = json.loads(solution_step.split("<tool_call>")[1].split("</tool_call>")[0])
    return f"<tool_call>{json.dumps(call)}</tool_call>"


@pytest.mark.parametrize("seed", range(6))
def test_the_gold_call_and_answer_match_and_the_env_runs_them(seed: int) -> None:
    env = gym.make("llmgym/ToolUse-Calculator-v0")
    _, info = env.reset(seed=seed)
    regex = tool_call_regex(info["tools"])
    call, answer = env.unwrapped.solution()
    written = canonical_call(call)
    assert re.fullmatch(regex, written)
    observation, _, terminated, _, step_info = env.step(written)
    assert not terminated and step_info["tools_run"] == ("calculator",) and "<tool_response>" in observation
    final = f"<answer>{answer}</answer>"
    assert re.fullmatch(regex, final)
    _, reward, terminated, _, step_info = env.step(final)
    assert terminated and step_info["success"] and reward == 1.0


@pytest.mark.parametrize("reply", [
    '<tool_call>{"name": "calc", "arguments": {"expression": "1 + 2"}}</tool_call>',  # no such tool
    '<tool_call>{"name": "calculator", "arguments": {"code": "1 + 2"}}</tool_call>',  # python's argument
    '<tool_call>{"name": "calculator", "arguments": {"expression": "1 + 2}}</tool_call>',  # unclosed string
    '<tool_call>{"name": "calculator", "arguments": {"expression": "1 + 2"}}</tool_call> and more',
    "The answer is 3.",
    "<answer></answer>",
])
def test_replies_the_env_cannot_read_do_not_match(reply: str) -> None:
    _, info = gym.make("llmgym/ToolUse-Calculator-v0").reset(seed=0)
    assert not re.fullmatch(tool_call_regex(info["tools"]), reply)


def test_each_tool_is_called_with_its_own_required_arguments() -> None:
    tools = [{"type": "function", "function": {"name": "move", "parameters": {
        "type": "object", "properties": {"steps": {"type": "integer"}, "fast": {"type": "boolean"}},
        "required": ["steps", "fast"]}}}]
    regex = tool_call_regex(tools)
    call = '<tool_call>{"name": "move", "arguments": {"steps": STEPS, "fast": true}}</tool_call>'
    assert re.fullmatch(regex, call.replace("STEPS", "12"))
    assert not re.fullmatch(regex, call.replace("STEPS", '"12"'))


def test_an_argument_type_the_constraint_cannot_write_is_refused_with_the_fix() -> None:
    tools = [{"type": "function", "function": {"name": "plot", "parameters": {
        "type": "object", "properties": {"points": {"type": "array"}}, "required": ["points"]}}}]
    with pytest.raises(InvalidOptionError, match="rollout.constrain=none"):
        tool_call_regex(tools)


def test_an_env_without_tools_is_refused_and_none_means_free_generation() -> None:
    _, info = gym.make("llmgym/FrozenLake-v1").reset(seed=0)
    with pytest.raises(InvalidOptionError, match="info\\['tools'\\]"):
        reply_regex("tool_calls", info)
    assert reply_regex("none", info) is None


@pytest.mark.parametrize("overrides, fix", [
    (["rollout.constrain=tool_calls", "rollout.backend=hf"], "rollout.backend=vllm"),
    (["rollout.constrain=tool_calls", "rollout.choices=[Left, Right]", "rollout.max_new_tokens=1"],
     "choices"),
    (["rollout.constrain=tool_call"], "tool_calls"),
])
def test_config_checks_name_the_fix(overrides: list[str], fix: str) -> None:
    with pytest.raises(InvalidOptionError, match=re.escape(fix)):
        load_config(overrides=overrides)


def test_the_evaluation_plays_under_the_runs_constraint() -> None:
    config = load_config(overrides=["rollout.constrain=tool_calls"])
    assert PlaySettings.of_run(config.rollout, config.eval).constrain == "tool_calls"


def test_the_hf_backend_refuses_a_regex(random_tiny_model: Any, char_tokenizer: Any) -> None:
    generator = HfGenerator(random_tiny_model, tokenizer=char_tokenizer, max_model_len=64)
    with pytest.raises(InvalidOptionError, match="rollout.backend=vllm"):
        generator.generate([[1, 2, 3]], SamplingSpec(max_tokens=4, regex="<answer>[0-9]+</answer>"))


def test_the_agents_last_turn_may_only_answer() -> None:
    """With ``max_turns``, the last request asks for an ``<answer>``: a call there could never be read."""
    from llmgym_train.agents.base import Agent, AgentConfig
    from llmgym_train.constraints import ANSWER
    from llmgym_train.episode import EpisodeStart, TrajectoryBuilder

    _, info = gym.make("llmgym/ToolUse-Calculator-v0").reset(seed=0)
    config = AgentConfig(max_turns=2, constrain="tool_calls")
    agent = Agent(chat=None, config=config)  # type: ignore[arg-type]
    builder = TrajectoryBuilder([1, 2, 3], EpisodeStart(0, "llmgym/ToolUse-Calculator-v0", 0), info, 64, [])
    assert agent.request(builder).sampling.regex == tool_call_regex(info["tools"])
    builder.turns.append(None)  # type: ignore[arg-type]  (one turn played)
    assert agent.request(builder).sampling.regex == ANSWER
    assert reply_regex("tool_calls", info, last_turn=True) == ANSWER
    free = Agent(chat=None, config=AgentConfig(max_turns=2))  # type: ignore[arg-type]
    assert free.request(builder).sampling.regex is None
