"""rgb_array rendering: tile pictures of the grid games, videos of episodes, the checker on every id."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import llmgym
from llmgym.render import png_bytes

RGB_IDS = [
    env_id
    for env_id in llmgym.env_ids()
    if "rgb_array" in gym.make(env_id).unwrapped.metadata["render_modes"]
]


def test_the_grid_games_all_render_rgb_array():
    families = ("FrozenLake", "Sokoban", "TicTacToe", "ConnectFour")
    expected = [env_id for env_id in llmgym.env_ids() if any(name in env_id for name in families)]
    assert sorted(RGB_IDS) == sorted(expected)
    assert len(expected) >= 10


@pytest.mark.parametrize("env_id", RGB_IDS)
def test_check_env_passes_with_rgb_array(env_id):
    env = gym.make(env_id, render_mode="rgb_array")
    check_env(env.unwrapped, skip_render_check=False)
    env.close()


@pytest.mark.parametrize("env_id", RGB_IDS)
def test_frame_is_a_uint8_picture_that_follows_the_state(env_id):
    env = gym.make(env_id, render_mode="rgb_array")
    env.reset(seed=1)
    first = env.render()
    assert (
        isinstance(first, np.ndarray) and first.dtype == np.uint8 and first.ndim == 3 and first.shape[2] == 3
    )
    assert first.shape[0] % 32 == 0 and first.shape[1] % 32 == 0
    unwrapped = env.unwrapped
    for _ in range(10):  # a slippery lake may slide the player into the edge: try again
        move = (
            unwrapped.valid_actions()[0] if hasattr(unwrapped, "valid_actions") else unwrapped.solution()[0]
        )
        _, _, _, _, info = env.step(f"<answer>{move}</answer>")
        if info["action_is_effective"]:
            break
    assert info["action_is_effective"]
    assert not np.array_equal(env.render(), first)
    env.close()


def test_frozen_lake_picture_puts_the_player_where_the_state_says():
    env = gym.make("llmgym/FrozenLake-v0", render_mode="rgb_array")
    env.reset(options={"level": ["SF", "FG"]})
    before = env.render()
    env.step("<answer>Right</answer>")
    after = env.render()
    changed = np.argwhere((before != after).any(axis=2))
    rows, cols = changed[:, 0] // 32, changed[:, 1] // 32
    assert set(zip(rows.tolist(), cols.tolist())) == {(0, 0), (0, 1)}  # the start and the cell moved to


def test_ansi_still_renders_text():
    env = gym.make("llmgym/Sokoban-v0", render_mode="ansi")
    env.reset(seed=0)
    assert isinstance(env.render(), str) and "@" in env.unwrapped.level_xsb()


def test_envs_without_pictures_refuse_rgb_array():
    with pytest.raises(ValueError, match="render_mode must be one of"):
        gym.make("llmgym/Math-v0", render_mode="rgb_array")


def test_png_bytes_round_trips_through_a_decoder():
    iio = pytest.importorskip("imageio.v3", reason="imageio is in the docs extra: pip install -e '.[docs]'")
    picture = np.random.default_rng(0).integers(0, 256, (64, 96, 3), dtype=np.uint8)
    assert np.array_equal(iio.imread(png_bytes(picture), extension=".png"), picture)


@pytest.mark.parametrize("env_id", ["llmgym/FrozenLake-v1", "llmgym/Sokoban-v0"])
def test_an_episode_records_to_a_video(env_id, tmp_path: Path):
    """Frames from Gymnasium's RenderCollection wrapper, written as MP4 by imageio's ffmpeg.

    (Gymnasium's RecordVideo takes the same frames but writes through moviepy, whose release
    pins an older pillow than the one the trainer's stack installs.)
    """
    imageio = pytest.importorskip("imageio", reason="imageio is in the docs extra: pip install -e '.[docs]'")
    pytest.importorskip(
        "imageio_ffmpeg", reason="imageio-ffmpeg is in the docs extra: pip install -e '.[docs]'"
    )
    env = gym.wrappers.RenderCollection(gym.make(env_id, render_mode="rgb_array"))
    env.reset(seed=0)
    for move in env.unwrapped.solution():
        *_, terminated, truncated, info = env.step(f"<answer>{move}</answer>")
        if terminated or truncated:
            break
    assert info["success"]
    frames = env.render()
    assert len(frames) >= 3
    path = tmp_path / "episode.mp4"
    with imageio.get_writer(path, fps=4, macro_block_size=1) as writer:
        for frame in frames:
            writer.append_data(frame)
    env.close()
    assert path.stat().st_size > 1000
    reader = imageio.get_reader(path)
    assert sum(1 for _ in reader) == len(frames)
    reader.close()


def test_import_llmgym_loads_no_imaging_library():
    heavy = "{'PIL', 'matplotlib', 'imageio'}"
    code = f"import sys, llmgym, llmgym.render; print(sorted({heavy} & sys.modules.keys()))"
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "[]"


@pytest.mark.parametrize("game", ["TicTacToeEnv", "ConnectFourEnv"])
def test_pettingzoo_board_games_render_rgb_array(game):
    pytest.importorskip("pettingzoo", reason="the multi-agent games need the multiagent extra")
    import llmgym.multiagent as multiagent

    env = getattr(multiagent, game)(render_mode="rgb_array")
    env.reset(seed=0)
    frames = [env.render()]
    for agent in env.agent_iter(max_iter=12):
        observation, _, terminated, truncated, _ = env.last()
        if terminated or truncated:
            env.step(None)
            continue
        env.step(int(np.flatnonzero(observation["action_mask"])[0]))  # 0-based index, as classic RL agents
        frames.append(env.render())
    assert all(frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3 for frame in frames)
    assert not np.array_equal(frames[0], frames[-1])
