"""Conformance of every registered llmgym id: Gymnasium's checker, seeding, bad input, lightness."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import llmgym
from llmgym.error import UnknownOptionError
from llmgym.eval_sets import build_eval_set, eval_set_size, has_eval_set, load_eval_set

ENV_IDS = llmgym.env_ids()


def test_registry_is_not_empty_and_registered_with_gymnasium():
    assert len(ENV_IDS) >= 6
    for env_id in ENV_IDS:
        assert env_id in gym.registry
        assert gym.registry[env_id].vector_entry_point is not None


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env_passes(env_id):
    env = gym.make(env_id)
    check_env(env.unwrapped, skip_render_check=False)
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_reset_info_has_system_prompt_and_level_identity(env_id):
    env = gym.make(env_id)
    observation, info = env.reset(seed=3)
    assert isinstance(observation, str) and observation
    assert isinstance(info["system_prompt"], str) and info["system_prompt"]
    assert "seed" in info or "level_id" in info
    _, _, _, _, step_info = env.step("<answer>nonsense</answer>")
    for key in ("success", "action_is_valid", "action_is_effective", "parsed_action"):
        assert key in step_info
    env.close()


_FIRST_OBSERVATION = """
import json, sys
import gymnasium as gym
import llmgym
env = gym.make(sys.argv[1])
observation, info = env.reset(seed=12345)
print(json.dumps([observation, info.get("seed"), info.get("optimal_steps")]))
"""


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_same_seed_gives_the_same_level_in_two_processes(env_id):
    outputs = [
        subprocess.run(
            [sys.executable, "-c", _FIRST_OBSERVATION, env_id], capture_output=True, text=True, check=True
        ).stdout
        for _ in range(2)
    ]
    assert outputs[0] == outputs[1]
    env = gym.make(env_id)
    here = env.reset(seed=12345)
    assert json.loads(outputs[0])[0] == here[0]
    firsts = {(observation, info.get("seed")) for observation, info in (env.reset(seed=s) for s in range(54321, 54331))}
    assert len(firsts) > 1, "other seeds give other levels"


def test_misspelled_id_gets_gymnasiums_suggestion():
    with pytest.raises(gym.error.NameNotFound, match="Did you mean: `FrozenLake`"):
        gym.make("llmgym/FrozenLak-v0")


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_unknown_constructor_option_raises_type_error_with_suggestion(env_id):
    with pytest.raises(TypeError, match="render_mod") as caught:
        gym.make(env_id, render_mod="ansi")
    assert "Did you mean 'render_mode'" in str(caught.value)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_unknown_reset_option_is_rejected(env_id):
    env = gym.make(env_id)
    with pytest.raises(UnknownOptionError, match="levle"):
        env.reset(seed=0, options={"levle": None})


def test_import_llmgym_stays_light():
    code = "import sys, llmgym; print([m for m in ('torch', 'transformers', 'vllm') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ---------------------------------------------------------------------- bad actions (fuzz)
_TAG_SOUP = st.lists(
    st.sampled_from(["<answer>", "</answer>", "< ANSWER >", "</ answer>", "<answer", "answer>", "\\boxed{", "}", "{",
                     "<tool_call>", "</tool_call>", "Up", "left", "||", "\x00", "\u2603", "\n", " "]),
    max_size=60,
).map("".join)
_ACTIONS = st.one_of(st.text(max_size=300), _TAG_SOUP, st.binary(max_size=50).map(lambda b: b.decode("latin-1")))


@pytest.fixture(scope="module")
def fuzz_envs():
    envs = {env_id: gym.make(env_id, render_mode="ansi").unwrapped for env_id in ENV_IDS}
    yield envs
    for env in envs.values():
        env.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(action=_ACTIONS, index=st.integers(min_value=0, max_value=len(ENV_IDS) - 1))
def test_arbitrary_actions_never_raise_and_invalid_ones_change_nothing(fuzz_envs, action, index):
    env = fuzz_envs[ENV_IDS[index]]
    env.reset(seed=7)
    before = env.render()
    observation, reward, terminated, truncated, info = env.step(action)
    assert env.observation_space.contains(observation)
    if not info["action_is_valid"]:
        assert env.render() == before
        assert reward == env.invalid_penalty


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize(
    "action",
    [
        "x" * 100_000,
        "<answer>" * 20_000,
        "</answer>" * 10_000 + "<answer>Up",
        "<" + " " * 99_990 + "answer>",
        "\u2603\U0001f600" * 30_000,
        "<tool_call>{" * 5_000,
        "\\boxed{" * 14_000,
    ],
    ids=["plain", "open-tags", "close-tags", "spaces", "unicode", "tool-calls", "boxed"],
)
def test_huge_hostile_actions_are_fast_and_harmless(env_id, action):
    env = gym.make(env_id, render_mode="ansi").unwrapped
    env.reset(seed=1)
    before = env.render()
    # CPU time, not wall time: the bound is about the parser's work, not about a busy machine.
    start = time.process_time()
    observation, reward, _, _, info = env.step(action)
    elapsed = time.process_time() - start
    assert elapsed < 0.03, f"{env_id} took {elapsed * 1000:.1f} ms of CPU on a 100k-character action"
    assert env.observation_space.contains(observation)
    if not info["action_is_valid"]:
        assert env.render() == before


# ---------------------------------------------------------------------- frozen eval sets
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_every_id_has_a_frozen_eval_set_that_regenerates_identically(env_id):
    assert has_eval_set(env_id), f"no eval set for {env_id}: run python -m llmgym.eval_sets {env_id}"
    frozen = load_eval_set(env_id)
    assert len(frozen) == eval_set_size(env_id) == (26 if env_id == "llmgym/MathDataset-v0" else 200)
    assert build_eval_set(env_id) == frozen, (
        f"{env_id}'s levels changed: a change that alters levels must bump the env's version"
    )
