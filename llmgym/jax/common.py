"""What every JAX core shares: the turn rules of :class:`llmgym.core.TextEnv` as array code.

A core's ``step`` plays the game's move (a :class:`Move`) and hands it to :func:`finish_turn`,
which applies what ``TextEnv.step`` applies to every text env: the invalid-action penalty and
count, ``max_invalid_actions``, the turn limit (``truncated``), sticky ``success``, and
"the episode is over" for a step after the end. Events name what happened, so the text of the
next observation and the exact (float64) reward can be looked up on the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

#: Event of a turn with no valid move (unparseable, unknown name, too many moves).
EVENT_INVALID = 14
#: Event of a step after the episode ended (``TextEnv`` answers "The episode is over").
EVENT_OVER = 15
#: Events ``0 .. EVENT_INVALID - 1`` are the game's own (see each core's ``feedback``).
NUM_EVENTS = 16
#: The action code of a turn without a valid move; ``0 .. len(action_names) - 1`` are moves.
INVALID_ACTION = -1


class Episode(NamedTuple):
    """The bookkeeping ``TextEnv`` keeps beside a game's own state (all scalars per env)."""

    turn: jax.Array  # () int32: steps taken, invalid ones included
    invalid_count: jax.Array  # () int32
    ended: jax.Array  # () bool: terminated or truncated; later steps change nothing
    success: jax.Array  # () bool: sticky, as info["success"]


class Move(NamedTuple):
    """A valid move's outcome, from the game's rules (before the turn rules apply)."""

    reward: jax.Array  # () float32
    terminated: jax.Array  # () bool
    success: jax.Array  # () bool
    effective: jax.Array  # () bool: the state changed
    event: jax.Array  # () int32, below EVENT_INVALID


class StepResult(NamedTuple):
    """One step's outcome: what ``TextEnv.step`` returns, as arrays, plus the event."""

    reward: jax.Array  # () float32 (float64 rewards equal to the text env's: see GridCore.rewards)
    terminated: jax.Array  # () bool
    truncated: jax.Array  # () bool
    success: jax.Array  # () bool: info["success"]
    valid: jax.Array  # () bool: info["action_is_valid"]
    effective: jax.Array  # () bool: info["action_is_effective"]
    event: jax.Array  # () int32


def new_episode() -> Episode:
    zero = jnp.zeros((), jnp.int32)
    return Episode(turn=zero, invalid_count=zero, ended=jnp.zeros((), bool), success=jnp.zeros((), bool))


@dataclass(frozen=True)
class GridCore:
    """A grid game as pure functions; subclasses add the game (see :mod:`llmgym.jax`).

    Instances are immutable and hashable, so ``jax.jit(core.step)`` and
    ``jax.vmap(core.step)`` work as they are, and a core can be a static argument.

    Attributes:
        max_turns: steps before ``truncated``; ``None`` for no limit.
        invalid_penalty: reward of a turn without a valid move.
        max_invalid_actions: invalid turns that end the episode (``terminated``); ``None``: never.
    """

    max_turns: int | None = None
    invalid_penalty: float = -0.1
    max_invalid_actions: int | None = None

    #: The actions, in the order of their codes (the text env's ``action_names``).
    action_names: ClassVar[tuple[str, ...]] = ()
    #: Board symbols; channel ``i`` of the observation is ``symbols[i]`` (as GridObservation).
    symbols: ClassVar[str] = ""
    #: Feedback line of each game event (index = event).
    feedback: ClassVar[tuple[str, ...]] = ()
    #: The text env's reward of each game event, as the Python floats it computes.
    game_rewards: ClassVar[tuple[float, ...]] = ()

    @property
    def board_shape(self) -> tuple[int, int]:
        raise NotImplementedError

    @property
    def slippery(self) -> bool:
        """Whether moves draw chance (then ``step`` takes a slip, or draws one from the state's key)."""
        return False

    def reset(self, key: jax.Array, level: Any) -> Any:
        """The state at the start of an episode on ``level`` (one level's arrays)."""
        raise NotImplementedError

    def step(self, state: Any, action: jax.Array, slip: Any = None) -> tuple[Any, StepResult]:
        """One turn: ``action`` is a move's index in :attr:`action_names`, or ``INVALID_ACTION``."""
        raise NotImplementedError

    def symbol_grid(self, state: Any) -> jax.Array:
        """``(height, width)`` uint8: index into :attr:`symbols` of each board cell."""
        raise NotImplementedError

    def encode_levels(self, levels: Sequence[Any]) -> Any:
        """Levels as the text env takes them, as batched NumPy arrays (leading axis: level)."""
        raise NotImplementedError

    def read_action(self, parsed: str) -> int | str:
        """The code of a parsed action, or the text env's feedback line for an invalid one."""
        raise NotImplementedError

    def draw_slip(self, rng: np.random.Generator) -> Any:
        """One move's chance, drawn from ``rng`` exactly as the text env draws it (None: no chance)."""
        return None

    def observation(self, state: Any) -> jax.Array:
        """The flat one-hot board, ``(height * width * len(symbols),)`` float32.

        Equal to :class:`llmgym.wrappers.GridObservation` on the text env in the same state.
        """
        grid = self.symbol_grid(state)
        return jax.nn.one_hot(grid, len(self.symbols), dtype=jnp.float32).reshape(-1)

    def rewards(self) -> np.ndarray:
        """``(NUM_EVENTS,)`` float64: the text env's reward for each event, bit for bit."""
        table = np.zeros(NUM_EVENTS, dtype=np.float64)
        table[: len(self.game_rewards)] = self.game_rewards
        table[EVENT_INVALID] = self.invalid_penalty
        return table

    def finish_turn(self, episode: Episode, valid: jax.Array, move: Move) -> tuple[Episode, StepResult]:
        """The turn rules of ``TextEnv.step`` around a game move (see the module docstring)."""
        invalid_count = episode.invalid_count + (~valid).astype(jnp.int32)
        terminated = jnp.where(valid, move.terminated, False)
        if self.max_invalid_actions is not None:
            terminated = terminated | (~valid & (invalid_count >= self.max_invalid_actions))
        turn = episode.turn + 1
        truncated = ~terminated & (turn >= self.max_turns) if self.max_turns is not None else jnp.zeros((), bool)
        success = episode.success | (valid & move.success)
        played = Episode(turn, invalid_count, terminated | truncated, success)
        result = StepResult(
            reward=jnp.where(valid, move.reward, jnp.float32(self.invalid_penalty)),
            terminated=terminated,
            truncated=truncated,
            success=success,
            valid=valid,
            effective=valid & move.effective,
            event=jnp.where(valid, move.event, EVENT_INVALID).astype(jnp.int32),
        )
        over = StepResult(
            reward=jnp.float32(0.0),
            terminated=jnp.ones((), bool),
            truncated=jnp.zeros((), bool),
            success=episode.success,
            valid=jnp.zeros((), bool),
            effective=jnp.zeros((), bool),
            event=jnp.int32(EVENT_OVER),
        )
        ended = episode.ended
        return select(ended, episode, played), select(ended, over, result)


def select(condition: jax.Array, on_true: Any, on_false: Any) -> Any:
    """``on_true`` where ``condition`` else ``on_false``, leaf by leaf over two equal pytrees.

    ``condition`` indexes the leading axes of the leaves: a scalar for one env, ``(num_envs,)``
    for a batch (trailing axes of a leaf, such as a board, follow their env's choice).
    """

    def pick(yes: jax.Array, no: jax.Array) -> jax.Array:
        expanded = jnp.reshape(condition, jnp.shape(condition) + (1,) * (jnp.ndim(yes) - jnp.ndim(condition)))
        return jnp.where(expanded, yes, no)

    return jax.tree.map(pick, on_true, on_false)
