"""Benchmark: credit assignment under one time budget: chains vs GiGPO-style step groups vs tree rollouts.

    python -m benchmarks.credit_assignment --arm chains|gigpo|tree --env llmgym/FrozenLake-v1 [--minutes 30] [key=value ...]

One arm per invocation, on the learning-curve preset of the env (:mod:`benchmarks.learning_curve`:
SmolLM2-135M, the ``markov`` agent, turn samples, GRPO, 8 episodes per group), changed only in
how a group's episodes are played and credited:

* ``chains``: 8 independent episodes per group, every turn gets its episode's group advantage
  (``loss.credit=episode``).
* ``gigpo``: the same episodes, plus a step advantage among the group's turns from the same
  env state (``loss.credit=gigpo``, the preset's own).
* ``tree``: 8 episodes per group played as a tree from env snapshots (``rollout.tree``:
  branches after turns 0, 2 and 4, two ways each), each branch trained once with its subtree's
  advantage (``loss.credit=tree``). Shared turns are played once, so a group costs fewer env
  steps and generated tokens.

Figures per arm: greedy eval success on the first 64 frozen eval levels before and after
``--minutes`` of training (and the curve), env steps and generated tokens per minute of
training (turns copied from a branch point counted once), steps, load average at the start and
end, commit, machine and versions. Results merge into ``<results-dir>/credit_assignment.json``
under ``runs[<Env>][<arm>]`` (an arm run again replaces its entry; the others stay), so the arms
can run one after another on a quiet machine.

Not a test: each arm takes the CPU for its budget plus model loading and evaluations.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS_DIR, write_result
from benchmarks.learning_curve import config_overrides, env_name, eval_spec, preset_for, train_seed
from llmgym.error import InvalidOptionError

RESULT_NAME = "credit_assignment"
#: The envs the comparison is made on (each with its learning-curve preset).
ENVS = ("llmgym/FrozenLake-v1", "llmgym/Sokoban-v1")
#: What each arm changes in the preset.
ARMS: dict[str, tuple[str, ...]] = {
    "chains": ("loss.credit=episode",),
    "gigpo": ("loss.credit=gigpo",),
    "tree": (
        "loss.credit=tree", "rollout.tree.branch_turns=[0,2,4]", "rollout.tree.branches=2", "rollout.tree.budget=8",
    ),
}


def arm_overrides(env_id: str, arm: str, seed: int, minutes: float, output: str) -> list[str]:
    """The env's preset as overrides, then the arm's changes."""
    if arm not in ARMS:
        raise InvalidOptionError(f"--arm must be one of {', '.join(ARMS)}; got {arm!r}.")
    _, preset = preset_for(env_id, None)
    return [*config_overrides(env_id, preset, seed, minutes, output), *ARMS[arm]]


def throughput(records: list[dict[str, Any]], train_minutes: float | None) -> dict[str, float | None]:
    """Env steps and generated tokens per minute of training, from the run's train records."""
    train = [record for record in records if record["kind"] == "train"]
    steps = sum(record.get("env_steps", 0.0) for record in train)
    tokens = sum(record.get("tokens/generated", 0.0) for record in train)
    per_minute = (lambda total: round(total / train_minutes, 1)) if train_minutes else (lambda total: None)
    return {
        "env_steps": steps,
        "generated_tokens": tokens,
        "env_steps_per_minute": per_minute(steps),
        "generated_tokens_per_minute": per_minute(tokens),
    }


def merge_run(document: dict[str, Any] | None, env_id: str, arm: str, run: dict[str, Any]) -> dict[str, Any]:
    """``document`` with ``runs[Env][arm]`` replaced by ``run`` (other entries kept)."""
    document = dict(document or {})
    runs = {name: dict(arms) for name, arms in document.get("runs", {}).items()}
    runs.setdefault(env_name(env_id), {})[arm] = run
    document["runs"] = runs
    document["summary"] = {
        env: {name: {key: entry.get(key) for key in ("eval_success_after", "env_steps_per_minute",
                                                       "generated_tokens_per_minute", "steps", "minutes_budget")}
              for name, entry in arms.items()}
        for env, arms in runs.items()
    }
    return document


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arm", required=True, choices=sorted(ARMS), help="how groups are played and credited")
    parser.add_argument("--env", default=ENVS[0], help=f"registered id to train and evaluate ({', '.join(ENVS)})")
    parser.add_argument("--seed", type=int, default=0, help="the training seed")
    parser.add_argument("--minutes", type=float, default=30.0, help="wall-clock budget of training")
    parser.add_argument("--output", help="run folder (default runs/credit_assignment/<Name>/<arm>)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where the JSON goes")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="llmgym_train config overrides, last")
    args = parser.parse_args(argv)
    from llmgym_train.config import load_config

    output = args.output or f"runs/credit_assignment/{env_name(args.env)}/{args.arm}"
    config = load_config(overrides=[*arm_overrides(args.env, args.arm, args.seed, args.minutes, output), *args.overrides])
    spec = eval_spec(config, args.env)
    results_dir = args.results_dir.resolve()
    curves = results_dir / RESULT_NAME / args.arm
    curves.mkdir(parents=True, exist_ok=True)
    run = train_seed(config, args.env, spec.label, curves)
    records = [json.loads(line) for line in (Path(config.output) / "metrics.jsonl").read_text().splitlines() if line]
    run.update(throughput(records, run["train_minutes"]), arm=args.arm, overrides=list(args.overrides))
    path = results_dir / f"{RESULT_NAME}.json"
    document = json.loads(path.read_text()) if path.is_file() else None  # reread: another arm may have finished
    print(f"wrote {write_result(RESULT_NAME, merge_run(document, args.env, args.arm, run), results_dir)}")


if __name__ == "__main__":
    main()
