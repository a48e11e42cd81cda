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

import pytest

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")
from ray.cluster_utils import Cluster  # noqa: E402

from llmgym_train.config import load_config  # noqa: E402
from llmgym_train.distributed import RolloutEngines, state_digest  # noqa: E402
from llmgym_train.generation import SamplingSpec  # noqa: E402
from llmgym_train.generation.hf_backend import HfGenerator  # noqa: E402
from llmgym_train.testing import save_tiny_model  # noqa: E402

pytestmark = pytest.mark.timeout(300)

_MB = 2**20


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    os.environ.setdefault("RAY_DISABLE_USAGE_STATS", "1")
    node = {"num_cpus": 1, "object_store_memory": 100 * _MB}
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
    cluster: Cluster, tiny_folder: Path, tmp_path: Path
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
    })
    with Trainer(config) as trainer:
        engines = trainer.generator
        assert isinstance(engines, RolloutEngines) and len(set(engines.nodes)) == 2
        seen = [state_digest(trainer.policy.export_weights())]
        assert engines.weights_digests() == seen * 2
        while trainer.step < config.steps:
            metrics = trainer.train_step()
            assert metrics["samples"] == 4 and metrics["generated_tokens"] > 0
            seen.append(state_digest(trainer.policy.export_weights()))
            assert engines.weights_digests() == [seen[-1]] * 2, f"engines differ after step {trainer.step}"
        assert len(set(seen)) == len(seen), "every update changed the weights the engines received"
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
    from llmgym_train.distributed import NcclTransport

    with pytest.raises(InvalidOptionError, match="weight_transport=object_store"):
        NcclTransport(ray, [], "127.0.0.1", 0)
