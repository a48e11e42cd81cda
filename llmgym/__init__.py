"""llmgym: text environments for LLM agents, as real Gymnasium envs.

``import llmgym`` registers every env under the ``llmgym/`` namespace::

    import gymnasium as gym
    import llmgym

    env = gym.make("llmgym/Sokoban-v0")
    observation, info = env.reset(seed=0)

This module stays light: it imports gymnasium and numpy only.
"""

from __future__ import annotations

from llmgym.core import CHARSET, EnvState, Outcome, TextEnv
from llmgym.registration import env_ids, register_all

__version__ = "0.1.0"
__all__ = ["CHARSET", "EnvState", "Outcome", "TextEnv", "env_ids", "__version__"]

register_all()
