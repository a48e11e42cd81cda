"""The ablation benchmark: each lever's row is the recipe with exactly that lever taken out."""

from __future__ import annotations

import pytest

from benchmarks.ablation import ENV_ID, LEVERS, gather, lever_overrides, table
from benchmarks.learning_curve import PRESETS, config_overrides
from llmgym.error import InvalidOptionError
from llmgym_train.config import load_config


def _config(lever: str):
    base = config_overrides(ENV_ID, PRESETS["frozenlake-v1"], 0, 30, "runs/ablation-test")
    return load_config(overrides=[*base, *lever_overrides(lever)]).to_dict()


def _differences(left: dict, right: dict, prefix: str = "") -> set[str]:
    keys = set(left) | set(right)
    found = set()
    for key in keys:
        a, b = left.get(key), right.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            found |= _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            found.add(f"{prefix}{key}")
    return found


@pytest.mark.parametrize(("lever", "changed"), [
    ("full", set()),
    ("compact-grid", {"train_envs", "eval_envs"}),
    ("episode-credit", {"loss.credit"}),
    ("no-mixture", {"train_envs"}),
    ("temperature-1", {"rollout.temperature"}),
    ("free-text", {"rollout.choices", "rollout.response_prefix", "rollout.max_new_tokens", "rollout.temperature"}),
    ("constant-lr", {"optim.lr_schedule"}),
    ("std-normalized", {"loss.normalize_std"}),
])
def test_each_lever_changes_only_its_own_settings(lever: str, changed: set[str]) -> None:
    full = _config("full")
    assert _differences(full, _config(lever)) <= changed
    assert set(LEVERS) >= {lever}


def test_the_compact_grid_row_plays_v0s_observation_on_the_same_lakes() -> None:
    config = _config("compact-grid")
    assert {entry["options"]["grid"] for entry in config["train_envs"]} == {"compact"}
    assert [entry["options"]["size"] for entry in config["train_envs"]] == [2, 3, 4]
    assert config["eval_envs"][0]["options"]["coordinates"] is False


def test_an_unknown_lever_gets_a_suggestion() -> None:
    with pytest.raises(InvalidOptionError, match="episode-credit"):
        lever_overrides("episode-credt")


def test_the_table_lists_the_rows_on_record() -> None:
    document = gather()
    text = table(document)
    assert text.count("\n") >= 1 + len(document["rows"])
    for row in document["rows"]:
        assert f"| {row['lever']} |" in text
