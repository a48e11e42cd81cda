"""Agents play episodes; the rollout runs many of them concurrently and batches their requests.

Register your own with ``register_agent("my-agent", MyAgent)`` and choose it by name in the
config (``agent=my-agent``)::

    class MyAgent(Agent):
        async def collect_trajectory(self, prompt, env, obs_queue, act_queue) -> Trajectory: ...
"""

from __future__ import annotations

from llmgym.error import InvalidOptionError, did_you_mean
from llmgym_train.agents.base import Agent, AgentConfig, GenerationRequest
from llmgym_train.agents.chain import ChainAgent, MarkovAgent, MathMultiTurnAgent
from llmgym_train.envs import AgentEnv, AsyncEnv, EnvTimer
from llmgym_train.episode import EpisodeStart, TrajectoryBuilder

__all__ = [
    "Agent",
    "AgentConfig",
    "AgentEnv",
    "AsyncEnv",
    "ChainAgent",
    "EnvTimer",
    "EpisodeStart",
    "GenerationRequest",
    "MarkovAgent",
    "MathMultiTurnAgent",
    "TrajectoryBuilder",
    "agent_names",
    "get_agent",
    "register_agent",
]

_REGISTRY: dict[str, type[Agent]] = {}


def register_agent(name: str, cls: type[Agent]) -> None:
    """Make ``cls`` available as ``agent=name``; re-registering a name with another class fails."""
    if not (isinstance(cls, type) and issubclass(cls, Agent)):
        raise TypeError(f"register_agent expects a subclass of llmgym_train.agents.Agent, got {cls!r}.")
    existing = _REGISTRY.get(name)
    if existing is not None and existing is not cls:
        raise ValueError(
            f"Agent name {name!r} is already registered to {existing.__module__}.{existing.__qualname__}; "
            "choose another name."
        )
    _REGISTRY[name] = cls


def get_agent(name: str) -> type[Agent]:
    """The agent class registered as ``name``."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise InvalidOptionError(
            f"Unknown agent {name!r}.{did_you_mean(name, _REGISTRY)} Registered agents: "
            f"{', '.join(sorted(_REGISTRY))}. Register your own with llmgym_train.agents.register_agent(name, cls)."
        ) from None


def agent_names() -> list[str]:
    """Every registered agent name, sorted."""
    return sorted(_REGISTRY)


register_agent("chain", ChainAgent)
register_agent("markov", MarkovAgent)
register_agent("math-multi-turn", MathMultiTurnAgent)

from llmgym_train.agents.self_play import SelfPlayAgent  # noqa: E402  (needs the names above)

register_agent("self-play", SelfPlayAgent)
