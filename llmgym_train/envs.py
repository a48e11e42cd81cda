"""How the rollout reaches its envs: each episode's env behind the same async calls, wherever it runs.

Agents ``await env.reset(...)`` / ``await env.step(...)`` and never learn where the env lives:

* :class:`AsyncEnv`: a gymnasium env in this process, each call run in a worker thread;
* :class:`BackendEnv`: one sub-env of a vector-env backend (worker processes, Ray actors);
* :class:`RayEnvWorkers`: the rollout's envs in Ray actors, through llmgym's own vector-env
  Ray backend (:mod:`llmgym.vector.ray_backend`): the same actors, sharding and failure
  reports as ``make_vector_env(..., backend=RayEnvBackend())``.

:class:`EnvTimer` sums the wall time spent in env calls, for the rollout's time split.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, SupportsFloat, TypeVar

from llmgym.error import InvalidOptionError, SubEnvError, WorkerDiedError
from llmgym.vector.backends import BackendFailure, Failure, Op
from llmgym_train.episode import EpisodeStart

if TYPE_CHECKING:
    from llmgym_train.config import DistributedConfig

_Result = TypeVar("_Result")


@dataclass
class EnvTimer:
    """Wall time spent inside env calls (summed over concurrent episodes)."""

    seconds: float = 0.0
    calls: int = 0

    @contextmanager
    def measure(self) -> Iterator[None]:
        """Count one env call and add its wall time, whether it returns or raises."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - started
            self.calls += 1


class AsyncEnv:
    """One gymnasium env driven from asyncio: each call runs in a worker thread.

    This is the one place that decides how env work leaves the event loop, so agents keep
    their ``await env.step(...)`` whatever runs underneath.
    """

    def __init__(self, env: Any, timer: EnvTimer | None = None) -> None:
        self.env = env
        self.timer = timer if timer is not None else EnvTimer()
        self._was_reset = False

    async def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self._was_reset = True
        return await self._call(lambda: self.env.reset(seed=seed, options=options))

    async def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        return await self._call(lambda: self.env.step(action))

    async def get_state(self) -> Any:
        """The env's snapshot, ``env.unwrapped.get_state()`` (see :class:`llmgym.core.EnvState`)."""
        return await self._call(lambda: self.env.unwrapped.get_state())

    async def set_state(self, state: Any) -> None:
        """Restore a snapshot of an env of the same id; an env never reset is reset once first (its wrappers want that)."""

        needs_reset, self._was_reset = not self._was_reset, True

        def restore() -> None:
            if needs_reset:
                self.env.reset()
            self.env.unwrapped.set_state(state)

        await self._call(restore)

    async def _call(self, work: Callable[[], _Result]) -> _Result:
        def timed() -> _Result:
            with self.timer.measure():
                return work()

        return await asyncio.to_thread(timed)

    def close(self) -> None:
        self.env.close()


class BackendEnv:
    """One sub-env of a vector-env backend (Ray actors, worker processes), with :class:`AsyncEnv`'s calls.

    The backend owns the env and outlives the episode, so :meth:`close` leaves it alone. A
    sub-env's exception comes back as :class:`~llmgym.error.SubEnvError` and a lost worker as
    :class:`~llmgym.error.WorkerDiedError`, each naming the episode's env, seed and index.

    Arguments:
        backend: a started backend (``run`` / ``arun`` of :class:`~llmgym.vector.backends.Op`).
        index: the sub-env's index in the backend.
        start: the episode it plays (for error messages).
    """

    def __init__(self, backend: Any, index: int, start: EpisodeStart, timer: EnvTimer | None = None) -> None:
        self.backend = backend
        self.index = index
        self.start = start
        self.timer = timer if timer is not None else EnvTimer()

    async def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        return await self._run(Op("reset", self.index, (seed, options)))

    async def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        return await self._run(Op("step", self.index, (action,)))

    async def get_state(self) -> Any:
        """The sub-env's snapshot (``get_state()`` of the env, wherever it runs)."""
        return await self._run(Op("call", self.index, ("get_state", (), {})))

    async def set_state(self, state: Any) -> None:
        """Restore a snapshot into the sub-env, after one reset (the backend's wrappers want one)."""
        await self._run(Op("reset", self.index, (self.start.seed, self.start.reset_options)))
        await self._run(Op("call", self.index, ("set_state", (state,), {})))

    async def _run(self, op: Op) -> Any:
        where = f"episode {self.start.episode_index} ({self.start.env_id}, seed {self.start.seed})"
        try:
            with self.timer.measure():
                [result] = await self.backend.arun([op])
        except BackendFailure as failure:
            raise WorkerDiedError(
                f"The env worker of {where} was lost during {op.kind}: {failure.detail}",
                index=self.start.episode_index, seed=self.start.seed,
            ) from None
        if isinstance(result, Failure):
            error = WorkerDiedError if result.error_type == "WorkerDiedError" else SubEnvError
            raise error(
                f"The env of {where} raised {result.error_type} in {op.kind}: {result.message}\n{result.traceback}",
                index=self.start.episode_index, seed=self.start.seed,
            )
        return result

    def close(self) -> None:
        """Nothing to do: the backend keeps its envs for the next rollout."""


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


__all__ = ["AsyncEnv", "BackendEnv", "EnvTimer", "RayEnvWorkers"]
