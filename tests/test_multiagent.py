"""Conformance and behaviour of llmgym.multiagent: PettingZoo games and their single-agent views."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("pettingzoo")

from gymnasium.utils.env_checker import check_env  # noqa: E402
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test  # noqa: E402
from pettingzoo.utils.conversions import parallel_to_aec  # noqa: E402

import llmgym  # noqa: E402
from llmgym.error import InvalidOptionError, LevelFormatError, UnknownOptionError  # noqa: E402
from llmgym.eval_sets import build_eval_set, load_eval_set  # noqa: E402
from llmgym.multiagent import (  # noqa: E402
    ConnectFourEnv,
    MoveText,
    PrisonersDilemmaEnv,
    TicTacToeEnv,
    VersusEnv,
)
from llmgym.multiagent.rules import ConnectFourRules  # noqa: E402

VERSUS_IDS = [env_id for env_id in llmgym.env_ids() if "-vs-" in env_id]
BOARD_GAMES = [TicTacToeEnv, ConnectFourEnv]
GAME_OPTIONS = [{}, {"opening_plies": 2}, {"max_invalid_actions": None}]


@pytest.fixture(autouse=True)
def _quiet_pettingzoo_advice():
    # api_test advises Box/Discrete spaces and ndarray observations; ours are Dict / Text by design.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


# ------------------------------------------------------------------ PettingZoo conformance
@pytest.mark.parametrize("options", GAME_OPTIONS, ids=str)
@pytest.mark.parametrize("game", BOARD_GAMES, ids=lambda cls: cls.__name__)
def test_board_games_pass_pettingzoo_api_and_seed_tests(game, options):
    api_test(game(**options), num_cycles=200)
    seed_test(lambda: game(**options), num_cycles=100)


def test_prisoners_dilemma_passes_parallel_api_and_seed_tests():
    parallel_api_test(PrisonersDilemmaEnv(), num_cycles=100)
    parallel_api_test(PrisonersDilemmaEnv(num_rounds=3, max_invalid_actions=None), num_cycles=100)
    parallel_seed_test(lambda: PrisonersDilemmaEnv(), num_cycles=50)
    api_test(parallel_to_aec(PrisonersDilemmaEnv(num_rounds=4)), num_cycles=50)


@pytest.mark.parametrize("env_id", VERSUS_IDS)
def test_single_agent_wrappers_pass_check_env(env_id):
    assert env_id.startswith("llmgym/")
    check_env(gym.make(env_id).unwrapped)


@pytest.mark.parametrize("env_id", VERSUS_IDS)
def test_eval_sets_are_frozen(env_id):
    frozen = load_eval_set(env_id)
    assert len(frozen) == 200
    assert build_eval_set(env_id, size=20) == frozen[:20]


def test_registered_ids():
    expected = {"TicTacToe-vs-minimax-v0", "TicTacToe-vs-random-v0", "ConnectFour-vs-minimax-v0",
                "PrisonersDilemma-vs-titfortat-v0"}
    assert {f"llmgym/{name}" for name in expected} <= set(VERSUS_IDS)


# ------------------------------------------------------------------ spaces and observations
def test_move_text_samples_name_legal_moves_and_stay_in_the_text_space():
    space = MoveText(["1", "2", "3"], seed=0)
    mask = np.array([0, 1, 0], np.int8)
    assert {space.sample(mask) for _ in range(20)} == {"<answer>2</answer>"}
    assert {space.sample() for _ in range(200)} == {f"<answer>{n}</answer>" for n in "123"}
    raw = space.sample(mask=(5, None))
    assert len(raw) == 5 and space.contains(raw)
    assert space.contains("any completion at all\n") and not space.contains("\x00")


def test_observation_has_planes_mask_and_text_for_each_seat():
    env = TicTacToeEnv()
    env.reset(seed=0)
    env.step("<answer>5</answer>")
    x_view, o_view = env.observe("player_0"), env.observe("player_1")
    assert x_view["observation"][1, 1, 0] == 1 and o_view["observation"][1, 1, 1] == 1
    assert x_view["observation"].sum() == 1 and o_view["observation"].sum() == 1
    assert not x_view["action_mask"].any()  # not X's turn
    assert o_view["action_mask"].tolist() == [1, 1, 1, 1, 0, 1, 1, 1, 1]
    assert "Your opponent played cell 5." in o_view["text"] and "Your move (O)" in o_view["text"]
    assert " X | 6" in o_view["text"] and "Waiting for your opponent" in x_view["text"]
    assert env.observation_space("player_1").contains(o_view)


def test_completion_and_integer_actions_both_play_moves():
    env = ConnectFourEnv()
    env.reset()
    env.step("Let me think... <answer>column 4</answer>")
    env.step(3)  # 0-based index for classic-RL agents
    assert env.board[5, 3] == 1 and env.board[4, 3] == 2
    assert env.history == ["4", "4"]


# ------------------------------------------------------------------ invalid moves
@pytest.mark.parametrize(
    ("completion", "reason"),
    [
        ("no tags", "no move found"),
        ("<answer>ten</answer>", "is not a move"),
        ("<answer>5</answer>", "not available"),
    ],
)
def test_invalid_move_leaves_board_unchanged_with_feedback_and_penalty(completion, reason):
    env = TicTacToeEnv(invalid_penalty=-0.25)
    env.reset()
    env.step("<answer>5</answer>")
    board = env.board.copy()
    env.step(completion)
    assert np.array_equal(env.board, board)
    assert env.agent_selection == "player_1"  # the same player moves again
    assert env.rewards == {"player_0": 0.0, "player_1": -0.25}
    assert env.infos["player_1"]["action_is_valid"] is False
    text = env.observe("player_1")["text"]
    assert text.startswith("Invalid move:") and reason in text and "Your move (O)" in text


def test_max_invalid_actions_forfeits_with_documented_rewards():
    env = TicTacToeEnv(max_invalid_actions=2)
    env.reset()
    env.step("nothing")
    assert not any(env.terminations.values())
    env.step("<answer>0</answer>")
    assert all(env.terminations.values())
    assert env.rewards == {"player_0": pytest.approx(-1.1), "player_1": 1.0}
    assert env.infos["player_0"]["outcome"] == "forfeit" and env.infos["player_1"]["outcome"] == "win"
    assert "you forfeit" in env.observe("player_0")["text"]


def test_without_a_limit_invalid_actions_never_end_the_game():
    env = TicTacToeEnv(max_invalid_actions=None)
    env.reset()
    for _ in range(50):
        env.step("pass")
    assert not any(env.terminations.values())
    assert env.infos["player_0"]["invalid_actions"] == 50 and env.rewards["player_0"] == -0.1


# ------------------------------------------------------------------ options and levels
def test_reset_level_plays_the_opening_and_rejects_bad_ones():
    env = TicTacToeEnv()
    env.reset(options={"level": {"opening": ["5", "1"]}})
    assert env.history == ["5", "1"] and env.agent_selection == "player_0"
    with pytest.raises(LevelFormatError, match="not a legal"):
        env.reset(options={"level": {"opening": ["5", "5"]}})
    with pytest.raises(LevelFormatError, match="ends the game"):
        env.reset(options={"level": {"opening": ["1", "4", "2", "5", "3"]}})
    with pytest.warns(UserWarning, match="ignores the option 'levle'. Did you mean 'level'"):
        env.reset(options={"levle": 1})


def test_random_openings_follow_the_seed():
    openings = [tuple(_opening(ConnectFourEnv(opening_plies=4), seed)) for seed in (0, 0, 1)]
    assert openings[0] == openings[1] and len(openings[0]) == 4
    assert openings[0] != openings[2]
    with pytest.raises(InvalidOptionError, match="opening_plies must be between 0 and 6"):
        ConnectFourEnv(opening_plies=7)


def _opening(env, seed):
    env.reset(seed=seed)
    return env.opening


def test_versus_level_replays_the_episode_exactly():
    env = gym.make("llmgym/ConnectFour-vs-minimax-v0").unwrapped
    first, _ = env.reset(seed=11)
    level = env.level()
    moves = ["<answer>4</answer>", "<answer>3</answer>", "<answer>5</answer>"]
    played = [env.step(move)[0] for move in moves]
    replay, info = env.reset(options={"level": level})
    assert replay == first and "seed" not in info
    assert [env.step(move)[0] for move in moves] == played
    with pytest.raises(LevelFormatError):
        env.reset(options={"level": {"agent_seat": "player_9", "opening": [], "opponent_seed": 1}})


def test_versus_rejects_unknown_and_bad_options():
    with pytest.raises(UnknownOptionError, match="Did you mean 'opponent'"):
        VersusEnv(oponent="random")
    with pytest.raises(InvalidOptionError, match="game must be one of"):
        VersusEnv(game="Chess")
    with pytest.raises(InvalidOptionError, match="opponent must be"):
        VersusEnv(opponent="alphazero")


def test_versus_random_seat_covers_both_seats_and_reports_it():
    env = gym.make("llmgym/TicTacToe-vs-random-v0").unwrapped
    seats = {env.reset(seed=seed)[1]["agent_seat"] for seed in range(20)}
    assert seats == {"player_0", "player_1"}
    observation, info = env.reset(seed=3)
    symbol = "X" if info["agent_seat"] == "player_0" else "O"
    assert f"you are {symbol}" in observation and f"as {symbol}" in info["system_prompt"]


# ------------------------------------------------------------------ ConnectFour search
def test_connect_four_minimax_takes_a_win_and_blocks_a_loss():
    rules = ConnectFourRules()
    board = rules.new_board()
    for col, piece in [(1, 1), (1, 2), (2, 1), (2, 2), (3, 1)]:
        rules.play(board, col, piece)
    assert rules.best_moves(board, 1, depth=4) == [0, 4]  # X completes 2-3-4 with column 1 or 5
    board = rules.new_board()
    for col, piece in [(0, 1), (6, 2), (0, 1), (6, 2), (0, 1)]:
        rules.play(board, col, piece)
    assert rules.best_moves(board, 2, depth=4) == [0]  # block X's column
    assert rules.best_moves(board, 1, depth=2) == [0]  # X wins at once
