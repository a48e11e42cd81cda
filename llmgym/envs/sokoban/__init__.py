"""Sokoban: the env, its level generator, its exact solver, and XSB levels.

* :mod:`~llmgym.envs.sokoban.level`: :class:`Level` and XSB text in and out;
* :mod:`~llmgym.envs.sokoban.generator`: random solvable levels by reverse play;
* :mod:`~llmgym.envs.sokoban.solver`: the fewest-moves solver (A* over push positions);
* :mod:`~llmgym.envs.sokoban.env`: :class:`SokobanEnv`, registered as ``llmgym/Sokoban-*``.
"""

from llmgym.envs.sokoban.env import SokobanEnv
from llmgym.envs.sokoban.generator import generate_level, max_boxes
from llmgym.envs.sokoban.level import Level, parse_xsb
from llmgym.envs.sokoban.solver import Solver, optimal_steps, solve

__all__ = [
    "Level",
    "SokobanEnv",
    "Solver",
    "generate_level",
    "max_boxes",
    "optimal_steps",
    "parse_xsb",
    "solve",
]
