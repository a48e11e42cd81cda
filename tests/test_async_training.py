"""``trainer.mode=async`` on the tiny model: the staleness bound under random delays, across a resume; versions per token.

The run is real: the trainer, the producer thread, the hf engine (its own copy of the
weights), the vector envs. Random delays are injected into every ``generate`` call and every
update, so generation and training overlap differently in every run. The checks read the
trained episodes' own token versions, not the controller's bookkeeping: no trained token
lags the policy its update starts from by more than ``max_staleness``, none comes from the
future, and batch ``t`` is exactly step ``t``'s planned episodes, each played to its level's
length, before and after the run is stopped and resumed.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import torch

from llmgym.core import Outcome, TextEnv
from llmgym.error import InvalidOptionError
from llmgym_train.config import load_config
from llmgym_train.data import Trajectory
from llmgym_train.generation.base import Completion, SamplingSpec
from llmgym_train.generation.hf_backend import HfGenerator
from llmgym_train.planner import EnvSpec, plan_groups
from llmgym_train.staleness import NOT_SAMPLED
from llmgym_train.testing import save_tiny_model
from llmgym_train.trainer import CHECKPOINT_FILE, Trainer

TURNS_ENV_ID = "llmgym-test/Turns-v0"
GROUPS, GROUP_SIZE = 2, 2


class TurnsEnv(TextEnv):
    """An episode of 2 to 5 turns, as many as its level says; each turn is rewarded by its first character's code.

    Episodes of several turns span policy versions; levels of different lengths show whether
    training favours short episodes.
    """

    def __init__(self, *, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode, action_parser=lambda text: text, invalid_penalty=0.0)
        self._turns, self._played = 2, 0

    @property
    def system_prompt(self) -> str:
        return "Go."

    def _reset_task(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self._turns, self._played = int(self.np_random.integers(2, 6)), 0
        return self._observe(), {"turns": self._turns}

    def _apply(self, action: str) -> Outcome:
        self._played += 1
        reward = (ord(action[0]) % 7) / 7 if action else 0.0
        return Outcome(self._observe(), reward=reward, terminated=self._played >= self._turns)

    def _observe(self) -> str:
        return str(self._turns - self._played)


class BrokenEnv(TurnsEnv):
    """Fails on its first step, as an env with a bug does."""

    def _apply(self, action: str) -> Outcome:
        raise RuntimeError("the env broke")


BROKEN_ENV_ID = "llmgym-test/Broken-v0"
for env_id, entry_point in ((TURNS_ENV_ID, TurnsEnv), (BROKEN_ENV_ID, BrokenEnv)):
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=entry_point)


def level_turns(seed: int) -> int:
    return gym.make(TURNS_ENV_ID).reset(seed=seed)[1]["turns"]


def _config(tmp_path: Path, model: Path, steps: int, max_staleness: int, *extra: str) -> Any:
    return load_config(overrides=[
        f"model={model}", f"train_envs={TURNS_ENV_ID}:{GROUPS}", f"steps={steps}", f"output={tmp_path / 'run'}",
        "trainer.mode=async", f"trainer.max_staleness={max_staleness}",
        "rollout.backend=hf", f"rollout.group_size={GROUP_SIZE}", "rollout.max_new_tokens=3", "rollout.max_model_len=512",
        "optim.lr=0.01", "optim.micro_batch_size=4", "eval.disabled=true", "checkpoint_every=0", "progress=false",
        "threads=1", *extra,
    ])


def _run(config: Any, resume: bool = False) -> Any:
    with Trainer(config, resume=resume) as trainer:
        return trainer.train()


def inject_delays(monkeypatch: pytest.MonkeyPatch, seed: int, trained: list[tuple[int, list[Trajectory]]]) -> None:
    """Random sleeps before every generate call (producer thread) and every update (trainer); record each trained batch.

    Generation is the slower half, as on a machine whose engine is busy: new versions then
    arrive while episodes are in flight, between two of their turns.
    """
    rng = random.Random(seed)
    generate, update, filtered = HfGenerator.generate, Trainer._update, Trainer._filtered_samples

    def slow_generate(self: HfGenerator, prompts: Any, sampling: Any) -> list[Completion]:
        time.sleep(rng.uniform(0.05, 0.3))
        return generate(self, prompts, sampling)

    def slow_update(self: Trainer, batch: Any) -> dict[str, Any]:
        time.sleep(rng.uniform(0.0, 0.1))
        return update(self, batch)

    def recorded(self: Trainer, trajectories: list[Trajectory]) -> Any:
        trained.append((self.step, list(trajectories)))
        return filtered(self, trajectories)

    monkeypatch.setattr(HfGenerator, "generate", slow_generate)
    monkeypatch.setattr(Trainer, "_update", slow_update)
    monkeypatch.setattr(Trainer, "_filtered_samples", recorded)


def replay_finished_episodes(checkpoint: Path) -> None:
    """Edit the checkpoint as if every ended, untrained episode had still been in flight: a resume plays them again."""
    state = torch.load(checkpoint, weights_only=False)
    controller = state["async"]["controller"]
    running = dict(controller["running"])
    running.update({ticket: version for ticket, version in controller["finished"]})
    controller["running"], controller["finished"] = sorted(running.items()), []
    state["async"]["finished"] = {}
    torch.save(state, checkpoint)


def check_batches(trained: list[tuple[int, list[Trajectory]]], max_staleness: int, seed: int) -> None:
    """The bound from the tokens themselves; batch t is step t's plan, each episode played to its level's end."""
    for version, trajectories in trained:
        for trajectory in trajectories:
            assert trajectory.policy_versions is not None, "every generated token carries its version"
            sampled = [v for v, mask in zip(trajectory.policy_versions, trajectory.loss_mask) if mask]
            assert NOT_SAMPLED not in sampled
            assert version - min(sampled) <= max_staleness, (version, trajectory.policy_versions)
            assert max(sampled) <= version, "no token from a policy newer than the one trained"
        plan = plan_groups([EnvSpec(TURNS_ENV_ID, GROUPS)], GROUP_SIZE, seed, version)
        assert [(t.seed, t.group_id, t.episode_index) for t in trajectories] == [
            (start.seed, start.group_id, start.episode_index) for start in plan.starts
        ], f"batch {version} is not step {version}'s planned episodes"
        for trajectory in trajectories:  # an invalid reply (a character outside the env's charset) plays no turn
            played = sum(turn.action_is_valid for turn in trajectory.turns)
            assert trajectory.end_reason == "terminated" and played == level_turns(trajectory.seed)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("max_staleness", "delay_seed", "replay_finished"), [(1, 0, False), (2, 1, True), (0, 2, False), (1, 3, True)]
)
def test_no_trained_token_lags_more_than_max_staleness_under_random_delays_before_and_after_a_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_staleness: int, delay_seed: int, replay_finished: bool
) -> None:
    trained: list[tuple[int, list[Trajectory]]] = []
    inject_delays(monkeypatch, delay_seed, trained)
    model = save_tiny_model(tmp_path / "model", seed=3)
    first = _run(_config(tmp_path, model, 4, max_staleness))
    assert first.completed and first.step == 4
    checkpoint = tmp_path / "run" / CHECKPOINT_FILE
    saved = torch.load(checkpoint, weights_only=False)["async"]
    assert saved["controller"]["version"] == 4 and saved["controller"]["consumed"] == 4 * GROUPS * GROUP_SIZE
    pending = [ticket for ticket, _ in saved["controller"]["running"]] + sorted(saved["finished"])
    if max_staleness:
        assert pending, "the producer was generating later batches when the run stopped"
        assert all(ticket >= 4 * GROUPS * GROUP_SIZE for ticket in pending)
    if replay_finished:
        replay_finished_episodes(checkpoint)
    resumed = _run(_config(tmp_path, model, 8, max_staleness), resume=True)
    assert resumed.completed and resumed.step == 8
    assert [version for version, _ in trained] == list(range(8)), "each batch trained once, in order"
    check_batches(trained, max_staleness, seed=0)
    spanning = [t for _, batch in trained for t in batch if len({v for v in t.policy_versions if v >= 0}) > 1]
    if max_staleness:
        assert spanning, "some episode started under one version finished under a later one (a partial rollout)"
    else:
        assert not spanning


@pytest.mark.slow
def test_async_steps_log_their_staleness_and_idle_shares_and_the_progress_line_says_async(tmp_path: Path) -> None:
    import json

    model = save_tiny_model(tmp_path / "model", seed=4)
    with Trainer(_config(tmp_path, model, 3, 1)) as trainer:
        trainer.train()
        line = trainer.log.progress_text(3, 0.5, None, 1.0)
        lengths = trainer.rollouts.generated_lengths
    assert line.startswith("step 3/3 [async, max staleness 1]") and line.endswith("staleness 1")
    records = [json.loads(text) for text in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [record for record in records if record["kind"] == "train"]
    assert [record["policy_version"] for record in train] == [0, 1, 2]
    for record in train:
        assert 0 <= record["staleness/max"] <= 1 and 0 <= record["time/engine_idle"] <= 1 and 0 <= record["time/trainer_idle"] <= 1
        assert "time/wait_s" in record and "behaviour_weight_mean" in record  # the decoupled objective ran
    assert len(lengths) >= 3 * GROUPS * GROUP_SIZE


def test_a_failure_in_the_producer_stops_the_trainer_with_its_cause(tmp_path: Path) -> None:
    from llmgym.error import SubEnvError
    from llmgym_train.async_loop import ProducerFailed

    model = save_tiny_model(tmp_path / "model", seed=5)
    with pytest.raises(ProducerFailed, match="the env broke") as raised:
        _run(_config(tmp_path, model, 2, 1, f"train_envs={BROKEN_ENV_ID}:1"))
    assert isinstance(raised.value.__cause__, SubEnvError)


def test_async_config_is_checked_before_anything_loads() -> None:
    with pytest.raises(InvalidOptionError, match="Did you mean 'async'"):
        load_config(overrides=["trainer.mode=asynch"])
    with pytest.raises(InvalidOptionError, match="max_staleness counts policy versions"):
        load_config(overrides=["trainer.max_staleness=-1"])
    with pytest.raises(InvalidOptionError, match="tree rollouts"):
        load_config(overrides=[
            "trainer.mode=async", "rollout.tree.branch_turns=[0]", "rollout.tree.branches=2", "rollout.group_size=2",
            "loss.credit=tree",
        ])
    with pytest.raises(InvalidOptionError, match="behaviour_cap"):
        load_config(overrides=["loss.behaviour_cap=0"])


def test_hf_engine_stamps_each_completion_with_the_published_version(char_tokenizer: Any, random_tiny_model: Any) -> None:
    from llmgym_train.testing import tiny_model

    generator = HfGenerator(random_tiny_model, tokenizer=char_tokenizer, max_model_len=64)
    prompt = char_tokenizer.encode("Go.")
    sampling = SamplingSpec(max_tokens=4, temperature=1.0, seed=1)
    assert generator.generate([prompt], sampling)[0].policy_versions is None, "no version before the first publish"
    other = tiny_model(len(char_tokenizer), seed=9)
    generator.publish(other.state_dict().items(), 7)
    completion = generator.generate([prompt], sampling)[0]
    assert completion.policy_versions == (7,) * len(completion.token_ids)
    assert torch.equal(random_tiny_model.model.embed_tokens.weight, other.model.embed_tokens.weight)


def test_the_decoupled_update_with_behaviour_equal_to_proximal_is_ppos() -> None:
    """Fresh samples (the behaviour policy is the proximal one) give the synchronous update's gradient exactly."""
    from llmgym_train.config import LossConfig
    from test_trainer import _batch, _gradients, _policy

    policy = _policy(with_value=False)
    batch = _batch(policy)
    loss = LossConfig(behaviour_cap=2.0)
    plain = _gradients(policy, batch, 3, loss, "grpo")
    batch.behaviour_logprobs = batch.old_logprobs.clone()
    decoupled = _gradients(policy, batch, 3, loss, "grpo")
    torch.testing.assert_close(decoupled, plain, rtol=1e-5, atol=1e-7)
    batch.behaviour_logprobs = batch.old_logprobs - 5.0 * batch.loss_mask  # pi_prox / mu = e^5: truncated at the cap
    capped = _gradients(policy, batch, 3, loss, "grpo")
    torch.testing.assert_close(capped, 2.0 * plain, rtol=1e-4, atol=1e-7)


@pytest.mark.vllm
@pytest.mark.slow
def test_async_training_on_an_in_process_vllm_engine_keeps_the_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The producer thread steps vLLM's in-process engine; versions arrive between decode steps, mid-completion."""
    trained: list[tuple[int, list[Trajectory]]] = []
    filtered = Trainer._filtered_samples

    def recorded(self: Trainer, trajectories: list[Trajectory]) -> Any:
        trained.append((self.step, list(trajectories)))
        return filtered(self, trajectories)

    monkeypatch.setattr(Trainer, "_filtered_samples", recorded)
    model = save_tiny_model(tmp_path / "model", seed=3, num_heads=2)  # heads vLLM's CPU attention takes
    config = _config(tmp_path, model, 4, 1, "rollout.backend=vllm", "rollout.max_new_tokens=24")
    summary = _run(config)
    assert summary.completed and [version for version, _ in trained] == [0, 1, 2, 3]
    check_batches(trained, max_staleness=1, seed=0)
