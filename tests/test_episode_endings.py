"""benchmarks/episode_endings.py: how failed episodes end, read from their recorded moves."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.episode_endings import ending, main


def test_endings_tell_a_blocked_move_from_a_two_move_loop() -> None:
    assert ending(True, ["Up"] * 12, tail=10) == "solved"
    assert ending(False, ["Left", "Down"] + ["Up"] * 10, tail=10) == "one move repeated"
    assert ending(False, ["Left"] + ["Up", "Down"] * 5, tail=10) == "two moves in turn"
    assert ending(False, ["Up", "Up", "Down", "Up"] * 3, tail=10) == "other"  # two moves, not in turn
    assert ending(False, ["Up"] * 9, tail=10) == "other"  # too short to say


def test_main_counts_each_row_once_and_leaves_out_rows_without_moves(tmp_path: Path, capsys) -> None:
    def row(agent: str, env_id: str, moves: list[list[str]] | None) -> dict:
        episodes = [{"success": not m, "actions": m} for m in moves] if moves is not None else [{"success": False}]
        return {"agent": agent, "env_id": env_id, "episodes": episodes}

    stuck, loop = ["Up"] * 10, ["Up", "Down"] * 5
    first = {"results": [row("a", "llmgym/Sokoban-v1", [stuck, loop, []]), row("b", "llmgym/Sokoban-v1", None),
                         row("c", "llmgym/FrozenLake-v1", [stuck])]}
    second = {"results": [row("a", "llmgym/Sokoban-v1", [stuck])]}  # the same row, replayed elsewhere
    paths = [tmp_path / "one.json", tmp_path / "two.json"]
    for path, board in zip(paths, (first, second)):
        path.write_text(json.dumps(board))
    main([*map(str, paths), "--env", "llmgym/Sokoban-v1", "--name", str(tmp_path / "endings")])
    written = json.loads((tmp_path / "endings.json").read_text())
    assert written["rows"] == [{"agent": "a", "episodes": 3, "solved": 1, "one move repeated": 1,
                                "two moves in turn": 1, "other": 0}]
    assert written["rows_without_moves"] == ["b"]
    assert "| a | 3 | 1 | 1 | 1 | 0 |" in capsys.readouterr().out
