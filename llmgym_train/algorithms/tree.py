"""Tree advantages: a node's value from the leaves below it; a branch's advantage is child minus parent.

A tree rollout plays one trunk from a level's start and, at chosen turns, branches several
continuations from an env snapshot. Its turns form a forest (one tree per group) whose nodes
are the branch points and the episode ends (leaves); the edge into a node is the *segment*
of turns played between its parent's branch point and it, played once and trained once.

Definitions (``gamma`` discounts per turn, not per token):

* ``G_n(l)``, the return of leaf ``l`` from node ``n`` above it: the discounted rewards of the
  turns on the path from ``n`` down to ``l``.
* ``V(n)``, the value of node ``n``: the mean of ``G_n(l)`` over the leaves ``l`` below ``n``
  (a leaf's value is 0: nothing follows the episode's last turn).
* ``Q(c)``, the value of the segment into node ``c``: its own discounted rewards plus
  ``gamma ** turns(c) * V(c)``; equal to the mean of ``G_p(l)`` over the leaves below ``c``,
  ``p`` its parent.
* The tree advantage of segment ``c``: ``Q(c) - V(p)``, divided by the std of ``G_p(l)`` over
  the leaves below ``p`` with ``normalize_std`` (the unbiased std, as :func:`group_normalized`).

How this departs from the textbook, and from Tree-GRPO:

* **Segments, not single turns.** The turns of a segment after its first have no sibling to
  compare with, so a per-turn ``child - parent`` would give them 0; every turn of a segment
  gets the segment's advantage instead, as GRPO gives every turn of an episode the episode's.
* **Leaf-weighted values.** ``V(p)`` is a mean over leaves, not over children, so a child
  with more leaves below it weighs more, and the leaf-weighted advantages of ``p``'s children
  sum to 0. A star (every leaf a child of the root) is GRPO's group exactly.
* **Mixing** with the episode-level group advantage (GiGPO-style, ``episode_weight``): the
  segment gets ``episode_weight`` times the root's normalized advantage of the mean return
  of the leaves below it, so a good branch of a bad subtree is still seen as below the group.
"""

from __future__ import annotations

import math

import torch

from llmgym_train.algorithms.advantages import EPS


def tree_advantages(
    parents: torch.Tensor,
    segment_rewards: torch.Tensor,
    segment_turns: torch.Tensor,
    gamma: float = 1.0,
    normalize_std: bool = True,
    episode_weight: float = 0.0,
    eps: float = EPS,
) -> torch.Tensor:
    """The advantage of the segment into each node of a forest (see the module docstring).

    Args:
        parents: ``(N,)`` long, the parent of each node, ``-1`` for a root; a parent comes
            before its children (``parents[n] < n``). Nodes without children are the leaves.
        segment_rewards: ``(N,)`` the discounted reward of the segment into each node,
            ``sum_k gamma**k * r_k`` over its turns (0 for a root).
        segment_turns: ``(N,)`` turns in that segment (0 for a root).
        gamma: discount per turn between a segment and the node below it.
        normalize_std: divide by the std of the returns below the parent (GRPO); ``False``
            only centres (Dr.GRPO).
        episode_weight: weight of the episode-level group advantage added to each segment.

    Returns:
        ``(N,)`` float32 advantages; 0 for roots.
    """
    count = len(parents)
    parent = [int(p) for p in parents.tolist()]  # (N,)
    if any(not -1 <= p < n for n, p in enumerate(parent)):
        raise ValueError(f"parents must list each node after its parent (-1 for roots); got {parent}.")
    rewards = [float(r) for r in segment_rewards.tolist()]  # (N,)
    discounts = [gamma ** int(t) for t in segment_turns.tolist()]  # (N,)
    returns_below = _returns_below(parent, rewards, discounts)  # node -> returns of its leaves from it
    values = [sum(r) / len(r) for r in returns_below]  # (N,) V(n)
    stds = [_unbiased_std(r) if normalize_std else 0.0 for r in returns_below]  # (N,)
    scale = (lambda n: stds[n] + eps) if normalize_std else (lambda n: 1.0)
    roots = list(range(count))  # (N,) the root of each node's tree
    for node in range(count):
        if parent[node] >= 0:
            roots[node] = roots[parent[node]]
    advantages = [0.0] * count
    for node in range(count):
        above = parent[node]
        if above < 0:
            continue
        segment_value = rewards[node] + discounts[node] * values[node]  # Q(c)
        advantages[node] = (segment_value - values[above]) / scale(above)
        if episode_weight:
            root = roots[node]
            from_root = _mean_from(root, node, parent, rewards, discounts, values)
            advantages[node] += episode_weight * (from_root - values[root]) / scale(root)
    return torch.tensor(advantages, dtype=torch.float32)


def tree_values(parents: torch.Tensor, segment_rewards: torch.Tensor, segment_turns: torch.Tensor,
                gamma: float = 1.0) -> torch.Tensor:
    """``(N,)`` ``V(n)``: the mean discounted return of the leaves below each node, from it (0 at leaves)."""
    parent = [int(p) for p in parents.tolist()]
    discounts = [gamma ** int(t) for t in segment_turns.tolist()]
    returns_below = _returns_below(parent, [float(r) for r in segment_rewards.tolist()], discounts)
    return torch.tensor([sum(r) / len(r) for r in returns_below], dtype=torch.float32)


def _returns_below(parent: list[int], rewards: list[float], discounts: list[float]) -> list[list[float]]:
    """For each node, ``G_n(l)`` of every leaf ``l`` below it (a leaf: ``[0.0]``), children in reverse order."""
    count = len(parent)
    has_child = [False] * count
    for p in parent:
        if p >= 0:
            has_child[p] = True
    below: list[list[float]] = [[0.0] if not has_child[n] else [] for n in range(count)]
    for node in reversed(range(count)):  # children come after their parent: finished before it
        above = parent[node]
        if above >= 0:
            below[above] += [rewards[node] + discounts[node] * g for g in below[node]]
    return below


def _mean_from(root: int, node: int, parent: list[int], rewards: list[float], discounts: list[float],
               values: list[float]) -> float:
    """The mean return from ``root`` of the leaves below ``node``: the path's rewards, then ``V(node)``."""
    total = values[node]
    while node != root:
        total = rewards[node] + discounts[node] * total
        node = parent[node]
    return total


def _unbiased_std(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
