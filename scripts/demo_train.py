"""Train the embedded SmolLM2-135M on FrozenLake for about 10 minutes on a CPU, and print the change.

    python scripts/demo_train.py [--output runs/demo] [--minutes 10] [key=value ...]

This is ``llmgym-train`` with a preset for a small machine: vLLM generation, GRPO, full
fine-tuning, short episodes on ``llmgym/FrozenLake-v0`` with a 2x2 lake, and 32 eval levels
(eval seeds, since the frozen eval set holds 4x4 lakes). Training stops after ``--minutes``
of wall time (the first evaluation is not counted); the script then prints the greedy eval
success before and after, and where the learning curve is. Any config key can be
overridden as ``key=value`` (see ``llmgym-train --help``).
"""

from __future__ import annotations

import argparse
import time

from llmgym.error import Error
from llmgym_train.config import TrainConfig, load_config
from llmgym_train.trainer import Trainer

PRESET = [
    "algo=grpo",
    "model=smollm2-135m",
    # A 2x2 lake: the goal is two moves away. The base model rarely writes the answer tag, so
    # the lenient parser also takes the last move it names: that gives GRPO groups reward
    # variance from the first step. Eval plays the same options, so before/after compare.
    # Four groups a step and a moderate learning rate: with two groups and lr 1e-4 the policy
    # sometimes settled on a valid move that never reaches the goal (e.g. always Down) before
    # any group had a success, and then no group had reward variance left to learn from.
    "train_envs=[{id: llmgym/FrozenLake-v0, n_groups: 4, options: {size: 2, max_turns: 3, action_parser: lenient}}]",
    "rollout.backend=vllm",
    "rollout.group_size=8",
    # Six tokens hold one move ("Right-action:" and the like). With longer turns the model
    # rambles and the move it names last is close to random: sampled success then rises
    # while the greedy answer never settles on a move.
    "rollout.max_new_tokens=6",
    "rollout.max_model_len=512",
    "optim.lr=5e-5",
    "optim.micro_batch_size=8",
    "eval.levels=32",
    "eval.every=0",
    "eval.use_eval_set=false",
    "checkpoint_every=0",
    "steps=1000",
]


def demo_config(output: str, minutes: float, overrides: list[str]) -> TrainConfig:
    """The preset, stopped by wall time (``max_minutes``) rather than by a step count."""
    return load_config(overrides=[*PRESET, f"max_minutes={minutes}", f"output={output}", *overrides])


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
    started = time.perf_counter()
    with Trainer(config) as trainer:
        summary = trainer.train()
    minutes = (time.perf_counter() - started) / 60
    print(summary.describe())
    for env_id in summary.eval_before:
        before, after = summary.eval_before[env_id], summary.eval_after.get(env_id)
        print(f"Eval success on {env_id} (greedy, {config.eval.levels} eval levels): "
              f"before {before:.1%}, after {after if after is None else format(after, '.1%')}")
    print(f"Learning curve: {summary.curve}  ({minutes:.1f} minutes)")
    return 0 if summary.completed else 1


if __name__ == "__main__":
    raise SystemExit(main())
