"""The choice of advantage estimator: which of the pure functions turns a batch's rewards into advantages.

One place decides, per ``algo`` and ``credit``, which estimator of
:mod:`llmgym_train.algorithms.advantages` (or the tree's, computed earlier in
:func:`llmgym_train.tree.tree_samples`) fills a batch's ``advantages``; the trainer only calls it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from llmgym_train.algorithms.advantages import (
    broadcast_to_tokens,
    episode_normalized,
    gae,
    masked_whiten,
    reinforce_pp,
    step_grouped,
)

if TYPE_CHECKING:
    from llmgym_train.batching import Batch


def with_advantages(
    batch: Batch,
    algo: str,
    *,
    normalize_std: bool,
    gamma: float,
    lam: float,
    values: torch.Tensor | None = None,
    credit: str = "episode",
    step_weight: float = 1.0,
    episode_weight: float = 1.0,
) -> Batch:
    """``batch`` with ``advantages`` (and, for PPO, ``returns`` / ``old_values``) filled in.

    * ``grpo``: each sample's episode return normalized among the episodes of its group, on
      all its generated tokens; with ``credit="gigpo"`` that times ``episode_weight``, plus
      ``step_weight`` times the step advantage among turns from the same state (:func:`~llmgym_train.algorithms.step_grouped`);
      with ``credit="tree"`` the samples' own branch advantages (``Sample.advantage``), and
      with ``credit="lookahead"`` their choices' (:func:`~llmgym_train.data.choice_samples`).
    * ``reinforce_pp``: discounted token returns whitened over the batch.
    * ``ppo``: token-level GAE from ``values`` ``(B, T)``, advantages whitened over the batch.
    """
    mask = batch.loss_mask  # (B, T)
    if algo == "grpo":
        if credit in ("tree", "lookahead"):
            # Tree rollouts: each sample's branch advantage was computed over its whole tree
            # (llmgym_train.tree.tree_samples), before any sample was filtered out; lookahead:
            # each choice's reward minus the mean over its state's choices (data.choice_samples).
            assert batch.sample_advantages is not None, f"credit={credit!r} needs samples that carry their advantages"
            per_sample = batch.sample_advantages  # (B,)
        elif credit == "gigpo":
            per_sample = step_grouped(
                batch.episode_returns, batch.group_ids, batch.episode_ids, batch.step_returns, batch.state_ids,
                step_weight, normalize_std, episode_weight=episode_weight,
            )  # (B,)
        else:
            per_sample = episode_normalized(
                batch.episode_returns, batch.group_ids, batch.episode_ids, normalize_std=normalize_std
            )  # (B,)
        return replace(batch, advantages=broadcast_to_tokens(per_sample, mask))
    if algo == "reinforce_pp":
        return replace(batch, advantages=reinforce_pp(batch.token_rewards, mask, gamma))
    if algo == "ppo":
        assert values is not None, "PPO advantages need the critic's values"
        advantages, returns = gae(batch.token_rewards, values, mask, gamma, lam)  # (B, T) each
        return replace(batch, advantages=masked_whiten(advantages, mask), returns=returns, old_values=values * mask)
    raise ValueError(f"algo must be 'grpo', 'ppo' or 'reinforce_pp', got {algo!r}.")
