"""Benchmark: SmolLM2-135M trained with GRPO on ``llmgym/FrozenLake-v0`` on this CPU.

    python -m benchmarks.learning_curve [--minutes 50] [key=value ...]

Trains for a wall-clock budget (``max_minutes``; the first evaluation is not counted), with a
greedy evaluation on the first 64 levels of the frozen eval set before, every 10 steps and
at the end. Writes ``benchmarks/results/learning_curve.json`` with ``eval_success_before``,
``eval_success_after``, ``env``, ``model``, ``minutes``, the eval curve and the config, and
copies the curve PNG next to it. Not a test: it takes the CPU for up to an hour.

The preset is the README demo's: one move a turn in at most 6 new tokens, read by the
lenient parser (the base model never writes the ``<answer>`` tag, so with the strict parser
every episode of the first steps is invalid and GRPO has no reward variance to learn from).
Training is a mixture of 2x2, 3x3 and 4x4 lakes (two groups each): on 4x4 alone the policy
settled on valid moves that never reach the goal before it ever saw a success, so no group
had reward variance left. Evaluation is the frozen 4x4 eval set, 10 turns.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from benchmarks.common import RESULTS_DIR, write_result
from llmgym_train.config import load_config
from llmgym_train.trainer import Trainer

ENV_ID = "llmgym/FrozenLake-v0"
MODEL = "smollm2-135m"

PRESET = [
    "algo=grpo",
    f"model={MODEL}",
    "train_envs=["
    f"{{id: {ENV_ID}, name: lake-2x2, n_groups: 2, options: {{size: 2, max_turns: 4, action_parser: lenient}}}}, "
    f"{{id: {ENV_ID}, name: lake-3x3, n_groups: 2, options: {{size: 3, max_turns: 7, action_parser: lenient}}}}, "
    f"{{id: {ENV_ID}, name: lake-4x4, n_groups: 2, options: {{size: 4, max_turns: 10, action_parser: lenient}}}}]",
    f"eval_envs=[{{id: {ENV_ID}, n_groups: 1, options: {{max_turns: 10, action_parser: lenient}}}}]",
    "rollout.backend=vllm",
    "rollout.group_size=8",
    "rollout.max_new_tokens=6",
    "rollout.max_model_len=768",
    "optim.lr=5e-5",
    "optim.micro_batch_size=8",
    "eval.levels=64",
    "eval.every=10",
    "checkpoint_every=10",
    "progress=false",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=50.0, help="wall-clock budget of the training run")
    parser.add_argument("--output", default="runs/learning_curve")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args()
    config = load_config(
        overrides=[*PRESET, "steps=100000", f"max_minutes={args.minutes}", f"output={args.output}", *args.overrides]
    )
    started = time.perf_counter()
    with Trainer(config) as trainer:
        summary = trainer.train()
    minutes = (time.perf_counter() - started) / 60
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    curve = RESULTS_DIR / "learning_curve.png"
    if summary.curve is not None:
        shutil.copyfile(summary.curve, curve)
    metrics = [json.loads(line) for line in (Path(args.output) / "metrics.jsonl").read_text().splitlines()]
    path = write_result("learning_curve", {
        "env": ENV_ID,
        "model": MODEL,
        "algo": config.algo,
        "minutes": round(minutes, 2),
        "steps": summary.step,
        "completed": summary.completed,
        "eval_levels": config.eval.levels,
        "eval_success_before": summary.eval_before.get(ENV_ID),
        "eval_success_after": summary.eval_after.get(ENV_ID),
        "eval_curve": [(r["step"], r["success_rate"]) for r in metrics if r["kind"] == "eval"],
        "train_success": [(r["step"], r.get("success_rate")) for r in metrics if r["kind"] == "train"],
        "curve_png": str(curve),
        "config": config.to_dict(),
    })
    print(summary.describe())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
