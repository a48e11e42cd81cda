"""Advantages, losses and filters against values computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from llmgym_train.algorithms import (
    aggregate,
    clipped_surrogate,
    discounted_returns,
    entropy_from_logits,
    episode_normalized,
    gae,
    group_normalized,
    group_variance_keep,
    kl_divergence,
    masked_whiten,
    place_turn_rewards,
    reinforce_pp,
    step_grouped,
    token_logprobs,
    turn_returns,
    value_loss,
    void_turn_keep,
)

T = torch.tensor


# ---------------------------------------------------------------------- advantages
def test_place_turn_rewards_puts_each_reward_on_its_turns_last_token() -> None:
    rewards = place_turn_rewards(T([[0.5, 1.0], [2.0, 9.0]]), T([[1, 4], [2, -1]]), seq_len=5)
    assert rewards.tolist() == [[0.0, 0.5, 0.0, 0.0, 1.0], [0.0, 0.0, 2.0, 0.0, 0.0]]


def test_gae_single_turn_by_hand() -> None:
    # Tokens 1..2 generated; reward 1 on the last. gamma=0.9, lam=0.5.
    rewards = T([[0.0, 0.0, 1.0]])
    values = T([[9.0, 0.5, 0.2]])  # value at the prompt token must be ignored
    mask = T([[0, 1, 1]])
    advantages, returns = gae(rewards, values, mask, gamma=0.9, lam=0.5)
    delta2 = 1.0 - 0.2
    delta1 = 0.0 + 0.9 * 0.2 - 0.5
    a2 = delta2
    a1 = delta1 + 0.9 * 0.5 * a2
    assert advantages.tolist()[0] == pytest.approx([0.0, a1, a2])
    assert returns.tolist()[0] == pytest.approx([0.0, a1 + 0.5, a2 + 0.2])


def test_gae_skips_environment_tokens_between_turns() -> None:
    # Turn 1: token 0; env tokens 1..2; turn 2: token 3. Rewards 0.5 and 1 at each turn's end.
    rewards = T([[0.5, 0.0, 0.0, 1.0]])
    values = T([[0.4, 7.0, 7.0, 0.6]])
    mask = T([[1, 0, 0, 1]])
    advantages, _ = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    a3 = 1.0 - 0.6
    a0 = 0.5 + 0.6 - 0.4 + a3  # bootstraps from token 3, not from the env tokens
    assert advantages.tolist()[0] == pytest.approx([a0, 0.0, 0.0, a3])


def test_gae_with_lambda_one_equals_return_minus_value() -> None:
    generator = torch.Generator().manual_seed(0)
    rewards = torch.rand(3, 6, generator=generator)
    values = torch.rand(3, 6, generator=generator)
    mask = (torch.rand(3, 6, generator=generator) > 0.3).float()
    advantages, _ = gae(rewards, values, mask, gamma=0.95, lam=1.0)
    expected = (discounted_returns(rewards, mask, 0.95) - values) * mask
    assert torch.allclose(advantages, expected, atol=1e-6)


def test_group_normalized_by_hand() -> None:
    rewards = T([1.0, 0.0, 0.0, 0.0, 5.0, 5.0])
    groups = T([7, 7, 7, 7, 3, 3])
    mean, std = 0.25, math.sqrt((0.75**2 + 3 * 0.25**2) / 3)
    advantages = group_normalized(rewards, groups, normalize_std=True, eps=0.0 + 1e-12)
    assert advantages.tolist() == pytest.approx([0.75 / std, -0.25 / std, -0.25 / std, -0.25 / std, 0.0, 0.0])
    assert group_normalized(rewards, groups, normalize_std=False).tolist() == pytest.approx(
        [1 - mean, -mean, -mean, -mean, 0.0, 0.0]
    )


def test_group_normalized_single_member_group_gets_zero() -> None:
    assert group_normalized(T([3.0, 1.0, 2.0]), T([0, 1, 1])).tolist() == pytest.approx(
        [0.0, -0.5 / math.sqrt(0.5), 0.5 / math.sqrt(0.5)], rel=1e-4
    )


def test_discounted_returns_by_hand() -> None:
    returns = discounted_returns(T([[0.0, 1.0, 0.0, 2.0]]), T([[1, 1, 0, 1]]), gamma=0.5)
    assert returns.tolist()[0] == pytest.approx([0.5 * (1 + 0.5 * 2), 1 + 0.5 * 2, 0.0, 2.0])


def test_reinforce_pp_whitens_returns_over_the_batch() -> None:
    rewards = T([[0.0, 1.0], [0.0, 0.0]])
    mask = T([[1, 1], [0, 1]])
    # returns (gamma 1): [[1, 1], [-, 0]] -> mean 2/3, population std sqrt(2/9)
    advantages = reinforce_pp(rewards, mask, gamma=1.0, eps=0.0)
    std = math.sqrt(2 / 9)
    assert advantages.flatten().tolist() == pytest.approx([(1 / 3) / std, (1 / 3) / std, 0.0, (-2 / 3) / std])


def test_masked_whiten_ignores_padding() -> None:
    whitened = masked_whiten(T([[1.0, 3.0, 100.0]]), T([[1, 1, 0]]), eps=0.0)
    assert whitened.tolist()[0] == pytest.approx([-1.0, 1.0, 0.0])


# ---------------------------------------------------------------------- losses
def test_aggregation_modes_by_hand() -> None:
    losses = T([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = T([[1, 1, 1], [1, 0, 0]])
    assert aggregate(losses, mask, "token-mean").item() == pytest.approx((1 + 2 + 3 + 4) / 4)
    assert aggregate(losses, mask, "seq-mean-token-sum").item() == pytest.approx((6 + 4) / 2)
    assert aggregate(losses, mask, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    assert aggregate(losses, mask, "token-mean", normalizer=10).item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="token-mean"):
        aggregate(losses, mask, "tokens")  # type: ignore[arg-type]


def test_clipped_surrogate_by_hand() -> None:
    # ratios e^{0.5}=1.65, e^{-0.5}=0.61, 1.1; advantages +1, -1, -2; clip 0.2 low / 0.28 high
    old = T([[0.0, 0.0, 0.0]])
    new = T([[0.5, -0.5, math.log(1.1)]])
    advantages = T([[1.0, -1.0, -2.0]])
    mask = T([[1, 1, 1]])
    loss, stats = clipped_surrogate(new, old, advantages, mask, clip_low=0.2, clip_high=0.28)
    token_losses = [
        -min(math.exp(0.5) * 1, 1.28 * 1),  # clipped at 1 + clip_high
        -min(math.exp(-0.5) * -1, 0.8 * -1),  # clipped at 1 - clip_low
        -min(1.1 * -2, 1.1 * -2),  # inside the range
    ]
    assert loss.item() == pytest.approx(sum(token_losses) / 3)
    assert stats["clip_fraction"] == pytest.approx(2 / 3)


def test_clipped_surrogate_gradient_at_ratio_one_is_minus_advantage() -> None:
    logprobs = torch.zeros(1, 2, requires_grad=True)
    loss, _ = clipped_surrogate(logprobs, torch.zeros(1, 2), T([[2.0, -1.0]]), T([[1, 1]]))
    loss.backward()
    assert logprobs.grad.tolist()[0] == pytest.approx([-1.0, 0.5])


def test_value_loss_with_and_without_clipping() -> None:
    values, old, returns, mask = T([[1.0, 0.0]]), T([[0.0, 0.0]]), T([[2.0, 1.0]]), T([[1, 1]])
    # unclipped errors: (1-2)^2 = 1, (0-1)^2 = 1; clipped value 0.2: (0.2-2)^2 = 3.24
    assert value_loss(values, old, returns, mask, clip_range=None).item() == pytest.approx(0.5 * (1 + 1) / 2)
    assert value_loss(values, old, returns, mask, clip_range=0.2).item() == pytest.approx(0.5 * (3.24 + 1) / 2)


def test_kl_estimators_by_hand() -> None:
    logp, ref = T([[math.log(0.5), math.log(0.2)]]), T([[math.log(0.25), math.log(0.2)]])
    assert kl_divergence(logp, ref, "k1").tolist()[0] == pytest.approx([math.log(2), 0.0])
    assert kl_divergence(logp, ref, "k3").tolist()[0] == pytest.approx([0.5 - 1 + math.log(2), 0.0])
    with pytest.raises(ValueError, match="k3"):
        kl_divergence(logp, ref, "k2")  # type: ignore[arg-type]


def test_entropy_and_token_logprobs_by_hand() -> None:
    logits = torch.log(T([[[0.5, 0.25, 0.25], [1.0, 1e-30, 1e-30]]]))
    assert entropy_from_logits(logits).tolist()[0] == pytest.approx([1.5 * math.log(2), 0.0], abs=1e-6)
    assert token_logprobs(logits, T([[1, 0]])).tolist()[0] == pytest.approx([math.log(0.25), 0.0], abs=1e-6)


# ---------------------------------------------------------------------- filters
def test_group_variance_keeps_the_most_varied_groups() -> None:
    rewards = T([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.0, 1.0, 1.0], [0.0, 0.0, 2.0]])
    # stds: 0, 0.471, 0.471, 0.943 -> top half: group 3, then group 1 (stable tie-break)
    assert group_variance_keep(rewards, 0.5).tolist() == [False, True, False, True]
    assert group_variance_keep(rewards, 1.0).all()
    assert group_variance_keep(rewards, 0.25).tolist() == [False, False, False, True]
    with pytest.raises(ValueError, match="keep_fraction"):
        group_variance_keep(rewards, 0.0)


def test_void_turns_are_dropped() -> None:
    keep = void_turn_keep(T([True, False, True, False]), T([False, False, True, True]))
    assert keep.tolist() == [True, False, False, False]


# ---------------------------------------------------------------------- turn samples and step groups
def test_turn_returns_by_hand() -> None:
    assert turn_returns([0.0, -0.1, 1.0], gamma=0.5) == pytest.approx([0.2, 0.4, 1.0])
    assert turn_returns([], gamma=0.9) == []


def test_episode_normalized_counts_each_episode_once() -> None:
    # Group 0: episode 0 (3 turns, return 1), episode 1 (1 turn, return 0). Turn-weighted stats
    # would give mean 0.75; per episode the mean is 0.5 and the std (unbiased) sqrt(0.5).
    returns = T([1.0, 1.0, 1.0, 0.0])
    advantages = episode_normalized(returns, T([0, 0, 0, 0]), T([0, 0, 0, 1]), normalize_std=False)
    assert advantages.tolist() == pytest.approx([0.5, 0.5, 0.5, -0.5])
    normalized = episode_normalized(returns, T([0, 0, 0, 0]), T([0, 0, 0, 1]))
    assert normalized.tolist() == pytest.approx([0.5 / math.sqrt(0.5)] * 3 + [-0.5 / math.sqrt(0.5)], rel=1e-4)


def test_step_grouped_by_hand_with_a_repeated_state() -> None:
    # One group, two episodes on the same level. Episode 0 (return 1): turns from states A, B, A
    # (it came back to A). Episode 1 (return 0): turns from A, C. Step returns are given.
    episode_returns = T([1.0, 1.0, 1.0, 0.0, 0.0])
    group_ids = T([0, 0, 0, 0, 0])
    episode_ids = T([0, 0, 0, 1, 1])
    step_returns = T([0.81, 0.9, 1.0, 0.0, 0.0])
    state_ids = T([0, 1, 0, 0, 2])  # A=0, B=1, C=2
    advantages = step_grouped(
        episode_returns, group_ids, episode_ids, step_returns, state_ids, step_weight=0.5, normalize_std=False
    )
    # Episode advantages: +0.5 / -0.5. Step group A = {0.81, 1.0, 0.0}, mean 0.6033...;
    # B and C are alone (step advantage 0).
    mean_a = (0.81 + 1.0 + 0.0) / 3
    expected = [
        0.5 + 0.5 * (0.81 - mean_a),
        0.5,
        0.5 + 0.5 * (1.0 - mean_a),
        -0.5 + 0.5 * (0.0 - mean_a),
        -0.5,
    ]
    assert advantages.tolist() == pytest.approx(expected)


def test_step_grouped_without_the_episode_term_trains_only_shared_states() -> None:
    # The same turns as above at episode_weight=0: the turns from B and C (alone in their step
    # groups) carry nothing, and state A's three turns are centred among themselves.
    advantages = step_grouped(
        T([1.0, 1.0, 1.0, 0.0, 0.0]), T([0, 0, 0, 0, 0]), T([0, 0, 0, 1, 1]), T([0.81, 0.9, 1.0, 0.0, 0.0]),
        T([0, 1, 0, 0, 2]), step_weight=1.0, normalize_std=False, episode_weight=0.0,
    )
    mean_a = (0.81 + 1.0 + 0.0) / 3
    assert advantages.tolist() == pytest.approx([0.81 - mean_a, 0.0, 1.0 - mean_a, -mean_a, 0.0])
    assert advantages[[0, 2, 3]].sum().item() == pytest.approx(0.0, abs=1e-6)


def test_step_grouped_keeps_groups_and_unknown_states_apart() -> None:
    # The same state id in two groups (two levels) must not form one step group; -1 never groups.
    advantages = step_grouped(
        T([1.0, 0.0, 1.0, 0.0]), T([0, 0, 1, 1]), T([0, 1, 2, 3]), T([1.0, 0.0, 5.0, 0.0]), T([7, 7, 7, -1]),
        step_weight=1.0, normalize_std=False,
    )
    # Group 0: episode advantages +-0.5, step group {1.0, 0.0}: +-0.5. Group 1: +-0.5, and each
    # of its turns is alone in its step group (state 7 of group 1 once; the unknown state).
    assert advantages.tolist() == pytest.approx([1.0, -1.0, 0.5, -0.5])
