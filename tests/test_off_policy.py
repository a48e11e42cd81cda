"""Off-policy corrections against values computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from llmgym_train.algorithms import clipped_surrogate, decoupled_surrogate, truncated_importance_weights


def logs(*probabilities: float) -> torch.Tensor:
    """``(1, T)`` log-probabilities."""
    return torch.tensor([[math.log(p) for p in probabilities]])


def test_token_weights_are_ratios_truncated_at_the_cap_and_zero_off_the_mask() -> None:
    behaviour = logs(0.5, 0.1, 0.3)
    target = logs(0.25, 0.4, 0.9)
    mask = torch.tensor([[1, 1, 0]])
    weights = truncated_importance_weights(target, behaviour, mask, cap=2.0, level="token")
    # 0.25 / 0.5 = 0.5; 0.4 / 0.1 = 4 -> 2 (the cap); off the mask 0
    assert weights.tolist()[0] == pytest.approx([0.5, 2.0, 0.0])
    untruncated = truncated_importance_weights(target, behaviour, mask, cap=math.inf)
    assert untruncated.tolist()[0] == pytest.approx([0.5, 4.0, 0.0])


def test_sequence_weights_are_the_rows_product_truncated_once() -> None:
    behaviour = torch.cat([logs(0.2, 0.4, 0.01), logs(0.1, 0.1, 0.5)])
    target = torch.cat([logs(0.4, 0.3, 0.9), logs(0.2, 0.3, 0.5)])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    weights = truncated_importance_weights(target, behaviour, mask, cap=2.0, level="sequence")
    # row 0: 2 * 0.75 = 1.5 (the unmasked token's ratio of 90 is not in it); row 1: 2 * 3 * 1 = 6 -> 2
    assert weights.tolist()[0] == pytest.approx([1.5, 1.5, 0.0])
    assert weights.tolist()[1] == pytest.approx([2.0, 2.0, 2.0])


def test_long_sequences_do_not_overflow() -> None:
    behaviour = torch.full((1, 4000), math.log(0.01))
    target = torch.full((1, 4000), math.log(0.9))  # product of ratios: 90 ** 4000
    weights = truncated_importance_weights(target, behaviour, torch.ones(1, 4000), cap=5.0, level="sequence")
    assert torch.isfinite(weights).all() and weights.max().item() == pytest.approx(5.0)


def _hand_case(cap: float) -> tuple[torch.Tensor, dict[str, float], torch.Tensor]:
    # token 0: prompt (masked). token 1: mu 0.2, prox 0.4, theta 0.6, A +1. token 2: mu 0.5, prox 0.25, theta 0.3, A -1.
    behaviour = logs(0.9, 0.2, 0.5)
    proximal = logs(0.9, 0.4, 0.25)
    current = logs(0.9, 0.6, 0.3).requires_grad_(True)
    advantages = torch.tensor([[5.0, 1.0, -1.0]])
    mask = torch.tensor([[0, 1, 1]])
    loss, stats = decoupled_surrogate(
        current, proximal, behaviour, advantages, mask, clip_low=0.2, clip_high=0.28, behaviour_cap=cap
    )
    loss.backward()
    assert current.grad is not None
    return loss, stats, current.grad


def test_decoupled_surrogate_by_hand() -> None:
    loss, stats, grad = _hand_case(cap=3.0)
    # token 1: w = 0.4/0.2 = 2, r = 0.6/0.4 = 1.5 -> clipped to 1.28: -2 * 1.28 = -2.56 (no gradient)
    # token 2: w = 0.25/0.5 = 0.5, r = 0.3/0.25 = 1.2 (inside the range): -0.5 * 1.2 * -1 = 0.6
    assert loss.item() == pytest.approx((-2.56 + 0.6) / 2)
    # d/d logpi of -w * r * A is -w * r * A; token-mean divides by 2 tokens
    assert grad.tolist()[0] == pytest.approx([0.0, 0.0, 0.6 / 2])
    assert stats["clip_fraction"] == pytest.approx(0.5)
    assert stats["behaviour_weight_mean"] == pytest.approx((2.0 + 0.5) / 2)
    assert stats["behaviour_truncated_fraction"] == 0.0


def test_decoupled_surrogate_truncates_the_behaviour_weight() -> None:
    loss, stats, _ = _hand_case(cap=1.5)
    # token 1's weight 2 -> 1.5: -1.5 * 1.28 = -1.92
    assert loss.item() == pytest.approx((-1.92 + 0.6) / 2)
    assert stats["behaviour_truncated_fraction"] == pytest.approx(0.5)
    assert stats["behaviour_weight_mean"] == pytest.approx((1.5 + 0.5) / 2)


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_on_policy_samples_give_ppo_exactly(aggregation: str) -> None:
    generator = torch.Generator().manual_seed(5)
    proximal = -torch.rand(3, 7, generator=generator) * 3
    current = (proximal + 0.4 * torch.randn(3, 7, generator=generator)).requires_grad_(True)
    advantages = torch.randn(3, 7, generator=generator)
    mask = (torch.rand(3, 7, generator=generator) > 0.3).float()
    loss, _ = decoupled_surrogate(current, proximal, proximal, advantages, mask, 0.2, 0.28, 2.0, "token", aggregation)  # type: ignore[arg-type]
    (grad,) = torch.autograd.grad(loss, current)
    reference, _ = clipped_surrogate(current, proximal, advantages, mask, 0.2, 0.28, aggregation)  # type: ignore[arg-type]
    (reference_grad,) = torch.autograd.grad(reference, current)
    assert loss.item() == pytest.approx(reference.item())
    torch.testing.assert_close(grad, reference_grad)
    assert grad.abs().max() > 0


def test_sequence_level_weight_multiplies_every_token_of_the_row() -> None:
    behaviour = logs(0.9, 0.2, 0.5)
    proximal = logs(0.9, 0.4, 0.25)  # ratios 2 and 0.5: the row's product is 1
    current = proximal.clone().requires_grad_(True)
    advantages = torch.tensor([[0.0, 1.0, -1.0]])
    mask = torch.tensor([[0, 1, 1]])
    loss, stats = decoupled_surrogate(current, proximal, behaviour, advantages, mask, behaviour_cap=4.0, level="sequence")
    # w = 1 on both tokens, r = 1: (-1 * 1 + 1 * 1) / 2 = 0
    assert loss.item() == pytest.approx(0.0)
    assert stats["behaviour_weight_mean"] == pytest.approx(1.0)


def test_bad_cap_and_level_are_refused() -> None:
    values, mask = logs(0.5), torch.ones(1, 1)
    with pytest.raises(ValueError, match="cap must be > 0"):
        truncated_importance_weights(values, values, mask, cap=0.0)
    with pytest.raises(ValueError, match="importance level must be one of"):
        truncated_importance_weights(values, values, mask, cap=2.0, level="episode")  # type: ignore[arg-type]
