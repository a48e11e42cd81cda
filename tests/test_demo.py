"""The README's main job (``scripts/demo_train.py``): what it trains and evaluates on, without training."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from benchmarks.baselines import compute_baselines

DEMO = Path(__file__).resolve().parent.parent / "scripts" / "demo_train.py"


@pytest.fixture(scope="module")
def demo():
    spec = importlib.util.spec_from_file_location("demo_train", DEMO)
    module = importlib.util.module_from_spec(spec)
    sys.modules["demo_train"] = module
    spec.loader.exec_module(module)
    return module


def test_default_recipe_evaluates_where_reading_the_map_beats_every_blind_route(demo, tmp_path):
    config = demo.demo_config("3x3", str(tmp_path / "run"), steps=60, overrides=[])
    spec = config.validation_envs[0]
    records = demo.eval_level_records(config)
    baselines = compute_baselines(spec.id, records, dict(spec.options))
    assert len(records) == config.eval.levels == 24
    # A 3x3 lake at 35% holes has 51 maps: the 24 eval lakes are distinct, and held out of training.
    assert len({repr(record["level"]) for record in records}) == 24
    assert baselines["blind_route"]["success"] <= 0.6
    assert baselines["optimal"]["success"] == 1.0
    assert all(record["seed"] >= 1_000_000 for record in records)
    # The run's own draws (300 steps, through the planner) hold none of them; without the split they would.
    assert demo.trained_eval_levels(config, steps=300) == 0
    for spec in config.train_envs:
        spec.options.pop("held_out_levels", None)
        spec.options["split"] = "all"
    assert demo.trained_eval_levels(config, steps=300) > 0
    assert config.rollout.choices and config.rollout.agent == "markov"
    assert (config.optim.lr, config.optim.lr_schedule, config.optim.lr_final) == (1e-4, "cosine", 0.1), \
        "the rate the recorded runs used"
    assert config.model_options.frozen_layers == 20, "the layers the recorded runs trained"


@pytest.mark.parametrize("recipe", ["3x3", "v1"])
def test_the_demo_stops_after_its_steps_and_a_time_limit_is_only_added_when_asked(demo, tmp_path, recipe):
    by_steps = demo.demo_config(recipe, str(tmp_path / "run"), steps=60, overrides=[])
    assert (by_steps.steps, by_steps.max_minutes) == (60, 0.0), "the learning rate decays over the 60 steps"
    capped = demo.demo_config(recipe, str(tmp_path / "run"), steps=60, overrides=["optim.lr=2e-5"], minutes=5)
    assert (capped.steps, capped.max_minutes, capped.optim.lr) == (60, 5.0, 2e-5)


def test_record_appends_runs_and_keeps_their_range(demo, tmp_path, monkeypatch):
    monkeypatch.setattr(demo, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(demo, "write_result", lambda name, doc: _write(tmp_path / f"{name}.json", doc))
    for after in (0.5, 0.75):
        path = demo.record_run("3x3", {"eval_success_after": after}, {"blind_route": {"success": 0.47}})
    import json

    entry = json.loads(path.read_text())["recipes"]["3x3"]
    assert [run["eval_success_after"] for run in entry["runs"]] == [0.5, 0.75]
    assert entry["eval_success_after_range"] == [0.5, 0.75]


def _write(path: Path, document: dict) -> Path:
    import json

    path.write_text(json.dumps(document))
    return path


def test_runs_on_another_eval_set_version_move_aside_rather_than_share_a_range(demo, tmp_path, monkeypatch):
    import json

    monkeypatch.setattr(demo, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(demo, "write_result", lambda name, doc: _write(tmp_path / f"{name}.json", doc))
    demo.record_run("3x3", {"eval_success_after": 0.9}, {"blind_route": {"success": 0.47}})  # version 1
    path = demo.record_run("3x3", {"eval_success_after": 0.6, "eval_set_version": 2}, {"blind_route": {"success": 0.46}})
    document = json.loads(path.read_text())
    assert document["recipes"]["3x3"]["eval_success_after_range"] == [0.6, 0.6]
    assert document["before_split"]["3x3"]["runs"] == [{"eval_success_after": 0.9}]
    assert document["before_split"]["3x3"]["baselines"] == {"blind_route": {"success": 0.47}}
