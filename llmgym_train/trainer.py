"""The training loop, orchestration only: rollout -> advantages -> updates -> weight sync -> metrics.

Each step plays ``n_groups x group_size`` episodes per training env (group members share a
level), turns them into samples, filters them, computes advantages with the configured
algorithm, runs ``ppo_epochs`` passes of minibatch updates with gradient accumulation, and
pushes the new weights into the generator. The math lives in :mod:`llmgym_train.algorithms`,
the loss plumbing in :mod:`llmgym_train.update`; this module only decides the order.

Reproducibility: level seeds, sampling seeds and minibatch orders are all derived from
``(config.seed, step)`` by the episode planner (:mod:`llmgym_train.planner`), so a run resumed from a checkpoint at step ``k`` continues exactly
as the uninterrupted run would (the checkpoint also holds the optimizer and torch's RNG).

With ``trainer.mode=async`` the episodes come from a producer that keeps the engines
generating while this loop updates (:mod:`llmgym_train.async_loop`): a step takes its batch
once all of it has ended, trains it with the decoupled PPO objective (the tokens' sampling
versions are the behaviour policy, the weights at the update's start the proximal one), and
publishes the new weights without waiting for the engines to take them.

A run folder holds ``config.yaml``, ``checkpoint.pt`` (what resuming needs), ``model/`` (the
policy as a Hugging Face folder with its tokenizer, LoRA merged: what ``llmgym-bench
--agents checkpoint:<run>`` and ``--model <run>`` load), ``metrics.jsonl`` and TensorBoard
events. A process killed at any moment resumes to the uninterrupted run's state: every file
is replaced whole (written beside, then renamed; ``model/`` first, ``checkpoint.pt`` last),
the checkpoint records how many metric records it covers, and a resume drops the records
written after it and rebuilds the TensorBoard events from the rest, so no step is logged twice.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from llmgym.error import InvalidOptionError
from llmgym_train.agents import AgentConfig
from llmgym_train.async_loop import AsyncRollouts, staleness_metrics
from llmgym_train.algorithms import group_variance_keep, void_turn_keep, with_advantages
from llmgym_train.batching import Batch, collate
from llmgym_train.chat import ChatTokens
from llmgym_train.config import RUN_CONFIG_FILE, EnvSpec, TrainConfig, TreeConfig, build, check_resumable, save_config
from llmgym_train.data import Sample, Trajectory, make_samples
from llmgym_train.envs import EnvPool
from llmgym_train.episode import EpisodeStart
from llmgym_train.eval.policy import PlaySettings, PolicyEvaluation, evaluate_policy
from llmgym_train.generation import SamplingSpec, make_generator
from llmgym_train.metrics import LOG_FILE, METRICS_FILE, RunLog, episode_metrics, route_library_logs
from llmgym_train.models import RUN_MODEL_FOLDER, resolve_model
from llmgym_train.planner import (
    draws_seed, hold_out_evaluated_levels, plan_eval, plan_groups, sampling_seed, update_seed,
)
from llmgym_train.policy import Policy, same_context_rows
from llmgym_train.rollout import rollout as run_rollout
from llmgym_train.staleness import StalenessController
from llmgym_train.tree import played_work, tree_samples
from llmgym_train.update import normalizer, run_epochs, scheduled_lr, score_batch, with_signal

CHECKPOINT_FILE = "checkpoint.pt"
#: Tests set this to ``POINT@STEP`` to SIGKILL the process at that point of that step (see :func:`_kill_point`).
KILL_AT_VARIABLE = "LLMGYM_TRAIN_KILL_AT"


@dataclass
class RunSummary:
    """What a run did; ``describe()`` is what the CLI prints at the end."""

    output: Path
    step: int
    completed: bool
    stop_reason: str
    eval_before: dict[str, float] = field(default_factory=dict)
    eval_after: dict[str, float] = field(default_factory=dict)
    nan_steps: int = 0
    curve: Path | None = None

    def describe(self) -> str:
        lines = [f"Run {'finished' if self.completed else 'stopped'} at step {self.step} ({self.stop_reason})."]
        for env_id in sorted(set(self.eval_before) | set(self.eval_after)):
            before, after = self.eval_before.get(env_id), self.eval_after.get(env_id)
            lines.append(f"  eval success {env_id}: before {_percent(before)} -> after {_percent(after)}")
        if self.nan_steps:
            lines.append(f"  steps skipped for a non-finite loss: {self.nan_steps}")
        lines.append(f"  learning curve: {self.curve}")
        lines.append(f"  outputs: {self.output}")
        return "\n".join(lines)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


class Trainer:
    """Runs a :class:`TrainConfig`; use as a context manager so the generator is released.

    Arguments:
        config: the validated config.
        resume: continue the run in ``config.output`` from its ``checkpoint.pt`` (step counter,
            weights, optimizer, RNG); ``config`` may differ from the run's ``config.yaml`` only in
            :data:`~llmgym_train.config.RESUMABLE_KEYS`. A run killed before its first
            checkpoint starts again from step 0.
    """

    def __init__(self, config: TrainConfig, *, resume: bool = False) -> None:
        self.config = config
        # Training envs of a level space the run evaluates on seeds hold those levels out (the run's config says so).
        hold_out_evaluated_levels(config.train_envs, config.validation_envs, config.eval.levels, config.eval.use_eval_set)
        if config.threads:
            torch.set_num_threads(config.threads)
        self.model_folder = resolve_model(config.model)
        self.output = Path(config.output)
        checkpoint = self._read_checkpoint() if resume else None
        self.output.mkdir(parents=True, exist_ok=True)
        route_library_logs(self.output / LOG_FILE)
        if not resume:
            _clear_run(self.output)
        save_config(config, self.output / RUN_CONFIG_FILE)
        loss = config.loss
        self.policy = Policy.load(
            self.model_folder, config.model_options, with_value=config.algo == "ppo", with_reference=loss.kl_coef > 0
        )
        self.chat = ChatTokens(self.policy.tokenizer, response_prefix=config.rollout.response_prefix)
        #: ``rollout.choices`` as token ids: generation draws from them and the policy is scored over them.
        self.choice_ids = self.chat.choice_token_ids(config.rollout.choices)
        if self.choice_ids:
            self.policy.allowed_token_ids = torch.tensor(self.choice_ids)
            # The policy trained (loss.policy_temperature), by default the one the rollouts sample.
            self.policy.choice_temperature = config.loss.policy_temperature or config.rollout.temperature
        self.optimizer = torch.optim.AdamW(
            self.policy.trainable_parameters(), lr=config.optim.lr, weight_decay=config.optim.weight_decay
        )
        self.step = 0
        self.nan_steps = 0
        self.nan_streak = 0
        #: Seconds of the time budget used before this process's training loop began (a resumed run).
        self.budget_used_s = 0.0
        self._budget_started: float | None = None
        #: The step of the last logged evaluation (None: none yet).
        self.last_eval_step: int | None = None
        #: The episodes and metrics of this process's last evaluation (None: none yet).
        self.last_evaluation: PolicyEvaluation | None = None
        #: False from a step's first weight update until its metrics are logged: a checkpoint
        #: written then would hold half a step.
        self._consistent = True
        #: Seconds the engines spent generating and loading weights (sync; async counts in its producer),
        #: and (time, that count) at the end of the last step: the idle shares of a step come from both.
        self._engine_seconds, self._step_clock = 0.0, (time.perf_counter(), 0.0)
        #: ``trainer.mode=async``: a checkpoint's staleness state and ended, untrained episodes.
        self._async_state: dict[str, Any] | None = None
        if checkpoint is not None:
            self._restore(checkpoint)
        else:
            torch.manual_seed(config.seed)
        #: The vector envs every rollout of the run steps (Ray env actors when ``distributed`` says so).
        self.env_pool: EnvPool | None = EnvPool.from_config(config.distributed)
        #: The engines, and (``trainer.mode=async``) the producer that keeps them generating while this
        #: process updates (started by ``train``).
        self.generator, self.rollouts = self._make_engines()
        self.log = RunLog(
            self.output, config.steps, progress=config.progress, start_step=self.step, max_minutes=config.max_minutes,
            keep_records=None if checkpoint is None else _records_covered(checkpoint, self.output),
            mode=f"async, max staleness {config.trainer.max_staleness}" if config.trainer.is_async else "sync",
        )

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.log.close()
        if self.rollouts is not None:
            self.rollouts.close()
        if self.generator is not None:
            self.generator.close()
            self.generator = None
        if self.env_pool is not None:
            self.env_pool.close()
            self.env_pool = None

    def _make_engines(self) -> tuple[Any, AsyncRollouts | None]:
        self.generator: Any = None
        try:
            self.generator = self._make_generator()
            return self.generator, self._make_rollouts() if self.config.trainer.is_async else None
        except BaseException:
            if self.generator is not None:
                self.generator.close()
            assert self.env_pool is not None
            self.env_pool.close()
            raise

    def _make_generator(self) -> Any:
        rollout, is_async = self.config.rollout, self.config.trainer.is_async
        if self.config.distributed.enabled:  # Ray actors, synced now and after each update
            from llmgym_train.generation.ray_engines import RolloutEngines

            engines = RolloutEngines.from_config(self.config.distributed, rollout.backend, self.model_folder,
                                                 max_model_len=rollout.max_model_len, seed=self.config.seed)
            engines.update_weights(self.policy.export_weights())
            return engines
        if rollout.backend == "hf" and not is_async:
            from llmgym_train.generation.hf_backend import HfGenerator

            # The policy itself generates: no copy, no weight sync.
            return HfGenerator(self.policy.model, tokenizer=self.policy.tokenizer, max_model_len=rollout.max_model_len)
        # Asynchronous training generates while the policy trains: the engine holds a copy (published at start).
        generator = make_generator(
            rollout.backend, self.model_folder, max_model_len=rollout.max_model_len, seed=self.config.seed,
            own_process=rollout.backend == "vllm" and rollout.vllm_process == "own_process",
        )
        if not is_async and (self.step > 0 or self.policy.is_lora):
            generator.update_weights(self.policy.export_weights())
        return generator

    def _make_rollouts(self) -> AsyncRollouts:
        """The asynchronous producer over this run's generator and envs, with a checkpoint's state if resumed."""
        config = self.config
        if self._async_state is not None:
            controller = StalenessController.from_state(self._async_state["controller"])
            finished = self._async_state["finished"]
        else:
            controller = StalenessController(
                config.episodes_per_step, config.trainer.max_staleness, config.rollout.episodes_per_group
            )
            finished = {}
        if controller.version != self.step:
            raise InvalidOptionError(
                f"The checkpoint's staleness state is at policy version {controller.version}, its weights at step "
                f"{self.step}; the checkpoint is damaged. Resume from an intact run folder, or start a new run."
            )
        return AsyncRollouts(
            self.generator, self.chat, controller,
            plan=lambda step: plan_groups(config.train_envs, config.rollout.episodes_per_group, config.seed, step),
            agent_config=lambda step: self._agent_config(self._train_sampling(), sampling_seed(config.seed, step)),
            agent=config.rollout.agent, env_pool=self.env_pool, finished=finished,
        )

    # ------------------------------------------------------------------ the loop
    def train(self) -> RunSummary:
        """Train until ``config.steps``; evaluate before, every ``eval.every`` steps and at the end.

        Ctrl-C or SIGTERM (``kill PID``, a scheduler's stop; a run started in the background
        ignores SIGINT) stops the run as its last step ends: the checkpoint, the curve and the
        summary are written, and ``--resume`` continues it.
        """
        restore = _terminate_as_interrupt()
        try:
            return self._train()
        finally:
            restore()

    def _train(self) -> RunSummary:
        config = self.config
        stop_reason, completed = "reached the last step", True
        try:
            if self.step == 0 and self.last_eval_step is None:
                self.evaluate()
            # The budget counts training only, so a slow first evaluation cannot use it up; a
            # resumed run has what its checkpoint had left.
            self._budget_started = time.monotonic()
            self.log.start_budget(self.budget_used_s)
            if self.rollouts is not None and not self.rollouts.running:  # from here on the engines are its
                self.rollouts.start(self.policy.export_weights())
            self._step_clock = (time.perf_counter(), self._engine_busy())
            self.log.advance(self.step, None, self._last_eval_success())
            while self.step < config.steps:
                if config.max_minutes and self._budget_used() >= 60 * config.max_minutes:
                    stop_reason = f"time budget of {config.max_minutes:g} minutes used"
                    break
                metrics = self.train_step()
                _kill_point("step-logged", self.step)
                self.log.advance(
                    self.step, metrics.get("success_rate"), self._last_eval_success(), metrics.get("staleness/max")
                )
                if self.nan_streak >= config.max_nan_steps:
                    stop_reason, completed = f"{self.nan_streak} steps in a row with a non-finite loss", False
                    break
                if config.eval.every and self.step % config.eval.every == 0 and self.step < config.steps:
                    self.evaluate()
                if config.checkpoint_every and self.step % config.checkpoint_every == 0:
                    self.save_checkpoint()
            if completed and self.last_eval_step != self.step:
                self.evaluate()
        except KeyboardInterrupt:
            stop_reason, completed = "interrupted", False
        if self._consistent:
            self.save_checkpoint()
        else:  # interrupted inside an update: the last checkpoint stands
            stop_reason += f" during step {self.step + 1}; the checkpoint of an earlier step is kept"
        curve = self.log.plot()
        return RunSummary(
            output=self.output,
            step=self.step,
            completed=completed,
            stop_reason=stop_reason,
            eval_before=self._eval_at(first=True),
            eval_after=self._eval_at(first=False),
            nan_steps=self.nan_steps,
            curve=curve,
        )

    def _budget_used(self) -> float:
        """Seconds of the time budget used so far (evaluations after the first count)."""
        running = 0.0 if self._budget_started is None else time.monotonic() - self._budget_started
        return self.budget_used_s + running

    def progress(self) -> float:
        """How far the run is, 0 to 1: the larger of its steps and its time budget used (what the lr schedule reads)."""
        done = self.step / self.config.steps if self.config.steps else 0.0
        if self.config.max_minutes:
            done = max(done, self._budget_used() / (60 * self.config.max_minutes))
        return min(done, 1.0)

    def train_step(self) -> dict[str, Any]:
        """One batch of episodes and its update; returns the step's metrics (also logged)."""
        started = time.perf_counter()
        lr = scheduled_lr(self.config.optim, self.progress(), self.step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        trajectories, rollout_metrics = self._take_batch() if self.rollouts is not None else self.collect(self.step)
        self._consistent = False
        samples, filter_metrics = self._filtered_samples(trajectories)
        update_metrics: dict[str, Any] = {"samples": len(samples)}
        update_started = time.perf_counter()
        if samples:
            batch = self._prepare(samples)
            update_metrics.update(self._update(batch))
        self.step += 1
        sync_started = time.perf_counter()
        self._sync_weights()
        update_metrics["time/update_s"] = sync_started - update_started
        update_metrics["time/weight_sync_s"] = time.perf_counter() - sync_started
        metrics = {
            **rollout_metrics, **filter_metrics, **update_metrics, "lr": lr, "step_seconds": time.perf_counter() - started,
        }
        metrics.update(self._idle_metrics(metrics))
        self.log.log(self.step, "train", metrics)
        self._consistent = True
        return metrics

    def _idle_metrics(self, metrics: dict[str, Any]) -> dict[str, float]:
        """Shares of the wall time since the last step that the engines and the trainer idled.

        The engines are busy while generating or loading weights; the trainer while preparing
        and running its update (``async``: whenever it is not waiting for its batch).
        """
        if self.rollouts is None:
            self._engine_seconds += metrics.get("time/generation_s", 0.0) + metrics["time/weight_sync_s"]
        since, engine_before = self._step_clock
        now, engine = time.perf_counter(), self._engine_busy()
        self._step_clock = (now, engine)
        interval = max(now - since, 1e-9)
        trainer = interval - metrics["time/wait_s"] if self.rollouts is not None else metrics["time/update_s"]
        return {
            "time/engine_idle": min(max(1.0 - (engine - engine_before) / interval, 0.0), 1.0),
            "time/trainer_idle": min(max(1.0 - trainer / interval, 0.0), 1.0),
        }

    def _engine_busy(self) -> float:
        """Seconds the engines were busy so far: the producer's count (async), else the steps' generation and syncs."""
        return self.rollouts.busy_seconds() if self.rollouts is not None else self._engine_seconds

    # ------------------------------------------------------------------ rollout
    def collect(self, step: int) -> tuple[list[Trajectory], dict[str, Any]]:
        """Play this step's training episodes: each env's groups, group members on one level."""
        plan = plan_groups(self.config.train_envs, self.config.rollout.episodes_per_group, self.config.seed, step)
        rollout = self.config.rollout
        seed = sampling_seed(self.config.seed, step)
        tree = rollout.tree if rollout.tree.enabled else None
        trajectories, timing = self._play(plan.starts, self._train_sampling(), seed, tree=tree)
        timing.update(played_work(trajectories, timing["time/total_s"]))
        return trajectories, {**episode_metrics(trajectories, plan.labels), **timing}

    def _take_batch(self) -> tuple[list[Trajectory], dict[str, Any]]:
        """``async``: the producer's batch for this step (once its slowest episode ended), with its staleness."""
        assert self.rollouts is not None
        taken = self.rollouts.next_batch()
        assert taken.version == self.step, f"batch of version {taken.version} at step {self.step}"
        return taken.trajectories, {**episode_metrics(taken.trajectories, taken.labels), **staleness_metrics(taken)}

    def _train_sampling(self) -> SamplingSpec:
        rollout = self.config.rollout
        return SamplingSpec(
            max_tokens=rollout.max_new_tokens, temperature=rollout.temperature, top_p=rollout.top_p,
            stop=tuple(rollout.stop), allowed_token_ids=self.choice_ids,
        )

    def _agent_config(self, sampling: SamplingSpec, seed: int | None) -> AgentConfig:
        rollout, loss = self.config.rollout, self.config.loss
        return AgentConfig(
            sampling=sampling, max_turns=rollout.max_turns or None, max_context_tokens=rollout.max_model_len,
            sampling_seed=seed, lookahead=loss.credit == "lookahead", lookahead_turns=loss.lookahead_turns,
            lookahead_gamma=loss.step_gamma, lookahead_continuation=loss.lookahead_continuation,
            lookahead_rollouts=loss.lookahead_rollouts, constrain=rollout.constrain,
        )

    def _play(
        self, starts: list[EpisodeStart], sampling: SamplingSpec, sampling_seed: int | None, tree: TreeConfig | None = None
    ) -> tuple[list[Trajectory], dict[str, Any]]:
        rollout = self.config.rollout
        result = run_rollout(
            self.generator, self.chat, starts, agent=rollout.agent, config=self._agent_config(sampling, sampling_seed),
            env_pool=self.env_pool, tree=tree,
        )
        timing = {key: value for key, value in result.metrics.items() if key.startswith(("time/", "tokens/"))}
        timing["cut_turn_rate"] = result.metrics.get("cut_turn_rate", 0.0)
        return result.trajectories, timing

    # ------------------------------------------------------------------ samples and update
    def _filtered_samples(self, trajectories: list[Trajectory]) -> tuple[list[Sample], dict[str, Any]]:
        rollout, loss = self.config.rollout, self.config.loss
        history = None if rollout.history_turns < 0 else rollout.history_turns
        if rollout.tree.enabled:  # advantages over whole trees, before any sample is dropped
            samples = tree_samples(
                trajectories, rollout.layout, history, gamma=loss.step_gamma, normalize_std=loss.normalize_std,
                episode_weight=loss.tree_episode_weight,
            )
        else:
            choices = self.choice_ids if loss.credit == "lookahead" else None
            samples = make_samples(
                trajectories, rollout.layout, history, step_gamma=loss.step_gamma, choice_token_ids=choices,
                choice_target=loss.lookahead_target, choices_trained=loss.lookahead_choices,
                choice_draws=loss.lookahead_draws, seed=draws_seed(self.config.seed, self.step),
            )
        metrics: dict[str, Any] = {}
        if loss.group_keep_fraction < 1.0:
            kept_groups = self._informative_groups(trajectories)
            metrics["groups_dropped"] = len({t.group_id for t in trajectories}) - len(kept_groups)
            samples = [sample for sample in samples if sample.group_id in kept_groups]
        if loss.filter_void_turns:
            valid = torch.tensor([sample.actions_valid for sample in samples], dtype=torch.bool)  # (N,)
            cut_off = torch.tensor([sample.cut_off for sample in samples], dtype=torch.bool)  # (N,)
            keep = void_turn_keep(valid, cut_off).tolist()
            metrics["void_samples_dropped"] = len(samples) - sum(keep)
            samples = [sample for sample, kept in zip(samples, keep, strict=True) if kept]
        return samples, metrics

    def _informative_groups(self, trajectories: list[Trajectory]) -> set[int]:
        by_group: dict[int, list[float]] = {}
        for trajectory in trajectories:
            by_group.setdefault(trajectory.group_id, []).append(trajectory.episode_return)
        ids = sorted(by_group)
        width = max(len(rewards) for rewards in by_group.values())
        # Groups are equal-sized by construction; pad defensively with the group's mean.
        rows = [rewards + [float(np.mean(rewards))] * (width - len(rewards)) for rewards in (by_group[i] for i in ids)]
        keep = group_variance_keep(torch.tensor(rows), self.config.loss.group_keep_fraction)
        return {group for group, kept in zip(ids, keep.tolist(), strict=True) if kept}

    def _prepare(self, samples: list[Sample]) -> Batch:
        """Collate, rescore under the current weights, and attach advantages.

        Async: the engine's logprobs (collated into ``old_logprobs``) become the behaviour
        policy's, the versions that sampled the tokens; the weights at this update's start are
        the proximal policy of the decoupled objective, scored like a synchronous step's old ones.
        The same when ``loss.policy_temperature`` trains another temperature than the one sampled.
        """
        config = self.config
        batch = collate(samples, self.policy.pad_token_id)
        if self.rollouts is not None or config.trains_another_temperature:
            batch.behaviour_logprobs = batch.old_logprobs
        loss = config.loss
        single_update = config.optim.ppo_epochs == 1 and not 0 < config.optim.minibatch_size < len(batch)
        if single_update and config.algo != "ppo" and loss.kl_coef == 0:
            # One update on this data: its first forward pass gives the old (proximal) logprobs,
            # no separate scoring pass (a third of a step's compute) is needed.
            batch.old_logprobs = None
            return with_advantages(
                batch, config.algo, normalize_std=loss.normalize_std, gamma=loss.gamma, lam=loss.lam,
                credit=loss.credit, step_weight=loss.step_weight,
                episode_weight=loss.episode_weight,
            )
        scored = score_batch(
            self.policy, batch, config.optim.micro_batch_size, values=config.algo == "ppo",
            reference=loss.kl_coef > 0, max_tokens=config.update.micro_batch_tokens,
        )
        # The ratio's denominator is the trainer's own logprob of the sampled tokens: the
        # generator's numbers differ by its dtype and kernels, which would bias the clip.
        batch.old_logprobs = scored["logprobs"] * batch.loss_mask
        batch.ref_logprobs = scored.get("ref_logprobs")
        return with_advantages(
            batch, config.algo, normalize_std=loss.normalize_std, gamma=loss.gamma, lam=loss.lam,
            values=scored.get("values"), credit=loss.credit, step_weight=loss.step_weight,
            episode_weight=loss.episode_weight,
        )

    def _update(self, batch: Batch) -> dict[str, Any]:
        config = self.config
        self.policy.train()
        generator = torch.Generator().manual_seed(update_seed(config.seed, self.step))
        divisor, without_signal = None, 0
        if batch.old_logprobs is None and config.loss.entropy_coef == 0:
            # A single on-policy update: samples without advantage add no gradient (update.with_signal).
            divisor = normalizer(batch, config.loss.aggregation)
            kept = with_signal(batch)
            without_signal = len(batch) - len(kept)
            batch = batch.select(kept)
        result = run_epochs(
            self.policy, self.optimizer, batch, optim=config.optim, loss=config.loss, algo=config.algo,
            generator=generator, divisor=divisor, max_tokens=config.update.micro_batch_tokens,
            release_memory=config.update.release_memory,
        )
        self.nan_steps += int(result.non_finite)
        self.nan_streak = self.nan_streak + 1 if result.non_finite else 0
        contexts = len(same_context_rows(batch.input_ids, batch.attention_mask)[0]) if len(batch) else 0
        return {
            **result.means, "updates": result.updates, "skipped_non_finite": int(result.non_finite),
            "nan_steps_total": self.nan_steps, "samples_without_signal": without_signal,
            "samples_trained": len(batch), "contexts_trained": contexts,
        }

    def _sync_weights(self) -> None:
        if self.rollouts is not None:  # handed over now, loaded by the producer between two engine calls
            self.rollouts.publish(self.policy.export_weights(), self.step)
        elif self.config.rollout.backend != "hf" or self.config.distributed.enabled:
            self.generator.update_weights(self.policy.export_weights())

    # ------------------------------------------------------------------ evaluation
    def evaluate(self) -> dict[str, float]:
        """Greedy success rate on the first ``eval.levels`` levels of each validation env's eval set.

        The episodes are played by :func:`~llmgym_train.eval.policy.evaluate_policy`, the loop a
        leaderboard row of this run (``llmgym-bench --agents checkpoint:<run>``) plays too; the
        last evaluation's episodes stay in :attr:`last_evaluation`.
        """
        config = self.config
        if config.eval.disabled:
            return {}
        self.log.status(f"step {self.step}: evaluating")
        plan = plan_eval(config.validation_envs, config.eval.levels, config.eval.use_eval_set)
        settings = PlaySettings.of_run(config.rollout, config.eval)
        # Async: the evaluation's episodes join the producer's stream, on the weights published last.
        play = self.rollouts.play if self.rollouts is not None and self.rollouts.running else None
        self.last_evaluation = evaluate_policy(
            self.generator, self.chat, settings, plan.starts, plan.labels, env_pool=self.env_pool, play=play
        )
        metrics = self.last_evaluation.metrics
        self.log.log(self.step, "eval", metrics)
        self.last_eval_step = self.step
        return {spec.label: metrics[f"success_rate/{spec.label}"] for spec in config.validation_envs}

    def _last_eval_success(self) -> float | None:
        evals = [r for r in self.log.records if r["kind"] == "eval"]
        return evals[-1]["success_rate"] if evals else None

    def _eval_at(self, first: bool) -> dict[str, float]:
        evals = [r for r in self.log.records if r["kind"] == "eval"]
        if not evals:
            return {}
        record = evals[0] if first else evals[-1]
        return {key.split("/", 1)[1]: value for key, value in record.items() if key.startswith("success_rate/")}

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self) -> Path:
        """Write ``output/model/``, then ``output/checkpoint.pt`` (weights, optimizer, RNG, counters), each atomically."""
        self.export_model()
        state = {
            "step": self.step,
            "nan_steps": self.nan_steps,
            "nan_streak": self.nan_streak,
            "last_eval_step": self.last_eval_step,
            "budget_used_s": self._budget_used(),
            "metrics_records": len(self.log.records),
            "policy": self.policy.trainable_state(),
            "optimizer": self.optimizer.state_dict(),
            "torch_rng": torch.get_rng_state(),
        }
        if self.rollouts is not None:  # the staleness state and the ended, untrained episodes
            if self.rollouts.running:
                self.rollouts.wait_published(self.step)
            state["async"] = self.rollouts.state_dict()
        path = self.output / CHECKPOINT_FILE
        staging = path.with_suffix(".tmp")
        torch.save(state, staging)
        _kill_point("checkpoint-staged", self.step)
        os.replace(staging, path)
        return path

    def export_model(self) -> Path:
        """``output/model/``: the policy as a Hugging Face folder with its tokenizer, replaced whole.

        The new folder is written beside the old one and renamed into place; between the two
        renames only ``model.old/`` exists, which :func:`~llmgym_train.models.resolve_model` reads.
        """
        target = self.output / RUN_MODEL_FOLDER
        staging, previous = target.with_name(f"{target.name}.tmp"), target.with_name(f"{target.name}.old")
        shutil.rmtree(staging, ignore_errors=True)
        self.policy.save_pretrained(staging)
        _kill_point("model-staged", self.step)
        if target.exists():
            shutil.rmtree(previous, ignore_errors=True)
            os.rename(target, previous)
        _kill_point("model-moved-aside", self.step)
        os.rename(staging, target)
        shutil.rmtree(previous, ignore_errors=True)
        return target

    def _read_checkpoint(self) -> dict[str, Any] | None:
        """The run's checkpoint (None: killed before its first one), after checking the config may resume it."""
        config_file = self.output / RUN_CONFIG_FILE
        path = self.output / CHECKPOINT_FILE
        if not config_file.is_file():
            raise InvalidOptionError(
                f"--resume found no run in {str(self.output)!r} (no {RUN_CONFIG_FILE}); run without --resume "
                "first, or pass the --output folder of the run to continue."
            )
        import yaml

        check_resumable(build(TrainConfig, yaml.safe_load(config_file.read_text()) or {}), self.config)
        return torch.load(path, weights_only=False) if path.is_file() else None

    def _restore(self, state: dict[str, Any]) -> None:
        self.policy.load_trainable_state(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        self.step = int(state["step"])
        self.nan_steps = int(state["nan_steps"])
        self.nan_streak = int(state["nan_streak"])
        self.last_eval_step = state.get("last_eval_step", self.step)
        self.budget_used_s = float(state.get("budget_used_s", 0.0))
        self._async_state = state.get("async")


def _terminate_as_interrupt() -> Callable[[], None]:
    """Make SIGTERM raise KeyboardInterrupt, once, in this (main) thread; returns what restores the handler before."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the checkpoint written after it is not cut short
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    return lambda: signal.signal(signal.SIGTERM, previous)


def _kill_point(name: str, step: int) -> None:
    """SIGKILL this process here when ``$LLMGYM_TRAIN_KILL_AT`` is ``name@step``: how tests kill a run mid-write."""
    if os.environ.get(KILL_AT_VARIABLE) == f"{name}@{step}":
        os.kill(os.getpid(), signal.SIGKILL)


def _clear_run(output: Path) -> None:
    """A new run in ``output`` replaces the files of an earlier one there, so a later --resume cannot mix them."""
    checkpoint = output / CHECKPOINT_FILE
    for path in (checkpoint, checkpoint.with_suffix(".tmp")):
        path.unlink(missing_ok=True)
    for suffix in ("", ".tmp", ".old"):
        shutil.rmtree(output / f"{RUN_MODEL_FOLDER}{suffix}", ignore_errors=True)


def _records_covered(state: dict[str, Any], output: Path) -> int:
    """Metric records the checkpoint covers; older checkpoints did not count them: those up to its step."""
    if "metrics_records" in state:
        return int(state["metrics_records"])
    path = output / METRICS_FILE
    covered = 0
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            covered += json.loads(line)["step"] <= int(state["step"])
        except json.JSONDecodeError:  # the last line, cut off by the kill
            break
    return covered


__all__ = ["RunSummary", "Trainer"]
