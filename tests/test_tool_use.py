"""Tool-use envs: gold plans solve every task kind; tool errors are readable, never exceptions."""

from __future__ import annotations

import json
import re
import time

import gymnasium as gym
import pytest

import llmgym  # noqa: F401 - registers the ids
from llmgym.envs.tool_use import (
    Calculator,
    CalculatorError,
    ToolUseEnv,
    answers_match,
    default_index,
    parse_tool_use,
)
from llmgym.envs.tool_use.search import QUESTIONS_PATH
from llmgym.envs.tool_use.tasks import tool_call
from llmgym.error import InvalidOptionError, LevelFormatError
from llmgym_train.data import Trajectory, Turn
from llmgym_train.metrics import episode_metrics, tool_call_rates

def _responses(observation: str) -> list[dict]:
    bodies = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", observation, re.DOTALL)
    assert bodies, observation
    return [json.loads(body) for body in bodies]


def _play_plan(env: ToolUseEnv) -> tuple[float, bool, list[dict]]:
    responses, total, terminated = [], 0.0, False
    for action in env.solution():
        observation, reward, terminated, truncated, info = env.step(f"<answer>{action}</answer>")
        assert not truncated
        total += float(reward)
        if "<tool_response>" in observation:
            responses += _responses(observation)
            assert info["tool_errors"] == 0, observation
    return total, terminated, responses


@pytest.mark.parametrize(("task", "episodes"),
                         [("calculator", 30), ("search", 60), ("python", 6), ("mixed", 9)])
def test_gold_plans_solve_every_task(task, episodes):
    env = ToolUseEnv(task=task)
    kinds = set()
    for seed in range(episodes):
        _, info = env.reset(seed=seed)
        kinds.add(info["task"])
        total, terminated, responses = _play_plan(env)
        assert (total, terminated) == (1.0, True), (env.level(), responses)
        assert info["optimal_steps"] == len(env.solution())
    assert kinds == ({"calculator", "python", "search"} if task == "mixed" else {task})


def test_answering_without_tools_is_judged_on_the_answer():
    env = gym.make("llmgym/ToolUse-Calculator-v0").unwrapped
    env.reset(seed=1)
    answer = env.solution()[-1]
    observation, reward, terminated, truncated, info = env.step(f"<answer>{int(answer) + 1}</answer>")
    assert (reward, terminated, truncated, info["success"]) == (0.0, True, False, False)
    env.reset(seed=1)
    assert env.step(f"<answer>{int(answer):,}</answer>")[1] == 1.0


def test_info_tools_are_openai_function_schemas():
    env = gym.make("llmgym/ToolUse-v0").unwrapped
    _, info = env.reset(seed=0)
    assert [tool["function"]["name"] for tool in info["tools"]] == ["python", "calculator", "search"]
    for tool in info["tools"]:
        assert tool["type"] == "function"
        function = tool["function"]
        assert isinstance(function["description"], str) and function["description"]
        assert function["parameters"]["type"] == "object"
        assert set(function["parameters"]["required"]) <= set(function["parameters"]["properties"])
    json.dumps(info["tools"])


def test_the_system_prompt_names_every_argument_and_its_example_call_runs():
    # Most chat templates (SmolLM2's among them) drop tools=: the prompt alone must say how to call.
    env = gym.make("llmgym/ToolUse-Calculator-v0").unwrapped
    _, info = env.reset(seed=0)
    prompt = info["system_prompt"]
    for schema in info["tools"]:
        function = schema["function"]
        properties = function["parameters"]["properties"]
        arguments = ", ".join(f'"{name}": {spec["type"]}' for name, spec in properties.items())
        assert f"- {function['name']} {{{arguments}}}: {function['description']}" in prompt
    example = re.search(r"For example: (<tool_call>.*?</tool_call>)", prompt).group(1)
    observation, reward, terminated, _, info = env.step(example)
    assert (reward, terminated, info["tool_calls"], info["tool_errors"], info["tools_run"]) == (
        0.0, False, 1, 0, ("calculator",))
    assert _responses(observation) == [{"name": "calculator", "content": "408"}]
    env.close()


def test_the_share_of_episodes_that_ran_each_tool_counts_error_free_calls_only():
    env = gym.make("llmgym/ToolUse-Calculator-v0").unwrapped
    trajectories = []
    for actions in ([tool_call("calculator", expression="2 * 3"), "<answer>6</answer>"],  # ran
                    [tool_call("calculator", x="2 * 3"), "<answer>6</answer>"],  # a bad call: an error
                    ["<answer>6</answer>"]):  # no call
        _, reset_info = env.reset(seed=0)
        turns = []
        for action in actions:
            _, reward, _, _, info = env.step(action)
            ran = tuple(info.get("tools_run", ()))
            turns.append(Turn(0, 0, 0, float(reward), True, "stop", tools_run=ran))
        trajectories.append(Trajectory([], [], [], 0, turns=turns, info=reset_info))
    assert tool_call_rates(trajectories) == pytest.approx(
        {"called_calculator_rate": 1 / 3, "called_python_rate": 0.0, "called_search_rate": 0.0})
    assert tool_call_rates(trajectories[2:]) == {
        "called_calculator_rate": 0.0, "called_python_rate": 0.0, "called_search_rate": 0.0}
    assert episode_metrics(trajectories, ["calc"] * 3)["called_calculator_rate/calc"] == pytest.approx(1 / 3)
    env.close()


def test_chat_templates_accept_info_tools():
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    vocabulary = {"[UNK]": 0}
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizers.Tokenizer(tokenizers.models.WordLevel(vocabulary, unk_token="[UNK]")))
    # The tool block of the Qwen2.5 chat template, which renders each schema as JSON.
    tokenizer.chat_template = (
        "{%- if tools %}<tools>{%- for tool in tools %}<tool>{{ tool | tojson }}</tool>{%- endfor %}"
        "</tools>{%- endif %}"
        "{%- for message in messages %}\n<|{{ message.role }}|>{{ message.content }}{%- endfor %}")
    env = gym.make("llmgym/ToolUse-v0").unwrapped
    observation, info = env.reset(seed=0)
    messages = [{"role": "system", "content": info["system_prompt"]},
                {"role": "user", "content": observation}]
    text = tokenizer.apply_chat_template(messages, tools=info["tools"], tokenize=False)
    rendered = [json.loads(body) for body in re.findall(r"<tool>(.*?)</tool>", text, re.DOTALL)]
    assert rendered == info["tools"]


@pytest.mark.parametrize(("completion", "expected"), [
    ("<tool_call>{not json}</tool_call>", r"not valid JSON"),
    ('<tool_call>["python"]</tool_call>', r"must be a JSON object"),
    ('<tool_call>{"name": "shel", "arguments": {}}</tool_call>',
     r"unknown tool 'shel'.*python, calculator, search"),
    ('<tool_call>{"name": "python", "arguments": {}}</tool_call>', r"missing code"),
    ('<tool_call>{"name": "python", "arguments": {"code": 5}}</tool_call>',
     r"code must be a string, got int"),
    ('<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>', r"missing query"),
    ('<tool_call>{"name": "calculator", "arguments": {"expression": "1", "x": 1}}</tool_call>',
     r"unknown argument"),
    ('<tool_call>{"name": "calculator", "arguments": "[1, 2]"}</tool_call>', r"must be a JSON object"),
    ('<tool_call>{"name": "calculator", "arguments": {"expression": "__import__(\'os\')"}}</tool_call>',
     r"Call is not allowed"),
    ('<tool_call>{"name": "calculator", "arguments": {"expression": "9**9**9**9"}}</tool_call>', r"exponent"),
    ('<tool_call>{"name": "python", "arguments": {"code": "1/0"}}</tool_call>', r"ZeroDivisionError"),
    ('<tool_call>{"name": "search", "arguments": {"query": "x"}', r"unterminated"),
])
def test_bad_tool_calls_come_back_as_readable_tool_errors(completion, expected):
    env = gym.make("llmgym/ToolUse-v0").unwrapped
    env.reset(seed=0)
    observation, reward, terminated, truncated, info = env.step(completion)
    (response,) = _responses(observation)
    assert response["content"].startswith("Error:") and re.search(expected, response["content"]), response
    outcome = (reward, terminated, truncated, info["action_is_valid"], info["tool_errors"])
    assert outcome == (0.0, False, False, True, 1)
    assert env.step(tool_call("calculator", expression="2 + 2"))[0].count('"content": "4"') == 1


def test_calls_past_the_per_turn_limit_are_refused_and_the_rest_run():
    env = ToolUseEnv(max_tool_calls=2)
    env.reset(seed=0)
    calls = "".join(tool_call("calculator", expression=f"{n} * 2") for n in range(4))
    observation, _, _, _, info = env.step(calls)
    contents = [response["content"] for response in _responses(observation)]
    assert contents[:2] == ["0", "2"] and "only 2 tool calls" in contents[2] and len(contents) == 3
    assert info["tool_calls"] == 3


def test_tool_calls_win_over_an_answer_in_the_same_completion():
    assert parse_tool_use("<answer>5</answer>") == "5"
    block = tool_call("calculator", expression="1")
    assert parse_tool_use(f"thinking {block} <answer>5</answer>") == block
    assert parse_tool_use("no action") is None


def test_no_action_gets_the_invalid_penalty_and_turns_run_out():
    env = ToolUseEnv(max_turns=2)
    env.reset(seed=0)
    first = env.step("I am not sure.")
    assert (first[1], first[2], first[3], first[4]["action_is_valid"]) == (-0.1, False, False, False)
    second = env.step(tool_call("search", query="river"))
    assert (second[2], second[3]) == (False, True)


def test_level_round_trip_and_custom_levels():
    env = ToolUseEnv(task="search")
    observation, _ = env.reset(seed=4)
    level = json.loads(json.dumps(env.level()))
    replay, info = ToolUseEnv().reset(options={"level": level})
    assert replay == observation and info["level_id"] == "custom"
    env.reset(options={"level": {"question": "What is 2 + 2?", "answer": "4"}})
    assert env.solution() == ["4"] and env.step("<answer>4</answer>")[1] == 1.0
    with pytest.raises(LevelFormatError, match="question"):
        env.reset(options={"level": {"answer": "4"}})
    with pytest.raises(InvalidOptionError, match="Did you mean 'search'"):
        ToolUseEnv(task="serch")  # type: ignore[arg-type]


def test_calculator_is_exact_and_bounded():
    calculator = Calculator()
    assert calculator.evaluate("123456789 * 987654321") == "121932631112635269"
    assert calculator.evaluate("1/3 + 1/6") == "1/2" and calculator.evaluate("2^-2") == "1/4"
    assert calculator.evaluate("gcd(12, 18) + max(1, 5) + sqrt(16/9)") == "37/3"
    for bad in ("9**9**9**9", "10**1999 * 10**1999", "().__class__", "x", "1e999", "1/0", "(" * 3000):
        with pytest.raises(CalculatorError):
            calculator.evaluate(bad)


def test_search_finds_the_passage_of_every_one_hop_question():
    index = default_index()
    assert len(index.documents) >= 100
    questions = [json.loads(line) for line in QUESTIONS_PATH.read_text().splitlines() if line.strip()]
    one_hop = [q for q in questions if q["hops"] == 1]
    found = sum(q["doc_ids"][0] in [doc.id for doc in index.search(q["question"], 3)] for q in one_hop)
    assert found == len(one_hop)
    assert all(q["answer"] in index.documents[q["doc_ids"][-1]].text for q in questions
               if not q["answer"].isdigit())


def test_answers_match_numbers_and_names():
    assert answers_match("1072", "1,072") and not answers_match("1072", "1073")
    assert answers_match("Kubryth Sea", "the Kubryth Sea.") and not answers_match("Kubryth Sea", "Kubryth")


def test_a_threaded_vector_env_overlaps_python_tool_calls():
    """Sandbox waits release the GIL, so the thread backend runs the sub-envs' tool calls at once."""
    vector = pytest.importorskip("llmgym.vector")
    envs = vector.make_vector_env("llmgym/ToolUse-Python-v0", 4, backend="thread")
    try:
        envs.reset(seed=0)
        action = tool_call("python", code="import time\ntime.sleep(1)\nprint('slept')")
        start = time.monotonic()
        observations, *_ = envs.step([action] * 4)
        elapsed = time.monotonic() - start
        assert all('"content": "slept' in observation for observation in observations), observations
        assert elapsed < 3.0, f"4 one-second tool calls took {elapsed:.1f} s: they did not overlap"
    finally:
        envs.close()
