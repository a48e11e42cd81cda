"""The readability probe's labels: every optimal first move of a Sokoban level, and no other."""

from __future__ import annotations

import gymnasium as gym
import pytest

import llmgym  # noqa: F401
from benchmarks.readability import MOVES, check_choice, optimal_first_moves
from llmgym.error import InvalidOptionError

# The player must stand above the box to push it down onto the target: Right, Right, Down or
# Down, Right, Right gets there, then Down. Up and Left walk into walls.
TWO_WAYS = "######\n#@   #\n#    #\n#  $ #\n#  . #\n######"


def test_both_optimal_first_moves_are_found_and_the_level_is_left_as_it_was() -> None:
    env = gym.make("llmgym/Sokoban-v1").unwrapped
    env.reset(options={"level": TWO_WAYS})
    assert len(env.solution()) == 4
    before = env.level_xsb()
    assert optimal_first_moves(env) == {MOVES.index("Right"), MOVES.index("Down")}
    assert env.level_xsb() == before


@pytest.mark.parametrize("moves", [1, 2, 3])
def test_the_solution_s_first_move_is_among_them(moves: int) -> None:
    env = gym.make("llmgym/Sokoban-v1", max_level_moves=moves).unwrapped
    for seed in range(20):
        env.reset(seed=seed)
        best = optimal_first_moves(env)
        assert MOVES.index(env.solution()[0]) in best
        if moves == 1:  # one push solves it: exactly one move does
            assert len(best) == 1


def test_moves_that_walk_away_from_the_push_are_not_optimal() -> None:
    # One push Left solves it; Up and Down are effective moves that cost a move, Right is a wall.
    env = gym.make("llmgym/Sokoban-v1").unwrapped
    env.reset(options={"level": "######\n#    #\n# .$@#\n#    #\n######"})
    assert optimal_first_moves(env) == {MOVES.index("Left")}


def test_an_unknown_format_names_the_known_ones() -> None:
    with pytest.raises(InvalidOptionError, match="known: v1, spaced, compact"):
        check_choice(["v2"], ["v1", "spaced", "compact"], "format")
