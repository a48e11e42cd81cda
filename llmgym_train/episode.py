"""One episode as it is played: where it starts, and the builder that grows its tokens into a :class:`Trajectory`.

:class:`EpisodeStart` says which env, level and group an episode plays;
:class:`TrajectoryBuilder` does the token bookkeeping every agent needs (prompt, generated
turns, observations, loss mask, behaviour logprobs, policy versions), so an agent's
``collect_trajectory`` reads as the episode's logic only. The finished episode is a
:class:`~llmgym_train.data.Trajectory`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmgym_train.data import EndReason, Trajectory, Turn
from llmgym_train.generation.base import Completion
from llmgym_train.staleness import per_token_versions


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

    def add_generation(
        self, completion: Completion, text: str, reward: float, info: dict[str, Any],
        choice_rewards: tuple[float, ...] | None = None, played_choice: int | None = None,
    ) -> None:
        """Append a turn's generated tokens (as sampled, decoded as ``text``) with the env's verdict on them.

        ``choice_rewards``: what each choice would have earned instead (:attr:`Turn.choice_rewards`),
        ``played_choice`` the index of the one played.
        """
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
                choice_rewards=choice_rewards,
                played_choice=played_choice,
                choice_logprobs=completion.choice_logprobs if choice_rewards is not None else None,
                tools_run=tuple(info.get("tools_run", ())),
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


__all__ = ["EpisodeStart", "TrajectoryBuilder"]
