"""The trainer's data model: one :class:`Trajectory` per episode, and training samples made from it.

A trajectory holds exactly the tokens the model saw and produced (``token_ids``), which of
them the model generated (``loss_mask``), the sampler's logprob of each generated token
(``behavior_logprobs``), and per-turn boundaries and rewards. Every per-token list has the
length of ``token_ids``, so the trainer turns them into tensors without bookkeeping.

Two sample layouts come from the same trajectories (:func:`make_samples`):

* ``"sequence"``: the whole episode is one sample; env tokens are masked out; each turn's
  reward sits at that turn's last generated token (what token-level GAE needs).
* ``"turn"``: one sample per turn: the task prompt, a bounded window of recent turns, and
  that turn's generation, with only that generation in the loss. Each sample carries its own
  turn's reward and its episode's return, so turn-level and episode-level advantages can
  both be computed. Dropped history is removed in whole (generation, next observation)
  units, so each window is itself a well-formed conversation.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from llmgym_train.algorithms.advantages import turn_returns
from llmgym_train.generation.base import FinishReason

SampleLayout = Literal["sequence", "turn"]
EndReason = Literal["terminated", "truncated", "context_overflow", "max_turns"]


@dataclass(frozen=True)
class Turn:
    """One model turn inside a trajectory.

    Attributes:
        observation_start: index in ``token_ids`` where the tokens that show this turn's
            observation begin (0 for the first turn: the prompt).
        start: index of the turn's first generated token.
        end: one past its last generated token (``end > start`` unless the model generated nothing).
        reward: the env's reward for this turn's action.
        action_is_valid: the env could parse and apply the action (``info["action_is_valid"]``).
        finish_reason: ``"stop"`` when the model ended its turn, ``"length"`` when cut at ``max_tokens``.
        state_key: the env's ``info["state_key"]`` of the state this turn acted on (``None``
            where the env gives none); turns with equal keys in one group share a step-level group.
        choice_rewards: with a lookahead (:attr:`AgentConfig.lookahead`), the reward each choice
            (in ``rollout.choices`` order) earned from the state this turn acted on, plus the
            discounted rewards of its greedy continuation (``lookahead_turns``); else ``None``.
        played_choice: with a lookahead, the index of the choice this turn played; else ``None``.
        choice_logprobs: with a lookahead, the log-probability of each choice under the
            distribution the played one was drawn from, where the generator reports it
            (:attr:`~llmgym_train.generation.Completion.choice_logprobs`); else ``None``.
        tools_run: the tools this turn's action called and that ran without error, in call order
            (the env's ``info["tools_run"]``; empty for envs without tools).
    """

    observation_start: int
    start: int
    end: int
    reward: float
    action_is_valid: bool
    finish_reason: FinishReason
    state_key: Any = None
    choice_rewards: tuple[float, ...] | None = None
    played_choice: int | None = None
    choice_logprobs: tuple[float, ...] | None = None
    tools_run: tuple[str, ...] = ()

    @property
    def num_generated(self) -> int:
        return self.end - self.start


@dataclass
class Trajectory:
    """One episode, token-exact.

    Attributes:
        token_ids: prompt + every turn's generated and observation tokens, as the model saw them.
        loss_mask: 1 on generated tokens (including the end-of-turn token the model produced), else 0.
        behavior_logprobs: the sampler's logprob of each generated token; 0.0 on env tokens.
        prompt_length: tokens of the first prompt (system + first observation + generation prompt).
        turns: the model's turns, in order; a turn whose action was never applied (context
            overflow) is not listed.
        success: the env's ``info["success"]`` at the end.
        end_reason: why the episode ended: the env ``terminated`` or ``truncated`` it, the
            next prompt would not fit the context (``context_overflow``), or the agent's
            ``max_turns`` was reached.
        group_id: episodes with the same ``group_id`` played the same level (GRPO groups).
        episode_index: position of the episode in its rollout.
        env_id: the env's registered id.
        seed: the reset seed of the level.
        info: the reset ``info`` (``level_id``, ``optimal_steps``, ...) without ``system_prompt``.
        messages: the conversation as text (system, user, assistant, ...), for logs and checks;
            the tokens above, not these texts, are what training uses.
        fresh_contexts: each turn was generated from its own context, ``token_ids[turn.observation_start
            : turn.start]`` (the ``markov`` agent), not from everything before it; only the ``turn``
            sample layout reproduces what the model saw.
        policy_versions: per token, the policy version that sampled it (``-1``,
            :data:`~llmgym_train.staleness.NOT_SAMPLED`, on tokens the model did not generate);
            ``None`` when the generator reported none (synchronous rollouts: every generated
            token comes from the one version the rollout ran with).
        parent_episode: tree rollouts (:mod:`llmgym_train.tree`): the episode this one branched
            from, whose first ``shared_turns`` turns it copied (``None``: a trunk or a chain).
        shared_turns: tree rollouts: leading turns played once, by an ancestor, and trained
            there; this episode's own turns start after them.
    """

    token_ids: list[int]
    loss_mask: list[int]
    behavior_logprobs: list[float]
    prompt_length: int
    turns: list[Turn] = field(default_factory=list)
    success: bool = False
    end_reason: EndReason = "terminated"
    group_id: int = 0
    episode_index: int = 0
    env_id: str = ""
    seed: int | None = None
    info: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, str]] = field(default_factory=list)
    fresh_contexts: bool = False
    policy_versions: list[int] | None = None
    parent_episode: int | None = None
    shared_turns: int = 0

    @property
    def turn_rewards(self) -> list[float]:
        return [turn.reward for turn in self.turns]

    @property
    def episode_return(self) -> float:
        """Undiscounted sum of the turn rewards."""
        return float(sum(self.turn_rewards))

    @property
    def num_generated_tokens(self) -> int:
        return sum(self.loss_mask)

    @property
    def truncated(self) -> bool:
        """The episode did not reach a terminal state (turn limit or context overflow)."""
        return self.end_reason != "terminated"

    @property
    def valid(self) -> bool:
        """Every turn parsed to a legal action and ended with the model's own end-of-turn."""
        return all(turn.action_is_valid and turn.finish_reason == "stop" for turn in self.turns)

    def token_rewards(self) -> list[float]:
        """Per-token rewards: each turn's reward at its last generated token, 0 elsewhere."""
        rewards = [0.0] * len(self.token_ids)
        for turn in self.turns:
            if turn.end > turn.start:
                rewards[turn.end - 1] += turn.reward
            elif turn.reward:
                # An empty generation still carries its reward, on the token before it.
                rewards[max(turn.start - 1, 0)] += turn.reward
        return rewards

    def check(self) -> None:
        """Assert the internal invariants (lengths, mask = turn spans); for tests and debugging."""
        length = len(self.token_ids)
        assert len(self.loss_mask) == length and len(self.behavior_logprobs) == length
        assert self.policy_versions is None or len(self.policy_versions) == length
        expected = [0] * length
        for turn in self.turns:
            assert turn.observation_start <= turn.start <= turn.end <= length
            expected[turn.start : turn.end] = [1] * turn.num_generated
        assert self.loss_mask == expected, "loss_mask must be 1 exactly on the turns' generated tokens"
        assert all(logprob == 0.0 for logprob, mask in zip(self.behavior_logprobs, expected) if not mask)


@dataclass(frozen=True)
class Sample:
    """One training sequence.

    Attributes:
        token_ids: the sequence.
        loss_mask: 1 where the loss applies (generated tokens of the turn(s) this sample trains).
        behavior_logprobs: sampler logprobs on generated tokens, 0.0 elsewhere.
        token_rewards: each trained turn's reward at its last generated token, 0 elsewhere.
        reward: the turn's reward (``turn`` layout) or the episode's return (``sequence`` layout).
        episode_return: undiscounted return of the whole episode.
        success: the episode's success.
        actions_valid: every trained turn parsed to a legal action.
        cut_off: some trained turn was cut at the token limit before its end-of-turn.
        truncated: the episode ended without reaching a terminal state.
        group_id: episodes on the same level share it (GRPO groups).
        episode_index: the trajectory this sample came from.
        turn_index: the turn this sample trains (``None`` for the ``sequence`` layout).
        num_turns: turns in the episode.
        state_key: the trained turn's :attr:`Turn.state_key` (``turn`` layout; ``None`` otherwise).
        step_return: the trained turn's discounted return-to-go (``turn`` layout; the episode's
            return for the ``sequence`` layout).
        advantage: set where the advantage comes with the sample (tree rollouts: its branch's,
            see :func:`llmgym_train.algorithms.tree_advantages`; lookahead: its choice's, see
            :func:`choice_samples`); ``None``: computed from the batch.
        choice_rewards: the trained turn's :attr:`Turn.choice_rewards` (``turn`` layout).
        choice_logprobs: the trained turn's :attr:`Turn.choice_logprobs` (``turn`` layout).
    """

    token_ids: list[int]
    loss_mask: list[int]
    behavior_logprobs: list[float]
    token_rewards: list[float]
    reward: float
    episode_return: float
    success: bool
    actions_valid: bool
    cut_off: bool
    truncated: bool
    group_id: int
    episode_index: int
    turn_index: int | None
    num_turns: int
    state_key: Any = None
    step_return: float = 0.0
    advantage: float | None = None
    choice_rewards: tuple[float, ...] | None = None
    choice_logprobs: tuple[float, ...] | None = None

    @property
    def valid(self) -> bool:
        """Not void: what :func:`~llmgym_train.algorithms.filters.void_turn_keep` keeps."""
        return self.actions_valid and not self.cut_off


def make_samples(
    trajectories: list[Trajectory],
    layout: SampleLayout = "sequence",
    history_turns: int | None = None,
    step_gamma: float = 1.0,
    choice_token_ids: Sequence[int] | None = None,
    choice_target: str = "reward",
    choices_trained: str = "all",
    choice_draws: int = 1,
    seed: int = 0,
) -> list[Sample]:
    """Training samples from ``trajectories`` in the chosen layout.

    Arguments:
        layout: ``"sequence"`` (one sample per episode) or ``"turn"`` (one per turn).
        history_turns: ``turn`` layout only: previous turns kept before the trained one
            (``None`` keeps all of them; 0 keeps just the task prompt). Trajectories with
            ``fresh_contexts`` ignore it: each turn's sample is exactly the context it was
            generated from.
        step_gamma: ``turn`` layout: the discount of each sample's ``step_return``.
        choice_token_ids: ``turn`` layout: the choices' tokens (``rollout.choices``). A turn with
            :attr:`Turn.choice_rewards` then gives one sample per choice instead of one (see
            :func:`choice_samples`).
        choice_target: what each choice is credited with (:func:`choice_samples`).
        choices_trained: every choice (``"all"``) or the sampled one alone (``"sampled"``).
        choice_draws: with ``"sampled"``, choices trained per turn: the played one and more drawn
            from its distribution (:func:`choice_samples`), by a generator seeded with ``seed``.
    """
    if layout == "sequence":
        fresh = [trajectory.env_id for trajectory in trajectories if trajectory.fresh_contexts]
        if fresh:
            raise ValueError(
                f"Episodes of {fresh[0]} were played with a fresh context per turn (the markov agent), so one "
                "sequence per episode is not what the model saw; use layout 'turn'."
            )
        return [_sequence_sample(trajectory) for trajectory in trajectories]
    if layout == "turn":
        if history_turns is not None and history_turns < 0:
            raise ValueError(f"history_turns must be >= 0 or None, got {history_turns}.")
        samples = [
            _turn_sample(trajectory, index, history_turns, step_return)
            for trajectory in trajectories
            for index, step_return in enumerate(turn_returns(trajectory.turn_rewards, step_gamma))
        ]
        if choice_token_ids is None:
            return samples
        rng = random.Random(seed)
        return [
            expanded for sample in samples
            for expanded in choice_samples(sample, choice_token_ids, choice_target, choices_trained, choice_draws, rng)
        ]
    raise ValueError(f"layout must be 'sequence' or 'turn', got {layout!r}.")


#: Rewards this close to a state's highest count as highest (``target="best"``): float rounding, not a worse move.
_TIE = 1e-9


def choice_samples(
    sample: Sample, choice_token_ids: Sequence[int], target: str = "reward", trained: str = "all",
    draws: int = 1, rng: random.Random | None = None,
) -> list[Sample]:
    """A one-token turn sample with :attr:`Turn.choice_rewards` as one sample per choice (else ``[sample]``).

    Sample ``k`` ends in choice ``k``'s token instead of the sampled one, its ``reward`` is
    what that choice earned, and its ``advantage`` its credit minus the mean credit over the
    choices: every choice of a visited state is credited, not only the one played (an all-action
    policy gradient; the rows differ in their last token only, so the update runs their context
    once). ``target``: the credit is the reward (``"reward"``) or 1 for the choices that earned the
    highest reward and 0 for the others (``"best"``). Minus the mean, the gradient on the choice
    logits is the advantage itself, whatever the policy: it never fades, so logits grow without
    bound. ``"greedy"`` gives the best choices ``1 / count`` each and subtracts nothing: the
    gradient is the cross-entropy's, credit minus probability, which vanishes once the policy
    picks uniformly among the best choices (a state whose choices all tie gets no credit).
    The sampled choice's behaviour logprob is kept on its own sample; the others have none
    (0.0), which an on-policy update never reads (it rescores every sample).

    ``trained="sampled"`` keeps the sampled choice's sample alone: GRPO's policy gradient on the
    action played, its credit minus the mean over the state's choices, the looked-ahead choices
    serving only as its baseline (a group of one branch per choice, as in a tree rollout).
    ``draws`` > 1 (``"sampled"``): also ``draws - 1`` choices drawn from :attr:`Sample.choice_logprobs`
    (:func:`_drawn_choices`), a tree rollout ``draws`` moves wide at the state.
    """
    if trained not in ("all", "sampled"):
        raise ValueError(f"trained must be 'all' or 'sampled', got {trained!r}.")
    if draws < 1 or (draws > 1 and trained != "sampled"):
        raise ValueError(f"draws must be 1, or more with trained='sampled'; got {draws} with {trained!r}.")
    rewards = sample.choice_rewards
    if rewards is None:
        return [sample]
    if len(rewards) != len(choice_token_ids) or sum(sample.loss_mask) != 1 or sample.loss_mask[-1] != 1:
        raise ValueError(
            f"Choice samples need a turn of one generated token, the last, and a reward per choice; got "
            f"{sum(sample.loss_mask)} generated tokens and {len(rewards)} rewards for {len(choice_token_ids)} choices."
        )
    if target in ("best", "greedy"):
        credits = [float(reward >= max(rewards) - _TIE) for reward in rewards]
    elif target == "reward":
        credits = list(rewards)
    else:
        raise ValueError(f"target must be 'reward', 'best' or 'greedy', got {target!r}.")
    if target == "greedy":  # the best choices share a credit of 1 (none if all tie), and nothing is subtracted
        share = 0.0 if all(credits) else 1.0 / sum(credits)
        credits, mean = [credit * share for credit in credits], 0.0
    else:
        mean = sum(credits) / len(credits)
    sampled = sample.token_ids[-1]
    expanded = []
    for token_id, reward, credit in zip(choice_token_ids, rewards, credits, strict=True):
        logprobs = sample.behavior_logprobs if token_id == sampled else [*sample.behavior_logprobs[:-1], 0.0]
        expanded.append(replace(
            sample, token_ids=[*sample.token_ids[:-1], token_id], behavior_logprobs=logprobs,
            token_rewards=[*sample.token_rewards[:-1], reward], reward=reward, advantage=credit - mean,
        ))
    if trained == "all":
        return expanded
    played = expanded[list(choice_token_ids).index(sampled)]
    return [played] if draws == 1 else [played, *_drawn_choices(sample, expanded, draws - 1, rng)]


def _drawn_choices(sample: Sample, expanded: list[Sample], count: int, rng: random.Random | None) -> list[Sample]:
    """``count`` of ``expanded`` drawn from :attr:`Sample.choice_logprobs`, each with its own behaviour logprob."""
    draws = count + 1
    distribution = sample.choice_logprobs
    if distribution is None or len(distribution) != len(expanded):
        raise ValueError(
            f"Drawing {draws} choices a turn needs the distribution the played one came from (Sample.choice_logprobs, "
            f"one per choice); got {distribution}. Its generator must report Completion.choice_logprobs."
        )
    assert rng is not None, "draws > 1 needs an rng"
    picks = rng.choices(range(len(expanded)), weights=[math.exp(logprob) for logprob in distribution], k=count)
    context_logprobs = sample.behavior_logprobs[:-1]
    return [replace(expanded[pick], behavior_logprobs=[*context_logprobs, distribution[pick]]) for pick in picks]


def _sequence_sample(trajectory: Trajectory) -> Sample:
    return Sample(
        token_ids=list(trajectory.token_ids),
        loss_mask=list(trajectory.loss_mask),
        behavior_logprobs=list(trajectory.behavior_logprobs),
        token_rewards=trajectory.token_rewards(),
        reward=trajectory.episode_return,
        episode_return=trajectory.episode_return,
        success=trajectory.success,
        actions_valid=all(turn.action_is_valid for turn in trajectory.turns),
        cut_off=any(turn.finish_reason == "length" for turn in trajectory.turns),
        truncated=trajectory.truncated,
        group_id=trajectory.group_id,
        episode_index=trajectory.episode_index,
        turn_index=None,
        num_turns=len(trajectory.turns),
        step_return=trajectory.episode_return,
    )


def _turn_sample(trajectory: Trajectory, index: int, history_turns: int | None, step_return: float) -> Sample:
    turns = trajectory.turns
    turn = turns[index]
    if trajectory.fresh_contexts:
        spans = [(turn.observation_start, turn.end)]
    else:
        first_kept = 0 if history_turns is None else max(0, index - history_turns)
        # Kept history: the prompt, then from the generation of the first kept turn onward
        # (each unit is a generation plus the observation that follows it).
        spans = [(0, trajectory.prompt_length)]
        spans.append((turns[first_kept].start if first_kept < index else turn.start, turn.end))
    token_ids: list[int] = []
    logprobs: list[float] = []
    positions: list[int] = []
    for start, end in spans:
        token_ids += trajectory.token_ids[start:end]
        logprobs += trajectory.behavior_logprobs[start:end]
        positions += range(start, end)
    loss_mask = [1 if turn.start <= position < turn.end else 0 for position in positions]
    logprobs = [value if mask else 0.0 for value, mask in zip(logprobs, loss_mask, strict=True)]
    token_rewards = [0.0] * len(token_ids)
    if token_ids:  # the turn's last generated token closes the sequence
        token_rewards[-1] = turn.reward
    return Sample(
        token_ids=token_ids,
        loss_mask=loss_mask,
        behavior_logprobs=logprobs,
        token_rewards=token_rewards,
        reward=turn.reward,
        episode_return=trajectory.episode_return,
        success=trajectory.success,
        actions_valid=turn.action_is_valid,
        cut_off=turn.finish_reason == "length",
        truncated=trajectory.truncated,
        group_id=trajectory.group_id,
        episode_index=trajectory.episode_index,
        turn_index=index,
        num_turns=len(turns),
        state_key=turn.state_key,
        step_return=step_return,
        choice_rewards=turn.choice_rewards,
        choice_logprobs=turn.choice_logprobs,
    )
