"""Vector-env throughput: many Sokoban envs per backend, beside Gymnasium's AsyncVectorEnv.

For each of llmgym's backends (inline, thread, process) and for Gymnasium's
``AsyncVectorEnv`` (one process per sub-env, pipes; with and without shared memory), all
in one run:

* resets/s: sub-env resets per second, ``venv.reset()`` of all ``num_envs`` sub-envs at a
  time, each drawing (and, for Sokoban, generating and solving) a fresh level;
* steps/s: sub-env steps per second, ``venv.step(actions)`` of all sub-envs with moves
  cycled over the four directions, Gymnasium's default ``NEXT_STEP`` autoreset on both sides;
* startup_s: seconds to build the vector env (worker start included).

The ratios are what count on a shared, noisy machine: ``process / inline`` resets (target
>= 1.7 on 2 cores) and ``best llmgym / Gymnasium async`` steps (target >= 1). Beside them,
``machine_parallel_speedup``: what ``num_workers`` busy processes get done over one at that
moment, the ceiling for any process-based speed-up (other jobs on a shared machine lower it).

Run: ``python -m benchmarks.vector_throughput [--num-envs 256] [--env-id llmgym/Sokoban-v0]``.
Writes ``benchmarks/results/vector_throughput.json``.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym

import llmgym
from benchmarks.common import markdown_table, write_result
from llmgym.vector import make_vector_env

MOVES = ("<answer>Up</answer>", "<answer>Right</answer>", "<answer>Down</answer>", "<answer>Left</answer>")
RESULT_NAME = "vector_throughput"


def vectorizers(
    env_id: str, num_envs: int, num_workers: int
) -> dict[str, Callable[[], gym.vector.VectorEnv]]:
    """Name -> constructor of each vector env compared."""
    return {
        "llmgym inline": lambda: make_vector_env(env_id, num_envs, backend="inline"),
        "llmgym thread": lambda: make_vector_env(env_id, num_envs, backend="thread", num_workers=num_workers),
        "llmgym process": lambda: make_vector_env(
            env_id, num_envs, backend="process", num_workers=num_workers
        ),
        "gymnasium async": lambda: gym.make_vec(
            env_id, num_envs, vectorization_mode="async", vector_kwargs={"shared_memory": False}
        ),
        "gymnasium async, shared memory": lambda: gym.make_vec(
            env_id, num_envs, vectorization_mode="async", vector_kwargs={"shared_memory": True}
        ),
    }


def _spin(seconds: float, counts: Any) -> None:
    deadline, loops = time.perf_counter() + seconds, 0
    while time.perf_counter() < deadline:
        for _ in range(10_000):
            pass
        loops += 1
    counts.put(loops)


def parallel_speedup(num_processes: int, seconds: float = 1.0) -> float:
    """Work ``num_processes`` busy processes get done over what one gets, right now.

    The ceiling of any multi-process speed-up on this machine at this moment: on a shared
    machine other people's jobs take cores, and a process backend cannot beat this figure.
    """
    ctx = multiprocessing.get_context("forkserver")
    totals = []
    for count in (1, num_processes):
        counts = ctx.Queue()
        workers = [ctx.Process(target=_spin, args=(seconds, counts)) for _ in range(count)]
        for worker in workers:
            worker.start()
        totals.append(sum(counts.get() for _ in workers))
        for worker in workers:
            worker.join()
    return totals[1] / totals[0]


def build(make: Callable[[], gym.vector.VectorEnv]) -> tuple[gym.vector.VectorEnv, float]:
    """A started, reset vector env and the seconds that took (worker start included)."""
    started = time.perf_counter()
    venv = make()
    venv.reset(seed=0)
    return venv, time.perf_counter() - started


def interleaved_rates(
    calls: dict[str, Callable[[], int]], min_seconds: float
) -> dict[str, float]:
    """Units per second of each call, the calls taken in turn until each has run ``min_seconds``.

    Taking turns call by call (not one vector env after the other) makes a change in the
    shared machine's load hit every vector env alike, which is what keeps ratios meaningful.
    """
    units = dict.fromkeys(calls, 0)
    seconds = dict.fromkeys(calls, 0.0)
    while any(elapsed < min_seconds for elapsed in seconds.values()):
        for name, call in calls.items():
            if seconds[name] < min_seconds:
                started = time.perf_counter()
                units[name] += call()
                seconds[name] += time.perf_counter() - started
    return {name: units[name] / seconds[name] for name in calls}


def reset_call(venv: gym.vector.VectorEnv, num_envs: int) -> Callable[[], int]:
    """One vector reset, each sub-env drawing a fresh level; returns the sub-env resets done."""
    def call() -> int:
        venv.reset()
        return num_envs

    return call


def step_call(venv: gym.vector.VectorEnv, num_envs: int) -> Callable[[], int]:
    """One vector step, moves cycled over the directions; returns the sub-env steps done."""
    batches = [
        tuple(MOVES[(turn + index) % len(MOVES)] for index in range(num_envs)) for turn in range(len(MOVES))
    ]
    turns = itertools.count()

    def call() -> int:
        venv.step(batches[next(turns) % len(batches)])
        return num_envs

    return call


def vector_figures(
    env_id: str = "llmgym/Sokoban-v0", num_envs: int = 256, num_workers: int | None = None, repeats: int = 5
) -> dict[str, Any]:
    """Every vectorizer's figures and the target ratios, measured in this one call.

    Each figure is the median over ``repeats`` rounds; within a round the vector envs take
    turns call by call (see :func:`interleaved_rates`).
    """
    num_workers = num_workers or len(os.sched_getaffinity(0))
    speedup_before = parallel_speedup(num_workers)
    venvs: dict[str, gym.vector.VectorEnv] = {}
    startup: dict[str, float] = {}
    resets: dict[str, list[float]] = {}
    steps: dict[str, list[float]] = {}
    try:
        for name, make in vectorizers(env_id, num_envs, num_workers).items():
            venvs[name], startup[name] = build(make)
        for _ in range(repeats):  # each vector env gets 1 s of calls per figure per round
            reset_rates = interleaved_rates({name: reset_call(v, num_envs) for name, v in venvs.items()}, 1)
            step_rates = interleaved_rates({name: step_call(v, num_envs) for name, v in venvs.items()}, 1)
            for name in venvs:
                resets.setdefault(name, []).append(reset_rates[name])
                steps.setdefault(name, []).append(step_rates[name])
    finally:
        for venv in venvs.values():
            venv.close()
    speedups = [speedup_before, parallel_speedup(num_workers)]
    figures = {
        name: {"startup_s": startup[name], "resets_per_s": statistics.median(resets[name]),
               "steps_per_s": statistics.median(steps[name])}
        for name in venvs
    }
    steps_per_s = {name: figure["steps_per_s"] for name, figure in figures.items()}
    llmgym_best_steps = max(value for name, value in steps_per_s.items() if name.startswith("llmgym"))
    gymnasium_best_steps = max(value for name, value in steps_per_s.items() if name.startswith("gymnasium"))
    ratios = {
        "process_over_inline_resets": (
            figures["llmgym process"]["resets_per_s"] / figures["llmgym inline"]["resets_per_s"]
        ),
        "llmgym_best_over_gymnasium_async_steps": llmgym_best_steps / steps_per_s["gymnasium async"],
        "llmgym_best_over_gymnasium_best_steps": llmgym_best_steps / gymnasium_best_steps,
    }
    return {
        "env_id": env_id,
        "num_envs": num_envs,
        "num_workers": num_workers,
        "repeats": repeats,
        # A busy loop in num_workers processes over one, before and after: the machine's ceiling.
        "machine_parallel_speedup": statistics.mean(speedups),
        "machine_parallel_speedup_before_after": speedups,
        "figures": figures,
        "ratios": ratios,
        "targets": {"process_over_inline_resets": 1.7, "llmgym_best_over_gymnasium_async_steps": 1.0},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-id", default="llmgym/Sokoban-v0", choices=llmgym.env_ids())
    parser.add_argument("--num-envs", type=int, default=256)
    parser.add_argument("--num-workers", type=int, default=None, help="threads / processes (default: cores)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds; figures are medians")
    args = parser.parse_args()
    result = vector_figures(args.env_id, args.num_envs, args.num_workers, args.repeats)
    rows = [
        (name, figure["resets_per_s"], figure["steps_per_s"], figure["startup_s"])
        for name, figure in result["figures"].items()
    ]
    print(f"{args.env_id}, {args.num_envs} sub-envs, {result['num_workers']} workers")
    print(markdown_table(("vector env", "resets/s", "steps/s", "startup s"), rows))
    for name, value in result["ratios"].items():
        print(f"{name}: {value:.2f}")
    print(f"machine_parallel_speedup ({result['num_workers']} busy processes over 1): "
          f"{result['machine_parallel_speedup']:.2f}")
    print(f"wrote {write_result(RESULT_NAME, result)}")


if __name__ == "__main__":
    main()
