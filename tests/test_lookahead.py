"""Lookahead credit: every choice of a visited state played from a snapshot, and trained with its reward."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import gymnasium as gym
import pytest
import torch

import llmgym  # noqa: F401  (registers the ids)
from llmgym.error import InvalidOptionError
from llmgym_train.agents import AgentConfig, AsyncEnv
from llmgym_train.agents.chain import ChainAgent, GreedyPolicy, MarkovAgent, lookahead_rewards
from llmgym_train.chat import ChatTokens
from llmgym_train.config import load_config
from llmgym_train.data import Sample, choice_samples
from llmgym_train.episode import EpisodeStart
from llmgym_train.generation import Completion, SamplingSpec
from llmgym_train.metrics import best_choice_rate, choice_signal_rate

MOVES = ["Up", "Down", "Left", "Right"]
SOKOBAN = "llmgym/Sokoban-v1"
# The box can go Right onto the target (solved) or be pushed Down against the wall (no solution).
LEVEL = "######\n#    #\n# @$.#\n#    #\n######"


def one_token_sample(**changes: Any) -> Sample:
    fields: dict[str, Any] = dict(
        token_ids=[5, 6, 7, 40], loss_mask=[0, 0, 0, 1], behavior_logprobs=[0.0, 0.0, 0.0, -1.2],
        token_rewards=[0.0, 0.0, 0.0, 1.0], reward=1.0, episode_return=1.0, success=False, actions_valid=True,
        cut_off=False, truncated=False, group_id=0, episode_index=3, turn_index=2, num_turns=5,
    )
    fields.update(changes)
    return Sample(**fields)


def test_choice_samples_credit_every_choice_with_its_reward_minus_the_mean() -> None:
    sample = one_token_sample(choice_rewards=(1.0, -1.0, 0.0, 4.0))
    expanded = choice_samples(sample, [40, 41, 42, 43])
    assert [s.token_ids for s in expanded] == [[5, 6, 7, token] for token in (40, 41, 42, 43)]
    assert [s.advantage for s in expanded] == [0.0, -2.0, -1.0, 3.0]
    assert [s.reward for s in expanded] == [1.0, -1.0, 0.0, 4.0]
    assert [s.token_rewards[-1] for s in expanded] == [1.0, -1.0, 0.0, 4.0]
    # The sampled choice (token 40) keeps its behaviour logprob; the others were never sampled.
    assert [s.behavior_logprobs[-1] for s in expanded] == [-1.2, 0.0, 0.0, 0.0]
    assert all(s.loss_mask == sample.loss_mask and s.episode_index == 3 and s.turn_index == 2 for s in expanded)
    assert choice_samples(one_token_sample(), [40, 41, 42, 43]) == [one_token_sample()]  # no lookahead: as it was


def test_best_target_credits_the_best_choices_alike_however_bad_the_others() -> None:
    # A deadlock (-9) beside a good move (+1), a step away (-1) and a bump (0): the reward target
    # spends its weight on the deadlock; the best target credits the good move alone.
    deadlock = choice_samples(one_token_sample(choice_rewards=(1.0, -1.0, 0.0, -9.0)), [40, 41, 42, 43], "best")
    assert [s.advantage for s in deadlock] == [0.75, -0.25, -0.25, -0.25]
    assert [s.reward for s in deadlock] == [1.0, -1.0, 0.0, -9.0]  # the rewards themselves are kept
    tied = choice_samples(one_token_sample(choice_rewards=(1.0, 1.0, 0.0, 0.0)), [40, 41, 42, 43], "best")
    assert [s.advantage for s in tied] == [0.5, 0.5, -0.5, -0.5]
    alike = choice_samples(one_token_sample(choice_rewards=(0.0,) * 4), [40, 41, 42, 43], "best")
    assert [s.advantage for s in alike] == [0.0] * 4  # nothing to prefer: no signal
    with pytest.raises(ValueError, match="'reward', 'best' or 'greedy'"):
        choice_samples(one_token_sample(choice_rewards=(0.0,) * 4), [40, 41, 42, 43], "rank")


def test_greedy_target_is_the_cross_entropy_to_the_best_choices() -> None:
    choices = [40, 41, 42, 43]
    tied = choice_samples(one_token_sample(choice_rewards=(1.0, 1.0, 0.0, -9.0)), choices, "greedy")
    assert [s.advantage for s in tied] == [0.5, 0.5, 0.0, 0.0]  # a share of 1, nothing subtracted
    assert [s.reward for s in tied] == [1.0, 1.0, 0.0, -9.0]
    alike = choice_samples(one_token_sample(choice_rewards=(0.0,) * 4), choices, "greedy")
    assert [s.advantage for s in alike] == [0.0] * 4  # nothing to prefer: no signal
    # The gradient on the choice logits: sum_k credit_k * d log p_k = credit - p * sum(credit) =
    # target - p. It vanishes at the target distribution, where "best"'s (the advantage itself) does not.
    logits = torch.tensor([3.0, -1.0, 0.5, 0.0], requires_grad=True)
    for target in ("greedy", "best"):
        credits = torch.tensor([s.advantage for s in choice_samples(
            one_token_sample(choice_rewards=(1.0, 0.0, 0.0, 0.0)), choices, target)])
        (grad,) = torch.autograd.grad((credits * torch.log_softmax(logits, 0)).sum(), logits)
        expected = credits - torch.softmax(logits, 0).detach() if target == "greedy" else credits
        assert torch.allclose(grad, expected, atol=1e-6)


def test_sampled_choices_train_the_played_choice_alone_against_the_mean_of_its_state() -> None:
    sample = one_token_sample(token_ids=[5, 6, 7, 42], choice_rewards=(1.0, 0.0, 0.0, 0.0))
    for target, advantage in (("reward", -0.25), ("best", -0.25), ("greedy", 0.0)):
        (played,) = choice_samples(sample, [40, 41, 42, 43], target, "sampled")
        assert played.token_ids == [5, 6, 7, 42] and played.advantage == advantage
        assert played.behavior_logprobs == sample.behavior_logprobs  # the policy's own logprob of the move
    (best,) = choice_samples(one_token_sample(choice_rewards=(1.0, 0.0, 0.0, 0.0)), [40, 41, 42, 43], "best", "sampled")
    assert best.token_ids[-1] == 40 and best.advantage == 0.75 and best.reward == 1.0
    # Over the policy's samples, the expected gradient is that of the all-action credit weighted
    # by the policy: sum_k p_k (c_k - mean) d log p_k, the policy gradient of the credits.
    logits = torch.tensor([0.3, -1.0, 0.5, 0.0], requires_grad=True)
    probs = torch.softmax(logits, 0).detach()
    expected = torch.zeros(4)
    for k in range(4):
        (row,) = choice_samples(one_token_sample(token_ids=[5, 6, 7, 40 + k], choice_rewards=(1.0, 0.0, 0.0, 0.0)),
                                [40, 41, 42, 43], "best", "sampled")
        (grad,) = torch.autograd.grad(row.advantage * torch.log_softmax(logits, 0)[k], logits)
        expected += probs[k] * grad
    (direct,) = torch.autograd.grad(torch.softmax(logits, 0)[0], logits)  # d p(best)
    assert torch.allclose(expected, direct, atol=1e-6)
    with pytest.raises(ValueError, match="'all' or 'sampled'"):
        choice_samples(sample, [40, 41, 42, 43], "best", "some")


def test_extra_draws_come_from_the_played_choice_distribution_with_their_own_logprobs() -> None:
    import math
    import random

    distribution = tuple(math.log(p) for p in (0.1, 0.2, 0.3, 0.4))
    sample = one_token_sample(token_ids=[5, 6, 7, 42], choice_rewards=(1.0, 0.0, 0.0, 1.0), choice_logprobs=distribution)
    rows = choice_samples(sample, [40, 41, 42, 43], "best", "sampled", draws=20_001, rng=random.Random(0))
    played, extra = rows[0], rows[1:]
    assert played.token_ids[-1] == 42 and played.behavior_logprobs == sample.behavior_logprobs
    assert played.advantage == -0.5  # credit 0, mean credit 0.5
    for k in range(4):
        drawn = [row for row in extra if row.token_ids[-1] == 40 + k]
        assert abs(len(drawn) / len(extra) - math.exp(distribution[k])) < 0.015
        assert all(row.token_ids[:-1] == [5, 6, 7] and row.behavior_logprobs[-1] == distribution[k] for row in drawn)
        assert all(row.advantage == (0.5 if k in (0, 3) else -0.5) for row in drawn)
    again = choice_samples(sample, [40, 41, 42, 43], "best", "sampled", draws=8, rng=random.Random(0))
    assert again == choice_samples(sample, [40, 41, 42, 43], "best", "sampled", draws=8, rng=random.Random(0))
    with pytest.raises(ValueError, match="needs the distribution the played one came from"):
        choice_samples(replace(sample, choice_logprobs=None), [40, 41, 42, 43], "best", "sampled", 2, random.Random(0))
    with pytest.raises(ValueError, match="draws must be 1, or more with trained='sampled'"):
        choice_samples(sample, [40, 41, 42, 43], "best", "all", 2, random.Random(0))


def test_lookahead_draws_need_the_sampled_choices_and_a_generator_that_reports_the_distribution() -> None:
    base = ['rollout.choices=["Up","Down"]', "rollout.max_new_tokens=1", "rollout.layout=turn", "loss.credit=lookahead",
            "rollout.agent=markov", "loss.lookahead_draws=4"]
    with pytest.raises(InvalidOptionError, match="every move is trained already"):
        load_config(None, base)
    with pytest.raises(InvalidOptionError, match="Fix: rollout.temperature above 2"):
        load_config(None, [*base, "loss.lookahead_choices=sampled", "rollout.temperature=2"])
    assert load_config(None, [*base, "loss.lookahead_choices=sampled", "rollout.temperature=6"]).loss.lookahead_draws == 4
    assert load_config(None, [*base, "loss.lookahead_choices=sampled", "rollout.backend=hf"]).loss.lookahead_draws == 4


def test_a_policy_temperature_other_than_the_sampled_one_needs_sampled_choices() -> None:
    choices = ['rollout.choices=["Up","Down"]', "rollout.max_new_tokens=1", "rollout.layout=turn",
               "rollout.temperature=6"]
    lookahead = [*choices, "loss.credit=lookahead", "rollout.agent=markov"]
    with pytest.raises(InvalidOptionError, match=r"needs rollout.choices .*Or set loss.policy_temperature=0"):
        load_config(None, ["loss.policy_temperature=0.5"])
    with pytest.raises(InvalidOptionError, match="loss.lookahead_choices=sampled"):
        load_config(None, [*lookahead, "loss.policy_temperature=1"])
    with pytest.raises(InvalidOptionError, match=r"loss.policy_temperature must be in \[0.0"):
        load_config(None, [*choices, "loss.policy_temperature=-1"])
    config = load_config(None, [*lookahead, "loss.lookahead_choices=sampled", "loss.policy_temperature=1"])
    assert config.trains_another_temperature
    # The temperature sampled, or 0, is the on-policy update.
    assert not load_config(None, [*choices, "loss.policy_temperature=6"]).trains_another_temperature
    assert not load_config(None, choices).trains_another_temperature


def test_choice_samples_refuse_turns_of_several_tokens_and_mismatched_rewards() -> None:
    with pytest.raises(ValueError, match="one generated token"):
        choice_samples(one_token_sample(loss_mask=[0, 0, 1, 1], choice_rewards=(0.0,) * 4), [40, 41, 42, 43])
    with pytest.raises(ValueError, match="3 rewards for 4 choices"):
        choice_samples(one_token_sample(choice_rewards=(0.0,) * 3), [40, 41, 42, 43])


def markov_agent(char_tokenizer_with_moves: Any, **config: Any) -> MarkovAgent:
    chat = ChatTokens(char_tokenizer_with_moves, response_prefix="<answer>")
    sampling = SamplingSpec(max_tokens=1, temperature=2.0, allowed_token_ids=chat.choice_token_ids(MOVES))
    return MarkovAgent(chat, AgentConfig(sampling=sampling, lookahead=True, **config))


def test_lookahead_rewards_are_what_each_move_earns_and_leave_the_env_as_it_was() -> None:
    from llmgym_train.testing import tiny_tokenizer

    agent = markov_agent(tiny_tokenizer(MOVES))
    env = gym.make(SOKOBAN, progress_reward=1.0, step_penalty=0.0, action_parser="lenient")
    handle = AsyncEnv(env)

    async def run() -> tuple[tuple[float, ...], Any, Any]:
        await handle.reset(options={"level": LEVEL})
        await handle.step("<answer>Left</answer>")  # one turn played: the counter must survive too
        before = env.unwrapped.get_state()
        rewards = await lookahead_rewards(agent, handle)
        return rewards, before, env.unwrapped.get_state()

    rewards, before, after = asyncio.run(run())
    assert after.task == before.task and after.turn == before.turn == 1 and not after.ended
    # Each move played by hand from the same position on a fresh env.
    expected = []
    for move in MOVES:
        fresh = gym.make(SOKOBAN, progress_reward=1.0, step_penalty=0.0, action_parser="lenient")
        fresh.reset(options={"level": LEVEL})
        fresh.step("<answer>Left</answer>")
        expected.append(float(fresh.step(f"<answer>{move}</answer>")[1]))
    assert rewards == tuple(expected)
    # Two cells behind the box: Right walks toward it (+1), Left into the wall (0), Up and Down away (-1).
    assert rewards == (-1.0, -1.0, 0.0, 1.0)


def test_a_lookahead_of_several_turns_credits_each_move_with_what_the_greedy_policy_then_earns() -> None:
    from llmgym_train.testing import tiny_tokenizer

    agent = markov_agent(tiny_tokenizer(MOVES), lookahead_turns=3, lookahead_gamma=0.5)
    right = agent.config.sampling.allowed_token_ids[MOVES.index("Right")]
    env = gym.make(SOKOBAN, step_penalty=0.0, action_parser="lenient")  # the env's own rewards only
    handle = AsyncEnv(env)
    requests: list[Any] = []

    async def always_right(obs_queue: asyncio.Queue[Any], act_queue: asyncio.Queue[Completion]) -> None:
        while (request := await obs_queue.get()) is not None:
            requests.append(request)
            await act_queue.put(Completion(token_ids=(right,), logprobs=(0.0,), finish_reason="length"))

    async def run() -> tuple[tuple[float, ...], tuple[float, ...], Any, Any]:
        observation, info = await handle.reset(options={"level": "######\n#    #\n#@ $.#\n#    #\n######"})
        obs_queue: asyncio.Queue[Any] = asyncio.Queue()
        act_queue: asyncio.Queue[Completion] = asyncio.Queue()
        server = asyncio.create_task(always_right(obs_queue, act_queue))
        policy = GreedyPolicy(agent, agent.new_builder(EpisodeStart(7, SOKOBAN, 0), observation, info), obs_queue, act_queue)
        before = env.unwrapped.get_state()
        first = await lookahead_rewards(agent, handle, policy)
        asked = len(requests)
        again = await lookahead_rewards(agent, handle, policy)
        assert len(requests) == asked  # every observation was asked for once
        await obs_queue.put(None)
        await server
        return first, again, before, env.unwrapped.get_state()

    first, again, before, after = asyncio.run(run())
    # The box is two cells right of the player, its target just beyond. With the policy pushing
    # Right: Right then Right solves on the 2nd turn (+1 box, +10 solved, discounted once), Left
    # bumps the wall and solves on the 3rd (discounted twice), Up and Down never reach the box.
    assert first == again == (0.0, 0.0, 11 * 0.25, 11 * 0.5)
    assert after.task == before.task and after.turn == before.turn == 0 and not after.ended
    assert requests and all(r.agent_id == 7 and r.sampling.temperature == 0.0 and r.sampling.seed is None
                            for r in requests)


def test_a_random_lookahead_credits_each_move_with_the_best_return_its_random_continuations_find() -> None:
    from llmgym_train.testing import tiny_tokenizer

    agent = markov_agent(
        tiny_tokenizer(MOVES), lookahead_turns=3, lookahead_gamma=0.5, lookahead_continuation="random", lookahead_rollouts=200
    )
    env = gym.make(SOKOBAN, step_penalty=0.0, action_parser="lenient")  # the env's own rewards only
    handle = AsyncEnv(env)

    async def run(seed: int) -> tuple[tuple[float, ...], Any, Any]:
        await handle.reset(options={"level": "######\n#    #\n#@ $.#\n#    #\n######"})
        before = env.unwrapped.get_state()
        return await lookahead_rewards(agent, handle, None, seed), before, env.unwrapped.get_state()

    rewards, before, after = asyncio.run(run(seed=5))
    # The box is two cells right of the player, its target just beyond. Within three turns:
    # Right, Right solves on the 2nd turn (discounted once), Left bumps the wall and needs
    # Right, Right (the 3rd turn, discounted twice), Up and Down cannot reach the box in time.
    # Among 200 draws of two continuation moves each, Right-Right is found.
    assert rewards == (0.0, 0.0, 11 * 0.25, 11 * 0.5)
    assert after.task == before.task and after.turn == before.turn == 0 and not after.ended
    # One continuation a move cannot find Left's two-move follow-up every time: the seed decides which.
    agent.config = replace(agent.config, lookahead_rollouts=1)
    found = {asyncio.run(run(seed))[0][MOVES.index("Left")] for seed in range(40)}
    assert found == {0.0, 11 * 0.25}
    assert asyncio.run(run(seed=3))[0] == asyncio.run(run(seed=3))[0]


def test_random_rollout_returns_are_the_envs_and_leave_it_as_it_was() -> None:
    env = gym.make(SOKOBAN, step_penalty=-0.1, action_parser="lenient")
    env.reset(options={"level": LEVEL})
    core = env.unwrapped
    before = core.get_state()
    actions = [f"<answer>{move}</answer>" for move in MOVES]
    best = core.random_rollout_returns(actions, rollouts=50, turns=1)
    # One turn: each move's own reward. Right pushes the box onto its target (+1, +10 solved, -0.1 the move).
    assert best == pytest.approx([-0.1, -0.1, -0.1, 10.9])
    mean = core.random_rollout_returns(actions, rollouts=50, turns=4, gamma=0.9, reduce="mean", seed=1)
    most = core.random_rollout_returns(actions, rollouts=50, turns=4, gamma=0.9, seed=1)
    assert all(m <= b for m, b in zip(mean, most)) and most[3] == pytest.approx(10.9)
    after = core.get_state()
    assert after.task == before.task and after.turn == before.turn == 0 and after.observation == before.observation
    for bad in ({"rollouts": 0, "turns": 2}, {"rollouts": 2, "turns": 0}, {"rollouts": 2, "turns": 2, "reduce": "median"}):
        with pytest.raises(InvalidOptionError, match="random_rollout_returns needs"):
            core.random_rollout_returns(actions, **bad)
    with pytest.raises(InvalidOptionError, match="lookahead_turns=1 there are none"):
        load_config(None, ["loss.lookahead_continuation=random"])
    with pytest.raises(InvalidOptionError, match="Did you mean 'random'"):
        load_config(None, ["loss.lookahead_continuation=randm"])


def test_a_lookahead_of_several_turns_needs_a_policy_that_sees_the_state_alone() -> None:
    from llmgym_train.testing import tiny_tokenizer

    markov = markov_agent(tiny_tokenizer(MOVES), lookahead_turns=2)
    chain = ChainAgent(markov.chat, markov.config)
    env = AsyncEnv(gym.make(SOKOBAN, step_penalty=0.0, action_parser="lenient"))
    with pytest.raises(ValueError, match="needs the policy's greedy turns"):
        asyncio.run(lookahead_rewards(markov, env))
    builder = markov.new_builder(EpisodeStart(0, SOKOBAN, 0), "", {})
    with pytest.raises(ValueError, match="rollout.agent=markov"):
        GreedyPolicy(chain, builder, asyncio.Queue(), asyncio.Queue())
    with pytest.raises(ValueError, match="1 without lookahead"):
        AgentConfig(lookahead_turns=2)
    with pytest.raises(InvalidOptionError, match="lookahead_turns=3.*needs loss.credit=lookahead and rollout.agent=markov"):
        load_config(None, ["loss.lookahead_turns=3"])


def test_lookahead_needs_choices() -> None:
    with pytest.raises(ValueError, match="allowed_token_ids"):
        AgentConfig(sampling=SamplingSpec(max_tokens=1), lookahead=True)


@pytest.mark.parametrize(
    ("overrides", "missing"),
    [
        (["rollout.layout=turn", "rollout.max_new_tokens=1"], "rollout.choices"),
        (['rollout.choices=["Up","Down"]', "rollout.max_new_tokens=1"], "rollout.layout=turn"),
        (['rollout.choices=["Up","Down"]', "rollout.max_new_tokens=1", "rollout.layout=turn", "algo=ppo"],
         "algo=grpo"),
    ],
)
def test_config_names_what_lookahead_credit_is_missing(overrides: list[str], missing: str) -> None:
    with pytest.raises(InvalidOptionError, match=f"lookahead.*needs.*{missing}"):
        load_config(None, ["loss.credit=lookahead", *overrides])


@pytest.mark.parametrize(("lookahead_turns", "continuation"), [(1, "greedy"), (3, "greedy"), (3, "random")])
def test_trainer_step_trains_one_sample_per_choice_of_every_turn(tmp_path: Any, lookahead_turns: int, continuation: str) -> None:
    from llmgym_train.testing import save_tiny_model
    from llmgym_train.trainer import Trainer

    model = save_tiny_model(tmp_path / "model", seed=1, words=MOVES)
    config = load_config(overrides=[
        f"model={model}", "steps=1", f"output={tmp_path / 'run'}", "rollout.backend=hf", "eval.disabled=true",
        f"train_envs=[{{id: {SOKOBAN}, n_groups: 2, options: {{max_turns: 3, progress_reward: 1.0, step_penalty: 0.0, action_parser: lenient}}}}]",
        "rollout.agent=markov", "rollout.layout=turn", "rollout.response_prefix=<answer>",
        f"rollout.choices={MOVES}".replace("'", '"'), "rollout.max_new_tokens=1", "rollout.max_model_len=512",
        "rollout.group_size=1", "loss.credit=lookahead", f"loss.lookahead_turns={lookahead_turns}", "progress=false",
        "threads=1", f"loss.lookahead_continuation={continuation}", "loss.lookahead_rollouts=8",
    ])
    with Trainer(config) as trainer:
        trajectories, _ = trainer.collect(0)
        samples, _ = trainer._filtered_samples(trajectories)
        metrics = trainer.train_step()
    turns = [turn for trajectory in trajectories for turn in trajectory.turns]
    assert turns and all(turn.choice_rewards is not None and len(turn.choice_rewards) == 4 for turn in turns)
    assert len(samples) == 4 * len(turns)
    # Each turn's four samples differ in their last token only and their advantages sum to 0.
    for start in range(0, len(samples), 4):
        four = samples[start : start + 4]
        assert len({tuple(s.token_ids[:-1]) for s in four}) == 1 and len({s.token_ids[-1] for s in four}) == 4
        assert sum(s.advantage for s in four) == pytest.approx(0.0)
    assert metrics["samples"] == 4 * metrics["env_steps"]
    # The share of played moves that earned the best any choice did, logged per step.
    assert all(trajectory.token_ids[turn.start] == trainer.choice_ids[turn.played_choice]
               for trajectory in trajectories for turn in trajectory.turns)
    best = [turn.choice_rewards[turn.played_choice] == max(turn.choice_rewards) for turn in turns]
    assert best_choice_rate(trajectories) == pytest.approx(sum(best) / len(best))
    assert 0.0 <= metrics["best_choice_rate"] <= 1.0 and 0.0 <= metrics["choice_signal_rate"] <= 1.0
    told = [len(set(turn.choice_rewards)) > 1 for turn in turns]
    assert choice_signal_rate(trajectories) == pytest.approx(sum(told) / len(told))


def test_trainer_step_with_draws_trains_the_played_move_and_moves_drawn_from_its_distribution(tmp_path: Any) -> None:
    import math

    from llmgym_train.testing import save_tiny_model
    from llmgym_train.trainer import Trainer

    model = save_tiny_model(tmp_path / "model", seed=1, words=MOVES)
    config = load_config(overrides=[
        f"model={model}", "steps=1", f"output={tmp_path / 'run'}", "rollout.backend=hf", "eval.disabled=true",
        f"train_envs=[{{id: {SOKOBAN}, n_groups: 2, options: {{max_turns: 3, step_penalty: 0.0, action_parser: lenient}}}}]",
        "rollout.agent=markov", "rollout.layout=turn", "rollout.response_prefix=<answer>", "rollout.temperature=3",
        f"rollout.choices={MOVES}".replace("'", '"'), "rollout.max_new_tokens=1", "rollout.max_model_len=512",
        "rollout.group_size=1", "loss.credit=lookahead", "loss.lookahead_choices=sampled", "loss.lookahead_draws=3",
        "loss.lookahead_target=best", "progress=false", "threads=1",
    ])
    with Trainer(config) as trainer:
        trajectories, _ = trainer.collect(0)
        samples, _ = trainer._filtered_samples(trajectories)
        metrics = trainer.train_step()
    turns = [(trajectory, turn) for trajectory in trajectories for turn in trajectory.turns]
    assert turns and len(samples) == 3 * len(turns) and metrics["samples"] == 3 * metrics["env_steps"]
    for (trajectory, turn), start in zip(turns, range(0, len(samples), 3), strict=True):
        assert turn.choice_logprobs is not None and sum(map(math.exp, turn.choice_logprobs)) == pytest.approx(1.0)
        played, *drawn = samples[start : start + 3]
        assert played.token_ids[-1] == trajectory.token_ids[turn.start] == trainer.choice_ids[turn.played_choice]
        assert played.behavior_logprobs[-1] == pytest.approx(turn.choice_logprobs[turn.played_choice], abs=1e-5)
        for row in drawn:
            k = trainer.choice_ids.index(row.token_ids[-1])
            assert row.token_ids[:-1] == played.token_ids[:-1] and row.behavior_logprobs[-1] == turn.choice_logprobs[k]
