"""Wrappers around llmgym's text envs: classic-RL views and chat history."""

from __future__ import annotations

from llmgym.wrappers.chat import ChatHistory
from llmgym.wrappers.classic import (
    BOARD_SPECS,
    BoardSpec,
    DiscreteActions,
    GridObservation,
    encode_board,
    make_classic_env,
)

__all__ = [
    "BOARD_SPECS",
    "BoardSpec",
    "ChatHistory",
    "DiscreteActions",
    "GridObservation",
    "encode_board",
    "make_classic_env",
]
