"""The v1 grid ids show every cell as its own token to the default model's tokenizer; v0 does not."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

import llmgym  # noqa: F401

V1_IDS = ["llmgym/FrozenLake-v1", "llmgym/Sokoban-v1"]


def board_rows(observation: str) -> list[str]:
    """The map lines of an observation: after the feedback line, before the coordinates line."""
    return [line for line in observation.split("\n")[1:] if not line.startswith("You are at row")]


@pytest.mark.parametrize("env_id", V1_IDS)
def test_every_cell_is_one_token(env_id: str, smollm2_tokenizer: Any) -> None:
    env = gym.make(env_id)
    for seed in range(20):
        observation, _ = env.reset(seed=seed)
        moves = env.unwrapped.solution() or []
        for move in [None, *moves[:3]]:
            if move is not None:
                observation, *_ = env.step(f"<answer>{move}</answer>")
            for row in board_rows(observation):
                cells = row.split(" ")
                tokens = smollm2_tokenizer(row, add_special_tokens=False)["input_ids"]
                pieces = [smollm2_tokenizer.decode([token]).strip() for token in tokens]
                assert pieces == cells, f"{env_id} seed {seed}: row {row!r} tokenizes as {pieces}"


def test_compact_rows_of_v0_merge_cells(smollm2_tokenizer: Any) -> None:
    """Why v1 exists: compact rows put several cells in one token."""
    merged = 0
    for env_id in ("llmgym/FrozenLake-v0", "llmgym/Sokoban-v0"):
        env = gym.make(env_id)
        for seed in range(10):
            observation, _ = env.reset(seed=seed)
            for row in board_rows(observation):
                merged += len(smollm2_tokenizer(row, add_special_tokens=False)["input_ids"]) < len(row)
    assert merged > 0
