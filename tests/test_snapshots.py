"""Env snapshots: ``get_state``/``set_state`` round trips and state keys, for every registered id.

The property: play some actions, snapshot, play on (recording every result), restore, replay
the same actions: every observation, reward, ``terminated``, ``truncated`` and info is the same.
Also after pickling (in a fresh env, and in another process) and through each vector backend.
"""

from __future__ import annotations

import functools
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import llmgym
from llmgym.core import EnvState, Outcome, TextEnv
from llmgym.envs.math.verify import AnswerVerifier
from llmgym.error import (
    InvalidOptionError,
    ResetNeeded,
    SnapshotMismatch,
    SnapshotNotSupported,
    UnsafeSandboxWarning,
)
from llmgym.multiagent.opponents import random_opponent
from llmgym.vector import TextVectorEnv, make_vector_env

ENV_IDS = llmgym.env_ids()
#: Completions every env takes: no answer at all, and an answer no env accepts.
JUNK = ("no answer here", "<answer>nonsense</answer>")
#: Steps played before the snapshot and after it, at most.
MAX_PREFIX, MAX_SUFFIX = 6, 6


def candidate_actions(env: gym.Env) -> list[str]:
    """Completions that change the state: the env's action names, legal moves, or its plan; plus junk."""
    unwrapped = env.unwrapped
    if hasattr(unwrapped, "valid_actions"):  # games: the legal moves now
        names = unwrapped.valid_actions()
    else:
        names = list(getattr(unwrapped, "action_names", None) or unwrapped.solution() or ())
    return [f"<answer>{name}</answer>" for name in names] + list(JUNK)


def play(env: gym.Env, choices: list[int]) -> list[Any]:
    """Step ``env`` with ``choices`` (indices into the candidates of the moment); every result."""
    results = []
    for choice in choices:
        candidates = candidate_actions(env)
        results.append(env.step(candidates[choice % len(candidates)]))
    return results


#: Math envs check answers in workers with a wall-clock limit; on a crowded machine the default
#: 5 s can run out on one play and not on its replay, which is the clock, not the snapshot.
PATIENT_VERIFIER = AnswerVerifier(timeout=300.0)


def make(env_id: str) -> gym.Env:
    """The unwrapped env of ``env_id`` (math envs with a patient verifier)."""
    is_math = gym.spec(env_id).entry_point.startswith("llmgym.envs.math")  # type: ignore[union-attr]
    return gym.make(env_id, **({"verifier": PATIENT_VERIFIER} if is_math else {})).unwrapped


choice_lists = st.lists(st.integers(0, 63), max_size=MAX_SUFFIX)


@pytest.mark.parametrize("env_id", ENV_IDS)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), prefix=st.lists(st.integers(0, 63), max_size=MAX_PREFIX),
       suffix=choice_lists)
def test_restore_then_replay_gives_identical_results(env_id: str, seed: int, prefix: list[int],
                                                      suffix: list[int]) -> None:
    env = make(env_id)
    env.reset(seed=seed)
    play(env, prefix)
    state = env.get_state()
    key = env.state_key()
    first = play(env, suffix)
    env.set_state(state)
    assert env.state_key() == key
    assert play(env, suffix) == first
    # Pickled, into a fresh env of the same id (never reset), and into one mid-episode.
    fresh, busy = make(env_id), make(env_id)
    busy.reset(seed=seed + 1)
    play(busy, [1, 2])
    for other in (fresh, busy):
        other.set_state(pickle.loads(pickle.dumps(state)))
        assert other.state_key() == key
        assert play(other, suffix) == first


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_state_key_is_in_every_info_and_equal_states_have_equal_keys(env_id: str) -> None:
    env = make(env_id)
    _, info = env.reset(seed=5)
    assert info["state_key"] == env.state_key()
    hash(info["state_key"])
    start = env.get_state()
    for choice in range(4):
        (*_, info), = play(env, [choice])
        assert info["state_key"] == env.state_key()
    env.set_state(start)
    twin = make(env_id)
    twin.reset(seed=5)
    assert twin.state_key() == env.state_key()


def test_snapshot_is_a_frozen_env_state_and_does_not_follow_later_steps() -> None:
    env = make("llmgym/Sokoban-v0")
    env.reset(seed=1)
    state = env.get_state()
    assert isinstance(state, EnvState)
    blob = pickle.dumps(state)
    for _ in range(5):
        env.step("<answer>Up</answer>")
        env.step("<answer>Left</answer>")
    assert pickle.dumps(state) == blob
    assert len(blob) < 2048


def test_equal_frozen_lake_states_reached_by_different_paths_share_a_key() -> None:
    level = ["SFF", "FFF", "FFG"]
    left, right = make("llmgym/FrozenLake-v0"), make("llmgym/FrozenLake-v0")
    left.reset(options={"level": level})
    right.reset(options={"level": level})
    *_, left_info = play_names(left, ["Right", "Down"])
    *_, right_info = play_names(right, ["Down", "Right"])
    assert left_info["state_key"] == right_info["state_key"]
    *_, moved = play_names(right, ["Down"])
    assert moved["state_key"] != left_info["state_key"]


def play_names(env: gym.Env, names: list[str]) -> tuple[Any, ...]:
    result: tuple[Any, ...] = ()
    for name in names:
        result = env.step(f"<answer>{name}</answer>")
    return result


_REPLAY_ELSEWHERE = """
import pickle, sys
import gymnasium as gym
import llmgym
sys.path.insert(0, sys.argv[1])
from test_snapshots import make, play
jobs = pickle.loads(sys.stdin.buffer.read())
results = []
for env_id, state, suffix in jobs:
    env = make(env_id)
    env.set_state(state)
    results.append(play(env, suffix))
sys.stdout.buffer.write(pickle.dumps(results))
"""


def test_a_pickled_state_replays_identically_in_another_process() -> None:
    jobs, expected = [], []
    for number, env_id in enumerate(ENV_IDS):
        env = make(env_id)
        env.reset(seed=100 + number)
        play(env, [1, 2, 0])
        state = env.get_state()
        suffix = [3, 1, 2, 0, 1]
        expected.append(play(env, suffix))
        jobs.append((env_id, state, suffix))
    tests_dir = str(Path(__file__).resolve().parent)
    done = subprocess.run([sys.executable, "-c", _REPLAY_ELSEWHERE, tests_dir], input=pickle.dumps(jobs),
                          capture_output=True, check=True, timeout=300)
    assert pickle.loads(done.stdout) == expected


# ---------------------------------------------------------------------- envs that cannot snapshot
class CountdownEnv(TextEnv):
    """A minimal text env without the snapshot hooks: count down from 3 by answering ``tick``."""

    @property
    def system_prompt(self) -> str:
        return "Answer <answer>tick</answer> until the count reaches 0."

    def _reset_task(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.count = 3
        return self._observe(), {"seed": 0}

    def _apply(self, action: str) -> Outcome:
        if action != "tick":
            return Outcome(f"Say tick. {self._observe()}", valid=False, effective=False)
        self.count -= 1
        return Outcome(self._observe(), reward=float(self.count == 0), terminated=self.count == 0,
                       success=self.count == 0)

    def _observe(self) -> str:
        return f"count: {self.count}"


def test_an_env_without_the_hooks_raises_snapshot_not_supported_and_still_reports_state_keys() -> None:
    env = CountdownEnv()
    with pytest.raises(ResetNeeded):
        env.get_state()
    _, info = env.reset()
    assert info["state_key"] == "count: 3"
    assert env.step("<answer>tick</answer>")[4]["state_key"] == "count: 2"
    with pytest.raises(SnapshotNotSupported, match="_task_state"):
        env.get_state()


def test_a_versus_env_with_a_custom_opponent_refuses_unless_it_says_it_is_stateless() -> None:
    custom = functools.partial(random_opponent)
    env = gym.make("llmgym/TicTacToe-vs-random-v0", opponent=custom).unwrapped
    env.reset(seed=0)
    with pytest.raises(SnapshotNotSupported, match="custom callable"):
        env.get_state()
    custom.stateless = True  # type: ignore[attr-defined]
    state = env.get_state()
    first = play(env, [0, 1, 2])
    env.set_state(state)
    assert play(env, [0, 1, 2]) == first


def test_tool_use_snapshots_exactly_where_the_python_sandbox_isolates() -> None:
    env = make("llmgym/ToolUse-Python-v0")
    env.reset(seed=0)
    state = env.get_state()
    first = play(env, [0, 1])  # the plan's python call, then the answer
    assert first[0][4]["tool_calls"] == 1
    env.set_state(state)
    assert play(env, [0, 1]) == first
    with pytest.warns(UnsafeSandboxWarning):
        unisolated = gym.make("llmgym/ToolUse-Python-v0", isolation="none").unwrapped
    unisolated.reset(seed=0)
    with pytest.raises(SnapshotNotSupported, match="isolation='none'"):
        unisolated.get_state()


def test_set_state_refuses_a_state_of_another_env_or_id() -> None:
    lake = make("llmgym/FrozenLake-v0")
    lake.reset(seed=0)
    state = lake.get_state()
    sokoban = make("llmgym/Sokoban-v0")
    with pytest.raises(SnapshotMismatch, match="FrozenLakeEnv"):
        sokoban.set_state(state)
    with pytest.raises(SnapshotMismatch, match="llmgym/FrozenLake-8x8-v0"):
        make("llmgym/FrozenLake-8x8-v0").set_state(state)
    with pytest.raises(SnapshotMismatch):
        lake.set_state({"not": "a state"})  # type: ignore[arg-type]


# ---------------------------------------------------------------------- through the vector env
VECTOR_IDS = ("llmgym/FrozenLake-Slippery-v0", "llmgym/Sokoban-v0", "llmgym/TicTacToe-vs-random-v0")
VECTOR_ACTIONS = ("<answer>Left</answer>", "<answer>Down</answer>", "<answer>Right</answer>",
                  "<answer>Up</answer>", "<answer>5</answer>", "<answer>1</answer>", "<answer>9</answer>", "junk")


def vector_steps(venv: TextVectorEnv, rounds: int, offset: int = 0) -> list[Any]:
    """``rounds`` steps of every sub-env still playing; sub-env ``i`` plays a fixed sequence."""
    results = []
    for number in range(rounds):
        actions = [VECTOR_ACTIONS[(3 * index + number + offset) % len(VECTOR_ACTIONS)]
                   for index in range(venv.num_envs)]
        results.append(venv.step(actions, mask=~venv.needs_reset))
    return results


def flipped(results: list[Any]) -> list[Any]:
    """Step results with the sub-env axis reversed (observations, arrays, info arrays)."""
    def flip(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: flip(item) for key, item in value.items()}
        if isinstance(value, tuple):
            return tuple(flip(item) for item in value) if len(value) == 5 else value[::-1]
        return value[::-1] if isinstance(value, np.ndarray) else value

    return [(result[0][::-1], *(flip(item) for item in result[1:])) for result in results]


def check_vector_round_trip(venv: TextVectorEnv, states: list[EnvState], expected: list[Any]) -> None:
    """Restore ``states`` (in order, then reversed) and replay: the results are ``expected``."""
    venv.set_state(states)
    np.testing.assert_equal(vector_steps(venv, 4, offset=1), expected)
    venv.set_state(states[::-1])
    # Sub-env i now holds what sub-env n-1-i held; give it that sub-env's actions.
    reversed_actions = [[VECTOR_ACTIONS[(3 * (venv.num_envs - 1 - index) + number + 1) % len(VECTOR_ACTIONS)]
                         for index in range(venv.num_envs)] for number in range(4)]
    replay = [venv.step(actions, mask=~venv.needs_reset) for actions in reversed_actions]
    np.testing.assert_equal(flipped(replay), expected)


@pytest.mark.parametrize("env_id", VECTOR_IDS)
def test_vector_snapshots_round_trip_on_every_local_backend(env_id: str) -> None:
    reference = make_vector_env(env_id, 4, autoreset_mode="disabled")
    reference.reset(seed=7)
    vector_steps(reference, 2)
    states = reference.get_state()
    assert [state.observation for state in states] == list(reference._observations)
    expected = vector_steps(reference, 4, offset=1)
    check_vector_round_trip(reference, states, expected)
    reference.close()
    shipped = pickle.loads(pickle.dumps(states))
    for backend in ("thread", "process"):
        options = {"num_workers": 2}
        venv = make_vector_env(env_id, 4, backend=backend, autoreset_mode="disabled", **options)
        try:
            check_vector_round_trip(venv, shipped, expected)  # never reset: restored from scratch
            venv.set_state(shipped[:2], indices=[3, 1])
            assert venv.get_state(indices=[1, 3]) == [shipped[1], shipped[0]]
        finally:
            venv.close()


def test_vector_get_state_keeps_the_snapshot_error_type_across_processes() -> None:
    venv = make_vector_env("llmgym/TicTacToe-vs-random-v0", 2, backend="process", num_workers=1,
                           opponent=functools.partial(random_opponent))
    try:
        venv.reset(seed=0)
        with pytest.raises(SnapshotNotSupported, match="Sub-env 0: .*custom callable"):
            venv.get_state()
        with pytest.raises(InvalidOptionError, match="distinct sub-env indices"):
            venv.get_state(indices=[1, 1])
    finally:
        venv.close()


@pytest.mark.timeout(420)
def test_vector_snapshots_round_trip_on_the_ray_backend() -> None:
    ray = pytest.importorskip("ray")
    from llmgym.vector.ray_backend import RayEnvBackend

    reference = make_vector_env("llmgym/FrozenLake-Slippery-v0", 4, autoreset_mode="disabled")
    reference.reset(seed=3)
    vector_steps(reference, 2)
    states = reference.get_state()
    expected = vector_steps(reference, 4, offset=1)
    reference.close()
    started_here = not ray.is_initialized()
    if started_here:
        # address="local": a Ray of this test's own, never another program's cluster on the machine.
        ray.init(address="local", num_cpus=2, object_store_memory=100 * 2**20, include_dashboard=False,
                 log_to_driver=False)
    venv = make_vector_env("llmgym/FrozenLake-Slippery-v0", 4, backend=RayEnvBackend(num_cpus=0.5),
                           num_workers=2, autoreset_mode="disabled")
    try:
        check_vector_round_trip(venv, states, expected)
    finally:
        venv.close()
        if started_here:
            ray.shutdown()
