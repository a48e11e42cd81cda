"""``self-play``: both seats of a two-player game played by the current policy, one trajectory per seat.

The rollout gives each episode its own agent and env and takes one trajectory back, while a
game has two seats. So two episodes share one game: episodes ``2k`` and ``2k + 1`` of the
same group (same level) meet in a :class:`_Match`; each plays one seat and returns that seat's
trajectory: only its own completions in the loss, and its own rewards (the game's win ``+1`` /
loss ``-1`` / draw ``0`` and its own invalid-action penalties). Seats alternate from pair to
pair, so with an even ``rollout.group_size`` every group trains both seats equally.

An episode without a partner (an odd group, or evaluation, where each level is its own group)
plays the env as registered, against its fixed opponent, exactly as the ``chain`` agent does:
evaluation on ``llmgym/TicTacToe-vs-minimax-v0`` thus measures the self-trained policy
against minimax.

The env must be one of llmgym's games against a fixed opponent (``llmgym/*-vs-*``): its
``self_play_game(seed, options)`` gives a PettingZoo AEC game that starts from the same level
the id would play. Each trajectory's ``info`` holds ``agent_seat`` and, after a game,
``outcome``; the trainer logs metrics per seat from ``agent_seat``.

A seat's turn reward is everything the game gives that seat between its move and its next turn,
so a move that lets the opponent win carries the loss, as in the single-agent envs.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass, field
from typing import Any, ClassVar

from llmgym.error import InvalidOptionError
from llmgym_train.agents.base import GenerationRequest
from llmgym_train.agents.base import Agent
from llmgym_train.agents.chain import ObservationRule, append_observation, play_chain
from llmgym_train.data import EndReason, Trajectory
from llmgym_train.envs import AsyncEnv
from llmgym_train.episode import EpisodeStart, TrajectoryBuilder
from llmgym_train.generation.base import Completion

SEATS = ("player_0", "player_1")


@dataclass
class _Match:
    """One game shared by the two episodes of a pair, and the signal that passes the turn."""

    members: dict[int, EpisodeStart] = field(default_factory=dict)
    game: Any = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    turn: asyncio.Condition = field(default_factory=asyncio.Condition)
    #: Set when a seat stops before the game ends (context full, turn limit): the other stops too.
    stopped: bool = False

    def partner_of(self, start: EpisodeStart) -> EpisodeStart | None:
        partner = self.members.get(start.episode_index ^ 1)
        if partner is None or (partner.group_id, partner.env_id) != (start.group_id, start.env_id):
            return None
        return partner


class SelfPlayAgent(Agent):
    """Plays one seat of a self-play game (see the module docstring)."""

    needs_local_env = True  # both seats drive one game object
    #: A partner-less episode plays the chain loop (:func:`~llmgym_train.agents.chain.play_chain`) with this rule.
    observation_rule: ClassVar[ObservationRule] = staticmethod(append_observation)

    #: Matches of the running rollouts: keyed by the rollout's observation queue (one per
    #: rollout, so concurrent rollouts never mix, and a rollout's matches go with its queue),
    #: then by pair number.
    _matches: ClassVar[weakref.WeakKeyDictionary[Any, dict[int, _Match]]] = weakref.WeakKeyDictionary()

    async def collect_trajectory(
        self,
        prompt: EpisodeStart,
        env: AsyncEnv,
        obs_queue: asyncio.Queue[GenerationRequest | None],
        act_queue: asyncio.Queue[Completion],
    ) -> Trajectory:
        pair = prompt.episode_index // 2
        match = self._matches.setdefault(obs_queue, {}).setdefault(pair, _Match())
        match.members[prompt.episode_index] = prompt
        # The rollout starts every episode at once, so after one yield all have joined their match.
        await asyncio.sleep(0)
        if match.partner_of(prompt) is None:
            del match.members[prompt.episode_index]  # a partner that comes later must not wait for us
            return await play_chain(self, prompt, env, obs_queue, act_queue)
        seat = SEATS[(prompt.episode_index + pair) % 2]
        if prompt.episode_index % 2 == 0:
            match.game = await asyncio.to_thread(_new_game, env, prompt)
            match.ready.set()
        await match.ready.wait()
        return await self._play_seat(match, seat, prompt, obs_queue, act_queue)

    async def _play_seat(
        self,
        match: _Match,
        seat: str,
        prompt: EpisodeStart,
        obs_queue: asyncio.Queue[GenerationRequest | None],
        act_queue: asyncio.Queue[Completion],
    ) -> Trajectory:
        game = match.game
        builder: TrajectoryBuilder | None = None
        pending: Completion | None = None  # this seat's last completion, rewarded at its next turn
        pending_text = ""
        end_reason: EndReason = "terminated"
        while True:
            async with match.turn:
                await match.turn.wait_for(lambda: match.stopped or game.agent_selection == seat)
            if match.stopped:
                builder = builder or self._builder(game, seat, prompt)
                if pending is not None:
                    reward_so_far = float(game._cumulative_rewards.get(seat, 0.0))
                    builder.add_generation(pending, pending_text, reward_so_far, {})
                end_reason = "truncated"
                break
            observation, reward, terminated, truncated, info = game.last()
            if pending is not None:
                assert builder is not None
                verdict = {**info, "success": info.get("outcome") == "win"}
                builder.add_generation(pending, pending_text, float(reward), verdict)
            if terminated or truncated:
                builder = builder or self._builder(game, seat, prompt)
                builder.info["outcome"] = info.get("outcome")
                # A seat can win without a turn of its own (the other forfeits first): still a success.
                builder.success = builder.success or info.get("outcome") == "win"
                end_reason = "terminated" if terminated else "truncated"
                await self._step(match, None)
                break
            builder = builder or self._builder(game, seat, prompt)
            stop_reason = self._next_turn(builder, pending, str(observation["text"]))
            if stop_reason is not None:
                end_reason = stop_reason
                await self._stop(match)
                break
            pending = await self.generate(builder, obs_queue, act_queue)
            pending_text = self.chat.action_text(pending.token_ids)
            await self._step(match, pending_text)
        return builder.build(end_reason)

    def _next_turn(
        self, builder: TrajectoryBuilder, pending: Completion | None, text: str
    ) -> EndReason | None:
        """Append the seat's new observation (after its first turn); why the seat must stop, if it must."""
        if pending is not None and not append_observation(self.chat, builder, pending, text):
            return "context_overflow"
        if self.config.max_turns is not None and len(builder.turns) >= self.config.max_turns:
            return "max_turns"
        if not builder.fits(0):
            return "context_overflow"
        return None

    def _builder(self, game: Any, seat: str, prompt: EpisodeStart) -> TrajectoryBuilder:
        system_prompt = game.unwrapped.system_prompt(seat)
        reset_info = {"system_prompt": system_prompt, "agent_seat": seat, "self_play": True}
        return self.new_builder(prompt, str(game.observe(seat)["text"]), reset_info)

    @staticmethod
    async def _step(match: _Match, action: str | None) -> None:
        match.game.step(action)
        async with match.turn:
            match.turn.notify_all()

    @staticmethod
    async def _stop(match: _Match) -> None:
        async with match.turn:
            match.stopped = True
            match.turn.notify_all()


def _new_game(env: AsyncEnv, prompt: EpisodeStart) -> Any:
    unwrapped = env.env.unwrapped
    make_game = getattr(unwrapped, "self_play_game", None)
    if make_game is None:
        raise InvalidOptionError(
            f"The self-play agent needs a two-player game env with self_play_game(), such as "
            f"llmgym/TicTacToe-vs-minimax-v0; got {prompt.env_id} ({type(unwrapped).__name__}). "
            "Use agent=chain for single-agent envs."
        )
    return make_game(seed=prompt.seed, options=prompt.reset_options)
