"""Reference scores on a set of eval levels: a random agent, the best blind route, the optimal agent.

A learning curve means little without the scores of agents that do not read the map. On
the same levels, under the same env options (turn limit, moves per turn) as the trained
model's evaluation:

* ``random``: every turn, uniformly random action names (as many as a turn may hold), played
  through the env's ``step``; ``episodes_per_level`` episodes a level, averaged, seeded.
* ``blind_route``: the best FIXED move sequence, played blind on every level. It is searched,
  not written down: every position reachable on each level is enumerated with the env's own
  ``step`` into one transition table (:class:`LevelGraph`), and routes are searched over all
  levels at once. Up to :data:`EXACT_MAX_MOVES` moves the search is exhaustive (a depth-first
  search with memoized joint positions, cut where no level can still be solved in the moves
  left): the figure is exact. Beyond, beam searches over prefixes (:data:`BEAM_WIDTHS`), ranked
  by levels solved, then levels still solvable in the moves left, then their total distance to
  a solution: a lower bound on the best route. Either way the route found is replayed on fresh
  envs and must score what the search said.
* ``optimal``: ``env.unwrapped.solution()`` replayed from the start; below 100% only where the
  turn limit is shorter than the solution.

Only deterministic envs whose ``render()`` (``render_mode="ansi"``) identifies the position
are searched (FrozenLake without slipping, Sokoban).

    from benchmarks.baselines import compute_baselines, eval_records
    baselines = compute_baselines("llmgym/FrozenLake-v0", eval_records("llmgym/FrozenLake-v0", 64),
                                  {"max_turns": 10})
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

import llmgym  # noqa: F401  (registers the llmgym ids)
from llmgym.core import TextEnv
from llmgym.error import Error, InvalidOptionError
from llmgym.eval_sets import load_eval_set

#: Routes of at most this many moves are searched exhaustively (exact; 16 moves on 64 4x4 lakes: 6 s).
EXACT_MAX_MOVES = 16
#: Beam widths tried for longer routes; the best route of all is kept. A wider beam is not
#: always better (on the first 64 Sokoban-v0 levels with 100 moves, 1024 found 35 and 4096 33).
BEAM_WIDTHS = (1024, 4096)
#: Positions a level may have before the enumeration gives up (a 6x6 one-box Sokoban has < 300).
MAX_STATES_PER_LEVEL = 200_000
#: Distance of a position from which no sequence of moves solves the level.
UNSOLVABLE = np.iinfo(np.int32).max


def eval_records(env_id: str, count: int) -> list[dict[str, Any]]:
    """The first ``count`` levels of ``env_id``'s frozen eval set (``seed``, ``level``, ...)."""
    records = load_eval_set(env_id)
    if count > len(records):
        raise InvalidOptionError(
            f"{env_id} has {len(records)} frozen eval levels; asked for the first {count}. "
            f"Ask for at most {len(records)}."
        )
    return records[:count]


def make_env(env_id: str, options: dict[str, Any]) -> TextEnv:
    """The unwrapped env ``env_id`` with ``options`` (as the trainer's eval makes it), rendering text."""
    return gym.make(env_id, render_mode="ansi", **options).unwrapped


def moves_per_turn(env: TextEnv) -> int:
    """How many moves one turn of ``env`` may hold (``max_actions_per_turn``, else 1)."""
    return int(getattr(env, "max_actions_per_turn", 1))


def move_budget(env: TextEnv) -> int:
    """Moves an episode of ``env`` allows: turns times moves per turn."""
    if env.max_turns is None:
        raise InvalidOptionError(
            f"{type(env).__name__} has no turn limit (max_turns=None); a blind route needs one. "
            "Pass max_turns."
        )
    return env.max_turns * moves_per_turn(env)


def play_moves(env: TextEnv, record: dict[str, Any], moves: Sequence[str]) -> bool:
    """Reset ``env`` to ``record``'s level, play ``moves`` (grouped into turns), return success."""
    env.reset(seed=int(record["seed"]), options={"level": record["level"]})
    per_turn = moves_per_turn(env)
    success = False
    for start in range(0, len(moves), per_turn):
        _, _, terminated, truncated, info = env.step(_answer(moves[start : start + per_turn]))
        success = bool(info["success"])
        if terminated or truncated:
            break
    return success


def blind_route_solves(
    env_id: str, records: Sequence[dict[str, Any]], options: dict[str, Any], route: Sequence[str],
    env: TextEnv | None = None,
) -> list[bool]:
    """Which of ``records`` the fixed move sequence ``route`` solves, replayed on ``env`` (default:
    a new ``env_id`` env with ``options``, closed after)."""
    own = env is None
    env = make_env(env_id, options) if env is None else env
    try:
        return [play_moves(env, record, route) for record in records]
    finally:
        if own:
            env.close()


def _answer(moves: Sequence[str]) -> str:
    return f"<answer>{' || '.join(moves)}</answer>"


def _action_names(env: TextEnv) -> tuple[str, ...]:
    names = getattr(env, "action_names", None)
    if not names:
        raise InvalidOptionError(
            f"{type(env).__name__} has no action_names; the random agent and the blind route need "
            "named moves."
        )
    return tuple(names)


# ---------------------------------------------------------------------- random and optimal
def random_baseline(
    env_id: str, records: Sequence[dict[str, Any]], options: dict[str, Any], episodes_per_level: int = 32,
    seed: int = 0,
) -> dict[str, Any]:
    """Success rate of uniformly random action names, ``episodes_per_level`` episodes a level.

    Episode ``(level, k)`` draws from ``SeedSequence([seed, level index, k])``: the figure does
    not depend on what else runs.
    """
    env = make_env(env_id, options)
    names, per_turn = _action_names(env), moves_per_turn(env)
    successes = 0
    for index, record in enumerate(records):
        for episode in range(episodes_per_level):
            rng = np.random.default_rng([seed, index, episode])
            env.reset(seed=int(record["seed"]), options={"level": record["level"]})
            done, info = False, {"success": False}
            while not done:
                moves = [names[int(choice)] for choice in rng.integers(len(names), size=per_turn)]
                _, _, terminated, truncated, info = env.step(_answer(moves))
                done = terminated or truncated
            successes += bool(info["success"])
    env.close()
    return {
        "success": successes / (len(records) * episodes_per_level),
        "episodes_per_level": episodes_per_level,
        "moves_per_turn": per_turn,
        "seed": seed,
    }


def optimal_baseline(
    env_id: str, records: Sequence[dict[str, Any]], options: dict[str, Any]
) -> dict[str, Any]:
    """Success rate of ``solution()`` replayed from each level's start, within the env's turn limit."""
    env = make_env(env_id, options)
    successes, lengths = 0, []
    for record in records:
        env.reset(seed=int(record["seed"]), options={"level": record["level"]})
        plan = env.solution() or []
        lengths.append(len(plan))
        successes += play_moves(env, record, plan)
    env.close()
    return {"success": successes / len(records), "mean_solution_moves": float(np.mean(lengths))}


# ---------------------------------------------------------------------- the positions of every level
@dataclass(frozen=True)
class LevelGraph:
    """Every position reachable on a set of levels, as one transition table over global ids.

    Attributes:
        actions: move names, the columns of ``next_state``.
        next_state: ``(S, A)`` int32, the position after each move; solved and lost positions
            lead to themselves (the episode is over).
        starts: ``(L,)`` int32, each level's starting position.
        solved: ``(S,)`` bool, the level is solved there.
        distance: ``(S,)`` int32, fewest moves to a solved position (:data:`UNSOLVABLE`: none).
    """

    actions: tuple[str, ...]
    next_state: np.ndarray
    starts: np.ndarray
    solved: np.ndarray
    distance: np.ndarray


def build_level_graph(
    env_id: str, records: Sequence[dict[str, Any]], options: dict[str, Any],
    max_states: int = MAX_STATES_PER_LEVEL,
) -> LevelGraph:
    """Enumerate each level's positions with the env's own ``step`` (breadth first from its start)."""
    env = make_env(env_id, {**options, "max_turns": 2**30})  # the search, not the env, counts moves
    actions = _action_names(env)
    rows: list[list[int]] = []
    solved: list[bool] = []
    starts = []
    for record in records:
        env.reset(seed=int(record["seed"]), options={"level": record["level"]})
        starts.append(len(rows))
        _enumerate_level(env, actions, rows, solved, max_states, record)
    env.close()
    next_state = np.asarray(rows, dtype=np.int32).reshape(len(rows), len(actions))
    solved_array = np.asarray(solved, dtype=bool)
    return LevelGraph(actions, next_state, np.asarray(starts, dtype=np.int32), solved_array,
                      _distances(next_state, solved_array))


def _enumerate_level(
    env: TextEnv, actions: tuple[str, ...], rows: list[list[int]], solved: list[bool], max_states: int,
    record: dict[str, Any],
) -> None:
    """Append the positions reachable from ``env``'s current one to ``rows`` (global ids)."""
    offset = len(rows)
    snapshots = [_snapshot(env)]
    ids = {(env.render(), False): offset}
    ended = [False]
    solved.append(False)
    while len(rows) - offset < len(snapshots):
        local = len(rows) - offset
        if ended[local]:
            rows.append([offset + local] * len(actions))
            continue
        row = []
        for name in actions:
            child = _snapshot(snapshots[local])
            _, _, terminated, _, info = child.step(_answer([name]))
            key = (child.render(), terminated)
            if key not in ids:
                if len(ids) >= max_states:
                    raise InvalidOptionError(
                        f"Level {record['seed']} has more than {max_states} reachable positions; the "
                        "blind-route search enumerates them all. Use levels with fewer boxes, or raise "
                        "max_states."
                    )
                ids[key] = offset + len(snapshots)
                snapshots.append(child)
                ended.append(terminated)
                solved.append(bool(info["success"]))
            row.append(ids[key])
        rows.append(row)


def _snapshot(env: TextEnv) -> TextEnv:
    """A copy of ``env`` that can be stepped without touching ``env``.

    The env's attributes are shared, except mutable containers (the board, box cells), which are
    copied: enough for envs whose position lives in flat attributes, and cheap (about 20 us).
    A route replay on fresh envs checks the search's result, so a wrong copy cannot pass unseen.
    """
    clone = copy.copy(env)
    for name, value in vars(env).items():
        if isinstance(value, (bytearray, list, dict, set, np.ndarray)):
            setattr(clone, name, copy.copy(value))
    return clone


def _distances(next_state: np.ndarray, solved: np.ndarray) -> np.ndarray:
    """Fewest moves from each position to a solved one, by relaxation over the table."""
    distance = np.where(solved, 0, UNSOLVABLE).astype(np.int32)
    for steps in range(1, len(distance) + 1):
        reached = (distance == UNSOLVABLE) & (distance[next_state] == steps - 1).any(axis=1)
        if not reached.any():
            break
        distance[reached] = steps
    return distance


# ---------------------------------------------------------------------- blind routes
def exact_blind_route(graph: LevelGraph, moves: int) -> tuple[int, list[str]]:
    """The most levels one fixed sequence of at most ``moves`` moves solves, and that sequence.

    Exhaustive: a depth-first search over the joint position of all levels, memoized on
    (joint position, moves left), skipping moves that change no level, and stopping where the
    levels still solvable in the moves left cannot beat what is solved already. Ties go to
    the first move in ``graph.actions`` order, and the route is a shortest one with the best count.
    """
    next_state, solved, distance = graph.next_state, graph.solved, graph.distance
    memo: dict[tuple[bytes, int], int] = {}

    def value(joint: np.ndarray, remaining: int) -> int:
        done = int(solved[joint].sum())
        reachable = int((~solved[joint] & (distance[joint] <= remaining)).sum())
        if remaining == 0 or reachable == 0:
            return done
        key = (joint.tobytes(), remaining)
        if key not in memo:
            best = done
            for column in range(next_state.shape[1]):
                child = next_state[joint, column]
                if not np.array_equal(child, joint):
                    best = max(best, value(child, remaining - 1))
                    if best == done + reachable:  # no route does better
                        break
            memo[key] = best
        return memo[key]

    target = value(graph.starts, moves)
    shortest = next(length for length in range(moves + 1) if value(graph.starts, length) == target)
    joint, route = graph.starts, []
    while int(solved[joint].sum()) < target:
        for column, name in enumerate(graph.actions):
            child = next_state[joint, column]
            if not np.array_equal(child, joint) and value(child, shortest - len(route) - 1) == target:
                joint = child
                route.append(name)
                break
    return target, route


def beam_blind_route(graph: LevelGraph, moves: int, width: int) -> tuple[int, list[str]]:
    """A fixed sequence of at most ``moves`` moves found by beam search, and the levels it solves.

    A lower bound on the best route: each depth keeps the ``width`` distinct joint positions
    that solve the most levels, then leave the most levels solvable in the moves left, then
    have the least total distance to a solution over those levels.
    """
    next_state, solved, distance = graph.next_state, graph.solved, graph.distance
    count = next_state.shape[1]
    beam = graph.starts[None, :]  # (W, L) joint positions
    parents: list[np.ndarray] = []  # per depth: (W,) index of the parent prefix
    columns: list[np.ndarray] = []  # per depth: (W,) the move that led here
    for depth in range(moves):
        children = next_state[beam].transpose(0, 2, 1).reshape(-1, beam.shape[1])  # (W * A, L)
        children, first = np.unique(children, axis=0, return_index=True)
        remaining = moves - depth - 1
        is_solved = solved[children]
        open_distance = np.where(is_solved, UNSOLVABLE, distance[children])
        in_reach = open_distance <= remaining
        score_solved = is_solved.sum(axis=1)
        score_reach = in_reach.sum(axis=1)
        score_distance = np.where(in_reach, open_distance, 0).sum(axis=1, dtype=np.int64)
        # Stable order: ties keep the order of (parent, move), so the search is reproducible.
        order = np.lexsort((first, score_distance, -score_reach, -score_solved))[:width]
        beam = children[order]
        parents.append(first[order] // count)
        columns.append(first[order] % count)
    best = int(np.argmax(solved[beam].sum(axis=1)))
    route_columns = []
    for depth in range(moves - 1, -1, -1):
        route_columns.append(int(columns[depth][best]))
        best = int(parents[depth][best])
    route = [graph.actions[column] for column in reversed(route_columns)]
    return _trim(graph, route)


def _trim(graph: LevelGraph, route: list[str]) -> tuple[int, list[str]]:
    """The levels ``route`` solves, and ``route`` cut after the move that reaches that count."""
    joint, counts = graph.starts, []
    for name in route:
        joint = graph.next_state[joint, graph.actions.index(name)]
        counts.append(int(graph.solved[joint].sum()))
    if not counts or counts[-1] == 0:
        return 0, []
    return counts[-1], route[: counts.index(counts[-1]) + 1]


def blind_route_baseline(
    env_id: str, records: Sequence[dict[str, Any]], options: dict[str, Any],
    beam_widths: Sequence[int] = BEAM_WIDTHS,
) -> dict[str, Any]:
    """Success rate of the best fixed move sequence found for these levels (see the module docstring)."""
    started = time.perf_counter()
    env = make_env(env_id, options)
    moves = move_budget(env)
    graph = build_level_graph(env_id, records, options)
    exact = moves <= EXACT_MAX_MOVES
    if exact:
        solved, route = exact_blind_route(graph, moves)
    else:
        tries = [beam_blind_route(graph, moves, width) for width in beam_widths]
        solved, route = max(tries, key=lambda found: found[0])  # the first of the best
    replayed = sum(blind_route_solves(env_id, records, options, route, env))
    env.close()
    if replayed != solved:
        raise Error(
            f"The blind route {route} solves {solved} of {len(records)} {env_id} levels in the search, but "
            f"{replayed} when replayed on the env: expected equal counts. The search assumes a deterministic "
            "env whose render() identifies the position; check the env's options (e.g. no slipping)."
        )
    result: dict[str, Any] = {
        "success": solved / len(records),
        "solved": solved,
        "route": route,
        "moves": moves,
        "search": "exhaustive" if exact else "beam",
        "exact": exact,
        "positions": int(len(graph.solved)),
        "seconds": round(time.perf_counter() - started, 2),
    }
    if not exact:
        result["beam_widths"] = {str(width): found[0] for width, found in zip(beam_widths, tries)}
        result["note"] = "beam search: a lower bound on the best fixed route"
    return result


def compute_baselines(
    env_id: str, records: Sequence[dict[str, Any]], options: dict[str, Any], seed: int = 0,
    episodes_per_level: int = 32,
) -> dict[str, Any]:
    """``random``, ``blind_route`` and ``optimal`` on ``records`` under the eval ``options``.

    Envs answered in free text (math, tool use) have no named moves to draw at random or to
    route blindly: they get ``optimal`` alone, and their lower mark is the base model's own
    figure (a learning curve's ``eval_success_before``).
    """
    env = make_env(env_id, options)
    named = bool(getattr(env, "action_names", None))
    env.close()
    baselines: dict[str, Any] = {}
    if named:
        baselines["random"] = random_baseline(env_id, records, options, episodes_per_level, seed)
        baselines["blind_route"] = blind_route_baseline(env_id, records, options)
    baselines["optimal"] = optimal_baseline(env_id, records, options)
    return baselines
