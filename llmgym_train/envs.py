"""How the rollout reaches its envs when they live elsewhere: Ray env actors.

:class:`RayEnvWorkers` puts the rollout's envs in Ray actors through llmgym's own vector-env
Ray backend (:mod:`llmgym.vector.ray_backend`): the same actors, sharding and failure reports
as ``make_vector_env(..., backend=RayEnvBackend())``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from llmgym.error import InvalidOptionError

if TYPE_CHECKING:
    from llmgym_train.agents.base import BackendEnv, EnvTimer, EpisodeStart
    from llmgym_train.config import DistributedConfig


class RayEnvWorkers:
    """The rollout's envs in ``num_workers`` Ray actors, through llmgym's Ray vector-env backend.

    Each distinct list of episode envs (the training mixture, the eval levels) gets its own
    backend, started at its first rollout and kept: later rollouts reset the same envs with new
    seeds, so a training step pays no actor start. Every ``reset`` / ``step`` of an episode is
    one remote call to the actor that holds its env, awaited from the rollout's event loop
    (:class:`~llmgym_train.agents.base.BackendEnv`); a lost actor raises
    :class:`~llmgym.error.WorkerDiedError` naming the episode, its env and seed.

    Arguments:
        num_workers: actors per backend (at most one per episode); Ray spreads them over nodes.
        num_cpus: CPUs Ray reserves for each actor.
        address: the cluster to join when Ray is not initialized yet.
    """

    def __init__(self, num_workers: int, *, num_cpus: float = 1.0, address: str | None = None) -> None:
        from llmgym.vector.ray_backend import connect

        if num_workers < 1:
            raise InvalidOptionError(f"num_workers must be >= 1; got {num_workers}.")
        self._ray = connect(address)
        self.num_workers = num_workers
        self.num_cpus = num_cpus
        self.address = address
        self._backends: dict[str, Any] = {}

    @classmethod
    def from_config(cls, distributed: DistributedConfig) -> RayEnvWorkers:
        return cls(distributed.num_env_workers, num_cpus=distributed.env_worker_cpus, address=distributed.address)

    def envs(self, episodes: Sequence[EpisodeStart], timer: EnvTimer) -> list[BackendEnv]:
        """One remote env per episode, in order (``gym.make(episode.env_id, **episode.env_kwargs)``)."""
        from llmgym.vector.ray_backend import RayBackend
        from llmgym.vector.vector_env import EnvFactory
        from llmgym_train.agents.base import BackendEnv

        key = json.dumps([(episode.env_id, episode.env_kwargs) for episode in episodes], sort_keys=True, default=repr)
        backend = self._backends.get(key)
        if backend is None:
            factories = [EnvFactory(episode.env_id, dict(episode.env_kwargs)) for episode in episodes]
            backend = RayBackend(
                factories, min(self.num_workers, len(factories)), num_cpus=self.num_cpus, address=self.address
            )
            self._backends[key] = backend
        return [BackendEnv(backend, index, episode, timer) for index, episode in enumerate(episodes)]

    @property
    def backends(self) -> list[Any]:
        """The started backends (one per distinct env list), for monitoring and tests."""
        return list(self._backends.values())

    def close(self) -> None:
        """Stop every env actor (safe to call twice)."""
        backends, self._backends = list(self._backends.values()), {}
        for backend in backends:
            backend.close()


__all__ = ["RayEnvWorkers"]
