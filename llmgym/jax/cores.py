"""Cores for llmgym ids, and their levels from llmgym's own generators and eval sets.

Levels are drawn by the text env itself (``reset(seed=s)`` then ``level()``), so seed ``s``
gives the JAX core exactly the level it gives the text env, and batched as arrays with the
core's :meth:`~llmgym.jax.common.GridCore.encode_levels`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import gymnasium as gym

from llmgym.envs.frozen_lake import FrozenLakeEnv
from llmgym.envs.sokoban.env import SokobanEnv
from llmgym.error import InvalidOptionError
from llmgym.eval_sets import load_eval_set
from llmgym.jax.common import GridCore
from llmgym.jax.frozen_lake import FrozenLake
from llmgym.jax.sokoban import Sokoban

#: Every registered id with a JAX core.
SUPPORTED_IDS = (
    "llmgym/FrozenLake-v0",
    "llmgym/FrozenLake-8x8-v0",
    "llmgym/FrozenLake-Slippery-v0",
    "llmgym/Sokoban-v0",
    "llmgym/Sokoban-8x8-2box-v0",
    "llmgym/Sokoban-10x10-3box-v0",
)


def core_for_env(env: gym.Env[Any, Any]) -> GridCore:
    """The core that plays exactly what ``env`` (a FrozenLake or Sokoban text env) plays."""
    text_env = env.unwrapped
    if not isinstance(text_env, (FrozenLakeEnv, SokobanEnv)):
        raise InvalidOptionError(
            f"llmgym.jax has cores for FrozenLakeEnv and SokobanEnv ({', '.join(SUPPORTED_IDS)}); got "
            f"{type(text_env).__name__}. Use another backend (e.g. backend='inline') for this env."
        )
    if text_env.max_actions_per_turn != 1:
        raise InvalidOptionError(
            f"JAX cores play one move a turn; got max_actions_per_turn={text_env.max_actions_per_turn}. "
            "Drop that option, or use another backend (e.g. backend='inline')."
        )
    if isinstance(text_env, FrozenLakeEnv) and text_env.bump_penalty:
        raise InvalidOptionError(
            f"The JAX FrozenLake core gives a move into the edge reward 0; got bump_penalty={text_env.bump_penalty}. "
            "Drop that option, or use another backend (e.g. backend='inline')."
        )
    rules = {
        "max_turns": text_env.max_turns,
        "invalid_penalty": text_env.invalid_penalty,
        "max_invalid_actions": text_env.max_invalid_actions,
    }
    if isinstance(text_env, FrozenLakeEnv):
        return FrozenLake(size=text_env.size, success_rate=text_env.success_rate, **rules)
    return Sokoban(dim_room=text_env.dim_room, **rules)


def make_core(env_id: str, **env_kwargs: Any) -> GridCore:
    """The core of ``gym.make(env_id, **env_kwargs)`` (the options are checked by the text env)."""
    env = gym.make(env_id, **env_kwargs)
    try:
        return core_for_env(env)
    finally:
        env.close()


def levels_from_seeds(env_id: str, seeds: Iterable[int], **env_kwargs: Any) -> list[Any]:
    """The level ``gym.make(env_id, **env_kwargs).reset(seed=s)`` plays, for each seed ``s``.

    Sokoban's solver is skipped (``solve_budget=0``) unless given: it only fills reset infos.
    """
    if "Sokoban" in env_id:
        env_kwargs.setdefault("solve_budget", 0)
    env = gym.make(env_id, **env_kwargs).unwrapped
    levels = []
    for seed in seeds:
        env.reset(seed=int(seed))
        levels.append(env.level())
    env.close()
    return levels


def eval_levels(env_id: str) -> list[Any]:
    """The frozen eval levels of ``env_id`` (see :mod:`llmgym.eval_sets`), in order."""
    return [record["level"] for record in load_eval_set(env_id)]


def encode(core: GridCore, levels: Sequence[Any]) -> Any:
    """``core.encode_levels(levels)``, refusing an empty list (a pool needs a level)."""
    if not levels:
        raise InvalidOptionError("A level pool needs at least one level; got none.")
    return core.encode_levels(levels)
