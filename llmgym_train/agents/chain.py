"""Built-in agents: ``chain`` (plain multi-turn), ``markov`` (the latest observation only) and
``math-multi-turn`` (retry with feedback)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import ClassVar

from llmgym_train.agents.base import Agent, GenerationRequest
from llmgym_train.data import Trajectory
from llmgym_train.envs import AsyncEnv
from llmgym_train.episode import EpisodeStart, TrajectoryBuilder
from llmgym_train.generation.base import Completion


class ChainAgent(Agent):
    """The plain multi-turn loop: observation -> completion -> env step, until the episode ends.

    The episode ends when the env terminates or truncates it, after ``max_turns`` turns, or
    when the next prompt would not fit the context (``context_overflow``).
    """

    async def collect_trajectory(
        self,
        prompt: EpisodeStart,
        env: AsyncEnv,
        obs_queue: asyncio.Queue[GenerationRequest | None],
        act_queue: asyncio.Queue[Completion],
    ) -> Trajectory:
        observation, info = await env.reset(seed=prompt.seed, options=prompt.reset_options)
        builder = self.new_builder(prompt, observation, info)
        return await self.play_turns(builder, env, obs_queue, act_queue)

    async def play_turns(
        self,
        builder: TrajectoryBuilder,
        env: AsyncEnv,
        obs_queue: asyncio.Queue[GenerationRequest | None],
        act_queue: asyncio.Queue[Completion],
        before_turn: Callable[[TrajectoryBuilder], Awaitable[None]] | None = None,
    ) -> Trajectory:
        """The turn loop from ``builder``'s state on; ``before_turn`` runs before each turn (tree rollouts snapshot there)."""
        if not builder.fits(0):
            return builder.build("context_overflow")
        while True:
            if before_turn is not None:
                await before_turn(builder)
            completion = await self.generate(builder, obs_queue, act_queue)
            text = self.chat.action_text(completion.token_ids)
            observation, reward, terminated, truncated, info = await env.step(text)
            builder.add_generation(completion, text, float(reward), info)
            if terminated or truncated:
                return builder.build("terminated" if terminated else "truncated")
            if self.config.max_turns is not None and len(builder.turns) >= self.config.max_turns:
                return builder.build("max_turns")
            if not self.next_observation(builder, completion, observation):
                return builder.build("context_overflow")

    def next_observation(self, builder: TrajectoryBuilder, completion: Completion, text: str) -> bool:
        """Append ``text`` as the next user turn; ``False`` (nothing appended) when it would not fit."""
        last = completion.token_ids[-1] if completion.token_ids else None
        tokens = self.chat.observation(text, last)
        if not builder.fits(len(tokens)):
            return False
        builder.add_observation(tokens, text)
        return True


class MarkovAgent(ChainAgent):
    """Each turn sees only the system prompt and the env's latest observation: a Markov policy.

    Where the observation holds the whole state (a grid env's map and position), earlier turns
    add nothing but tokens: contexts stay as short as the first prompt, however long the
    episode, and a turn's decision depends on the state alone, so turns from equal states are
    comparable (step-level groups, see :func:`~llmgym_train.algorithms.step_grouped`). The
    trajectory keeps every turn's context and generation in order (``fresh_contexts``); train
    it with ``rollout.layout=turn``, where each sample is exactly the context the model saw.
    """

    def next_observation(self, builder: TrajectoryBuilder, completion: Completion, text: str) -> bool:
        system_prompt = builder.system_prompt
        tokens = self.chat.prompt(text, system_prompt)
        if len(tokens) + 1 > builder.max_context_tokens:
            return False
        builder.restart(tokens, self.chat.messages(text, None)[-1:])
        return True


class MathMultiTurnAgent(ChainAgent):
    """Retry until correct: after a wrong answer the same problem is posed again with feedback.

    As in AReaL's multi-turn math agent: a one-step task (the env ends the episode after an
    answer) becomes up to ``max_turns`` attempts. A wrong attempt's feedback, ``retry_message``,
    is appended as the next user turn and the env is reset to the same problem (same seed and
    options). Each attempt keeps the env's reward; a later success is worth
    ``turn_discount ** attempt`` of its reward, so a first-try answer is preferred.
    Envs that do not end after an answer are played as in ``chain``.
    """

    retry_message: ClassVar[str] = (
        "Your answer is either wrong or not parsable. Please read the question again, check your "
        "previous reasoning, and answer again."
    )
    turn_discount: ClassVar[float] = 1.0

    async def collect_trajectory(
        self,
        prompt: EpisodeStart,
        env: AsyncEnv,
        obs_queue: asyncio.Queue[GenerationRequest | None],
        act_queue: asyncio.Queue[Completion],
    ) -> Trajectory:
        observation, info = await env.reset(seed=prompt.seed, options=prompt.reset_options)
        builder = self.new_builder(prompt, observation, info)
        max_turns = self.config.max_turns or 1
        if not builder.fits(0):
            return builder.build("context_overflow")
        while True:
            completion = await self.generate(builder, obs_queue, act_queue)
            text = self.chat.action_text(completion.token_ids)
            observation, reward, terminated, truncated, info = await env.step(text)
            attempt = len(builder.turns)
            if info.get("success", False):
                reward = float(reward) * self.turn_discount**attempt
            builder.add_generation(completion, text, float(reward), info)
            if info.get("success", False):
                return builder.build("terminated")
            if len(builder.turns) >= max_turns:
                return builder.build("terminated" if terminated else "truncated" if truncated else "max_turns")
            if terminated or truncated:
                await env.reset(seed=prompt.seed, options=prompt.reset_options)
                observation = self.retry_message
            if not self.next_observation(builder, completion, observation):
                return builder.build("context_overflow")
