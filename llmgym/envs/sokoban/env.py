"""Sokoban as a text environment: push every box onto a target."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from llmgym.core import Outcome, TextEnv, level_rng
from llmgym.envs.sokoban.generator import check_max_level_moves, check_settings, generate_level
from llmgym.envs.sokoban.level import ACTIONS, Level, PaddedMaze, direction_offsets, parse_xsb
from llmgym.envs.sokoban.solver import Solver
from llmgym.error import InvalidOptionError
from llmgym.parsing import ActionParser
from llmgym.splits import LevelSpace, Split

#: Reward of every move, effective or not.
STEP_PENALTY = -0.1
#: Reward of pushing a box onto a target (and minus this for pushing one off a target).
BOX_ON_TARGET = 1.0
#: Reward added by the move that puts the last box on a target.
SOLVED_BONUS = 10.0
#: Solver budget (expanded positions) that ``solve_budget="auto"`` uses for levels of 3+ boxes.
AUTO_SOLVE_BUDGET = 3000

_NAME_INDEX = {name.lower(): index for index, name in enumerate(ACTIONS)}
# Observation symbols indexed by (target, box, player) bits; floor is "_" so tokenizers keep it.
_VIEW_SYMBOLS = tuple(ord(symbol) for symbol in "_.$*@+@+")
_VIEW_WALLS = bytes.maketrans(b"\x00\x01", b"_#")


class SokobanEnv(TextEnv):
    """Push every box onto a target; the player pushes, never pulls, one box at a time.

    Every reset draws a fresh level from ``np_random`` (room carved by a random walk, then
    reverse play from the solved position, so every level is solvable and no box starts on a
    target), and reports the fewest moves that solve it as ``info["optimal_steps"]``.

    ## Action Space
    Any string (``Text``). The action is the last ``<answer>...</answer>`` in it, holding one of
    ``Up``, ``Down``, ``Left``, ``Right`` (case-insensitive), or up to ``max_actions_per_turn``
    of them separated by ``||`` (e.g. ``<answer>Up || Up || Left</answer>``). A known name whose
    move is blocked (a wall, or a box against a wall or another box) is valid but not effective:
    the state stays, and the move earns ``blocked_penalty`` (by default the step penalty). An
    unknown name, no parseable answer, or too many names make the whole turn invalid: nothing
    moves and the reward is ``invalid_penalty``.

    ## Observation Space
    ``Text``: a line of feedback on the last turn, then the board, one row a line, in XSB
    symbols except floor: ``#`` wall, ``_`` floor, ``.`` target, ``$`` box, ``*`` box on target,
    ``@`` player, ``+`` player on target. With ``grid="spaced"`` the cells of a row are
    separated by spaces, so that common tokenizers give every cell its own token (compact rows
    such as ``#_$._#`` merge cells into tokens like ``._``). With ``coordinates=True`` a last
    line gives the player's row and column (1-based, row 1 at the top); with
    ``coordinates="all"`` the same line goes on with every box's and every target's (a box on a
    target is in both), the board's own content written out as numbers.

    ## Rewards
    Per move in a turn: ``step_penalty`` (default ``-0.1``), or ``blocked_penalty`` for a blocked
    move; ``+1`` for pushing a box onto a target, ``-1`` for pushing one off; ``+10`` when the
    last box reaches a target. A turn's reward is the sum over its moves.
    With ``progress_reward`` (a turn-level reward for training; default 0, off), a turn also earns
    ``progress_reward`` times its progress: how many moves fewer the exact solver needs after it
    than before (``+1`` for a move on an optimal path, ``-1`` for a step away, ``0`` for a
    blocked move, ``-k`` for a push that costs ``k`` moves more). Between solvable positions this
    is potential-based shaping, so no cycle of moves earns anything. A push after which no
    solution exists costs the moves the position needed plus one (a deadlock is permanent, so
    this happens at most once), and moves in such a position earn nothing more.
    An invalid turn: ``invalid_penalty`` (default ``-0.1``). ``info["success"]`` is True once
    every box is on a target, whatever the reward.

    ## Episode End
    Terminated when every box is on a target, or after ``max_invalid_actions`` invalid turns.
    Truncated after ``max_turns`` turns (a turn may hold several moves).

    ## Arguments
    - ``dim_room``: (rows, columns) of generated rooms, walls included; 5 to 32 each. Default (6, 6).
    - ``num_boxes``: boxes in generated levels, 1 to ``max_boxes(dim_room)`` (3 for 6x6, 5 for 8x8,
      7 for 10x10; see :func:`~llmgym.envs.sokoban.generator.max_boxes`). Default 1.
    - ``max_level_moves``: a curriculum knob for one box in rooms of at most 30 inner cells
      (up to 7x7): generated levels need exactly this many moves, or the room's most when it
      has no position that far. Default ``None``: the room's most, as the eval sets use.
    - ``start``: where a generated level starts. ``"room"`` (default, as the eval sets use): the
      generated position. ``"solution"``: a uniformly drawn point of a fewest-moves solution from
      it, from the start to one move before the end (drawn from the level's seed, so still
      reproducible from it). For training: the positions a policy meets on its way to the goal
      (the box moved, the player beside it) are as common as the rooms' starts, and levels come
      in every length up to the room's. ``reset(options={"level": ...})`` plays the given level as it is.
    - ``max_moves_left``: with ``start="solution"``, draw the point among the last this many of
      the solution's positions only (1 to ``max_moves_left`` moves left): a reverse curriculum's
      easiest stages, where a policy that has not learnt yet still solves some. Default ``None``:
      the whole solution.
    - ``step_penalty``: the reward of every move (default ``-0.1``). For training with
      returns-to-go: with a penalty, two visits of one state in failed episodes differ in
      return by the turns left after them, whatever was played; at ``0`` failed episodes
      return 0 and only solving (discounted by the trainer) is rewarded.
    - ``blocked_penalty``: the reward of a blocked move (into a wall, or a push the box cannot
      make), which leaves the state as it was. Default ``None``: ``step_penalty``, like any move.
      For training a policy that sees only the board: there, a blocked move repeats forever (the
      same board asks for the same move), and below ``step_penalty`` it scores worse than moving.
    - ``progress_reward``: weight of the solver's progress in each turn's reward (see Rewards).
      Default 0. It solves the position exactly after every turn, so it takes at most 2 boxes.
      The optimal moves earn the most, so a policy trained on immediate turn rewards learns
      the solver's moves; the observation is unchanged (it gives no move away).
    - ``max_turns``: turns before truncation. Default 100.
    - ``max_actions_per_turn``: how many ``||``-separated moves one turn may hold. Default 1.
    - ``grid``: ``"compact"`` (v0: ``#_$._#``) or ``"spaced"`` (v1: ``# _ $ . _ #``).
    - ``coordinates``: add the player's row and column under the board (``True``, v1), or the
      player's, the boxes' and the targets' (``"all"``). Default False.
    - ``solve_budget``: positions the solver may expand at reset to find ``optimal_steps``;
      ``None`` solves exactly, ``0`` skips solving, ``"auto"`` (default) is exact for levels of
      up to 2 boxes and ``AUTO_SOLVE_BUDGET`` for more. ``optimal_steps`` is ``None`` when the
      budget runs out. :meth:`solution` always solves exactly.
    - ``invalid_penalty``, ``max_invalid_actions``, ``render_mode``, ``action_parser``: see
      :class:`llmgym.core.TextEnv`.

    Reset options: ``{"level": xsb}`` plays a given XSB level (Boxoban files included; see
    :mod:`llmgym.envs.sokoban.level`). ``level()`` returns the episode's starting level as XSB,
    ``level_xsb()`` the current position, ``solution()`` an optimal plan from it.

    Snapshots: ``get_state()`` holds the level, the boxes, the player and the counters;
    ``state_key()`` (also ``info["state_key"]``) is the board as the observation shows it
    (walls, targets, boxes and player).

    ## Version History
    - v1: one token per cell (``grid="spaced"``), the player's coordinates under the board, and
      at most 30 turns. Same levels and rewards as v0.
    - v0: initial release.
    """

    action_names: ClassVar[tuple[str, ...]] = ACTIONS
    level_options: ClassVar[tuple[str, ...]] = ("dim_room", "num_boxes", "max_level_moves")
    teacher_options: ClassVar[dict[str, str]] = {"progress_reward": "solver"}
    format_hint = "Put one action (Up, Down, Left or Right) inside <answer>...</answer>."

    def __init__(
        self,
        *,
        dim_room: tuple[int, int] = (6, 6),
        num_boxes: int = 1,
        max_level_moves: int | None = None,
        start: Literal["room", "solution"] = "room",
        max_moves_left: int | None = None,
        step_penalty: float = STEP_PENALTY,
        blocked_penalty: float | None = None,
        progress_reward: float = 0.0,
        max_turns: int | None = 100,
        max_actions_per_turn: int = 1,
        grid: Literal["compact", "spaced"] = "compact",
        coordinates: bool | Literal["all"] = False,
        solve_budget: int | None | Literal["auto"] = "auto",
        invalid_penalty: float = -0.1,
        max_invalid_actions: int | None = None,
        render_mode: str | None = None,
        action_parser: ActionParser | str | None = None,
        split: Split = "train",
        held_out_levels: int | None = None,
    ) -> None:
        self.dim_room = check_settings(dim_room, num_boxes)
        check_max_level_moves(max_level_moves, self.dim_room, num_boxes)
        _check_options(max_actions_per_turn, grid, coordinates, solve_budget, progress_reward, num_boxes)
        _check_start(start, max_moves_left)
        super().__init__(
            render_mode=render_mode,
            invalid_penalty=invalid_penalty,
            max_invalid_actions=max_invalid_actions,
            max_turns=max_turns,
            action_parser=action_parser,
            split=split,
            held_out_levels=held_out_levels,
        )
        self.num_boxes = num_boxes
        self.max_level_moves = max_level_moves
        self.start = start
        self.max_moves_left = max_moves_left
        self.step_penalty = float(step_penalty)
        self.blocked_penalty = self.step_penalty if blocked_penalty is None else float(blocked_penalty)
        self.progress_reward = float(progress_reward)
        self.max_actions_per_turn = max_actions_per_turn
        self.solve_budget = solve_budget
        self.grid = grid
        self.coordinates = coordinates
        self._system_prompt = _system_prompt(max_actions_per_turn, grid, coordinates)
        self._start = Level(1, 1, b"\x01", (), (), 0)  # replaced at reset
        self._maze = PaddedMaze.of(self._start)
        self._solver: Solver | None = None
        self._offsets = direction_offsets(3)
        self._view: tuple[int, ...] = ()
        self._is_target = bytearray()
        self._has_box = bytearray()
        self._player = 0
        self._boxes_off_target = 0
        self._board = bytearray()
        self._text: str | None = None  # self._board decoded, until the next _paint
        self._to_solve: int | None | Literal["unknown"] = "unknown"  # moves to solve; None: no solution

    @property
    def system_prompt(self) -> str:
        return self._system_prompt

    # ------------------------------------------------------------------ TextEnv hooks
    def _reset_task(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        info: dict[str, Any] = {}
        if "level" in options:
            level = parse_xsb(options["level"])
        else:
            level_seed = self._draw_level_seed()
            rng = level_rng(level_seed)
            level = generate_level(rng, self.dim_room, self.num_boxes, self.max_level_moves)
            self._room = level
            if self.start == "solution":
                level = self._on_solution(level, rng)
            info["seed"] = level_seed
        self._load(level)
        info["optimal_steps"] = self._optimal_steps(len(level.boxes))
        return f"Push every box onto a target.\n{self._observe()}", info

    def curriculum(self) -> str | None:
        """Starts on a solution (``start``, ``max_moves_left``) instead of the generated position.

        Other level options (``max_level_moves``) change the level space, which
        :func:`llmgym_train.planner.curriculum_of` compares with the evaluated env's itself.
        """
        if self.start != "solution":
            return None
        left = self.max_moves_left
        where = "anywhere" if left is None else f"1 to {left} moves from the end"
        return f"starts on the solver's fewest-moves solution, {where}"

    def _apply(self, action: str) -> Outcome:
        moves = read_moves(action, self.max_actions_per_turn)
        if isinstance(moves, str):
            return Outcome(f"{moves}\n{self._observe()}", valid=False, effective=False)
        reward = 0.0
        effective = False
        feedback = []
        before = self._moves_to_solve() if self.progress_reward else None
        steps = [(ACTIONS[move], self._offsets[move]) for move in moves]
        for name, step in steps:
            move_reward, message, moved = self._move(step)
            reward += move_reward
            effective = effective or moved
            feedback.append(f"{name}: {message}" if len(steps) > 1 else message)
            if not self._boxes_off_target:
                reward += SOLVED_BONUS
                feedback.append(SOLVED)
                break
        solved = not self._boxes_off_target
        if self.progress_reward and effective:
            reward += self.progress_reward * _progress(before, self._moves_to_solve())
        observation = f"{' '.join(feedback)}\n{self._observe()}"
        return Outcome(observation, reward, terminated=solved, success=solved, effective=effective)

    def _observe(self) -> str:
        text = self._text
        if text is None:  # decoded once per change: the observation and the state key share it
            text = self._board.decode()
            if self.coordinates:
                places = [f"You are at {self._where([self._player])}"]
                if self.coordinates == "all":
                    boxes, targets = [cell for cell, box in enumerate(self._has_box) if box], self._maze.targets
                    places.append(f"{'boxes' if len(boxes) > 1 else 'box'} at {self._where(boxes)}")
                    places.append(f"{'targets' if len(targets) > 1 else 'target'} at {self._where(targets)}")
                text += f"\n{'; '.join(places)}."
            self._text = text
        return text

    def _where(self, cells: Sequence[int]) -> str:
        """``row 3, column 4`` for each padded cell (1-based), joined with `` and ``."""
        places = (divmod(self._maze.unpad(cell), self._start.width) for cell in cells)
        return " and ".join(f"row {row + 1}, column {column + 1}" for row, column in places)

    # ------------------------------------------------------------------ snapshots
    def _task_state(self) -> tuple[Level, bytes, int, int, bytes]:
        return self._start, bytes(self._has_box), self._player, self._boxes_off_target, bytes(self._board)

    def _restore_task(self, task: tuple[Level, bytes, int, int, bytes]) -> None:
        start, has_box, player, boxes_off_target, board = task
        if start != self._start:
            self._load(start)  # the maze, targets and view of another level; boxes follow
        self._has_box = bytearray(has_box)
        self._player = player
        self._boxes_off_target = boxes_off_target
        self._board = bytearray(board)
        self._text = None
        self._to_solve = "unknown"

    #: The state key is the board: walls, targets, boxes and player (one call, it runs every step).
    _state_key = _observe

    # ------------------------------------------------------------------ level access
    def level(self) -> str:
        """The episode's starting level as XSB text."""
        return self._start.xsb()

    def _split_level(self) -> str:
        """The room a drawn episode was taken from (with ``start="solution"``, not the position it starts at)."""
        return self._room.xsb()

    def _eval_spaces(self) -> list[LevelSpace]:
        """This space's eval rooms, and with ``max_level_moves`` also the full rooms' (the id's eval set)."""
        spaces = super()._eval_spaces()
        if self.max_level_moves is not None:
            entry_point = spaces[0].entry_point
            spaces.append(LevelSpace.of(entry_point, {"dim_room": self.dim_room, "num_boxes": self.num_boxes,
                                                   "max_level_moves": None}))
        return spaces

    def level_xsb(self) -> str:
        """The current position as XSB text (what ``reset(options={"level": ...})`` takes)."""
        return self._current().xsb()

    def solution(self) -> list[str] | None:
        """Action names of a fewest-moves solution from the current position (exact, no budget)."""
        boxes = [cell for cell, box in enumerate(self._has_box) if box]
        return self._get_solver().plan(self._player, boxes)

    metadata = {**TextEnv.metadata, "render_modes": ["ansi", "rgb_array"]}

    def _render_rgb(self) -> Any:
        from llmgym.render import sokoban

        return sokoban(self.level_xsb())

    # ------------------------------------------------------------------ internals
    def _on_solution(self, level: Level, rng: Any) -> Level:
        """The position after a uniform number of moves (0 to all but the last, or with ``max_moves_left``
        to all but the last that many) of a fewest-moves solution of ``level``."""
        self._load(level)
        plan = self.solution()
        assert plan, "generated levels are solvable and unsolved"
        if self.max_moves_left is None:
            done = int(rng.integers(len(plan)))
        else:
            done = int(rng.integers(max(0, len(plan) - self.max_moves_left), len(plan)))
        for name in plan[:done]:
            self._move(self._offsets[_NAME_INDEX[name.lower()]])
        return self._current()

    def _load(self, level: Level) -> None:
        self._start = level
        self._maze = maze = PaddedMaze.of(level)
        self._solver = None
        self._to_solve = "unknown"
        self._offsets = direction_offsets(maze.padded_width)
        spaced = self.grid == "spaced"
        self._view = _view_indices(level.height, level.width, 2 if spaced else 1)
        self._is_target = bytearray(len(maze.walls))
        self._has_box = bytearray(len(maze.walls))
        for cell in maze.targets:
            self._is_target[cell] = 1
        for cell in level.boxes:
            self._has_box[maze.pad(cell)] = 1
        self._player = maze.pad(level.player)
        self._boxes_off_target = len(set(level.boxes) - set(level.targets))
        walls, width = level.walls, level.width
        rows = (walls[start : start + width].translate(_VIEW_WALLS) for start in range(0, len(walls), width))
        if spaced:
            rows = (b" ".join(row[column : column + 1] for column in range(width)) for row in rows)
        self._board = bytearray(b"\n".join(rows))
        for cell in maze.targets:
            self._paint(cell)
        for cell in level.boxes:
            self._paint(maze.pad(cell))
        self._paint(self._player)

    def _optimal_steps(self, num_boxes: int) -> int | None:
        budget = self.solve_budget
        if budget == "auto":
            budget = None if num_boxes <= 2 else AUTO_SOLVE_BUDGET
        if budget == 0:
            return None
        boxes = [cell for cell, box in enumerate(self._has_box) if box]
        return self._get_solver().optimal_steps(self._player, boxes, budget)

    def _moves_to_solve(self) -> int | None:
        """The exact solver's fewest moves from the current position (``None``: no solution), cached per position."""
        if self._to_solve == "unknown":
            boxes = [cell for cell, box in enumerate(self._has_box) if box]
            self._to_solve = self._get_solver().optimal_steps(self._player, boxes)
        return self._to_solve

    def _get_solver(self) -> Solver:
        if self._solver is None:
            self._solver = Solver(self._maze)
        return self._solver

    def _move(self, step: int) -> tuple[float, str, bool]:
        """Play one move; return its reward, feedback, and whether anything moved."""
        player, has_box = self._player, self._has_box
        ahead = player + step
        if self._maze.walls[ahead]:
            return self.blocked_penalty, _BLOCKED_BY_WALL, False
        reward, message = self.step_penalty, _MOVED
        if has_box[ahead]:
            beyond = ahead + step
            if self._maze.walls[beyond] or has_box[beyond]:
                return self.blocked_penalty, _BLOCKED_BOX, False
            has_box[ahead], has_box[beyond] = 0, 1
            onto, off = self._is_target[beyond], self._is_target[ahead]
            self._boxes_off_target += off - onto
            reward += BOX_ON_TARGET * (onto - off)
            message = _PUSH_MESSAGES[onto - off]
            self._paint(beyond)
        self._player = ahead
        self._to_solve = "unknown"
        self._paint(player)
        self._paint(ahead)
        return reward, message, True

    def _paint(self, cell: int) -> None:
        """Redraw ``cell`` (a padded index) on the observation board."""
        symbol = self._is_target[cell] | self._has_box[cell] << 1 | (cell == self._player) << 2
        self._board[self._view[cell]] = _VIEW_SYMBOLS[symbol]
        self._text = None

    def _current(self) -> Level:
        maze = self._maze
        boxes = tuple(maze.unpad(cell) for cell, box in enumerate(self._has_box) if box)
        start = self._start
        return Level(start.height, start.width, start.walls, start.targets, boxes, maze.unpad(self._player))


_COORDINATES = " Rows are numbered from 1 at the top, columns from 1 at the left."
_MOVED = "You moved."
SOLVED = "Every box is on a target: solved!"
_BLOCKED_BY_WALL = "You walked into a wall: state unchanged."
_BLOCKED_BOX = "The box cannot move there (wall or box behind it): state unchanged."
_PUSH_MESSAGES = {  # by (onto a target) - (off a target)
    0: "You pushed a box.",
    1: "You pushed a box onto a target.",
    -1: "You pushed a box off a target.",
}


def _check_start(start: str, max_moves_left: int | None) -> None:
    """Refuse an unknown ``start``, and a ``max_moves_left`` that is not a count for ``start="solution"``."""
    if start not in ("room", "solution"):
        raise InvalidOptionError(f'start must be "room" or "solution", got {start!r}.')
    moves_left_ok = max_moves_left is None or (
        start == "solution" and isinstance(max_moves_left, int) and max_moves_left >= 1
    )
    if not moves_left_ok:
        raise InvalidOptionError(
            f'max_moves_left caps the moves left of start="solution" and is an int >= 1; got '
            f"max_moves_left={max_moves_left!r} with start={start!r}."
        )


def _check_options(
    max_actions_per_turn: int, grid: str, coordinates: Any, solve_budget: Any, progress_reward: float, num_boxes: int
) -> None:
    """Refuse constructor options out of range, with what is allowed."""
    if max_actions_per_turn < 1:
        raise InvalidOptionError(f"max_actions_per_turn must be >= 1, got {max_actions_per_turn}.")
    if progress_reward and num_boxes > 2:
        raise InvalidOptionError(
            f"progress_reward solves the position exactly after every turn, which is only cheap for up to 2 "
            f"boxes; got num_boxes={num_boxes}. Use progress_reward=0 for more boxes."
        )
    if grid not in ("compact", "spaced"):
        raise InvalidOptionError(f'grid must be "compact" or "spaced", got {grid!r}.')
    if coordinates not in (False, True, "all"):
        raise InvalidOptionError(f'coordinates must be False, True (the player) or "all", got {coordinates!r}.')
    budget_is_count = isinstance(solve_budget, int) and solve_budget >= 0
    if not (solve_budget is None or solve_budget == "auto" or budget_is_count):
        raise InvalidOptionError(
            f'solve_budget must be None (exact), "auto", or an int >= 0 (0 skips solving), '
            f"got {solve_budget!r}."
        )


def _progress(before: int | None, after: int | None) -> int:
    """Moves of progress from ``before`` to ``after`` moves-to-solve (``None``: no solution)."""
    if before is None:  # no solution before: nothing left to gain or lose
        return 0
    return -(before + 1) if after is None else before - after


def read_moves(action: str, max_actions_per_turn: int) -> list[int] | str:
    """The :data:`ACTIONS` index of each move of a parsed action, or the feedback line of an invalid turn."""
    names = action.split("||") if "||" in action else (action,)
    if len(names) > max_actions_per_turn:
        return (
            f"Invalid action: at most {max_actions_per_turn} action(s) per turn, got {len(names)}. "
            "State unchanged."
        )
    moves = []
    for name in names:
        index = _NAME_INDEX.get(name.strip().lower())
        if index is None:
            return (
                f"Invalid action: {name.strip()[:40]!r} is not an action; use Up, Down, Left or Right. "
                "State unchanged."
            )
        moves.append(index)
    return moves


@functools.cache
def _view_indices(height: int, width: int, stride: int = 1) -> tuple[int, ...]:
    """For each padded cell of a ``height`` x ``width`` level, its index on the text board (-1: the ring).

    ``stride`` is 1 for compact rows and 2 for rows whose cells are separated by spaces.
    """
    padded_width = width + 2
    row_length = stride * width if stride > 1 else width + 1  # a row's text and its newline
    view = [-1] * ((height + 2) * padded_width)
    for row in range(height):
        for column in range(width):
            view[(row + 1) * padded_width + column + 1] = row * row_length + stride * column
    return tuple(view)


def _system_prompt(max_actions_per_turn: int, grid: str = "compact", coordinates: bool | str = False) -> str:
    several = (
        f" You may give up to {max_actions_per_turn} actions in one turn, separated by ||,"
        " for example <answer>Up || Left</answer>."
        if max_actions_per_turn > 1
        else ""
    )
    if grid == "spaced":
        # v1: short, because an agent that shows only the latest state repeats it every turn.
        where = " Row 1 is the top, column 1 the left." if coordinates else ""
        return (
            "Sokoban: push every box $ onto a target . by walking into it; you are @ (+ on a target), "
            f"# is wall, _ floor, * a box on a target. Boxes cannot be pulled.{where}{several} "
            "Answer with one move, Up, Down, Left or Right, as <answer>Up</answer>."
        )
    return (
        "You are solving a Sokoban puzzle. Push every box onto a target. You move one cell at a time: "
        "Up, Down, Left or Right. Walking into a box pushes it one cell further, if that cell is free; "
        "you cannot pull boxes or push two at once, so avoid pushing a box into a corner. "
        "Board symbols: # wall, _ floor, . target, $ box, * box on target, @ you, + you on a target."
        f"{_COORDINATES if coordinates else ''}{several} Answer with your action inside <answer>...</answer>, "
        "for example <answer>Up</answer>."
    )
