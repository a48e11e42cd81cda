"""The Ray env backend on a real two-node Ray cluster (``ray.cluster_utils.Cluster``) on this machine.

One cluster serves the whole module: starting Ray costs seconds on a 2-core machine. Every
call that can fail has a bound, so a failure shows as an error, never as a hung test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from llmgym.error import DependencyNotInstalled, SubEnvError, WorkerDiedError  # noqa: E402
from llmgym.parsing import extract_answer  # noqa: E402
from llmgym.vector import TextVectorEnv, make_vector_env  # noqa: E402
from llmgym.vector.ray_backend import RayEnvBackend  # noqa: E402
from llmgym.vector.vector_env import EnvFactory  # noqa: E402
from llmgym_train.config import DistributedConfig  # noqa: E402
from test_vector import assert_same, play_with_masks  # noqa: E402

pytestmark = pytest.mark.timeout(240)

_MB = 2**20
SLOW = "<answer>slow</answer>"


def slow_parser(completion: str) -> str | None:
    """The default parser, except that the action ``slow`` takes a second to parse."""
    parsed = extract_answer(completion)
    if parsed == "slow":
        time.sleep(1.0)
    return parsed


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    os.environ.setdefault("RAY_DISABLE_USAGE_STATS", "1")
    # Test-module functions reach the actors by value: the workers cannot import tests/.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    node = {"num_cpus": 2, "object_store_memory": 100 * _MB}
    started = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    started.add_node(**node)
    ray.init(address=started.address, log_to_driver=False)
    started.wait_for_nodes()
    yield started
    ray.shutdown()
    started.shutdown()


@pytest.mark.parametrize(
    ("env_id", "autoreset_mode"),
    [
        ("llmgym/FrozenLake-Slippery-v0", "next_step"),  # slippery: the env's RNG moves in step too
        ("llmgym/FrozenLake-Slippery-v0", "same_step"),
        ("llmgym/FrozenLake-Slippery-v0", "disabled"),
        ("llmgym/Sokoban-v0", "next_step"),
    ],
)
def test_actors_spread_over_both_nodes_and_match_the_inline_backend(
    cluster: Cluster, ray_idle: None, env_id: str, autoreset_mode: str
) -> None:
    kwargs = {"max_turns": 4}
    local = make_vector_env(env_id, 8, autoreset_mode=autoreset_mode, **kwargs)
    workers = DistributedConfig(ray_address=cluster.address, num_env_workers=2, env_worker_cpus=0.5)
    remote = make_vector_env(env_id, 8, autoreset_mode=autoreset_mode, **workers.vector_env_options(),
                             **kwargs)
    try:
        nodes = {node_id for node_id, _ in remote._backend.locations()}
        assert nodes == {node["NodeID"] for node in ray.nodes() if node["Alive"]}
        assert len(nodes) == 2
        for use_async in (False, True):
            assert_same(play_with_masks(remote, 12, use_async), play_with_masks(local, 12, use_async))
    finally:
        local.close()
        remote.close()


def test_backend_named_ray_in_make_vec_builds_ray_env_backend_with_its_defaults(cluster: Cluster) -> None:
    import gymnasium as gym

    remote = gym.make_vec("llmgym/FrozenLake-v0", 4, backend="ray", num_workers=2, max_turns=4)
    local = make_vector_env("llmgym/FrozenLake-v0", 4, max_turns=4)
    try:
        assert isinstance(remote, TextVectorEnv) and remote.backend_name == "ray"
        assert len(remote._backend.actors) == 2 and remote.spec.kwargs["backend"] == "ray"
        assert_same(play_with_masks(remote, 6, use_async=False), play_with_masks(local, 6, use_async=False))
    finally:
        local.close()
        remote.close()


def test_a_killed_actor_raises_worker_died_error_naming_the_sub_env_and_seed(cluster: Cluster) -> None:
    venv = make_vector_env("llmgym/FrozenLake-v0", 4, backend=RayEnvBackend(num_cpus=0.5), num_workers=2,
                           action_parser=slow_parser)
    venv.reset(seed=40)
    (_, pid_of_second), = venv._backend.locations()[1:]
    threading.Timer(0.3, os.kill, (pid_of_second, signal.SIGKILL)).start()
    started = time.monotonic()
    with pytest.raises(WorkerDiedError) as caught:
        venv.step([SLOW] * 4)
    assert time.monotonic() - started < 30
    assert caught.value.index == 2 and caught.value.seed == 42  # the first sub-env of the dead shard
    assert venv.closed
    venv.close()


def test_restart_replaces_a_killed_actor_and_resets_its_sub_envs_from_their_seeds(cluster: Cluster) -> None:
    kwargs = {"action_parser": slow_parser}
    venv = make_vector_env("llmgym/FrozenLake-v0", 4, backend=RayEnvBackend(restart=True, num_cpus=0.5),
                           num_workers=2, **kwargs)
    local = make_vector_env("llmgym/FrozenLake-v0", 4, **kwargs)
    try:
        venv.reset(seed=40)
        local.reset(seed=40)
        (_, first_pid), (_, second_pid) = venv._backend.locations()
        threading.Timer(0.3, os.kill, (second_pid, signal.SIGKILL)).start()
        with pytest.raises(SubEnvError, match="restarted") as caught:
            venv.step(["<answer>Right</answer>", "<answer>Right</answer>", SLOW, SLOW])
        assert caught.value.index == 2 and caught.value.seed == 42
        assert venv.needs_reset.tolist() == [False, False, True, True]
        (_, first_after), (_, second_after) = venv._backend.locations()
        assert first_after == first_pid and second_after != second_pid
        # The surviving shard kept its state; the restarted one plays again once reset.
        local.step(["<answer>Right</answer>"] * 2 + [None] * 2, mask=np.array([True, True, False, False]))
        assert_same(venv.reset(seed=[None, None, 42, 43], mask=venv.needs_reset.copy()),
                     local.reset(seed=[None, None, 42, 43], mask=np.array([False, False, True, True])))
        moves = ["<answer>Down</answer>"] * 4
        assert_same(venv.step(moves), local.step(moves))
    finally:
        venv.close()
        local.close()


def test_a_sub_env_over_step_timeout_raises_timeout_error_without_hanging(cluster: Cluster) -> None:
    venv = make_vector_env("llmgym/FrozenLake-v0", 2, backend=RayEnvBackend(num_cpus=0.5), num_workers=2,
                           step_timeout=0.5, action_parser=slow_parser)
    venv.reset(seed=0)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="sub-env 1"):
        venv.step(["<answer>Right</answer>", SLOW])
    assert time.monotonic() - started < 10
    assert venv.closed


def test_a_failing_factory_names_its_sub_env(cluster: Cluster) -> None:
    good, bad = EnvFactory("llmgym/FrozenLake-v0", {"size": 4}), EnvFactory("llmgym/FrozenLake-v0", {"size": 1})
    with pytest.raises(SubEnvError, match="Sub-env 2") as caught:
        TextVectorEnv([good, good, bad], backend=RayEnvBackend(num_cpus=0.5), num_workers=2)
    assert caught.value.index == 2


def test_choosing_ray_without_ray_installed_names_the_install_command() -> None:
    hide_ray = (
        "import sys; sys.modules['ray'] = None\n"
        "from llmgym.vector import make_vector_env\n"
        "from llmgym.vector.ray_backend import RayEnvBackend\n"
        "venv = make_vector_env('llmgym/FrozenLake-v0', 2)\n"
        "venv.reset(seed=0); venv.close()\n"
        "make_vector_env('llmgym/FrozenLake-v0', 2, backend=RayEnvBackend())\n"
    )
    result = subprocess.run([sys.executable, "-c", hide_ray], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert DependencyNotInstalled.__name__ in result.stderr
    assert 'pip install "llmgym[ray]"' in result.stderr
