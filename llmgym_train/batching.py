"""Training samples -> padded tensors, and how a batch is cut into micro-batches.

Everything here is a plain function of samples and tensors, so the trainer only calls it. The
advantages of a batch are :func:`llmgym_train.algorithms.estimator.with_advantages`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import torch

from llmgym_train.data import Sample


@dataclass
class Batch:
    """Right-padded tensors of ``B`` samples, all ``(B, T)`` unless noted.

    ``loss_mask[:, t]`` is 1 where token ``t`` was generated; ``old_logprobs``,
    ``advantages``, ``returns`` and ``old_values`` are aligned with the same positions.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    old_logprobs: torch.Tensor | None  # None: the update is on-policy, the loss uses its own logprobs
    token_rewards: torch.Tensor
    rewards: torch.Tensor  # (B,) the sample's reward (episode return or turn reward)
    group_ids: torch.Tensor  # (B,)
    episode_ids: torch.Tensor  # (B,) the sample's episode (turn samples of one episode share it)
    episode_returns: torch.Tensor  # (B,)
    step_returns: torch.Tensor  # (B,) the trained turn's discounted return-to-go
    state_ids: torch.Tensor  # (B,) the trained turn's state, numbered within the batch; -1: unknown
    sample_advantages: torch.Tensor | None = None  # (B,) advantages that came with the samples (tree rollouts)
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    old_values: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    #: The sampler's logprobs when they differ from ``old_logprobs`` (asynchronous training: the
    #: tokens' policy versions; ``old_logprobs`` then hold the proximal policy's); ``None``: on-policy.
    behaviour_logprobs: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def select(self, rows: torch.Tensor) -> Batch:
        """The samples at ``rows`` (a 1-D index tensor), trimmed to their longest sequence."""
        width = int(self.attention_mask[rows].sum(dim=1).max().item()) if len(rows) else 1
        picked = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if value is None:
                picked[item.name] = None
            elif value.dim() == 2:
                picked[item.name] = value[rows, :width]
            else:
                picked[item.name] = value[rows]
        return Batch(**picked)

    @property
    def num_tokens(self) -> int:
        return int(self.loss_mask.sum().item())


def collate(samples: Sequence[Sample], pad_token_id: int, group_offsets: Sequence[int] | None = None) -> Batch:
    """Right-pad ``samples`` into a :class:`Batch`.

    ``group_offsets[i]`` is added to sample ``i``'s ``group_id`` so that groups of different
    envs in a mixture never share an id.
    """
    width = max(len(sample.token_ids) for sample in samples)
    count = len(samples)
    input_ids = torch.full((count, width), pad_token_id, dtype=torch.long)  # (B, T)
    attention_mask = torch.zeros((count, width), dtype=torch.long)  # (B, T)
    loss_mask = torch.zeros((count, width), dtype=torch.float32)  # (B, T)
    old_logprobs = torch.zeros((count, width), dtype=torch.float32)  # (B, T)
    token_rewards = torch.zeros((count, width), dtype=torch.float32)  # (B, T)
    for row, sample in enumerate(samples):
        length = len(sample.token_ids)
        input_ids[row, :length] = torch.tensor(sample.token_ids, dtype=torch.long)
        attention_mask[row, :length] = 1
        loss_mask[row, :length] = torch.tensor(sample.loss_mask, dtype=torch.float32)
        old_logprobs[row, :length] = torch.tensor(sample.behavior_logprobs, dtype=torch.float32)
        token_rewards[row, :length] = torch.tensor(sample.token_rewards, dtype=torch.float32)
    offsets = list(group_offsets) if group_offsets is not None else [0] * count
    state_numbers: dict[Any, int] = {}
    state_ids = [-1 if s.state_key is None else state_numbers.setdefault(s.state_key, len(state_numbers)) for s in samples]
    return Batch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        loss_mask=loss_mask,
        old_logprobs=old_logprobs,
        token_rewards=token_rewards,
        rewards=torch.tensor([sample.reward for sample in samples], dtype=torch.float32),
        group_ids=torch.tensor([s.group_id + o for s, o in zip(samples, offsets, strict=True)], dtype=torch.long),
        episode_ids=torch.tensor([sample.episode_index for sample in samples], dtype=torch.long),
        episode_returns=torch.tensor([sample.episode_return for sample in samples], dtype=torch.float32),
        step_returns=torch.tensor([sample.step_return for sample in samples], dtype=torch.float32),
        state_ids=torch.tensor(state_ids, dtype=torch.long),
        sample_advantages=_sample_advantages(samples),
    )


def _sample_advantages(samples: Sequence[Sample]) -> torch.Tensor | None:
    """``(B,)`` the samples' own advantages, when every sample has one (tree rollouts), else ``None``."""
    given = [sample.advantage for sample in samples]
    if any(value is None for value in given):
        return None
    return torch.tensor(given, dtype=torch.float32)


def token_budget_groups(lengths: Sequence[int], budget: int, max_samples: int = 0) -> list[list[int]]:
    """Consecutive runs of indices into ``lengths``, each fitting ``budget`` padded tokens: the micro-batches.

    A micro-batch is right-padded to its longest sequence, so its activations cost
    ``count * longest`` tokens; each run keeps that within ``budget``, and within
    ``max_samples`` sequences when that is > 0. A sequence longer than ``budget`` makes a
    micro-batch of its own. The order is kept: give the lengths longest first (as the update
    does) and sequences of like length share a micro-batch, so little of it is padding.

    Arguments:
        lengths: each sample's length in tokens.
        budget: most padded tokens per micro-batch; 0: no token bound.
        max_samples: most sequences per micro-batch; 0: no count bound.
    """
    groups: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for index, length in enumerate(lengths):
        wider = max(longest, int(length))
        over_budget = budget > 0 and (len(current) + 1) * wider > budget
        if current and (over_budget or (max_samples > 0 and len(current) >= max_samples)):
            groups.append(current)
            current, wider = [], int(length)
        current.append(index)
        longest = wider
    if current:
        groups.append(current)
    return groups
