"""One policy update: scoring, the loss of each micro-batch, gradient accumulation, the optimizer step.

The loss of a minibatch is the sum of its micro-batches' losses, each normalized by the
*minibatch's* token (or sequence) count, so that the gradient does not depend on how the
minibatch is split for memory (a test checks batch 8 x accumulation 1 == batch 1 x
accumulation 8 on a real model).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from llmgym_train.algorithms import aggregate, clipped_surrogate, decoupled_surrogate, kl_divergence, value_loss
from llmgym_train.batching import Batch, token_budget_groups
from llmgym_train.config import LossConfig, OptimConfig
from llmgym_train.heap import release_freed_memory
from llmgym_train.policy import Policy, same_context_rows


def micro_batches(batch: Batch, size: int, max_tokens: int = 0) -> Iterator[Batch]:
    """``batch`` in consecutive chunks of at most ``size`` samples and ``max_tokens`` padded tokens (0: no token bound).

    See :func:`~llmgym_train.batching.token_budget_groups`: a chunk's rows times its longest
    row stays within ``max_tokens``, so a step's activation memory is bounded by the budget,
    not by how long episodes run.
    """
    lengths = batch.attention_mask.sum(dim=1).tolist()
    for rows in token_budget_groups(lengths, max_tokens, size):
        yield batch.select(torch.tensor(rows, dtype=torch.long))


def micro_batch_order(batch: Batch) -> torch.Tensor:
    """The order of ``batch``'s rows for cutting into micro-batches: groups together, longest first.

    Groups come longest first (by their longest row), each group's rows together, longest first,
    rows of one context together. Chunks of it carry little padding; the rows of a group share
    their prompt, which a micro-batch of them runs once (see :meth:`Policy._decode`); and rows
    that differ in their last token only (see :func:`~llmgym_train.policy.same_context_rows`)
    land in the same micro-batch, where the forward runs them once. Ordered by length alone,
    the groups of a single-turn task (whose prompts differ in length) interleave, and a
    micro-batch shares no more than the system prompt.
    """
    lengths = batch.attention_mask.sum(dim=1)
    _, context = same_context_rows(batch.input_ids, batch.attention_mask)
    groups, group = torch.unique(batch.group_ids, return_inverse=True)
    group_longest = torch.zeros(len(groups), dtype=lengths.dtype).scatter_reduce(
        0, group, lengths, reduce="amax")
    order = torch.arange(len(batch))
    # Stable sorts from the least significant key to the most.
    for key in (context, -lengths, group, -group_longest[group]):
        order = order[torch.argsort(key[order], stable=True)]
    return order


def normalizer(batch: Batch, aggregation: str) -> float:
    """The divisor that makes micro-batch losses add up to the minibatch's loss."""
    if aggregation == "token-mean":
        return float(max(batch.num_tokens, 1))
    return float(max(len(batch), 1))


@torch.no_grad()
def score_batch(
    policy: Policy, batch: Batch, micro_batch_size: int, *, values: bool, reference: bool, max_tokens: int = 0
) -> dict[str, torch.Tensor]:
    """Logprobs (and values, reference logprobs) of every sample under the current weights, ``(B, T)``."""
    width = batch.input_ids.shape[1]
    order = micro_batch_order(batch)
    pieces: dict[str, list[torch.Tensor]] = {"logprobs": [], "values": [], "ref_logprobs": []}
    for micro in micro_batches(batch.select(order), micro_batch_size, max_tokens):
        scored = policy.score(micro.input_ids, micro.attention_mask, positions=micro.loss_mask, values=values)
        pad = width - micro.input_ids.shape[1]
        pieces["logprobs"].append(torch.nn.functional.pad(scored["logprobs"].float(), (0, pad)))
        if values:
            pieces["values"].append(torch.nn.functional.pad(scored["values"].float(), (0, pad)))
        if reference:
            ref = policy.reference_logprobs(micro.input_ids, micro.attention_mask, micro.loss_mask).float()
            pieces["ref_logprobs"].append(torch.nn.functional.pad(ref, (0, pad)))
    restore = torch.argsort(order)
    return {name: torch.cat(parts)[restore] for name, parts in pieces.items() if parts}


def micro_batch_loss(
    policy: Policy, micro: Batch, loss: LossConfig, algo: str, divisor: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss of one micro-batch, already divided by the minibatch's ``divisor``."""
    scored = policy.score(
        micro.input_ids, micro.attention_mask, positions=micro.loss_mask, values=algo == "ppo", entropy=True,
        entropy_grad=loss.entropy_coef > 0,
    )
    mask = micro.loss_mask  # (B, T)
    assert micro.advantages is not None, "advantages must be computed before the update"
    # No old logprobs: the update is the first and only one on this data, so the policy it
    # starts from (the sampling one, as the trainer scores it, or the proximal one when
    # behaviour logprobs are given) is the current one and the ratio is exactly 1.
    old_logprobs = scored["logprobs"].detach() if micro.old_logprobs is None else micro.old_logprobs
    if micro.behaviour_logprobs is not None:  # stale samples: old_logprobs are the proximal policy's
        total, stats = decoupled_surrogate(
            scored["logprobs"], old_logprobs, micro.behaviour_logprobs, micro.advantages, mask,
            loss.clip_low, loss.clip_high, loss.behaviour_cap, loss.importance_level, loss.aggregation, divisor,
        )
    else:
        total, stats = clipped_surrogate(
            scored["logprobs"], old_logprobs, micro.advantages, mask,
            loss.clip_low, loss.clip_high, loss.aggregation, divisor,
        )
    stats["policy_loss"] = float(total.detach())
    if algo == "ppo":
        assert micro.returns is not None and micro.old_values is not None
        critic = value_loss(
            scored["values"], micro.old_values, micro.returns, mask,
            loss.value_clip or None, loss.aggregation, divisor,
        )
        total = total + loss.value_coef * critic
        stats["value_loss"] = float(critic.detach())
    if loss.kl_coef > 0:
        assert micro.ref_logprobs is not None, "the KL term needs reference logprobs"
        kl = aggregate(kl_divergence(scored["logprobs"], micro.ref_logprobs, loss.kl_estimator), mask, loss.aggregation, divisor)
        total = total + loss.kl_coef * kl
        stats["kl"] = float(kl.detach())
    entropy = aggregate(scored["entropy"], mask, loss.aggregation, divisor)
    if loss.entropy_coef > 0:
        total = total - loss.entropy_coef * entropy
    stats["entropy"] = float(entropy.detach())
    return total, stats


def accumulate_gradients(
    policy: Policy, minibatch: Batch, micro_batch_size: int, loss: LossConfig, algo: str,
    divisor: float | None = None, max_tokens: int = 0, release_memory: bool = False,
) -> dict[str, float]:
    """Backward the minibatch's loss in micro-batches (``micro_batch_size`` samples, ``max_tokens`` padded tokens); gradients add up in ``.grad``.

    Returns summed stats (each already weighted by its share of the minibatch) and ``loss``;
    a non-finite loss is reported as ``loss = nan`` and stops the accumulation early. ``entropy``
    is the mean over ``minibatch``'s own tokens (or rows), also under a larger batch's ``divisor``.
    ``divisor``: the loss normalizer when ``minibatch`` is part of a larger batch whose other
    samples carry no gradient (see :func:`with_signal`); default: the minibatch's own.
    ``release_memory``: after each backward, hand the heap's freed pages back to the kernel
    (:func:`~llmgym_train.heap.release_freed_memory`), so passes do not pile up retained memory.
    """
    divisor = divisor or normalizer(minibatch, loss.aggregation)
    totals: dict[str, float] = {}
    # The split does not change the gradient (see the module docstring), so cut it where rows
    # share prompts and lengths are alike: right padding costs as much compute as real tokens.
    for micro in micro_batches(minibatch.select(micro_batch_order(minibatch)), micro_batch_size, max_tokens):
        micro_loss, stats = micro_batch_loss(policy, micro, loss, algo, divisor)
        if not torch.isfinite(micro_loss):
            return {"loss": math.nan}
        micro_loss.backward()
        if release_memory:
            release_freed_memory()
        share = _share(micro, minibatch, loss.aggregation)
        for name, value in stats.items():
            # policy/value/kl/entropy come normalized by the minibatch divisor: they add up.
            weighted = value if name in ("policy_loss", "value_loss", "kl", "entropy") else value * share
            totals[name] = totals.get(name, 0.0) + weighted
        totals["loss"] = totals.get("loss", 0.0) + float(micro_loss.detach())
    if "entropy" in totals:  # a statistic of the rows scored here, whatever the loss's divisor
        totals["entropy"] *= divisor / normalizer(minibatch, loss.aggregation)
    return totals


#: Advantages smaller than this in magnitude are rounding left over from equal rewards, not signal.
NO_SIGNAL = 1e-6


def with_signal(batch: Batch) -> torch.Tensor:
    """Rows of ``batch`` with a nonzero advantage on some token: ``(K,)`` indices.

    In a single on-policy update without KL or entropy terms, a sample whose advantages are
    all zero adds nothing to the gradient (its ratio is 1, its surrogate 0): a group whose
    episodes all scored alike, a turn alone in its step group. Skipping it, with the full
    batch's divisor kept, leaves the gradient as it was and saves its forward and backward.
    """
    assert batch.advantages is not None
    return (batch.advantages.abs().amax(dim=1) >= NO_SIGNAL).nonzero().flatten()


def _share(micro: Batch, minibatch: Batch, aggregation: str) -> float:
    if aggregation == "token-mean":
        return micro.num_tokens / max(minibatch.num_tokens, 1)
    return len(micro) / max(len(minibatch), 1)


def optimizer_step(policy: Policy, optimizer: torch.optim.Optimizer, max_grad_norm: float) -> float | None:
    """Clip and apply the accumulated gradients; ``None`` (and no step) when they are not finite."""
    parameters = policy.trainable_parameters()
    if max_grad_norm > 0:
        norm = torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
    else:
        norm = torch.linalg.vector_norm(
            torch.stack([p.grad.norm() for p in parameters if p.grad is not None])
        )
    if not torch.isfinite(norm):
        optimizer.zero_grad(set_to_none=True)
        return None
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(norm)


def scheduled_lr(optim: OptimConfig, progress: float, step: int = 0) -> float:
    """The learning rate of training step ``step`` (0-based) at ``progress`` (0 at the run's start, 1 at its end).

    ``linear`` and ``cosine`` go from ``optim.lr`` to ``optim.lr * optim.lr_final``; a late,
    large step on a policy that has become near-deterministic can undo what it learnt, and a
    smaller one there cannot. The first ``optim.warmup_steps`` steps take ``(step + 1) / warmup_steps`` of it.
    """
    progress = min(max(progress, 0.0), 1.0)
    warmup = min(1.0, (step + 1) / optim.warmup_steps) if optim.warmup_steps else 1.0
    if optim.lr_schedule == "linear":
        fraction = 1.0 - progress
    elif optim.lr_schedule == "cosine":
        fraction = 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        return optim.lr * warmup
    return optim.lr * warmup * (optim.lr_final + (1.0 - optim.lr_final) * fraction)


@dataclass
class EpochsResult:
    """What :func:`run_epochs` did: mean stats over applied updates, and how many it applied or skipped."""

    means: dict[str, float]
    updates: int
    non_finite: bool


def run_epochs(
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    *,
    optim: OptimConfig,
    loss: LossConfig,
    algo: str,
    generator: torch.Generator,
    divisor: float | None = None,
    max_tokens: int = 0,
    release_memory: bool = False,
) -> EpochsResult:
    """``optim.ppo_epochs`` passes over ``batch`` in shuffled minibatches, one optimizer step each.

    A minibatch whose loss or gradient is not finite is skipped (its gradients dropped) and
    reported through ``non_finite``; the others still update. ``generator`` draws each epoch's
    order, so a seeded run shuffles the same way after a resume.
    """
    size = optim.minibatch_size or max(len(batch), 1)
    totals: dict[str, float] = {}
    updates, non_finite = 0, False
    for _ in range(optim.ppo_epochs):
        order = torch.randperm(len(batch), generator=generator)
        for start in range(0, len(batch), size):
            minibatch = batch.select(order[start : start + size])
            stats = accumulate_gradients(
                policy, minibatch, optim.micro_batch_size, loss, algo, divisor, max_tokens=max_tokens,
                release_memory=release_memory,
            )
            norm = optimizer_step(policy, optimizer, optim.max_grad_norm) if math.isfinite(stats["loss"]) else None
            if norm is None:
                optimizer.zero_grad(set_to_none=True)
                non_finite = True
                continue
            updates += 1
            stats["grad_norm"] = norm
            for name, value in stats.items():
                totals[name] = totals.get(name, 0.0) + value
    means = {name: value / max(updates, 1) for name, value in totals.items()}
    return EpochsResult(means, updates, non_finite)
