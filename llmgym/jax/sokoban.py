"""Sokoban as pure JAX functions, move for move the text env's (``llmgym/Sokoban-*``).

The board is kept as the text env keeps it: the level plus one ring of wall, flattened
row-major, so a neighbour is ``cell + offset`` and never leaves the grid. A level is its
walls, targets and boxes (``(cells,)`` bool each) and the player's cell.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from llmgym.envs.sokoban.env import (
    _BLOCKED_BOX,
    _BLOCKED_BY_WALL,
    _MOVED,
    _PUSH_MESSAGES,
    BOX_ON_TARGET,
    SOLVED,
    SOLVED_BONUS,
    STEP_PENALTY,
    read_moves,
)
from llmgym.envs.sokoban.level import ACTIONS, Level, PaddedMaze, direction_offsets, parse_xsb
from llmgym.error import LevelFormatError
from llmgym.jax.common import Episode, GridCore, Move, StepResult, new_episode, select

# Events of a valid move; EVENT_SOLVED is added when the move leaves every box on a target.
EVENT_MOVED, EVENT_WALL, EVENT_BLOCKED, EVENT_PUSHED, EVENT_ONTO, EVENT_OFF = range(6)
EVENT_SOLVED = 6
_MESSAGES = (_MOVED, _BLOCKED_BY_WALL, _BLOCKED_BOX, _PUSH_MESSAGES[0], _PUSH_MESSAGES[1], _PUSH_MESSAGES[-1])
# The text env's reward of each move event: STEP_PENALTY plus BOX_ON_TARGET * (onto - off),
# summed from 0.0 as its turn loop does.
_MOVE_REWARDS = tuple(0.0 + (STEP_PENALTY + BOX_ON_TARGET * change) for change in (0, 0, 0, 0, 1, -1))
# Symbol index in "#_.$*@+" by (target, box, player) bits, as the text env paints a cell.
_CELL_SYMBOLS = np.array([1, 2, 3, 4, 5, 6, 5, 6], dtype=np.uint8)


class SokobanLevel(NamedTuple):
    """A level on the padded grid: ``walls``, ``targets``, ``boxes`` ``(cells,)`` bool; ``player`` int32."""

    walls: Any
    targets: Any
    boxes: Any
    player: Any


class SokobanState(NamedTuple):
    walls: jax.Array  # (cells,) bool, the ring included
    targets: jax.Array  # (cells,) bool
    boxes: jax.Array  # (cells,) bool
    player: jax.Array  # () int32
    episode: Episode


@dataclass(frozen=True)
class Sokoban(GridCore):
    """Sokoban in rooms of ``dim_room`` (see :class:`llmgym.envs.sokoban.SokobanEnv`).

    Attributes:
        dim_room: (rows, columns) of the levels, walls included.
    """

    dim_room: tuple[int, int] = (6, 6)

    action_names: ClassVar[tuple[str, ...]] = ACTIONS
    symbols: ClassVar[str] = "#_.$*@+"
    feedback: ClassVar[tuple[str, ...]] = _MESSAGES + tuple(f"{message} {SOLVED}" for message in _MESSAGES)
    game_rewards: ClassVar[tuple[float, ...]] = _MOVE_REWARDS + tuple(r + SOLVED_BONUS for r in _MOVE_REWARDS)

    @property
    def board_shape(self) -> tuple[int, int]:
        return self.dim_room

    @property
    def padded_width(self) -> int:
        return self.dim_room[1] + 2

    def reset(self, key: jax.Array, level: SokobanLevel) -> SokobanState:
        """The start of an episode on ``level`` (``key`` is unused: Sokoban has no chance)."""
        del key
        return SokobanState(
            walls=jnp.asarray(level.walls, bool),
            targets=jnp.asarray(level.targets, bool),
            boxes=jnp.asarray(level.boxes, bool),
            player=jnp.asarray(level.player, jnp.int32),
            episode=new_episode(),
        )

    def step(self, state: SokobanState, action: jax.Array, slip: Any = None) -> tuple[SokobanState, StepResult]:
        """One turn: ``action`` is a move's index in :attr:`action_names`, or ``INVALID_ACTION``."""
        del slip  # no chance in Sokoban
        action = jnp.asarray(action, jnp.int32)
        valid = (action >= 0) & (action < len(ACTIONS))
        offset = jnp.asarray(direction_offsets(self.padded_width), jnp.int32)[jnp.clip(action, 0, len(ACTIONS) - 1)]
        last_cell = state.walls.shape[0] - 1
        ahead = jnp.clip(state.player + offset, 0, last_cell)
        beyond = jnp.clip(ahead + offset, 0, last_cell)
        wall_ahead, box_ahead = state.walls[ahead], state.boxes[ahead]
        blocked = box_ahead & (state.walls[beyond] | state.boxes[beyond])
        moved = ~wall_ahead & ~blocked
        push = moved & box_ahead
        boxes = state.boxes.at[ahead].set(state.boxes[ahead] & ~push).at[beyond].set(state.boxes[beyond] | push)
        onto, off = push & state.targets[beyond], push & state.targets[ahead]
        solved = ~jnp.any(boxes & ~state.targets)
        pushed_event = jnp.where(onto == off, EVENT_PUSHED, jnp.where(onto, EVENT_ONTO, EVENT_OFF))
        event = jnp.where(moved, jnp.where(push, pushed_event, EVENT_MOVED), jnp.where(wall_ahead, EVENT_WALL, EVENT_BLOCKED))
        change = onto.astype(jnp.float32) - off.astype(jnp.float32)
        move = Move(
            reward=STEP_PENALTY + BOX_ON_TARGET * change + SOLVED_BONUS * solved.astype(jnp.float32),
            terminated=solved,
            success=solved,
            effective=moved,
            event=(event + EVENT_SOLVED * solved).astype(jnp.int32),
        )
        episode, result = self.finish_turn(state.episode, valid, move)
        played = valid & ~state.episode.ended
        board = (select(played, boxes, state.boxes), select(played, jnp.where(moved, ahead, state.player), state.player))
        return SokobanState(state.walls, state.targets, board[0], board[1], episode), result

    def symbol_grid(self, state: SokobanState) -> jax.Array:
        cells = state.walls.shape[0]
        player = jnp.arange(cells) == state.player
        bits = state.targets.astype(jnp.uint8) | state.boxes.astype(jnp.uint8) << 1 | player.astype(jnp.uint8) << 2
        grid = jnp.where(state.walls, jnp.uint8(0), jnp.asarray(_CELL_SYMBOLS)[bits])
        height, width = self.dim_room
        return grid.reshape(height + 2, width + 2)[1:-1, 1:-1]

    # ------------------------------------------------------------------ host side
    def encode_levels(self, levels: Sequence[Any]) -> SokobanLevel:
        """Levels (XSB text or :class:`~llmgym.envs.sokoban.level.Level`) as batched NumPy arrays."""
        height, width = self.dim_room
        cells = (height + 2) * (width + 2)
        walls = np.zeros((len(levels), cells), dtype=bool)
        targets, boxes = np.zeros_like(walls), np.zeros_like(walls)
        player = np.zeros(len(levels), dtype=np.int32)
        for index, level in enumerate(levels):
            parsed = level if isinstance(level, Level) else parse_xsb(level)
            if (parsed.height, parsed.width) != self.dim_room:
                raise LevelFormatError(
                    f"This Sokoban core plays {height}x{width} levels (walls included); got a "
                    f"{parsed.height}x{parsed.width} level. Build the core (or the vector env) with "
                    f"dim_room=({parsed.height}, {parsed.width})."
                )
            maze = PaddedMaze.of(parsed)
            walls[index] = np.frombuffer(maze.walls, dtype=np.uint8).astype(bool)
            targets[index, list(maze.targets)] = True
            boxes[index, [maze.pad(cell) for cell in parsed.boxes]] = True
            player[index] = maze.pad(parsed.player)
        return SokobanLevel(walls, targets, boxes, player)

    def read_action(self, parsed: str) -> int | str:
        moves = read_moves(parsed, 1)
        return moves if isinstance(moves, str) else moves[0]
