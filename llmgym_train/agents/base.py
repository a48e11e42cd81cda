"""The agent interface: an async ``collect_trajectory`` that plays one episode.

An agent owns the conversation of one episode. It never calls the model itself: it puts a
:class:`GenerationRequest` ``(id, token_ids, sampling)`` on the shared observation queue and
awaits the completion on its own action queue. One inference loop (``llmgym_train.rollout``)
drains the observation queue and batches the requests of all agents, whatever turn each is
at, so an agent that does more (retries, tool calls, feedback) costs no throughput.

:class:`TrajectoryBuilder` does the token bookkeeping every agent needs, so an agent's
``collect_trajectory`` reads as the episode's logic only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, NamedTuple, SupportsFloat, TypeVar

from llmgym.error import SubEnvError, WorkerDiedError
from llmgym.vector.backends import BackendFailure, Failure, Op
from llmgym_train.chat import ChatTokens
from llmgym_train.data import EndReason, Trajectory, Turn
from llmgym_train.generation.base import Completion, SamplingSpec
from llmgym_train.staleness import per_token_versions

_Result = TypeVar("_Result")


class GenerationRequest(NamedTuple):
    """What an agent puts on the observation queue: its id, the full token context, the sampling."""

    agent_id: int
    token_ids: list[int]
    sampling: SamplingSpec


@dataclass(frozen=True)
class EpisodeStart:
    """What an agent needs to start an episode: the env, the level, and where it belongs.

    Attributes:
        episode_index: position of the episode in the rollout; also the agent's queue id.
        env_id: registered env id (``llmgym/Sokoban-v0``).
        seed: reset seed; group members share it, so they play the same level.
        group_id: the episode's group (GRPO normalizes advantages within it).
        env_kwargs: keyword arguments for ``gymnasium.make``.
        reset_options: ``reset(options=...)``, e.g. ``{"level": ...}`` for frozen eval levels.
    """

    episode_index: int
    env_id: str
    seed: int
    group_id: int = 0
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    reset_options: dict[str, Any] | None = None


@dataclass(frozen=True)
class AgentConfig:
    """Options every agent understands.

    Attributes:
        sampling: how each turn is sampled (``max_tokens`` is per turn).
        max_turns: the agent stops after this many turns (``None``: only the env ends episodes).
        max_context_tokens: the generator's context length; a turn whose prompt would not fit
            ends the episode as ``context_overflow``.
        sampling_seed: when set, request ``r`` of episode ``e`` samples with a seed derived from
            (``sampling_seed``, e, r), so a rollout is reproducible whatever the batching
            (on backends that honour per-request seeds: hf, and vLLM on GPUs).
    """

    sampling: SamplingSpec = SamplingSpec()
    max_turns: int | None = None
    max_context_tokens: int = 2048
    sampling_seed: int | None = None

    def __post_init__(self) -> None:
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1 or None, got {self.max_turns}.")
        if self.max_context_tokens < 2:
            raise ValueError(f"max_context_tokens must be >= 2, got {self.max_context_tokens}.")


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


class TrajectoryBuilder:
    """Grows one episode's token sequence turn by turn and builds its :class:`Trajectory`."""

    def __init__(
        self,
        prompt: list[int],
        start: EpisodeStart,
        reset_info: dict[str, Any],
        max_context_tokens: int,
        messages: list[dict[str, str]],
    ) -> None:
        self.max_context_tokens = max_context_tokens
        self.messages = list(messages)
        self.token_ids = list(prompt)
        self.loss_mask = [0] * len(prompt)
        self.logprobs = [0.0] * len(prompt)
        self.prompt_length = len(prompt)
        self.turns: list[Turn] = []
        self.start = start
        self.info = {key: value for key, value in reset_info.items() if key != "system_prompt"}
        self.system_prompt: str | None = reset_info.get("system_prompt")
        self._observation_start = 0
        #: Where the context the model sees begins: 0, unless :meth:`restart` began a fresh one.
        self.context_start = 0
        self.fresh_contexts = False
        #: The env's ``info["state_key"]`` of the state the next turn acts on (``None``: not given).
        self.state_key = reset_info.get("state_key")
        self.success = False
        #: Generation requests made so far (seeds each request differently, retries included).
        self.requests = 0
        #: ``(start, versions)`` of each turn whose completion carried policy versions.
        self.version_spans: list[tuple[int, tuple[int, ...]]] = []

    def context(self) -> list[int]:
        """The tokens the model sees for the next turn."""
        return self.token_ids[self.context_start :]

    def fits(self, extra_tokens: int) -> bool:
        """Whether ``extra_tokens`` more tokens plus one generated token fit in ``max_context_tokens``."""
        return len(self.token_ids) - self.context_start + extra_tokens + 1 <= self.max_context_tokens

    def restart(self, prompt: list[int], messages: list[dict[str, str]]) -> None:
        """Begin a fresh context ``prompt`` for the next turn (earlier turns stay in the trajectory, unseen)."""
        self.messages += messages
        self._observation_start = self.context_start = len(self.token_ids)
        self.fresh_contexts = True
        self.token_ids += prompt
        self.loss_mask += [0] * len(prompt)
        self.logprobs += [0.0] * len(prompt)

    def add_generation(self, completion: Completion, text: str, reward: float, info: dict[str, Any]) -> None:
        """Append a turn's generated tokens (as sampled, decoded as ``text``) with the env's verdict on them."""
        self.messages.append({"role": "assistant", "content": text})
        begin = len(self.token_ids)
        if self.turns and (completion.policy_versions is not None) != bool(self.version_spans):
            raise ValueError(
                "Either every completion of an episode carries policy_versions or none does; got a mix. "
                "A generator that stamps versions must stamp every completion."
            )
        if completion.policy_versions is not None:
            self.version_spans.append((begin, completion.policy_versions))
        self.token_ids += completion.token_ids
        self.loss_mask += [1] * len(completion.token_ids)
        self.logprobs += completion.logprobs
        self.turns.append(
            Turn(
                observation_start=self._observation_start,
                start=begin,
                end=len(self.token_ids),
                reward=float(reward),
                action_is_valid=bool(info.get("action_is_valid", True)),
                finish_reason=completion.finish_reason,
                state_key=self.state_key,
            )
        )
        self.state_key = info.get("state_key")
        self.success = self.success or bool(info.get("success", False))

    def add_observation(self, tokens: list[int], text: str) -> None:
        """Append the env's next user turn ``text`` as ``tokens`` (masked out of the loss)."""
        self.messages.append({"role": "user", "content": text})
        self._observation_start = len(self.token_ids)
        self.token_ids += tokens
        self.loss_mask += [0] * len(tokens)
        self.logprobs += [0.0] * len(tokens)

    def build(self, end_reason: EndReason) -> Trajectory:
        return Trajectory(
            token_ids=self.token_ids,
            loss_mask=self.loss_mask,
            behavior_logprobs=self.logprobs,
            prompt_length=self.prompt_length,
            turns=self.turns,
            success=self.success,
            end_reason=end_reason,
            group_id=self.start.group_id,
            episode_index=self.start.episode_index,
            env_id=self.start.env_id,
            seed=self.start.seed,
            info=self.info,
            messages=self.messages,
            fresh_contexts=self.fresh_contexts,
            policy_versions=per_token_versions(len(self.token_ids), self.version_spans) if self.version_spans else None,
        )


class Agent:
    """Plays one episode per ``collect_trajectory`` call; subclasses implement the episode's logic.

    Arguments:
        chat: token pieces of the model's chat template.
        config: turn limit, sampling and context length.
    """

    #: The agent reaches into the env object itself (not only ``reset`` / ``step``), so its
    #: envs stay in the rollout's process even when env workers are configured.
    needs_local_env: ClassVar[bool] = False

    def __init__(self, chat: ChatTokens, config: AgentConfig) -> None:
        self.chat = chat
        self.config = config

    async def collect_trajectory(
        self,
        prompt: EpisodeStart,
        env: AsyncEnv,
        obs_queue: asyncio.Queue[GenerationRequest | None],
        act_queue: asyncio.Queue[Completion],
    ) -> Trajectory:
        """Play the episode ``prompt`` describes on ``env``; return its trajectory."""
        raise NotImplementedError

    # ------------------------------------------------------------------ helpers for subclasses
    def new_builder(self, start: EpisodeStart, observation: str, reset_info: dict[str, Any]) -> TrajectoryBuilder:
        """A builder whose prompt is the system prompt (from the reset ``info``) and the first observation."""
        system_prompt = reset_info.get("system_prompt")
        return TrajectoryBuilder(
            self.chat.prompt(observation, system_prompt),
            start,
            reset_info,
            self.config.max_context_tokens,
            self.chat.messages(observation, system_prompt),
        )

    async def generate(
        self,
        builder: TrajectoryBuilder,
        obs_queue: asyncio.Queue[GenerationRequest | None],
        act_queue: asyncio.Queue[Completion],
    ) -> Completion:
        """Ask the inference loop for the next turn of ``builder``'s conversation and await it.

        ``max_tokens`` is capped so prompt + completion stay within ``max_context_tokens``
        (check :meth:`TrajectoryBuilder.fits` first: at least one token must fit).
        """
        context = builder.context()
        room = self.config.max_context_tokens - len(context)
        sampling = self.config.sampling
        seed = self._request_seed(builder.start.episode_index, builder.requests)
        builder.requests += 1
        if room < sampling.max_tokens or seed is not None:
            sampling = replace(sampling, max_tokens=min(room, sampling.max_tokens), seed=seed)
        await obs_queue.put(GenerationRequest(builder.start.episode_index, context, sampling))
        return await act_queue.get()

    def _request_seed(self, episode_index: int, request: int) -> int | None:
        if self.config.sampling.seed is not None or self.config.sampling_seed is None:
            return self.config.sampling.seed
        return (self.config.sampling_seed * 1_000_003 + episode_index * 10_007 + request) % (2**31 - 1)
