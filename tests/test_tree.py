"""Tree rollouts: tree advantages by hand, plans and budgets, tree samples, and real tree rollouts on a tiny model."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import gymnasium as gym
import pytest
import torch

from llmgym.error import InvalidOptionError
from llmgym_train.agents import AgentConfig, AsyncEnv
from llmgym_train.algorithms import group_normalized, tree_advantages, tree_values
from llmgym_train.chat import ChatTokens
from llmgym_train.config import TreeConfig, load_config
from llmgym_train.data import Trajectory, Turn
from llmgym_train.generation import SamplingSpec
from llmgym_train.generation.hf_backend import HfGenerator
from llmgym_train.planner import EnvSpec, group_episodes
from llmgym_train.rollout import rollout
from llmgym_train.tree import plan_tree, played_work, tree_forest, tree_samples

T = torch.tensor

# A depth-3 tree with uneven branching (node: parent, segment turns):
#
#   0 root
#   |-- 1 (2 turns) --|-- 3 leaf (1 turn)
#   |                 |-- 4 (1 turn) --|-- 6 leaf (1 turn)
#   |                 |                |-- 7 leaf (3 turns)
#   |                 |-- 5 leaf (2 turns)
#   |-- 2 leaf (2 turns)
PARENTS = T([-1, 0, 0, 1, 1, 1, 4, 4])
TURNS = T([0, 2, 2, 1, 1, 2, 1, 3])


# ---------------------------------------------------------------------- tree advantages by hand
def test_tree_advantages_by_hand_depth_three_uneven() -> None:
    # Rewards at the leaves only, gamma 1. Leaf returns: 2 -> 1, 3 -> 1, 5 -> 0, 6 -> 1, 7 -> 0.
    rewards = T([0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    # V(4) = mean(1, 0) = 0.5; V(1) = mean(1, 0, 1, 0) = 0.5; V(0) = mean(1, 1, 0, 1, 0) = 0.6.
    assert tree_values(PARENTS, rewards, TURNS).tolist() == pytest.approx([0.6, 0.5, 0, 0, 0.5, 0, 0, 0])
    advantages = tree_advantages(PARENTS, rewards, TURNS, normalize_std=False)
    # child value - parent value: 1: 0.5-0.6, 2: 1-0.6, 3: 1-0.5, 4: 0.5-0.5, 5: 0-0.5, 6: 1-0.5, 7: 0-0.5.
    assert advantages.tolist() == pytest.approx([0.0, -0.1, 0.4, 0.5, 0.0, -0.5, 0.5, -0.5])
    # The leaf-weighted advantages of the root's children sum to 0 (node 1 has 4 leaves below it).
    assert 4 * advantages[1] + advantages[2] == pytest.approx(0.0, abs=1e-6)


def test_tree_advantages_by_hand_with_discount_and_segment_rewards() -> None:
    # Segment rewards (already discounted within their segment) on inner segments too; gamma 0.5.
    rewards = T([0.0, 0.2, 1.0, 1.0, 0.0, 0.0, 1.0, 0.5])
    # G_4: 6 -> 1, 7 -> 0.5; V(4) = 0.75.
    # G_1: 3 -> 1, 5 -> 0, 6 -> 0 + 0.5 * 1 = 0.5, 7 -> 0.5 * 0.5 = 0.25; V(1) = 0.4375.
    # G_0: 2 -> 1; below 1: 0.2 + 0.5**2 * G_1 = 0.45, 0.2, 0.325, 0.2625; V(0) = 2.2375 / 5 = 0.4475.
    advantages = tree_advantages(PARENTS, rewards, TURNS, gamma=0.5, normalize_std=False)
    expected = [
        0.0,
        0.2 + 0.25 * 0.4375 - 0.4475,  # Q(1) - V(0)
        1.0 - 0.4475,
        1.0 - 0.4375,
        0.0 + 0.5 * 0.75 - 0.4375,
        0.0 - 0.4375,
        1.0 - 0.75,
        0.5 - 0.75,
    ]
    assert advantages.tolist() == pytest.approx(expected)


def test_tree_advantages_normalized_by_the_std_below_the_parent() -> None:
    rewards = T([0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    advantages = tree_advantages(PARENTS, rewards, TURNS, eps=0.0)
    std_root = math.sqrt(1.2 / 4)  # returns 1, 1, 0, 1, 0: squared deviations 1.2, unbiased
    std_one = math.sqrt(1.0 / 3)  # returns 1, 0, 1, 0 below node 1
    assert advantages[1].item() == pytest.approx(-0.1 / std_root, rel=1e-5)
    assert advantages[3].item() == pytest.approx(0.5 / std_one, rel=1e-5)
    assert advantages[6].item() == pytest.approx(0.5 / math.sqrt(0.5), rel=1e-5)


def test_tree_advantages_mixed_with_the_episode_level_group_advantage() -> None:
    rewards = T([0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    advantages = tree_advantages(PARENTS, rewards, TURNS, normalize_std=False, episode_weight=1.0)
    # Episode part: mean return (from the root) of the leaves below the node - V(root) = 0.6.
    episode = [0.0, 0.5 - 0.6, 1 - 0.6, 1 - 0.6, 0.5 - 0.6, 0 - 0.6, 1 - 0.6, 0 - 0.6]
    tree = [0.0, -0.1, 0.4, 0.5, 0.0, -0.5, 0.5, -0.5]
    assert advantages.tolist() == pytest.approx([a + b for a, b in zip(tree, episode, strict=True)])


def test_a_star_is_grpo_and_trees_of_a_forest_stay_apart() -> None:
    returns = [1.0, 0.0, 0.5, 1.0]
    star = tree_advantages(T([-1, 0, 0, 0, 0]), T([0.0, *returns]), T([0, 3, 1, 2, 4]))
    assert star[1:].tolist() == pytest.approx(group_normalized(T(returns), T([0, 0, 0, 0])).tolist(), rel=1e-5)
    # Two trees: the second's rewards are shifted by 10 and must not move the first's advantages.
    forest = tree_advantages(T([-1, 0, 0, -1, 3, 3]), T([0.0, 1.0, 0.0, 0.0, 11.0, 10.0]), T([0, 1, 1, 0, 1, 1]),
                             normalize_std=False)
    assert forest.tolist() == pytest.approx([0.0, 0.5, -0.5, 0.0, 0.5, -0.5])
    with pytest.raises(ValueError, match="after its parent"):
        tree_advantages(T([1, -1]), T([0.0, 0.0]), T([0, 0]))


# ---------------------------------------------------------------------- plans and config
@pytest.mark.parametrize(("budget", "turns", "branches"), [(2, [1, 3], 2), (3, [1, 3], 2), (4, [1, 3], 2),
                                                           (5, [0, 1, 2], 2), (7, [0, 2], 3), (9, [0, 2], 3)])
def test_plan_spends_exactly_the_budget(budget: int, turns: list[int], branches: int) -> None:
    slots = plan_tree(budget, turns, branches)
    assert len(slots) == budget  # one leaf per episode
    for slot in slots[1:]:
        assert slot.parent is not None and slot.parent < slot.index and slot.branch_turn in turns
        children = [s for s in slots if s.parent == slot.parent and s.branch_turn == slot.branch_turn]
        assert len(children) <= branches - 1


def test_plan_shape_by_hand() -> None:
    # Budget 3, branches 2 at turns 1 and 3: the trunk splits 2 + 1 at turn 1, then its half splits at 3.
    assert [(s.parent, s.branch_turn) for s in plan_tree(3, [1, 3], 2)] == [(None, 0), (0, 1), (0, 3)]
    assert [(s.parent, s.branch_turn) for s in plan_tree(4, [1, 3], 2)] == [(None, 0), (0, 1), (0, 3), (1, 3)]
    with pytest.raises(InvalidOptionError, match="1 to 4 episodes"):
        plan_tree(5, [1, 3], 2)


def _load(*overrides: str) -> Any:
    return load_config(overrides=["rollout.backend=hf", *overrides])


def test_config_accepts_tree_rollouts_with_grpo() -> None:
    config = _load("rollout.tree.branch_turns=[0,2]", "rollout.tree.budget=4", "loss.credit=tree",
                   "rollout.layout=turn", "rollout.agent=markov")
    assert config.rollout.tree == TreeConfig(branch_turns=[0, 2], branches=2, budget=4)
    assert config.rollout.episodes_per_group == 4 and config.episodes_per_step == 4 * 8


@pytest.mark.parametrize(("overrides", "message"), [
    (["algo=ppo"], "algo=grpo only"),
    (["algo=reinforce_pp"], "algo=grpo only"),
    (["loss.credit=episode"], "needs loss.credit=tree"),
    (["rollout.tree.budget=9"], "between 2 and 4"),
    (["rollout.agent=math-multi-turn"], "Use one of: chain, markov"),
    (["rollout.max_turns=2"], "branch turns below 2"),
])
def test_config_refuses_impossible_tree_combinations(overrides: list[str], message: str) -> None:
    tree = ["rollout.tree.branch_turns=[0,2]", "loss.credit=tree", "rollout.group_size=4"]
    with pytest.raises(InvalidOptionError, match=message):
        _load(*tree, *overrides)


def test_config_refuses_tree_credit_without_a_tree_and_bad_turns() -> None:
    with pytest.raises(InvalidOptionError, match="rollout.tree.branch_turns is empty"):
        _load("loss.credit=tree")
    with pytest.raises(InvalidOptionError, match=r"increasing order.*\[1, 3\]"):
        _load("rollout.tree.branch_turns=[3,1]", "loss.credit=tree")


# ---------------------------------------------------------------------- tree samples from hand-made trees
def _trajectory(index: int, rewards: list[float], parent: Trajectory | None = None, shared: int = 0) -> Trajectory:
    """An episode of one-token observations and two-token turns: turn k is tokens (100*index + k, 7), obs 5."""
    tokens, logprobs, turns = [1, 2], [0.0, 0.0], []
    if parent is not None:
        cut = parent.turns[shared].start
        tokens, logprobs, turns = list(parent.token_ids[:cut]), list(parent.behavior_logprobs[:cut]), parent.turns[:shared]
    for k in range(len(turns), len(rewards)):
        start = len(tokens)
        tokens += [100 * index + k, 7, 5]
        logprobs += [-0.5, -0.25, 0.0]
        turns.append(Turn(start - 1 if k else 0, start, start + 2, rewards[k], True, "stop"))
    mask = [0] * len(tokens)
    for turn in turns:
        mask[turn.start : turn.end] = [1, 1]
    return Trajectory(tokens, mask, logprobs, 2, turns, episode_index=index, parent_episode=None if parent is None
                      else parent.episode_index, shared_turns=shared)


def _hand_tree() -> list[Trajectory]:
    trunk = _trajectory(0, [0.0, 0.0, 0.0, 1.0])
    branch = _trajectory(1, [0.0, 0.0, 0.0], trunk, shared=1)  # branched after the trunk's first turn
    late = _trajectory(2, [0.0, 0.0, 0.0, 0.0, 0.0], trunk, shared=3)
    deep = _trajectory(3, [0.0, 0.0, 0.0, 1.0], branch, shared=2)
    return [trunk, branch, late, deep]


def test_tree_forest_of_hand_made_episodes() -> None:
    parents, rewards, turns, segments = tree_forest(_hand_tree())
    spans = [(s.trajectory.episode_index, s.first, s.end, s.node) for s in segments]
    # Trunk: root 0 -> [0,1) node 1 -> [1,3) node 2 -> [3,4) leaf 3; branch: node 1 -> [1,2) node 4
    # -> [2,3) leaf 5; late: node 2 -> [3,5) leaf 6; deep: node 4 -> [2,4) leaf 7.
    assert spans == [(0, 0, 1, 1), (0, 1, 3, 2), (0, 3, 4, 3), (1, 1, 2, 4), (1, 2, 3, 5), (2, 3, 5, 6), (3, 2, 4, 7)]
    assert parents == [-1, 0, 1, 2, 1, 4, 2, 4]
    assert turns == [0, 1, 2, 1, 1, 1, 2, 2]
    assert rewards == [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize("layout", ["sequence", "turn"])
def test_tree_samples_train_every_played_turn_once(layout: str) -> None:
    trajectories = _hand_tree()
    samples = tree_samples(trajectories, layout, gamma=1.0, normalize_std=False)
    trained: list[tuple[int, int]] = []  # (episode, position) of every token with loss
    for sample in samples:
        source = trajectories[sample.episode_index]
        assert sample.advantage is not None
        if layout == "sequence":
            assert sample.token_ids == source.token_ids[: len(sample.token_ids)]
            trained += [(sample.episode_index, i) for i, m in enumerate(sample.loss_mask) if m]
        else:
            turn = source.turns[sample.turn_index]
            trained += [(sample.episode_index, i) for i in range(turn.start, turn.end)]
            assert sum(sample.loss_mask) == turn.num_generated
    own = [(t.episode_index, i) for t in trajectories for turn in t.turns[t.shared_turns :] for i in range(turn.start, turn.end)]
    assert sorted(trained) == sorted(own) and len(set(trained)) == len(trained)
    # Copied turns are never trained in the copy: the trunk's first turn (tokens 0, 7) appears
    # in four episodes and is trained once.
    assert sum(1 for sample in samples for i, m in enumerate(sample.loss_mask) if m and sample.token_ids[i] == 0) == 1
    assert played_work(trajectories, 1.0)["tokens/generated"] == len(own) < sum(t.num_generated_tokens for t in trajectories)


def test_tree_samples_give_each_segment_its_tree_advantage() -> None:
    samples = tree_samples(_hand_tree(), "sequence", normalize_std=False)
    by_segment = {(s.episode_index, s.turn_index): s.advantage for s in samples}
    # Leaves' returns: trunk 1, branch 0, late 0, deep 1. V(root) = V(node 1) = 0.5 (all four
    # below); node 2 (trunk after turn 3): trunk 1, late 0 -> 0.5; node 4: branch 0, deep 1 -> 0.5.
    assert by_segment == pytest.approx({(0, 0): 0.0, (0, 1): 0.0, (0, 3): 0.5, (1, 1): 0.0, (1, 2): -0.5,
                                        (2, 3): -0.5, (3, 2): 0.5})


def test_tree_samples_need_whole_trees() -> None:
    with pytest.raises(ValueError, match="not among the trajectories"):
        tree_samples(_hand_tree()[1:])


# ---------------------------------------------------------------------- env snapshots through AsyncEnv
def test_async_env_restores_a_snapshot_into_a_fresh_env() -> None:
    async def play() -> None:
        first = AsyncEnv(gym.make("llmgym/FrozenLake-Slippery-v0"))
        await first.reset(seed=3)
        await first.step("<answer>Down</answer>")
        state = await first.get_state()
        second = AsyncEnv(gym.make("llmgym/FrozenLake-Slippery-v0"))
        await second.set_state(state)  # never reset: the wrapper's reset comes first
        for action in ("Right", "Down", "Right"):
            assert await first.step(f"<answer>{action}</answer>") == await second.step(f"<answer>{action}</answer>")

    asyncio.run(play())


# ---------------------------------------------------------------------- tree rollouts on the tiny model
FROZEN_LAKE = "llmgym/FrozenLake-v0"


@pytest.fixture()
def tiny_setup(random_tiny_model: Any, char_tokenizer: Any) -> tuple[HfGenerator, ChatTokens]:
    return HfGenerator(random_tiny_model, tokenizer=char_tokenizer, max_model_len=2048), ChatTokens(char_tokenizer)


def _tree_rollout(
    generator: HfGenerator, chat: ChatTokens, agent: str = "chain", branch_turns: tuple[int, ...] = (1, 2), max_turns: int = 4
) -> list[Trajectory]:
    # Env turn limit 4, branches after turns 1 and 2: four episodes per group, two groups.
    episodes = group_episodes([EnvSpec(FROZEN_LAKE, n_groups=2, options={"max_turns": max_turns})], group_size=4, seed=7)
    config = AgentConfig(sampling=SamplingSpec(max_tokens=8, temperature=1.0), max_context_tokens=2048, sampling_seed=0)
    shape = TreeConfig(branch_turns=list(branch_turns), branches=2)
    return rollout(generator, chat, episodes, agent=agent, config=config, tree=shape).trajectories


def _replay(trajectory: Trajectory, max_turns: int = 4) -> None:
    """Play the episode's actions on a fresh env from its reset: the same observations, rewards and end."""
    env = gym.make(trajectory.env_id, max_turns=max_turns)
    observation, _ = env.reset(seed=trajectory.seed)
    users = [m["content"] for m in trajectory.messages if m["role"] == "user"]
    actions = [m["content"] for m in trajectory.messages if m["role"] == "assistant"]
    assert users[0] == observation
    for index, (action, turn) in enumerate(zip(actions, trajectory.turns, strict=True)):
        observation, reward, terminated, truncated, _ = env.step(action)
        assert reward == turn.reward
        if index + 1 < len(users):
            assert users[index + 1] == observation
    assert (terminated or truncated) == (trajectory.end_reason in ("terminated", "truncated"))


def test_tree_rollout_branches_from_snapshots_within_the_budget(tiny_setup: tuple[HfGenerator, ChatTokens]) -> None:
    from test_rollout import assert_matches_rendering, is_canonical

    generator, chat = tiny_setup
    trajectories = _tree_rollout(generator, chat)
    by_index = {t.episode_index: t for t in trajectories}
    assert [sum(t.group_id == g for t in trajectories) for g in (0, 1)] == [4, 4]  # the budget, exactly
    branched = [t for t in trajectories if t.parent_episode is not None]
    assert branched, "no episode branched"
    for trajectory in trajectories:
        trajectory.check()
        _replay(trajectory)  # a branch restored from the snapshot plays on from the trunk's state
        if is_canonical(chat, trajectory):
            assert_matches_rendering(chat, trajectory)  # re-rendering the branch's conversation gives its tokens
    for child in branched:
        parent = by_index[child.parent_episode]
        cut = child.turns[child.shared_turns].start
        # The branch saw the trunk's conversation, token for token, up to the branch point.
        assert child.token_ids[:cut] == parent.token_ids[:cut]
        assert child.messages[: 2 + 2 * child.shared_turns] == parent.messages[: 2 + 2 * child.shared_turns]
    work = played_work(trajectories, 1.0)
    assert work["env_steps"] == sum(len(t.turns) - t.shared_turns for t in trajectories)
    assert work["env_steps"] < sum(len(t.turns) for t in trajectories)  # shared turns were played once
    for layout in ("sequence", "turn"):
        samples = tree_samples(trajectories, layout)
        assert sum(sum(s.loss_mask) for s in samples) == work["tokens/generated"]  # the prefix counted once
        for sample in samples:
            source = by_index[sample.episode_index]
            if layout == "sequence":  # the tokens trained on are the branch's own, as rendered
                assert sample.token_ids == source.token_ids[: len(sample.token_ids)]
            assert all(not m or i >= source.turns[source.shared_turns].start for i, m in enumerate(sample.loss_mask)
                       if layout == "sequence")


def test_branch_points_never_reached_hand_out_the_snapshot_their_episode_started_from(
    tiny_setup: tuple[HfGenerator, ChatTokens],
) -> None:
    generator, chat = tiny_setup
    # Episodes end after 2 turns, so the branch points after turn 3 never come: episode 2 (of
    # the trunk at turn 3) starts from the trunk's reset instead, and episode 3 (of episode 1 at
    # turn 3) from where episode 1 started, the trunk after turn 1.
    trajectories = _tree_rollout(generator, chat, branch_turns=(1, 3), max_turns=2)
    assert [(t.parent_episode, t.shared_turns) for t in trajectories[:4]] == [(None, 0), (0, 1), (0, 0), (0, 1)]
    for trajectory in trajectories:
        assert len(trajectory.turns) == 2
        _replay(trajectory, max_turns=2)
    samples = tree_samples(trajectories, "sequence")
    assert sum(sum(s.loss_mask) for s in samples) == played_work(trajectories, 1.0)["tokens/generated"]


def test_markov_agent_tree_rollout(tiny_setup: tuple[HfGenerator, ChatTokens]) -> None:
    generator, chat = tiny_setup
    trajectories = _tree_rollout(generator, chat, agent="markov")
    for trajectory in trajectories:
        trajectory.check()
        assert trajectory.fresh_contexts
        _replay(trajectory)
    samples = tree_samples(trajectories, "turn")
    assert len(samples) == played_work(trajectories, 1.0)["env_steps"]
    for sample in samples:
        source = trajectories[sample.episode_index]
        turn = source.turns[sample.turn_index]
        assert sample.token_ids == source.token_ids[turn.observation_start : turn.end]  # the fresh context it saw


def test_trainer_step_with_tree_rollouts(tmp_path: Any) -> None:
    from llmgym_train.testing import save_tiny_model
    from llmgym_train.trainer import Trainer

    model = save_tiny_model(tmp_path / "model", seed=1)
    config = load_config(overrides=[
        f"model={model}", f"train_envs=[{{id: {FROZEN_LAKE}, n_groups: 1, options: {{max_turns: 3}}}}]", "steps=1",
        f"output={tmp_path / 'run'}", "rollout.backend=hf", "rollout.max_new_tokens=4", "rollout.max_model_len=512",
        "rollout.tree.branch_turns=[0,1]", "rollout.tree.budget=3", "loss.credit=tree", "eval.disabled=true",
        "progress=false", "threads=1",
    ])
    with Trainer(config) as trainer:
        metrics = trainer.train_step()
    assert metrics["env_steps"] <= 3 * 3 and metrics["samples"] >= 3
    assert metrics["tokens/generated"] < metrics["generated_tokens"] or metrics["tree/shared_turns_mean"] == 0
