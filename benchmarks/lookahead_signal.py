"""How far a random lookahead tells Sokoban moves apart, measured against the exact solver.

    python -m benchmarks.lookahead_signal [--starts 300] [--settings 16x11 128x15 256x20]

``loss.lookahead_continuation=random`` credits each move with the best discounted return of
``R`` continuations of up to ``T - 1`` random moves (``TextEnv.random_rollout_returns``, the
env's own rewards). For training starts drawn anywhere on a fewest-moves solution (as the
``sokoban-v1-grpo`` recipe draws them), this script asks, by how many moves the start is from
solved: at what share of states the four moves do not all score alike (a signal), and at what
share the best-scored moves are all fewest-moves moves by the solver (the signal is right).
The solver only grades here; it never reaches a loss. Writes
``benchmarks/results/lookahead_signal_Sokoban-v1.json``.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

import llmgym  # noqa: F401  (registers the ids)
from benchmarks.common import markdown_table, write_result

ENV_ID = "llmgym/Sokoban-v1"
MOVES = ("Up", "Down", "Left", "Right")
GAMMA = 0.9
#: Distance buckets (moves from solved, by the solver), as (low, high) inclusive.
BUCKETS = ((1, 2), (3, 5), (6, 8), (9, 11), (12, 99))


def moves_left(env: Any) -> float:
    """Fewest moves to solve from the env's state (infinite where the room cannot be solved)."""
    plan = env.unwrapped.solution()
    return float("inf") if plan is None else float(len(plan))


def grade_state(env: Any, rollouts: int, turns: int, seed: int) -> tuple[int, bool, bool]:
    """The env's state now: (moves from solved, whether the moves scored differently, whether the best-scored are all optimal)."""
    core = env.unwrapped
    distance = int(moves_left(env))
    start = core.get_state()
    actions = [f"<answer>{move}</answer>" for move in MOVES]
    after = []
    for action in actions:
        core.set_state(start)
        env.step(action)
        after.append(moves_left(env))
    core.set_state(start)
    scores = core.random_rollout_returns(actions, rollouts=rollouts, turns=turns, gamma=GAMMA, seed=seed)
    best = {index for index, score in enumerate(scores) if score == max(scores)}
    optimal = {index for index, left in enumerate(after) if left == min(after)}
    return distance, len(best) < len(actions), len(best) < len(actions) and best <= optimal


def measure(starts: int, rollouts: int, turns: int) -> dict[str, Any]:
    """One setting's grades over ``starts`` training starts, by distance bucket."""
    env = gym.make(ENV_ID, start="solution", max_turns=100, step_penalty=0.0, action_parser="lenient")
    began = time.perf_counter()
    graded = []
    for seed in range(10_000, 10_000 + starts):
        env.reset(seed=seed)
        graded.append(grade_state(env, rollouts, turns, seed))
    seconds = time.perf_counter() - began
    buckets = []
    for low, high in BUCKETS:
        inside = [(signal, right) for distance, signal, right in graded if low <= distance <= high]
        if inside:
            buckets.append({"moves_left": f"{low}-{high}" if high < 99 else f"{low}+", "states": len(inside),
                            "signal": round(sum(s for s, _ in inside) / len(inside), 4),
                            "best_all_optimal": round(sum(r for _, r in inside) / len(inside), 4)})
    return {"rollouts": rollouts, "turns": turns, "seconds_per_state": round(seconds / starts, 5), "buckets": buckets}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=300, help="training starts graded per setting")
    parser.add_argument("--settings", nargs="+", default=["16x11", "128x15", "256x20"],
                        help="ROLLOUTSxTURNS of each setting")
    args = parser.parse_args(argv)
    load_start, results = os.getloadavg(), []
    for setting in args.settings:
        rollouts, turns = (int(part) for part in setting.split("x"))
        results.append(measure(args.starts, rollouts, turns))
    rows = [[f"{r['rollouts']} x {r['turns']}", b["moves_left"], b["states"], f"{b['signal']:.0%}",
             f"{b['best_all_optimal']:.0%}", f"{r['seconds_per_state'] * 1000:.0f}"]
            for r in results for b in r["buckets"]]
    print(markdown_table(["rollouts x turns", "moves left", "states", "signal", "best all optimal", "ms a state"], rows))
    path = write_result(f"lookahead_signal_{ENV_ID.split('/')[-1]}",
                        {"env_id": ENV_ID, "starts": args.starts, "gamma": GAMMA, "start": "solution (anywhere)",
                         "settings": results, "load_average_start": [round(x, 2) for x in load_start],
                         "load_average_end": [round(x, 2) for x in os.getloadavg()]})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
