"""Environment throughput: resets/s, steps/s, snapshots/s and restores/s per llmgym id, on one core.

For each id, after a warm-up, in one process pinned to one core:

* resets/s: ``env.reset()`` in a loop (a fresh level each time, with whatever the env computes
  at reset, e.g. Sokoban's exact ``optimal_steps``);
* steps/s: ``env.step(completion)`` with valid completions in the env's answer format, e.g.
  ``"<answer>Up</answer>"``, resetting when an episode ends. Only the time inside ``step`` is
  counted: resets are the other figure;
* snapshots/s: ``env.unwrapped.get_state()`` a few steps into an episode;
* restores/s: ``env.unwrapped.set_state(state)`` of such a snapshot into the env it came from
  (the same level: a tree rollout's branches), and restores/s to a new level: alternating
  snapshots of two levels, so each restore also rebuilds the level (a branch restored into
  another sub-env). An id that cannot snapshot here reports ``None`` and the reason.

Completions: an env with ``action_names`` gets those names in a fixed pseudo-random order; an env
that implements ``solution()`` plays its plan; any other env gets ``"<answer>x</answer>"``.
Each figure is the median of 5 repetitions (3 with ``--quick``), in wall-clock time and, beside
it, in this process's CPU time: on a shared machine the CPU-time figure is what the code costs,
the wall-clock one also holds what the neighbours took. The unwrapped env is measured for every
id; for a few ids the ``gym.make`` wrapper stack is measured too.

Usage: ``python -m benchmarks.env_throughput [--ids ID [ID ...]] [--quick]``. Writes
``benchmarks/results/env_throughput.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pickle
import subprocess
import sys
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import llmgym
from benchmarks.common import RESULTS_DIR, markdown_table, write_result
from llmgym.core import TextEnv
from llmgym.error import SnapshotNotSupported

#: Ids also measured through ``gym.make``'s wrappers, to show what they cost.
WRAPPED_IDS = ("llmgym/Sokoban-v0", "llmgym/FrozenLake-v0")
#: A completion every env can take: valid format, content the env judges.
FALLBACK_COMPLETION = "<answer>x</answer>"


def pin_to_one_core() -> int | None:
    """Run this process on one core (the lowest it may use); return it, or None where unsupported."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    return core


class Completions:
    """Valid completions for one env, in its answer format (see the module docstring)."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        self._env = env
        names = getattr(env.unwrapped, "action_names", None)
        order = np.random.default_rng(0).integers(0, 1 << 16, 256).tolist()
        self._named = [f"<answer>{names[index % len(names)]}</answer>" for index in order] if names else None
        self._uses_solution = names is None and type(env.unwrapped).solution is not TextEnv.solution
        self._plan: Iterator[str] = iter(())
        self._position = 0

    def start_episode(self) -> None:
        """Called after each reset (outside the timed steps): fetch the plan if the env has one."""
        if self._uses_solution:
            plan = self._env.unwrapped.solution() or []
            self._plan = iter([f"<answer>{action}</answer>" for action in plan])

    def next(self) -> str:
        if self._named is not None:
            self._position = (self._position + 1) % len(self._named)
            return self._named[self._position]
        return next(self._plan, FALLBACK_COMPLETION)


def call_rates(call: Callable[[], Any], repeats: int, min_seconds: float) -> tuple[float, float]:
    """Median over ``repeats`` of ``call()``s per wall-clock second and per CPU second.

    Like :func:`benchmarks.common.rate`, with the CPU clock read beside the wall clock.
    """
    wall_rates, cpu_rates = [], []
    for _ in range(repeats):
        calls, wall_start, cpu_start = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - wall_start < min_seconds:
            call()
            calls += 1
        wall_rates.append(calls / (time.perf_counter() - wall_start))
        cpu_rates.append(calls / max(time.process_time() - cpu_start, 1e-9))
    return statistics.median(wall_rates), statistics.median(cpu_rates)


def reset_rates(env: gym.Env[Any, Any], repeats: int, min_seconds: float) -> tuple[float, float]:
    """Median over ``repeats`` of resets per wall-clock second and per CPU second."""
    return call_rates(env.reset, repeats, min_seconds)


def mid_episode_state(env: TextEnv, seed: int, steps: int = 3) -> Any:
    """A snapshot of ``env`` ``steps`` valid-looking steps after ``reset(seed=seed)`` (fewer if it ends)."""
    env.reset(seed=seed)
    completions = Completions(env)
    completions.start_episode()
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(completions.next())
        if terminated or truncated:
            break
    return env.get_state()


def snapshot_rates(env_id: str, repeats: int, min_seconds: float) -> dict[str, Any]:
    """Snapshots/s, restores/s (same level) and restores/s to a new level, wall-clock and CPU."""
    env = gym.make(env_id).unwrapped
    try:
        states = [mid_episode_state(env, seed) for seed in (1, 2)]
    except SnapshotNotSupported as error:
        return {"snapshots_per_s": None, "restores_per_s": None, "restores_new_level_per_s": None,
                "snapshot_error": str(error)}
    alternating = itertools.cycle(states)
    calls = {
        "snapshots": env.get_state,
        "restores": lambda: env.set_state(states[1]),
        "restores_new_level": lambda: env.set_state(next(alternating)),
    }
    figures: dict[str, Any] = {}
    for name, call in calls.items():
        call_rates(call, 1, min_seconds / 4)  # warm-up
        figures[f"{name}_per_s"], figures[f"{name}_per_cpu_s"] = call_rates(call, repeats, min_seconds)
    figures["snapshot_bytes"] = len(pickle.dumps(states[1]))
    env.close()
    return figures


def step_rates(env: gym.Env[Any, Any], repeats: int, min_seconds: float) -> tuple[float, float]:
    """Median over ``repeats`` of steps per wall-clock and per CPU second spent inside ``step``."""
    completions = Completions(env)
    wall_rates, cpu_rates = [], []
    episode_over = True
    for _ in range(repeats):
        steps, wall, cpu = 0, 0.0, 0.0
        while wall < min_seconds:
            if episode_over:
                env.reset()
                completions.start_episode()
            batch = [completions.next() for _ in range(64)]
            wall_start, cpu_start = time.perf_counter(), time.process_time()
            for completion in batch:
                _, _, terminated, truncated, _ = env.step(completion)
                steps += 1
                episode_over = terminated or truncated
                if episode_over:
                    break
            wall += time.perf_counter() - wall_start
            cpu += time.process_time() - cpu_start
        wall_rates.append(steps / wall)
        cpu_rates.append(steps / max(cpu, 1e-9))
    return statistics.median(wall_rates), statistics.median(cpu_rates)


def measure(env_id: str, wrapped: bool, repeats: int, min_seconds: float) -> dict[str, float]:
    made = gym.make(env_id)
    env = made if wrapped else made.unwrapped
    env.reset(seed=0)
    reset_rates(env, 1, min_seconds / 4)  # warm-up: caches, lazy imports
    step_rates(env, 1, min_seconds / 4)
    resets_per_s, resets_per_cpu_s = reset_rates(env, repeats, min_seconds)
    steps_per_s, steps_per_cpu_s = step_rates(env, repeats, min_seconds)
    made.close()
    return {
        "resets_per_s": resets_per_s,
        "steps_per_s": steps_per_s,
        "resets_per_cpu_s": resets_per_cpu_s,
        "steps_per_cpu_s": steps_per_cpu_s,
    }


def vector_figures_in_child(quick: bool) -> dict[str, Any]:
    """Run ``benchmarks.vector_throughput`` in a child process (all cores) and return its figures."""
    command = [sys.executable, "-m", "benchmarks.vector_throughput"] + (["--repeats", "3"] if quick else [])
    every_core = range(os.cpu_count() or 1)
    subprocess.run(command, check=True, cwd=Path(__file__).resolve().parent.parent,
                   preexec_fn=lambda: os.sched_setaffinity(0, every_core))
    payload = json.loads((RESULTS_DIR / "vector_throughput.json").read_text())
    return {key: payload[key] for key in ("env_id", "num_envs", "num_workers", "figures", "ratios", "targets")
            if key in payload}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", nargs="+", default=None, help="env ids (default: every registered id)")
    parser.add_argument("--quick", action="store_true", help="3 short repetitions instead of 5")
    parser.add_argument("--no-vector", action="store_true", help="skip the vector-env figures (256 Sokoban-v0 envs)")
    args = parser.parse_args(argv)
    env_ids = args.ids or llmgym.env_ids()
    repeats, min_seconds = (3, 0.05) if args.quick else (5, 0.3)
    load_start = os.getloadavg()
    core = pin_to_one_core()
    results: dict[str, dict[str, float]] = {}
    wrapped: dict[str, dict[str, float]] = {}
    for env_id in env_ids:
        results[env_id] = measure(env_id, wrapped=False, repeats=repeats, min_seconds=min_seconds)
        results[env_id].update(snapshot_rates(env_id, repeats, min_seconds))
        if env_id in WRAPPED_IDS:
            wrapped[env_id] = measure(env_id, wrapped=True, repeats=repeats, min_seconds=min_seconds)
        print(f"{env_id}: {results[env_id]}", flush=True)
    # The vector figures need every core, and this process is pinned to one: measure them in a
    # child process (benchmarks/vector_throughput.py) and keep its figures beside ours.
    vector = None if args.no_vector else vector_figures_in_child(args.quick)
    path = write_result(
        "env_throughput",
        {
            "settings": {"repeats": repeats, "min_seconds": min_seconds, "core": core, "quick": args.quick},
            "load_average": {"start": [round(v, 2) for v in load_start], "end": [round(v, 2) for v in os.getloadavg()]},
            "unwrapped": results,
            "gym_make_wrapped": wrapped,
            "vector": vector,
        },
    )
    rows = [
        (env_id, how, figures["resets_per_s"], figures["steps_per_s"], figures["resets_per_cpu_s"],
         figures["steps_per_cpu_s"])
        for how, measured in (("unwrapped", results), ("gym.make", wrapped))
        for env_id, figures in measured.items()
    ]
    header = ["env", "measured", "resets/s", "steps/s", "resets/CPU-s", "steps/CPU-s"]
    print(markdown_table(header, rows))
    snapshot_rows = [
        (env_id, figures["snapshots_per_s"], figures["restores_per_s"], figures["restores_new_level_per_s"],
         figures.get("snapshot_bytes"))
        for env_id, figures in results.items()
    ]
    print(markdown_table(["env", "snapshots/s", "restores/s", "restores/s (new level)", "snapshot bytes"],
                         snapshot_rows))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
