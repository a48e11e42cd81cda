"""Train the embedded SmolLM2-135M on FrozenLake for about 10 minutes on a CPU, and print the change.

    python scripts/demo_train.py [--output runs/demo] [--minutes 10] [key=value ...]

This is ``llmgym-train`` with the learning-curve benchmark's ``frozenlake-v1`` recipe
(:mod:`benchmarks.learning_curve`): ``llmgym/FrozenLake-v1`` (one token per cell, the
player's coordinates), the ``markov`` agent (each turn sees the system prompt and the latest
map only), GRPO with step advantages among turns from the same state, 3x3 and 4x4 lakes.
Evaluation plays the first 32 levels of the frozen 4x4 eval set, greedy, before and after.

Beside before/after it prints what three agents score on the same 32 levels: the best fixed
move sequence played blind (found by exhaustive search), a random agent, and the optimal
solver. A model that beats the blind route reads the map; one that matches it has only learnt
to head for the corner. Training stops after ``--minutes`` of wall time (the first
evaluation is not counted). Any config key can be overridden as ``key=value``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo's benchmarks/ folder

from benchmarks.baselines import compute_baselines, eval_records  # noqa: E402
from benchmarks.learning_curve import config_overrides, preset_for  # noqa: E402
from llmgym.error import Error  # noqa: E402
from llmgym_train.config import TrainConfig, load_config  # noqa: E402

ENV_ID = "llmgym/FrozenLake-v1"
EVAL_LEVELS = 32


def demo_config(output: str, minutes: float, overrides: list[str]) -> TrainConfig:
    """The recipe, stopped by wall time (``max_minutes``) rather than by a step count."""
    _, preset = preset_for(ENV_ID, None)
    recipe = config_overrides(ENV_ID, preset, seed=0, minutes=minutes, output=output)
    return load_config(overrides=[
        *recipe, f"eval.levels={EVAL_LEVELS}", "eval.every=0", "checkpoint_every=0", "progress=true", *overrides,
    ])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="runs/demo", help="run folder")
    parser.add_argument("--minutes", type=float, default=10.0, help="approximate training time")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args()
    try:
        config = demo_config(args.output, args.minutes, args.overrides)
    except Error as error:
        print(f"demo_train: {error}")
        return 2
    eval_options = dict(config.validation_envs[0].options)
    print(f"Baselines on the first {config.eval.levels} levels of the {ENV_ID} eval set (exhaustive search) ...")
    baselines = compute_baselines(ENV_ID, eval_records(ENV_ID, config.eval.levels), eval_options)
    from llmgym_train.trainer import Trainer

    started = time.perf_counter()
    with Trainer(config) as trainer:
        summary = trainer.train()
    minutes = (time.perf_counter() - started) / 60
    before, after = summary.eval_before.get(ENV_ID), summary.eval_after.get(ENV_ID)
    blind = baselines["blind_route"]
    rows = [
        ("SmolLM2-135M before training", before),
        (f"SmolLM2-135M after {summary.step} steps", after),
        (f"best blind route ({' '.join(blind['route'])})", blind["success"]),
        ("random moves", baselines["random"]["success"]),
        ("optimal solver", baselines["optimal"]["success"]),
    ]
    print(f"\nGreedy success on {config.eval.levels} levels of the {ENV_ID} eval set:")
    for name, value in rows:
        print(f"  {name:<48} {'-' if value is None else format(value, '.1%')}")
    print(f"Run folder: {summary.output} (learning curve: {summary.curve}; logs: run.log)  [{minutes:.1f} minutes]")
    return 0 if summary.completed else 1


if __name__ == "__main__":
    raise SystemExit(main())
