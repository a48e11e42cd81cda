"""Gold tests of the multi-agent games: a perfect TicTacToe player, and every terminal outcome by hand."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("pettingzoo")

from llmgym.eval_sets import load_eval_set  # noqa: E402
from llmgym.multiagent import ConnectFourEnv, PrisonersDilemmaEnv, TicTacToeEnv, VersusEnv  # noqa: E402
from llmgym.multiagent.rules import EMPTY, TicTacToeRules  # noqa: E402


def _answer(move: str) -> str:
    return f"I will play <answer>{move}</answer>"


def _minimax_move(game, rng: np.random.Generator, depth: int | None) -> str:
    """The name of a move minimax rates best for the player to move (the reference player)."""
    best = game.rules.best_moves(game.board, game.piece_of(game.agent_selection), depth)
    return game.rules.move_names[int(rng.choice(best))]


def _scripted(moves: list[int]):
    """An opponent that plays ``moves`` (0-based indices) in order."""
    queue = list(moves)
    return lambda game, rng: queue.pop(0)


# ------------------------------------------------------------------ minimax never loses TicTacToe
def _minimax_games(board: np.ndarray, to_move: int, minimax_piece: int,
                   rules: TicTacToeRules) -> tuple[int, int]:
    """``(games, losses)`` of minimax over every opponent reply and every move minimax rates best."""
    if to_move == minimax_piece:
        moves = rules.best_moves(board, to_move, None)
    else:
        moves = np.flatnonzero(board.reshape(-1) == EMPTY)
    games = losses = 0
    for move in moves:
        child = board.copy()
        row, col = rules.play(child, int(move), to_move)
        if rules.wins_at(child, row, col) or (child != EMPTY).all():
            games += 1
            losses += rules.wins_at(child, row, col) and to_move != minimax_piece
        else:
            sub_games, sub_losses = _minimax_games(child, 3 - to_move, minimax_piece, rules)
            games, losses = games + sub_games, losses + sub_losses
    return games, losses


@pytest.mark.parametrize("minimax_piece", [1, 2], ids=["minimax-X", "minimax-O"])
def test_minimax_never_loses_tictactoe_against_any_move_sequence(minimax_piece):
    rules = TicTacToeRules()
    games, losses = _minimax_games(rules.new_board(), 1, minimax_piece, rules)
    assert games > 1000 and losses == 0


def test_minimax_agent_scores_full_success_on_the_tictactoe_eval_set():
    """The reference player (minimax itself) never loses any frozen eval level against minimax."""
    env = gym.make("llmgym/TicTacToe-vs-minimax-v0").unwrapped
    rng = np.random.default_rng(0)
    results = []
    for record in load_eval_set("llmgym/TicTacToe-vs-minimax-v0"):
        env.reset(options={"level": record["level"]})
        terminated, info = False, {}
        while not terminated:
            _, _, terminated, _, info = env.step(_answer(_minimax_move(env.game, rng, None)))
        results.append((info["outcome"], info["success"]))
    assert len(results) == 200 and set(results) == {("draw", True)}


def test_minimax_beats_random_at_tictactoe():
    env = VersusEnv(game="TicTacToe", opponent="random", agent_seat="random")
    rng = np.random.default_rng(1)
    outcomes = []
    for seed in range(100):
        env.reset(seed=seed)
        terminated = False
        while not terminated:
            _, _, terminated, _, info = env.step(_answer(_minimax_move(env.game, rng, None)))
        outcomes.append(info["outcome"])
    assert "loss" not in outcomes and outcomes.count("win") >= 80


def test_depth_limited_connect_four_minimax_beats_random():
    env = VersusEnv(game="ConnectFour", opponent="random", agent_seat="random")
    rng = np.random.default_rng(2)
    wins = 0
    for seed in range(10):
        env.reset(seed=seed)
        terminated = False
        while not terminated:
            _, _, terminated, _, info = env.step(_answer(_minimax_move(env.game, rng, 2)))
        wins += info["outcome"] == "win"
    assert wins >= 9


# ------------------------------------------------------------------ hand-played terminal outcomes (AEC)
def _play(env, completions):
    for completion in completions:
        env.step(completion)


def test_aec_win_and_loss_rewards():
    env = TicTacToeEnv()
    env.reset()
    _play(env, [_answer(cell) for cell in ["1", "4", "2", "5", "3"]])  # X: top row
    assert env.rewards == {"player_0": 1.0, "player_1": -1.0}
    assert env.infos["player_0"]["outcome"] == "win" and env.infos["player_1"]["outcome"] == "loss"
    assert "Game over: you lost." in env.observe("player_1")["text"]
    # each seat is yielded once more with its final reward, then removed
    finals = {}
    for agent in env.agent_iter():
        _, reward, terminated, _, _ = env.last()
        assert terminated
        finals[agent] = reward
        env.step(None)
    assert finals == {"player_0": 1.0, "player_1": -1.0} and env.agents == []


def test_aec_draw_rewards():
    env = TicTacToeEnv()
    env.reset()
    _play(env, [_answer(cell) for cell in ["5", "1", "9", "3", "2", "8", "4", "6", "7"]])
    assert all(env.terminations.values())
    assert env.rewards == {"player_0": 0.0, "player_1": 0.0}
    assert {info["outcome"] for info in env.infos.values()} == {"draw"}


def test_aec_forfeit_rewards():
    env = ConnectFourEnv(max_invalid_actions=3, invalid_penalty=-0.1)
    env.reset()
    env.step(_answer("4"))
    total = 0.0
    for completion in ["pass", "<answer>8</answer>", "<answer>left</answer>"]:
        env.step(completion)
        total += env.rewards["player_1"]
    assert total == pytest.approx(-0.1 - 0.1 - 1.1)
    assert env.rewards["player_0"] == 1.0
    assert env.infos["player_1"]["outcome"] == "forfeit" and env.infos["player_0"]["outcome"] == "win"


def test_aec_connect_four_vertical_win():
    env = ConnectFourEnv()
    env.reset()
    _play(env, [_answer(col) for col in ["1", "2", "1", "2", "1", "2", "1"]])
    assert env.rewards == {"player_0": 1.0, "player_1": -1.0}


# ------------------------------------------------------------------ hand-played outcomes (single agent)
def test_versus_win():
    env = VersusEnv(game="TicTacToe", opponent=_scripted([3, 4]), agent_seat="player_0")
    env.reset(seed=0)
    rewards = [env.step(_answer(cell))[1] for cell in ["1", "2"]]
    _, reward, terminated, _, info = env.step(_answer("3"))
    assert rewards == [0.0, 0.0] and reward == 1.0 and terminated
    assert info["outcome"] == "win" and info["success"]


def test_versus_loss():
    env = VersusEnv(game="TicTacToe", opponent=_scripted([0, 1, 2]), agent_seat="player_1")
    env.reset(seed=0)
    env.step(_answer("4"))
    _, reward, terminated, _, info = env.step(_answer("5"))
    assert reward == -1.0 and terminated and info["outcome"] == "loss" and not info["success"]


@pytest.mark.parametrize(("success_on", "success"), [("win", False), ("win_or_draw", True)])
def test_versus_draw(success_on, success):
    opponent = _scripted([0, 2, 7, 5])
    env = VersusEnv(game="TicTacToe", opponent=opponent, agent_seat="player_0", success_on=success_on)
    env.reset(seed=0)
    results = [env.step(_answer(cell)) for cell in ["5", "9", "2", "4", "7"]]
    *_, (_, reward, terminated, _, info) = results
    assert [r[1] for r in results] == [0.0] * 5 and terminated
    assert info["outcome"] == "draw" and info["success"] is success


def test_versus_forfeit_costs_more_than_a_loss():
    env = gym.make("llmgym/TicTacToe-vs-minimax-v0").unwrapped
    env.reset(seed=0)
    board = env.game.board.copy()
    rewards = []
    for completion in ["hello", "<answer>10</answer>", "<answer>x</answer>"]:
        _, reward, terminated, _, info = env.step(completion)
        rewards.append(reward)
    assert np.array_equal(env.game.board, board)
    assert rewards == pytest.approx([-0.1, -0.1, -1.1]) and terminated
    assert info["outcome"] == "forfeit" and not info["success"]
    assert env.step(_answer("5"))[2]  # stays over


def test_versus_opponent_forfeit_is_a_win():
    env = VersusEnv(game="TicTacToe", opponent=lambda game, rng: "I resign", agent_seat="player_0")
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(_answer("5"))
    assert reward == 1.0 and terminated and info["outcome"] == "win" and info["success"]


# ------------------------------------------------------------------ prisoner's dilemma
def test_prisoners_dilemma_payoffs_by_hand():
    env = PrisonersDilemmaEnv(num_rounds=4)
    env.reset(seed=0)
    plays = [("C", "C"), ("D", "C"), ("C", "D"), ("D", "D")]
    totals = {"player_0": 0.0, "player_1": 0.0}
    for first, second in plays:
        moves = {"player_0": _answer(first), "player_1": _answer(second)}
        _, rewards, terminations, _, infos = env.step(moves)
        for agent, reward in rewards.items():
            totals[agent] += reward
    assert totals == {"player_0": 3 + 5 + 0 + 1, "player_1": 3 + 0 + 5 + 1}
    assert all(terminations.values()) and infos["player_0"]["outcome"] == "done" and env.agents == []


def test_prisoners_dilemma_vs_titfortat_outcomes():
    env = gym.make("llmgym/PrisonersDilemma-vs-titfortat-v0").unwrapped
    env.reset(seed=0)
    cooperative = [env.step(_answer("cooperate")) for _ in range(10)]
    assert sum(r[1] for r in cooperative) == 30 and cooperative[-1][2] and cooperative[-1][4]["success"]
    env.reset(seed=0)
    defecting = [env.step(_answer("defect")) for _ in range(10)]
    assert [r[1] for r in defecting] == [5] + [1] * 9 and not defecting[-1][4]["success"]
    env.reset(seed=0)
    forfeit = [env.step("no") for _ in range(3)]
    assert [r[1] for r in forfeit] == [-0.1] * 3 and forfeit[-1][2] and not forfeit[-1][3]
