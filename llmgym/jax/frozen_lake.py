"""FrozenLake as pure JAX functions, move for move the text env's (``llmgym/FrozenLake-*``).

Cells are numbered row-major; a level is its cells (``ICE``, ``HOLE``, ``GOAL``; the start is
ice) and the start cell. Slips on slippery ice come from the state's ``key`` in
:meth:`FrozenLake.step`, or are given by the caller as a :class:`Slip` (see :mod:`llmgym.jax`
for why: that is how the text backend and the tests replay the text env's own draws).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from llmgym.envs.frozen_lake import ACTIONS, BUMPED, FELL_IN_HOLE, MOVED, REACHED_GOAL, parse_level, read_moves
from llmgym.error import LevelFormatError
from llmgym.jax.common import INVALID_ACTION, Episode, GridCore, Move, StepResult, new_episode, select

ICE, HOLE, GOAL = 0, 1, 2
_LETTER_CODES = {"S": ICE, "F": ICE, "H": HOLE, "G": GOAL}
# Events of a valid move.
EVENT_MOVED, EVENT_BUMPED, EVENT_GOAL, EVENT_HOLE = 0, 1, 2, 3
# Left, Down, Right, Up (the order of ACTIONS).
_ROW_STEP = np.array([0, 1, 0, -1], dtype=np.int32)
_COLUMN_STEP = np.array([-1, 0, 1, 0], dtype=np.int32)
#: A slip's two directions, perpendicular to the intended one, in the text env's order.
_PERPENDICULAR = np.array([[3, 1], [0, 2], [3, 1], [0, 2]], dtype=np.int32)
#: Symbol index of each cell code: ice "_", hole "O", goal "G" (the player "P" is index 0).
_CELL_SYMBOLS = np.array([1, 2, 3], dtype=np.uint8)
_MOVE_INDEX = {name.lower(): index for index, name in enumerate(ACTIONS)}


class FrozenLakeLevel(NamedTuple):
    """A map: ``cells`` ``(size * size,)`` uint8 codes and the ``start`` cell (int32)."""

    cells: Any
    start: Any


class Slip(NamedTuple):
    """One move's slip draw: whether it slipped and to which perpendicular side (0 or 1)."""

    slipped: Any  # () bool
    side: Any  # () int32


class FrozenLakeState(NamedTuple):
    cells: jax.Array  # (size * size,) uint8
    position: jax.Array  # () int32: the player's cell
    episode: Episode
    key: jax.Array  # (2,) uint32: slip draws


@dataclass(frozen=True)
class FrozenLake(GridCore):
    """FrozenLake on a ``size`` x ``size`` map (see :class:`llmgym.envs.frozen_lake.FrozenLakeEnv`).

    Attributes:
        size: side of the map.
        success_rate: chance that a move goes the intended way (1.0: deterministic).
    """

    size: int = 4
    success_rate: float = 1.0

    action_names: ClassVar[tuple[str, ...]] = ACTIONS
    symbols: ClassVar[str] = "P_OG"
    feedback: ClassVar[tuple[str, ...]] = (MOVED, BUMPED, REACHED_GOAL, FELL_IN_HOLE)
    game_rewards: ClassVar[tuple[float, ...]] = (0.0, 0.0, 1.0, 0.0)

    @property
    def board_shape(self) -> tuple[int, int]:
        return self.size, self.size

    @property
    def slippery(self) -> bool:
        return self.success_rate < 1.0

    def reset(self, key: jax.Array, level: FrozenLakeLevel) -> FrozenLakeState:
        """The start of an episode on ``level``; ``key`` seeds the slips."""
        return FrozenLakeState(
            cells=jnp.asarray(level.cells, jnp.uint8),
            position=jnp.asarray(level.start, jnp.int32),
            episode=new_episode(),
            key=key,
        )

    def step(
        self, state: FrozenLakeState, action: jax.Array, slip: Slip | None = None
    ) -> tuple[FrozenLakeState, StepResult]:
        """One turn: ``action`` is a move's index in :attr:`action_names`, or ``INVALID_ACTION``."""
        action = jnp.asarray(action, jnp.int32)
        valid = (action >= 0) & (action < len(ACTIONS))
        direction = jnp.clip(action, 0, len(ACTIONS) - 1)
        key = state.key
        if self.slippery:
            if slip is None:
                key, draw_key, side_key = jax.random.split(key, 3)
                slip = Slip(jax.random.uniform(draw_key) >= self.success_rate, jax.random.bernoulli(side_key))
            perpendicular = jnp.asarray(_PERPENDICULAR)[direction, jnp.asarray(slip.side, jnp.int32)]
            direction = jnp.where(slip.slipped, perpendicular, direction)
        row, column = jnp.divmod(state.position, self.size)
        row = jnp.clip(row + jnp.asarray(_ROW_STEP)[direction], 0, self.size - 1)
        column = jnp.clip(column + jnp.asarray(_COLUMN_STEP)[direction], 0, self.size - 1)
        position = row * self.size + column
        cell = state.cells[position]
        goal, hole, moved = cell == GOAL, cell == HOLE, position != state.position
        event = jnp.where(goal, EVENT_GOAL, jnp.where(hole, EVENT_HOLE, jnp.where(moved, EVENT_MOVED, EVENT_BUMPED)))
        move = Move(reward=goal.astype(jnp.float32), terminated=goal | hole, success=goal, effective=moved,
                    event=event.astype(jnp.int32))
        episode, result = self.finish_turn(state.episode, valid, move)
        played = valid & ~state.episode.ended
        return FrozenLakeState(state.cells, select(played, position, state.position), episode, key), result

    def symbol_grid(self, state: FrozenLakeState) -> jax.Array:
        grid = jnp.asarray(_CELL_SYMBOLS)[state.cells].at[state.position].set(0)
        return grid.reshape(self.size, self.size)

    # ------------------------------------------------------------------ host side
    def encode_levels(self, levels: Sequence[Any]) -> FrozenLakeLevel:
        """Maps (lists of ``S F H G`` rows, as the text env takes them) as batched NumPy arrays."""
        cells = np.zeros((len(levels), self.size * self.size), dtype=np.uint8)
        start = np.zeros(len(levels), dtype=np.int32)
        for index, level in enumerate(levels):
            rows = parse_level(level)
            if len(rows) != self.size:
                raise LevelFormatError(
                    f"This FrozenLake core plays {self.size}x{self.size} maps; got a {len(rows)}x{len(rows)} "
                    f"map. Build the core (or the vector env) with size={len(rows)}."
                )
            flat = "".join(rows)
            cells[index] = [_LETTER_CODES[letter] for letter in flat]
            start[index] = flat.index("S")
        return FrozenLakeLevel(cells, start)

    def read_action(self, parsed: str) -> int | str:
        names = read_moves(parsed, 1)
        return names if isinstance(names, str) else _MOVE_INDEX[names[0]]

    def draw_slip(self, rng: np.random.Generator) -> tuple[bool, int]:
        if not self.slippery or rng.random() < self.success_rate:
            return False, 0
        return True, int(rng.integers(2))

