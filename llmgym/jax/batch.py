"""Many cores stepped as one batch, with numeric observations: classic RL at array speed.

:func:`reset_batch` and :func:`step_batch` are pure functions for use inside ``jit``, ``scan``
and ``vmap`` (the PPO in :mod:`llmgym.jax.ppo` runs its whole rollout through them). An
episode that ends is replaced in the same step by a new one on a level drawn from a pool
(``SAME_STEP`` autoreset), and the ended episode's last observation is returned beside.

:class:`GridVectorEnv` wraps them as a :class:`gymnasium.vector.VectorEnv` with NumPy in and
out: flat one-hot observations (as :class:`llmgym.wrappers.GridObservation`) and discrete
actions (index ``i`` is the text env's ``action_names[i]``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from llmgym.error import InvalidOptionError
from llmgym.jax.common import GridCore, StepResult, select
from llmgym.jax.cores import encode, levels_from_seeds, make_core


def pool_size(pool: Any) -> int:
    """Levels in a pool (the leading axis of its arrays)."""
    return int(jax.tree.leaves(pool)[0].shape[0])


def reset_batch(core: GridCore, pool: Any, key: jax.Array, num_envs: int) -> Any:
    """``num_envs`` new episodes on levels drawn uniformly from ``pool``."""
    level_key, env_key = jax.random.split(key)
    chosen = jax.random.randint(level_key, (num_envs,), 0, pool_size(pool))
    levels = jax.tree.map(lambda leaf: leaf[chosen], pool)
    return jax.vmap(core.reset)(jax.random.split(env_key, num_envs), levels)


def observe_batch(core: GridCore, state: Any) -> jax.Array:
    """``(num_envs, height * width * len(symbols))`` float32 one-hot boards."""
    return jax.vmap(core.observation)(state)


def one_hot_boards(core: GridCore, state: Any) -> jax.Array:
    """``(num_envs, height * width, len(symbols))`` float32: :func:`observe_batch` before its last reshape.

    For a compiled call whose caller reshapes on the host (a NumPy view): XLA on CPU fuses a
    reshape to ``(num_envs, size)`` into the one-hot and then writes it 3-4x slower (index
    arithmetic per element) than this shape, the bulk of a step of 4,096 Sokoban envs.
    """
    grids = jax.vmap(core.symbol_grid)(state)  # (num_envs, height, width)
    return jax.nn.one_hot(grids.reshape(grids.shape[0], -1), len(core.symbols), dtype=jnp.float32)


def step_batch(
    core: GridCore, pool: Any, state: Any, actions: jax.Array, key: jax.Array
) -> tuple[Any, StepResult, jax.Array]:
    """Step every env; an env whose episode ends starts a new one on a level from ``pool``.

    Returns the new state, the step's results and the observation each env reached before
    any reset (``(num_envs, observation size)``; differs from the state's where an episode ended).
    """
    state, result, reached = _step_autoreset(core, pool, state, actions, key)
    return state, result, reached.reshape(reached.shape[0], -1)


def _step_autoreset(
    core: GridCore, pool: Any, state: Any, actions: jax.Array, key: jax.Array
) -> tuple[Any, StepResult, jax.Array]:
    """:func:`step_batch` with the reached boards as :func:`one_hot_boards` gives them."""
    stepped, result = jax.vmap(core.step)(state, actions)
    reached = one_hot_boards(core, stepped)
    done = result.terminated | result.truncated
    fresh = reset_batch(core, pool, key, actions.shape[0])
    return select(done, fresh, stepped), result, reached


class GridVectorEnv(VectorEnv[np.ndarray, np.ndarray, np.ndarray]):
    """``num_envs`` copies of a FrozenLake or Sokoban id, stepped in one compiled call.

    Observations are flat one-hot boards (``GridObservation``'s), actions indices into the
    text env's ``action_names``. Autoreset is ``SAME_STEP``: when an episode ends, ``step``
    returns the next episode's first observation, and ``infos["final_obs"]`` (masked by
    ``infos["_final_obs"]``) holds the ended one's last. ``infos["success"]`` is the text
    env's ``info["success"]`` of the step.

    Args:
        env_id: a FrozenLake or Sokoban id (see :data:`llmgym.jax.SUPPORTED_IDS`).
        num_envs: envs in the batch.
        levels: the pool episodes draw their level from, as the text env takes levels (map rows,
            XSB). Default: the levels of seeds ``0 .. num_envs - 1`` (``levels_from_seeds``).
        seed: seeds the level draws (and the slips) when ``reset`` gets no seed.
        env_kwargs: options of the text env (``max_turns``, ``success_rate``, ...).
    """

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(
        self, env_id: str, num_envs: int, *, levels: Sequence[Any] | None = None, seed: int = 0, **env_kwargs: Any
    ) -> None:
        if not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise InvalidOptionError(f"num_envs must be an int >= 1, got {num_envs!r}.")
        self.core = make_core(env_id, **env_kwargs)
        self.num_envs = int(num_envs)
        if levels is None:
            levels = levels_from_seeds(env_id, range(self.num_envs), **env_kwargs)
        self.pool = jax.tree.map(jnp.asarray, encode(self.core, levels))
        height, width = self.core.board_shape
        size = height * width * len(self.core.symbols)
        self.single_observation_space = spaces.Box(0.0, 1.0, (size,), dtype=np.float32)
        self.single_action_space = spaces.Discrete(len(self.core.action_names))
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.spec = gym.spec(env_id)
        self._key = jax.random.PRNGKey(seed)
        self._reset = jax.jit(lambda pool, key: _reset_observed(self.core, pool, key, self.num_envs))
        self._step = jax.jit(lambda pool, state, actions, key: _step_observed(self.core, pool, state, actions, key))
        self._state: Any = None

    @property
    def state(self) -> Any:
        """The batch's current core state (a pytree of arrays with leading axis ``num_envs``)."""
        return self._state

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if options:
            raise InvalidOptionError(
                f"GridVectorEnv.reset takes no options (levels come from its pool); got {sorted(options)}."
            )
        if seed is not None:
            self._key = jax.random.PRNGKey(seed)
        self._key, key = jax.random.split(self._key)
        self._state, observations = self._reset(self.pool, key)
        return np.asarray(observations), {}

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if self._state is None:
            raise gym.error.ResetNeeded("GridVectorEnv.step was called before reset(); call reset() first.")
        # One compiled call does all (the key split too); NumPy actions go in as they are, and the
        # boards come out one-hot per cell, flattened here as views (see one_hot_boards).
        actions = np.asarray(actions, dtype=np.int32)
        self._key, self._state, boards, result, reached = self._step(self.pool, self._state, actions, self._key)
        boards, result, reached = jax.device_get((boards, result, reached))
        observations, reached = boards.reshape(self.num_envs, -1), reached.reshape(self.num_envs, -1)
        done = result.terminated | result.truncated
        infos = {"success": result.success, "_success": np.ones(self.num_envs, dtype=bool),
                 "final_obs": reached, "_final_obs": done}
        return observations, result.reward, result.terminated, result.truncated, infos


def _reset_observed(core: GridCore, pool: Any, key: jax.Array, num_envs: int) -> tuple[Any, jax.Array]:
    state = reset_batch(core, pool, key, num_envs)
    return state, observe_batch(core, state)


def _step_observed(
    core: GridCore, pool: Any, state: Any, actions: jax.Array, key: jax.Array
) -> tuple[jax.Array, Any, jax.Array, StepResult, jax.Array]:
    """``GridVectorEnv.step``'s compiled call: the next key, state, boards, results and reached boards.

    The key is split as ``GridVectorEnv`` split it on the host, so the level draws are the same.
    """
    key, step_key = jax.random.split(key)
    state, result, reached = _step_autoreset(core, pool, state, actions, step_key)
    return key, state, one_hot_boards(core, state), result, reached
