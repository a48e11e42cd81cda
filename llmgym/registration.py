"""Registration of every llmgym environment with Gymnasium.

Entry points are ``"module:Class"`` strings, so registering imports nothing heavy: an env's
module is imported only when that env is made. Each id also gets a ``vector_entry_point``
so ``gym.make_vec(id, n)`` returns llmgym's own vector env.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator

NAMESPACE = "llmgym"


@dataclass(frozen=True)
class EnvEntry:
    """One registered id: ``name`` (without namespace), entry point and default kwargs.

    ``remote`` marks an id that plays an env served elsewhere: it needs a server's ``url`` to be
    made, so :func:`env_ids` (the ids conformance tests and eval sets run over) leaves it out.
    """

    name: str
    entry_point: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: Levels in the id's frozen eval set (fewer than 200 where the level space is small).
    eval_set_size: int = 200
    remote: bool = False

    @property
    def id(self) -> str:
        return f"{NAMESPACE}/{self.name}"


#: Where llmgym's vector env is built. Named, like an env's entry point, rather than imported: the
#: env core sits below the vector package and must not import it (``import llmgym`` stays free of it).
VECTOR_ENTRY_POINT = "llmgym.vector:make_vector_env"


class VectorCreator:
    """Picklable ``vector_entry_point``: builds llmgym's vector env for one id, lazily imported."""

    def __init__(self, env_id: str) -> None:
        self.env_id = env_id

    def __call__(self, num_envs: int, **kwargs: Any) -> Any:
        make_vector_env = load_env_creator(VECTOR_ENTRY_POINT)
        return make_vector_env(self.env_id, num_envs=num_envs, **kwargs)

    def __repr__(self) -> str:
        return f"VectorCreator({self.env_id!r})"


_FROZEN_LAKE = "llmgym.envs.frozen_lake:FrozenLakeEnv"
_SOKOBAN = "llmgym.envs.sokoban.env:SokobanEnv"

ENTRIES: list[EnvEntry] = [
    # --- FrozenLake
    EnvEntry("FrozenLake-v0", _FROZEN_LAKE, {"size": 4}),
    EnvEntry("FrozenLake-8x8-v0", _FROZEN_LAKE, {"size": 8}),
    EnvEntry("FrozenLake-Slippery-v0", _FROZEN_LAKE, {"size": 4, "success_rate": 0.8}),
    EnvEntry("FrozenLake-v1", _FROZEN_LAKE, {"size": 4, "grid": "spaced", "coordinates": True}),
    # --- Sokoban
    EnvEntry("Sokoban-v0", _SOKOBAN, {"dim_room": (6, 6), "num_boxes": 1}),
    EnvEntry("Sokoban-v1", _SOKOBAN,
             {"dim_room": (6, 6), "num_boxes": 1, "grid": "spaced", "coordinates": True, "max_turns": 30}),
    EnvEntry("Sokoban-8x8-2box-v0", _SOKOBAN, {"dim_room": (8, 8), "num_boxes": 2}),
    EnvEntry("Sokoban-10x10-3box-v0", _SOKOBAN, {"dim_room": (10, 10), "num_boxes": 3}),
    # --- math
    EnvEntry("Math-v0", "llmgym.envs.math.env:MathEnv", {"difficulty": "medium"}),
    EnvEntry("Math-Easy-v0", "llmgym.envs.math.env:MathEnv", {"difficulty": "easy"}),
    EnvEntry("Math-Hard-v0", "llmgym.envs.math.env:MathEnv", {"difficulty": "hard"}),
    EnvEntry("MathMultiTurn-v0", "llmgym.envs.math.env:MathEnv", {"difficulty": "medium", "max_attempts": 3}),
    # Half of the bundled dataset's 52 problems: the other half is what training draws.
    EnvEntry("MathDataset-v0", "llmgym.envs.math.dataset:MathDatasetEnv", eval_set_size=26),
    # --- tool use
    EnvEntry("ToolUse-v0", "llmgym.envs.tool_use.env:ToolUseEnv", {"task": "mixed"}),
    EnvEntry("ToolUse-Calculator-v0", "llmgym.envs.tool_use.env:ToolUseEnv", {"task": "calculator"}),
    EnvEntry("ToolUse-Python-v0", "llmgym.envs.tool_use.env:ToolUseEnv", {"task": "python"}),
    EnvEntry("ToolUse-Search-v0", "llmgym.envs.tool_use.env:ToolUseEnv", {"task": "search"}),
    # --- multi-agent games against fixed opponents
    EnvEntry("TicTacToe-vs-minimax-v0", "llmgym.multiagent.versus:VersusEnv",
             {"game": "TicTacToe", "opponent": "minimax", "success_on": "win_or_draw"}),
    EnvEntry("TicTacToe-vs-random-v0", "llmgym.multiagent.versus:VersusEnv",
             {"game": "TicTacToe", "opponent": "random"}),
    EnvEntry("ConnectFour-vs-minimax-v0", "llmgym.multiagent.versus:VersusEnv",
             {"game": "ConnectFour", "opponent": "minimax", "minimax_depth": 4, "opening_plies": 2}),
    EnvEntry("PrisonersDilemma-vs-titfortat-v0",
             "llmgym.multiagent.prisoners_dilemma:PrisonersDilemmaVersusEnv", {"opponent": "titfortat"}),
    # --- an env served by llmgym-serve (gym.make("llmgym/Remote-v0", url=..., env_id=...)); no eval set
    EnvEntry("Remote-v0", "llmgym.integrations.remote:RemoteEnv", remote=True),
]


def register_all() -> None:
    """Register every entry of :data:`ENTRIES` (idempotent)."""
    for entry in ENTRIES:
        if entry.id in gym.registry:
            continue
        gym.register(
            id=entry.id,
            entry_point=entry.entry_point,
            vector_entry_point=VectorCreator(entry.id),
            kwargs=dict(entry.kwargs),
        )


def env_ids(*, include_remote: bool = False) -> list[str]:
    """Every registered llmgym id, in registration order; the remote id only with ``include_remote``."""
    return [entry.id for entry in ENTRIES if include_remote or not entry.remote]
