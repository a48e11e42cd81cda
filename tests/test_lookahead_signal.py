"""benchmarks/lookahead_signal.py: the grading of a random lookahead against the solver."""

from __future__ import annotations

import gymnasium as gym

from benchmarks.lookahead_signal import ENV_ID, grade_state, measure


def test_a_state_one_push_from_solved_is_graded_as_told_apart_and_right() -> None:
    env = gym.make(ENV_ID, step_penalty=0.0, action_parser="lenient")
    env.reset(options={"level": "######\n#    #\n# @$.#\n#    #\n######"})
    assert grade_state(env, rollouts=4, turns=3, seed=0) == (1, True, True)
    # Two cells behind the box: only continuations that push twice score; with one move left after
    # the first none do, so the moves tie and there is no signal.
    env.reset(options={"level": "######\n#    #\n#@ $.#\n#    #\n######"})
    assert grade_state(env, rollouts=50, turns=1, seed=0) == (2, False, False)
    assert grade_state(env, rollouts=50, turns=3, seed=0) == (2, True, True)


def test_measure_counts_every_start_once_and_right_only_where_told_apart() -> None:
    result = measure(starts=8, rollouts=8, turns=6)
    assert sum(bucket["states"] for bucket in result["buckets"]) == 8
    assert all(0 <= bucket["best_all_optimal"] <= bucket["signal"] <= 1 for bucket in result["buckets"])
