"""The Ray backend: shards of sub-envs in Ray actors, spread over the nodes of a cluster.

``make_vector_env(id, 256, backend=RayEnvBackend(), num_workers=8)`` (or ``gym.make_vec``
with the same keywords) gives a :class:`~llmgym.vector.TextVectorEnv` whose sub-envs live in
8 Ray actors; everything else about the vector env is unchanged.

The process backend's design carried over a network: each actor owns a contiguous shard of
the sub-envs (a seeding group stays on one actor), one remote call per shard per batch, and
the shard's :class:`~llmgym.vector.backends.SubEnvSet` turns a sub-env's exception into a
:class:`~llmgym.vector.backends.Failure` instead of aborting the batch. Sub-envs are built
inside their actor, so only their factories cross the network, and the same ops give the
same results as the local backends: a sub-env does not know where it runs.

Placement: actors are scheduled with Ray's ``SPREAD`` strategy, so shards land on as many
nodes as the cluster has room on; ``num_cpus`` per actor is what Ray reserves for each.

Failures (nothing here waits without a bound, so no failure hangs a call):

* a dead actor (killed, crashed, out of memory, its node lost) shows as Ray's
  ``RayActorError`` on the call's result;
* ``step_timeout``: actors are threaded (two threads) so that, while one runs the batch, the
  other can say which sub-env it is on and for how long; the driver asks only once a shard has
  been busy longer than ``step_timeout``, and kills the actor when its current sub-env is over
  the limit.

Without ``restart`` either failure raises :class:`~llmgym.vector.backends.BackendFailure`
and the shard stays dead. With ``restart`` the actor is replaced at once, its sub-envs are
built afresh and reset with the seed and options of their last seeded reset, and each op the
lost shard had in the call comes back as a :class:`Failure` (``WorkerDiedError`` or
``TimeoutError``) naming its sub-env: the vector env reports it with the sub-env's index and
seed, the other shards' results of the call are kept, and the run can go on after resetting
the reported sub-envs.

Ray is imported only when this backend is built; without it the error names the install
command.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar

import gymnasium as gym

from llmgym.error import DependencyNotInstalled, InvalidOptionError, SubEnvError
from llmgym.vector.backends import (
    BackendFailure,
    Failure,
    Op,
    SubEnvConstructionError,
    SubEnvSet,
    build_sub_envs,
)
from llmgym.vector.process import shard_indices

INSTALL_HINT = 'Ray is not installed; run `pip install "llmgym[ray]"` (or `pip install ray`).'

#: Longest single wait while a call runs; bounds how late a timeout is noticed.
_POLL_SLICE = 1.0
#: Seconds an actor gets to answer a progress query or a close.
_QUERY_TIMEOUT = 10.0
#: Seconds Ray gets to place an actor and the actor to build its shard.
_START_TIMEOUT = 300.0

#: What a progress query yields for an actor too busy to answer (a sub-env holding the GIL).
_UNRESPONSIVE = (-1, float("inf"))


def import_ray() -> ModuleType:
    """Import Ray, or fail with the command that installs it."""
    try:
        import ray
    except ImportError as error:
        raise DependencyNotInstalled(f"{INSTALL_HINT} (import failed: {error})") from error
    return ray


def connect(address: str | None = None) -> ModuleType:
    """The imported ``ray`` module, connected to a cluster.

    Reuses the connection when Ray is already initialized (a trainer or test set it up);
    otherwise joins ``address`` (``"auto"``, ``"ray://host:10001"``, ``"host:6379"``) or, for
    ``None``, the cluster in ``RAY_ADDRESS`` or a new single-machine one.
    """
    ray = import_ray()
    if not ray.is_initialized():
        os.environ.setdefault("RAY_DISABLE_USAGE_STATS", "1")
        ray.init(address=address, log_to_driver=False)
    return ray


class EnvShard:
    """The body of one env actor: some sub-envs, by their index in the vector env.

    Construction does no work that can fail; :meth:`start` builds the sub-envs and reports a
    factory's error as a :class:`Failure` (an exception in an actor's constructor would only
    surface later, as an opaque dead actor).
    """

    def __init__(self, factories: dict[int, Callable[[], gym.Env]]) -> None:
        import llmgym  # noqa: F401  (registers the llmgym/ ids in this worker process)

        self._factories = factories
        self._sub_envs: SubEnvSet | None = None
        self._running: tuple[int, float] | None = None

    def start(self, resets: dict[int, tuple[int | None, dict[str, Any] | None]]) -> Failure | None:
        """Build the sub-envs, then reset those in ``resets`` with ``(seed, options)``."""
        try:
            self._sub_envs = build_sub_envs(self._factories)
        except SubEnvConstructionError as error:
            return error.failure
        for index, (seed, options) in resets.items():
            outcome = self._sub_envs.run_one(Op("reset", index, (seed, options)))
            if isinstance(outcome, Failure):
                return outcome
        return None

    def run(self, ops: Sequence[Op]) -> list[Any]:
        assert self._sub_envs is not None, "start() runs before any batch"
        try:
            return self._sub_envs.run(ops, self._on_start)
        finally:
            self._running = None

    def progress(self) -> tuple[int, float] | None:
        """``(sub-env index, seconds it has been running)`` or ``None`` when idle."""
        running = self._running
        return None if running is None else (running[0], time.monotonic() - running[1])

    def where(self) -> tuple[str, int]:
        """``(Ray node id, process id)`` of this actor."""
        import ray

        return ray.get_runtime_context().get_node_id(), os.getpid()

    def close(self) -> None:
        if self._sub_envs is not None:
            self._sub_envs.close()

    def _on_start(self, index: int) -> None:
        self._running = (index, time.monotonic())


class RayBackend:
    """Sub-envs in ``num_workers`` Ray actors (see the module docstring).

    Arguments:
        env_fns: one factory per sub-env; pickled to the actors (by value for lambdas).
        num_workers: number of actors; each holds a contiguous shard of the sub-envs.
        step_timeout: seconds one sub-env may take for one op; ``None`` for no limit.
        restart: replace a dead or timed-out actor and report its ops as failures, instead of
            raising :class:`BackendFailure` and leaving the shard dead.
        num_cpus: CPUs Ray reserves for each actor (fractions allowed).
        address: the cluster to join when Ray is not initialized yet (see :func:`connect`).
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        num_workers: int,
        *,
        step_timeout: float | None = None,
        restart: bool = False,
        num_cpus: float = 1.0,
        address: str | None = None,
    ) -> None:
        if num_workers < 1:
            raise InvalidOptionError(f"num_workers must be >= 1, got {num_workers}.")
        if num_cpus < 0:
            raise InvalidOptionError(f"num_cpus per env actor must be >= 0, got {num_cpus}.")
        self._ray = connect(address)
        self._env_fns = list(env_fns)
        self._step_timeout = step_timeout
        self._restart = restart
        self._num_cpus = num_cpus
        self._actor_class = self._ray.remote(EnvShard).options(
            num_cpus=num_cpus, max_concurrency=2, scheduling_strategy="SPREAD"
        )
        self._shards = shard_indices(len(self._env_fns), num_workers)
        self._owner = {index: worker for worker, shard in enumerate(self._shards) for index in shard}
        self._seeded_resets: dict[int, tuple[int | None, dict[str, Any] | None]] = {}
        self._actors: list[Any] = [None] * len(self._shards)
        self._dead: dict[int, BackendFailure] = {}
        self.restarts = 0
        try:
            self._start_actors(range(len(self._shards)))
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ introspection
    @property
    def actors(self) -> list[Any]:
        """The actor handle of each shard (for monitoring, and tests that kill one)."""
        return list(self._actors)

    @property
    def shards(self) -> list[range]:
        return list(self._shards)

    def locations(self) -> list[tuple[str, int]]:
        """``(node id, pid)`` of each shard's actor."""
        return self._ray.get([actor.where.remote() for actor in self._actors], timeout=_QUERY_TIMEOUT)

    # ------------------------------------------------------------------ running ops
    def run(self, ops: Sequence[Op]) -> list[Any]:
        call = self._submit(ops)
        while call.pending:
            pending = list(call.pending)
            ready, _ = self._ray.wait(pending, num_returns=len(pending), timeout=self._slice(call))
            for ref in ready:
                call.collect(ref, self._result(ref))
            self._check_timeouts(call)
        return self._finish(call)

    async def arun(self, ops: Sequence[Op]) -> list[Any]:
        call = self._submit(ops)
        futures = {asyncio.wrap_future(ref.future()): ref for ref in call.pending}
        while call.pending:
            waiting = [future for future, ref in futures.items() if ref in call.pending]
            done, _ = await asyncio.wait(
                waiting, timeout=self._slice(call), return_when=asyncio.FIRST_COMPLETED
            )
            for future in done:
                call.collect(futures[future], _future_result(future, self._ray))
            await self._acheck_timeouts(call)
        return self._finish(call)

    def _submit(self, ops: Sequence[Op]) -> _Call:
        by_worker: dict[int, list[Op]] = {}
        for op in ops:
            by_worker.setdefault(self._owner[op.index], []).append(op)
            if op.kind == "reset" and op.args[0] is not None:
                self._seeded_resets[op.index] = (op.args[0], op.args[1])
        for worker in by_worker:
            if worker in self._dead:
                raise self._dead[worker]
        refs = {self._actors[worker].run.remote(shard_ops): worker for worker, shard_ops in by_worker.items()}
        return _Call(ops, by_worker, refs)

    def _result(self, ref: Any) -> Any:
        try:
            return self._ray.get(ref)
        except self._ray.exceptions.RayActorError as error:
            return _Lost(error)

    def _slice(self, call: _Call) -> float:
        if self._step_timeout is None:
            return _POLL_SLICE
        return max(0.0, min(_POLL_SLICE, call.started + self._step_timeout - time.monotonic()))

    def _overdue(self, call: _Call) -> list[int]:
        """Shards busy for longer than ``step_timeout`` (only they can hold a timed-out sub-env)."""
        if self._step_timeout is None or time.monotonic() - call.started <= self._step_timeout:
            return []
        return [call.refs[ref] for ref in call.pending]

    def _progress(self, worker: int) -> tuple[int, float] | None:
        try:
            return self._ray.get(self._actors[worker].progress.remote(), timeout=_QUERY_TIMEOUT)
        except self._ray.exceptions.RayActorError:
            return None  # a dead actor shows on its result ref
        except self._ray.exceptions.GetTimeoutError:
            return _UNRESPONSIVE

    async def _aprogress(self, worker: int) -> tuple[int, float] | None:
        try:
            return await asyncio.wait_for(self._actors[worker].progress.remote(), _QUERY_TIMEOUT)
        except self._ray.exceptions.RayActorError:
            return None
        except TimeoutError:
            return _UNRESPONSIVE

    def _check_timeouts(self, call: _Call) -> None:
        for worker in self._overdue(call):
            self._judge(call, worker, self._progress(worker))

    async def _acheck_timeouts(self, call: _Call) -> None:
        for worker in self._overdue(call):
            self._judge(call, worker, await self._aprogress(worker))

    def _judge(self, call: _Call, worker: int, running: tuple[int, float] | None) -> None:
        """Time the shard out when its current sub-env is over ``step_timeout``."""
        assert self._step_timeout is not None
        if running is None or running[1] <= self._step_timeout:
            return
        index = call.by_worker[worker][0].index if running is _UNRESPONSIVE else running[0]
        self._time_out(call, worker, index)

    def _time_out(self, call: _Call, worker: int, index: int) -> None:
        detail = (
            f"sub-env {index} (Ray actor {worker}, sub-envs {self._shards[worker].start}.."
            f"{self._shards[worker].stop - 1}) ran for more than step_timeout={self._step_timeout} s"
        )
        self._ray.kill(self._actors[worker], no_restart=True)
        call.drop_worker(worker)
        self._lose(call, worker, BackendFailure("timeout", index, detail), "TimeoutError")

    def _finish(self, call: _Call) -> list[Any]:
        for worker, lost in list(call.lost.items()):
            shard = self._shards[worker]
            detail = (
                f"Ray actor {worker} (sub-envs {shard.start}..{shard.stop - 1}) died while running "
                f"sub-envs {[op.index for op in call.by_worker[worker]]}: {_first_line(lost.error)}"
            )
            self._lose(call, worker, BackendFailure("died", call.by_worker[worker][0].index, detail),
                       "WorkerDiedError")
        return call.in_order()

    def _lose(self, call: _Call, worker: int, failure: BackendFailure, error_type: str) -> None:
        """The shard's actor is gone: raise, or replace it and report its ops as failures."""
        call.lost.pop(worker, None)
        if not self._restart:
            self._dead[worker] = failure
            raise failure
        self._start_actors([worker])
        self.restarts += 1
        message = (
            f"{failure.detail}; the actor was restarted and its sub-envs reset from their seeds. "
            "Reset this sub-env before stepping it again."
        )
        for op in call.by_worker[worker]:
            call.results[op.index] = Failure(op.index, error_type, message, "")

    # ------------------------------------------------------------------ actors
    def _start_actors(self, workers: Sequence[int]) -> None:
        """Create the actors of ``workers`` and wait until each has built (and re-seeded) its shard."""
        starting = {}
        for worker in workers:
            shard = self._shards[worker]
            actor = self._actor_class.remote({index: self._env_fns[index] for index in shard})
            self._actors[worker] = actor
            resets = {index: self._seeded_resets[index] for index in shard if index in self._seeded_resets}
            starting[actor.start.remote(resets)] = worker
        for ref, worker in starting.items():
            try:
                failure = self._ray.get(ref, timeout=_START_TIMEOUT)
            except self._ray.exceptions.GetTimeoutError:
                raise InvalidOptionError(
                    f"Env actor {worker} did not start within {_START_TIMEOUT:.0f} s. Usually the cluster "
                    f"has no room for one more actor of num_cpus={self._num_cpus} (free now: "
                    f"{self._ray.available_resources().get('CPU', 0)} CPUs): lower num_workers or num_cpus, "
                    "or add nodes."
                ) from None
            except self._ray.exceptions.RayActorError as error:
                detail = f"Ray actor {worker} died while starting: {_first_line(error)}"
                raise BackendFailure("died", self._shards[worker].start, detail) from error
            if failure is not None:
                raise SubEnvConstructionError(failure)

    # ------------------------------------------------------------------ shutting down
    def close(self) -> None:
        """End every actor (and its sub-envs); safe after errors, twice, and after Ray shut down."""
        live = self._take_actors()
        if live:
            closing = [actor.close.remote() for actor in live]
            self._ray.wait(closing, num_returns=len(closing), timeout=_QUERY_TIMEOUT)
        for actor in live:
            self._ray.kill(actor, no_restart=True)

    def kill(self) -> None:
        """End every actor at once."""
        for actor in self._take_actors():
            self._ray.kill(actor, no_restart=True)

    def _take_actors(self) -> list[Any]:
        """The live actor handles, forgotten here; none once Ray has shut down (that ended them)."""
        live = [actor for actor in self._actors if actor is not None]
        self._actors = [None] * len(self._shards)
        return live if self._ray.is_initialized() else []


class _Lost:
    """Stands in for a shard's results when its actor died during the call."""

    def __init__(self, error: Exception) -> None:
        self.error = error


class _Call:
    """The bookkeeping of one batch: which shard got which ops, and what came back."""

    def __init__(self, ops: Sequence[Op], by_worker: dict[int, list[Op]], refs: dict[Any, int]) -> None:
        self.ops = ops
        self.by_worker = by_worker
        self.refs = refs
        self.pending = set(refs)
        self.started = time.monotonic()
        self.results: dict[int, Any] = {}
        self.lost: dict[int, _Lost] = {}

    def collect(self, ref: Any, outcome: Any) -> None:
        self.pending.discard(ref)
        worker = self.refs[ref]
        if isinstance(outcome, _Lost):
            self.lost[worker] = outcome
            return
        for op, result in zip(self.by_worker[worker], outcome, strict=True):
            self.results[op.index] = result

    def drop_worker(self, worker: int) -> None:
        self.pending = {ref for ref in self.pending if self.refs[ref] != worker}

    def in_order(self) -> list[Any]:
        return [self.results[op.index] for op in self.ops]


def _future_result(future: asyncio.Future[Any], ray: ModuleType) -> Any:
    try:
        return future.result()
    except ray.exceptions.RayActorError as error:
        return _Lost(error)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"




@dataclass(frozen=True)
class RayEnvBackend:
    """``backend=RayEnvBackend(...)`` puts a :class:`~llmgym.vector.TextVectorEnv`'s sub-envs in Ray actors.

    Pass it where a backend name goes: ``make_vector_env(id, 256, backend=RayEnvBackend(),
    num_workers=8)`` or ``gym.make_vec(id, 256, backend=RayEnvBackend(restart=True))``. The
    vector env's ``num_workers`` is the number of actors (default: as many as the cluster's
    CPUs hold at ``num_cpus`` each, at most one per sub-env) and its ``step_timeout`` applies.

    Attributes:
        restart: replace a dead or timed-out actor and report its sub-envs' calls as failed
            (the vector env stays usable), instead of raising and closing the vector env.
        num_cpus: CPUs Ray reserves for each env actor.
        address: the cluster to join when Ray is not initialized yet (see :func:`connect`).
    """

    name: ClassVar[str] = "ray"
    restart: bool = False
    num_cpus: float = 1.0
    address: str | None = None

    def start(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        num_workers: int | None,
        step_timeout: float | None,
        describe: Callable[[gym.Env], None],
    ) -> RayBackend:
        """Describe the spaces from one local probe env, then start the actors."""
        if step_timeout is not None and not step_timeout > 0:
            raise InvalidOptionError(f"step_timeout must be > 0 seconds or None, got {step_timeout!r}.")
        ray = connect(self.address)
        probe = env_fns[0]()
        describe(probe)
        probe.close()
        if num_workers is None:
            capacity = ray.cluster_resources().get("CPU", 1.0)
            num_workers = max(1, int(capacity // self.num_cpus) if self.num_cpus > 0 else len(env_fns))
        try:
            return RayBackend(
                env_fns,
                min(num_workers, len(env_fns)),
                step_timeout=step_timeout,
                restart=self.restart,
                num_cpus=self.num_cpus,
                address=self.address,
            )
        except SubEnvConstructionError as error:
            failure = error.failure
            raise SubEnvError(
                f"Sub-env {failure.index} raised {failure.error_type} while being built in its Ray actor: "
                f"{failure.message}\nOriginal traceback:\n{failure.traceback}",
                index=failure.index,
                seed=None,
            ) from None


__all__ = ["EnvShard", "INSTALL_HINT", "RayBackend", "RayEnvBackend", "connect", "import_ray"]
