"""Token-budget micro-batches: the split by hand, and the gradient it gives on a real tiny model."""

from __future__ import annotations

import pytest
import torch

from llmgym.error import InvalidOptionError
from llmgym_train.batching import token_budget_groups
from llmgym_train.config import LossConfig, load_config
from llmgym_train.update import micro_batches


def test_groups_fit_the_budget_in_padded_tokens() -> None:
    # longest first, as the update sorts them: 3 x 300 = 900 <= 1000; then 250 x 4 = 1000; 100 x 2
    lengths = [300, 300, 290, 250, 240, 240, 200, 100, 90]
    groups = token_budget_groups(lengths, budget=1000)
    assert groups == [[0, 1, 2], [3, 4, 5, 6], [7, 8]]
    for group in groups:
        assert len(group) * max(lengths[i] for i in group) <= 1000


def test_a_sequence_longer_than_the_budget_goes_alone() -> None:
    assert token_budget_groups([2048, 2000, 600, 500], budget=1024) == [[0], [1], [2], [3]]
    assert token_budget_groups([10, 3000, 10, 10], budget=100) == [[0], [1], [2, 3]]


def test_the_sample_count_still_bounds_a_group_and_zero_means_no_bound() -> None:
    assert token_budget_groups([5] * 7, budget=1000, max_samples=3) == [[0, 1, 2], [3, 4, 5], [6]]
    assert token_budget_groups([5] * 7, budget=0, max_samples=3) == [[0, 1, 2], [3, 4, 5], [6]]
    assert token_budget_groups([5] * 7, budget=0) == [list(range(7))]
    assert token_budget_groups([], budget=10) == []


def test_micro_batches_of_a_batch_keep_the_budget_and_every_row_once() -> None:
    from test_trainer import _batch, _policy

    policy = _policy(with_value=False)
    batch = _batch(policy)  # lengths 5, 8, ..., 26
    pieces = list(micro_batches(batch, size=8, max_tokens=40))
    assert sum(len(piece) for piece in pieces) == len(batch)
    for piece in pieces:
        assert piece.input_ids.numel() <= 40 or len(piece) == 1
    assert len(pieces) > 2


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_token_budget_does_not_change_the_gradient(algo: str) -> None:
    from test_trainer import _batch, _gradients, _policy

    policy = _policy(with_value=algo == "ppo")
    batch = _batch(policy)
    loss = LossConfig(aggregation="token-mean", clip_low=0.2, clip_high=0.28)
    whole = _gradients(policy, batch, 8, loss, algo)
    budgeted = _gradients(policy, batch, 8, loss, algo, max_tokens=30)
    assert whole.abs().max() > 1e-4
    torch.testing.assert_close(budgeted, whole, rtol=1e-4, atol=1e-6)


def test_config_key() -> None:
    assert load_config().update.micro_batch_tokens > 0
    assert load_config(overrides=["update.micro_batch_tokens=0"]).update.micro_batch_tokens == 0
    with pytest.raises(InvalidOptionError, match=r"update.micro_batch_tokens must be in \[0"):
        load_config(overrides=["update.micro_batch_tokens=-5"])


def test_a_group_shares_its_micro_batch_and_its_whole_prompt() -> None:
    from llmgym_train.policy import shared_prefix_length
    from llmgym_train.update import micro_batch_order
    from test_trainer import _batch, _policy

    # Three GRPO groups of four replies, prompts of 12, 20 and 16 tokens after a shared 6-token
    # system prompt, replies of 1-4 tokens, rows interleaved as a rollout of several envs leaves them.
    generator = torch.Generator().manual_seed(0)
    system = torch.randint(5, 100, (6,), generator=generator)
    prompts = [torch.cat([system, torch.randint(5, 100, (n,), generator=generator)]) for n in (6, 14, 10)]
    rows = [(group, torch.cat([prompts[group], torch.randint(5, 100, (reply,), generator=generator)]))
            for reply in range(1, 5) for group in range(3)]
    batch = _batch(_policy(with_value=False), size=len(rows))
    batch.input_ids.zero_()
    batch.attention_mask.zero_()
    for index, (group, tokens) in enumerate(rows):
        batch.input_ids[index, : len(tokens)] = tokens
        batch.attention_mask[index, : len(tokens)] = 1
    batch.group_ids = torch.tensor([group for group, _ in rows])
    ordered = batch.select(micro_batch_order(batch))
    assert ordered.group_ids.tolist() == [1] * 4 + [2] * 4 + [0] * 4  # longest group first, each together
    lengths = ordered.attention_mask.sum(dim=1).tolist()
    assert all(lengths[i] >= lengths[i + 1] for i in range(4)), lengths  # longest first within a group
    pieces = list(micro_batches(ordered, size=4))
    shared = [shared_prefix_length(piece.input_ids, piece.attention_mask) for piece in pieces]
    assert shared == [20, 16, 12]  # each micro-batch runs its group's whole prompt once


def test_update_speed_workload_shares_a_prefix_and_repeats_each_context() -> None:
    """The benchmark's markov workload: prompts begin alike; a context's rows differ in their last token."""
    from types import SimpleNamespace

    from benchmarks.update_speed import workload
    from llmgym_train.batching import collate
    from llmgym_train.policy import same_context_rows, shared_prefix_length

    args = SimpleNamespace(contexts=6, repeats=3, context=20, shared=8)
    samples = workload(args, vocab=500)
    batch = collate(samples, pad_token_id=0)
    assert len(batch) == 18
    assert shared_prefix_length(batch.input_ids, batch.attention_mask) == 8
    representatives, _ = same_context_rows(batch.input_ids, batch.attention_mask)
    assert len(representatives) == 6
    assert len({sample.reward for sample in samples[:3]}) == 2  # a context's rows carry a gradient
