"""Rollouts on llmgym's vector env: the trajectories of the per-episode env path, batched env calls, failures by episode.

The pinned digests were recorded from the rollout as it was before it stepped a vector env
(one gymnasium env per episode, each call on a worker thread): the same plan, model and
greedy sampling must give the same trajectories (tokens, loss mask, per-turn rewards,
validity, state keys, messages, ends) on every backend.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
from typing import Any

import pytest

from llmgym.error import WorkerDiedError
from llmgym.vector import AutoresetMode, EnvFactory, TextVectorEnv
from llmgym_train.agents import AgentConfig
from llmgym_train.chat import ChatTokens
from llmgym_train.data import Trajectory
from llmgym_train.envs import EnvPool, EnvTimer, VectorEpisodes
from llmgym_train.generation import SamplingSpec
from llmgym_train.generation.hf_backend import HfGenerator
from llmgym_train.planner import EnvSpec, group_episodes
from llmgym_train.rollout import rollout

#: FrozenLake (3 turns) and Sokoban (2 turns), two groups and one, two episodes each.
MIXTURE = [EnvSpec("llmgym/FrozenLake-v0", 2, {"max_turns": 3}), EnvSpec("llmgym/Sokoban-v0", 1, {"max_turns": 2})]
#: Recorded from the per-episode path (greedy: group members play alike). Under the train/test split
#: the first group's seed draws again past an eval lake (with split="all" it played b245d3358175e846).
PINNED = ["a45585527db98f7e"] * 2 + ["0ea84df3713def3e"] * 2 + ["e84280a7789b4af7"] * 2


def trajectory_digest(trajectory: Trajectory) -> str:
    """A digest of everything an episode's training data holds."""
    turns = [(t.observation_start, t.start, t.end, t.reward, t.action_is_valid, t.finish_reason, repr(t.state_key))
             for t in trajectory.turns]
    view = [trajectory.token_ids, trajectory.loss_mask, turns, trajectory.messages, trajectory.end_reason,
            trajectory.success, trajectory.seed, trajectory.group_id, trajectory.env_id]
    return hashlib.sha256(json.dumps(view, default=repr).encode()).hexdigest()[:16]


def greedy_rollout(random_tiny_model: Any, char_tokenizer: Any, pool: EnvPool | None) -> list[Trajectory]:
    generator = HfGenerator(random_tiny_model, tokenizer=char_tokenizer, max_model_len=1024)
    config = AgentConfig(sampling=SamplingSpec(max_tokens=6, temperature=0.0), max_context_tokens=1024)
    episodes = group_episodes(MIXTURE, group_size=2, seed=7, step=3)
    return rollout(generator, ChatTokens(char_tokenizer), episodes, config=config, env_pool=pool).trajectories


@pytest.mark.parametrize("backend", ["inline", "process"])
def test_the_vector_env_plays_exactly_as_one_env_per_episode(
    random_tiny_model: Any, char_tokenizer: Any, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stepped: list[int] = []
    original = TextVectorEnv.astep

    async def counting(self: TextVectorEnv, actions: Any, mask: Any = None) -> Any:
        stepped.append(sum(mask))
        return await original(self, actions, mask)

    monkeypatch.setattr(TextVectorEnv, "astep", counting)
    pool = EnvPool(backend, num_workers=None if backend == "inline" else 2)
    try:
        trajectories = greedy_rollout(random_tiny_model, char_tokenizer, pool)
        assert [trajectory_digest(t) for t in trajectories] == PINNED
        assert [v.num_envs for v in pool.vector_envs] == [4, 2], "one vector env per env id and options"
        if backend == "process":
            assert [len(v.worker_pids) for v in pool.vector_envs] == [2, 2]
    finally:
        pool.close()
    steps = sum(len(t.turns) for t in trajectories)
    assert sum(stepped) == steps
    assert len(stepped) < steps / 2, f"a turn's envs step together: {stepped}"


def test_the_default_pool_plays_the_same(random_tiny_model: Any, char_tokenizer: Any) -> None:
    trajectories = greedy_rollout(random_tiny_model, char_tokenizer, None)
    assert [trajectory_digest(t) for t in trajectories] == PINNED


def test_a_dead_env_worker_fails_its_batch_naming_the_episode() -> None:
    episodes = group_episodes([EnvSpec("llmgym/FrozenLake-v0", 2)], group_size=2, seed=1)
    venv = TextVectorEnv([EnvFactory("llmgym/FrozenLake-v0")] * 4, backend="process", num_workers=2,
                         autoreset_mode=AutoresetMode.DISABLED)

    async def play() -> None:
        served = VectorEpisodes(venv, episodes, EnvTimer())
        envs = [served.env(index) for index in range(4)]
        await asyncio.gather(*(env.reset(seed=env.start.seed) for env in envs))
        os.kill(venv.worker_pids[1], signal.SIGKILL)  # holds episodes 2 and 3
        results = await asyncio.gather(*(env.step("<answer>Down</answer>") for env in envs), return_exceptions=True)
        assert all(isinstance(result, WorkerDiedError) for result in results), results
        error = results[0]
        assert isinstance(error, WorkerDiedError) and error.index in (2, 3)
        assert error.seed == episodes[error.index].seed
        assert f"episode {error.index} (llmgym/FrozenLake-v0, seed {error.seed})" in str(error)
        with pytest.raises(WorkerDiedError):  # later calls hear the same failure, none hangs
            await envs[0].step("<answer>Down</answer>")

    try:
        asyncio.run(asyncio.wait_for(play(), 120))
    finally:
        venv.close()
