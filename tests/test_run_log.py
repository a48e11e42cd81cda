"""The run log keeps native libraries' stderr lines (torch's C++ warnings at engine start) off the console."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llmgym_train import metrics


def test_native_stderr_goes_to_the_run_log_inside_and_to_the_console_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "run.log"
    log.write_text("earlier line\n")
    monkeypatch.setattr(metrics, "_run_log", log)
    with metrics.native_output_to_run_log():
        os.write(2, b"[W] NUMA binding: native warning\n")
    os.write(2, b"after the engine started\n")
    err = capfd.readouterr().err
    assert "NUMA binding" not in err and "after the engine started" in err
    assert log.read_text() == "earlier line\n[W] NUMA binding: native warning\n"  # appended, nothing lost


def test_outside_a_run_native_stderr_is_left_alone(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(metrics, "_run_log", None)
    with metrics.native_output_to_run_log():
        os.write(2, b"no run, still on the console\n")
    assert "no run, still on the console" in capfd.readouterr().err


def test_stderr_is_restored_when_the_engine_start_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(metrics, "_run_log", tmp_path / "run.log")
    with pytest.raises(RuntimeError), metrics.native_output_to_run_log():
        raise RuntimeError("engine failed")
    os.write(2, b"the error reaches the console\n")
    assert "the error reaches the console" in capfd.readouterr().err


def test_learning_curve_keeps_rates_on_their_own_axis_beside_the_reward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from matplotlib.figure import Figure

    drawn: list[Figure] = []
    save = Figure.savefig

    def keep(figure: Figure, *args: object, **kwargs: object) -> None:
        drawn.append(figure)
        save(figure, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    records = [
        {"step": 1, "kind": "train", "reward_mean": -2.0, "success_rate": 0.1},
        {"step": 2, "kind": "train", "reward_mean": 8.0, "success_rate": 0.5},
        {"step": 2, "kind": "eval", "success_rate": 0.55},
    ]
    path = metrics.plot_curve(records, tmp_path / "curve.png")
    assert path.stat().st_size > 0
    rates, rewards = drawn[0].axes
    assert rates.get_ylim() == pytest.approx((-0.02, 1.02))  # a reward of 8 does not squash the rates
    assert {line.get_label() for line in rates.get_lines()} == {"train success", "eval success (greedy)"}
    assert [max(line.get_ydata()) for line in rewards.get_lines()] == [8.0]
