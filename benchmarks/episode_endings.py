"""How the failed episodes of leaderboard rows end: stuck on one move, two moves in turn, or other.

    python -m benchmarks.episode_endings benchmarks/results/leaderboard_runs/leaderboard.json \
        --env llmgym/Sokoban-v1 [--tail 10] [--name episode_endings_Sokoban-v1]

A policy that sees only the board (the ``markov`` agent, greedy) plays the same move whenever it
sees the same board. On a grid, a move that changes nothing (into a wall) leaves the board as it
was, so once chosen it is chosen for the rest of the episode; two moves that undo each other
(``Up``, ``Down``) loop the same way. The last ``--tail`` moves of each failed episode tell them
apart. In a 6x6 Sokoban room (four free cells a line at most) ten equal moves in a row include
at least six blocked ones.

Reads the rows' recorded moves (rows of trained runs keep every episode's moves; other rows keep
them for ``--record-episodes``), prints a table and writes it to
``benchmarks/results/<name>.json``.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import markdown_table, write_result

ENDINGS = ("solved", "one move repeated", "two moves in turn", "other")


def ending(success: bool, moves: Sequence[str], tail: int) -> str:
    """The ending of one episode from its moves: one of :data:`ENDINGS`."""
    if success:
        return "solved"
    last = list(moves[-tail:])
    if len(last) < tail:
        return "other"
    if len(set(last)) == 1:
        return "one move repeated"
    if len(set(last)) == 2 and all(a != b for a, b in zip(last, last[1:])):
        return "two moves in turn"
    return "other"


def row_endings(row: dict[str, Any], tail: int) -> dict[str, Any] | None:
    """Counts of each ending over a row's episodes; ``None`` when the row kept no moves."""
    episodes = row.get("episodes") or []
    if not episodes or any(episode.get("actions") is None for episode in episodes):
        return None
    counts = Counter(ending(episode["success"], episode["actions"], tail) for episode in episodes)
    return {"agent": row["agent"], "episodes": len(episodes), **{name: counts[name] for name in ENDINGS}}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("leaderboard", type=Path, nargs="+", help="leaderboard.json files")
    parser.add_argument("--env", required=True, help="the env id whose rows to read")
    parser.add_argument("--tail", type=int, default=10, help="last moves of a failed episode to read")
    parser.add_argument("--name", default=None, help="results file name (default episode_endings_<env>)")
    args = parser.parse_args(argv)
    rows, skipped = [], []
    for path in args.leaderboard:
        for row in json.loads(path.read_text())["results"]:
            if row["env_id"] != args.env or any(kept["agent"] == row["agent"] for kept in rows):
                continue  # another env's, or a row replayed into a second file: counted once
            counted = row_endings(row, args.tail)
            if counted is None:
                skipped.append(row["agent"])
            else:
                rows.append(counted)
    print(markdown_table(["agent", "episodes", *ENDINGS],
                         [[row["agent"], row["episodes"], *(row[name] for name in ENDINGS)] for row in rows]))
    if skipped:
        print(f"rows without recorded moves, left out: {', '.join(skipped)}")
    name = args.name or f"episode_endings_{args.env.split('/')[-1]}"
    path = write_result(name, {"env_id": args.env, "tail": args.tail, "sources": [str(p) for p in args.leaderboard],
                               "rows": rows, "rows_without_moves": skipped})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
