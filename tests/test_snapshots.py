"""Env snapshots: ``get_state``/``set_state`` round trips and state keys, for every registered id.

The property: play some actions, snapshot, play on (recording every result), restore, replay
the same actions: every observation, reward, ``terminated``, ``truncated`` and info is the same.
Also after pickling (in a fresh env, and in another process) and through each vector backend.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import llmgym
from llmgym.core import EnvState

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


def make(env_id: str) -> gym.Env:
    return gym.make(env_id).unwrapped


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
from test_snapshots import play
jobs = pickle.loads(sys.stdin.buffer.read())
results = []
for env_id, state, suffix in jobs:
    env = gym.make(env_id).unwrapped
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
