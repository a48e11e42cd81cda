"""Policy, value, KL and entropy terms as pure functions over padded token tensors ``(B, T)``.

Aggregation is where implementations quietly differ, so it is explicit here
(:data:`LossAggregation`), and its normalizer is passed in: the trainer gives the token or
sequence count of the *whole minibatch*, so that splitting a minibatch into gradient
accumulation steps does not change the gradient (batch 8 x accumulation 1 equals batch 1 x
accumulation 8, which a test checks on a real model).
"""

from __future__ import annotations

from typing import Literal, get_args

import torch

LossAggregation = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"]
KLEstimator = Literal["k1", "k3"]
LOSS_AGGREGATIONS: tuple[str, ...] = get_args(LossAggregation)
KL_ESTIMATORS: tuple[str, ...] = get_args(KLEstimator)


def aggregate(
    token_losses: torch.Tensor,
    mask: torch.Tensor,
    mode: LossAggregation,
    normalizer: float | None = None,
) -> torch.Tensor:
    """Reduce per-token losses ``(B, T)`` to a scalar.

    * ``token-mean``: sum over all generated tokens / number of generated tokens
      (every token weighs the same; long answers weigh more in total).
    * ``seq-mean-token-sum``: per-sequence sum, averaged over sequences (Dr.GRPO's choice
      when ``normalizer`` is a constant; no length bias from dividing by length).
    * ``seq-mean-token-mean``: per-sequence mean, averaged over sequences (original GRPO).

    Args:
        token_losses: ``(B, T)``.
        mask: ``(B, T)`` 1 on generated tokens.
        mode: one of :data:`LOSS_AGGREGATIONS`.
        normalizer: the divisor of the final sum: the number of generated tokens
            (``token-mean``) or sequences (``seq-mean-*``) of the whole minibatch this
            micro-batch belongs to. ``None`` uses this micro-batch's own count.
    """
    mask_f = mask.float()  # (B, T)
    masked = token_losses * mask_f  # (B, T)
    if mode == "token-mean":
        total = masked.sum()
        count = mask_f.sum().clamp(min=1.0)
    elif mode == "seq-mean-token-sum":
        total = masked.sum(dim=1).sum()  # sum over (B,)
        count = torch.tensor(float(token_losses.shape[0]))
    elif mode == "seq-mean-token-mean":
        per_sequence = masked.sum(dim=1) / mask_f.sum(dim=1).clamp(min=1.0)  # (B,)
        total = per_sequence.sum()
        count = torch.tensor(float(token_losses.shape[0]))
    else:
        raise ValueError(f"loss aggregation must be one of {LOSS_AGGREGATIONS}, got {mode!r}.")
    return total / (normalizer if normalizer is not None else count)


def clipped_surrogate(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    aggregation: LossAggregation = "token-mean",
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped surrogate per token, with an asymmetric clip range (clip-higher).

    ``ratio = exp(logprobs - old_logprobs)`` is clipped to ``[1 - clip_low, 1 + clip_high]``;
    the loss is ``-min(ratio * A, clip(ratio) * A)``. A larger ``clip_high`` lets unlikely
    tokens with positive advantage grow faster (DAPO's clip-higher), which keeps entropy up.

    Args:
        logprobs: ``(B, T)`` log-probabilities of the taken tokens under the current policy.
        old_logprobs: ``(B, T)`` the same under the policy that sampled them.
        advantages: ``(B, T)``.
        mask: ``(B, T)`` 1 on generated tokens.

    Returns:
        ``(loss, stats)``: the aggregated loss and ``clip_fraction`` / ``approx_kl`` (k3 of
        old vs. new policy) over the masked tokens.
    """
    log_ratio = logprobs - old_logprobs.detach()  # (B, T)
    token_losses, clipped = clipped_token_losses(log_ratio, advantages, clip_low, clip_high)  # (B, T) each
    loss = aggregate(token_losses, mask, aggregation, normalizer)
    return loss, clip_stats(log_ratio, clipped, mask)


def clipped_token_losses(
    log_ratio: torch.Tensor, advantages: torch.Tensor, clip_low: float, clip_high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token ``-min(ratio * A, clip(ratio) * A)`` and where the clipped term won.

    Args:
        log_ratio: ``(B, T)`` log of the ratio (current over anchor policy), with its gradient.
        advantages: ``(B, T)``; detached here.

    Returns:
        ``(token_losses, clipped)``: ``(B, T)`` losses and a ``(B, T)`` bool, True where the
        clip took effect (no gradient flows through those tokens).
    """
    ratio = torch.exp(log_ratio)  # (B, T)
    advantages = advantages.detach()  # (B, T)
    unclipped = ratio * advantages  # (B, T)
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages  # (B, T)
    return -torch.minimum(unclipped, clipped), clipped != unclipped


@torch.no_grad()
def clip_stats(log_ratio: torch.Tensor, clipped: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """``clip_fraction`` and ``approx_kl`` (k3 of anchor vs current policy) over the masked tokens ``(B, T)``."""
    mask_f = mask.float()  # (B, T)
    count = mask_f.sum().clamp(min=1.0)
    ratio = torch.exp(log_ratio)  # (B, T)
    return {
        "clip_fraction": float((clipped.float() * mask_f).sum() / count),
        "approx_kl": float(((ratio - 1 - log_ratio) * mask_f).sum() / count),
    }


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip_range: float | None = 0.2,
    aggregation: LossAggregation = "token-mean",
    normalizer: float | None = None,
) -> torch.Tensor:
    """Critic loss ``0.5 * (V - R)^2``, with PPO's value clipping when ``clip_range`` is set.

    Clipping keeps the new value within ``clip_range`` of the value at rollout time and takes
    the larger (pessimistic) of the clipped and unclipped errors.

    Args:
        values: ``(B, T)`` current critic values.
        old_values: ``(B, T)`` values at rollout time.
        returns: ``(B, T)`` targets.
        mask: ``(B, T)``.
    """
    returns = returns.detach()
    errors = (values - returns) ** 2  # (B, T)
    if clip_range is not None:
        old_values = old_values.detach()
        clipped_values = old_values + torch.clamp(values - old_values, -clip_range, clip_range)  # (B, T)
        errors = torch.maximum(errors, (clipped_values - returns) ** 2)
    return 0.5 * aggregate(errors, mask, aggregation, normalizer)


def kl_divergence(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: KLEstimator = "k3") -> torch.Tensor:
    """Per-token estimate of ``KL(policy || reference)`` from the sampled tokens' logprobs.

    * ``k1``: ``log p - log q``: unbiased, high variance, can be negative.
    * ``k3``: ``(q/p) - 1 - log(q/p)``: unbiased, always >= 0, low variance (Schulman's k3).

    Args:
        logprobs: ``(B, T)`` under the policy.
        ref_logprobs: ``(B, T)`` under the frozen reference.

    Returns:
        ``(B, T)``.
    """
    log_ratio = logprobs - ref_logprobs.detach()  # (B, T)  log p/q
    if estimator == "k1":
        return log_ratio
    if estimator == "k3":
        return torch.exp(-log_ratio) - 1.0 + log_ratio
    raise ValueError(f"KL estimator must be one of {KL_ESTIMATORS}, got {estimator!r}.")


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the next-token distribution at each position: ``(B, T, V)`` -> ``(B, T)``."""
    logp = torch.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    return -(logp.exp() * logp).sum(dim=-1)


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Log-probability of ``targets`` under ``logits``: ``(B, T, V)``, ``(B, T)`` -> ``(B, T)``.

    ``logits[:, t]`` must already be the prediction for ``targets[:, t]`` (shifted by the caller).
    """
    logp = torch.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
