"""The rollout benchmark's references play what llmgym's rollout plays: the same requests, tokens, episodes.

``benchmarks/rollout_throughput.py`` divides llmgym's tokens/s by the turn-synchronous
pattern's and by the engine-only replay's; the figures compare like with like only if, for
the same plan and seeds, the turn-synchronous loop plays the very same episodes and the replay
asks the engine for the very same prompts and token counts. The tiny model samples each
request from its own seed (hf backend), so the same seeds give the same tokens in any batch.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from benchmarks.rollout_patterns import (
    GeneratorReplay,
    RecordedEnvs,
    replay,
    replay_plan,
    turn_synchronous_replay,
    turn_synchronous_rollout,
)
from benchmarks.rollout_throughput import (
    PATTERNS,
    WORKLOADS,
    EngineSteps,
    round_orders,
    schedule_bound,
    summarize,
)
from llmgym_train.agents import AgentConfig
from llmgym_train.chat import ChatTokens
from llmgym_train.data import Trajectory
from llmgym_train.envs import EnvPool
from llmgym_train.generation import Completion, SamplingSpec
from llmgym_train.generation.hf_backend import HfGenerator
from llmgym_train.planner import EnvSpec, group_episodes
from llmgym_train.rollout import RolloutResult, rollout

#: Two envs, groups of two: FrozenLake for up to 3 turns, Sokoban for up to 2.
MIXTURE = [EnvSpec("llmgym/FrozenLake-v0", 2, {"max_turns": 3}), EnvSpec("llmgym/Sokoban-v0", 1, {"max_turns": 2})]
CONFIG = AgentConfig(sampling=SamplingSpec(max_tokens=8, temperature=1.0), max_turns=3,
                     max_context_tokens=1024, sampling_seed=11)


class RecordingGenerator:
    """A generator that passes every call on and keeps each batch's prompts and completions."""

    def __init__(self, generator: HfGenerator) -> None:
        self.generator = generator
        self.eos_token_ids = generator.eos_token_ids
        self.max_model_len = generator.max_model_len
        self.batches: list[list[tuple[list[int], Completion]]] = []

    def generate(self, prompts: Sequence[Sequence[int]], sampling: Any) -> list[Completion]:
        completions = self.generator.generate(prompts, sampling)
        self.batches.append([(list(prompt), completion) for prompt, completion in zip(prompts, completions)])
        return completions

    def prompts(self) -> list[list[int]]:
        return [prompt for batch in self.batches for prompt, _ in batch]


class ScriptedReplay:
    """A replay engine that answers each request with the tokens the rollout generated for that turn."""

    def __init__(self, trajectories: Sequence[Trajectory], newest_first: bool = False) -> None:
        self.trajectories = trajectories
        self.newest_first = newest_first
        self.prompts: list[list[int]] = []
        self.turns: list[int] = []
        self._finished: list[tuple[str, tuple[int, ...]]] = []

    def submit(self, request_id: str, prompt: Sequence[int], length: int) -> None:
        episode, turn = (int(part) for part in request_id.split(":"))
        played = self.trajectories[episode].turns[turn]
        self.prompts.append(list(prompt))
        self.turns.append(turn)
        generated = self.trajectories[episode].token_ids[played.start : played.end]
        self._finished.append((request_id, tuple(generated)))

    def poll(self) -> list[tuple[str, tuple[int, ...]]]:
        """Every request submitted so far; ``newest_first``: only the latest one (a request that overtakes)."""
        if self.newest_first:
            return [self._finished.pop()] if self._finished else []
        finished, self._finished = self._finished, []
        return finished


def llmgym_rollout(generator: RecordingGenerator, chat: ChatTokens, pool: EnvPool) -> RolloutResult:
    return rollout(generator, chat, group_episodes(MIXTURE, group_size=2, seed=7), config=CONFIG, env_pool=pool)


def view(trajectory: Trajectory) -> tuple[Any, ...]:
    """Everything of an episode that its training data and its metrics read."""
    turns = [(t.start, t.end, t.reward, t.action_is_valid, t.finish_reason) for t in trajectory.turns]
    return (trajectory.token_ids, trajectory.loss_mask, turns, trajectory.end_reason, trajectory.success,
            trajectory.seed, trajectory.env_id)


def test_the_turn_synchronous_loop_plays_the_rollouts_episodes_one_batch_a_turn(
    random_tiny_model: Any, char_tokenizer: Any
) -> None:
    chat, pool = ChatTokens(char_tokenizer), EnvPool("inline")
    try:
        ours = llmgym_rollout(RecordingGenerator(HfGenerator(random_tiny_model, tokenizer=char_tokenizer)), chat,
                              pool)
        generator = RecordingGenerator(HfGenerator(random_tiny_model, tokenizer=char_tokenizer))
        episodes = group_episodes(MIXTURE, group_size=2, seed=7)
        theirs = turn_synchronous_rollout(generator, chat, episodes, config=CONFIG, env_pool=pool)
    finally:
        pool.close()
    assert [view(t) for t in theirs.trajectories] == [view(t) for t in ours.trajectories]
    assert theirs.metrics["tokens/generated"] == ours.metrics["tokens/generated"] > 0
    turns = [len(t.turns) for t in ours.trajectories]
    assert len(set(turns)) > 1, "episodes of different lengths, so the live batch shrinks"
    live_per_turn = [sum(count > turn for count in turns) for turn in range(max(turns))]
    assert [len(batch) for batch in generator.batches] == live_per_turn, "one generate call a turn, all live"


@contextmanager
def recorded_rollout(model: Any, tokenizer: Any) -> Iterator[tuple[RecordingGenerator, RolloutResult, EnvPool]]:
    """llmgym's rollout of the mixture on an inline pool, kept open for the block: its generator, result, pool."""
    chat, pool = ChatTokens(tokenizer), EnvPool("inline")
    generator = RecordingGenerator(HfGenerator(model, tokenizer=tokenizer))
    try:
        yield generator, llmgym_rollout(generator, chat, pool), pool
    finally:
        pool.close()


def test_the_replay_asks_for_the_rollouts_prompts_and_token_counts(
    random_tiny_model: Any, char_tokenizer: Any
) -> None:
    with recorded_rollout(random_tiny_model, char_tokenizer) as (generator, ours, _):
        plan = replay_plan(ours.trajectories)
    turns = sum(len(t.turns) for t in ours.trajectories)
    # Answered with the rollout's own tokens, the replay asks exactly what the rollout asked.
    scripted = ScriptedReplay(ours.trajectories)
    played = replay(scripted, plan)
    assert sorted(scripted.prompts) == sorted(generator.prompts())
    assert played.requests == turns and played.generated_tokens == ours.metrics["tokens/generated"]
    # Answered by the model, every turn still generates exactly its recorded number of tokens.
    model = HfGenerator(random_tiny_model, tokenizer=char_tokenizer)
    engine = GeneratorReplay(model, CONFIG.sampling, len(char_tokenizer))
    played = replay(engine, plan)
    assert played.requests == turns and played.generated_tokens == ours.metrics["tokens/generated"]
    assert played.episodes == len(ours.trajectories)


def test_the_turn_synchronous_replay_waits_for_every_turn_and_replays_the_recorded_actions(
    random_tiny_model: Any, char_tokenizer: Any
) -> None:
    with recorded_rollout(random_tiny_model, char_tokenizer) as (generator, ours, pool):
        plan = replay_plan(ours.trajectories)
        free = ScriptedReplay(ours.trajectories, newest_first=True)
        replay(free, plan)
        envs = RecordedEnvs(pool, group_episodes(MIXTURE, group_size=2, seed=7), ours.trajectories)
        lockstep = ScriptedReplay(ours.trajectories, newest_first=True)
        played = turn_synchronous_replay(lockstep, plan, envs)
    assert sorted(lockstep.prompts) == sorted(generator.prompts())
    assert played.generated_tokens == ours.metrics["tokens/generated"] and played.episodes == len(plan)
    # The free replay lets an episode's next turn overtake others' current turns; lockstep never does.
    assert free.turns != sorted(free.turns) and lockstep.turns == sorted(lockstep.turns)
    turns = [len(t.turns) for t in ours.trajectories]
    assert len(envs.outcomes) == max(turns), "one env step a turn"
    # The recorded actions replayed on the reset envs earn the recorded rewards, turn by turn.
    live = [[episode for episode, count in enumerate(turns) if count > turn] for turn in range(max(turns))]
    rewards = [[outcome[1] for outcome in step] for step in envs.outcomes]
    assert rewards == [[ours.trajectories[episode].turns[turn].reward for episode in episodes]
                       for turn, episodes in enumerate(live)]


def test_llmgym_opens_every_round_and_ratios_are_taken_within_a_round() -> None:
    orders = round_orders(3)
    assert all(order[0] == "llmgym" for order in orders), "a round's replays replay its own llmgym pass"
    assert all(sorted(order) == sorted(PATTERNS) for order in orders)
    assert [order[1] for order in orders] == ["turn_synchronous", "replay", "turn_synchronous"]
    rounds = [
        {"llmgym": {"tokens_per_s": 120.0, "episodes_per_s": 1.0}, "turn_synchronous": {"tokens_per_s": 100.0,
         "episodes_per_s": 0.8}, "replay": {"tokens_per_s": 150.0, "episodes_per_s": 1.2}},
        {"llmgym": {"tokens_per_s": 60.0, "episodes_per_s": 0.5}, "turn_synchronous": {"tokens_per_s": 40.0,
         "episodes_per_s": 0.4}, "replay": {"tokens_per_s": 60.0, "episodes_per_s": 0.5}},
    ]
    summary = summarize(rounds)
    assert summary["ratio_vs_turn_synchronous"]["runs"] == [1.2, 1.5]
    assert summary["ratio_vs_turn_synchronous"]["median"] == pytest.approx(1.35)
    assert summary["ratio_vs_replay"]["min"] == pytest.approx(0.8) and summary["ratio_vs_replay"]["max"] == 1.0
    assert summary["llmgym"]["tokens_per_s"]["median"] == 90.0


def test_no_schedule_beats_the_turn_synchronous_one_when_the_longest_episode_is_each_turns_longest() -> None:
    # Episode 0 runs every turn to the limit: the anchor's steps are the critical path's.
    fit = {"fixed_s": 0.05, "per_sequence_s": 0.002}
    same = schedule_bound([[64, 64, 64], [3, 40, 9], [10, 5]], fit)
    assert same["turn_synchronous_steps"] == same["critical_path_steps"] == 192
    assert same["tokens"] == 192 + 52 + 15
    assert same["bound"] == pytest.approx(1.0)


def test_the_bound_grows_with_the_steps_the_turn_barrier_adds_and_the_anchors_env_time() -> None:
    fit = {"fixed_s": 0.05, "per_sequence_s": 0.002}
    lengths = [[64, 4], [4, 64]]  # each turn waits for a different episode's long completion
    crossed = schedule_bound(lengths, fit)
    assert (crossed["turn_synchronous_steps"], crossed["critical_path_steps"]) == (128, 68)
    expected = (0.05 * 128 + 0.002 * 136) / (0.05 * 68 + 0.002 * 136)
    assert crossed["bound"] == pytest.approx(expected)
    best = 0.05 * 68 + 0.002 * 136
    assert schedule_bound(lengths, fit, anchor_env_s=1.0)["bound"] == pytest.approx(expected + 1.0 / best)
    # Per-sequence cost dominating (a CPU's), the same saved steps are worth less.
    assert 1.0 < schedule_bound(lengths, {"fixed_s": 0.01, "per_sequence_s": 0.01})["bound"] < crossed["bound"]
    assert schedule_bound(lengths, None)["bound"] is None


def test_a_workloads_episode_budget_reaches_its_agents_and_must_fit_the_engine(
    random_tiny_model: Any, char_tokenizer: Any
) -> None:
    varied = WORKLOADS["varied"]
    assert varied.agent_config(seed=0, max_model_len=2048).max_context_tokens == varied.context_tokens == 1024
    assert WORKLOADS["uniform"].agent_config(seed=0, max_model_len=2048).max_context_tokens == 2048
    short = HfGenerator(random_tiny_model, tokenizer=char_tokenizer, max_model_len=512)
    with pytest.raises(ValueError, match="max_context_tokens=1024 exceeds the generator's max_model_len=512"):
        rollout(short, ChatTokens(char_tokenizer), varied.plan(0)[:1], config=varied.agent_config(0, 512))


class SlowEngine:
    """An engine whose step takes ``seconds`` and fails once ``fail_at`` steps ran."""

    def __init__(self, seconds: float, fail_at: int = -1) -> None:
        self.seconds, self.fail_at, self.ran = seconds, fail_at, 0

    def step(self) -> list[str]:
        time.sleep(self.seconds)
        self.ran += 1
        if self.ran == self.fail_at:
            raise RuntimeError("engine failed")
        return [f"out-{self.ran}"]


def test_engine_steps_counts_and_times_every_step_of_a_pass_and_only_while_in_use() -> None:
    engine = SlowEngine(0.01)
    engine.step()  # before: not counted
    with EngineSteps(engine) as steps:
        outputs = [engine.step() for _ in range(3)]
    engine.step()  # after: the engine's own step again, not counted
    assert outputs == [["out-2"], ["out-3"], ["out-4"]], "the engine's outputs pass through"
    assert steps.steps == 3 and 0.03 <= steps.seconds < 1.0
    assert "step" not in vars(engine) and engine.ran == 5
    failing = SlowEngine(0.0, fail_at=2)
    with pytest.raises(RuntimeError, match="engine failed"), EngineSteps(failing) as counted:
        while True:
            failing.step()
    assert counted.steps == 2 and "step" not in vars(failing), "a failed step counts, and the wrapper goes"
    with EngineSteps(engine) as outer:
        with EngineSteps(engine) as inner:
            engine.step()
        engine.step()
    assert (outer.steps, inner.steps) == (2, 1) and "step" not in vars(engine), "meters nest"


def test_the_summary_reports_each_patterns_engine_steps_and_its_time_outside_them() -> None:
    def played(tokens_per_s: float, steps: int, outside: float) -> dict[str, float]:
        return {"tokens_per_s": tokens_per_s, "episodes_per_s": 1.0, "engine_steps": steps, "engine_s": 60.0,
                "outside_engine_s": outside}

    rounds = [{"llmgym": played(100.0, 256, 0.6), "turn_synchronous": played(98.0, 259, 0.2),
               "replay": played(101.0, 256, 0.1)},
              {"llmgym": played(90.0, 258, 0.5), "turn_synchronous": played(95.0, 259, 0.3),
               "replay": played(91.0, 256, 0.1)}]
    summary = summarize(rounds)
    assert summary["llmgym"]["engine_steps"]["runs"] == [256, 258]
    assert summary["turn_synchronous"]["outside_engine_s"]["median"] == pytest.approx(0.25)
    assert "engine_steps" not in summarize([{pattern: {"tokens_per_s": 1.0, "episodes_per_s": 1.0}
                                             for pattern in PATTERNS}])["llmgym"]
