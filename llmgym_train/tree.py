"""Tree rollouts: a group's episodes branch from env snapshots of a trunk, and each branch is trained once.

A group of ``budget`` episodes plays one level. Its first episode (the trunk) starts from the
reset; at each of ``branch_turns`` an episode that still has more than one episode's worth of
budget below it takes a snapshot (the env's ``get_state()`` and the conversation's tokens so
far) and hands it to up to ``branches - 1`` new episodes, which restore it into their own env
(``set_state``) and play on from there. :func:`plan_tree` splits the budget top-down, as evenly
as it goes, so every group plays exactly ``budget`` episodes; a branch point its episode never
reaches (the episode ended before) hands its children the snapshot that episode itself started
from, so they become its siblings.

Every episode's :class:`~llmgym_train.data.Trajectory` is the whole conversation of its leaf,
token-exact (copied prefix tokens are the trunk's own, never re-tokenized), with
``parent_episode`` and ``shared_turns`` saying which leading turns it copied. Those turns are
trained once, in the episode that played them: :func:`tree_samples` makes a sample per
*segment* (the turns between two branch points; ``sequence`` layout: the conversation up to
the segment's end, loss only on the segment) or per own turn (``turn`` layout, which the
``markov`` agent needs), each with its segment's advantage from
:func:`~llmgym_train.algorithms.tree_advantages`, computed over the whole tree before any
sample is filtered.

Agents: those that play ``chain``'s loop (``chain``, ``markov`` and subclasses that keep its
``collect_trajectory``); the loop here is that one with a snapshot hook before each turn.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import torch

from llmgym.error import InvalidOptionError
from llmgym_train.agents import Agent, GenerationRequest, get_agent
from llmgym_train.agents.chain import play_turns, plays_chain
from llmgym_train.algorithms.tree import tree_advantages
from llmgym_train.data import Sample, SampleLayout, Trajectory, make_samples
from llmgym_train.episode import EpisodeStart, TrajectoryBuilder
from llmgym_train.generation.base import Completion


class TreeShape(Protocol):
    """Where and how wide trees branch (:class:`llmgym_train.config.TreeConfig` fits)."""

    branch_turns: list[int]
    branches: int


@dataclass(frozen=True)
class TreeSlot:
    """Episode ``index`` of a group's tree: it copies the first ``branch_turn`` turns of episode ``parent``."""

    index: int
    parent: int | None
    branch_turn: int


def check_tree_agent(name: str) -> None:
    """Raise :class:`InvalidOptionError` unless agent ``name`` plays ``chain``'s loop (what tree rollouts replay)."""
    from llmgym_train.agents import agent_names

    if plays_chain(get_agent(name)):
        return
    fits = [agent for agent in agent_names() if plays_chain(get_agent(agent))]
    raise InvalidOptionError(
        f"Tree rollouts replay the chain loop (observation -> completion -> env step) from env snapshots; "
        f"agent {name!r} plays an episode its own way. Use one of: {', '.join(fits)}, or drop "
        "rollout.tree.branch_turns."
    )


def plan_tree(budget: int, branch_turns: Sequence[int], branches: int) -> list[TreeSlot]:
    """The episodes of one tree of ``budget`` leaves: slot 0 is the trunk, later slots branch off earlier ones.

    At each branch turn, in order, every slot whose share of the budget is ``b > 1`` splits it
    among ``min(branches, b)`` continuations (itself and new slots), as evenly as it goes, the
    larger shares first. Raises :class:`InvalidOptionError` when ``budget`` leaves do not fit.
    """
    most = branches ** len(branch_turns)
    if not 1 <= budget <= most:
        raise InvalidOptionError(
            f"A tree with branch_turns={list(branch_turns)} and {branches} branches has 1 to {most} episodes; got a "
            f"budget of {budget}. Lower the budget or add branches / branch turns."
        )
    slots = [TreeSlot(0, None, 0)]
    shares = [budget]
    for turn in branch_turns:
        for slot in range(len(slots)):  # the slots that exist before this branch turn
            share = shares[slot]
            count = min(branches, share)
            parts = [share // count + (1 if part < share % count else 0) for part in range(count)]
            shares[slot] = parts[0]
            for part in parts[1:]:
                slots.append(TreeSlot(len(slots), slot, turn))
                shares.append(part)
    assert sum(shares) == budget and all(share == 1 for share in shares)
    return slots


@dataclass(frozen=True)
class _Fork:
    """A branch point: the env's snapshot and the conversation of ``episode`` after ``turns`` turns."""

    env_state: Any
    builder: TrajectoryBuilder
    episode: int
    turns: int

    def builder_for(self, start: EpisodeStart) -> TrajectoryBuilder:
        """A conversation of its own for the episode ``start``, continuing from this branch point."""
        builder = copy.deepcopy(self.builder)
        builder.start = start
        return builder


class _TreeGroup:
    """One group's tree while it is played: who waits for whose snapshot, and at which turn."""

    def __init__(self, slots: list[TreeSlot], starts: list[EpisodeStart]) -> None:
        self.slots = slots
        self.starts = starts
        loop = asyncio.get_running_loop()
        self.forks: dict[int, asyncio.Future[_Fork]] = {slot.index: loop.create_future() for slot in slots[1:]}
        #: slot -> branch turn -> the slots that branch from it there
        self.children: dict[int, dict[int, list[int]]] = {slot.index: {} for slot in slots}
        for slot in slots[1:]:
            assert slot.parent is not None
            self.children[slot.parent].setdefault(slot.branch_turn, []).append(slot.index)
        #: the branch point each slot started from (the trunk's: its reset)
        self.origins: dict[int, _Fork] = {}

    async def play(
        self,
        slot: int,
        agent: Agent,
        env: Any,
        obs_queue: asyncio.Queue[GenerationRequest | None],
        act_queue: asyncio.Queue[Completion],
    ) -> Trajectory:
        start = self.starts[slot]
        failed = True
        try:
            if self.slots[slot].parent is None:
                observation, info = await env.reset(seed=start.seed, options=start.reset_options)
                builder = agent.new_builder(start, observation, info)
                if self.children[slot]:
                    self.origins[slot] = _Fork(await env.get_state(), copy.deepcopy(builder), start.episode_index, 0)
                link: tuple[int | None, int] = (None, 0)
            else:
                fork = await self.forks[slot]
                await env.set_state(fork.env_state)
                builder = fork.builder_for(start)
                self.origins[slot] = fork
                link = (fork.episode, fork.turns)
            trajectory = await play_turns(
                agent, builder, env, obs_queue, act_queue, before_turn=lambda grown: self._hand_out(slot, grown, env)
            )
            failed = False
        finally:
            self._release(slot, failed)
        trajectory.parent_episode, trajectory.shared_turns = link
        return trajectory

    async def _hand_out(self, slot: int, builder: TrajectoryBuilder, env: Any) -> None:
        turns = len(builder.turns)
        waiting = self.children[slot].pop(turns, [])
        if not waiting:
            return
        origin = self.origins.get(slot)
        if origin is not None and origin.turns == turns and origin.episode == self.starts[slot].episode_index:
            fork = origin  # the trunk's reset, already taken
        else:
            fork = _Fork(await env.get_state(), copy.deepcopy(builder), self.starts[slot].episode_index, turns)
        for child in waiting:
            self.forks[child].set_result(fork)

    def _release(self, slot: int, failed: bool) -> None:
        """The slot ended: slots still waiting for its later branch points start where it started."""
        for waiting in self.children[slot].values():
            for child in waiting:
                future = self.forks[child]
                if future.done():
                    continue
                if failed or slot not in self.origins:
                    future.cancel()
                else:
                    future.set_result(self.origins[slot])
        self.children[slot] = {}


class TreeRollout:
    """The trees of one rollout: each group's episodes, in order, are the slots of :func:`plan_tree`.

    Arguments:
        shape: branch turns and branches; a group's budget is its number of episodes.
        episodes: the rollout's episodes; a group's members share ``group_id`` and level.
    """

    def __init__(self, shape: TreeShape, episodes: Sequence[EpisodeStart]) -> None:
        members: dict[int, list[EpisodeStart]] = {}
        for start in episodes:
            members.setdefault(start.group_id, []).append(start)
        self._plans = {group: plan_tree(len(starts), shape.branch_turns, shape.branches) for group, starts in members.items()}
        self._members = members
        self._groups: dict[int, _TreeGroup] = {}
        self._slots = {start.episode_index: (start.group_id, slot) for starts in members.values()
                       for slot, start in enumerate(starts)}

    async def play(
        self,
        agent: Agent,
        start: EpisodeStart,
        env: Any,
        obs_queue: asyncio.Queue[GenerationRequest | None],
        act_queue: asyncio.Queue[Completion],
    ) -> Trajectory:
        """Play episode ``start`` as its slot of its group's tree (called once per episode, concurrently)."""
        if not plays_chain(type(agent)):
            raise InvalidOptionError(
                f"Tree rollouts replay the chain loop from env snapshots; {type(agent).__name__} plays an episode its "
                "own way. Use the chain or markov agent (or an agent whose collect_trajectory is "
                "llmgym_train.agents.chain.play_chain)."
            )
        group_id, slot = self._slots[start.episode_index]
        if group_id not in self._groups:  # built inside the running loop (it holds futures)
            self._groups[group_id] = _TreeGroup(self._plans[group_id], self._members[group_id])
        return await self._groups[group_id].play(slot, agent, env, obs_queue, act_queue)


# ---------------------------------------------------------------------- training samples
@dataclass(frozen=True)
class _Segment:
    """Turns ``[first, end)`` of ``trajectory``, the edge into tree node ``node``."""

    trajectory: Trajectory
    first: int
    end: int
    node: int


def tree_samples(
    trajectories: Sequence[Trajectory],
    layout: SampleLayout = "sequence",
    history_turns: int | None = None,
    *,
    gamma: float = 1.0,
    normalize_std: bool = True,
    episode_weight: float = 0.0,
) -> list[Sample]:
    """Samples of tree rollouts, each played turn in exactly one, each with its segment's advantage.

    Arguments:
        layout: ``sequence``: one sample per segment (the conversation up to the segment's
            end, loss on the segment's turns only); ``turn``: one per own turn (as
            :func:`~llmgym_train.data.make_samples`).
        gamma, normalize_std, episode_weight: see :func:`~llmgym_train.algorithms.tree_advantages`.
    """
    if layout == "sequence" and any(t.fresh_contexts for t in trajectories):
        raise ValueError(
            "Episodes played with a fresh context per turn (the markov agent) give one sample per turn; use layout 'turn'."
        )
    parents, rewards, turns, segments = tree_forest(trajectories, gamma)
    advantages = tree_advantages(
        torch.tensor(parents, dtype=torch.long), torch.tensor(rewards), torch.tensor(turns),
        gamma=gamma, normalize_std=normalize_std, episode_weight=episode_weight,
    ).tolist()  # (N,)
    if layout == "sequence":
        return [_segment_sample(s, advantages[s.node]) for s in segments if s.end > s.first]
    node_of = {(s.trajectory.episode_index, turn): s.node for s in segments for turn in range(s.first, s.end)}
    return [
        replace(sample, advantage=advantages[node_of[(sample.episode_index, sample.turn_index)]])
        for sample in make_samples(list(trajectories), "turn", history_turns, step_gamma=gamma)
        if (sample.episode_index, sample.turn_index) in node_of
    ]


def tree_forest(
    trajectories: Sequence[Trajectory], gamma: float = 1.0
) -> tuple[list[int], list[float], list[int], list[_Segment]]:
    """The rollout's trees as :func:`~llmgym_train.algorithms.tree_advantages` takes them, and their segments.

    Nodes: one root per tree (the level's reset), each branch point, each episode's end. A node
    on episode ``e``'s path at turn ``t <= shared_turns(e)`` is its parent episode's.

    Returns:
        ``(parents, segment_rewards, segment_turns, segments)``: per node, and every
        episode's own turns split at the branch points on them.
    """
    episodes = {t.episode_index: t for t in trajectories}

    def owner(episode: int, turn: int) -> tuple[int, int]:
        while episodes[episode].parent_episode is not None and turn <= episodes[episode].shared_turns:
            episode = episodes[episode].parent_episode  # type: ignore[assignment]
        return episode, turn

    for trajectory in trajectories:
        if trajectory.parent_episode is not None and trajectory.parent_episode not in episodes:
            raise ValueError(
                f"Episode {trajectory.episode_index} branched from episode {trajectory.parent_episode}, which is not "
                "among the trajectories; make tree samples from a rollout's whole trees, before filtering."
            )
    splits: dict[int, set[int]] = {t.episode_index: set() for t in trajectories}
    for trajectory in trajectories:
        if trajectory.parent_episode is not None:
            episode, turn = owner(trajectory.episode_index, trajectory.shared_turns)
            splits[episode].add(turn)
    parents: list[int] = []
    rewards: list[float] = []
    turns: list[int] = []
    segments: list[_Segment] = []
    nodes: dict[tuple[int, int], int] = {}

    def add_node(parent: int, reward: float, count: int) -> int:
        parents.append(parent)
        rewards.append(reward)
        turns.append(count)
        return len(parents) - 1

    for trajectory in _parents_first(trajectories):
        index, own = trajectory.episode_index, trajectory.shared_turns
        if trajectory.parent_episode is None:
            nodes[(index, 0)] = add_node(-1, 0.0, 0)
        node = nodes[owner(index, own)]
        ends = sorted(turn for turn in splits[index] if turn > own)
        if ends and ends[-1] >= len(trajectory.turns):
            raise ValueError(f"Episode {index} has {len(trajectory.turns)} turns but a branch after turn {ends[-1]}.")
        for first, end in zip([own, *ends], [*ends, len(trajectory.turns)], strict=True):
            reward = sum(gamma ** (k - first) * trajectory.turns[k].reward for k in range(first, end))
            child = add_node(node, reward, end - first)
            segments.append(_Segment(trajectory, first, end, child))
            if end < len(trajectory.turns):
                nodes[(index, end)] = child
            node = child
    return parents, rewards, turns, segments


def _parents_first(trajectories: Sequence[Trajectory]) -> list[Trajectory]:
    """``trajectories`` ordered so that each comes after the episode it branched from."""
    ordered: list[Trajectory] = []
    placed: set[int] = set()
    remaining = list(trajectories)
    while remaining:
        ready = [t for t in remaining if t.parent_episode is None or t.parent_episode in placed]
        if not ready:
            raise ValueError("The trajectories' parent_episode links form a cycle.")
        ordered += ready
        placed.update(t.episode_index for t in ready)
        remaining = [t for t in remaining if t.episode_index not in placed]
    return ordered


def _segment_sample(segment: _Segment, advantage: float) -> Sample:
    """The conversation up to the segment's last turn; loss, logprobs and rewards on the segment's turns only."""
    trajectory, turns = segment.trajectory, segment.trajectory.turns[segment.first : segment.end]
    length = turns[-1].end
    loss_mask = [0] * length
    token_rewards = [0.0] * length
    for turn in turns:
        loss_mask[turn.start : turn.end] = [1] * turn.num_generated
        token_rewards[max(turn.end - 1, 0)] += turn.reward
    logprobs = [value if mask else 0.0 for value, mask in zip(trajectory.behavior_logprobs[:length], loss_mask, strict=True)]
    return Sample(
        token_ids=list(trajectory.token_ids[:length]),
        loss_mask=loss_mask,
        behavior_logprobs=logprobs,
        token_rewards=token_rewards,
        reward=sum(turn.reward for turn in turns),
        episode_return=trajectory.episode_return,
        success=trajectory.success,
        actions_valid=all(turn.action_is_valid for turn in turns),
        cut_off=any(turn.finish_reason == "length" for turn in turns),
        truncated=trajectory.truncated,
        group_id=trajectory.group_id,
        episode_index=trajectory.episode_index,
        turn_index=segment.first,
        num_turns=len(trajectory.turns),
        advantage=advantage,
    )


def played_work(trajectories: Sequence[Trajectory], seconds: float) -> dict[str, float]:
    """Env steps and generated tokens a rollout really played: turns copied from a branch point count once.

    ``tokens/generated`` and ``tokens/generated_per_s`` replace the rollout's own figures,
    which count a tree's shared turns in every episode that copied them.
    """
    own = [turn for t in trajectories for turn in t.turns[t.shared_turns :]]
    generated = float(sum(turn.num_generated for turn in own))
    return {
        "env_steps": float(len(own)),
        "tokens/generated": generated,
        "tokens/generated_per_s": generated / seconds if seconds > 0 else 0.0,
        "tree/shared_turns_mean": sum(t.shared_turns for t in trajectories) / max(len(trajectories), 1),
    }


__all__ = ["TreeRollout", "TreeSlot", "check_tree_agent", "plan_tree", "played_work", "tree_forest", "tree_samples"]
