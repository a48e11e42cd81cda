"""Pool the rounds of several ``rollout_throughput`` runs of one workload into one set of figures.

One run of :mod:`benchmarks.rollout_throughput` holds a few rounds, and on a shared machine
a round's ratio moves by 10-30% from pass to pass. Where two patterns do the same work (the
``uniform`` workload, whose schedule bound is 1.001), one run's median says little, and which
run to quote would be a choice. This script takes every round of the runs it is given, checks
that they played the same workload, and writes, for llmgym's rollout over each reference
(the turn-synchronous anchor, the engine-only replay):

* ``per_round``: median, range and every round's ratio of tokens/s (taken within its round);
* ``throughput_ratio``: llmgym's tokens/s over all its passes, over the reference's;
* ``geometric_mean`` of the round ratios and its 95% confidence interval (``ci95``), a
  percentile bootstrap over rounds (numpy, seeded): the interval the goal is read against;
* ``rounds_at_goal``: how many rounds reached the goal; ``goal_met``: ``"yes"`` when the
  interval lies at or above the goal, ``"no"`` when it lies below, ``"undecided"`` when it
  holds the goal (the rounds cannot tell the rollout from the goal).

Run: ``python -m benchmarks.rollout_pool RESULT [RESULT ...] --workload uniform``, each
RESULT a ``rollout_throughput.json`` or a folder holding one. Writes
``benchmarks/results/rollout_throughput_pooled_<workload>.json`` (``--results-dir``) with each
run's commit, date and load averages, and prints a table to paste.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS_DIR, markdown_table, write_result
from benchmarks.rollout_throughput import GOALS, WORKLOADS, spread

REFERENCES = ("turn_synchronous", "replay")
RESAMPLES = 10_000


def read_run(path: Path) -> dict[str, Any]:
    """One run's results: ``path`` is a ``rollout_throughput.json`` or a folder holding one."""
    file = path / "rollout_throughput.json" if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"{path}: no rollout_throughput.json there (write one with "
                                "`python -m benchmarks.rollout_throughput --results-dir DIR`).")
    return {"path": file, **json.loads(file.read_text())}


def pooled_rounds(runs: Sequence[dict[str, Any]], workload: str) -> list[dict[str, Any]]:
    """Every round of ``workload`` in ``runs``, in order; every run must have played the same settings."""
    rounds: list[dict[str, Any]] = []
    settings = None
    for run in runs:
        played = run.get("workloads", {}).get(workload)
        if played is None:
            raise ValueError(f"{run['path']} has no {workload!r} workload (it has {sorted(run.get('workloads', {}))}).")
        if settings is not None and played["settings"] != settings:
            differ = sorted(key for key in settings if settings[key] != played["settings"].get(key))
            raise ValueError(f"{run['path']} played {workload!r} with other settings ({', '.join(differ)}) than "
                             f"{runs[0]['path']}: its rounds are not the same workload's.")
        settings = played["settings"]
        rounds += played["rounds"]
    return rounds


def bootstrap_ci(values: Sequence[float], resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the geometric mean of ``values`` (resampled with replacement)."""
    import numpy as np

    logs = np.log(np.asarray(values, dtype=float))
    draws = np.random.default_rng(seed).choice(logs, size=(resamples, len(logs)), replace=True).mean(axis=1)
    low, high = np.exp(np.percentile(draws, [2.5, 97.5]))
    return float(low), float(high)


def versus(rounds: Sequence[dict[str, Any]], reference: str, goal: float) -> dict[str, Any]:
    """llmgym's rollout over ``reference`` across ``rounds``: per-round spread, pooled throughput, interval, goal."""
    ratios = [played["llmgym"]["tokens_per_s"] / played[reference]["tokens_per_s"] for played in rounds]

    def throughput(pattern: str) -> float:
        return (sum(played[pattern]["generated_tokens"] for played in rounds)
                / sum(played[pattern]["seconds"] for played in rounds))

    geometric_mean = statistics.geometric_mean(ratios)
    low, high = bootstrap_ci(ratios)
    verdict = "yes" if low >= goal else "no" if high < goal else "undecided"
    return {"per_round": spread(ratios), "throughput_ratio": throughput("llmgym") / throughput(reference),
            "geometric_mean": geometric_mean, "ci95": [low, high], "goal": goal,
            "rounds_at_goal": sum(ratio >= goal for ratio in ratios), "goal_met": verdict}


def pool(runs: Sequence[dict[str, Any]], workload: str) -> dict[str, Any]:
    """The pooled figures of ``workload`` over ``runs`` (see the module's docstring)."""
    rounds = pooled_rounds(runs, workload)
    goals = {"turn_synchronous": GOALS[f"{workload}_vs_turn_synchronous"], "replay": GOALS["vs_replay"]}
    return {
        "workload": workload,
        "runs": [{"path": str(run["path"]), "commit": run.get("commit"), "dirty": run.get("dirty"),
                  "date": run.get("date"), "load_average": run.get("load_average"),
                  "rounds": len(run["workloads"][workload]["rounds"])} for run in runs],
        "rounds": len(rounds),
        **{f"vs_{reference}": versus(rounds, reference, goals[reference]) for reference in REFERENCES},
    }


def table(pooled: dict[str, Any]) -> str:
    """The pooled figures as a Markdown table, a row per reference."""
    rows = []
    for reference in REFERENCES:
        figures = pooled[f"vs_{reference}"]
        per_round, (low, high) = figures["per_round"], figures["ci95"]
        rows.append([reference.replace("_", "-"),
                     f"{per_round['median']:.3f} ({per_round['min']:.2f}-{per_round['max']:.2f})",
                     f"{figures['throughput_ratio']:.3f}",
                     f"{figures['geometric_mean']:.3f} ({low:.2f}-{high:.2f})",
                     f"{figures['rounds_at_goal']} of {pooled['rounds']} at {figures['goal']}",
                     figures["goal_met"]])
    header = ["llmgym's rollout over", "per round: median (range)", "over all passes",
              "geometric mean (95% CI)", "rounds at the goal", "goal met"]
    return markdown_table(header, rows)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path,
                        help="rollout_throughput.json files, or folders holding one")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="uniform")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    pooled = pool([read_run(path) for path in args.results], args.workload)
    path = write_result(f"rollout_throughput_pooled_{args.workload}", pooled, args.results_dir)
    commits = ", ".join(f"{run['commit'][:7]} ({run['rounds']})" for run in pooled["runs"] if run["commit"])
    print(f"{args.workload}: {pooled['rounds']} rounds from {len(pooled['runs'])} runs: {commits}")
    print(table(pooled))
    print(f"-> {path}")


if __name__ == "__main__":
    main()
