"""FrozenLake: rules, rewards, maps, gold plays and bad input."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import llmgym  # noqa: F401
from llmgym.envs.frozen_lake import FrozenLakeEnv, generate_map, shortest_path
from llmgym.error import InvalidOptionError, LevelFormatError
from llmgym.eval_sets import load_eval_set

FROZEN_LAKE_IDS = [env_id for env_id in llmgym.env_ids() if "FrozenLake" in env_id]
LEVEL = ["SFFF", "FHFH", "FFFH", "HFFG"]


def answer(text: str) -> str:
    return f"Let me think. <answer>{text}</answer>"


def make(**kwargs) -> FrozenLakeEnv:
    return gym.make("llmgym/FrozenLake-v0", render_mode="ansi", **kwargs).unwrapped


def test_walk_to_the_goal_on_a_known_map_gives_reward_one_and_success():
    env = make()
    observation, info = env.reset(options={"level": LEVEL})
    assert info["optimal_steps"] == 6
    assert observation.endswith("P___\n_O_O\n___O\nO__G")
    rewards = []
    for name in ["Down", "Down", "Right", "Down", "Right", "Right"]:
        observation, reward, terminated, truncated, info = env.step(answer(name))
        rewards.append(reward)
    assert rewards == [0, 0, 0, 0, 0, 1.0]
    assert terminated and not truncated and info["success"]
    assert "reached the goal" in observation


def test_falling_into_a_hole_ends_the_episode_without_success():
    env = make()
    env.reset(options={"level": LEVEL})
    env.step(answer("Right"))
    _, reward, terminated, _, info = env.step(answer("down"))
    assert terminated and reward == 0 and not info["success"]
    assert info["action_is_valid"] and info["action_is_effective"]


def test_bumping_into_the_edge_is_valid_but_not_effective():
    env = make()
    env.reset(options={"level": LEVEL})
    before = env.render()
    observation, reward, terminated, _, info = env.step(answer("Up"))
    assert info["action_is_valid"] and not info["action_is_effective"]
    assert reward == 0 and not terminated and env.render() == before
    assert "edge" in observation


def test_bump_penalty_is_the_reward_of_a_move_into_the_edge_only():
    env = make(bump_penalty=-0.25)
    env.reset(options={"level": LEVEL})
    before = env.render()
    _, reward, terminated, _, info = env.step(answer("Left"))
    assert reward == -0.25 and not terminated and env.render() == before
    assert info["action_is_valid"] and not info["action_is_effective"]
    rewards = [env.step(answer(name))[1] for name in ["Down", "Down", "Right", "Down", "Right", "Right"]]
    assert rewards == [0, 0, 0, 0, 0, 1.0]
    other = make(bump_penalty=-0.25)
    other.reset(options={"level": LEVEL})
    _, reward, _, _, info = other.step(answer("Jump"))
    assert reward == -0.1 and not info["action_is_valid"]  # an invalid turn keeps invalid_penalty


@pytest.mark.parametrize("action", ["Jump", "<answer></answer>", "no tags at all: Down", "<answer>Up || Up</answer>"])
def test_invalid_actions_leave_the_state_unchanged_and_cost_the_penalty(action):
    env = make(invalid_penalty=-0.5)
    env.reset(options={"level": LEVEL})
    before = env.render()
    completion = action if "<" in action or ":" in action else answer(action)
    observation, reward, terminated, truncated, info = env.step(completion)
    assert not info["action_is_valid"] and not info["action_is_effective"]
    assert reward == -0.5 and not terminated and not truncated
    assert env.render() == before
    assert observation.startswith("Invalid action")


def test_several_actions_per_turn():
    env = make(max_actions_per_turn=3)
    env.reset(options={"level": LEVEL})
    _, _, _, _, info = env.step(answer("Down || down ||Right"))
    assert info["action_is_effective"] and env._position == (2, 1)
    _, reward, terminated, _, info = env.step(answer("Down||Right||Right"))
    assert terminated and reward == 1.0 and info["success"]


def test_several_actions_stop_at_a_hole():
    env = make(max_actions_per_turn=3)
    env.reset(options={"level": LEVEL})
    _, _, terminated, _, info = env.step(answer("Right || Down || Down"))
    assert terminated and not info["success"] and env._position == (1, 1)


def test_max_invalid_actions_ends_the_episode_and_max_turns_truncates():
    env = make(max_invalid_actions=2)
    env.reset(options={"level": LEVEL})
    assert env.step("nothing")[2] is False
    observation, _, terminated, _, _ = env.step("nothing")
    assert terminated and "Too many invalid actions" in observation

    env = make(max_turns=2)
    env.reset(options={"level": LEVEL})
    env.step(answer("Up"))
    _, _, terminated, truncated, _ = env.step(answer("Up"))
    assert truncated and not terminated


def test_slippery_success_rate_is_the_observed_rate_of_intended_moves():
    env = gym.make("llmgym/FrozenLake-Slippery-v0").unwrapped
    open_ice = ["SFF", "FFF", "FFG"]
    intended = 0
    trials = 2000
    env.reset(seed=0, options={"level": open_ice})
    for _ in range(trials):
        env.reset(options={"level": open_ice})
        env._position = (1, 1)
        env.step(answer("Up"))
        intended += env._position == (0, 1)
    assert env.success_rate == 0.8
    assert abs(intended / trials - 0.8) < 0.04


def test_generated_maps_always_have_a_path_and_follow_the_rng():
    for seed in range(300):
        rows = generate_map(np.random.default_rng(seed), 8, frozen_probability=0.6)
        assert rows[0][0] == "S" and rows[-1][-1] == "G"
        assert shortest_path(rows, (0, 0)) is not None
    assert generate_map(np.random.default_rng(5), 6) == generate_map(np.random.default_rng(5), 6)


@pytest.mark.parametrize("env_id", FROZEN_LAKE_IDS)
def test_gold_the_solver_solves_every_frozen_eval_level_in_optimal_steps(env_id):
    env = gym.make(env_id, success_rate=1.0).unwrapped
    for record in load_eval_set(env_id):
        _, info = env.reset(options={"level": record["level"]})
        assert info["optimal_steps"] == record["optimal_steps"]
        plan = env.solution()
        assert len(plan) == record["optimal_steps"]
        for name in plan:
            _, reward, terminated, _, info = env.step(answer(name))
        assert terminated and info["success"] and reward == 1.0


@pytest.mark.parametrize(
    ("level", "message"),
    [
        (["SFF", "FFG"], "square"),
        (["SXF", "FFF", "FFG"], "only S"),
        (["SFF", "FFF", "FFF"], "exactly one S and one G"),
        (42, "list of row strings"),
    ],
)
def test_bad_levels_raise_level_format_error(level, message):
    env = make()
    with pytest.raises(LevelFormatError, match=message):
        env.reset(options={"level": level})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"size": 1}, "size must be between 2 and 32"), ({"success_rate": 0}, "success_rate"),
     ({"frozen_probability": 1.5}, "frozen_probability")],
)
def test_impossible_settings_raise_value_error_naming_the_limit(kwargs, message):
    with pytest.raises(InvalidOptionError, match=message):
        gym.make("llmgym/FrozenLake-v0", **kwargs)
    assert issubclass(InvalidOptionError, ValueError)


def test_lenient_parser_takes_the_tag_else_the_last_action_name():
    env = make(action_parser="lenient")
    env.reset(options={"level": ["SF", "FG"]})
    _, _, _, _, info = env.step("I would go right, or maybe Down.")
    assert info["parsed_action"] == "Down" and env._position == (1, 0)
    _, reward, terminated, _, info = env.step("<answer>Right</answer> rather than left")
    assert info["parsed_action"] == "Right" and terminated and reward == 1.0
    env.reset(options={"level": ["SF", "FG"]})
    _, reward, _, _, info = env.step("I am not sure what to do")
    assert not info["action_is_valid"] and reward == env.invalid_penalty


def test_unknown_parser_name_is_rejected_with_a_suggestion():
    with pytest.raises(InvalidOptionError, match="Did you mean 'lenient'"):
        gym.make("llmgym/FrozenLake-v0", action_parser="lenint")
