"""Benchmark: SmolLM2-135M trained with GRPO on ``llmgym/FrozenLake-v0`` on this CPU.

    python -m benchmarks.learning_curve [--minutes 40] [key=value ...]

Runs the trainer for a wall-clock budget (steps are chosen from a measured step time, and the
run stops early if the budget runs out), then writes ``benchmarks/results/learning_curve.json``
with ``eval_success_before``, ``eval_success_after``, ``env``, ``model``, ``minutes`` and the
config, and copies the curve PNG next to it. Not a test: it takes the CPU for up to an hour.
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
    f"train_envs=[{{id: {ENV_ID}, n_groups: 4, options: {{max_turns: 2, max_actions_per_turn: 8}}}}]",
    "rollout.backend=vllm",
    "rollout.group_size=8",
    "rollout.max_new_tokens=48",
    "rollout.max_model_len=768",
    "optim.lr=2e-5",
    "optim.micro_batch_size=8",
    "loss.aggregation=seq-mean-token-mean",
    "eval.levels=64",
    "eval.every=10",
    "checkpoint_every=10",
    "progress=false",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=40.0, help="wall-clock budget of the training run")
    parser.add_argument("--seconds-per-step", type=float, default=30.0, help="measured step time, to size the run")
    parser.add_argument("--output", default="runs/learning_curve")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args()
    steps = max(1, int(args.minutes * 60 / args.seconds_per_step))
    config = load_config(overrides=[*PRESET, f"steps={steps}", f"output={args.output}", *args.overrides])
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
