"""Off-policy corrections, as pure functions over padded token tensors ``(B, T)``.

A sample is off-policy when the policy that sampled its tokens (the *behaviour* policy ``mu``)
is not the one the update starts from. Two causes meet in asynchronous RL: staleness (the
tokens were drawn by an older policy version while the trainer moved on) and engine mismatch
(the generator's dtype and kernels give other numbers than the trainer's, even for the same
weights).

**Decoupled PPO** (Hilton et al., 2022, "Batch size-invariance for policy optimization"; the
objective of AReaL's asynchronous trainer) separates the two roles ``old_logprobs`` plays in
PPO. The *proximal* policy ``pi_prox`` (the trainer's weights when the update began) anchors
the trust region; the behaviour policy only enters through an importance weight::

    r_t = pi_theta / pi_prox                    (clipped to [1 - clip_low, 1 + clip_high])
    w_t = min(pi_prox / mu, behaviour_cap)      (no gradient)
    L   = -agg_t( w_t * min(r_t * A_t, clip(r_t) * A_t) )

The clip keeps each step close to the current trainer state however stale ``mu`` is, and
``w_t`` moves the expectation from ``mu`` to ``pi_prox``. With ``mu == pi_prox`` it is PPO's
clipped surrogate exactly.

**Truncated importance sampling** (TIS; Yao et al., 2025, "Your efficient RL framework
secretly brings you off-policy RL training") is the weight alone: ``min(pi / mu, cap)``,
either per token or per sequence (one weight, the product of the token ratios, for every
token of a sequence).

Departures from the textbook: the weight is *truncated* at the cap, not masked to zero above
it (AReaL's option), so a token whose behaviour probability was tiny still counts, at the
cap; the truncation is done in log space (``exp(min(log w, log cap))``) so a long sequence's
product cannot overflow. Weights are 0 off the mask.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch

from llmgym_train.algorithms.losses import LossAggregation, aggregate, clip_stats, clipped_token_losses

ImportanceLevel = Literal["token", "sequence"]
IMPORTANCE_LEVELS: tuple[str, ...] = get_args(ImportanceLevel)


def truncated_importance_weights(
    target_logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    mask: torch.Tensor,
    cap: float,
    level: ImportanceLevel = "token",
) -> torch.Tensor:
    """Importance weights ``min(pi_target / mu, cap)`` of the sampled tokens, without gradient.

    Args:
        target_logprobs: ``(B, T)`` logprobs of the taken tokens under the policy the
            expectation is wanted for (the proximal policy, or the trainer's copy of the
            sampling weights).
        behaviour_logprobs: ``(B, T)`` the same under the policy that sampled them.
        mask: ``(B, T)`` 1 on generated tokens.
        cap: the truncation, ``> 0`` (``math.inf``: none).
        level: ``token`` (one weight per token) or ``sequence`` (the product of a row's token
            ratios, truncated once and given to each of its tokens).

    Returns:
        ``(B, T)`` weights, 0 where ``mask`` is 0.
    """
    if not cap > 0:
        raise ValueError(f"the importance weight cap must be > 0 (math.inf for none), got {cap!r}.")
    mask_f = mask.float()  # (B, T)
    log_weights = (target_logprobs.detach().float() - behaviour_logprobs.detach().float()) * mask_f  # (B, T)
    if level == "sequence":
        log_weights = log_weights.sum(dim=1, keepdim=True).expand_as(mask_f)  # (B, T): the row's log product
    elif level != "token":
        raise ValueError(f"importance level must be one of {IMPORTANCE_LEVELS}, got {level!r}.")
    return torch.exp(torch.clamp(log_weights, max=math.log(cap))) * mask_f  # (B, T)


def decoupled_surrogate(
    logprobs: torch.Tensor,
    proximal_logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    behaviour_cap: float = 2.0,
    level: ImportanceLevel = "token",
    aggregation: LossAggregation = "token-mean",
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Decoupled PPO's loss: the clipped surrogate against ``pi_prox``, weighted by ``min(pi_prox / mu, cap)``.

    Args:
        logprobs: ``(B, T)`` under the current policy (carries the gradient).
        proximal_logprobs: ``(B, T)`` under the proximal policy: the trainer's weights when
            this update began (what a synchronous trainer's ``old_logprobs`` are).
        behaviour_logprobs: ``(B, T)`` under the policy version(s) that sampled the tokens, as
            the generator reported them.
        advantages: ``(B, T)``.
        mask: ``(B, T)`` 1 on generated tokens.
        behaviour_cap: truncation of the behaviour weight (see
            :func:`truncated_importance_weights`); ``level`` as there.

    Returns:
        ``(loss, stats)``: the aggregated loss and ``clip_fraction``, ``approx_kl`` (proximal vs
        current), ``behaviour_weight_mean`` and ``behaviour_truncated_fraction`` over the
        masked tokens.
    """
    weights = truncated_importance_weights(proximal_logprobs, behaviour_logprobs, mask, behaviour_cap, level)  # (B, T)
    log_ratio = logprobs - proximal_logprobs.detach()  # (B, T)
    token_losses, clipped = clipped_token_losses(log_ratio, advantages, clip_low, clip_high)  # (B, T) each
    loss = aggregate(weights * token_losses, mask, aggregation, normalizer)
    stats = clip_stats(log_ratio, clipped, mask)
    with torch.no_grad():
        mask_f = mask.float()  # (B, T)
        count = mask_f.sum().clamp(min=1.0)
        untruncated = truncated_importance_weights(proximal_logprobs, behaviour_logprobs, mask, math.inf, level)
        stats["behaviour_weight_mean"] = float(weights.sum() / count)
        stats["behaviour_truncated_fraction"] = float(((untruncated > weights) & mask.bool()).float().sum() / count)
    return loss, stats
