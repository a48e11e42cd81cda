"""llmgym's vector env and Gymnasium's own vector paths over llmgym envs.

Equivalence is checked against the plainest reference there is: the same envs made one by
one with ``gym.make`` and stepped in a loop. Failure paths (exceptions, timeouts, killed
workers) run on the real process backend and check that no worker outlives the vector env.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ClosedEnvironmentError
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv
from hypothesis import given, settings
from hypothesis import strategies as st

import llmgym
from llmgym.core import Outcome, TextEnv
from llmgym.error import InvalidOptionError, ResetNeeded, SubEnvError, UnknownOptionError, WorkerDiedError
from llmgym.vector import TextVectorEnv, make_vector_env
from llmgym.vector.infos import batch_infos

pytestmark = pytest.mark.timeout(120)

ENV_IDS = llmgym.env_ids()
BACKENDS = ("inline", "thread", "process")
#: Cycled over sub-envs and steps: moves most envs know, plus an unparseable completion.
SCRIPT = ("<answer>Down</answer>", "<answer>Right</answer>", "no answer", "<answer>Up</answer>",
          "<answer>Left</answer>", "<answer>Right</answer>", "<answer>Down</answer>")
#: Math envs get numbers: they are checked exactly, while words would start the (slow to
#: import) math-verify worker in every process, which is not what these tests are about.
MATH_SCRIPT = ("<answer>3</answer>", "<answer>12</answer>", "no answer", "<answer>-1</answer>",
               "<answer>0.5</answer>")
NUM_ENVS, NUM_STEPS, SEED = 3, 7, 11


def scripted_actions(env_id: str, step: int, num_envs: int) -> list[str]:
    script = MATH_SCRIPT if env_id.startswith("llmgym/Math") else SCRIPT
    return [script[(step + 2 * index) % len(script)] for index in range(num_envs)]


class CounterEnv(TextEnv):
    """Count to a target drawn at reset; ``crash`` raises, ``sleep<s>`` sleeps (for failure tests)."""

    @property
    def system_prompt(self) -> str:
        return "Count to the target: answer <answer>+1</answer>."

    def _reset_task(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self._target = int(options.get("level", self.np_random.integers(2, 6)))
        self._count = 0
        return self._observe(), {"target": self._target}

    def _apply(self, action: str) -> Outcome:
        if action == "crash":
            raise RuntimeError("counter exploded")
        if action.startswith("sleep"):
            time.sleep(float(action.removeprefix("sleep")))
            return Outcome(self._observe(), effective=False)
        if action != "+1":
            return Outcome(self._observe(), valid=False, effective=False)
        self._count += 1
        done = self._count >= self._target
        return Outcome(self._observe(), reward=float(done), terminated=done, success=done)

    def _observe(self) -> str:
        return f"count {self._count} of {self._target}"

    def count_plus(self, extra: int) -> int:
        return self._count + extra


def counter_venv(backend: str, num_envs: int = 4, **options: Any) -> TextVectorEnv:
    if backend != "inline":
        options.setdefault("num_workers", 2)
    return TextVectorEnv([CounterEnv] * num_envs, backend=backend, **options)


def answer(text: str) -> str:
    return f"<answer>{text}</answer>"


def unbatch_info(infos: dict[str, Any], index: int) -> dict[str, Any]:
    """Sub-env ``index``'s own info dict out of a batched one (keys where its ``_key`` mask is set)."""
    return {
        key: unbatch_info(value, index) if isinstance(value, dict) else value[index]
        for key, value in infos.items()
        if not key.startswith("_") and infos[f"_{key}"][index]
    }


def assert_no_workers_left(pids: list[int]) -> None:
    """Every pid has exited and been reaped (workers are the fork server's children)."""
    assert pids
    children = {child.pid for child in multiprocessing.active_children()}
    assert not children & set(pids)
    deadline = time.monotonic() + 5
    for pid in pids:
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            assert time.monotonic() < deadline, f"worker {pid} is still alive"
            time.sleep(0.02)


@pytest.fixture
def closing() -> Iterator[Callable[[Any], Any]]:
    """Register vector envs to close at the end of the test, whatever happens."""
    venvs: list[Any] = []

    def register(venv: Any) -> Any:
        venvs.append(venv)
        return venv

    yield register
    for venv in venvs:
        venv.close()


# ---------------------------------------------------------------------- equivalence
def run_single_envs(env_id: str) -> list[list[tuple[Any, ...]]]:
    """The reference: ``NUM_ENVS`` envs stepped one by one, Gymnasium's NEXT_STEP autoreset by hand."""
    envs = [gym.make(env_id) for _ in range(NUM_ENVS)]
    rows = [[env.reset(seed=SEED + index) for index, env in enumerate(envs)]]
    ended = [False] * NUM_ENVS
    for step in range(NUM_STEPS):
        row = []
        for index, (env, action) in enumerate(zip(envs, scripted_actions(env_id, step, NUM_ENVS))):
            if ended[index]:
                observation, info = env.reset()
                result: tuple[Any, ...] = (observation, 0.0, False, False, info)
            else:
                result = env.step(action)
            ended[index] = result[2] or result[3]
            row.append(result)
        rows.append(row)
    for env in envs:
        env.close()
    return rows


def run_vector_env(venv: gym.vector.VectorEnv, env_id: str) -> list[list[tuple[Any, ...]]]:
    """The same script on a vector env, split back into per-sub-env tuples."""
    observations, infos = venv.reset(seed=SEED)
    rows = [[(observations[i], unbatch_info(infos, i)) for i in range(NUM_ENVS)]]
    for step in range(NUM_STEPS):
        actions = scripted_actions(env_id, step, NUM_ENVS)
        observations, rewards, terminations, truncations, infos = venv.step(actions)
        rows.append([
            (observations[i], rewards[i], terminations[i], truncations[i], unbatch_info(infos, i))
            for i in range(NUM_ENVS)
        ])
    venv.close()
    return rows


IN_PROCESS_VECTORIZERS: dict[str, Callable[[str], gym.vector.VectorEnv]] = {
    "inline": lambda env_id: gym.make_vec(env_id, NUM_ENVS, vectorization_mode="vector_entry_point"),
    "thread": lambda env_id: gym.make_vec(env_id, NUM_ENVS, backend="thread"),
    "gymnasium-sync": lambda env_id: gym.make_vec(env_id, NUM_ENVS, vectorization_mode="sync"),
}
MULTIPROCESS_VECTORIZERS: dict[str, Callable[[str], gym.vector.VectorEnv]] = {
    "process": lambda env_id: gym.make_vec(env_id, NUM_ENVS, backend="process", num_workers=2),
    "gymnasium-async": lambda env_id: gym.make_vec(
        env_id, NUM_ENVS, vectorization_mode="async", vector_kwargs={"shared_memory": False}),
    "gymnasium-async-shared-memory": lambda env_id: gym.make_vec(
        env_id, NUM_ENVS, vectorization_mode="async", vector_kwargs={"shared_memory": True}),
}
#: One id per env class: what crosses a process boundary (pickled factories, results, the
#: shared-memory layout of the observation space) depends on the class, not on its kwargs,
#: and every new process pays the env's first-use costs (imports, a verifier's warm-up).
def first_id_of_each_class(env_ids: list[str]) -> list[str]:
    firsts: dict[Any, str] = {}
    for env_id in env_ids:
        firsts.setdefault(gym.spec(env_id).entry_point, env_id)
    return list(firsts.values())


ONE_ID_PER_CLASS = first_id_of_each_class(ENV_IDS)
EQUIVALENCE_CASES = [
    *((env_id, name) for env_id in ENV_IDS for name in IN_PROCESS_VECTORIZERS),
    *((env_id, name) for env_id in ONE_ID_PER_CLASS for name in MULTIPROCESS_VECTORIZERS),
]
VECTORIZERS = {**IN_PROCESS_VECTORIZERS, **MULTIPROCESS_VECTORIZERS}


@pytest.fixture(scope="module")
def single_env_runs() -> dict[str, list[list[tuple[Any, ...]]]]:
    return {}


@pytest.mark.parametrize(("env_id", "vectorizer"), EQUIVALENCE_CASES)
def test_vector_env_equals_single_envs_stepped_one_by_one(
    env_id: str, vectorizer: str, single_env_runs: dict[str, Any]
) -> None:
    if env_id not in single_env_runs:
        single_env_runs[env_id] = run_single_envs(env_id)
    expected = single_env_runs[env_id]
    got = run_vector_env(VECTORIZERS[vectorizer](env_id), env_id)
    assert len(got) == len(expected)
    for step, (got_row, expected_row) in enumerate(zip(got, expected)):
        for index, (got_result, expected_result) in enumerate(zip(got_row, expected_row)):
            assert got_result == expected_result, f"step {step}, sub-env {index}"


def test_equivalence_script_ends_episodes_so_autoreset_is_covered(single_env_runs: dict[str, Any]) -> None:
    env_id = "llmgym/FrozenLake-v0"
    rows = single_env_runs.get(env_id) or run_single_envs(env_id)
    assert any(result[2] for row in rows[1:-1] for result in row)


def test_info_keys_with_a_number_in_one_sub_env_and_none_in_another_are_kept(closing: Any) -> None:
    # Gymnasium's own vector envs raise TypeError here (an int array cannot hold the None).
    venv = closing(make_vector_env("llmgym/Sokoban-v0", 2))
    unsolvable = "#######\n#@$$..#\n#######"
    _, infos = venv.reset(seed=0, options=[{"level": "#####\n#@$.#\n#####"}, {"level": unsolvable}])
    assert infos["optimal_steps"].tolist() == [1, None]
    assert infos["_optimal_steps"].tolist() == [True, True]


SCALARS = st.one_of(st.integers(-3, 3), st.floats(-2, 2, width=32), st.booleans(), st.none(),
                   st.text("ab1", max_size=2), st.builds(np.float32, st.floats(-2, 2, width=32)))
INFOS = st.fixed_dictionaries({}, optional={
    "a": SCALARS, "b": SCALARS, "final_obs": st.text(max_size=2),
    "nested": st.dictionaries(st.sampled_from("xy"), SCALARS, max_size=2),
    "array": st.builds(lambda n: np.arange(2) * n, st.integers(0, 3)),
})


@settings(max_examples=300, deadline=None)
@given(infos=st.lists(INFOS, min_size=1, max_size=4), indices_seed=st.randoms())
def test_batch_infos_equals_gymnasium_add_info(infos: list[dict[str, Any]], indices_seed: Any) -> None:
    num_envs = len(infos) + 1
    indices = sorted(indices_seed.sample(range(num_envs), len(infos)))
    reference = VectorEnv.__new__(VectorEnv)
    reference.num_envs = num_envs
    expected: dict[str, Any] = {}
    try:
        for index, info in zip(indices, infos):
            expected = VectorEnv._add_info(reference, expected, info, index)
    except (TypeError, ValueError):
        expected = None  # Gymnasium cannot batch these; batch_infos keeps them in object arrays
    got = batch_infos(num_envs, list(zip(indices, infos)))
    if expected is not None:
        assert_batches_equal(got, expected)
        return
    # Where Gymnasium fails, a column that did not fit is an object array of the values as given.
    assert _holds_values_as_given(got, list(zip(indices, infos)))


def _holds_values_as_given(batched: dict[str, Any], infos: list[tuple[int, dict[str, Any]]]) -> bool:
    """Every object column holds each sub-env's value itself; True if there is such a column."""
    found = False
    for key, column in batched.items():
        if key.startswith("_"):
            continue
        if isinstance(column, dict):
            nested = [(index, info[key]) for index, info in infos if key in info]
            found = _holds_values_as_given(column, nested) or found
        elif column.dtype == object:
            found = True
            for index, info in infos:
                assert batched[f"_{key}"][index] == (key in info)
                assert key not in info or column[index] is info[key]
    return found


def test_make_vec_defaults_to_llmgym_vector_env() -> None:
    venv = gym.make_vec("llmgym/FrozenLake-v0", 2)
    try:
        assert isinstance(venv, TextVectorEnv)
        assert venv.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
        assert venv.observation_space == gym.vector.utils.batch_space(venv.single_observation_space, 2)
        observations, _ = venv.reset(seed=0)
        assert isinstance(observations, tuple) and all(isinstance(text, str) for text in observations)
        assert observations in venv.observation_space
    finally:
        venv.close()


def play_with_masks(venv: TextVectorEnv, rounds: int, use_async: bool) -> list[Any]:
    """Grouped reset, then steps with partial masks and masked resets; every result, in order."""
    actions = ["<answer>Right</answer>", "<answer>Down</answer>", "nonsense", "<answer>Left</answer>"]
    rng = np.random.default_rng(0)
    record: list[Any] = []

    async def play() -> None:
        record.append(await venv.areset(seed=11, options={"group_size": 2}) if use_async else
                      venv.reset(seed=11, options={"group_size": 2}))
        for _ in range(rounds):
            batch = [actions[i] for i in rng.integers(0, len(actions), venv.num_envs)]
            mask = ~venv.needs_reset & (rng.random(venv.num_envs) < 0.75)
            record.append(await venv.astep(batch, mask=mask) if use_async else venv.step(batch, mask=mask))
            if venv.needs_reset.any():
                record.append(venv.reset(seed=int(rng.integers(100)), mask=venv.needs_reset.copy()))

    asyncio.run(play())
    return record


def assert_same(left: Any, right: Any) -> None:
    """Equal results, arrays element by element (object arrays, lists and dicts alike)."""
    if isinstance(left, np.ndarray):
        np.testing.assert_array_equal(left, right)
    elif isinstance(left, dict):
        assert left.keys() == right.keys()
        for key in left:
            assert_same(left[key], right[key])
    elif isinstance(left, (tuple, list)):
        assert len(left) == len(right)
        for a, b in zip(left, right):
            assert_same(a, b)
    else:
        assert left == right


def script_with_resets(venv: gym.vector.VectorEnv, env_id: str, mode: AutoresetMode) -> list[Any]:
    """Run the script; under DISABLED, reset the ended sub-envs Gymnasium's way after each step."""
    outputs: list[Any] = [venv.reset(seed=SEED)]
    for step in range(NUM_STEPS):
        result = venv.step(scripted_actions(env_id, step, NUM_ENVS))
        outputs.append(result)
        ended = result[2] | result[3]
        if mode == AutoresetMode.DISABLED and ended.any():
            outputs.append(venv.reset(options={"reset_mask": ended}))
    venv.close()
    return outputs


def assert_batches_equal(got: Any, expected: Any) -> None:
    if isinstance(expected, dict):
        assert isinstance(got, dict) and set(got) == set(expected)
        for key in expected:
            assert_batches_equal(got[key], expected[key])
    elif isinstance(expected, np.ndarray):
        assert isinstance(got, np.ndarray) and got.dtype == expected.dtype
        if expected.dtype == object:
            assert got.tolist() == expected.tolist()
        else:
            np.testing.assert_array_equal(got, expected)  # NaN equals NaN here
    elif isinstance(expected, tuple) and expected and isinstance(expected[0], str):
        assert tuple(got) == expected
    elif isinstance(expected, tuple):
        assert len(got) == len(expected)
        for got_item, expected_item in zip(got, expected):
            assert_batches_equal(got_item, expected_item)
    else:
        assert got == expected


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.DISABLED, AutoresetMode.NEXT_STEP])
def test_autoreset_modes_match_gymnasium_sync_vector_env(mode: AutoresetMode, backend: str) -> None:
    env_id = "llmgym/FrozenLake-v0"
    expected = script_with_resets(
        SyncVectorEnv([lambda: gym.make(env_id)] * NUM_ENVS, autoreset_mode=mode), env_id, mode
    )
    options = {"num_workers": 2} if backend != "inline" else {}
    venv = make_vector_env(env_id, NUM_ENVS, backend=backend, autoreset_mode=mode, **options)
    got = script_with_resets(venv, env_id, mode)
    assert len(got) == len(expected)
    for got_output, expected_output in zip(got, expected):
        assert_batches_equal(got_output, expected_output)
    if mode == AutoresetMode.SAME_STEP:  # the script does end episodes: final_obs was exercised
        assert any("final_obs" in output[-1] for output in expected[1:])


# ---------------------------------------------------------------------- partial steps and modes
@pytest.mark.parametrize("backend", BACKENDS)
def test_partial_step_leaves_unmasked_sub_envs_untouched(backend: str, closing: Any) -> None:
    venv = closing(counter_venv(backend, autoreset_mode="Disabled"))
    start, _ = venv.reset(seed=0, options={"level": 2})
    observations, rewards, terminations, truncations, infos = venv.step(
        [answer("+1"), None, answer("+1"), None], mask=np.array([True, False, True, False])
    )
    assert observations == ("count 1 of 2", start[1], "count 1 of 2", start[3])
    assert rewards.tolist() == [0.0] * 4 and not terminations.any() and not truncations.any()
    assert infos["_turn"].tolist() == [True, False, True, False]
    # Only sub-env 0 finishes; the others report nothing happened, and 0 stays ended.
    only_first = np.array([True, False, False, False])
    observations, rewards, terminations, _, _ = venv.step([answer("+1")] * 4, mask=only_first)
    assert rewards.tolist() == [1.0, 0, 0, 0] and terminations.tolist() == [True, False, False, False]
    assert venv.needs_reset.tolist() == [True, False, False, False]
    with pytest.raises(ResetNeeded, match=r"Sub-envs \[0\] ended"):
        venv.step([answer("+1")] * 4)
    _, infos = venv.reset(options={"level": 3}, mask=np.array([True, False, False, False]))
    assert infos["_target"].tolist() == [True, False, False, False] and infos["target"][0] == 3
    observations, _, _, _, infos = venv.step([answer("+1")] * 4)
    assert observations == ("count 1 of 3", "count 1 of 2", "count 2 of 2", "count 1 of 2")
    assert infos["turn"].tolist() == [1, 1, 2, 1]


def test_partial_step_next_step_autoreset_waits_for_the_sub_envs_next_step(closing: Any) -> None:
    venv = closing(counter_venv("inline", num_envs=2))
    venv.reset(seed=0, options={"level": 1})
    _, _, terminations, _, _ = venv.step([answer("+1"), None], mask=np.array([True, False]))
    assert terminations.tolist() == [True, False]
    # Stepping only sub-env 1 does not autoreset sub-env 0 ...
    observations, _, _, _, _ = venv.step([None, answer("+1")], mask=np.array([False, True]))
    assert observations[0] == "count 1 of 1"
    # ... its own next step does (reward 0, fresh episode, reset info).
    observations, rewards, terminations, _, infos = venv.step(
        [answer("+1"), None], mask=np.array([True, False])
    )
    assert observations[0].startswith("count 0 of") and rewards[0] == 0.0 and not terminations[0]
    assert infos["_target"].tolist() == [True, False]


def test_step_rejects_bad_masks_and_action_counts(closing: Any) -> None:
    venv = closing(counter_venv("inline", num_envs=2))
    with pytest.raises(ResetNeeded, match="never reset"):
        venv.step([answer("+1")] * 2)
    venv.reset(seed=0)
    with pytest.raises(InvalidOptionError, match="expected 2, got 3"):
        venv.step([answer("+1")] * 3)
    with pytest.raises(InvalidOptionError, match=r"boolean array of shape \(2,\)"):
        venv.step([answer("+1")] * 2, mask=[1, 0])


def test_vector_env_options_are_checked_with_suggestions() -> None:
    with pytest.raises(UnknownOptionError, match="Did you mean 'backend'"):
        make_vector_env("llmgym/FrozenLake-v0", 2, backnd="process")
    with pytest.raises(InvalidOptionError, match="Did you mean 'process'"):
        make_vector_env("llmgym/FrozenLake-v0", 2, backend="proces")
    with pytest.raises(InvalidOptionError, match="needs backend='process'"):
        make_vector_env("llmgym/FrozenLake-v0", 2, backend="thread", step_timeout=1.0)
    with pytest.raises(InvalidOptionError, match="autoreset_mode"):
        make_vector_env("llmgym/FrozenLake-v0", 2, autoreset_mode="sometimes")
    venv = gym.make_vec("llmgym/FrozenLake-v0", 2, autoreset_mode="disabled", size=5)
    try:
        assert venv.metadata["autoreset_mode"] is AutoresetMode.DISABLED
        observations, _ = venv.reset(seed=0)
        assert len(observations[0].splitlines()) == 1 + 5
    finally:
        venv.close()


# ---------------------------------------------------------------------- group seeding
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_group_seeding_gives_each_group_one_level(env_id: str) -> None:
    venv = make_vector_env(env_id, 4)
    try:
        observations, _ = venv.reset(seed=5, options={"group_size": 2})
    finally:
        venv.close()
    single = gym.make(env_id)
    # Group k plays the level of seed 5 + k; distinct whenever the env draws levels from its seed.
    assert observations == (single.reset(seed=5)[0],) * 2 + (single.reset(seed=6)[0],) * 2


def test_group_seeding_gives_distinct_groups_distinct_levels() -> None:
    venv = make_vector_env("llmgym/FrozenLake-8x8-v0", 8)
    try:
        observations, infos = venv.reset(seed=5, options={"group_size": 2})
    finally:
        venv.close()
    assert len(set(observations)) == 4 and len(set(infos["seed"].tolist())) == 4


def test_group_seeding_without_seed_draws_fresh_levels_and_passes_options(closing: Any) -> None:
    venv = closing(make_vector_env("llmgym/FrozenLake-8x8-v0", 4))
    first, _ = venv.reset(options={"group_size": 2})
    second, _ = venv.reset(options={"group_size": 2})
    for observations in (first, second):
        assert observations[0] == observations[1] and observations[2] == observations[3]
    assert first[0] != second[0] and first[0] != first[2]
    level = ["SFF", "FHF", "FFG"]
    observations, infos = venv.reset(seed=0, options={"group_size": 2, "level": level})
    assert len(set(observations)) == 1 and len(observations[0].splitlines()) == 1 + 3
    per_env, _ = venv.reset(options=[{"level": level}, None, None, {"level": level}])
    assert per_env[0] == per_env[3] == observations[0] and per_env[1] != per_env[0]


def test_group_seeding_checks_the_group_size(closing: Any) -> None:
    venv = closing(make_vector_env("llmgym/FrozenLake-v0", 4))
    with pytest.raises(InvalidOptionError, match="not a multiple of group_size=3"):
        venv.reset(seed=0, options={"group_size": 3})
    with pytest.raises(InvalidOptionError, match="a list of seeds"):
        venv.reset(seed=[0, 1, 2, 3], options={"group_size": 2})


# ---------------------------------------------------------------------- async
@pytest.mark.parametrize("backend", BACKENDS)
def test_astep_and_areset_leave_the_event_loop_free(backend: str, closing: Any) -> None:
    venv = closing(counter_venv(backend, num_envs=2))

    async def main() -> tuple[int, Any, Any]:
        ticks = 0
        stop = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not stop.is_set():
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        reset = await venv.areset(seed=3, options={"level": 4})
        stepped = await venv.astep([answer("sleep1"), answer("+1")])
        stop.set()
        await task
        return ticks, reset, stepped

    ticks, (observations, infos), stepped = asyncio.run(main())
    assert observations == ("count 0 of 4",) * 2 and infos["target"].tolist() == [4, 4]
    assert stepped[0] == ("count 0 of 4", "count 1 of 4")
    assert ticks >= 3  # the loop kept running through a 1 s step (a blocked loop ticks 0 times)


def _built_here(env: CounterEnv) -> CounterEnv:
    env.built_in_pid = os.getpid()  # type: ignore[attr-defined]
    return env


@pytest.mark.parametrize("backend", BACKENDS)
def test_sub_envs_are_built_where_they_run_from_any_callable(backend: str, closing: Any) -> None:
    options = {"num_workers": 2} if backend != "inline" else {}
    factory = lambda: _built_here(CounterEnv(max_turns=2))  # noqa: E731  (a lambda on purpose)
    venv = closing(TextVectorEnv([factory] * 3, backend=backend, **options))
    built_in = venv.get_attr("built_in_pid")
    expected = set(venv.worker_pids) if backend == "process" else {os.getpid()}
    assert set(built_in) == expected and venv.get_attr("max_turns") == (2, 2, 2)
    venv.reset(seed=0)
    assert venv.call("count_plus", 5) == (5, 5, 5) and venv.render() == (None,) * 3
    # One call each, with its own arguments, to some sub-envs: results in the order asked.
    calls = [((7,), {}), ((1,), {})]
    assert asyncio.run(venv.acall_each("count_plus", calls, [2, 0])) == [7, 1]
    with pytest.raises(InvalidOptionError, match="one \\(args, kwargs\\) per index"):
        asyncio.run(venv.acall_each("count_plus", calls, [0]))


# ---------------------------------------------------------------------- failures
@pytest.mark.parametrize("backend", BACKENDS)
def test_sub_env_exception_names_index_and_seed(backend: str, closing: Any) -> None:
    venv = closing(counter_venv(backend))
    venv.reset(seed=40, options={"level": 9})
    with pytest.raises(SubEnvError) as caught:
        venv.step([answer("+1"), answer("crash"), answer("+1"), answer("+1")])
    error = caught.value
    assert (error.index, error.seed) == (1, 41)
    message = str(error)
    assert "Sub-env 1 (seed 41)" in message and "RuntimeError" in message and "counter exploded" in message
    assert "Traceback" in message and "_apply" in message  # the original traceback text
    with pytest.raises(ResetNeeded, match=r"\[1\] raised"):
        venv.step([answer("+1")] * 4)
    venv.reset(seed=41, options={"level": 9}, mask=np.array([False, True, False, False]))
    observations, *_ = venv.step([answer("+1")] * 4)
    # The others advanced through the failed call; sub-env 1 restarted.
    assert observations == ("count 2 of 9", "count 1 of 9", "count 2 of 9", "count 2 of 9")


def _raise_on_construction() -> gym.Env:
    raise ValueError("no such level pack")


@pytest.mark.parametrize("backend", BACKENDS)
def test_sub_env_construction_error_names_the_index(backend: str) -> None:
    options = {"num_workers": 2} if backend != "inline" else {}
    env_fns = [CounterEnv, CounterEnv, _raise_on_construction, CounterEnv]
    with pytest.raises(SubEnvError, match="Sub-env 2 .*no such level pack") as caught:
        TextVectorEnv(env_fns, backend=backend, **options)
    assert caught.value.index == 2
    assert not multiprocessing.active_children()


def _exit_on_construction() -> gym.Env:
    os._exit(3)


def test_worker_dying_while_building_its_sub_envs_is_reported() -> None:
    env_fns = [CounterEnv, CounterEnv, _exit_on_construction, CounterEnv]
    died = r"worker 1 .*died while working on sub-env 2 \(exit code 3\)"
    with pytest.raises(WorkerDiedError, match=died) as caught:
        TextVectorEnv(env_fns, backend="process", num_workers=2)
    assert caught.value.index == 2
    assert not multiprocessing.active_children()


@pytest.mark.parametrize("use_async", [False, True], ids=["step", "astep"])
def test_step_timeout_kills_the_hung_worker_and_closes(use_async: bool) -> None:
    venv = counter_venv("process", step_timeout=0.5)
    pids = venv.worker_pids
    venv.reset(seed=0, options={"level": 9})
    actions = [answer("+1"), answer("+1"), answer("sleep60"), answer("+1")]
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"Sub-env 2 \(seed 2\).*step_timeout=0.5"):
        if use_async:
            asyncio.run(venv.astep(actions))
        else:
            venv.step(actions)
    assert time.monotonic() - started < 10
    assert venv.closed
    assert_no_workers_left(pids)
    with pytest.raises(ClosedEnvironmentError, match="closed because sub-env 2"):
        venv.step(actions)
    venv.close()  # still fine


def test_cancelled_astep_closes_the_vector_env_and_its_workers() -> None:
    venv = counter_venv("process")
    pids = venv.worker_pids
    venv.reset(seed=0)

    async def cancel_mid_step() -> None:
        task = asyncio.create_task(venv.astep([answer("sleep30")] * 4))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_mid_step())
    assert venv.closed
    assert_no_workers_left(pids)
    with pytest.raises(ClosedEnvironmentError, match="cancelled"):
        venv.step([answer("+1")] * 4)


def test_killed_idle_worker_is_reported() -> None:
    venv = counter_venv("process")
    pids = venv.worker_pids
    venv.reset(seed=7)
    os.kill(pids[1], signal.SIGKILL)
    with pytest.raises(WorkerDiedError, match=r"worker 1 .*sub-envs 2\.\.3.*died") as caught:
        venv.step([answer("+1")] * 4)
    assert (caught.value.index, caught.value.seed) == (2, 9)
    assert venv.closed
    assert_no_workers_left(pids)


def test_worker_killed_mid_step_is_reported_without_hanging() -> None:
    venv = counter_venv("process")
    pids = venv.worker_pids
    venv.reset(seed=0, options={"level": 9})
    killer = threading.Timer(0.3, os.kill, (pids[1], signal.SIGKILL))
    killer.start()
    with pytest.raises(WorkerDiedError, match="sub-env 3") as caught:
        asyncio.run(venv.astep([answer("+1"), answer("+1"), answer("+1"), answer("sleep30")]))
    killer.join()
    assert caught.value.index == 3
    assert_no_workers_left(pids)


@pytest.mark.parametrize("backend", BACKENDS)
def test_close_ends_every_worker_and_is_idempotent(backend: str) -> None:
    venv = counter_venv(backend)
    pids = venv.worker_pids
    assert (len(pids) == 2) == (backend == "process")
    venv.reset(seed=0)
    venv.step([answer("+1")] * 4)
    venv.close()
    venv.close()
    assert venv.closed
    if pids:
        assert_no_workers_left(pids)
    with pytest.raises(ClosedEnvironmentError):
        venv.reset()


def test_workers_exit_when_the_parent_is_killed_mid_step(tmp_path: Path) -> None:
    parent = tmp_path / "parent.py"
    parent.write_text(textwrap.dedent("""
        import os, signal, threading, time
        from llmgym.vector import EnvFactory, TextVectorEnv

        def parse_slowly(completion):
            time.sleep(60)

        if __name__ == "__main__":
            factory = EnvFactory("llmgym/FrozenLake-v0", {"action_parser": parse_slowly})
            venv = TextVectorEnv([factory] * 2, backend="process", num_workers=2)
            venv.reset(seed=0)
            print(*venv.worker_pids, flush=True)
            threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGKILL)).start()
            venv.step(["<answer>Down</answer>"] * 2)
    """))
    completed = subprocess.run([sys.executable, str(parent)], capture_output=True, text=True, timeout=60)
    assert completed.returncode == -signal.SIGKILL, completed.stderr
    assert_no_workers_left([int(pid) for pid in completed.stdout.split()])


@pytest.mark.slow
def test_process_backend_starts_beside_torch_and_running_threads(tmp_path: Path) -> None:
    """A trainer's process: torch imported, its thread pool started, a Python thread using it."""
    pytest.importorskip("torch")
    parent = tmp_path / "trainer.py"
    parent.write_text(textwrap.dedent("""
        import threading
        import torch
        from llmgym.vector import make_vector_env

        if __name__ == "__main__":
            torch.ones(256, 256) @ torch.ones(256, 256)  # starts torch's intra-op thread pool
            stop = threading.Event()

            def multiply() -> None:
                while not stop.wait(0.001):
                    torch.ones(64, 64) @ torch.ones(64, 64)

            busy = threading.Thread(target=multiply)
            busy.start()
            venv = make_vector_env("llmgym/FrozenLake-v0", 4, backend="process", num_workers=2)
            venv.reset(seed=0)
            observations, *_ = venv.step(["<answer>Down</answer>"] * 4)
            venv.close()
            stop.set()
            busy.join()
            print(len(observations), "observations")
    """))
    completed = subprocess.run([sys.executable, str(parent)], capture_output=True, text=True, timeout=110)
    assert completed.stdout.strip() == "4 observations", completed.stderr


def test_close_after_a_sub_env_error_ends_every_worker() -> None:
    venv = counter_venv("process")
    pids = venv.worker_pids
    venv.reset(seed=0)
    with pytest.raises(SubEnvError):
        venv.step([answer("crash")] * 4)
    venv.close()
    assert_no_workers_left(pids)


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_a_vector_env_left_open_at_exit_ends_quietly(backend: str) -> None:
    # A script that never closes its vector env, held by a module (as a library's cache would hold
    # it): it is collected late in the interpreter's exit, after the modules its backend closes
    # with. The interpreter ends it, with nothing on stderr.
    script = textwrap.dedent(f"""
        import json
        import gymnasium as gym
        import llmgym
        json.held = gym.make_vec("llmgym/FrozenLake-v0", 2, backend={backend!r})
        json.held.reset(seed=0)
        json.held.step(["<answer>Down</answer>"] * 2)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr
