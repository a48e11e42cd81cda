"""Asynchronous training's two halves: a producer that keeps the engines generating, and the trainer's side of it.

With ``trainer.mode=async`` the trainer (:mod:`llmgym_train.trainer`) no longer plays a step's
episodes itself. :class:`AsyncRollouts` runs a **producer** in a thread of its own, with one
event loop and one :class:`~llmgym_train.rollout.EpisodeStream` on the trainer's generator:

* it starts batch ``t``'s episodes (the same plan, levels and groups a synchronous step ``t``
  plays) as soon as the :class:`~llmgym_train.staleness.StalenessController`'s gate lets ticket
  ``t * B`` start, that is once the engines hold version ``t - max_staleness``;
* it applies each new policy the trainer publishes **between two engine calls** (the loop calls
  the engine synchronously, so none is in progress then), with the generator's
  :meth:`~llmgym_train.generation.base.VersionedGenerator.publish`: vLLM's requests in flight
  go on under the new weights, their tokens already generated kept, so an episode started
  under version ``k`` finishes under ``k + 1`` and every token records the version that
  sampled it. Then the controller's version advances and the gate opens one batch further.

The trainer is the **consumer**: :meth:`AsyncRollouts.next_batch` waits until every episode of
batch ``t`` has ended (generation goes on meanwhile, up to the gate), and
:meth:`AsyncRollouts.publish` hands over the weights of version ``t + 1`` and returns at once:
the engines never wait for an update, and the update never waits for more than its own batch.
Nothing is dropped for staleness (batches are tickets in start order), so the episodes trained
on are the episodes generated, long ones included.

Evaluation episodes (:meth:`AsyncRollouts.play`) join the same stream: the trainer waits for
them, so they play the version it published last. A checkpoint holds the controller's state
and the episodes that ended but are not trained yet (:meth:`AsyncRollouts.state_dict`); a
resumed run plays the episodes that were in flight again, from their start, under the resumed
version (:meth:`~llmgym_train.staleness.StalenessController.restart`), so the bound holds
after a resume too.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from llmgym.error import Error
from llmgym_train.agents import AgentConfig
from llmgym_train.chat import ChatTokens
from llmgym_train.data import Trajectory
from llmgym_train.envs import EnvPool
from llmgym_train.episode import EpisodeStart
from llmgym_train.generation.base import VersionedGenerator
from llmgym_train.planner import EpisodePlan
from llmgym_train.rollout import EpisodeStream
from llmgym_train.staleness import NOT_SAMPLED, StalenessController, TrainingBatch, oldest_version

if TYPE_CHECKING:
    import torch

#: Seconds between the consumer's checks of the producer's health while it waits.
_POLL_SECONDS = 0.5


class ProducerFailed(Error, RuntimeError):
    """The rollout producer stopped with an error (an env, the engine or an agent failed); the cause is chained."""


@dataclass
class StepBatch:
    """What one update trains on, and how long the trainer waited for it.

    Attributes:
        trajectories: batch ``version``'s episodes in start order, each ``episode_index`` its
            position in the batch (as a synchronous step's).
        labels: each episode's metric label (its env's).
        batch: the tickets and each episode's staleness, from the controller.
        waited_s: seconds the trainer idled until the batch was complete.
    """

    version: int
    trajectories: list[Trajectory]
    labels: list[str]
    batch: TrainingBatch
    waited_s: float


@dataclass
class _Shared:
    """What both threads touch, under one lock: the controller, ended episodes, the weights to publish."""

    controller: StalenessController
    finished: dict[int, Trajectory] = field(default_factory=dict)
    publication: tuple[int, list[tuple[str, Any]]] | None = None
    #: Generated tokens of every episode that ended, in the order they ended (the benchmark's length distribution).
    generated_lengths: list[int] = field(default_factory=list)
    #: Seconds the producer spent loading published weights.
    publish_seconds: float = 0.0
    error: BaseException | None = None


class AsyncRollouts:
    """The producer thread and the trainer's handle on it (see the module docstring).

    Arguments:
        generator: the engines; they must be able to :meth:`~VersionedGenerator.publish`.
        chat: the model's chat tokens.
        controller: the staleness bookkeeping (fresh, or restored from a checkpoint).
        plan: the episodes of batch ``t`` (a synchronous step ``t``'s plan).
        agent_config: how batch ``t``'s episodes are played (its sampling seed).
        agent: the registered agent that plays training episodes.
        env_pool: the trainer's vector envs.
        finished: ended, untrained episodes restored from a checkpoint (ticket -> trajectory).
    """

    def __init__(
        self,
        generator: VersionedGenerator,
        chat: ChatTokens,
        controller: StalenessController,
        *,
        plan: Callable[[int], EpisodePlan],
        agent_config: Callable[[int], AgentConfig],
        agent: str,
        env_pool: EnvPool | None,
        finished: dict[int, Trajectory] | None = None,
    ) -> None:
        if not isinstance(generator, VersionedGenerator):
            raise TypeError(f"{type(generator).__name__} cannot publish policy versions; asynchronous training needs one that can.")
        self.generator, self.chat = generator, chat
        self.plan, self.agent_config, self.agent, self.env_pool = plan, agent_config, agent, env_pool
        self._shared = _Shared(controller, dict(finished or {}))
        self._condition = threading.Condition()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._stream: EpisodeStream | None = None
        self._stopping = False
        self._busy_slots: set[str] = set()

    # ------------------------------------------------------------------ the trainer's side
    @property
    def controller(self) -> StalenessController:
        return self._shared.controller

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Publish ``weights`` as the controller's version, then start the producer thread."""
        self.generator.publish(weights, self.controller.version)
        for ticket in self.controller.in_flight():  # a resumed run: play them again under this version
            self.controller.restart(ticket)
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="llmgym-rollouts", daemon=True)
        self._thread.start()
        ready.wait()
        self._raise_if_failed()

    def next_batch(self) -> StepBatch:
        """Block until every episode of the next batch has ended; take it (see :meth:`StalenessController.take_batch`)."""
        started = time.perf_counter()
        with self._condition:
            while not self.controller.batch_ready():
                self._raise_if_failed()
                self._condition.wait(_POLL_SECONDS)
            batch = self.controller.take_batch()
            trajectories = [self._shared.finished.pop(ticket) for ticket in batch.tickets]
        plan = self.plan(batch.version)
        size = self.controller.batch_size
        trajectories = [replace(t, episode_index=ticket % size) for t, ticket in zip(trajectories, batch.tickets)]
        return StepBatch(batch.version, trajectories, list(plan.labels), batch, time.perf_counter() - started)

    def publish(self, weights: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Hand the weights of ``version`` to the producer and return; they are copied now, so training may go on."""
        snapshot = [(name, tensor.detach().clone()) for name, tensor in weights]
        with self._condition:
            if self.controller.version + 1 != version or self._shared.publication is not None:
                raise ProducerFailed(
                    f"publish(version {version}) out of order: the engines hold version {self.controller.version}; "
                    "publish each update once, after next_batch()."
                )
            self._shared.publication = (version, snapshot)
        self._wake_producer()

    def wait_published(self, version: int) -> None:
        """Block until the engines hold ``version`` (a checkpoint must see the controller at the trainer's step)."""
        with self._condition:
            while self.controller.version < version:
                self._raise_if_failed()
                self._condition.wait(_POLL_SECONDS)

    def play(self, starts: Sequence[EpisodeStart], agent: str, config: AgentConfig) -> list[Trajectory]:
        """Play ``starts`` in the producer's stream (evaluation episodes) and wait for their trajectories."""
        if self._loop is None or not self.running:
            raise ProducerFailed("the rollout producer is not running; start() it first.")
        own = [replace(start, episode_index=-1 - position) for position, start in enumerate(starts)]
        future = asyncio.run_coroutine_threadsafe(self._play_eval(own, agent, config), self._loop)
        while True:
            try:
                trajectories = future.result(timeout=_POLL_SECONDS)
                break
            except TimeoutError:
                self._raise_if_failed()
        return [replace(t, episode_index=start.episode_index) for t, start in zip(trajectories, starts, strict=True)]

    def state_dict(self) -> dict[str, Any]:
        """The controller's state and the ended, untrained episodes; call after :meth:`wait_published`."""
        with self._condition:
            return {"controller": self.controller.state_dict(), "finished": dict(self._shared.finished)}

    def busy_seconds(self) -> float:
        """Seconds the engines have been busy so far: generating or loading published weights."""
        stream = self._stream
        return (0.0 if stream is None else stream.generation_seconds) + self._shared.publish_seconds

    @property
    def generated_lengths(self) -> list[int]:
        """Generated tokens of every episode that ended so far, in the order they ended."""
        with self._condition:
            return list(self._shared.generated_lengths)

    def close(self) -> None:
        """Stop the producer: episodes in flight are cancelled (a checkpoint has their tickets), the loop ends."""
        self._stopping = True
        if self.running:
            self._wake_producer()
            assert self._thread is not None
            self._thread.join(timeout=120)
        self._thread = None

    def _wake_producer(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(wake.set)
            except RuntimeError:  # the loop closed meanwhile: nothing to wake
                pass

    def _raise_if_failed(self) -> None:
        error = self._shared.error
        if error is not None:
            raise ProducerFailed(f"The rollout producer failed: {type(error).__name__}: {error}") from error

    # ------------------------------------------------------------------ the producer thread
    def _run(self, ready: threading.Event) -> None:
        import torch

        # OpenMP's thread count is per thread, and a new thread starts at the machine's default;
        # torch's first call in a thread sets it to torch's (the run's ``threads``). vLLM's CPU
        # attention plans its work by the former and runs it by the latter: make them agree
        # before this thread steps an engine.
        torch.get_num_threads()
        try:
            asyncio.run(self._produce(ready))
        except BaseException as error:  # noqa: BLE001 - the consumer re-raises it with its cause
            self._fail(error)
        finally:
            ready.set()

    def _fail(self, error: BaseException) -> None:
        with self._condition:
            if self._shared.error is None and not self._stopping:
                self._shared.error = error
            self._condition.notify_all()

    async def _produce(self, ready: threading.Event) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        self._stream = EpisodeStream(self.generator, self.chat, agent=self.agent, env_pool=self.env_pool)
        batches: set[asyncio.Task[None]] = set()
        ready.set()
        try:
            self._start_restarted(batches)
            while not self._stopping:
                self._wake.clear()
                self._apply_publication()
                self._start_batches(batches)
                await self._wait(batches)
        except BaseException as error:
            self._fail(error)  # the trainer hears of it now, not after the cleanup below
            raise
        finally:
            for task in batches:
                task.cancel()
            await asyncio.gather(*batches, return_exceptions=True)
            await self._stream.close(abort=True)  # evaluation episodes still waiting are cancelled with the loop

    async def _wait(self, batches: set[asyncio.Task[None]]) -> None:
        """Until woken (a publication, a slot freed, a stop); a failed batch or engine loop raises here."""
        assert self._wake is not None and self._stream is not None
        waker = asyncio.ensure_future(self._wake.wait())
        watched = {waker, self._stream.server, *batches}
        done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        waker.cancel()
        for task in done - {waker}:
            batches.discard(task)  # type: ignore[arg-type]
            if task.cancelled():
                continue
            if task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
            if task is self._stream.server:
                raise ProducerFailed("the inference loop ended while the producer still runs.")

    def _apply_publication(self) -> None:
        """Load the weights the trainer published, between two engine calls; then the gate opens one batch further."""
        with self._condition:
            publication, self._shared.publication = self._shared.publication, None
        if publication is None:
            return
        version, weights = publication
        started = time.perf_counter()
        self.generator.publish(weights, version)
        with self._condition:
            self._shared.publish_seconds += time.perf_counter() - started
            self.controller.advance()
            assert self.controller.version == version, (self.controller.version, version)
            self._condition.notify_all()

    def _start_batches(self, batches: set[asyncio.Task[None]]) -> None:
        """Start every whole batch the gate admits whose env slot is free."""
        size = self.controller.batch_size
        while True:
            with self._condition:
                if self.controller.room() < size or self._slot(self.controller.issued // size) in self._busy_slots:
                    return
                tickets = self.controller.start(size)
            batches.add(asyncio.ensure_future(self._play_batch(tickets)))

    def _start_restarted(self, batches: set[asyncio.Task[None]]) -> None:
        """A resumed run's episodes that were in flight at the checkpoint: each batch's as one unit."""
        size = self.controller.batch_size
        by_batch: dict[int, list[int]] = {}
        for ticket in self.controller.in_flight():
            by_batch.setdefault(ticket // size, []).append(ticket)
        for tickets in by_batch.values():
            batches.add(asyncio.ensure_future(self._play_batch(tickets)))

    def _slot(self, batch: int) -> str:
        """The env pool slot of ``batch``: at most ``max_staleness + 1`` batches generate at once, one per slot."""
        return f"batch-{batch % (self.controller.max_staleness + 1)}"

    async def _play_batch(self, tickets: list[int]) -> None:
        """Play ``tickets`` (all of one batch) in the stream; each episode reports to the controller as it ends."""
        assert self._stream is not None
        size = self.controller.batch_size
        batch = tickets[0] // size
        plan = self.plan(batch)
        starts = [replace(plan.starts[ticket % size], episode_index=ticket) for ticket in tickets]
        slot = self._slot(batch) + ("" if len(tickets) == size else f"-resumed{len(tickets)}")
        self._busy_slots.add(slot)
        try:
            await self._stream.play(starts, self.agent_config(batch), slot=slot, on_episode=self._episode_ended)
        finally:
            self._busy_slots.discard(slot)
            if self._wake is not None:
                self._wake.set()

    def _episode_ended(self, start: EpisodeStart, trajectory: Trajectory) -> None:
        ticket = start.episode_index
        with self._condition:
            started = self.controller.running[ticket]
            self.controller.finish(ticket, oldest_version(trajectory.policy_versions, default=started))
            self._shared.finished[ticket] = trajectory
            self._shared.generated_lengths.append(trajectory.num_generated_tokens)
            self._condition.notify_all()

    async def _play_eval(self, starts: list[EpisodeStart], agent: str, config: AgentConfig) -> list[Trajectory]:
        assert self._stream is not None
        return await self._stream.play(starts, config, slot="eval", agent=agent)


def staleness_metrics(taken: StepBatch) -> dict[str, float]:
    """A step's figures of asynchronous training: version, staleness (episodes and tokens), the wait, episode lengths.

    ``staleness/max`` and ``staleness/mean`` are over episodes (the update's version minus the
    oldest version among an episode's tokens, what ``max_staleness`` bounds);
    ``staleness/token_mean`` over generated tokens; ``time/wait_s`` is how long the trainer
    idled for the batch.
    """
    lags = token_staleness(taken.trajectories, taken.version)
    lengths = [trajectory.num_generated_tokens for trajectory in taken.trajectories]
    return {
        "policy_version": float(taken.version),
        "staleness/max": float(taken.batch.max_staleness),
        "staleness/mean": taken.batch.mean_staleness,
        "staleness/token_mean": sum(lags) / max(len(lags), 1),
        "time/wait_s": taken.waited_s,
        "tokens/generated": float(sum(lengths)),
        "episode_tokens_mean": sum(lengths) / max(len(lengths), 1),
    }


def token_staleness(trajectories: Sequence[Trajectory], version: int) -> list[int]:
    """``version - v`` for every generated token's version ``v`` (tokens without versions count as 0)."""
    lags: list[int] = []
    for trajectory in trajectories:
        versions = trajectory.policy_versions
        if versions is None:
            lags += [0] * trajectory.num_generated_tokens
            continue
        lags += [version - token for token in versions if token != NOT_SAMPLED]
    return lags


__all__ = ["AsyncRollouts", "ProducerFailed", "StepBatch", "staleness_metrics", "token_staleness"]
