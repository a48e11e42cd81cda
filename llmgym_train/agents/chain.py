"""Built-in agents: ``chain`` (plain multi-turn), ``markov`` (the latest observation only) and
``math-multi-turn`` (retry with feedback).

The chain loop is a function, :func:`play_chain` (reset, then :func:`play_turns`), that an
agent class takes as its ``collect_trajectory``, with an ``observation_rule`` saying how each
observation enters the context: :func:`append_observation` (``chain``) or
:func:`fresh_context` (``markov``). Agents compose these pieces rather than inherit them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import ClassVar

from llmgym_train.agents.base import Agent, GenerationRequest, episode_seed
from llmgym_train.chat import ChatTokens
from llmgym_train.data import Trajectory
from llmgym_train.envs import AgentEnv
from llmgym_train.episode import EpisodeStart, TrajectoryBuilder
from llmgym_train.generation.base import Completion


ObservationRule = Callable[[ChatTokens, TrajectoryBuilder, Completion, str], bool]


def append_observation(chat: ChatTokens, builder: TrajectoryBuilder, completion: Completion, text: str) -> bool:
    """Append ``text`` as the next user turn; ``False`` (nothing appended) when it would not fit (``chain``)."""
    last = completion.token_ids[-1] if completion.token_ids else None
    tokens = chat.observation(text, last)
    if not builder.fits(len(tokens)):
        return False
    builder.add_observation(tokens, text)
    return True


def fresh_context(chat: ChatTokens, builder: TrajectoryBuilder, completion: Completion, text: str) -> bool:
    """Begin a fresh context of the system prompt and ``text`` alone; ``False`` when it would not fit (``markov``)."""
    tokens = chat.prompt(text, builder.system_prompt)
    if len(tokens) + 1 > builder.max_context_tokens:
        return False
    builder.restart(tokens, chat.messages(text, None)[-1:])
    return True


async def play_chain(
    agent: Agent,
    prompt: EpisodeStart,
    env: AgentEnv,
    obs_queue: asyncio.Queue[GenerationRequest | None],
    act_queue: asyncio.Queue[Completion],
) -> Trajectory:
    """The chain loop's ``collect_trajectory``: reset, then :func:`play_turns` until the episode ends.

    Agents that play the chain loop use this very function as their ``collect_trajectory``
    (tree rollouts replay the loop for exactly those agents, see :func:`plays_chain`).
    """
    observation, info = await env.reset(seed=prompt.seed, options=prompt.reset_options)
    builder = agent.new_builder(prompt, observation, info)
    return await play_turns(agent, builder, env, obs_queue, act_queue)


async def play_turns(
    agent: Agent,
    builder: TrajectoryBuilder,
    env: AgentEnv,
    obs_queue: asyncio.Queue[GenerationRequest | None],
    act_queue: asyncio.Queue[Completion],
    before_turn: Callable[[TrajectoryBuilder], Awaitable[None]] | None = None,
) -> Trajectory:
    """The turn loop from ``builder``'s state on; ``before_turn`` runs before each turn (tree rollouts snapshot there).

    The episode ends when the env terminates or truncates it, after ``max_turns`` turns, or
    when the next prompt would not fit the context (``context_overflow``). The agent's
    ``observation_rule`` says how each observation enters the context.
    """
    next_observation: ObservationRule = type(agent).observation_rule  # type: ignore[attr-defined]
    if not builder.fits(0):
        return builder.build("context_overflow")
    policy = None
    if agent.config.lookahead_turns > 1 and agent.config.lookahead_continuation == "greedy":
        policy = GreedyPolicy(agent, builder, obs_queue, act_queue)
    while True:
        if before_turn is not None:
            await before_turn(builder)
        completion = await agent.generate(builder, obs_queue, act_queue)
        text = agent.chat.action_text(completion.token_ids)
        choice_rewards = played = None
        if agent.config.lookahead:
            choice_rewards = await lookahead_rewards(agent, env, policy, _lookahead_seed(agent, builder))
            played = _choice_index(agent, completion)
        observation, reward, terminated, truncated, info = await env.step(text)
        builder.add_generation(completion, text, float(reward), info, choice_rewards, played)
        if terminated or truncated:
            return builder.build("terminated" if terminated else "truncated")
        if agent.config.max_turns is not None and len(builder.turns) >= agent.config.max_turns:
            return builder.build("max_turns")
        if not next_observation(agent.chat, builder, completion, observation):
            return builder.build("context_overflow")


async def lookahead_rewards(
    agent: Agent, env: AgentEnv, policy: GreedyPolicy | None = None, seed: int = 0
) -> tuple[float, ...]:
    """The return each choice (``sampling.allowed_token_ids``) earns from the env's state now; the state is kept.

    Every choice is played once from a snapshot, and the snapshot is restored after the last.
    With ``lookahead_turns > 1``, ``policy`` plays on after the choice until the env ends the
    episode or the turns run out, and the choice earns the discounted sum of those turns' env
    rewards (``lookahead_gamma`` per turn): a one-step rollout of the policy, scored by the env.
    Under ``lookahead_continuation="random"`` the env plays ``lookahead_rollouts`` continuations
    of uniformly drawn choices instead (seeded by ``seed``), and the choice earns the best return.
    """
    turns = agent.config.lookahead_turns
    if turns > 1 and agent.config.lookahead_continuation == "random":
        actions = [agent.chat.action_text([token_id]) for token_id in agent.config.sampling.allowed_token_ids]
        returns = await env.random_rollout_returns(
            actions, rollouts=agent.config.lookahead_rollouts, turns=turns, gamma=agent.config.lookahead_gamma, seed=seed
        )
        return tuple(float(value) for value in returns)
    if turns > 1 and policy is None:
        raise ValueError(f"lookahead_turns={turns} plays on after each choice, which needs the policy's greedy turns.")
    state = await env.get_state()
    returns = []
    for token_id in agent.config.sampling.allowed_token_ids:
        await env.set_state(state)
        observation, reward, terminated, truncated, _ = await env.step(agent.chat.action_text([token_id]))
        later = 0.0 if policy is None or terminated or truncated else await policy.play_on(env, observation)
        returns.append(float(reward) + later)
    await env.set_state(state)
    return tuple(returns)


class GreedyPolicy:
    """The policy's greedy turn from an observation alone (a fresh context, as ``markov`` plays), one per text.

    A lookahead's continuations revisit states (a move into a wall, paths that meet), and the
    weights do not change within a rollout, so each observation is asked for once per episode.
    Requests go through the episode's own queues, batched with every other agent's turns.
    """

    def __init__(
        self,
        agent: Agent,
        builder: TrajectoryBuilder,
        obs_queue: asyncio.Queue[GenerationRequest | None],
        act_queue: asyncio.Queue[Completion],
    ) -> None:
        if type(agent).observation_rule is not fresh_context:  # type: ignore[attr-defined]
            raise ValueError(
                f"A lookahead of several turns plays the policy on from fresh contexts, as the markov agent does; "
                f"agent {type(agent).__name__} keeps the conversation. Use rollout.agent=markov or lookahead_turns=1."
            )
        self.agent, self.builder = agent, builder
        self.obs_queue, self.act_queue = obs_queue, act_queue
        self.sampling = replace(agent.config.sampling, temperature=0.0, seed=None)
        self.actions: dict[str, str | None] = {}

    async def play_on(self, env: AgentEnv, observation: str) -> float:
        """Up to ``lookahead_turns - 1`` greedy turns from ``observation``: their rewards, discounted from the first."""
        config = self.agent.config
        total, discount = 0.0, 1.0
        for _ in range(config.lookahead_turns - 1):
            action = await self.act(observation)
            if action is None:
                break
            observation, reward, terminated, truncated, _ = await env.step(action)
            discount *= config.lookahead_gamma
            total += discount * float(reward)
            if terminated or truncated:
                break
        return total

    async def act(self, observation: str) -> str | None:
        """The greedy reply to ``observation``; ``None`` when its prompt would not fit the context."""
        if observation not in self.actions:
            tokens = self.agent.chat.prompt(observation, self.builder.system_prompt)
            action = None
            if len(tokens) + 1 <= self.builder.max_context_tokens:
                await self.obs_queue.put(GenerationRequest(self.builder.start.episode_index, tokens, self.sampling))
                action = self.agent.chat.action_text((await self.act_queue.get()).token_ids)
            self.actions[observation] = action
        return self.actions[observation]


def _lookahead_seed(agent: Agent, builder: TrajectoryBuilder) -> int:
    """The seed of a turn's random continuations: from the sampling seed, the episode and the turn."""
    return episode_seed(agent.config.sampling_seed or 0, builder.start.episode_index, len(builder.turns))


def _choice_index(agent: Agent, completion: Completion) -> int | None:
    allowed = agent.config.sampling.allowed_token_ids
    return allowed.index(completion.token_ids[0]) if completion.token_ids[:1] and completion.token_ids[0] in allowed else None


def plays_chain(cls: type[Agent]) -> bool:
    """Whether agents of ``cls`` play the chain loop as it is (their ``collect_trajectory`` is :func:`play_chain`)."""
    return cls.collect_trajectory is play_chain  # type: ignore[comparison-overlap]


class ChainAgent(Agent):
    """The plain multi-turn loop: observation -> completion -> env step, until the episode ends.

    The episode ends when the env terminates or truncates it, after ``max_turns`` turns, or
    when the next prompt would not fit the context (``context_overflow``).
    """

    #: How the env's next observation enters the context: appended to the conversation.
    observation_rule: ClassVar[ObservationRule] = staticmethod(append_observation)
    collect_trajectory = play_chain  # type: ignore[assignment]


class MarkovAgent(Agent):
    """Each turn sees only the system prompt and the env's latest observation: a Markov policy.

    Where the observation holds the whole state (a grid env's map and position), earlier turns
    add nothing but tokens: contexts stay as short as the first prompt, however long the
    episode, and a turn's decision depends on the state alone, so turns from equal states are
    comparable (step-level groups, see :func:`~llmgym_train.algorithms.step_grouped`). The
    trajectory keeps every turn's context and generation in order (``fresh_contexts``); train
    it with ``rollout.layout=turn``, where each sample is exactly the context the model saw.
    It plays :class:`ChainAgent`'s loop with :func:`fresh_context` as its observation rule.
    """

    observation_rule: ClassVar[ObservationRule] = staticmethod(fresh_context)
    collect_trajectory = play_chain  # type: ignore[assignment]


class MathMultiTurnAgent(Agent):
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
        env: AgentEnv,
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
            if not append_observation(self.chat, builder, completion, observation):
                return builder.build("context_overflow")
