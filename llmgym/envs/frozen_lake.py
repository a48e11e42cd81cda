"""FrozenLake as a text environment: walk from the start to the goal without falling in a hole."""

from __future__ import annotations

import functools
from typing import Any, Literal

import numpy as np

from llmgym.core import Outcome, TextEnv, level_rng
from llmgym.error import InvalidOptionError, LevelFormatError
from llmgym.parsing import ActionParser
from llmgym.splits import Split

ACTIONS = ("Left", "Down", "Right", "Up")
_DELTAS = {"left": (0, -1), "down": (1, 0), "right": (0, 1), "up": (-1, 0)}
_CANONICAL = {name.lower(): name for name in ACTIONS}
#: For a slip: the two directions perpendicular to the intended one.
_PERPENDICULAR = {"left": ("up", "down"), "right": ("up", "down"), "up": ("left", "right"), "down": ("left", "right")}
_CELL_BYTES = bytes.maketrans(b"\x00\x01", b"HF")
_LEVEL_LETTERS = frozenset("SFHG")
#: Observation symbols: easier for a tokenizer than Gymnasium's letters, and distinct from them.
_SYMBOL_TABLE = str.maketrans({"S": "_", "F": "_", "H": "O", "G": "G"})
#: Feedback lines of a valid move.
MOVED = "You moved."
BUMPED = "You bumped into the edge of the lake and did not move."
REACHED_GOAL = "You reached the goal!"
FELL_IN_HOLE = "You fell into a hole. The episode is over."


class FrozenLakeEnv(TextEnv):
    """Cross a frozen lake from the start (top-left) to the goal (bottom-right).

    Every reset draws a fresh random map from ``np_random`` in which a path from start to
    goal is guaranteed (checked by search). Maps use Gymnasium's letters ``S F H G``.

    ## Action Space
    Any string (``Text``). The action is the last ``<answer>...</answer>`` in it, holding one of
    ``Left``, ``Down``, ``Right``, ``Up`` (case-insensitive), or up to ``max_actions_per_turn``
    of them separated by ``||`` (e.g. ``<answer>Right || Right || Down</answer>``).

    ## Observation Space
    ``Text``: a line of feedback on the last action, then the map, one row a line:
    ``P`` the player, ``_`` frozen ice, ``O`` a hole, ``G`` the goal. With ``grid="spaced"``
    the cells of a row are separated by spaces (``_ _ O _``), so that common tokenizers give
    every cell its own token (compact rows such as ``P___`` merge into multi-cell tokens).
    With ``coordinates=True`` a last line gives the player's row and column (1-based, row 1
    at the top): the same information as the map, in a form a small model reads directly.

    ## Rewards
    ``1`` for reaching the goal, ``0`` otherwise; ``invalid_penalty`` (default ``-0.1``) for a
    turn with no parseable action, an unknown action name, or too many actions. A move into
    the lake's edge is valid but not effective (the player stays; reward ``bump_penalty``,
    default 0). A penalty there is a turn-level reward for training: under greedy play a
    Markov policy that bumps into the edge repeats the same observation until truncation.

    ## Episode End
    Terminated on reaching the goal (``info["success"]`` True) or falling into a hole, or after
    ``max_invalid_actions`` invalid turns. Truncated after ``max_turns`` turns.

    ## Arguments
    - ``size``: side of the square map (2 to 32). Default 4.
    - ``frozen_probability``: chance that a cell is ice rather than a hole when a map is drawn
      (Gymnasium's ``p``). Default 0.8.
    - ``success_rate``: chance that a move goes the intended way; otherwise it slips to one of
      the two perpendicular directions with equal chance. 1.0 is deterministic.
    - ``max_actions_per_turn``: how many ``||``-separated actions one turn may hold. Default 1.
    - ``max_turns``: turns before truncation. Default ``4 * size``.
    - ``grid``: ``"compact"`` (v0: ``P__O``) or ``"spaced"`` (v1: ``P _ _ O``).
    - ``coordinates``: add the player's row and column under the map (v1). Default False.
    - ``bump_penalty``: reward of a valid turn that leaves the player where it was (a move
      into the edge). Default 0; success and the maps do not depend on it.
    - ``invalid_penalty``, ``max_invalid_actions``, ``render_mode``, ``action_parser``: see
      :class:`llmgym.core.TextEnv`.

    Reset options: ``{"level": ["SFFF", "FHFH", ...]}`` plays a given map (rows of ``S F H G``,
    one ``S`` and one ``G``).

    Snapshots: ``get_state()`` holds the map, the position, the counters and ``np_random``
    (the slips' source); ``state_key()`` (also ``info["state_key"]``) is the map with the player
    on it, as the observation shows it.

    ## Version History
    - v1: one token per cell (``grid="spaced"``) and the player's coordinates under the map.
      Same maps and rewards as v0.
    - v0: initial release.
    """

    action_names = ACTIONS
    format_hint = "Put one action (Left, Down, Right or Up) inside <answer>...</answer>."
    level_options = ("size", "frozen_probability")

    def __init__(
        self,
        *,
        size: int = 4,
        frozen_probability: float = 0.8,
        success_rate: float = 1.0,
        max_actions_per_turn: int = 1,
        max_turns: int | None = None,
        grid: Literal["compact", "spaced"] = "compact",
        coordinates: bool = False,
        bump_penalty: float = 0.0,
        invalid_penalty: float = -0.1,
        max_invalid_actions: int | None = None,
        render_mode: str | None = None,
        action_parser: ActionParser | str | None = None,
        split: Split = "train",
        held_out_levels: int | None = None,
    ) -> None:
        if grid not in ("compact", "spaced"):
            raise InvalidOptionError(f'grid must be "compact" or "spaced", got {grid!r}.')
        if not 2 <= size <= 32:
            raise InvalidOptionError(f"size must be between 2 and 32, got {size}.")
        if not 0.0 < frozen_probability <= 1.0:
            raise InvalidOptionError(f"frozen_probability must be in (0, 1], got {frozen_probability}.")
        if not 0.0 < success_rate <= 1.0:
            raise InvalidOptionError(f"success_rate must be in (0, 1], got {success_rate}.")
        if max_actions_per_turn < 1:
            raise InvalidOptionError(f"max_actions_per_turn must be >= 1, got {max_actions_per_turn}.")
        super().__init__(
            render_mode=render_mode,
            invalid_penalty=invalid_penalty,
            max_invalid_actions=max_invalid_actions,
            max_turns=4 * size if max_turns is None else max_turns,
            action_parser=action_parser,
            split=split,
            held_out_levels=held_out_levels,
        )
        self.size = size
        self.frozen_probability = frozen_probability
        self.success_rate = success_rate
        self.max_actions_per_turn = max_actions_per_turn
        self.grid = grid
        self.coordinates = coordinates
        self.bump_penalty = float(bump_penalty)
        self._rows: list[str] = []
        self._board = ""  # the map in observation symbols, rows joined by newlines, without the player
        self._views: dict[tuple[int, int], str] = {}  # the board with the player, by position
        self._position = (0, 0)
        self._start = (0, 0)

    @property
    def system_prompt(self) -> str:
        several = (
            f" You may give up to {self.max_actions_per_turn} actions in one turn, separated by ||."
            if self.max_actions_per_turn > 1
            else ""
        )
        slippery = (
            f" The ice is slippery: a move goes the intended way with probability {self.success_rate:g},"
            " otherwise sideways."
            if self.success_rate < 1.0
            else ""
        )
        if self.grid == "spaced":
            # v1: short, because an agent that shows only the latest state repeats it every turn.
            where = " Row 1 is the top, column 1 the left." if self.coordinates else ""
            return (
                "FrozenLake: move P to the goal G without stepping on a hole O; _ is ice."
                f"{where}{slippery}{several} Answer with one move, Left, Down, Right or Up, as <answer>Down</answer>."
            )
        layout = " Rows are numbered from 1 at the top, columns from 1 at the left." if self.coordinates else ""
        return (
            "You are solving the FrozenLake puzzle. Walk from your position P to the goal G without "
            "stepping into a hole O. Ice is _. Actions: Left, Down, Right, Up."
            f"{layout}{slippery}{several} Answer with your action inside <answer>...</answer>, "
            "for example <answer>Down</answer>."
        )

    # ------------------------------------------------------------------ TextEnv hooks
    def _reset_task(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        info: dict[str, Any] = {}
        if "level" in options:
            rows = parse_level(options["level"])
        else:
            level_seed = self._draw_level_seed()
            rows = generate_map(level_rng(level_seed), self.size, self.frozen_probability)
            info["seed"] = level_seed
        self._set_map(rows)
        flat = "".join(rows)
        passable = int("".join("0" if letter == "H" else "1" for letter in reversed(flat)), 2)
        info["optimal_steps"] = _distance(passable, self.size, flat.index("S"), flat.index("G"))
        return f"Reach the goal.\n{self._observe()}", info

    def _apply(self, action: str) -> Outcome:
        names = read_moves(action, self.max_actions_per_turn)
        if isinstance(names, str):
            return Outcome(f"{names}\n{self._observe()}", valid=False, effective=False)
        start = self._position
        for name in names:
            cell = self._move(name)
            if cell in "HG":
                return self._finish(cell, start)
        moved = self._position != start
        if moved:
            return Outcome(f"{MOVED}\n{self._observe()}")
        return Outcome(f"{BUMPED}\n{self._observe()}", reward=self.bump_penalty, effective=False)

    def _observe(self) -> str:
        view = self._views.get(self._position)
        if view is None:  # drawn once per position and map: observations and state keys reuse it
            row, col = self._position
            if self.grid == "spaced":
                index = row * 2 * self.size + 2 * col
            else:
                index = row * (self.size + 1) + col
            view = self._board[:index] + "P" + self._board[index + 1 :]
            if self.coordinates:
                view = f"{view}\nYou are at row {row + 1}, column {col + 1}."
            self._views[self._position] = view
        return view

    # ------------------------------------------------------------------ snapshots
    def _task_state(self) -> tuple[tuple[str, ...], tuple[int, int]]:
        return tuple(self._rows), self._position

    def _restore_task(self, task: tuple[tuple[str, ...], tuple[int, int]]) -> None:
        rows, position = task
        if tuple(self._rows) != rows:
            self._set_map(list(rows))
        self._position = position

    #: The state key is the map with the player on it: map + position (one call, it runs every step).
    _state_key = _observe

    # ------------------------------------------------------------------ level access
    def level(self) -> list[str]:
        return list(self._rows)

    def solution(self) -> list[str] | None:
        return shortest_path(self._rows, self._position)

    metadata = {**TextEnv.metadata, "render_modes": ["ansi", "rgb_array"]}

    def _render_rgb(self) -> np.ndarray:
        from llmgym.render import frozen_lake

        return frozen_lake(self._rows, self._position)

    # ------------------------------------------------------------------ internals
    def _set_map(self, rows: list[str]) -> None:
        self._rows = rows
        self.size = len(rows)
        separator = " " if self.grid == "spaced" else ""
        self._board = "\n".join(separator.join(row) for row in rows).translate(_SYMBOL_TABLE)
        self._views = {}
        start = "".join(rows).index("S")
        self._start = self._position = divmod(start, self.size)

    def _move(self, name: str) -> str:
        if self.success_rate < 1.0 and self.np_random.random() >= self.success_rate:
            name = _PERPENDICULAR[name][int(self.np_random.integers(2))]
        d_row, d_col = _DELTAS[name]
        row = min(max(self._position[0] + d_row, 0), self.size - 1)
        col = min(max(self._position[1] + d_col, 0), self.size - 1)
        self._position = (row, col)
        return self._rows[row][col]

    def _finish(self, cell: str, start: tuple[int, int]) -> Outcome:
        if cell == "G":
            return Outcome(f"{REACHED_GOAL}\n{self._observe()}", reward=1.0, terminated=True, success=True)
        return Outcome(
            f"{FELL_IN_HOLE}\n{self._observe()}",
            terminated=True,
            effective=self._position != start,
        )


def read_moves(action: str, max_actions_per_turn: int) -> list[str] | str:
    """The lower-cased move names of a parsed action, or the feedback line of an invalid turn."""
    names = [part.strip().lower() for part in action.split("||")]
    if len(names) > max_actions_per_turn:
        return (
            f"Invalid action: at most {max_actions_per_turn} action(s) per turn, got {len(names)}. "
            "State unchanged."
        )
    unknown = [name for name in names if name not in _DELTAS]
    if unknown:
        return f"Invalid action {unknown[0]!r}: use Left, Down, Right or Up. State unchanged."
    return names


# ---------------------------------------------------------------------- maps
def generate_map(rng: np.random.Generator, size: int, frozen_probability: float = 0.8) -> list[str]:
    """A random ``size`` x ``size`` map with start top-left, goal bottom-right and a path between.

    Cells are drawn ice with ``frozen_probability`` until a path exists; the check is a flood
    fill over bitboards, so a draw costs a few microseconds.
    """
    cells = size * size
    while True:
        frozen = rng.random(cells) < frozen_probability
        frozen[0] = frozen[cells - 1] = True
        passable = int.from_bytes(np.packbits(frozen, bitorder="little").tobytes(), "little")
        if _distance(passable, size) is not None:
            break
    flat = "S" + frozen[1:-1].tobytes().translate(_CELL_BYTES).decode() + "G"
    return [flat[row * size : (row + 1) * size] for row in range(size)]


@functools.cache
def _column_masks(size: int) -> tuple[int, int, int]:
    """Bitboards of all cells, all but the first column, all but the last column."""
    full = (1 << (size * size)) - 1
    first_col = sum(1 << (row * size) for row in range(size))
    return full, full & ~first_col, full & ~(first_col << (size - 1))


def _distance(passable: int, size: int, start: int = 0, goal: int | None = None) -> int | None:
    """Steps from cell ``start`` to ``goal`` over the ``passable`` bitboard (bit ``r*size+c``), or None."""
    cells = size * size
    goal_bit = 1 << (cells - 1 if goal is None else goal)
    full, not_first_col, not_last_col = _column_masks(size)
    reached = 1 << start
    steps = 0
    while not reached & goal_bit:
        grown = reached | (reached << size) | (reached >> size)
        grown |= ((reached & not_last_col) << 1) | ((reached & not_first_col) >> 1)
        grown &= passable & full
        if grown == reached:
            return None
        reached = grown
        steps += 1
    return steps


def shortest_path(rows: list[str], position: tuple[int, int]) -> list[str] | None:
    """Action names of a shortest hole-free path from ``position`` to the goal (deterministic moves)."""
    size = len(rows)
    goal = "".join(rows).index("G")
    parents: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {position: None}
    frontier = [position]
    while frontier:
        next_frontier = []
        for row, col in frontier:
            if row * size + col == goal:
                plan: list[str] = []
                cell = (row, col)
                while (link := parents[cell]) is not None:
                    cell, name = link
                    plan.append(name)
                return plan[::-1]
            if rows[row][col] == "H":
                continue
            for name in ACTIONS:
                d_row, d_col = _DELTAS[name.lower()]
                neighbour = (row + d_row, col + d_col)
                if 0 <= neighbour[0] < size and 0 <= neighbour[1] < size and neighbour not in parents:
                    if rows[neighbour[0]][neighbour[1]] != "H":
                        parents[neighbour] = ((row, col), name)
                        next_frontier.append(neighbour)
        frontier = next_frontier
    return None


def parse_level(level: Any) -> list[str]:
    """Validate a map given as a list of row strings (or one newline-separated string)."""
    if isinstance(level, str):
        level = level.strip().splitlines()
    if not isinstance(level, (list, tuple)) or not level or not all(isinstance(row, str) for row in level):
        raise LevelFormatError(
            f'A FrozenLake level is a list of row strings such as ["SFFF", "FHFH", "FFFH", "HFFG"]; got {level!r:.80}.'
        )
    rows = [row.strip() for row in level]
    size = len(rows)
    for number, row in enumerate(rows):
        if len(row) != size:
            raise LevelFormatError(f"FrozenLake maps are square: row {number} has {len(row)} cells, expected {size}.")
        bad = set(row) - _LEVEL_LETTERS
        if bad:
            raise LevelFormatError(
                f"Row {number} holds {''.join(sorted(bad))!r}; use only S (start), F (ice), H (hole), G (goal)."
            )
    flat = "".join(rows)
    if flat.count("S") != 1 or flat.count("G") != 1:
        raise LevelFormatError(
            f"A FrozenLake map needs exactly one S and one G; got {flat.count('S')} S and {flat.count('G')} G."
        )
    if size < 2:
        raise LevelFormatError(f"A FrozenLake map must be at least 2x2, got {size}x{size}.")
    return rows
