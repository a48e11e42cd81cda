"""Benchmark: the FrozenLake-v1 recipe with each lever taken out, one at a time.

    python -m benchmarks.ablation --lever NAME [--seed 0] [--minutes 30]
    python -m benchmarks.ablation --table        # rebuild the JSON and print the table only

Each invocation trains one row: the ``frozenlake-v1`` recipe of :mod:`benchmarks.learning_curve`
(``--lever full``) or that recipe with one lever removed, for ``--minutes`` of training, and
evaluates it greedily on the same 64 levels of the frozen ``FrozenLake-v1`` eval set as the
learning curve. Rows land one by one in ``benchmarks/results/ablation/<lever>/`` (the learning
curve's per-seed JSON and curve), so a run spread over days loses only the row it was on, and
``benchmarks/results/ablation_FrozenLake-v1.json`` gathers them with the baselines:

* ``rows``: one entry per lever with ``eval_success_before``/``eval_success_after``, ``steps``,
  ``minutes``, the eval curve, the overrides that removed the lever, the seed, and the load
  average at the start and end of the row (rows run one at a time; the machine's load is theirs).
* ``baselines``: random, best blind route, optimal on the same 64 levels.

The levers (what ``--lever`` removes):

* ``full``: nothing; the recipe at the same budget, the row the others are read against.
* ``compact-grid``: v0's observation on v1's levels (``grid=compact``, no coordinates): the
  default tokenizer merges runs of cells, so a column is not a position the model sees.
* ``episode-credit``: GRPO's episode advantage for every turn (``loss.credit=episode``), no
  GiGPO step advantages.
* ``no-mixture``: 4x4 lakes only (six groups, as many as the mixture's 1 + 2 + 3), no 2x2 and
  3x3 lakes to find a first success on.
* ``temperature-1``: sampling at temperature 1 instead of 2.
* ``free-text``: free generation of up to 6 tokens read by the lenient parser, instead of a
  choice among the four moves; at temperature 1, since temperature 2 is there to explore among
  the four moves and over the whole vocabulary it writes noise.
* ``constant-lr``: no learning-rate decay (``optim.lr_schedule=constant``).
* ``std-normalized``: advantages divided by the group's standard deviation (``loss.normalize_std=true``).

Not a test: each row takes the CPU for its budget plus model loading and evaluations.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS_DIR, write_result
from benchmarks.learning_curve import PRESETS, load_document
from benchmarks.learning_curve import main as learning_curve
from llmgym.error import InvalidOptionError, did_you_mean

ENV_ID = "llmgym/FrozenLake-v1"
NAME = "ablation_FrozenLake-v1"
ROWS_DIR = RESULTS_DIR / "ablation"


def _lakes(options: dict[str, Any], sizes: tuple[tuple[int, int, int], ...]) -> str:
    """A ``train_envs`` override: lakes of ``(size, groups, turns)`` with ``options`` added."""
    entries = [
        {"id": ENV_ID, "name": f"lake-{size}x{size}", "n_groups": groups,
         "options": {"size": size, "max_turns": turns, "action_parser": "lenient", **options}}
        for size, groups, turns in sizes
    ]
    return f"train_envs={json.dumps(entries)}"


_MIXTURE = ((2, 1, 4), (3, 2, 7), (4, 3, 10))
_COMPACT = {"grid": "compact", "coordinates": False}
_EVAL = PRESETS["frozenlake-v1"].eval_options

#: Lever name -> the overrides that take it out of the recipe.
LEVERS: dict[str, tuple[str, ...]] = {
    "full": (),
    "compact-grid": (
        _lakes(_COMPACT, _MIXTURE),
        f"eval_envs={json.dumps([{'id': ENV_ID, 'options': {**_EVAL, **_COMPACT}}])}",
    ),
    "episode-credit": ("loss.credit=episode",),
    "no-mixture": (_lakes({}, ((4, 6, 10),)),),
    "temperature-1": ("rollout.temperature=1.0",),
    "free-text": ("rollout.choices=[]", "rollout.response_prefix=", "rollout.max_new_tokens=6", "rollout.temperature=1.0"),
    "constant-lr": ("optim.lr_schedule=constant",),
    "std-normalized": ("loss.normalize_std=true",),
}


def lever_overrides(lever: str) -> tuple[str, ...]:
    """The overrides of ``lever``; an unknown name fails with the known ones and a suggestion."""
    if lever not in LEVERS:
        raise InvalidOptionError(f"Unknown lever {lever!r}; known: {', '.join(LEVERS)}.{did_you_mean(lever, LEVERS)}")
    return LEVERS[lever]


def run_row(lever: str, seed: int, minutes: float) -> None:
    """Train one row into ``benchmarks/results/ablation/<lever>/`` (the learning curve's files)."""
    learning_curve([
        "--env", ENV_ID, "--preset", "frozenlake-v1", "--seed", str(seed), "--minutes", str(minutes),
        "--output", f"runs/ablation/{lever}/seed{seed}", "--results-dir", str(ROWS_DIR / lever),
        *lever_overrides(lever),
    ])


def gather() -> dict[str, Any]:
    """Every finished row, in :data:`LEVERS` order, with the baselines of the ``full`` row's file."""
    rows, baselines, levels = [], None, None
    for lever in LEVERS:
        document = load_document(ROWS_DIR / lever / "learning_curve_FrozenLake-v1.json")
        if not document or not document.get("seeds"):
            continue
        baselines = baselines or document.get("baselines")
        levels = levels or document.get("eval_levels")
        for index, seed in enumerate(document["seeds"]):
            rows.append({
                "lever": lever, "seed": seed, "removed_by": list(LEVERS[lever]),
                **{key: document[key][index] for key in (
                    "eval_success_before", "eval_success_after", "steps", "minutes", "minutes_budget",
                    "eval_curve", "load_average_start", "load_average_end", "stop_reason")},
            })
    return {"env_id": ENV_ID, "eval_levels": levels, "baselines": baselines, "rows": rows}


def table(document: dict[str, Any]) -> str:
    """The rows as a Markdown table (what the README shows)."""
    lines = ["| lever removed | eval success after | steps | minutes | load (start -> end) |",
             "|---|---|---|---|---|"]
    for row in document["rows"]:
        after = row["eval_success_after"]
        load = f"{row['load_average_start'][0]:.1f} -> {row['load_average_end'][0]:.1f}"
        lines.append(f"| {row['lever']} | {'-' if after is None else f'{100 * after:.1f}%'} | {row['steps']} "
                     f"| {row['minutes']:.0f} | {load} |")
    baselines = document.get("baselines") or {}
    if baselines:
        lines.append("")
        lines.append("Same 64 levels: " + ", ".join(
            f"{name} {100 * value['success']:.1f}%" for name, value in baselines.items() if isinstance(value, dict)
            and "success" in value))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lever", help=f"the lever to take out: {', '.join(LEVERS)}")
    parser.add_argument("--seed", type=int, default=0, help="training seed of the row")
    parser.add_argument("--minutes", type=float, default=30.0, help="wall-clock budget of training")
    parser.add_argument("--table", action="store_true", help="only gather the rows and print the table")
    args = parser.parse_args(argv)
    if not args.table:
        if args.lever is None:
            parser.error("give --lever NAME (or --table)")
        lever_overrides(args.lever)
        run_row(args.lever, args.seed, args.minutes)
    document = gather()
    print(f"wrote {write_result(NAME, document)}")
    print(table(document))


if __name__ == "__main__":
    main()
