"""JAX PPO reference runs: train on fresh levels within a time budget, save the curve and checkpoint.

For each env, one run of :func:`llmgym.jax.ppo.train` with the settings in :data:`PRESETS`
(chosen on validation levels, see :mod:`llmgym.jax.ppo`), stopped after ``--minutes`` of wall
time counted from the start (level generation and compiling included; a machine slowed by
other jobs still counts its time, so the load average is recorded at every curve point).

Writes, per env (``Name`` is the id without ``llmgym/``):

* ``benchmarks/results/jax_ppo/Name/``: the checkpoint, for ``--agents jax-ppo:<that folder>``;
* ``benchmarks/results/jax_ppo_Name.json``: settings, curve, timings, load, and the success
  on the frozen eval set measured in JAX (the leaderboard row is the official figure);
* ``benchmarks/results/jax_ppo_Name.png``: validation success (greedy and sampled) and
  training success over wall-clock minutes.

Run one env at a time, niced: ``nice -n 15 python -m benchmarks.jax_ppo --env FrozenLake-8x8-v0``;
then the leaderboard rows: ``python -m benchmarks.leaderboard --agents
jax-ppo:benchmarks/results/jax_ppo/FrozenLake-8x8-v0 --envs FrozenLake-8x8-v0 --merge``.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from benchmarks.common import RESULTS_DIR, provenance, write_result
from llmgym.eval_sets import EVAL_SET_VERSION
from llmgym.jax.cores import eval_levels, make_core
from llmgym.jax.ppo import PpoConfig, TrainResult, make_evaluate, save_checkpoint, train

#: The settings of each reference run.
PRESETS: dict[str, PpoConfig] = {
    "llmgym/FrozenLake-8x8-v0": PpoConfig(
        env_id="llmgym/FrozenLake-8x8-v0", network="egocentric", view_radius=3, hidden=64, num_envs=512, num_steps=32,
        num_minibatches=4, update_epochs=2, learning_rate=1e-3, total_steps=40_000_000, pool_size=50_000,
    ),
    "llmgym/Sokoban-v0": PpoConfig(
        env_id="llmgym/Sokoban-v0", network="egocentric", view_radius=3, hidden=128, num_envs=512, num_steps=32,
        num_minibatches=4, update_epochs=3, learning_rate=5e-4, total_steps=40_000_000, pool_size=100_000,
        train_max_turns=40,
    ),
}


def eval_set_success(result: TrainResult) -> dict[str, float]:
    """Success on every level of the frozen eval set, played in JAX, greedy and sampled."""
    config = result.config
    core = make_core(config.env_id, **config.env_options)
    levels = jax.tree.map(jnp.asarray, core.encode_levels(eval_levels(config.env_id)))
    evaluate = make_evaluate(config, core, core.max_turns or 200)
    key = jax.random.PRNGKey(config.seed + 1)
    return {mode: float(evaluate(result.params, levels, key, greedy=mode == "greedy").mean())
            for mode in ("greedy", "sample")}


def plot(name: str, curve: list[dict[str, float]], path: Path, title: str) -> Path:
    """Success over wall-clock minutes, with the env steps of the last point in the legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [point["seconds"] / 60 for point in curve]
    figure, axes = plt.subplots(figsize=(7, 4))
    for key, label in (("greedy_success", "validation, greedy"), ("sampled_success", "validation, sampled"),
                       ("train_success", "training episodes (sampled)")):
        axes.plot(minutes, [100 * point[key] for point in curve], label=label)
    axes.set_xlabel("wall-clock minutes (level generation and compiling included)")
    axes.set_ylabel("success %")
    axes.set_ylim(0, 100)
    axes.set_title(f"{title}: JAX PPO, one run, {curve[-1]['env_steps']:,} env steps")
    axes.legend(loc="lower right")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def run(env_id: str, minutes: float, overrides: dict[str, Any]) -> dict[str, Any]:
    config = replace(PRESETS[env_id], time_budget=60 * minutes, **overrides)
    name = env_id.split("/", 1)[-1]
    load_before = os.getloadavg()
    started = provenance()  # the code that trains; write_result records the commit at the end too
    result = train(config)
    load_after = os.getloadavg()
    folder = save_checkpoint(result, RESULTS_DIR / "jax_ppo" / name)
    figures = {
        "env_id": env_id,
        "provenance_at_start": started,
        "config": asdict(config),
        "checkpoint": str(folder.relative_to(RESULTS_DIR.parent.parent)),
        "act": result.act,
        "env_steps": result.env_steps,
        "eval_levels_trained_on": result.eval_levels_in_pool,
        "eval_set_version": EVAL_SET_VERSION,
        "teacher": None,
        "seconds": result.seconds,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "cpus": os.cpu_count(),
        "final_validation": {key: result.curve[-1][key] for key in ("greedy_success", "sampled_success")},
        "eval_set_success_jax": eval_set_success(result),
        "curve": result.curve,
        "note": "One run. Wall time counts level generation, compiling and any slowdown from other jobs "
                "on the machine (see the load averages); the leaderboard row is the official eval figure.",
    }
    path = write_result(f"jax_ppo_{name}", figures)
    plot(name, result.curve, path.with_suffix(".png"), name)
    print(f"wrote {path}, {path.with_suffix('.png')} and {folder}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", required=True, choices=[env.split("/", 1)[-1] for env in PRESETS])
    parser.add_argument("--minutes", type=float, default=28.0, help="wall-clock budget of the run")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    overrides = {} if args.seed is None else {"seed": args.seed}
    figures = run(f"llmgym/{args.env}", args.minutes, overrides)
    print(figures["final_validation"], figures["eval_set_success_jax"], figures["seconds"])


if __name__ == "__main__":
    main()
