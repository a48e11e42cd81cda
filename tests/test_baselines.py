"""Baselines of the learning-curve benchmark (random, blind route, optimal) and its results file."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.baselines import (
    beam_blind_route,
    blind_route_baseline,
    blind_route_solves,
    build_level_graph,
    eval_records,
    exact_blind_route,
    make_env,
    optimal_baseline,
    play_moves,
    random_baseline,
)
from benchmarks import learning_curve
from benchmarks.learning_curve import (
    PER_SEED_KEYS,
    called_tools,
    check_compatible,
    level_summary,
    main,
    merge_seed,
    success_beyond_blind,
)
from llmgym.envs.frozen_lake import generate_map
from llmgym.error import InvalidOptionError

LAKE = "llmgym/FrozenLake-v0"
SOKOBAN = "llmgym/Sokoban-v0"
# Hand-made 3x3 lakes. Going Down first drowns in the first, Right-Right-Down in the second,
# Right first in the third.
HOLE_BELOW_START = ["SFF", "HFF", "FFG"]
HOLE_RIGHT_MIDDLE = ["SFF", "FFH", "FFG"]
HOLE_RIGHT_OF_START = ["SHF", "FFF", "FFG"]


def _records(*levels: list[str]) -> list[dict]:
    return [{"seed": index, "level": level} for index, level in enumerate(levels)]


def test_blind_route_finds_the_one_route_that_solves_both_lakes() -> None:
    # Of the six 4-move routes (two Rights, two Downs), only Right, Down, Down, Right misses
    # both holes: RRDD and RDRD drown in the second lake, the three starting with Down in the first.
    result = blind_route_baseline(LAKE, _records(HOLE_BELOW_START, HOLE_RIGHT_MIDDLE), {"max_turns": 4})
    assert result["route"] == ["Right", "Down", "Down", "Right"]
    assert result["solved"] == 2 and result["success"] == 1.0 and result["exact"]


def test_no_blind_route_solves_lakes_that_need_different_first_moves() -> None:
    records = _records(HOLE_BELOW_START, HOLE_RIGHT_MIDDLE, HOLE_RIGHT_OF_START)
    # The first lake needs a first move other than Down, the third one other than Right; Left
    # and Up bump into the edge everywhere, so no fixed route solves all three.
    for turns in (4, 6, 8):
        assert blind_route_baseline(LAKE, records, {"max_turns": turns})["solved"] == 2
    # The goal is 4 moves away: with 3 moves nothing is solved.
    nothing = blind_route_baseline(LAKE, records, {"max_turns": 3})
    assert nothing["solved"] == 0 and nothing["route"] == []


@pytest.mark.parametrize("draw", range(3))
def test_exhaustive_search_equals_brute_force_over_every_route(draw: int) -> None:
    rng = np.random.default_rng(draw)
    records = _records(*(generate_map(rng, 3, 0.7) for _ in range(6)))
    moves = 5
    env = make_env(LAKE, {"max_turns": moves})
    graph = build_level_graph(LAKE, records, {"max_turns": moves})
    brute = max(
        sum(play_moves(env, record, route) for record in records)
        for route in itertools.product(graph.actions, repeat=moves)
    )
    solved, route = exact_blind_route(graph, moves)
    assert solved == brute
    assert sum(play_moves(env, record, route) for record in records) == brute
    assert beam_blind_route(graph, moves, width=4)[0] <= brute


def test_blind_route_on_the_frozen_lake_eval_levels_is_found_exactly() -> None:
    # Eval-set version 2 (distinct levels): a route along the left edge, then the bottom one.
    result = blind_route_baseline(LAKE, eval_records(LAKE, 64), {"max_turns": 10})
    assert result["route"] == ["Down", "Down", "Right", "Right", "Right", "Down"]
    assert result["solved"] == 22 and result["exact"]


def test_beam_search_route_replays_to_its_count_on_sokoban() -> None:
    # 30 moves is past the exhaustive limit: the beam's route is checked by replaying it.
    records = eval_records(SOKOBAN, 16)
    result = blind_route_baseline(SOKOBAN, records, {"max_turns": 30}, beam_widths=(64,))
    assert result["search"] == "beam" and not result["exact"]
    env = make_env(SOKOBAN, {"max_turns": 30})
    assert sum(play_moves(env, record, result["route"]) for record in records) == result["solved"] > 0


@pytest.mark.parametrize("env_id", [LAKE, SOKOBAN])
def test_optimal_solves_every_eval_level(env_id: str) -> None:
    assert optimal_baseline(env_id, eval_records(env_id, 32), {"max_turns": 40})["success"] == 1.0


def test_optimal_fails_where_the_turn_limit_is_shorter_than_the_solution() -> None:
    records = [record for record in eval_records(SOKOBAN, 64) if record["optimal_steps"] > 10][:4]
    assert optimal_baseline(SOKOBAN, records, {"max_turns": 10})["success"] == 0.0


def test_random_baseline_is_seeded_and_plays_valid_moves() -> None:
    records = _records(["SF", "FG"])
    first = random_baseline(LAKE, records, {"max_turns": 2}, episodes_per_level=64, seed=3)
    assert first == random_baseline(LAKE, records, {"max_turns": 2}, episodes_per_level=64, seed=3)
    # Two moves from the corner: Right-Down or Down-Right out of 16 routes, so about 1/8.
    assert 0.02 < first["success"] < 0.3


# ---------------------------------------------------------------------- the results file
def _run(after: float) -> dict:
    return {"eval_success_before": 0.0, "eval_success_after": after, "minutes": 1.5, "config": {"lr": after}}


def test_merge_keeps_other_seeds_and_replaces_the_same_seed() -> None:
    document = merge_seed({"env_id": LAKE, "baselines": {"x": 1}}, 2, _run(0.5))
    document = merge_seed(document, 0, _run(0.25))
    assert document["seeds"] == [0, 2] and document["eval_success_after"] == [0.25, 0.5]
    document = merge_seed(document, 2, _run(0.75))
    assert document["seeds"] == [0, 2]
    assert document["eval_success_after"] == [0.25, 0.75]
    assert document["config"] == [{"lr": 0.25}, {"lr": 0.75}]
    assert document["eval_success_after_mean"] == 0.5 and document["minutes"] == [1.5, 1.5]
    assert document["baselines"] == {"x": 1} and document["env_id"] == LAKE
    assert all(len(document[key]) == 2 for key in PER_SEED_KEYS)


def test_a_file_written_before_runs_recorded_their_curriculum_gets_it_from_each_seeds_config() -> None:
    options = {"start": "solution", "max_moves_left": 2}
    near = {"id": "llmgym/Sokoban-v1", "n_groups": 8, "name": "near", "options": options}
    old = merge_seed(None, 0, {**_run(0.5), "config": {"train_envs": [near]}})
    del old["curriculum"]
    document = merge_seed(old, 1, {**_run(0.25), "curriculum": None})
    named = "near: starts on the solver's fewest-moves solution, 1 to 2 moves from the end"
    assert document["curriculum"] == [named, None]


def test_a_seed_with_other_eval_options_is_refused() -> None:
    levels = level_summary(LAKE, eval_records(LAKE, 4))
    header = {"env_id": LAKE, "eval_levels": levels, "eval_options": {"max_turns": 10}}
    document = merge_seed(header, 0, _run(0.5))
    check_compatible(document, LAKE, levels, {"max_turns": 10})
    with pytest.raises(InvalidOptionError, match="another --results-dir"):
        check_compatible(document, LAKE, levels, {"max_turns": 12})


def test_baselines_only_writes_baselines_and_keeps_the_seeds(tmp_path: Path) -> None:
    arguments = ["--env", LAKE, "--baselines-only", "--results-dir", str(tmp_path)]
    main(arguments)
    path = tmp_path / "learning_curve_FrozenLake-v0.json"
    document = json.loads(path.read_text())
    assert document["seeds"] == [] and document["eval_levels"]["count"] == 64
    assert document["baselines"]["blind_route"]["success"] == pytest.approx(22 / 64)
    assert document["baselines"]["optimal"]["success"] == 1.0
    path.write_text(json.dumps(merge_seed(document, 1, _run(0.5))))
    main(arguments)
    document = json.loads(path.read_text())
    assert document["seeds"] == [1] and document["eval_success_after"] == [0.5] and "commit" in document


def test_a_stopped_seed_leaves_the_results_file_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    main(["--env", LAKE, "--baselines-only", "--results-dir", str(tmp_path)])
    path = tmp_path / "learning_curve_FrozenLake-v0.json"
    path.write_text(json.dumps(merge_seed(json.loads(path.read_text()), 1, _run(0.5))))
    recorded = path.read_text()

    def stopped(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(learning_curve, "train_seed", stopped)
    with pytest.raises(KeyboardInterrupt):
        main(["--env", LAKE, "--seed", "0", "--results-dir", str(tmp_path)])
    # Same baselines: the recorded seeds keep the provenance they were written with.
    assert path.read_text() == recorded


def test_success_beyond_blind_counts_only_the_levels_the_blind_route_fails() -> None:
    records = eval_records(LAKE, 64)
    options = {"max_turns": 10}
    found = blind_route_baseline(LAKE, records, options)
    blind = blind_route_solves(LAKE, records, options, found["route"])
    assert sum(blind) == found["solved"] and 0 < found["solved"] < 64
    solver = [1] * 64
    assert success_beyond_blind(solver, blind) == 1.0
    only_blind = [int(solved) for solved in blind]
    assert success_beyond_blind(only_blind, blind) == 0.0
    one_more = list(only_blind)
    one_more[blind.index(False)] = 1
    assert success_beyond_blind(one_more, blind) == pytest.approx(1 / (64 - found["solved"]))
    assert success_beyond_blind(None, blind) is None and success_beyond_blind(solver[:10], blind) is None


def test_called_tools_reads_one_envs_tool_shares_from_an_eval_row() -> None:
    row = {"kind": "eval", "success_rate/calc": 0.5, "called_calculator_rate/calc": 0.75,
           "called_python_rate/calc": 0.0, "called_calculator_rate/other": 0.1, "called_calculator_rate": 0.4}
    assert called_tools([row], "calc") == {"calculator": 0.75, "python": 0.0}
    assert called_tools([row], "lake") is None
    assert called_tools([], "calc") is None


def test_pass_at_k_is_the_chance_that_one_of_k_samples_is_right() -> None:
    from benchmarks.pass_at_k import pass_at_k, summarize

    assert pass_at_k(16, 0, 16) == 0.0 and pass_at_k(16, 1, 16) == 1.0 and pass_at_k(16, 13, 4) == 1.0
    assert pass_at_k(2, 1, 1) == 0.5
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - (3 * 2) / (4 * 3))  # both draws miss the one right reply
    rows = [{"greedy": True, "correct": {1.0: 4}, "answered": {1.0: 4}},
            {"greedy": False, "correct": {1.0: 0}, "answered": {1.0: 1}}]
    summary = summarize(rows, samples=4)
    assert summary["greedy"] == 0.5 and summary["t1.0"]["sample_success"] == 0.5
    assert summary["t1.0"]["sample_answered"] == 5 / 8  # a wrong answer in the format counts
    assert summary["t1.0"]["pass@1"] == 0.5 and summary["t1.0"]["pass@4"] == 0.5


def test_tool_call_probe_counts_calls_that_ran_apart_from_attempts() -> None:
    from benchmarks.tool_call_probe import first_turn_figures

    outcomes = [
        ("<tool_call>{...}</tool_call>", {"tool_calls": 1, "tools_run": ()}, False),  # malformed
        ("<tool_call>ok</tool_call>", {"tool_calls": 1, "tools_run": ("calculator",)}, True),
        ("<tool_call>ok</tool_call>", {"tool_calls": 1, "tools_run": ("calculator",)}, False),  # wrong sum
        ("<answer>7</answer>", {"success": True}, False),
    ]
    figures = first_turn_figures(outcomes)
    assert figures["replies"] == 4 and figures["call_attempted"] == 0.75
    assert figures["calculator_ran"] == 0.5 and figures["calculator_gave_answer"] == 0.25
    assert figures["answered_right"] == 0.25
    assert figures["failed_call_examples"] == ["<tool_call>{...}</tool_call>"]


def test_each_recipe_of_an_id_has_its_own_learning_curve_file() -> None:
    assert learning_curve.result_name("llmgym/Sokoban-v1") == "learning_curve_Sokoban-v1"
    assert learning_curve.result_name("llmgym/Sokoban-v1", "sokoban-v1") == "learning_curve_Sokoban-v1"
    assert (learning_curve.result_name("llmgym/Sokoban-v1", "sokoban-v1-grpo")
            == "learning_curve_Sokoban-v1_sokoban-v1-grpo")
    assert learning_curve.result_name("llmgym/Math-Easy-v0", "math-easy-grpo") == "learning_curve_Math-Easy-v0"


def test_leaderboard_rows_of_a_run_add_the_base_model_once_per_id() -> None:
    run = "runs/learning_curve/Sokoban-v1/seed0"
    both = [f"checkpoint:{run}", f"base:{run}"]
    assert learning_curve.leaderboard_agents("llmgym/Sokoban-v1", run, []) == both
    other = [{"env_id": "llmgym/FrozenLake-v1", "agent": "base:runs/learning_curve/FrozenLake-v1/seed0"},
             {"env_id": "llmgym/Sokoban-v1", "agent": "checkpoint:runs/x"}]
    assert learning_curve.leaderboard_agents("llmgym/Sokoban-v1", run, other) == both, "another id's base row"
    own = [*other, {"env_id": "llmgym/Sokoban-v1", "agent": "base:runs/x"}]
    assert learning_curve.leaderboard_agents("llmgym/Sokoban-v1", run, own) == [f"checkpoint:{run}"]


def test_leaderboard_rows_need_a_trained_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--env", LAKE, "--baselines-only", "--leaderboard", str(tmp_path),
              "--results-dir", str(tmp_path)])
    assert "--baselines-only trains none" in capsys.readouterr().err
    assert not list(tmp_path.iterdir()), "refused before writing anything"
