"""The update path on a real tiny model: gradient-accumulation invariance, and the trainer's run contract."""

from __future__ import annotations

import pytest
import torch

from llmgym_train.batching import Batch
from llmgym_train.config import LossConfig
from llmgym_train.policy import Policy
from llmgym_train.testing import tiny_model, tiny_tokenizer
from llmgym_train.update import accumulate_gradients, normalizer, with_signal
from llmgym_train.value import ValueHead


def _policy(with_value: bool) -> Policy:
    tokenizer = tiny_tokenizer()
    model = tiny_model(len(tokenizer), hidden_size=32, num_layers=1, seed=3)
    value_head = ValueHead(model.config.hidden_size) if with_value else None
    if value_head is not None:
        torch.nn.init.normal_(value_head.linear.weight, std=0.1)
    return Policy(model, tokenizer, value_head, with_reference=False)


def _batch(policy: Policy, size: int = 8) -> Batch:
    generator = torch.Generator().manual_seed(11)
    lengths = [5 + 3 * i for i in range(size)]  # different lengths: padding and token counts differ
    width = max(lengths)
    vocab = policy.model.config.vocab_size
    input_ids = torch.zeros(size, width, dtype=torch.long)
    attention_mask = torch.zeros(size, width, dtype=torch.long)
    loss_mask = torch.zeros(size, width)
    for row, length in enumerate(lengths):
        input_ids[row, :length] = torch.randint(5, vocab, (length,), generator=generator)
        attention_mask[row, :length] = 1
        loss_mask[row, length // 2 : length] = 1
    with torch.no_grad():
        logprobs = policy.score(input_ids, attention_mask)["logprobs"]
    noise = 0.3 * torch.randn(size, width, generator=generator)
    return Batch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        loss_mask=loss_mask,
        old_logprobs=(logprobs + noise) * loss_mask,  # ratios away from 1: some tokens clip
        token_rewards=torch.zeros(size, width),
        rewards=torch.zeros(size),
        group_ids=torch.zeros(size, dtype=torch.long),
        episode_ids=torch.arange(size),
        episode_returns=torch.zeros(size),
        step_returns=torch.zeros(size),
        state_ids=torch.full((size,), -1),
        advantages=torch.randn(size, width, generator=generator) * loss_mask,
        returns=torch.randn(size, width, generator=generator) * loss_mask,
        old_values=torch.randn(size, width, generator=generator) * 0.1 * loss_mask,
    )


def _gradients(
    policy: Policy, batch: Batch, micro_batch_size: int, loss: LossConfig, algo: str, max_tokens: int = 0
) -> torch.Tensor:
    for parameter in policy.trainable_parameters():
        parameter.grad = None
    stats = accumulate_gradients(policy, batch, micro_batch_size, loss, algo, max_tokens=max_tokens)
    assert stats["loss"] == stats["loss"], "loss must be finite"
    return torch.cat([p.grad.flatten() for p in policy.trainable_parameters() if p.grad is not None])


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_batch_8_accumulation_1_equals_batch_1_accumulation_8(aggregation: str, algo: str) -> None:
    policy = _policy(with_value=algo == "ppo")
    batch = _batch(policy)
    loss = LossConfig(aggregation=aggregation, clip_low=0.2, clip_high=0.28)  # type: ignore[arg-type]
    whole = _gradients(policy, batch, 8, loss, algo)
    accumulated = _gradients(policy, batch, 1, loss, algo)
    assert whole.abs().max() > 1e-4, "the test needs a nonzero gradient"
    torch.testing.assert_close(accumulated, whole, rtol=1e-4, atol=1e-6)



def test_logged_kl_is_the_k3_token_mean_computed_by_hand() -> None:
    policy = _policy(with_value=False)
    batch = _batch(policy)
    with torch.no_grad():
        logprobs = policy.score(batch.input_ids, batch.attention_mask)["logprobs"]
    # log q - log p = +0.5 on the first four samples, -1.0 on the last four.
    log_ratio = torch.tensor([0.5] * 4 + [-1.0] * 4).unsqueeze(-1).expand_as(logprobs)
    batch.ref_logprobs = (logprobs + log_ratio) * batch.loss_mask
    # k3 = q/p - 1 - log(q/p):  e^0.5 - 1 - 0.5 = 0.1487213,  e^-1 - 1 + 1 = 0.3678794
    tokens = batch.loss_mask.sum(dim=-1)
    first, last = float(tokens[:4].sum()), float(tokens[4:].sum())
    expected = (first * 0.1487213 + last * 0.3678794) / (first + last)
    loss = LossConfig(kl_coef=0.1, kl_estimator="k3", aggregation="token-mean")
    stats = accumulate_gradients(policy, batch, 3, loss, "grpo")
    assert stats["kl"] == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean"])
def test_skipping_samples_without_advantage_keeps_the_gradient(aggregation: str) -> None:
    """A single on-policy update over only the samples with signal, divided as the whole batch."""
    policy = _policy(with_value=False)
    batch = _batch(policy)
    batch.old_logprobs = None  # on-policy: the loss takes its own logprobs as the old ones
    assert batch.advantages is not None
    batch.advantages[[1, 4, 5]] = 0.0  # three samples whose groups scored alike
    loss = LossConfig(aggregation=aggregation)  # type: ignore[arg-type]
    whole = _gradients(policy, batch, 8, loss, "grpo")
    kept = with_signal(batch)
    assert kept.tolist() == [0, 2, 3, 6, 7]
    for parameter in policy.trainable_parameters():
        parameter.grad = None
    accumulate_gradients(policy, batch.select(kept), 8, loss, "grpo", divisor=normalizer(batch, aggregation))
    skipped = torch.cat([p.grad.flatten() for p in policy.trainable_parameters() if p.grad is not None])
    assert whole.abs().max() > 1e-4
    torch.testing.assert_close(skipped, whole, rtol=1e-4, atol=1e-6)


def test_logged_entropy_is_the_mean_over_the_trained_samples_when_others_are_skipped() -> None:
    """Samples skipped for want of advantage must not dilute the entropy the trainer logs."""
    policy = _policy(with_value=False)
    batch = _batch(policy)
    batch.old_logprobs = None
    kept = torch.tensor([0, 2, 3])
    loss = LossConfig(aggregation="token-mean")
    stats = accumulate_gradients(policy, batch.select(kept), 8, loss, "grpo", divisor=normalizer(batch, "token-mean"))
    trained = batch.select(kept)
    with torch.no_grad():
        entropy = policy.score(trained.input_ids, trained.attention_mask, positions=trained.loss_mask, entropy=True)["entropy"]
    by_hand = float((entropy * trained.loss_mask).sum() / trained.loss_mask.sum())
    assert trained.num_tokens < batch.num_tokens, "the test needs skipped tokens"
    assert stats["entropy"] == pytest.approx(by_hand, rel=1e-5)


def test_scoring_only_the_generated_positions_matches_the_full_lm_head() -> None:
    policy = _policy(with_value=False)
    assert policy._selective_head, "a Llama's logits are lm_head(decoder(...)): the head can be restricted"
    batch = _batch(policy)
    selective = policy.score(batch.input_ids, batch.attention_mask, positions=batch.loss_mask, entropy=True)
    policy._selective_head = False  # the plain forward: logits at every position
    full = policy.score(batch.input_ids, batch.attention_mask, entropy=True)
    for name in ("logprobs", "entropy"):
        torch.testing.assert_close(selective[name], full[name] * batch.loss_mask)
    assert (full["logprobs"] * (1 - batch.loss_mask)).abs().sum() > 0, "the full pass scores the prompt too"


def test_autocast_choice() -> None:
    from llmgym_train.policy import choose_autocast

    assert choose_autocast("off", torch.float32) is None
    assert choose_autocast("bfloat16", torch.float32) is torch.bfloat16
    assert choose_autocast("auto", torch.bfloat16) is None, "bfloat16 parameters need no autocast"
    native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    assert choose_autocast("auto", torch.float32) is (torch.bfloat16 if native else None)



def _loaded_policy(folder: Path, **options: Any) -> Policy:
    from llmgym_train.config import ModelConfig

    return Policy.load(folder, ModelConfig(autocast="off", **options), with_value=False, with_reference=False)


def test_gradient_checkpointing_and_bfloat16_parameters_keep_the_float32_gradient(tmp_path: Path) -> None:
    """The GPU options run on CPU too: checkpointing is exact, bfloat16 close in direction."""
    from llmgym_train.testing import save_tiny_model

    folder = save_tiny_model(tmp_path / "tiny", seed=2)
    plain = _loaded_policy(folder, gradient_checkpointing=False)
    assert not plain.model.is_gradient_checkpointing
    batch = _batch(plain)
    loss = LossConfig(aggregation="token-mean")
    reference = _gradients(plain, batch, 4, loss, "grpo")
    checkpointed = _loaded_policy(folder, gradient_checkpointing=True)
    assert checkpointed.model.is_gradient_checkpointing
    torch.testing.assert_close(_gradients(checkpointed, batch, 4, loss, "grpo"), reference, rtol=1e-4, atol=1e-6)
    half = _loaded_policy(folder, dtype="bfloat16", gradient_checkpointing=False)
    assert next(half.model.parameters()).dtype == torch.bfloat16
    gradient = _gradients(half, batch, 4, loss, "grpo").float()
    cosine = torch.nn.functional.cosine_similarity(gradient, reference, dim=0)
    assert cosine > 0.95, f"bfloat16 gradient points elsewhere (cosine {cosine:.3f})"


# ---------------------------------------------------------------------- the run contract
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gymnasium as gym  # noqa: E402

from llmgym.core import Outcome, TextEnv  # noqa: E402
from llmgym.error import InvalidOptionError  # noqa: E402
from llmgym_train.cli import main  # noqa: E402
from llmgym_train.config import load_config  # noqa: E402
from llmgym_train.testing import save_tiny_model  # noqa: E402
from llmgym_train.trainer import CHECKPOINT_FILE, Trainer  # noqa: E402
from test_learning import ENV_ID as ENV_ID_SAY  # noqa: E402
from test_learning import first_character  # noqa: E402

NAN_ENV_ID = "llmgym-test/NanReward-v0"


class NanRewardEnv(TextEnv):
    """One step whose reward is NaN: a broken reward function, as the trainer must survive it."""

    def __init__(self) -> None:
        super().__init__(max_turns=1, action_parser=first_character, invalid_penalty=math.nan)

    @property
    def system_prompt(self) -> str:
        return "Say anything."

    def _reset_task(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return "go", {}

    def _apply(self, action: str) -> Outcome:
        return Outcome("done", reward=math.nan, terminated=True)

    def _observe(self) -> str:
        return "go"


class GradedCharEnv(NanRewardEnv):
    """One step rewarded by the first character's code, so every group has reward variance."""

    def _apply(self, action: str) -> Outcome:
        return Outcome("done", reward=(ord(action) % 7) / 7, terminated=True)


GRADED_ENV_ID = "llmgym-test/GradedChar-v0"
for env_id, entry_point in ((NAN_ENV_ID, NanRewardEnv), (GRADED_ENV_ID, GradedCharEnv)):
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=entry_point)


def _config(tmp_path: Path, model: Path, output: str, steps: int, *extra: str) -> Any:
    return load_config(overrides=[
        f"model={model}", f"train_envs={GRADED_ENV_ID}:2", f"steps={steps}", f"output={tmp_path / output}",
        "rollout.backend=hf", "rollout.group_size=4", "rollout.max_new_tokens=3", "rollout.max_model_len=64",
        "optim.lr=0.01", "optim.minibatch_size=4", "optim.micro_batch_size=2", "optim.ppo_epochs=2",
        "eval.disabled=true", "checkpoint_every=1", "progress=false", "threads=1", *extra,
    ])


def _run(config: Any, resume: bool = False) -> Any:
    with Trainer(config, resume=resume) as trainer:
        return trainer.train()


def _state(path: Path) -> dict[str, Any]:
    return torch.load(path / CHECKPOINT_FILE, weights_only=False)


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_resumed_run_reaches_the_state_of_an_uninterrupted_one(tmp_path: Path, algo: str) -> None:
    model = save_tiny_model(tmp_path / "model", seed=1)
    straight = _run(_config(tmp_path, model, "straight", 3, f"algo={algo}"))
    first_half = _run(_config(tmp_path, model, "resumed", 2, f"algo={algo}"))
    assert (straight.step, first_half.step) == (3, 2)
    resumed = _run(_config(tmp_path, model, "resumed", 3, f"algo={algo}"), resume=True)
    assert resumed.step == 3
    expected, got = _state(tmp_path / "straight"), _state(tmp_path / "resumed")
    assert got["step"] == expected["step"] == 3
    for name, tensor in expected["policy"]["weights"].items():
        torch.testing.assert_close(got["policy"]["weights"][name], tensor, rtol=0, atol=0, msg=name)
    if algo == "ppo":
        for name, tensor in expected["policy"]["value_head"].items():
            torch.testing.assert_close(got["policy"]["value_head"][name], tensor, rtol=0, atol=0)
    for index, moments in expected["optimizer"]["state"].items():
        for key, value in moments.items():
            torch.testing.assert_close(got["optimizer"]["state"][index][key], value, rtol=0, atol=0)
    assert torch.equal(got["torch_rng"], expected["torch_rng"])
    from safetensors.torch import load_file

    initial = load_file(model / "model.safetensors")  # the weights moved: the comparison above is not vacuous
    assert any(not torch.equal(initial[name], expected["policy"]["weights"][name]) for name in initial)
    steps = [line for line in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 3, "metrics.jsonl of the resumed run holds each step once"


def test_nan_loss_steps_are_skipped_counted_and_stop_the_run(tmp_path: Path) -> None:
    model = save_tiny_model(tmp_path / "model", seed=2)
    config = _config(tmp_path, model, "nan", 10, f"train_envs={NAN_ENV_ID}:2", "max_nan_steps=3")
    with Trainer(config) as trainer:
        before = {name: p.detach().clone() for name, p in trainer.policy.model.named_parameters()}
        summary = trainer.train()
        after = dict(trainer.policy.model.named_parameters())
    assert not summary.completed
    assert summary.step == 3 and summary.nan_steps == 3
    assert "3 steps in a row with a non-finite loss" in summary.stop_reason
    for name, tensor in before.items():
        assert torch.equal(after[name].detach(), tensor), f"{name} changed although every step was skipped"


def test_missing_model_fails_with_the_accepted_forms(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(InvalidOptionError, match="Unknown model '/nonexistent/model'"):
        Trainer(load_config(values={"model": "/nonexistent/model", "output": str(tmp_path / "out")}))
    assert not (tmp_path / "out").exists(), "nothing is written before the model resolves"
    code = main(["--model", str(tmp_path), "--output", str(tmp_path / "out2"), "eval.disabled=true"])
    assert code == 1
    assert "has no config.json" in capsys.readouterr().err


class InterruptEnv(NanRewardEnv):
    """Raises KeyboardInterrupt on its first step, as Ctrl-C in the middle of a rollout does."""

    def _apply(self, action: str) -> Outcome:
        raise KeyboardInterrupt


INTERRUPT_ENV_ID = "llmgym-test/Interrupt-v0"
if INTERRUPT_ENV_ID not in gym.registry:
    gym.register(INTERRUPT_ENV_ID, entry_point=InterruptEnv)


def test_interrupt_writes_checkpoint_and_curve(tmp_path: Path) -> None:
    model = save_tiny_model(tmp_path / "model", seed=4)
    summary = _run(_config(tmp_path, model, "interrupted", 5, f"train_envs={INTERRUPT_ENV_ID}:1"))
    assert not summary.completed and summary.stop_reason == "interrupted"
    assert summary.curve is not None and summary.curve.is_file()
    assert (tmp_path / "interrupted" / CHECKPOINT_FILE).is_file()


class TerminateEnv(NanRewardEnv):
    """Sends its own process SIGTERM on its first step, as ``kill PID`` does to a run in the background."""

    def _apply(self, action: str) -> Outcome:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.5)  # the handler runs in the main thread; this step may still finish
        return Outcome("done", 0.0, terminated=True)


TERMINATE_ENV_ID = "llmgym-test/Terminate-v0"
if TERMINATE_ENV_ID not in gym.registry:
    gym.register(TERMINATE_ENV_ID, entry_point=TerminateEnv)


def test_sigterm_stops_a_run_as_an_interrupt_and_the_handler_is_given_back(tmp_path: Path) -> None:
    model = save_tiny_model(tmp_path / "model", seed=4)
    before = signal.getsignal(signal.SIGTERM)
    summary = _run(_config(tmp_path, model, "terminated", 5, f"train_envs={TERMINATE_ENV_ID}:1"))
    assert not summary.completed and summary.stop_reason.startswith("interrupted")
    assert summary.step < 5 and (tmp_path / "terminated" / CHECKPOINT_FILE).is_file()
    assert signal.getsignal(signal.SIGTERM) == before


def test_mixture_with_filters_lora_and_kl_logs_per_env_metrics(tmp_path: Path) -> None:
    model = save_tiny_model(tmp_path / "model", seed=5)
    config = _config(
        tmp_path, model, "mixture", 2,
        f"train_envs=[{GRADED_ENV_ID}:2, {ENV_ID_SAY}:1]",
        "loss.group_keep_fraction=0.5",
        "loss.kl_coef=0.1", "loss.entropy_coef=0.01",
        "model_options.lora=true", "model_options.lora_rank=4", "model_options.lora_target_modules=[q_proj, v_proj]",
    )
    with Trainer(config) as trainer:
        base = {n: p.detach().clone() for n, p in trainer.policy.model.named_parameters() if "lora_" not in n}
        summary = trainer.train()
        changed_base = [n for n, p in trainer.policy.model.named_parameters() if n in base and not torch.equal(p, base[n])]
        merged = dict(trainer.policy.export_weights())
    assert summary.completed and summary.step == 2
    assert changed_base == [], "LoRA must leave the base weights untouched"
    assert not any("lora_" in name for name in merged) and "model.layers.0.self_attn.q_proj.weight" in merged
    import json

    records = [json.loads(line) for line in (tmp_path / "mixture" / "metrics.jsonl").read_text().splitlines()]
    train = [record for record in records if record["kind"] == "train"]
    assert len(train) == 2
    for record in train:
        assert f"success_rate/{GRADED_ENV_ID}" in record and f"success_rate/{ENV_ID_SAY}" in record
        assert record["groups_dropped"] == 1  # 3 groups, keep ceil(0.5 * 3) = 2
        assert record["samples"] == 8
        assert record["kl"] > 0.0, "the adapters move the policy off the reference within the step"
    from safetensors.torch import load_file

    exported = load_file(tmp_path / "mixture" / "model" / "model.safetensors")  # what llmgym-bench loads
    assert exported.keys() <= merged.keys() and "model.layers.0.self_attn.q_proj.weight" in exported
    for name, tensor in exported.items():
        assert torch.equal(tensor, merged[name]), f"{name}: model/ must hold the merged LoRA weights"


def test_void_turn_filter_drops_cut_off_generations(tmp_path: Path) -> None:
    model = save_tiny_model(tmp_path / "model", seed=6)
    # One token per turn: every generation is cut at the limit, so every sample is void.
    config = _config(tmp_path, model, "void", 1, "loss.filter_void_turns=true", "rollout.max_new_tokens=1")
    with Trainer(config) as trainer:
        before = {n: p.detach().clone() for n, p in trainer.policy.model.named_parameters()}
        trainer.train()
        unchanged = all(torch.equal(p, before[n]) for n, p in trainer.policy.model.named_parameters())
    import json

    record = json.loads((tmp_path / "void" / "metrics.jsonl").read_text().splitlines()[0])
    assert record["void_samples_dropped"] == 8 and record["samples"] == 0
    assert unchanged, "no sample survived the filter, so no update may happen"


def test_cli_runs_a_training_and_resumes_it_with_the_runs_own_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    import yaml

    model = save_tiny_model(tmp_path / "model", seed=7)
    output = str(tmp_path / "cli")
    assert main([
        "--env", f"{ENV_ID_SAY}:2", "--model", str(model), "--algo", "reinforce_pp", "--output", output, "--steps", "1",
        "rollout.backend=hf", "rollout.group_size=2", "rollout.max_new_tokens=2", "rollout.max_model_len=64",
        "eval.levels=4", "progress=false", "threads=1",
    ]) == 0
    printed = capsys.readouterr().out
    assert f"eval success {ENV_ID_SAY}: before" in printed and "learning_curve.png" in printed
    first = yaml.safe_load((tmp_path / "cli" / "config.yaml").read_text())
    # The README's line: nothing but the run folder (and what may change mid-run) on the command line.
    assert main(["--output", output, "--resume", "--steps", "2"]) == 0
    assert "finished at step 2" in capsys.readouterr().out
    resumed = yaml.safe_load((tmp_path / "cli" / "config.yaml").read_text())
    assert resumed == {**first, "steps": 2}, "the run's config, with only the new step count"
    # A key that would change what a step computes is refused, showing the difference; nothing is touched.
    assert main(["--output", output, "--resume", "--steps", "3", "--algo", "grpo", "rollout.group_size=4"]) == 2
    error = capsys.readouterr().err
    assert "algo: the run has 'reinforce_pp', the command line gives 'grpo'" in error
    assert "rollout.group_size: the run has 2, the command line gives 4" in error
    assert yaml.safe_load((tmp_path / "cli" / "config.yaml").read_text()) == resumed
    records = [json.loads(line) for line in (tmp_path / "cli" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["kind"]) for r in records] == [(0, "eval"), (1, "train"), (1, "eval"), (2, "train"), (2, "eval")]
    for name in ("config.yaml", "metrics.jsonl", "learning_curve.png", CHECKPOINT_FILE, "model/config.json"):
        assert (tmp_path / "cli" / name).is_file(), name
    assert any((tmp_path / "cli" / "tensorboard").iterdir())


def test_linear_schedule_logs_each_steps_learning_rate(tmp_path: Path) -> None:
    model = save_tiny_model(tmp_path / "model", seed=1)
    _run(_config(tmp_path, model, "run", 4, "optim.lr_schedule=linear", "optim.lr_final=0.2"))
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    logged = [record["lr"] for record in records if record["kind"] == "train"]
    # Step k (0-based) runs at progress k/4: from lr down toward lr * lr_final.
    assert logged == pytest.approx([0.01 * (0.2 + 0.8 * (1 - k / 4)) for k in range(4)])


def test_a_resumed_run_keeps_what_was_left_of_its_time_budget(tmp_path: Path) -> None:
    model = save_tiny_model(tmp_path / "model", seed=1)
    budget = ("max_minutes=0.001",)  # 60 ms: used up by the first step
    first = _run(_config(tmp_path, model, "run", 100, *budget))
    assert first.step == 1 and "time budget" in first.stop_reason
    assert _state(tmp_path / "run")["budget_used_s"] >= 0.06
    resumed = _run(_config(tmp_path, model, "run", 100, *budget), resume=True)
    assert resumed.step == 1, "the resumed run found its budget spent and trained no further step"
