"""Sample filters applied between rollout and update; each returns a keep mask and is logged.

* **Group-variance filtering** (StarPO-S): groups whose members all got (nearly) the same
  reward carry no learning signal under group-normalized advantages and mostly add noise;
  keeping only the top fraction of groups by reward standard deviation trains on the
  informative ones.
* **Void-turn filtering**: a turn with no parsable action, or a generation cut off by the
  token limit before it ended, teaches the format only by accident; dropping such samples
  keeps the update on real decisions. Their reward (an invalid-action penalty) is still
  counted in the rollout metrics.
"""

from __future__ import annotations

import math

import torch


def group_variance_keep(group_rewards: torch.Tensor, keep_fraction: float) -> torch.Tensor:
    """Keep the ``ceil(keep_fraction * G)`` groups with the largest reward std.

    Args:
        group_rewards: ``(G, N)`` reward of member ``n`` of group ``g``.
        keep_fraction: in ``(0, 1]``; 1 keeps every group.

    Returns:
        ``(G,)`` bool mask. Ties are broken by group index (stable), so the result is
        deterministic.
    """
    if not 0.0 < keep_fraction <= 1.0:
        raise ValueError(f"keep_fraction must be in (0, 1], got {keep_fraction}.")
    n_groups = group_rewards.shape[0]
    keep = torch.zeros(n_groups, dtype=torch.bool, device=group_rewards.device)  # (G,)
    if n_groups == 0:
        return keep
    stds = group_rewards.float().std(dim=1, unbiased=False)  # (G,)
    n_keep = min(n_groups, math.ceil(keep_fraction * n_groups - 1e-9))
    order = torch.sort(stds, descending=True, stable=True).indices  # (G,)
    keep[order[:n_keep]] = True
    return keep


def void_turn_keep(action_is_valid: torch.Tensor, cut_off: torch.Tensor) -> torch.Tensor:
    """Keep the turns that produced a parsable action and ended on their own.

    Args:
        action_is_valid: ``(N,)`` bool, the env parsed an action from the turn.
        cut_off: ``(N,)`` bool, the generation hit the token limit without an end-of-turn token.

    Returns:
        ``(N,)`` bool keep mask.
    """
    return action_is_valid.bool() & ~cut_off.bool()
