"""Advantage estimators: GAE (PPO), group-normalized (GRPO, Dr.GRPO) and REINFORCE++.

All functions are pure and work on padded token tensors ``(B, T)`` with a ``mask`` that is 1
on the tokens the policy generated and 0 on prompt, environment and padding tokens.

How this departs from the textbook:

* **Multi-turn GAE.** A multi-turn episode is one sequence where model turns alternate with
  environment turns. The MDP's time steps are the *generated* tokens only: environment
  tokens are skipped by the recursion (they are not actions), so the value after a turn's
  last token bootstraps from the first token of the next turn. Each turn's reward sits on
  that turn's last generated token (:func:`place_turn_rewards`).
* **GRPO** normalizes the episode return inside its group (same level, several samples);
  ``normalize_std=False`` gives Dr.GRPO's unbiased variant, which only centres.
* **REINFORCE++** uses the discounted token return, normalized over the whole batch's
  generated tokens (no critic, no groups).
* **Multi-turn GRPO on turn samples** (:func:`episode_normalized`): a turn sample carries its
  episode's return; episodes, not turns, are the members of a group, so a long episode does
  not weigh more in its group's mean than a short one.
* **Step-level groups** (:func:`step_grouped`, GiGPO's anchor states): among the turns of one
  group that acted on the same env state (equal ``info["state_key"]``), each turn's discounted
  return-to-go is normalized again, and that step advantage is added, weighted, to the episode
  advantage. Turns from a state no other turn of the group visited get no step advantage.
"""

from __future__ import annotations

import torch

#: Added to standard deviations before dividing, so constant groups give 0, not NaN.
EPS = 1e-6


def place_turn_rewards(
    turn_rewards: torch.Tensor, turn_last_token: torch.Tensor, seq_len: int
) -> torch.Tensor:
    """Scatter per-turn rewards onto each turn's last generated token.

    Args:
        turn_rewards: ``(B, K)`` reward of turn ``k`` of sequence ``b`` (pad with 0).
        turn_last_token: ``(B, K)`` index in ``[0, T)`` of that turn's last generated token;
            ``-1`` marks a padding turn (its reward is dropped).
        seq_len: ``T``.

    Returns:
        ``(B, T)`` float tensor, zero except at the turns' last tokens.
    """
    batch = turn_rewards.shape[0]
    token_rewards = torch.zeros(batch, seq_len, dtype=torch.float32, device=turn_rewards.device)  # (B, T)
    valid = turn_last_token >= 0  # (B, K)
    rows = torch.arange(batch, device=turn_rewards.device).unsqueeze(1).expand_as(turn_last_token)  # (B, K)
    token_rewards.index_put_(
        (rows[valid], turn_last_token[valid]), turn_rewards[valid].float(), accumulate=True
    )
    return token_rewards


def gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation over the generated tokens of each sequence.

    The recursion runs right to left over the tokens where ``mask`` is 1; masked-out tokens
    are skipped, so ``next value`` of a turn's last token is the value of the next turn's
    first generated token (0 after the episode's last one: episodes end terminal or
    truncated by a turn limit, which we treat as terminal, as PPO for LLMs usually does).

    Args:
        token_rewards: ``(B, T)`` rewards, nonzero only on generated tokens.
        values: ``(B, T)`` critic values ``V(s_t)`` before generating token ``t``.
        mask: ``(B, T)`` 1 on generated tokens.

    Returns:
        ``(advantages, returns)``, both ``(B, T)``, zero where ``mask`` is 0;
        ``returns = advantages + values``.
    """
    mask_f = mask.float()  # (B, T)
    rewards = token_rewards.float() * mask_f  # (B, T)
    values = values.float().detach() * mask_f  # (B, T)
    advantages = torch.zeros_like(rewards)  # (B, T)
    next_value = torch.zeros(rewards.shape[0], device=rewards.device)  # (B,)
    running = torch.zeros_like(next_value)  # (B,)
    for t in reversed(range(rewards.shape[1])):
        m = mask_f[:, t]  # (B,)
        delta = rewards[:, t] + gamma * next_value - values[:, t]  # (B,)
        step = delta + gamma * lam * running  # (B,)
        # Off-mask positions leave the running state untouched: they are not time steps.
        running = m * step + (1 - m) * running
        next_value = m * values[:, t] + (1 - m) * next_value
        advantages[:, t] = m * step
    returns = (advantages + values) * mask_f  # (B, T)
    return advantages, returns


def group_normalized(
    episode_rewards: torch.Tensor,
    group_ids: torch.Tensor,
    normalize_std: bool = True,
    eps: float = EPS,
) -> torch.Tensor:
    """GRPO's advantage: the episode reward minus its group's mean, over the group's std.

    Args:
        episode_rewards: ``(N,)`` one scalar reward per episode (or per sample).
        group_ids: ``(N,)`` integer group of each episode (episodes on the same level share one).
        normalize_std: divide by the group's standard deviation (GRPO). ``False`` only
            centres (Dr.GRPO), which removes the bias toward low-variance groups.

    Returns:
        ``(N,)`` advantages. A group whose rewards are all equal gives 0 to each member.
        The std is the unbiased sample std (a group of one has std 0 and advantage 0).
    """
    rewards = episode_rewards.float()  # (N,)
    _, inverse = torch.unique(group_ids, return_inverse=True)  # (N,)
    n_groups = int(inverse.max().item()) + 1 if inverse.numel() else 0
    counts = torch.zeros(n_groups, device=rewards.device).index_add_(0, inverse, torch.ones_like(rewards))  # (G,)
    sums = torch.zeros(n_groups, device=rewards.device).index_add_(0, inverse, rewards)  # (G,)
    means = sums / counts  # (G,)
    centred = rewards - means[inverse]  # (N,)
    if not normalize_std:
        return centred
    squares = torch.zeros(n_groups, device=rewards.device).index_add_(0, inverse, centred**2)  # (G,)
    stds = torch.sqrt(squares / (counts - 1).clamp(min=1))  # (G,)
    return centred / (stds[inverse] + eps)


def discounted_returns(token_rewards: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """Discounted return-to-go over generated tokens (off-mask tokens skipped, as in :func:`gae`).

    Args:
        token_rewards: ``(B, T)``.
        mask: ``(B, T)`` 1 on generated tokens.

    Returns:
        ``(B, T)`` ``G_t = r_t + gamma * G_{t'}`` where ``t'`` is the next generated token; 0 off-mask.
    """
    mask_f = mask.float()  # (B, T)
    rewards = token_rewards.float() * mask_f  # (B, T)
    returns = torch.zeros_like(rewards)  # (B, T)
    running = torch.zeros(rewards.shape[0], device=rewards.device)  # (B,)
    for t in reversed(range(rewards.shape[1])):
        m = mask_f[:, t]  # (B,)
        running = m * (rewards[:, t] + gamma * running) + (1 - m) * running
        returns[:, t] = m * running
    return returns


def reinforce_pp(
    token_rewards: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0, eps: float = EPS
) -> torch.Tensor:
    """REINFORCE++ advantages: discounted returns, whitened over all generated tokens of the batch.

    Args:
        token_rewards: ``(B, T)`` (a per-token KL penalty, if any, is already folded in).
        mask: ``(B, T)`` 1 on generated tokens.

    Returns:
        ``(B, T)`` advantages with mean 0 and std 1 over masked tokens; 0 off-mask.
    """
    returns = discounted_returns(token_rewards, mask, gamma)  # (B, T)
    return masked_whiten(returns, mask, eps)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """``(values - mean) / std`` over the positions where ``mask`` is 1 (population std); 0 elsewhere."""
    mask_f = mask.float()  # (B, T)
    count = mask_f.sum().clamp(min=1.0)
    mean = (values * mask_f).sum() / count
    variance = (((values - mean) * mask_f) ** 2).sum() / count
    return (values - mean) / torch.sqrt(variance + eps) * mask_f


def broadcast_to_tokens(per_sequence: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Give every generated token of sequence ``b`` the scalar ``per_sequence[b]``: ``(B,)`` -> ``(B, T)``."""
    return per_sequence.float().unsqueeze(1) * mask.float()


def turn_returns(turn_rewards: list[float], gamma: float) -> list[float]:
    """Discounted return-to-go of each turn of one episode: ``G_k = r_k + gamma * G_{k+1}``."""
    returns = [0.0] * len(turn_rewards)
    running = 0.0
    for index in reversed(range(len(turn_rewards))):
        running = turn_rewards[index] + gamma * running
        returns[index] = running
    return returns


def episode_normalized(
    episode_returns: torch.Tensor,
    group_ids: torch.Tensor,
    episode_ids: torch.Tensor,
    normalize_std: bool = True,
    eps: float = EPS,
) -> torch.Tensor:
    """GRPO's advantage for samples that are parts (turns) of episodes: one member per episode.

    Args:
        episode_returns: ``(N,)`` the return of each sample's episode (equal within an episode).
        group_ids: ``(N,)`` each sample's group.
        episode_ids: ``(N,)`` each sample's episode; samples of one episode share its advantage.

    Returns:
        ``(N,)`` :func:`group_normalized` over the distinct episodes, given to each of their samples.
    """
    unique_episodes, inverse = torch.unique(episode_ids, return_inverse=True)  # (E,), (N,)
    first = torch.full((len(unique_episodes),), len(episode_ids), dtype=torch.long)  # (E,)
    first = first.scatter_reduce(0, inverse, torch.arange(len(episode_ids)), reduce="amin")
    per_episode = group_normalized(episode_returns[first], group_ids[first], normalize_std, eps)  # (E,)
    return per_episode[inverse]


def step_grouped(
    episode_returns: torch.Tensor,
    group_ids: torch.Tensor,
    episode_ids: torch.Tensor,
    step_returns: torch.Tensor,
    state_ids: torch.Tensor,
    step_weight: float = 1.0,
    normalize_std: bool = True,
    eps: float = EPS,
    episode_weight: float = 1.0,
) -> torch.Tensor:
    """GiGPO-style advantage of turn samples: ``episode_weight`` x episode advantage + ``step_weight`` x step advantage.

    Args:
        episode_returns: as in :func:`episode_normalized`.
        group_ids: as in :func:`episode_normalized`.
        episode_ids: as in :func:`episode_normalized`.
        step_returns: ``(N,)`` each turn's discounted return-to-go (:func:`turn_returns`).
        state_ids: ``(N,)`` integer id of the state each turn acted on; ``-1`` where unknown
            (such a turn forms a step group of its own). Step groups are (group, state) pairs,
            so equal states of different levels never mix.
        episode_weight: at 0 only states that several of a group's turns acted on train: a
            failed episode's many turns from states no other turn saw then carry no advantage,
            where the episode term gives each of them the episode's (negative) one.

    Returns:
        ``(N,)`` advantages.
    """
    episode_advantage = episode_normalized(episode_returns, group_ids, episode_ids, normalize_std, eps)  # (N,)
    unknown = state_ids < 0  # (N,)
    own = -1 - torch.arange(len(state_ids), device=state_ids.device)  # (N,) a unique id per sample
    states = torch.where(unknown, own, state_ids)  # (N,)
    pairs = torch.stack([group_ids.to(states.dtype), states], dim=1)  # (N, 2)
    _, step_groups = torch.unique(pairs, dim=0, return_inverse=True)  # (N,)
    step_advantage = group_normalized(step_returns, step_groups, normalize_std, eps)  # (N,)
    return episode_weight * episode_advantage + step_weight * step_advantage
