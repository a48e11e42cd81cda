"""Train the embedded SmolLM2-135M on FrozenLake for 60 steps (12.6 minutes on 2 cores); print the change.

    python scripts/demo_train.py [--recipe 3x3|v1] [--output runs/demo] [--steps 60] [--minutes 0]
        [--record] [key=value ...]

Two recipes, both ``llmgym-train`` with GRPO and vLLM generation:

* ``3x3`` (default): the package's ``frozenlake-v1`` recipe (``llmgym_train/recipes/``, as
  :mod:`benchmarks.learning_curve` applies it: ``llmgym/FrozenLake-v1``, one token per cell and the
  player's coordinates, the ``markov`` agent, a choice among the four moves at temperature 2,
  GiGPO-style step advantages) on 3x3 lakes with holes on 35% of cells (and one group of 2x2
  lakes), evaluated on the 24 distinct lakes that the first eval seeds give. These 3x3 lakes
  come in 51 maps: the 24 eval lakes are held out of training (``held_out_levels=24``), so the
  model trains on the other 27 and is scored on lakes it never played. Beside it the demo
  prints the best fixed route played blind on the same lakes: beating it takes reading the map.
* ``v1``: the package's ``frozenlake-v1`` recipe, as :mod:`benchmarks.learning_curve` applies it:
  ``llmgym/FrozenLake-v1`` (one token per cell, the player's coordinates), the ``markov``
  agent, GiGPO-style step advantages, 3x3 and 4x4 lakes, evaluated on the first 32 levels of
  the frozen 4x4 eval set (held out of training). On a 2-core CPU a step
  takes minutes: bound the run with ``--minutes`` (10 minutes show only its first steps).

Beside before/after the demo prints what three agents score on the same eval levels: the
best fixed move sequence played blind (exhaustive search), a random agent, and the optimal
solver. A model that beats the blind route reads the map. Training stops after ``--steps``
steps, or earlier after ``--minutes`` of wall time if given (the first evaluation is not
counted). A step budget gives the same steps and learning rates on a fast machine and a
slow one (sampling still differs: vLLM on a CPU ignores per-request seeds). Until 2026-11-28
the demo trained for 8 minutes, and a fresh clone on a day the machine ran slower fitted 36
steps into them and ended level with the blind route, where 50-79 steps ended above it. Any
config key can be overridden as ``key=value``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo's benchmarks/ folder

from benchmarks.baselines import compute_baselines  # noqa: E402
from benchmarks.common import RESULTS_DIR, write_result  # noqa: E402
from benchmarks.learning_curve import config_overrides, preset_for  # noqa: E402
from llmgym.error import Error  # noqa: E402
from llmgym.eval_sets import EVAL_SET_VERSION  # noqa: E402
from llmgym_train.config import TrainConfig, load_config  # noqa: E402
from llmgym_train.eval.results import provenance  # noqa: E402

EVAL_LEVELS = 32
#: The ``3x3`` recipe's eval lakes: distinct, and held out of its training draws. A 3x3 lake at 35%
#: holes has 51 maps; holding out 24 leaves 27 (47% of draws) to train on, 32 would leave 19 (25%).
EVAL_LAKES_3X3 = 24


#: The ``3x3`` recipe's lakes: holes on 35% of cells, where the best blind route scores 46.9% on the
#: 32 eval levels (at the 4x4 frozen eval set's 20%, 3x3 lakes let a fixed route score 65.6%).
LAKE_3X3 = {"size": 3, "frozen_probability": 0.65, "max_turns": 6, "action_parser": "lenient"}


def _lakes_3x3() -> list[str]:
    """The ``3x3`` recipe's training mixture (2x2 lakes for a first success, then 3x3) and eval levels.

    Training lakes cost a move into the edge 0.1 (``bump_penalty``): greedy play of a policy that
    has learnt a Down/Right mix otherwise walks into the bottom edge until the turns run out
    (one run each: 0% -> 0% without it, 0% -> 12.5% with it, ``benchmarks/results/recipe_trials``).

    A learning rate of 1e-4 on the layers above the first 20 (``model_options.frozen_layers=20``),
    decaying to a tenth over the run's steps (cosine, as the 4x4 recipe). Training only the top
    10 of 30 layers makes an update about twice as fast (``benchmarks/update_speed.py``), so eight
    minutes hold 60-70 steps instead of 30-34. At the full model's 5e-5 the top layers alone learnt
    less per step (43.8/59.4/50.0% for seeds 0-2, ``recipe_trials/demo-frozen20-seed*``); at 1e-4
    they reached 78.1/84.4/78.1% in 60-70 steps, where the full model at 5e-5 reached
    43.8/78.1/68.8% (``recipe_trials/demo-frozen20-lr1e-4-seed*`` and ``demo-cosine-seed*``).
    Without the decay the policy turns near-deterministic within about 30 steps, and then a late
    step can move it onto one move everywhere; a fresh clone's run trained to 88-100% sampled
    success and ended at 0% greedy after such a step (``recipe_trials/demo-fresh-clone-4ca6f42``,
    step 39).
    """
    lake_2x2 = {"size": 2, "max_turns": 4, "action_parser": "lenient", "bump_penalty": -0.1}
    lake_3x3 = {**LAKE_3X3, "bump_penalty": -0.1, "held_out_levels": EVAL_LAKES_3X3}
    train = [
        {"id": "llmgym/FrozenLake-v1", "name": "lake-2x2", "n_groups": 1, "options": lake_2x2},
        {"id": "llmgym/FrozenLake-v1", "name": "lake-3x3", "n_groups": 3, "options": lake_3x3},
    ]
    evaluation = [{"id": "llmgym/FrozenLake-v1", "name": "lake-3x3", "options": LAKE_3X3}]
    return [
        f"train_envs={json.dumps(train)}", f"eval_envs={json.dumps(evaluation)}", "eval.use_eval_set=false",
        f"eval.levels={EVAL_LAKES_3X3}",
        "optim.lr=1e-4", "optim.lr_schedule=cosine", "optim.lr_final=0.1", "model_options.frozen_layers=20",
    ]


def demo_config(
    recipe: str, output: str, steps: int, overrides: list[str], minutes: float = 0.0
) -> TrainConfig:
    """The recipe, stopped after ``steps`` training steps, or after ``minutes`` of training if sooner (0: no
    time limit); a decaying learning rate decays over whichever budget runs out first."""
    env_id = "llmgym/FrozenLake-v1"
    _, preset = preset_for(env_id, None)
    base = [*config_overrides(env_id, preset, seed=0, minutes=minutes, output=output), f"eval.levels={EVAL_LEVELS}"]
    if recipe == "3x3":
        base += _lakes_3x3()
    return load_config(overrides=[
        *base, f"steps={steps}", f"max_minutes={minutes}", "eval.every=0",
        "checkpoint_every=0", "progress=true", *overrides,
    ])


def eval_level_records(config: TrainConfig) -> list[dict]:
    """The levels the trainer evaluates on (frozen eval set, or eval seeds with the env's options)."""
    import gymnasium as gym

    from llmgym_train.eval import eval_levels

    spec = config.validation_envs[0]
    records = []
    for seed, options in eval_levels(spec.id, config.eval.levels, config.eval.use_eval_set, spec.options):
        if options is None:
            env = gym.make(spec.id, **spec.options)
            env.reset(seed=seed)
            options = {"level": env.unwrapped.level()}
        records.append({"seed": seed, **options})
    return records


def trained_eval_levels(config: TrainConfig, steps: int) -> int:
    """How many of the demo's eval lakes its ``steps`` training steps drew, compared by content (0 under the split)."""
    from llmgym_train.planner import eval_levels_trained_on

    counts = eval_levels_trained_on(config.train_envs, config.rollout.group_size, config.seed, steps,
                                    config.validation_envs, config.eval.levels, config.eval.use_eval_set)
    return sum(counts.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", choices=("3x3", "v1"), default="3x3", help="what to train (see above)")
    parser.add_argument("--output", default="runs/demo", help="run folder")
    parser.add_argument("--steps", type=int, default=60, help="training steps (8-16 s each on 2 CPU cores)")
    parser.add_argument("--minutes", type=float, default=0.0,
                        help="stop training after this many minutes even if steps are left (0: no time limit)")
    parser.add_argument("--record", action="store_true",
                        help="append the result to benchmarks/results/demo.json (the recorded demo runs)")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args()
    load_start = list(os.getloadavg())
    try:
        config = demo_config(args.recipe, args.output, args.steps, args.overrides, args.minutes)
    except Error as error:
        print(f"demo_train: {error}")
        return 2
    spec = config.validation_envs[0]
    env_id = spec.id
    print(f"Baselines on the {config.eval.levels} eval levels of {spec.label} (exhaustive search) ...")
    baselines = compute_baselines(env_id, eval_level_records(config), dict(spec.options))
    from llmgym_train.trainer import Trainer

    started = time.perf_counter()
    with Trainer(config) as trainer:
        summary = trainer.train()
    minutes = (time.perf_counter() - started) / 60
    trained_on = trained_eval_levels(config, summary.step)
    before, after = summary.eval_before.get(spec.label), summary.eval_after.get(spec.label)
    blind = baselines["blind_route"]
    rows = [
        ("SmolLM2-135M before training", before),
        (f"SmolLM2-135M after {summary.step} steps", after),
        (f"best blind route ({' '.join(blind['route'])})", blind["success"]),
        ("random moves", baselines["random"]["success"]),
        ("optimal solver", baselines["optimal"]["success"]),
    ]
    print(f"\nGreedy success on the {config.eval.levels} eval levels of {spec.label}:")
    for name, value in rows:
        print(f"  {name:<48} {'-' if value is None else format(value, '.1%')}")
    print(f"  eval levels drawn in training: {trained_on} (held out by the train/test split)")
    print(f"Run folder: {summary.output} (learning curve: {summary.curve}; logs: run.log)  [{minutes:.1f} minutes]")
    if args.record:
        stamp = provenance()
        run = {
            "eval_success_before": before, "eval_success_after": after, "steps": summary.step,
            "minutes": round(minutes, 2), "steps_budget": config.steps, "minutes_budget": config.max_minutes,
            "eval_levels": config.eval.levels, "eval_levels_trained_on": trained_on,
            "eval_set_version": EVAL_SET_VERSION, "teacher": None,
            "eval_env": spec.label, "eval_options": dict(spec.options), "overrides": args.overrides,
            "train_envs": [{"name": env.name, "n_groups": env.n_groups, "options": env.options}
                           for env in config.train_envs],
            "optim": {"lr": config.optim.lr, "lr_schedule": config.optim.lr_schedule,
                      "lr_final": config.optim.lr_final},
            "frozen_layers": config.model_options.frozen_layers,
            "seed": config.seed, "commit": stamp["commit"], "dirty": stamp["dirty"],
            "date": stamp["date"],
            "load_average_start": load_start, "load_average_end": list(os.getloadavg()),
        }
        print(f"recorded in {record_run(args.recipe, run, baselines)}")
    return 0 if summary.completed else 1


def record_run(recipe: str, run: dict[str, Any], baselines: dict[str, Any]) -> Path:
    """Append ``run`` to ``runs[recipe]`` of ``benchmarks/results/demo.json`` (earlier runs kept, for the range)."""
    path = RESULTS_DIR / "demo.json"
    document = json.loads(path.read_text()) if path.exists() else {}
    recipes = document.setdefault("recipes", {})
    # Runs on another eval-set version (before the train/test split) move aside: their levels differ.
    version = run.get("eval_set_version", 1)
    if any(old.get("eval_set_version", 1) != version for old in recipes.get(recipe, {}).get("runs", [])):
        document.setdefault("before_split", {})[recipe] = recipes.pop(recipe)
    entry = recipes.setdefault(recipe, {"runs": []})
    entry["baselines"] = baselines
    entry["runs"].append(run)
    afters = [r["eval_success_after"] for r in entry["runs"] if r["eval_success_after"] is not None]
    entry["eval_success_after_range"] = [min(afters), max(afters)] if afters else None
    return write_result("demo", document)


if __name__ == "__main__":
    raise SystemExit(main())
