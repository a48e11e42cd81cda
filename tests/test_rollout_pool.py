"""``benchmarks/rollout_pool.py``: every round of several rollout-throughput runs, one verdict per goal."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from benchmarks.rollout_pool import main, pool, read_run, versus
from benchmarks.rollout_throughput import WORKLOADS, pass_figures


def played(llmgym_s: float, anchor_s: float, replay_s: float, tokens: int = 1000) -> dict[str, Any]:
    """One round: three passes of ``tokens`` tokens taking these seconds."""
    return {pattern: pass_figures(seconds, tokens, 64)
            for pattern, seconds in (("llmgym", llmgym_s), ("turn_synchronous", anchor_s), ("replay", replay_s))}


def run(rounds: list[dict[str, Any]], commit: str = "a" * 40, **settings: Any) -> dict[str, Any]:
    workload = {**asdict(WORKLOADS["uniform"]), **settings}
    return {"path": Path(f"/results/{commit[:7]}.json"), "commit": commit, "dirty": False, "date": "2026-11-29",
            "load_average": {"start": [0.1], "end": [3.0]},
            "workloads": {"uniform": {"settings": workload, "rounds": rounds}}}


def test_pooling_takes_every_round_of_every_run_and_ratios_within_rounds() -> None:
    # Round ratios of tokens/s (llmgym over the anchor): 100 s / 100 s = 1.0, 100/50 = 2.0, 100/200 = 0.5.
    first = run([played(100, 100, 100), played(50, 100, 100)], commit="1" * 40)
    second = run([played(200, 100, 100)], commit="2" * 40)
    pooled = pool([first, second], "uniform")
    anchor = pooled["vs_turn_synchronous"]
    assert pooled["rounds"] == 3 and [r["rounds"] for r in pooled["runs"]] == [2, 1]
    assert anchor["per_round"]["runs"] == pytest.approx([1.0, 2.0, 0.5])
    assert anchor["per_round"]["median"] == pytest.approx(1.0)
    assert anchor["geometric_mean"] == pytest.approx(1.0)
    # Over all passes: llmgym 3000 tokens in 350 s, the anchor 3000 in 300 s.
    assert anchor["throughput_ratio"] == pytest.approx(300 / 350)
    assert anchor["rounds_at_goal"] == 2


@pytest.mark.parametrize(("anchor_seconds", "verdict"), [
    ([120, 125, 118, 121, 119, 124], "yes"),   # every round ~1.2x: the interval lies above 1.0
    ([80, 85, 82, 84, 81, 83], "no"),          # every round ~0.8x: below
    ([90, 112, 95, 108, 100, 104], "undecided"),  # rounds either side of 1.0: the interval holds it
])
def test_the_goal_is_read_against_the_interval_not_one_run(anchor_seconds: list[int], verdict: str) -> None:
    rounds = [played(100, seconds, 100) for seconds in anchor_seconds]
    figures = versus(rounds, "turn_synchronous", goal=1.0)
    low, high = figures["ci95"]
    assert low <= figures["geometric_mean"] <= high
    assert figures["goal_met"] == verdict


def test_the_interval_narrows_with_more_rounds_of_the_same_spread() -> None:
    few = [played(100, seconds, 100) for seconds in (90, 110, 95, 105)]
    intervals = [versus(rounds, "turn_synchronous", 1.0)["ci95"] for rounds in (few, few * 6)]
    widths = [math.log(high / low) for low, high in intervals]
    assert widths[1] < widths[0] / 2


def test_runs_of_another_workload_setting_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        pool([run([played(1, 1, 1)]), run([played(1, 1, 1)], max_tokens=128)], "uniform")
    with pytest.raises(ValueError, match="no 'varied' workload"):
        pool([run([played(1, 1, 1)])], "varied")


def test_a_folder_without_results_says_how_to_make_them(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="--results-dir"):
        read_run(tmp_path)


def test_the_script_writes_the_pooled_figures_with_each_runs_provenance(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    for index, seconds in enumerate((90, 110)):
        folder = tmp_path / f"run{index}"
        folder.mkdir()
        figures = {key: value for key, value in run([played(100, seconds, 100)], commit=str(index) * 40).items()
                   if key != "path"}
        (folder / "rollout_throughput.json").write_text(json.dumps(figures))
    main([str(tmp_path / "run0"), str(tmp_path / "run1" / "rollout_throughput.json"), "--results-dir", str(tmp_path)])
    written = json.loads((tmp_path / "rollout_throughput_pooled_uniform.json").read_text())
    assert [run["commit"][:1] for run in written["runs"]] == ["0", "1"]
    assert written["vs_turn_synchronous"]["per_round"]["runs"] == pytest.approx([0.9, 1.1])
    assert "commit" in written and "machine" in written  # this write's provenance beside the runs'
    assert "| turn-synchronous |" in capsys.readouterr().out
