"""A tiny randomly initialized model learns a one-step llmgym task under GRPO and under PPO, and asynchronously.

The task, ``llmgym-test/SayLetter-v0``, is a bandit: the action is the first character of the
completion, and saying ``B`` wins. The model is a character-level Llama of ~100k parameters
over a 102-token vocabulary, so at initialization it says ``B`` about 1% of the time. The
whole trainer path runs: config, rollout through the hf generator and the chain agent,
advantages, updates, greedy evaluation, metrics, curve. The test asserts the success rate
before (near chance) and after (>= 0.9), greedy on the eval levels and sampled in training.
The same run with ``trainer.mode=async`` (the hf engine on its own copy of the weights, the
next batch generated while the trainer updates) must learn as well.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from llmgym.core import Outcome, TextEnv
from llmgym_train.config import load_config
from llmgym_train.testing import save_tiny_model
from llmgym_train.trainer import Trainer

ENV_ID = "llmgym-test/SayLetter-v0"
LETTERS = ("A", "B")


def first_character(completion: str) -> str | None:
    """The action is the completion's first non-space character."""
    stripped = completion.strip()
    return stripped[0] if stripped else None


class SayLetterEnv(TextEnv):
    """One step: say the target letter (``B`` unless a level says otherwise) first. Reward 1 on success."""

    def __init__(self, *, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode, max_turns=1, action_parser=first_character, invalid_penalty=0.0)
        self._target = LETTERS[0]

    @property
    def system_prompt(self) -> str:
        return "Say A or B."

    def _reset_task(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self._target = options.get("level") or LETTERS[-1]
        return self._observe(), {"level_id": self._target}

    def _apply(self, action: str) -> Outcome:
        success = action == self._target
        return Outcome(self._observe(), reward=float(success), terminated=True, success=success)

    def _observe(self) -> str:
        return self._target

    # No level(): a one-level bandit has no level space to split into train and test levels, so its
    # evaluation plays the eval seeds (the same level) and training draws it too, by design.


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=SayLetterEnv)


def train_tiny(tmp_path: Path, algo: str, steps: int, extra: list[str] | None = None) -> tuple[Any, list[dict]]:
    model = save_tiny_model(tmp_path / "model", seed=0)
    config = load_config(
        overrides=[
            f"algo={algo}",
            f"model={model}",
            f"train_envs={ENV_ID}:8",
            f"steps={steps}",
            f"output={tmp_path / 'run'}",
            "rollout.backend=hf",
            "rollout.group_size=8",
            "rollout.max_new_tokens=1",
            "rollout.max_model_len=64",
            "optim.lr=0.01",
            "optim.micro_batch_size=64",
            "eval.levels=16",
            "eval.every=0",
            "checkpoint_every=0",
            "progress=false",
            "threads=1",
            *(extra or []),
        ]
    )
    with Trainer(config) as trainer:
        summary = trainer.train()
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    return summary, records


def assert_learned(label: str, summary: Any, records: list[dict], started: float) -> list[dict]:
    """The run went from chance to solving SayLetter, greedy and sampled; returns its train records."""
    before, after = summary.eval_before[ENV_ID], summary.eval_after[ENV_ID]
    train = [record for record in records if record["kind"] == "train"]
    sampled = [record["success_rate"] for record in train]
    print(f"{label}: greedy eval {before:.2f} -> {after:.2f}; sampled {sampled[0]:.2f} -> {sampled[-1]:.2f} "
          f"in {time.perf_counter() - started:.0f}s")
    assert summary.completed
    assert before <= 0.1 and sampled[0] <= 0.1, f"the untrained model should be near chance: {before}, {sampled[0]}"
    assert after >= 0.9, f"{label} did not learn: greedy eval success {before} -> {after}"
    assert sum(sampled[-3:]) / 3 >= 0.9, f"{label}: sampled success of the last steps {sampled[-3:]}"
    return train


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_tiny_model_learns_say_letter(tmp_path: Path, algo: str) -> None:
    started = time.perf_counter()
    summary, records = train_tiny(tmp_path, algo, steps=18)
    assert_learned(algo, summary, records, started)
    assert summary.curve is not None and summary.curve.is_file()


@pytest.mark.slow
def test_tiny_model_learns_say_letter_asynchronously(tmp_path: Path) -> None:
    started = time.perf_counter()
    summary, records = train_tiny(tmp_path, "grpo", steps=18, extra=["trainer.mode=async", "trainer.max_staleness=1"])
    train = assert_learned("async", summary, records, started)
    print(f"async staleness per step: {[record['staleness/max'] for record in train]}")
    assert all(record["staleness/max"] <= 1 for record in train)
    assert any(record["staleness/max"] == 1 for record in train), "no batch was generated during an update"
