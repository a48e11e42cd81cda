"""The classic-RL and chat-history wrappers."""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest

import llmgym
from llmgym.error import InvalidOptionError, LevelFormatError
from llmgym.wrappers import ChatHistory, DiscreteActions, GridObservation, encode_board, make_classic_env

BOARD_ENVS = [
    env_id for env_id in llmgym.env_ids() if env_id.split("/")[1].startswith(("FrozenLake", "Sokoban"))
]


@pytest.fixture(params=BOARD_ENVS)
def board_env_id(request: pytest.FixtureRequest) -> str:
    return request.param


def test_sb3_check_env_passes_without_warnings(board_env_id: str) -> None:
    from stable_baselines3.common.env_checker import check_env

    env = make_classic_env(board_env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # SB3 reports space problems as warnings: make them fail
        check_env(env, warn=True)


def test_grid_observation_is_the_rendered_board_one_hot(board_env_id: str) -> None:
    env = make_classic_env(board_env_id)
    observation, _ = env.reset(seed=3)
    assert env.observation_space.contains(observation)
    grid = observation.reshape(env.grid_shape)
    # v1 ids separate cells by spaces and add a coordinates line under the board.
    text = [line for line in env.unwrapped.render().split("\n") if not line.startswith("You are at row")]
    board = [line.replace(" ", "") for line in text[-env.shape[0] :]]
    for row, line in enumerate(board):
        for col, char in enumerate(line):
            assert env.symbols[int(grid[row, col].argmax())] == char
    assert grid.sum() == sum(len(line) for line in board)


def test_discrete_action_plays_the_named_text_action() -> None:
    env = make_classic_env("llmgym/FrozenLake-v0")
    env.reset(options={"level": ["SFFF", "FFFF", "FFFF", "FFFG"]})
    names = list(env.unwrapped.action_names)
    _, reward, terminated, _, info = env.step(names.index("Right"))
    assert info["parsed_action"] == "Right" and info["action_is_effective"] and not terminated
    observation, _, _, _, _ = env.step(names.index("Down"))
    grid = observation.reshape(env.grid_shape)
    assert env.symbols[int(grid[1, 1].argmax())] == "P"


def test_solution_played_through_the_classic_view_succeeds() -> None:
    env = make_classic_env("llmgym/FrozenLake-8x8-v0")
    names = list(env.unwrapped.action_names)
    for seed in range(5):
        env.reset(seed=seed)
        plan = env.unwrapped.solution()
        for name in plan:
            _, reward, terminated, truncated, info = env.step(names.index(name))
        assert terminated and info["success"] and reward == 1.0


def test_grid_observation_requires_ansi_rendering() -> None:
    with pytest.raises(InvalidOptionError, match="render_mode='ansi'"):
        GridObservation(DiscreteActions(gym.make("llmgym/FrozenLake-v0")))


def test_encode_board_pads_short_rows_and_rejects_unknown_symbols() -> None:
    grid = encode_board("feedback line\n#@\n#", "#@", (2, 3))
    assert grid.shape == (2, 3, 2)
    assert grid[0, 1, 1] == 1.0 and grid[0, 2].sum() == 0 and grid[1, 1:].sum() == 0
    with pytest.raises(LevelFormatError, match="not one of"):
        encode_board("#x", "#@", (1, 2))


def test_chat_history_alternates_roles_and_ends_with_the_user_turn() -> None:
    env = ChatHistory(gym.make("llmgym/FrozenLake-v0"))
    observation, info = env.reset(seed=0)
    assert env.messages == [
        {"role": "system", "content": info["system_prompt"]},
        {"role": "user", "content": observation},
    ]
    next_observation, *_ = env.step("<answer>Down</answer>")
    assert [message["role"] for message in env.messages] == ["system", "user", "assistant", "user"]
    assert env.messages[-2]["content"] == "<answer>Down</answer>"
    assert env.messages[-1]["content"] == next_observation
    env.reset(seed=1)
    assert len(env.messages) == 2, "reset must start a fresh conversation"


def test_chat_history_can_fold_the_system_prompt_into_the_first_turn() -> None:
    env = ChatHistory(gym.make("llmgym/FrozenLake-v0"), include_system_prompt=False)
    observation, info = env.reset(seed=0)
    assert env.messages == [{"role": "user", "content": f"{info['system_prompt']}\n\n{observation}"}]

