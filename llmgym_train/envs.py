"""How the rollout reaches its envs: llmgym's vector env, stepped a batch at a time, seen one episode at a time.

Agents ``await env.reset(...)`` / ``await env.step(...)`` on a handle of their own and never
learn where the env lives. Underneath, every episode of a rollout is one sub-env of a
:class:`~llmgym.vector.TextVectorEnv` (one vector env per env id and options, any backend:
inline, thread, process, Ray):

* :class:`EnvPool` holds the vector envs and keeps them from one rollout to the next, so a
  training step pays no worker or actor start;
* :class:`VectorEpisodes` serves the episodes of one vector env: the calls their agents make
  in one event-loop tick go out as one masked ``astep`` / ``areset`` (or one snapshot call), so
  the envs of a turn step together while each episode goes on as soon as its batch returns;
* :class:`EpisodeEnv` is an episode's handle: ``reset``, ``step``, ``get_state``, ``set_state``.

:class:`AsyncEnv` is one gymnasium env in this process, for agents that reach into the env
object itself (``Agent.needs_local_env``: self-play drives one game from two seats).
:class:`EnvTimer` sums the wall time spent in env calls, for the rollout's time split.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, SupportsFloat, TypeVar

from llmgym.error import InvalidOptionError, SubEnvError
from llmgym.vector import AutoresetMode, EnvFactory, TextVectorEnv
from llmgym.vector.infos import sub_env_info
from llmgym_train.episode import EpisodeStart

if TYPE_CHECKING:
    from llmgym_train.config import DistributedConfig

_Result = TypeVar("_Result")
#: The calls an episode makes, in the order a coordinator runs the kinds pending at once.
CallKind = Literal["reset", "set_state", "get_state", "step", "rollout_returns"]
_KINDS: tuple[CallKind, ...] = ("reset", "set_state", "get_state", "step", "rollout_returns")


class AgentEnv(Protocol):
    """What an agent may call on its episode's env (:class:`EpisodeEnv` and :class:`AsyncEnv` have it)."""

    async def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]: ...

    async def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]: ...

    async def get_state(self) -> Any: ...

    async def set_state(self, state: Any) -> None: ...

    async def random_rollout_returns(self, actions: list[str], **settings: Any) -> list[float]: ...


@dataclass
class EnvTimer:
    """Wall time spent inside env calls (a batched call counts once)."""

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
    """One gymnasium env in this process, driven from asyncio: each call runs in a worker thread.

    For agents that need the env object itself (``Agent.needs_local_env``); every other agent
    gets an :class:`EpisodeEnv`, which has the same calls.
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

    async def random_rollout_returns(self, actions: list[str], **settings: Any) -> list[float]:
        """Each action's return over random continuations from the state now (:meth:`llmgym.core.TextEnv.random_rollout_returns`)."""
        return await self._call(lambda: self.env.unwrapped.random_rollout_returns(actions, **settings))

    async def _call(self, work: Callable[[], _Result]) -> _Result:
        def timed() -> _Result:
            with self.timer.measure():
                return work()

        return await asyncio.to_thread(timed)

    def close(self) -> None:
        self.env.close()


class EpisodeEnv:
    """One episode's view of its sub-env: :class:`AsyncEnv`'s calls, served by a :class:`VectorEpisodes`.

    Errors name the episode: a sub-env's exception is :class:`~llmgym.error.SubEnvError`, a
    lost worker :class:`~llmgym.error.WorkerDiedError`, a hung one
    :class:`~llmgym.error.SubEnvTimeout`, each with the episode's index, env id and seed.
    """

    def __init__(self, episodes: VectorEpisodes, index: int) -> None:
        self.episodes = episodes
        self.index = index
        self.start = episodes.starts[index]

    async def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        return await self.episodes.request("reset", self.index, (seed, options))

    async def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        return await self.episodes.request("step", self.index, action)

    async def get_state(self) -> Any:
        """The sub-env's snapshot (its ``get_state()``, wherever it runs)."""
        return await self.episodes.request("get_state", self.index, None)

    async def set_state(self, state: Any) -> None:
        """Restore a snapshot into the sub-env, after a reset to the episode's level (its wrappers start afresh)."""
        await self.episodes.request("set_state", self.index, state)

    async def random_rollout_returns(self, actions: list[str], **settings: Any) -> list[float]:
        """Each action's return over random continuations, computed where the sub-env runs (one call, not a step each)."""
        return await self.episodes.request("rollout_returns", self.index, (actions, settings))

    def close(self) -> None:
        """Nothing to do: the pool keeps the vector env for the next rollout."""


class VectorEpisodes:
    """The episodes of one rollout that share one vector env, sub-env ``k`` playing ``starts[k]``.

    An episode's call is queued and a drain task picks up everything queued so far: each kind
    of call pending at once becomes one vector-env call masked to its episodes (resets with
    each episode's seed and options, steps with each one's action). Calls made while a batch
    runs form the next batch, so no episode waits for more than the batch in flight.

    A failed call fails every episode of its batch (their results are lost with it) and every
    later call, with an error naming the episode whose sub-env failed: the rollout stops.
    """

    def __init__(self, venv: TextVectorEnv, starts: Sequence[EpisodeStart], timer: EnvTimer) -> None:
        if len(starts) != venv.num_envs:
            raise InvalidOptionError(f"{len(starts)} episodes for a vector env of {venv.num_envs} sub-envs; give one each.")
        self.venv = venv
        self.starts = list(starts)
        self.timer = timer
        self._pending: dict[CallKind, dict[int, tuple[Any, asyncio.Future[Any]]]] = {kind: {} for kind in _KINDS}
        self._drain: asyncio.Task[None] | None = None
        self._error: BaseException | None = None

    def env(self, index: int) -> EpisodeEnv:
        """The handle of the episode on sub-env ``index``."""
        return EpisodeEnv(self, index)

    async def request(self, kind: CallKind, index: int, argument: Any) -> Any:
        """Queue one episode's call and await its result (the next batch of its kind carries it)."""
        if self._error is not None:
            raise self._error
        if index in self._pending[kind]:
            raise InvalidOptionError(f"Episode {self.starts[index].episode_index} has a {kind} call pending already; await it first.")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[kind][index] = (argument, future)
        if self._drain is None or self._drain.done():
            self._drain = asyncio.create_task(self._run_pending())
        return await future

    async def settle(self) -> None:
        """Wait for the batch in flight (a rollout that failed leaves the vector env between calls, not mid-call)."""
        for batch in self._pending.values():
            for _, future in batch.values():
                future.cancel()
            batch.clear()
        if self._drain is not None:
            await asyncio.gather(self._drain, return_exceptions=True)

    async def _run_pending(self) -> None:
        while any(self._pending.values()):
            for kind in _KINDS:
                batch, self._pending[kind] = self._pending[kind], {}
                if batch:
                    await self._run_batch(kind, batch)

    async def _run_batch(self, kind: CallKind, batch: dict[int, tuple[Any, asyncio.Future[Any]]]) -> None:
        indices = sorted(batch)
        arguments = [batch[index][0] for index in indices]
        results = None
        if self._error is None:  # after a failure the vector env may be closed: later calls hear the failure
            try:
                with self.timer.measure():
                    results = await self._call(kind, indices, arguments)
            except Exception as error:  # every waiter of the batch hears it, naming the failed episode
                self._error = self._episode_error(error, kind)
        for position, index in enumerate(indices):
            future = batch[index][1]
            if future.done():  # its episode was cancelled meanwhile
                continue
            if results is None:
                assert self._error is not None
                future.set_exception(self._error)
            else:
                future.set_result(results[position])

    async def _call(self, kind: CallKind, indices: list[int], arguments: list[Any]) -> list[Any]:
        """One masked vector-env call for ``indices``; results in the per-episode shapes of ``gymnasium.Env``."""
        venv = self.venv
        mask = [False] * venv.num_envs
        for index in indices:
            mask[index] = True
        if kind == "step":
            actions = [""] * venv.num_envs
            for index, action in zip(indices, arguments):
                actions[index] = action
            observations, rewards, terminations, truncations, infos = await venv.astep(actions, mask=mask)
            return [(observations[index], float(rewards[index]), bool(terminations[index]), bool(truncations[index]),
                     sub_env_info(infos, index)) for index in indices]
        if kind == "get_state":
            return await venv.aget_state(indices)
        if kind == "rollout_returns":
            calls = [((actions,), settings) for actions, settings in arguments]
            return await venv.acall_each("random_rollout_returns", calls, indices)
        if kind == "set_state":  # a fresh reset to the episode's level first, as a new env would have
            await self._reset(indices, [(self.starts[i].seed, self.starts[i].reset_options) for i in indices])
            await venv.aset_state(arguments, indices)
            return [None] * len(indices)
        return await self._reset(indices, arguments)

    async def _reset(self, indices: list[int], arguments: list[tuple[int | None, dict[str, Any] | None]]) -> list[Any]:
        seeds: list[int | None] = [None] * self.venv.num_envs
        options: list[dict[str, Any] | None] = [None] * self.venv.num_envs
        mask = [False] * self.venv.num_envs
        for index, (seed, reset_options) in zip(indices, arguments):
            seeds[index], options[index], mask[index] = seed, reset_options, True
        observations, infos = await self.venv.areset(seed=seeds, options=options, mask=mask)
        return [(observations[index], sub_env_info(infos, index)) for index in indices]

    def _episode_error(self, error: Exception, kind: CallKind) -> Exception:
        """``error`` of a sub-env, said of the episode it plays (index and seed of the episode)."""
        if not isinstance(error, SubEnvError) or not 0 <= error.index < len(self.starts):
            return error
        start = self.starts[error.index]
        where = f"episode {start.episode_index} ({start.env_id}, seed {start.seed})"
        renamed = type(error)(f"The env of {where} failed in {kind}: {error}", index=start.episode_index, seed=start.seed)
        renamed.__cause__ = error
        return renamed


class EnvPool:
    """The vector envs of a trainer's rollouts: one per (env id, options, episode count), kept between rollouts.

    A rollout's episodes are split by env id and options; each part plays on the sub-envs of
    one :class:`~llmgym.vector.TextVectorEnv` (autoreset off: an agent resets its own episode).
    The same part in a later rollout (the next training step, the next evaluation) resets the
    same sub-envs with new seeds. A vector env closed by a dead or hung worker is made anew.

    Arguments:
        backend: the vector env's backend: ``"inline"``, ``"thread"`` (default: env calls that
            wait on subprocesses overlap), ``"process"``, ``"ray"``, or a backend object such
            as :class:`~llmgym.vector.ray_backend.RayEnvBackend`.
        num_workers: threads, processes or actors per vector env (at most one per episode).
        step_timeout: seconds a sub-env call may take (process backend).
    """

    def __init__(self, backend: Any = "thread", *, num_workers: int | None = None, step_timeout: float | None = None) -> None:
        if num_workers is not None and num_workers < 1:
            raise InvalidOptionError(f"num_workers must be >= 1 or None; got {num_workers}.")
        self.backend = backend
        self.num_workers = num_workers
        self.step_timeout = step_timeout
        self._venvs: dict[str, TextVectorEnv] = {}

    @classmethod
    def from_config(cls, distributed: DistributedConfig) -> EnvPool:
        """Ray env actors when the config puts envs on a cluster, else threads in this process."""
        return cls(**distributed.vector_env_options())

    def episodes(
        self, starts: Sequence[EpisodeStart], timer: EnvTimer, slot: str = ""
    ) -> tuple[list[EpisodeEnv], list[VectorEpisodes]]:
        """One handle per episode, in order, and the coordinators that serve them (one per vector env).

        ``slot``: rollouts that run at the same time (asynchronous training plays several
        batches at once) each name a slot of their own, so they never share a vector env.
        """
        parts: dict[str, list[int]] = {}
        for position, start in enumerate(starts):
            parts.setdefault(_kind_key(start), []).append(position)
        handles: list[EpisodeEnv | None] = [None] * len(starts)
        coordinators = []
        for positions in parts.values():
            first = starts[positions[0]]
            venv = self._vector_env(first.env_id, first.env_kwargs, len(positions), slot)
            coordinator = VectorEpisodes(venv, [starts[position] for position in positions], timer)
            coordinators.append(coordinator)
            for index, position in enumerate(positions):
                handles[position] = coordinator.env(index)
        return [handle for handle in handles if handle is not None], coordinators

    def _vector_env(self, env_id: str, env_kwargs: dict[str, Any], count: int, slot: str = "") -> TextVectorEnv:
        key = json.dumps([env_id, env_kwargs, count] + ([slot] if slot else []), sort_keys=True, default=repr)
        venv = self._venvs.get(key)
        if venv is None or venv.closed:
            workers = None if self.num_workers is None or self.backend == "inline" else min(self.num_workers, count)
            venv = TextVectorEnv(
                [EnvFactory(env_id, dict(env_kwargs))] * count, backend=self.backend, num_workers=workers,
                step_timeout=self.step_timeout, autoreset_mode=AutoresetMode.DISABLED,
            )
            self._venvs[key] = venv
        return venv

    @property
    def vector_envs(self) -> list[TextVectorEnv]:
        """The vector envs made so far (one per distinct part of a rollout), for monitoring and tests."""
        return list(self._venvs.values())

    def close(self) -> None:
        """Close every vector env and its workers (safe to call twice)."""
        venvs, self._venvs = list(self._venvs.values()), {}
        for venv in venvs:
            venv.close()


def _kind_key(start: EpisodeStart) -> str:
    return json.dumps([start.env_id, start.env_kwargs], sort_keys=True, default=repr)


__all__ = ["AgentEnv", "AsyncEnv", "EnvPool", "EnvTimer", "EpisodeEnv", "VectorEpisodes"]
