"""Fixed opponent policies for the board games.

An opponent is any callable ``(game, rng) -> action`` that moves for ``game.agent_selection``:
it returns a 0-based move index (played as is) or a completion string (parsed like an agent's,
so an LLM or a human can be the opponent). ``rng`` is the only randomness it may use, which
keeps games reproducible from a level's ``opponent_seed``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, TypeAlias

import numpy as np

from llmgym.error import InvalidOptionError, did_you_mean
from llmgym.multiagent.board_env import BoardGameEnv

Opponent: TypeAlias = Callable[[BoardGameEnv, np.random.Generator], "int | str"]
OpponentName = Literal["random", "minimax"]


def random_opponent(game: BoardGameEnv, rng: np.random.Generator) -> int:
    """A uniformly random legal move."""
    return int(rng.choice(game.legal_moves()))


class MinimaxOpponent:
    """The search's best move, ties broken at random.

    Perfect for TicTacToe (the game is solved exactly, so it never loses); for ConnectFour a
    negamax with alpha-beta pruning to ``depth`` plies (default: the rules' ``default_depth``).
    """

    def __init__(self, depth: int | None = None) -> None:
        if depth is not None and depth < 1:
            raise InvalidOptionError(f"minimax depth must be >= 1 or None, got {depth}.")
        self.depth = depth

    def __call__(self, game: BoardGameEnv, rng: np.random.Generator) -> int:
        piece = game.piece_of(game.agent_selection)
        return int(rng.choice(game.rules.best_moves(game.board, piece, self.depth)))

    def __repr__(self) -> str:
        return f"MinimaxOpponent(depth={self.depth})"


def make_opponent(spec: OpponentName | Opponent, minimax_depth: int | None = None) -> Opponent:
    """The opponent ``spec`` names, or ``spec`` itself when it is a callable."""
    if callable(spec):
        return spec
    if spec == "random":
        return random_opponent
    if spec == "minimax":
        return MinimaxOpponent(minimax_depth)
    raise InvalidOptionError(
        f"opponent must be 'random', 'minimax' or a callable (game, rng) -> move, got {spec!r}."
        f"{did_you_mean(str(spec), ['random', 'minimax'])}"
    )
