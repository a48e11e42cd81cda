"""llmgym.jax: the JAX cores equal the text envs step for step, and the JAX PPO learns.

Equivalence is checked against the text envs themselves, over random completions (valid
moves, unknown names, too many moves, unparseable text, non-ASCII), random seeds and the
episodes that follow autoresets: thousands of episodes per run, for every supported id.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

jax = pytest.importorskip("jax")

import llmgym  # noqa: E402
from llmgym_train.eval.agents import JaxPpoAgent, make_agent, AgentOptions  # noqa: E402
from llmgym_train.eval.leaderboard import LeaderboardConfig, play  # noqa: E402
from llmgym_train.planner import EvalLevel  # noqa: E402
from llmgym.error import InvalidOptionError, SubEnvError  # noqa: E402
from llmgym.jax import (  # noqa: E402
    INVALID_ACTION,
    SUPPORTED_IDS,
    FrozenLake,
    GridVectorEnv,
    Slip,
    eval_levels,
    levels_from_seeds,
    make_core,
)
from llmgym.vector import make_vector_env  # noqa: E402
from llmgym.wrappers.classic import board_shape, board_spec, encode_board  # noqa: E402

pytestmark = pytest.mark.timeout(300)

#: Completions drawn at random: every move name of both games (so each game also gets names
#: it does not know), case and space variants, several moves, no answer, stray bytes.
COMPLETIONS = (
    "<answer>Up</answer>", "<answer>Down</answer>", "<answer>Left</answer>", "<answer>Right</answer>",
    "<answer> up </answer>", "<answer>RIGHT</answer>", "I go <answer>Down</answer>", "<answer>Jump</answer>",
    "<answer>Up || Left</answer>", "no answer at all", "<answer></answer>", "<answer>Lëft ☃</answer>",
)


def random_completions(rng: np.random.Generator, count: int) -> list[Any]:
    """Mostly the four moves (so episodes get somewhere), sometimes anything in COMPLETIONS."""
    picks = rng.integers(0, len(COMPLETIONS), count)
    moves = rng.integers(0, 4, count)
    return [COMPLETIONS[pick] if rng.random() < 0.3 else COMPLETIONS[move] for pick, move in zip(picks, moves)]


def assert_same(jax_value: Any, text_value: Any, where: str) -> None:
    """Exact equality of batched results: same keys, dtypes, shapes and values."""
    if isinstance(text_value, dict):
        assert set(jax_value) == set(text_value), f"{where}: keys differ: {set(jax_value) ^ set(text_value)}"
        for key in text_value:
            assert_same(jax_value[key], text_value[key], f"{where}[{key!r}]")
    elif isinstance(text_value, tuple):
        assert len(jax_value) == len(text_value), where
        for position, (left, right) in enumerate(zip(jax_value, text_value)):
            assert_same(left, right, f"{where}[{position}]")
    elif isinstance(text_value, np.ndarray):
        assert jax_value.dtype == text_value.dtype and jax_value.shape == text_value.shape, where
        assert list(jax_value) == list(text_value), f"{where}: {jax_value} != {text_value}"
    else:
        assert jax_value == text_value, f"{where}: {jax_value!r} != {text_value!r}"


def play_both(env_id: str, num_envs: int, steps: int, seed: int, numeric: bool = False, **env_kwargs: Any) -> int:
    """Step the jax and inline backends alike; assert every result equal; return episodes ended."""
    jax_venv = make_vector_env(env_id, num_envs, backend="jax", **env_kwargs)
    text_venv = make_vector_env(env_id, num_envs, backend="inline", **env_kwargs)
    rng = np.random.default_rng(seed)
    try:
        assert_same(jax_venv.reset(seed=seed), text_venv.reset(seed=seed), "reset")
        ended = 0
        for step in range(steps):
            if numeric:
                codes = rng.integers(0, 4, num_envs)
                names = text_venv.get_attr("action_names")[0]
                actions_jax: Any = codes
                actions_text = [f"<answer>{names[code]}</answer>" for code in codes]
            else:
                actions_jax = actions_text = random_completions(rng, num_envs)
            jax_step, text_step = jax_venv.step(actions_jax), text_venv.step(actions_text)
            assert_same(jax_step, text_step, f"{env_id} step {step}")
            ended += int(np.sum(text_step[2] | text_step[3]))
        return ended
    finally:
        jax_venv.close()
        text_venv.close()


# ---------------------------------------------------------------------- equivalence
@pytest.mark.parametrize("env_id", SUPPORTED_IDS)
def test_jax_backend_equals_text_env_step_for_step(env_id: str) -> None:
    """Observation text, reward, terminated, truncated and every info, for 256 seeds and what follows."""
    # Random moves rarely end a Sokoban episode: a shorter turn limit brings the autoresets in.
    options = {"max_turns": 12} if "Sokoban" in env_id else {}
    ended = play_both(env_id, num_envs=128, steps=32, seed=7, **options)
    assert ended >= 1, "no episode ended: the test would not cover autoresets"


def test_jax_backend_turn_rules_match() -> None:
    """Turn limits, invalid-action limits and a custom penalty, with thousands of episodes ending."""
    options = {"max_turns": 6, "max_invalid_actions": 2, "invalid_penalty": -0.25}
    ended = play_both("llmgym/Sokoban-v0", num_envs=128, steps=24, seed=3, **options)
    ended += play_both("llmgym/FrozenLake-Slippery-v0", num_envs=128, steps=24, seed=4, **options)
    assert ended >= 500, "the turn and invalid-action limits must end hundreds of episodes"


def test_numeric_actions_play_as_their_names() -> None:
    assert play_both("llmgym/FrozenLake-Slippery-v0", num_envs=64, steps=20, seed=5, numeric=True) > 0


@pytest.mark.parametrize("env_id", SUPPORTED_IDS)
def test_core_equals_text_env_on_eval_levels(env_id: str) -> None:
    """The pure functions on the eval levels: every step result and the one-hot observation."""
    core = make_core(env_id)
    levels = eval_levels(env_id)[:64]
    envs = [gym.make(env_id, render_mode="ansi") for _ in levels]
    spec = board_spec(envs[0])
    for env, level in zip(envs, levels):
        env.reset(seed=0, options={"level": level})
    state = jax.vmap(core.reset)(jax.random.split(jax.random.PRNGKey(0), len(levels)),
                                 jax.tree.map(np.asarray, core.encode_levels(levels)))
    step = jax.jit(jax.vmap(core.step))
    observe = jax.jit(jax.vmap(core.observation))
    rng = np.random.default_rng(1)
    rewards = core.rewards()
    for turn in range(40):
        codes = np.where(rng.random(len(levels)) < 0.1, INVALID_ACTION, rng.integers(0, 4, len(levels)))
        slips = [core.draw_slip(_clone(env.unwrapped.np_random)) if code >= 0 else None
                 for env, code in zip(envs, codes)]
        slip = (Slip(np.array([s is not None and s[0] for s in slips]), np.array([s[1] if s else 0 for s in slips]))
                if core.slippery else None)
        state, result = step(state, codes, slip)
        result, observations = jax.device_get((result, observe(state)))
        for index, (env, code) in enumerate(zip(envs, codes)):
            completion = "no answer" if code < 0 else f"<answer>{core.action_names[code]}</answer>"
            _, reward, terminated, truncated, info = env.step(completion)
            where = f"{env_id} level {index} turn {turn}"
            assert rewards[result.event[index]] == reward, where
            assert abs(float(result.reward[index]) - reward) < 1e-5, where
            assert (result.terminated[index], result.truncated[index]) == (terminated, truncated), where
            assert (result.success[index], result.valid[index]) == (info["success"], info["action_is_valid"]), where
            assert result.effective[index] == info["action_is_effective"], where
            board = encode_board(env.render(), spec.symbols, board_shape(env, spec)).reshape(-1)
            assert np.array_equal(observations[index], board), where


def _clone(rng: np.random.Generator) -> np.random.Generator:
    twin = np.random.Generator(type(rng.bit_generator)())
    twin.bit_generator.state = rng.bit_generator.state
    return twin


def test_jax_slips_follow_the_text_envs_law() -> None:
    """With JAX's own draws, a move goes as intended 80% of the time and each side 10%."""
    core = FrozenLake(size=4, success_rate=0.8, max_turns=16)
    level = core.encode_levels([["FFFF", "FSFF", "FFFF", "FFFG"]])
    draws = 20_000
    keys = jax.random.split(jax.random.PRNGKey(3), draws)
    state = jax.vmap(core.reset, in_axes=(0, None))(keys, jax.tree.map(lambda leaf: leaf[0], level))
    state, _ = jax.vmap(core.step)(state, np.full(draws, 1))  # Down from cell 5
    landed = np.bincount(np.asarray(state.position), minlength=16)
    for cell, chance in ((9, 0.8), (4, 0.1), (6, 0.1)):  # down; left; right
        spread = 5 * np.sqrt(draws * chance * (1 - chance))
        assert abs(landed[cell] - draws * chance) < spread, (cell, landed[cell])
    assert landed[9] + landed[4] + landed[6] == draws


def test_levels_from_seeds_are_the_text_envs_levels() -> None:
    env = gym.make("llmgym/Sokoban-8x8-2box-v0").unwrapped
    env.reset(seed=42)
    assert levels_from_seeds("llmgym/Sokoban-8x8-2box-v0", [42]) == [env.level()]


# ---------------------------------------------------------------------- the vector envs
def test_jax_backend_refuses_what_it_cannot_play() -> None:
    with pytest.raises(InvalidOptionError, match="FrozenLakeEnv and SokobanEnv"):
        make_vector_env("llmgym/Math-v0", 2, backend="jax")
    with pytest.raises(InvalidOptionError, match="one move a turn"):
        make_vector_env("llmgym/Sokoban-v0", 2, backend="jax", max_actions_per_turn=2)
    with pytest.raises(InvalidOptionError, match="num_workers"):
        make_vector_env("llmgym/Sokoban-v0", 2, backend="jax", num_workers=2)
    with pytest.raises(InvalidOptionError, match="bump_penalty"):
        make_vector_env("llmgym/FrozenLake-v1", 2, backend="jax", bump_penalty=-0.1)
    venv = make_vector_env("llmgym/FrozenLake-v0", 2, backend="jax", render_mode="ansi")
    try:
        venv.reset(seed=0)
        inline = make_vector_env("llmgym/FrozenLake-v0", 2, render_mode="ansi")
        inline.reset(seed=0)
        inline.step(["<answer>Right</answer>"] * 2)
        venv.step(["<answer>Right</answer>"] * 2)
        assert venv.render() == inline.render()
        inline.close()
        with pytest.raises(SubEnvError, match="backend='inline'"):
            venv.call("solution")
        with pytest.raises(SubEnvError, match="size=8"):
            venv.reset(options={"level": eval_levels("llmgym/FrozenLake-8x8-v0")[0]})
    finally:
        venv.close()


def test_import_llmgym_does_not_import_jax() -> None:
    code = (
        "import sys, gymnasium as gym, llmgym\n"
        "env = gym.make('llmgym/Sokoban-v0'); env.reset(seed=0)\n"
        "venv = gym.make_vec('llmgym/FrozenLake-v0', 2); venv.reset(seed=0); venv.close()\n"
        "assert 'jax' not in sys.modules and 'llmgym.jax' not in sys.modules, 'jax was imported'\n"
    )
    root = Path(llmgym.__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)


def test_grid_vector_env_autoresets_from_its_pool() -> None:
    venv = GridVectorEnv("llmgym/FrozenLake-v0", 32, seed=0)
    observations, _ = venv.reset(seed=1)
    assert observations.shape == (32, 4 * 4 * 4) and observations.dtype == np.float32
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(30):
        previous = observations
        observations, rewards, terminated, truncated, infos = venv.step(rng.integers(0, 4, 32))
        done = terminated | truncated
        assert np.array_equal(infos["_final_obs"], done)
        assert np.all(rewards[infos["success"] & done] == 1.0)
        # a fresh episode starts with the player on the start cell (channel 0 at cell 0)
        assert np.all(observations[done].reshape(-1, 16, 4)[:, 0, 0] == 1)
        assert np.all(infos["final_obs"][~done] == observations[~done])
        ended += int(done.sum())
        assert previous.shape == observations.shape
    assert ended > 32


# ---------------------------------------------------------------------- PPO
def test_ppo_learns_small_lakes_and_the_agent_plays_its_checkpoint(tmp_path: Path) -> None:
    """3x3 lakes: from chance to >= 90% greedy success on validation levels in a few seconds."""
    from llmgym.jax.ppo import PpoConfig, Policy, save_checkpoint, train

    config = PpoConfig(env_id="llmgym/FrozenLake-v0", env_options={"size": 3}, network="mlp", hidden=32,
                       num_envs=64, num_steps=16, num_minibatches=2, total_steps=64 * 16 * 60,
                       learning_rate=3e-3, pool_size=300, validation_levels=256, eval_every=20, seed=0)
    result = train(config, log=lambda line: None)
    first, last = result.curve[0], result.curve[-1]
    assert last["greedy_success"] >= 0.9, result.curve
    assert result.curve[0]["env_steps"] < last["env_steps"]
    folder = save_checkpoint(result, tmp_path / "ppo")
    policy = Policy(folder)
    assert tuple(policy.board) == (3, 3, "P_OG") and policy.act_mode in ("greedy", "sample")

    agent = make_agent(f"jax-ppo:{folder}", AgentOptions())
    assert isinstance(agent, JaxPpoAgent)
    assert not agent.supports(gym.make("llmgym/FrozenLake-v0").unwrapped)  # 4x4 boards
    levels = [EvalLevel(index, 900_000 + index, {"level": level})
              for index, level in enumerate(levels_from_seeds("llmgym/FrozenLake-v0", range(900_000, 900_040),
                                                              size=3))]
    episodes = play(agent, "llmgym/FrozenLake-v0", levels, LeaderboardConfig(agents=("random",), progress=False))
    assert np.mean([episode.success for episode in episodes]) >= 0.85
