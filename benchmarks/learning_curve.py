"""Benchmark: SmolLM2-135M trained on one env for a wall-clock budget, one seed per invocation.

    python -m benchmarks.learning_curve --env llmgym/FrozenLake-v0 --seed 0 [--minutes 50] [key=value ...]
    python -m benchmarks.learning_curve --env llmgym/Sokoban-v0 --baselines-only

Each invocation trains one seed (``seed=N`` in the trainer's config) for ``--minutes`` of
training (``max_minutes``; the first evaluation is not counted), with a greedy evaluation on
the first 64 levels of the frozen eval set of the id trained on, before, every 10 steps and at
the end. The preset (``--preset``, by default the one of the env's family) gives the training
mixture, the eval options and the trainer settings; ``key=value`` overrides go to
``llmgym_train``'s ``load_config`` after it.

Results: ``<results-dir>/learning_curve_<Name>.json`` (``Name`` is the id without its
namespace), one file per env and recipe (``learning_curve_<Name>_<preset>.json`` for a preset other
than the id's default). The seed's figures are merged into it, replacing an earlier entry
of the same seed and keeping the others, so seeds can run at different times and an
interrupted run loses only its own seed. Per-seed figures are lists in seed order (``seeds``,
``eval_success_before``, ``eval_success_after``, ``minutes`` (wall time of the run, model
loading and evaluations included), ``train_minutes`` (what ``--minutes`` bounds), ``config``,
``eval_curve``, the load average at the start and end of the run, its commit, machine and
versions, ``eval_success_by_level`` (the final evaluation, 1 or 0 a level in eval-set order),
``eval_called_tools_before`` / ``_after`` (envs with tools: per tool, the share of the first and the
last evaluation's episodes that ran it without error),
``eval_success_beyond_blind`` (success on those of the levels the best blind route fails), ...), with
``eval_success_after_mean`` beside them, and ``baselines`` (random, best blind route, optimal:
:mod:`benchmarks.baselines`) on the same levels under the same eval options. The run's curve
PNG is copied next to the JSON as ``learning_curve_<Name>_seed<N>.png``. Paths in the JSON are
relative to the repository. ``--baselines-only`` writes the baselines and trains nothing.
``--leaderboard DIR`` then plays the run's checkpoint on the whole eval set and merges its row
(and the base model's, when ``DIR`` has none for the id) into ``DIR/leaderboard.json``: run
folders are not kept with the results, so the row is made while the checkpoint is there.

Presets are the recipes that ship with ``llmgym_train`` (``llmgym_train/recipes/*.yaml``,
``llmgym-train --list-recipes``, ``docs/guides/recipes.md``), by name in :data:`PRESETS`; ``--env``
defaults to a recipe made for that id. Applied here, a recipe trains the ``--env`` id with its
settings. Why the recipes that learnt are as they are:

* ``frozenlake``: the README demo's. One move a turn in at most 6 new tokens, read by the
  lenient parser (the base model never writes the ``<answer>`` tag, so with the strict parser
  every episode of the first steps is invalid and GRPO has no reward variance to learn from).
  Training is a mixture of 2x2, 3x3 and 4x4 lakes (two groups each): on 4x4 alone the policy
  settled on valid moves that never reach the goal before it ever saw a success, so no group
  had reward variance left. Evaluation: the 4x4 eval set, 10 turns.
* ``frozenlake-v1`` (default for ``FrozenLake-v1``): one token per cell and the player's
  coordinates (v1); the ``markov`` agent (each turn sees the system prompt and the latest
  observation only, about 110 tokens, of which the shared system prompt runs once per
  micro-batch); a choice among the four moves (``rollout.choices``: each turn is one token
  after the prefix ``<answer>``, drawn from the model's distribution renormalized over
  ``Left``/``Down``/``Right``/``Up``); turn samples with GiGPO-style step advantages, centred
  only (``normalize_std=false``); a mixture of 2x2, 3x3 and 4x4 lakes (1, 2 and 3 groups);
  sampling at temperature 2 (the trained policy is the tempered choice, so this explores
  on-policy; evaluation stays greedy). At temperature 1 (1.0 nats on the first step's trained
  turns, against 1.29 at temperature 2) seed 0 swung between 0% and 47% over 40 minutes, ending at
  37.5%; at temperature 2 it rose steadily to 59.4% in the same 40 minutes
  (``benchmarks/results/recipe_trials/choice-temperature-2``). An evaluation every 10 steps
  (each takes half a minute to a minute of the budget). A cosine learning-rate decay to a
  tenth over the time budget: at a constant rate one seed reached 75% at step 70, then the
  policy turned near-deterministic and fell to 32.8%
  (``benchmarks/results/recipe_trials/constant-lr``); with the decay seed 0 rose at every
  evaluation to 67.2%.
  Free generation with an invalid-move penalty collapsed here: the base model writes a move in
  about 7% of turns, mostly ``Down``, so the first steps rewarded "any valid move" and the
  policy settled on one move (entropy 5.2 -> 0.03 in six steps) before any success.
* ``sokoban-v1`` (default for ``Sokoban-v1``): the markov agent and the choice among
  ``Up``/``Down``/``Left``/``Right`` after ``<answer>`` at temperature 2 (as ``frozenlake-v1``),
  trained with lookahead credit (``loss.credit=lookahead``): every move of every visited state is
  played from an env snapshot, and the update is the cross-entropy to the moves that earned the
  state's highest ``progress_reward`` (the exact solver's count of moves saved;
  ``loss.lookahead_target=greedy``), whose pull fades once the policy picks them. Rooms: 24 6x6
  one-box rooms a step that start at a uniformly drawn point of a fewest-moves solution
  (``start="solution"``), 4 turns each, no step penalty in training; 1e-4 after a 5-step warmup,
  with a cosine decay to a tenth; micro-batches of up to 6,144 tokens
  (``update.micro_batch_tokens=6144``: a step's turns share a 104-token prefix the forward runs
  once per micro-batch, so fewer, larger micro-batches make the same update faster); evaluation
  on the frozen set with the v1 defaults (30 turns) every 20 steps. Seeds 0, 1 and 2
  (``learning_curve_Sokoban-v1.json``, ``--minutes 120``) fit 222, 284 and 187 steps and
  went from 0% to 54.7%, 53.1% and 39.1%, mean 49.0%. At the default 2,048 tokens with an
  evaluation every 10 steps (``recipe_trials/sokoban-v1-tokens2048``) the three seeds fit 168,
  114 and 178 steps and ended at 31.2%, 4.7% and 31.2%, mean 22.4%. At 5e-5 for 90 minutes
  (``recipe_trials/sokoban-v1-on-solution-greedy``, 121 steps) it reached 18.8%; at equal steps
  it ran as the 1e-4 seed 0 did (14.1% at step 110 in both), so the longer budget, not the rate,
  made the difference (one seed each). The same recipe crediting the best moves minus their mean
  (``lookahead_target=best``, ``recipe_trials/sokoban-v1-on-solution``) ended at 1.6%; the
  recipes before it (GiGPO step advantages on 1-3-move rooms, REINFORCE++ on progress rewards,
  lookahead credit on the reward itself, a mixture of 3-move and full rooms) stayed at 0%
  (``benchmarks/results/recipe_trials/`` and the README).
* ``math-easy-grpo``, ``tool-calculator-grpo``, ``sokoban-v1-grpo``: the env's own rewards, no
  teacher (their files say why each setting). ``math-easy-grpo``: three seeds in
  ``learning_curve_Math-Easy-v0.json``. ``tool-calculator-grpo`` constrains every reply to a tool
  call or an answer (``rollout.constrain=tool_calls``, the evaluation's too) and the third and
  last turn to an answer; ``learning_curve_ToolUse-Calculator-v0.json``. ``sokoban-v1-grpo``: GRPO
  on four sampled moves a state, scored by a lookahead on the env's rewards; far below the issue's
  mark (seed 0: 3.1% greedy on the first 64 levels, 12.5% on all 200,
  ``recipe_trials/sokoban-v1-grpo-lookahead-draws4-t20``; seed 1: 0%, its training success
  rising only from step 60 of 97, ``learning_curve_Sokoban-v1_sokoban-v1-grpo.json``).
* ``sokoban``: a starting point, not a tuned recipe: the lenient parser, 6 new tokens a turn,
  20 turns (the first 64 eval levels need at most 19 moves), 4-sample micro-batches.

Not a test: a run takes the CPU for up to its budget plus model loading and evaluations.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.baselines import blind_route_solves, compute_baselines, eval_records
from benchmarks.common import RESULTS_DIR, provenance, write_result
from llmgym.error import InvalidOptionError, did_you_mean
from llmgym.eval_sets import EVAL_SET_VERSION
from llmgym_train.planner import EnvSpec, curriculum_of, eval_levels_trained_on, teacher_of
from llmgym_train.recipes import Recipe, all_recipes

REPO_ROOT = Path(__file__).resolve().parent.parent
#: Figures with one value per seed, kept as lists in seed order (``seeds`` is the key).
PER_SEED_KEYS = (
    "preset", "eval_success_before", "eval_success_after", "minutes", "train_minutes", "minutes_budget",
    "steps", "completed", "eval_levels_trained_on", "teacher", "curriculum", "eval_success_beyond_blind",
    "eval_success_by_level",
    "eval_called_tools_before", "eval_called_tools_after", "stop_reason", "eval_curve", "train_success",
    "load_average_start", "load_average_end", "curve_png",
    "output", "run_provenance", "config",
)


@dataclass(frozen=True)
class Preset:
    """A package recipe as this benchmark applies it: to the ``--env`` id, which need not be the recipe's own.

    Attributes:
        family: the env name prefix it is a default for (``FrozenLake`` for ``llmgym/FrozenLake-v1``).
        train_envs: training mixture entries (``name``, ``n_groups``, ``options``), without the id.
        eval_options: env options of the evaluation (and of the baselines).
        overrides: the recipe's other settings, as ``key=value``.
        teacher: what shaped the loss besides the env's rewards: ``"solver"``, or None.
        env: the id the recipe is made for.
    """

    family: str
    train_envs: tuple[dict[str, Any], ...]
    eval_options: dict[str, Any]
    overrides: tuple[str, ...] = field(default=())
    #: What shaped the loss besides the env's rewards: ``"solver"`` (the exact solver's best moves), or None.
    teacher: str | None = None
    #: The id the recipe is made for (``--env`` defaults to a recipe made for the id it names).
    env: str = ""


def preset_of(recipe: Recipe) -> Preset:
    """``recipe`` as a :class:`Preset`: its env entries without their id, its other settings as overrides."""
    config = dict(recipe.config)
    train = tuple({key: value for key, value in entry.items() if key != "id"} for entry in config.pop("train_envs"))
    evaluation = config.pop("eval_envs", [{}])
    overrides = tuple(f"{key}={_override_value(value)}" for key, value in _dotted(config).items())
    return Preset(family=recipe.family, train_envs=train, eval_options=dict(evaluation[0].get("options", {})),
                  overrides=overrides, teacher=recipe.teacher, env=recipe.env)


def _dotted(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"optim": {"lr": 1e-4}}`` -> ``{"optim.lr": 1e-4}`` (env entries, the only mappings among values, are popped before)."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_dotted(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _override_value(value: Any) -> str:
    """``value`` as the text after ``key=`` that ``load_config`` reads back as the same value."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


#: The recipes that ship with ``llmgym_train`` (``llmgym-train --list-recipes``), by name.
PRESETS: dict[str, Preset] = {recipe.name: preset_of(recipe) for recipe in all_recipes()}


def env_name(env_id: str) -> str:
    """``llmgym/FrozenLake-v0`` -> ``FrozenLake-v0``."""
    return env_id.split("/", 1)[-1]


def preset_for(env_id: str, name: str | None) -> tuple[str, Preset]:
    """The preset called ``name``, or (``None``) the first made for ``env_id``, else the first of its family."""
    if name is None:
        exact = [key for key, preset in PRESETS.items() if preset.env == env_id]
        family = env_name(env_id).split("-", 1)[0]
        matches = exact or [key for key, preset in PRESETS.items() if preset.family == family]
        if not matches:
            known = ", ".join(f"{key} ({preset.family})" for key, preset in PRESETS.items())
            raise InvalidOptionError(
                f"No preset for the env family {family!r} of {env_id}; presets: {known}. Pass --preset NAME."
            )
        # Within a family, the preset made for the id's version (``...-v1``), else the first.
        version = env_name(env_id).rsplit("-", 1)[-1]
        name = next((key for key in matches if key.endswith(f"-{version}")), matches[0])
    if name not in PRESETS:
        raise InvalidOptionError(
            f"Unknown preset {name!r}.{did_you_mean(name, PRESETS)} Presets: {', '.join(PRESETS)}."
        )
    return name, PRESETS[name]


def config_overrides(env_id: str, preset: Preset, seed: int, minutes: float, output: str) -> list[str]:
    """The preset as ``key=value`` overrides for ``env_id`` and one seed (user overrides go after)."""
    train = [{"id": env_id, **entry} for entry in preset.train_envs]
    evaluation = [{"id": env_id, "options": preset.eval_options}]
    return [
        *preset.overrides,
        f"train_envs={json.dumps(train)}",
        f"eval_envs={json.dumps(evaluation)}",
        f"seed={seed}",
        "progress=false",
        "steps=100000",
        f"max_minutes={minutes}",
        f"output={output}",
    ]


def eval_spec(config: Any, env_id: str) -> Any:
    """The entry of ``config.validation_envs`` for ``env_id``; its levels must be the frozen eval set."""
    specs = [spec for spec in config.validation_envs if spec.id == env_id]
    if not specs:
        raise InvalidOptionError(
            f"The config evaluates {[spec.id for spec in config.validation_envs]}, not {env_id}; "
            f"keep an eval_envs entry with id {env_id} (or drop an eval_envs override)."
        )
    if not config.eval.use_eval_set or config.eval.disabled:
        raise InvalidOptionError(
            "The learning curve is measured on the frozen eval set; got eval.use_eval_set=false or "
            "eval.disabled=true. Drop that override."
        )
    return specs[0]


# ---------------------------------------------------------------------- the results file
def result_name(env_id: str, preset: str | None = None) -> str:
    """``learning_curve_<Name>``, or ``learning_curve_<Name>_<preset>`` for a preset other than the id's
    default one: seeds of two recipes of one id (one taught by the solver, one on the env's rewards)
    are two learning curves, never one mean."""
    if preset is None or preset == preset_for(env_id, None)[0]:
        return f"learning_curve_{env_name(env_id)}"
    return f"learning_curve_{env_name(env_id)}_{preset}"


def repo_path(path: str | Path) -> str:
    """``path`` relative to the repository when inside it, else absolute."""
    resolved = Path(path).resolve()
    try:
        return str(resolved.relative_to(REPO_ROOT))
    except ValueError:
        return str(resolved)


def load_document(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def level_summary(env_id: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    """How the JSON names the eval levels: their count, seeds and eval-set file."""
    return {"count": len(records), "seeds": [int(record["seed"]) for record in records],
            "eval_set": f"llmgym/eval_sets/{env_name(env_id)}.jsonl"}


def check_compatible(document: dict[str, Any] | None, env_id: str, levels: dict[str, Any],
                     eval_options: dict[str, Any]) -> None:
    """Refuse to add a seed measured on other levels or eval options than the file's seeds."""
    if not document or not document.get("seeds"):
        return
    theirs = (document.get("env_id"), document.get("eval_levels", {}).get("seeds"),
              document.get("eval_options"))
    if theirs != (env_id, levels["seeds"], eval_options):
        raise InvalidOptionError(
            f"The results file holds seeds {document['seeds']} of {theirs[0]} evaluated on "
            f"{len(theirs[1] or [])} levels with eval options {theirs[2]}; this run is {env_id} on "
            f"{levels['count']} levels with {eval_options}. Seeds of one file must be comparable: use the "
            "same eval options, or another --results-dir."
        )


def merge_seed(document: dict[str, Any] | None, seed: int, run: dict[str, Any]) -> dict[str, Any]:
    """``document`` with ``run`` (the :data:`PER_SEED_KEYS` of one seed) as seed ``seed``'s entry.

    An earlier entry of the same seed is replaced; other seeds are kept.
    """
    return with_seed_rows(document, {**seed_rows(document), seed: run})


def seed_rows(document: dict[str, Any] | None) -> dict[int, dict[str, Any]]:
    """The per-seed figures of ``document``, by seed."""
    document = document or {}
    seeds = list(document.get("seeds", []))
    columns = {key: document.get(key) or [None] * len(seeds) for key in PER_SEED_KEYS}
    rows = {seed: {key: columns[key][index] for key in PER_SEED_KEYS} for index, seed in enumerate(seeds)}
    if "curriculum" not in document:  # written before runs recorded it: each seed's own config says
        for row in rows.values():
            config = row["config"] or {}
            train = [EnvSpec(**entry) for entry in config.get("train_envs") or []]
            evaluated = [EnvSpec(**entry) for entry in config.get("eval_envs") or []]
            row["curriculum"] = curriculum_of(train, evaluated or train)
    return rows


def with_seed_rows(document: dict[str, Any] | None, rows: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """``document`` whose per-seed lists hold ``rows`` in seed order, and their means."""
    document = dict(document or {})
    seeds = sorted(rows)
    document["seeds"] = seeds
    for key in PER_SEED_KEYS:
        document[key] = [rows[seed].get(key) for seed in seeds]
    for key in ("eval_success_before", "eval_success_after"):
        values = [value for value in document[key] if value is not None]
        document[f"{key}_mean"] = sum(values) / len(values) if values else None
    return document


def with_baselines(document: dict[str, Any] | None, env_id: str, records: list[dict[str, Any]],
                   eval_options: dict[str, Any], recompute: bool) -> dict[str, Any]:
    """``document`` holding baselines for these levels and options: kept when they match, else computed."""
    document = dict(document or {})
    levels = level_summary(env_id, records)
    old = document.get("baselines") or {}
    same = old.get("eval_options") == eval_options and document.get("eval_levels") == levels
    if recompute or not same:
        started = time.perf_counter()
        baselines = compute_baselines(env_id, records, eval_options)
        print(f"baselines on {len(records)} {env_id} levels in {time.perf_counter() - started:.1f} s: "
              + ", ".join(f"{name} {100 * value['success']:.1f}%" for name, value in baselines.items()))
        old = {**baselines, "eval_options": eval_options, "commit": provenance()["commit"]}
    document.update(env_id=env_id, eval_levels=levels, eval_options=eval_options, baselines=old,
                    eval_set_version=EVAL_SET_VERSION)
    return document


# ---------------------------------------------------------------------- one seed
def train_seed(
    config: Any, env_id: str, label: str, results_dir: Path, name: str | None = None, resume: bool = False
) -> dict[str, Any]:
    """Train ``config``; return the seed's :data:`PER_SEED_KEYS` figures (the curve PNG copied).

    ``label`` is what the trainer calls ``env_id``'s eval entry in its metrics. ``resume``: continue
    the run in ``config.output`` from its last checkpoint; ``minutes`` and the load averages are then
    this process's, and ``train_minutes`` the whole run's.
    """
    from llmgym_train.trainer import Trainer

    code = provenance()  # the code the run starts on: the tree may change during hours of training
    load_start = os.getloadavg()
    started = time.perf_counter()
    with Trainer(config, resume=resume) as trainer:
        summary = trainer.train()
        evaluation = trainer.last_evaluation
    by_level = None
    if evaluation is not None:  # the final evaluation's episodes of this env, in eval-set order
        by_level = [int(bool(t.success)) for t, tag in zip(evaluation.trajectories, evaluation.labels) if tag == label]
    minutes = (time.perf_counter() - started) / 60
    load_end = os.getloadavg()
    trained_on = eval_levels_trained_on(config.train_envs, config.rollout.group_size, config.seed, summary.step,
                                        config.validation_envs, config.eval.levels, config.eval.use_eval_set)
    output = Path(config.output)
    lines = (output / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    curve = None
    if summary.curve is not None:
        curve = results_dir / f"{name or result_name(env_id)}_seed{config.seed}.png"
        shutil.copyfile(summary.curve, curve)
    key = f"success_rate/{label}"
    eval_rows = [r for r in records if r["kind"] == "eval"]
    print(summary.describe())
    return {
        "eval_success_before": summary.eval_before.get(label),
        "eval_success_after": summary.eval_after.get(label),
        "minutes": round(minutes, 2),
        "train_minutes": _train_minutes(records),
        "minutes_budget": config.max_minutes,
        "steps": summary.step,
        "completed": summary.completed,
        "eval_levels_trained_on": trained_on.get(label),
        "eval_success_by_level": by_level,
        "eval_called_tools_before": called_tools(eval_rows[:1], label),
        "eval_called_tools_after": called_tools(eval_rows[-1:], label),
        "stop_reason": summary.stop_reason,
        "eval_curve": [[r["step"], r[key]] for r in eval_rows if key in r],
        "train_success": [[r["step"], r.get("success_rate")] for r in records if r["kind"] == "train"],
        "load_average_start": [round(value, 2) for value in load_start],
        "load_average_end": [round(value, 2) for value in load_end],
        "curve_png": None if curve is None else repo_path(curve),
        "output": repo_path(output),
        "run_provenance": code,
        "config": config.to_dict(),
    }


def called_tools(rows: list[dict[str, Any]], label: str) -> dict[str, float] | None:
    """Per tool, the share of ``label``'s eval episodes that ran it (``called_TOOL_rate/LABEL``), in the
    one row of ``rows``; ``None`` without a row or for envs without tools.
    """
    prefix, suffix = "called_", f"_rate/{label}"
    shares = {key[len(prefix) : -len(suffix)]: value for row in rows for key, value in row.items()
              if key.startswith(prefix) and key.endswith(suffix)}
    return shares or None


def success_beyond_blind(by_level: list[int] | None, blind_solves: list[bool] | None) -> float | None:
    """Success on the levels the best blind route fails: what reading the level adds to a fixed
    sequence of moves. ``None`` without per-level results, or when every level falls to the route."""
    if by_level is None or blind_solves is None or len(by_level) != len(blind_solves):
        return None
    beyond = [success for success, blind in zip(by_level, blind_solves) if not blind]
    return sum(beyond) / len(beyond) if beyond else None


def _train_minutes(records: list[dict[str, Any]]) -> float | None:
    """Minutes of training, what ``max_minutes`` bounds: from the end of the first evaluation to the
    last step, over every process of a resumed run (each process's clock starts at 0; its loop began
    at its first step's end less that step's duration).
    """
    total, start, last, clock = 0.0, None, None, -1.0
    for record in records:
        if record["time"] < clock:  # a resumed process: close the previous one's span
            total += 0.0 if start is None or last is None else last - start
            start = last = None
        clock = record["time"]
        if record["kind"] == "eval" and start is None and not total:
            start = clock  # the first evaluation, not counted
        elif record["kind"] == "train":
            if start is None:
                start = clock - record.get("time/total_s", 0.0)
            last = clock
    total += 0.0 if start is None or last is None else last - start
    return round(total / 60, 2) if total else None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="llmgym/FrozenLake-v0", help="registered id to train and evaluate")
    parser.add_argument("--seed", type=int, default=0, help="the training seed of this run")
    parser.add_argument("--minutes", type=float, default=50.0, help="wall-clock budget of training")
    parser.add_argument("--preset", choices=sorted(PRESETS), help="recipe (default: the env family's)")
    parser.add_argument("--output", help="run folder (default runs/learning_curve/<Name>[_<preset>]/seed<N>)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where the JSON and PNGs go")
    parser.add_argument("--resume", action="store_true",
                        help="continue the seed's run folder from its last checkpoint (a larger --minutes "
                             "extends it, and the lr schedule stretches over the new budget from there)")
    parser.add_argument("--baselines-only", action="store_true", help="compute and write the baselines only")
    parser.add_argument("--leaderboard", type=Path, metavar="DIR",
                        help="then merge the checkpoint's row on the whole eval set (and the base model's, "
                             "when DIR has none for the id) into DIR's leaderboard")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="llmgym_train config overrides")
    args = parser.parse_args(argv)
    if args.leaderboard is not None and args.baselines_only:
        parser.error("--leaderboard plays the run's checkpoint, and --baselines-only trains none; drop one")
    from llmgym_train.config import load_config

    preset_name, preset = preset_for(args.env, args.preset)
    name = result_name(args.env, preset_name)
    # One folder per env and recipe: two recipes' checkpoints of one seed are two leaderboard agents.
    output = args.output or f"runs/learning_curve/{name.removeprefix('learning_curve_')}/seed{args.seed}"
    config = load_config(overrides=[
        *config_overrides(args.env, preset, args.seed, args.minutes, output), *args.overrides,
    ])
    spec = eval_spec(config, args.env)
    eval_options = dict(spec.options)
    records = eval_records(args.env, config.eval.levels)
    results_dir = args.results_dir.resolve()
    path = results_dir / f"{name}.json"
    stored = load_document(path)
    check_compatible(stored, args.env, level_summary(args.env, records), eval_options)
    document = with_baselines(stored, args.env, records, eval_options, recompute=args.baselines_only)
    document = with_seed_rows(document, seed_rows(document))
    if not args.baselines_only:
        if document != stored:  # new baselines, written before hours of training; else the file and its provenance stay
            write_result(name, document, results_dir)
        run = train_seed(config, args.env, spec.label, results_dir, name, resume=args.resume)
        run["preset"] = preset_name
        route = (document.get("baselines") or {}).get("blind_route", {}).get("route")
        blind = None if route is None else blind_route_solves(args.env, records, eval_options, route)
        run["eval_success_beyond_blind"] = success_beyond_blind(run["eval_success_by_level"], blind)
        # What the run's training envs say, not what the recipe claims (an override can add a teacher).
        run["teacher"] = teacher_of(config.train_envs)
        # Which starts or levels the training envs' options picked (the solver may pick them: no teacher).
        run["curriculum"] = curriculum_of(config.train_envs, config.validation_envs)
        # Reread: another seed may have been merged while this one trained.
        document = merge_seed(load_document(path) or document, args.seed, run)
    print(f"wrote {write_result(name, document, results_dir)}")
    if args.leaderboard is not None:
        leaderboard_rows(args.env, output, args.leaderboard)


def leaderboard_rows(env_id: str, run: str, directory: Path) -> None:
    """Merge the run's checkpoint row on every level of ``env_id``'s eval set into ``directory``'s
    leaderboard, with the base model's row (played as the run plays) when ``directory`` has no base
    row for ``env_id``. Run folders are not kept with the results, so the row is made while the
    checkpoint exists. A separate process: the training engine's memory is gone before it starts.
    """
    existing = directory / "leaderboard.json"
    rows = json.loads(existing.read_text()).get("results", []) if existing.is_file() else []
    agents = leaderboard_agents(env_id, run, rows)
    command = [
        sys.executable, "-m", "llmgym_train.eval.leaderboard", "--agents", *agents, "--envs", env_id,
        "--output-dir", str(directory), "--merge", "--no-progress", "--record-episodes", "3",
    ]
    print("leaderboard rows: " + " ".join(command[1:]), flush=True)
    subprocess.run(command, check=True)


def leaderboard_agents(env_id: str, run: str, rows: list[dict[str, Any]]) -> list[str]:
    """The run's checkpoint, and its base model unless ``rows`` hold a base row for ``env_id``."""
    has_base = any(row["env_id"] == env_id and row["agent"].startswith("base:") for row in rows)
    return [f"checkpoint:{run}"] + ([] if has_base else [f"base:{run}"])


if __name__ == "__main__":
    main()
