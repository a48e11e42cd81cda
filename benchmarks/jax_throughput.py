"""JAX vector env throughput: 4,096 envs stepped by llmgym.jax against llmgym's Python vector envs.

All in one run, per env id (Sokoban-v0 and FrozenLake-8x8-v0 by default), sub-env steps per
second with random moves and autoreset:

* ``llmgym inline`` / ``llmgym process``: llmgym's Python vector envs, text completions in,
  text out (their only mode);
* ``jax text``: ``make_vector_env(id, n, backend="jax")``, the same completions in and the
  same text out (parsing and rendering in Python, the games in JAX);
* ``jax text, numeric actions``: the same vector env given action indices (no parsing);
* ``jax numeric``: :class:`llmgym.jax.GridVectorEnv`, action indices in and one-hot boards
  out, one compiled call per ``step`` from Python (NumPy in, NumPy out);
* ``jax numeric, compiled rollout``: :func:`llmgym.jax.step_batch` in a ``lax.scan`` of
  ``ROLLOUT_STEPS`` steps with actions drawn inside (how the PPO steps its envs).

The Python vector envs and the per-call JAX ones take turns call by call (see
:func:`benchmarks.vector_throughput.interleaved_rates`), so a change in the shared machine's
load hits them alike. ``jax_over_best_python``: ``jax numeric`` (per call, the conservative
figure) over the faster of inline and process, for each id; the top-level key is the lowest
over the ids. Goal: >= 20.

Jumanji's Sokoban (``jumanji.environments.Sokoban``, 10x10 levels from its offline
``ToyGenerator``) is measured by a separate interpreter given with ``--jumanji-python`` (Jumanji
is no dependency of llmgym), beside ``llmgym/Sokoban-10x10-3box-v0`` on the JAX side; without
one, the JSON says why it was not measured.

Run: ``nice -n 15 python -m benchmarks.jax_throughput [--num-envs 4096] [--jumanji-python PATH]``.
Writes ``benchmarks/results/jax_throughput.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from benchmarks.common import write_result
from benchmarks.vector_throughput import MOVES, interleaved_rates
from llmgym.jax import GridVectorEnv, levels_from_seeds, make_core, reset_batch, step_batch
from llmgym.jax.batch import observe_batch
from llmgym.vector import make_vector_env

RESULT_NAME = "jax_throughput"
#: Steps per compiled rollout call.
ROLLOUT_STEPS = 100
#: Levels in the pools the numeric envs draw their episodes from.
POOL_SIZE = 4096
JUMANJI_ID = "llmgym/Sokoban-10x10-3box-v0"


def text_step(venv: Any, num_envs: int, seed: int) -> Callable[[], int]:
    """One vector step with random move completions; returns the sub-env steps done."""
    rng = np.random.default_rng(seed)
    batches = [[MOVES[move] for move in rng.integers(0, 4, num_envs)] for _ in range(16)]
    counter = iter(range(1 << 62))

    def call() -> int:
        venv.step(batches[next(counter) % len(batches)])
        return num_envs

    return call


def index_step(venv: Any, num_envs: int, seed: int, as_list: bool) -> Callable[[], int]:
    """One vector step with random action indices (a list of ints for the text vector env)."""
    rng = np.random.default_rng(seed)
    batches = [rng.integers(0, 4, num_envs) for _ in range(16)]
    prepared = [batch.tolist() for batch in batches] if as_list else batches
    counter = iter(range(1 << 62))

    def call() -> int:
        venv.step(prepared[next(counter) % len(prepared)])
        return num_envs

    return call


def compiled_rollout_rate(env_id: str, num_envs: int, levels: list[Any], repeats: int) -> float:
    """Steps/s of ``ROLLOUT_STEPS`` steps of ``num_envs`` envs in one ``lax.scan`` (observations included)."""
    core = make_core(env_id)
    pool = jax.tree.map(jax.numpy.asarray, core.encode_levels(levels))

    def rollout(state: Any, key: jax.Array) -> tuple[Any, jax.Array]:
        def one(state: Any, step_key: jax.Array) -> tuple[Any, jax.Array]:
            action_key, reset_key = jax.random.split(step_key)
            actions = jax.random.randint(action_key, (num_envs,), 0, 4)
            state, result, _ = step_batch(core, pool, state, actions, reset_key)
            return state, observe_batch(core, state).sum() + result.reward.sum()

        return jax.lax.scan(one, state, jax.random.split(key, ROLLOUT_STEPS))

    compiled = jax.jit(rollout)
    key = jax.random.PRNGKey(0)
    state = reset_batch(core, pool, key, num_envs)
    state, checksum = compiled(state, key)
    jax.block_until_ready(checksum)
    rates = []
    for repeat in range(repeats):
        started = time.perf_counter()
        state, checksum = compiled(state, jax.random.PRNGKey(repeat + 1))
        jax.block_until_ready(checksum)
        rates.append(num_envs * ROLLOUT_STEPS / (time.perf_counter() - started))
    return statistics.median(rates)


def env_figures(env_id: str, num_envs: int, repeats: int, seconds: float) -> dict[str, Any]:
    """Every vector env's steps/s on ``env_id`` and the ratio to the best Python one."""
    startup: dict[str, float] = {}
    venvs: dict[str, Any] = {}

    def build(name: str, make: Callable[[], Any]) -> None:
        started = time.perf_counter()
        venvs[name] = make()
        venvs[name].reset(seed=0)
        startup[name] = time.perf_counter() - started

    levels = levels_from_seeds(env_id, range(POOL_SIZE))
    build("llmgym inline", lambda: make_vector_env(env_id, num_envs, backend="inline"))
    build("llmgym process", lambda: make_vector_env(env_id, num_envs, backend="process"))
    build("jax text", lambda: make_vector_env(env_id, num_envs, backend="jax"))
    build("jax numeric", lambda: GridVectorEnv(env_id, num_envs, levels=levels))
    calls = {
        "llmgym inline": text_step(venvs["llmgym inline"], num_envs, 1),
        "llmgym process": text_step(venvs["llmgym process"], num_envs, 1),
        "jax text": text_step(venvs["jax text"], num_envs, 1),
        "jax text, numeric actions": index_step(venvs["jax text"], num_envs, 2, as_list=True),
        "jax numeric": index_step(venvs["jax numeric"], num_envs, 3, as_list=False),
    }
    for call in calls.values():  # compile and warm up outside the timed rounds
        call()
    rounds: dict[str, list[float]] = {name: [] for name in calls}
    try:
        for _ in range(repeats):
            for name, rate in interleaved_rates(calls, seconds).items():
                rounds[name].append(rate)
    finally:
        for venv in venvs.values():
            venv.close()
    steps_per_s = {name: statistics.median(values) for name, values in rounds.items()}
    steps_per_s["jax numeric, compiled rollout"] = compiled_rollout_rate(env_id, num_envs, levels, repeats)
    best_python = max(steps_per_s["llmgym inline"], steps_per_s["llmgym process"])
    return {
        "steps_per_s": steps_per_s,
        "startup_s": startup,
        "jax_over_best_python": steps_per_s["jax numeric"] / best_python,
        "jax_text_over_best_python": steps_per_s["jax text"] / best_python,
        "jax_compiled_rollout_over_best_python": steps_per_s["jax numeric, compiled rollout"] / best_python,
    }


#: Run by the ``--jumanji-python`` interpreter: prints one JSON line of figures.
JUMANJI_SCRIPT = r"""
import json, statistics, sys, time
import jax, numpy as np
import jumanji
from jumanji.environments import Sokoban
from jumanji.environments.routing.sokoban.generator import ToyGenerator
from jumanji.wrappers import VmapAutoResetWrapper
num_envs, steps, repeats = (int(arg) for arg in sys.argv[1:4])
env = VmapAutoResetWrapper(Sokoban(generator=ToyGenerator()))
state, timestep = jax.jit(env.reset)(jax.random.split(jax.random.PRNGKey(0), num_envs))
step = jax.jit(env.step)
def rollout(state, key):
    def one(state, key):
        state, timestep = env.step(state, jax.random.randint(key, (num_envs,), 0, 4))
        return state, timestep.reward.sum() + timestep.observation.grid.sum()
    return jax.lax.scan(one, state, jax.random.split(key, steps))
compiled = jax.jit(rollout)
rng = np.random.default_rng(0)
batches = [rng.integers(0, 4, num_envs) for _ in range(16)]
state, timestep = step(state, batches[0]); jax.block_until_ready(timestep.reward)
state, checksum = compiled(state, jax.random.PRNGKey(0)); jax.block_until_ready(checksum)
per_call, scanned = [], []
for repeat in range(repeats):
    started = time.perf_counter()
    for batch in batches:
        state, timestep = step(state, batch)
        np.asarray(timestep.observation.grid)
    per_call.append(num_envs * len(batches) / (time.perf_counter() - started))
    started = time.perf_counter()
    state, checksum = compiled(state, jax.random.PRNGKey(repeat + 1)); jax.block_until_ready(checksum)
    scanned.append(num_envs * steps / (time.perf_counter() - started))
print(json.dumps({"jumanji": jumanji.__version__, "jax": jax.__version__, "per_call_steps_per_s":
    statistics.median(per_call), "compiled_rollout_steps_per_s": statistics.median(scanned)}))
"""


def jumanji_figures(python: str | None, num_envs: int, repeats: int) -> dict[str, Any]:
    """Jumanji's Sokoban in ``python`` (an interpreter with jumanji), beside llmgym.jax's 10x10 Sokoban."""
    if python is None:
        return {"measured": False,
                "why": "no --jumanji-python given: Jumanji is no dependency of llmgym; install it in a "
                       "separate environment (`pip install jumanji`) and pass its interpreter."}
    completed = subprocess.run([python, "-c", JUMANJI_SCRIPT, str(num_envs), str(ROLLOUT_STEPS), str(repeats)],
                               capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        return {"measured": False, "why": f"the Jumanji run failed: {completed.stderr.strip()[-600:]}"}
    figures = json.loads(completed.stdout.strip().splitlines()[-1])
    levels = levels_from_seeds(JUMANJI_ID, range(POOL_SIZE))
    venv = GridVectorEnv(JUMANJI_ID, num_envs, levels=levels)
    venv.reset(seed=0)
    call = index_step(venv, num_envs, 4, as_list=False)
    call()
    rates = [interleaved_rates({"llmgym": call}, 1.0)["llmgym"] for _ in range(repeats)]
    llmgym = {"per_call_steps_per_s": statistics.median(rates),
              "compiled_rollout_steps_per_s": compiled_rollout_rate(JUMANJI_ID, num_envs, levels, repeats)}
    return {"measured": True, "jumanji_sokoban": figures, "llmgym_jax": {"env_id": JUMANJI_ID, **llmgym},
            "levels": "Jumanji: its ToyGenerator's two 10x10 4-box levels (offline); llmgym: generated 10x10 "
                      "3-box levels. Observations: Jumanji a (10, 10, 2) uint8 grid, llmgym a one-hot board."}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-ids", nargs="+", default=["llmgym/Sokoban-v0", "llmgym/FrozenLake-8x8-v0"])
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0, help="timed seconds per vector env per round")
    parser.add_argument("--jumanji-python", default=None, help="an interpreter with jumanji installed")
    args = parser.parse_args()
    load_before = os.getloadavg()
    per_env = {env_id: env_figures(env_id, args.num_envs, args.repeats, args.seconds) for env_id in args.env_ids}
    jumanji = jumanji_figures(args.jumanji_python, args.num_envs, args.repeats)
    figures = {
        "num_envs": args.num_envs,
        "repeats": args.repeats,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "jax_over_best_python": min(env["jax_over_best_python"] for env in per_env.values()),
        "goal_jax_over_best_python": 20.0,
        "envs": per_env,
        "jumanji": jumanji,
        "jax_devices": [str(device) for device in jax.devices()],
        "python": sys.version.split()[0],
    }
    path = write_result(RESULT_NAME, figures)
    for env_id, env in per_env.items():
        print(env_id)
        for name, rate in env["steps_per_s"].items():
            print(f"  {name:32s} {rate:>14,.0f} steps/s")
        print(f"  jax numeric / best python: {env['jax_over_best_python']:.1f}x")
    print(f"jumanji: {json.dumps(jumanji)[:400]}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
