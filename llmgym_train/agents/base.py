"""The agent interface: an async ``collect_trajectory`` that plays one episode.

An agent owns the conversation of one episode. It never calls the model itself: it puts a
:class:`GenerationRequest` ``(id, token_ids, sampling)`` on the shared observation queue and
awaits the completion on its own action queue. One inference loop (``llmgym_train.rollout``)
drains the observation queue and batches the requests of all agents, whatever turn each is
at, so an agent that does more (retries, tool calls, feedback) costs no throughput.

:class:`~llmgym_train.episode.TrajectoryBuilder` does the token bookkeeping every agent
needs, so an agent's ``collect_trajectory`` reads as the episode's logic only. How the env is
reached (:class:`~llmgym_train.envs.AgentEnv`: a sub-env of llmgym's vector env, on any
backend) is :mod:`llmgym_train.envs`'s business.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal, NamedTuple

from llmgym_train.chat import ChatTokens
from llmgym_train.constraints import Constrain, reply_regex
from llmgym_train.data import Trajectory
from llmgym_train.envs import AgentEnv
from llmgym_train.episode import EpisodeStart, TrajectoryBuilder
from llmgym_train.generation.base import Completion, SamplingSpec


class GenerationRequest(NamedTuple):
    """What an agent puts on the observation queue: its id, the full token context, the sampling."""

    agent_id: int
    token_ids: list[int]
    sampling: SamplingSpec


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
        lookahead: before each turn of the chain loop, play every choice
            (``sampling.allowed_token_ids``) once from a snapshot of the env and record the
            reward each earned (:attr:`Turn.choice_rewards`); the env is then restored and the
            sampled choice played. Needs a choice and an env with snapshots.
        lookahead_turns: turns each lookahead choice is played for: the choice, then up to
            ``lookahead_turns - 1`` greedy turns of the policy itself, each from a fresh context
            (as ``markov`` plays); the choice earns those turns' env rewards, discounted by
            ``lookahead_gamma`` per turn. 1: the choice's own reward.
        lookahead_gamma: per-turn discount of a choice's continuation (``lookahead_turns > 1``).
        lookahead_continuation: who plays a choice's continuation: ``greedy`` (the policy, as
            above) or ``random`` (``lookahead_rollouts`` continuations of uniformly drawn choices,
            played where the env runs; the choice earns the best of their returns).
        lookahead_rollouts: random continuations of each choice (``lookahead_continuation="random"``).
        constrain: ``tool_calls`` constrains every reply to a call of a tool the env lists in its
            reset info, or an answer, and the last of ``max_turns`` to an answer
            (:mod:`llmgym_train.constraints`); ``none``: free generation.
    """

    sampling: SamplingSpec = SamplingSpec()
    max_turns: int | None = None
    max_context_tokens: int = 2048
    sampling_seed: int | None = None
    lookahead: bool = False
    lookahead_turns: int = 1
    lookahead_gamma: float = 1.0
    lookahead_continuation: Literal["greedy", "random"] = "greedy"
    lookahead_rollouts: int = 1
    constrain: Constrain = "none"

    def __post_init__(self) -> None:
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1 or None, got {self.max_turns}.")
        if self.max_context_tokens < 2:
            raise ValueError(f"max_context_tokens must be >= 2, got {self.max_context_tokens}.")
        if self.lookahead and not self.sampling.allowed_token_ids:
            raise ValueError("lookahead plays each choice of sampling.allowed_token_ids; none are set.")
        if self.lookahead_turns < 1 or (self.lookahead_turns > 1 and not self.lookahead):
            raise ValueError(f"lookahead_turns must be >= 1, and 1 without lookahead; got {self.lookahead_turns}.")
        if not 0.0 <= self.lookahead_gamma <= 1.0:
            raise ValueError(f"lookahead_gamma must be in [0, 1], got {self.lookahead_gamma}.")
        if self.lookahead_continuation not in ("greedy", "random") or self.lookahead_rollouts < 1:
            raise ValueError(
                f"lookahead_continuation must be 'greedy' or 'random' and lookahead_rollouts >= 1; got "
                f"{self.lookahead_continuation!r} and {self.lookahead_rollouts}."
            )


def episode_seed(base: int, episode_index: int, index: int) -> int:
    """A seed for the ``index``-th draw of episode ``episode_index`` (a request, a turn's lookahead) of a rollout seeded ``base``."""
    return (base * 1_000_003 + episode_index * 10_007 + index) % (2**31 - 1)


class Agent:
    """Plays one episode per ``collect_trajectory`` call; subclasses implement the episode's logic.

    Arguments:
        chat: token pieces of the model's chat template.
        config: turn limit, sampling and context length.
    """

    #: The agent reaches into the env object itself (not only ``reset`` / ``step``), so each of
    #: its episodes gets a gymnasium env in the rollout's process (an ``AsyncEnv``), not a sub-env
    #: of the pool's vector envs.
    needs_local_env: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "next_observation" in vars(cls):
            # The chain loop reads ``observation_rule``; a method of the old name would be ignored.
            raise TypeError(
                f"{cls.__name__} defines next_observation, which the chain loop no longer calls. Set the class "
                "attribute observation_rule = staticmethod(rule) instead, with rule(chat, builder, completion, "
                "text) -> bool (see llmgym_train.agents.chain.append_observation and fresh_context)."
            )

    def __init__(self, chat: ChatTokens, config: AgentConfig) -> None:
        self.chat = chat
        self.config = config

    async def collect_trajectory(
        self,
        prompt: EpisodeStart,
        env: AgentEnv,
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
        """Ask the inference loop for the next turn of ``builder``'s conversation (:meth:`request`) and await it."""
        await obs_queue.put(self.request(builder))
        return await act_queue.get()

    def request(self, builder: TrajectoryBuilder) -> GenerationRequest:
        """The generation request of the next turn of ``builder``'s conversation (counted as made).

        ``max_tokens`` is capped so prompt + completion stay within ``max_context_tokens``
        (check :meth:`TrajectoryBuilder.fits` first: at least one token must fit). Separate from
        :meth:`generate` so that a loop of another shape (the rollout benchmark's turn-synchronous
        reference) asks exactly what an agent asks.
        """
        context = builder.context()
        room = self.config.max_context_tokens - len(context)
        sampling = self.config.sampling
        seed = self._request_seed(builder.start.episode_index, builder.requests)
        builder.requests += 1
        last_turn = self.config.max_turns is not None and len(builder.turns) + 1 >= self.config.max_turns
        regex = reply_regex(self.config.constrain, builder.info, last_turn)
        if regex is not None:
            sampling = replace(sampling, regex=regex)
        if room < sampling.max_tokens or seed is not None:
            sampling = replace(sampling, max_tokens=min(room, sampling.max_tokens), seed=seed)
        return GenerationRequest(builder.start.episode_index, context, sampling)

    def _request_seed(self, episode_index: int, request: int) -> int | None:
        if self.config.sampling.seed is not None or self.config.sampling_seed is None:
            return self.config.sampling.seed
        return episode_seed(self.config.sampling_seed, episode_index, request)
