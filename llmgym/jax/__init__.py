"""JAX cores of llmgym's grid games: FrozenLake and Sokoban stepped by the thousand.

Install with ``pip install "llmgym[jax]"``; ``import llmgym`` never imports JAX.

Each game is a core (:class:`FrozenLake`, :class:`Sokoban`): an immutable, hashable object
whose methods are pure functions over a state pytree, ready for ``jit`` and ``vmap``::

    core = make_core("llmgym/Sokoban-v0")
    levels = core.encode_levels(levels_from_seeds("llmgym/Sokoban-v0", range(1024)))
    state = jax.vmap(core.reset)(jax.random.split(key, 1024), levels)
    state, result = jax.jit(jax.vmap(core.step))(state, actions)   # result.reward, .terminated, ...

A core plays exactly the text env's rules: the same moves, rewards, ``terminated``,
``truncated``, ``success``, invalid-action penalty and turn limit (action code
``INVALID_ACTION`` is a turn without a valid move). Levels come from llmgym's own generators
and eval sets, generated in NumPy by the text env and batched in as arrays, so a seed gives
the core the level it gives the text env.

Three ways in:

* the cores themselves, with :func:`make_core`, :func:`levels_from_seeds`, :func:`eval_levels`;
* :mod:`llmgym.jax.batch`: :func:`reset_batch` / :func:`step_batch` (pure, autoreset from a
  level pool, one-hot observations) and :class:`GridVectorEnv`, a Gymnasium vector env with
  numeric observations and actions: classic RL at array speed;
* ``gym.make_vec(id, n, backend="jax")`` (:mod:`llmgym.vector.jax_backend`): llmgym's text vector
  env, completions in and the text env's exact observations out, with the games in JAX.

Slippery ice. JAX's random numbers cannot reproduce NumPy's stream, so a core draws slips
from its own key (``state.key``), and equivalence with the text env is kept by feeding the
text env's draws in instead: ``core.step(state, action, slip)`` takes a :class:`Slip`, and
``core.draw_slip(rng)`` draws one from a NumPy generator exactly as the text env does (one
uniform per valid move, one side bit after a slip). The ``jax`` text backend does this with
each text env's own ``np_random``, so slippery envs match step for step, slips included; the
tests check it over thousands of random episodes. With JAX's own draws (:mod:`llmgym.jax.batch`,
the PPO) slips follow the same law, which the tests check statistically.
"""

from __future__ import annotations

try:
    import jax  # noqa: F401
except ImportError as _error:  # pragma: no cover - depends on the install
    from llmgym.error import DependencyNotInstalled

    raise DependencyNotInstalled(
        f'llmgym.jax needs JAX; run `pip install "llmgym[jax]"` (or `pip install jax optax`). ({_error})'
    ) from _error

from llmgym.jax.batch import GridVectorEnv, observe_batch, reset_batch, step_batch
from llmgym.jax.common import INVALID_ACTION, GridCore, StepResult
from llmgym.jax.cores import SUPPORTED_IDS, core_for_env, eval_levels, levels_from_seeds, make_core
from llmgym.jax.frozen_lake import FrozenLake, Slip
from llmgym.jax.sokoban import Sokoban

__all__ = [
    "INVALID_ACTION",
    "SUPPORTED_IDS",
    "FrozenLake",
    "GridCore",
    "GridVectorEnv",
    "Slip",
    "Sokoban",
    "StepResult",
    "core_for_env",
    "eval_levels",
    "levels_from_seeds",
    "make_core",
    "observe_batch",
    "reset_batch",
    "step_batch",
]
