"""Classic-RL views of llmgym's grid puzzles: discrete actions in, a one-hot grid out.

A text env takes a completion and returns text. Classic RL libraries (stable-baselines3,
CleanRL) want ``Discrete`` actions and numeric observations. :class:`DiscreteActions` turns
an action index into the completion ``<answer>Name</answer>``; :class:`GridObservation`
turns the board the env renders into a flat one-hot vector (``height * width * symbols``;
flat because SB3 takes any 3-D box for an image and warns).
Both read only the env's public surface (``action_names`` and ``render()`` with
``render_mode="ansi"``), so the game logic, rewards and episode ends stay the text env's own:
a classic agent and an LLM play exactly the same game.

:func:`make_classic_env` stacks both for the puzzles that have a board:

    env = make_classic_env("llmgym/FrozenLake-v0")
    observation, info = env.reset(seed=0)   # (64,) float32: a 4x4 board, 4 symbols
    env.step(2)                             # "Right"
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from llmgym.error import InvalidOptionError, LevelFormatError


@dataclass(frozen=True)
class BoardSpec:
    """How to read one env's rendered board.

    Attributes:
        symbols: every character a board cell can hold; channel ``i`` of the one-hot grid is
            ``symbols[i]``. Cells beyond a shorter board (padding) are all zeros.
        shape_attribute: the env attribute holding the board's side (an int) or its
            ``(height, width)``.
    """

    symbols: str
    shape_attribute: str


#: Boards of the envs that have one, by the unwrapped env's class name.
BOARD_SPECS: dict[str, BoardSpec] = {
    # P player, _ ice, O hole, G goal (see FrozenLakeEnv's observation)
    "FrozenLakeEnv": BoardSpec(symbols="P_OG", shape_attribute="size"),
    # XSB with floor drawn as _: wall, floor, target, box, box on target, player, player on target
    "SokobanEnv": BoardSpec(symbols="#_.$*@+", shape_attribute="dim_room"),
}


def board_spec(env: gym.Env[Any, Any]) -> BoardSpec:
    """The :class:`BoardSpec` of ``env``; raises when the env has no board this module knows."""
    name = type(env.unwrapped).__name__
    if name not in BOARD_SPECS:
        raise InvalidOptionError(
            f"GridObservation knows the boards of {', '.join(sorted(BOARD_SPECS))}; got {name}. "
            "Pass symbols= and shape= explicitly for another grid env."
        )
    return BOARD_SPECS[name]


def board_shape(env: gym.Env[Any, Any], spec: BoardSpec) -> tuple[int, int]:
    """``(height, width)`` of ``env``'s board, from the attribute ``spec`` names."""
    value = getattr(env.unwrapped, spec.shape_attribute)
    if isinstance(value, int):
        return value, value
    height, width = value
    return int(height), int(width)


#: How the v1 ids' coordinates line under the board begins.
COORDINATES_LINE = "You are at row"


def encode_board(board: str, symbols: str, shape: tuple[int, int]) -> np.ndarray:
    """One-hot ``(height, width, len(symbols))`` float32 array of ``board`` (rows as lines).

    The board is the last ``height`` lines of the text, so a leading feedback line is
    ignored, as is a trailing line that is not a row (the v1 ids' coordinates). Cells may be
    separated by spaces (the v1 ids' ``grid="spaced"``). Shorter rows (XSB drops trailing
    floor) are padded with all-zero cells.
    """
    height, width = shape
    lines = board.split("\n")
    if lines and lines[-1].startswith(COORDINATES_LINE):
        lines.pop()
    lines = [line.replace(" ", "") for line in lines[-height:]]
    if len(lines) > height or any(len(line) > width for line in lines):
        raise LevelFormatError(f"Expected a board of at most {height}x{width} cells, got:\n{board}")
    grid = np.zeros((height, width, len(symbols)), dtype=np.float32)
    for row, line in enumerate(lines):
        for col, char in enumerate(line):
            channel = symbols.find(char)
            if channel < 0:
                raise LevelFormatError(
                    f"Board cell {char!r} at row {row}, column {col} is not one of {symbols!r}; "
                    "pass the env's full symbol set to GridObservation."
                )
            grid[row, col, channel] = 1.0
    return grid


class DiscreteActions(gym.ActionWrapper[Any, np.int64, str]):
    """``Discrete(len(action_names))`` actions: index ``i`` plays ``<answer>action_names[i]</answer>``."""

    def __init__(self, env: gym.Env[Any, str], action_names: Sequence[str] | None = None) -> None:
        super().__init__(env)
        names = action_names if action_names is not None else getattr(env.unwrapped, "action_names", None)
        if not names:
            raise InvalidOptionError(
                f"DiscreteActions needs a finite action set; {type(env.unwrapped).__name__} has no "
                "`action_names`. Pass action_names=[...] explicitly."
            )
        self.action_names: tuple[str, ...] = tuple(names)
        self.action_space = spaces.Discrete(len(self.action_names))

    def action(self, action: np.int64 | int) -> str:
        return f"<answer>{self.action_names[int(action)]}</answer>"


class GridObservation(gym.ObservationWrapper[np.ndarray, Any, str]):
    """The board the env renders, one-hot, flattened: ``(height * width * len(symbols),)`` float32.

    ``observation.reshape(wrapper.grid_shape)`` gives the ``(height, width, symbols)`` grid.

    The env must be made with ``render_mode="ansi"``: the board is read from ``render()``,
    the env's own picture of its state, not from its private attributes.
    """

    def __init__(
        self, env: gym.Env[str, Any], symbols: str | None = None, shape: tuple[int, int] | None = None
    ) -> None:
        super().__init__(env)
        if env.render_mode != "ansi":
            raise InvalidOptionError(
                f"GridObservation reads the board from render(); expected render_mode='ansi', got "
                f"{env.render_mode!r}. Make the env with gym.make(id, render_mode='ansi')."
            )
        if symbols is None or shape is None:
            spec = board_spec(env)
            symbols = spec.symbols if symbols is None else symbols
            shape = board_shape(env, spec) if shape is None else shape
        self.symbols: str = symbols
        self.shape: tuple[int, int] = shape
        self.grid_shape: tuple[int, int, int] = (*self.shape, len(self.symbols))
        self.observation_space = spaces.Box(0.0, 1.0, (int(np.prod(self.grid_shape)),), dtype=np.float32)

    def observation(self, observation: str) -> np.ndarray:
        return encode_board(self.env.render(), self.symbols, self.shape).reshape(-1)  # type: ignore[arg-type]


def make_classic_env(env_id: str, env_options: dict[str, Any] | None = None) -> GridObservation:
    """``gym.make(env_id, render_mode="ansi", **env_options)`` wrapped in :class:`DiscreteActions`
    and :class:`GridObservation`: ready for stable-baselines3.

    ``env_options`` are checked by the env: an unknown option fails with the valid names.
    """
    env = gym.make(env_id, render_mode="ansi", **(env_options or {}))
    return GridObservation(DiscreteActions(env))

