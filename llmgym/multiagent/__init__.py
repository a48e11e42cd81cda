"""Multi-agent text games as PettingZoo environments, and single-agent views of them.

Every observation carries text for LLMs beside a numeric board for classic RL agents; every
action is the raw completion, parsed like the single-agent envs' (``<answer>...</answer>``).

* :class:`TicTacToeEnv`, :class:`ConnectFourEnv`: turn-based ``pettingzoo.AECEnv`` games.
* :class:`PrisonersDilemmaEnv`: the iterated prisoner's dilemma, a simultaneous-move
  ``pettingzoo.ParallelEnv``.
* :class:`VersusEnv`, :class:`PrisonersDilemmaVersusEnv`: a game against a fixed opponent as
  a single-agent :class:`llmgym.TextEnv` (registered as ``llmgym/TicTacToe-vs-minimax-v0`` etc.).
* Self-play: the AEC games are the agent-facing API. Loop over ``env.agent_iter()``; for the
  seat to move, ``env.last()`` gives its observation (``obs["text"]``) and its reward since its
  own last move; ``env.system_prompt(seat)`` starts its conversation; ``env.step(completion)``.
  After the game ends each seat is yielded once more with its final reward.

Needs pettingzoo: ``pip install 'llmgym[multiagent]'``.
"""

from __future__ import annotations

from llmgym.multiagent.board_env import BoardGameEnv, ConnectFourEnv, TicTacToeEnv
from llmgym.multiagent.opponents import MinimaxOpponent, Opponent, make_opponent, random_opponent
from llmgym.multiagent.prisoners_dilemma import PrisonersDilemmaEnv, PrisonersDilemmaVersusEnv
from llmgym.multiagent.spaces import MoveText
from llmgym.multiagent.versus import VersusEnv

__all__ = [
    "BoardGameEnv",
    "ConnectFourEnv",
    "MinimaxOpponent",
    "MoveText",
    "Opponent",
    "PrisonersDilemmaEnv",
    "PrisonersDilemmaVersusEnv",
    "TicTacToeEnv",
    "VersusEnv",
    "make_opponent",
    "random_opponent",
]
