"""PPO's critic: a linear value head on the policy's last hidden state.

Sharing the policy's trunk keeps the critic as cheap as one extra ``hidden -> 1`` layer,
which matters on CPUs; the head starts at zero so the first advantages are plain returns.
Values are aligned with tokens: ``values[:, t]`` estimates the return *before* token ``t``
is generated, so it is read from the hidden state at position ``t - 1``.
"""

from __future__ import annotations

import torch
from torch import nn


class ValueHead(nn.Module):
    """``hidden_states (B, T, H) -> values (B, T)``, shifted so ``values[:, t] = V(state before token t)``."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        raw = self.linear(hidden_states.float()).squeeze(-1)  # (B, T): value after reading token t
        return torch.nn.functional.pad(raw[:, :-1], (1, 0))  # (B, T): value before token t
