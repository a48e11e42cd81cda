"""llmgym-bench's HTML report: recorded episodes, replays with pictures, one merged leaderboard."""

from __future__ import annotations

import json
import re
from pathlib import Path

from llmgym_train.eval.leaderboard import LeaderboardConfig, main, run
from llmgym_train.eval.report import (
    agent_kind,
    family_of,
    merge_documents,
    ordered_rows,
    reenact_episodes,
    replay,
    report_html,
)

ENVS = ("llmgym/FrozenLake-v0", "llmgym/Sokoban-v0", "llmgym/Math-Easy-v0", "llmgym/TicTacToe-vs-random-v0")


def test_bench_records_the_first_episodes_turn_by_turn(tmp_path: Path) -> None:
    config = LeaderboardConfig(
        agents=("random", "optimal"),
        envs=ENVS,
        limit=4,
        record_episodes=2,
        output_dir=tmp_path,
        progress=False,
    )
    for row in run(config)["results"]:
        recorded, plain = row["episodes"][:2], row["episodes"][2:]
        for episode in recorded:
            assert len(episode["actions"]) == len(episode["rewards"]) == episode["turns"]
            assert len(episode["observations"]) == episode["turns"] + 1
            assert abs(sum(episode["rewards"]) - episode["episode_return"]) < 1e-6
            assert episode["level"] is not None
        assert all("actions" not in episode and "level" not in episode for episode in plain)


def test_replays_of_recorded_grid_episodes_match_and_draw_every_state(tmp_path: Path) -> None:
    config = LeaderboardConfig(
        agents=("random", "optimal"), envs=ENVS[:2], limit=2, output_dir=tmp_path, progress=False
    )
    for row in run(config)["results"]:
        for episode in row["episodes"]:
            played = replay(row, episode)
            assert played["note"] == ""
            assert len(played["frames"]) == min(episode["turns"], 40) + 1
            assert all(frame.startswith("data:image/png;base64,") for frame in played["frames"])


def test_a_replay_that_differs_from_its_record_shows_the_record_and_says_so(tmp_path: Path) -> None:
    config = LeaderboardConfig(
        agents=("optimal",), envs=ENVS[:1], limit=1, output_dir=tmp_path, progress=False
    )
    row = run(config)["results"][0]
    episode = dict(row["episodes"][0], rewards=[5.0] * row["episodes"][0]["turns"])
    played = replay(row, episode)
    assert "differs from the record" in played["note"] and played["frames"] is None


def test_one_command_writes_a_self_contained_html_report(tmp_path: Path) -> None:
    main(
        [
            "--agents",
            "random",
            "optimal",
            "--envs",
            *ENVS,
            "--limit",
            "3",
            "--output-dir",
            str(tmp_path),
            "--no-progress",
        ]
    )
    page = (tmp_path / "leaderboard.html").read_text()
    assert re.findall(r'(?:src|href)="(?!data:|#)[^"]*"', page) == []  # nothing loaded from elsewhere
    for family in ("FrozenLake", "Sokoban", "Math", "Multi-agent games"):
        assert f">{family}</h2><svg" in page
    rows = json.loads((tmp_path / "leaderboard.json").read_text())["results"]
    assert len(rows) >= 7
    assert page.count('<div class="episode"') == 3 * len(rows)
    assert 'class="note"' not in page


def test_rows_merge_into_one_leaderboard_grouped_by_env_and_kind() -> None:
    base = {"results": [_row("random", "llmgym/Sokoban-v1", 0.05), _row("optimal", "llmgym/Sokoban-v1", 1.0)]}
    runs = {
        "results": [
            _row("checkpoint:runs/a", "llmgym/Sokoban-v1", 0.5),
            _row("base:runs/a", "llmgym/Sokoban-v1", 0.0),
            _row("random", "llmgym/Sokoban-v1", 0.06),
            _row("sb3-ppo", "llmgym/FrozenLake-v0", 0.9),
        ]
    }
    rows = ordered_rows(merge_documents([base, runs]))
    assert [(row["env_id"], row["agent"]) for row in rows] == [
        ("llmgym/FrozenLake-v0", "sb3-ppo"),
        ("llmgym/Sokoban-v1", "checkpoint:runs/a"),
        ("llmgym/Sokoban-v1", "base:runs/a"),
        ("llmgym/Sokoban-v1", "random"),
        ("llmgym/Sokoban-v1", "optimal"),
    ]
    assert rows[3]["summary"]["success_rate"] == 0.06  # the later document's row wins
    assert [agent_kind(row["agent"]) for row in rows] == [
        "classic RL",
        "trained",
        "base model",
        "random",
        "optimal",
    ]
    assert family_of("llmgym/ConnectFour-vs-minimax-v0") == "Multi-agent games"
    assert "no recorded episodes" in report_html({"results": rows})


def test_committed_leaderboards_render_into_one_report() -> None:
    root = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
    documents = [
        json.loads(path.read_text())
        for path in (root / "leaderboard.json", root / "leaderboard_runs" / "leaderboard.json")
    ]
    rows = ordered_rows(merge_documents(documents))
    assert len(rows) == len(
        {(row["agent"], row["env_id"]) for document in documents for row in document["results"]}
    )


def _row(agent: str, env_id: str, rate: float) -> dict:
    return {
        "agent": agent,
        "env_id": env_id,
        "levels": 10,
        "eval_set_size": 200,
        "samples": 1,
        "max_turns": None,
        "summary": {
            "success_rate": rate,
            "success_ci95": [max(rate - 0.1, 0), min(rate + 0.1, 1)],
            "mean_return": rate,
            "mean_turns": 3.0,
            "invalid_action_rate": 0.0,
            "completion_tokens_per_episode": 0.0,
        },
        "episodes": [],
    }


def test_rows_without_turns_are_played_again_only_when_the_outcomes_match(tmp_path: Path) -> None:
    config = LeaderboardConfig(
        agents=("random",), envs=ENVS[:2], limit=3, record_episodes=0, output_dir=tmp_path, progress=False
    )
    document = run(config)
    frozen, sokoban = document["results"]
    assert all("actions" not in episode for row in (frozen, sokoban) for episode in row["episodes"])
    sokoban["episodes"][1]["turns"] += 1  # a record the env no longer reproduces
    assert reenact_episodes(document, count=2) == 1
    assert frozen["reenacted"] and all(episode["actions"] for episode in frozen["episodes"][:2])
    assert "reenacted" not in sokoban and all("actions" not in episode for episode in sokoban["episodes"])
    assert "played again from the row's seeds" in report_html(document)
