"""Turn-based two-player board games as PettingZoo AEC environments with text observations."""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding

from llmgym.error import DependencyNotInstalled, InvalidOptionError, LevelFormatError, did_you_mean
from llmgym.multiagent.rules import BoardRules, ConnectFourRules, TicTacToeRules
from llmgym.multiagent.spaces import MoveText
from llmgym.multiagent.state import game_state, restore_game
from llmgym.parsing import ActionParser, extract_answer
from llmgym.spaces import MAX_OBSERVATION_LENGTH, text_space, to_charset

try:
    from pettingzoo import AECEnv
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise DependencyNotInstalled(
        "llmgym.multiagent needs pettingzoo, which is not installed. "
        "Install it with: pip install 'llmgym[multiagent]'"
    ) from exc

GameOutcome = Literal["win", "loss", "draw", "forfeit"]
WIN_REWARD, DRAW_REWARD, LOSS_REWARD = 1.0, 0.0, -1.0
_SYMBOLS = ("X", "O")
_RESULTS = {
    "win": "Game over: you won.",
    "loss": "Game over: you lost.",
    "draw": "Game over: a draw.",
    "forfeit": "Game over: you forfeited.",
}
_MOVE_TEXT = re.compile(r"\s*(?:cell|column|col)?\s*#?\s*(\d+)\s*\.?\s*", re.IGNORECASE)


def move_from_text(rules: BoardRules, text: str) -> int | None:
    """The move index ``text`` names (``"5"``, ``"cell 5"``, ``"Column 3"``), or ``None``."""
    match = _MOVE_TEXT.fullmatch(text)
    if match is None:
        return None
    number = int(match.group(1)[:4])
    return number - 1 if 1 <= number <= rules.num_moves else None


class BoardGameEnv(AECEnv):
    """A two-player board game (``player_0`` plays X and moves first, ``player_1`` plays O).

    Subclasses only name their rules (:mod:`llmgym.multiagent.rules`).

    ## Action Space
    :class:`~llmgym.multiagent.spaces.MoveText`: any string, the raw completion. The move is
    the last ``<answer>...</answer>`` (or whatever ``action_parser`` returns), holding a move
    name such as ``5`` (``cell 5`` and ``column 5`` are accepted too). An integer is taken
    as a 0-based move index, for classic-RL agents and scripted players.

    ## Observation Space
    ``Dict``:
    - ``"observation"``: ``Box(0, 1, (rows, cols, 2), int8)``, plane 0 the observer's pieces,
      plane 1 the opponent's (PettingZoo's classic layout);
    - ``"action_mask"``: ``Box(0, 1, (num_moves,), int8)``, the legal moves of the player to
      move (all zeros for the other player);
    - ``"text"``: ``Text``: feedback on the observer's last action, the opponent's last move,
      the board with the move names, and either a request for a move or the result.

    ## Rewards
    Win ``+1``, loss ``-1``, draw ``0``, given to both players when the game ends.
    An invalid action (no parseable move, an unknown move, an occupied cell or full column)
    gives the acting player ``invalid_penalty`` (default ``-0.1``); the board is unchanged and
    the same player moves again, with the reason in its next observation. Its
    ``max_invalid_actions``-th invalid action in one game forfeits: that step gives it
    ``invalid_penalty - 1`` and its opponent ``+1``. A forfeit must cost at least a loss, or a
    losing player would learn to forfeit.

    ## Episode End
    Both players terminate on a win, a draw (board full) or a forfeit; ``infos[agent]["outcome"]``
    is then ``"win"``, ``"loss"``, ``"draw"`` or ``"forfeit"`` (this player forfeited; the
    other's outcome is ``"win"``). Games are finite, so there is no truncation.

    ## Arguments
    - ``opening_plies``: random legal moves played at reset (from ``np_random``), for
      varied starts. At most ``2 * (line - 1)``, so an opening never ends the game. Default 0.
    - ``invalid_penalty``: reward of an invalid action. Default ``-0.1``.
    - ``max_invalid_actions``: invalid actions per player and game before it forfeits;
      ``None`` never forfeits. Default 3.
    - ``action_parser``: completion -> move text. Default :func:`llmgym.parsing.extract_answer`.
    - ``render_mode``: ``None``, ``"ansi"`` (the board as text) or ``"rgb_array"`` (a tile
      picture, ``(H, W, 3)`` uint8, from :mod:`llmgym.render`).

    Reset options: ``{"level": {"opening": ["5", "1"]}}`` plays the given opening moves
    (move names, X first) instead of a random one. Unknown option keys are ignored with a
    warning (PettingZoo's ``api_test`` passes one).

    ``get_state()`` returns a deep copy of everything ``reset`` and ``step`` write (board,
    history, rewards, infos, ``np_random``, ...); ``set_state(state)`` puts it back.

    ## Version History
    - v0: initial release.
    """

    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": ["ansi", "rgb_array"], "name": "board_game_v0", "is_parallelizable": False,
    }
    rules: ClassVar[BoardRules]
    #: What ``reset`` and ``step`` write: a snapshot's content.
    state_fields: ClassVar[tuple[str, ...]] = (
        "board", "history", "opening", "outcomes", "agents", "agent_selection", "rewards",
        "_cumulative_rewards", "terminations", "truncations", "infos", "_feedback", "_invalid_counts",
        "_skip_agent_selection", "np_random",
    )

    def __init__(
        self,
        *,
        opening_plies: int = 0,
        invalid_penalty: float = -0.1,
        max_invalid_actions: int | None = 3,
        action_parser: ActionParser | None = None,
        render_mode: str | None = None,
    ) -> None:
        super().__init__()
        max_opening = 2 * (self.rules.line - 1)
        if not 0 <= opening_plies <= max_opening:
            raise InvalidOptionError(
                f"opening_plies must be between 0 and {max_opening}, got {opening_plies}."
            )
        if max_invalid_actions is not None and max_invalid_actions < 1:
            raise InvalidOptionError(f"max_invalid_actions must be >= 1 or None, got {max_invalid_actions}.")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise InvalidOptionError(f"render_mode must be 'ansi', 'rgb_array' or None, got {render_mode!r}.")
        self.opening_plies = opening_plies
        self.invalid_penalty = float(invalid_penalty)
        self.max_invalid_actions = max_invalid_actions
        self.action_parser: ActionParser = action_parser or extract_answer
        self.render_mode = render_mode
        self.possible_agents = ["player_0", "player_1"]
        rules = self.rules
        board_space = spaces.Box(0, 1, (rules.rows, rules.cols, 2), np.int8)
        mask_space = spaces.Box(0, 1, (rules.num_moves,), np.int8)
        self._observation_spaces = {
            agent: spaces.Dict({"observation": board_space, "action_mask": mask_space,
                                "text": text_space(MAX_OBSERVATION_LENGTH)})
            for agent in self.possible_agents
        }
        self._action_spaces = {agent: MoveText(rules.move_names) for agent in self.possible_agents}
        self.np_random, self.np_random_seed = seeding.np_random()
        self.board = rules.new_board()
        self.history: list[str] = []
        self.opening: list[str] = []
        self.outcomes: dict[str, GameOutcome] = {}
        self._feedback: dict[str, str] = {}
        self._invalid_counts: dict[str, int] = {}

    # ------------------------------------------------------------------ PettingZoo API
    def observation_space(self, agent: str) -> spaces.Dict:
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> MoveText:
        return self._action_spaces[agent]

    def system_prompt(self, agent: str) -> str:
        """The system prompt of ``agent``'s conversation: the game, its side, the move format."""
        rules = self.rules
        symbol = _SYMBOLS[self.possible_agents.index(agent)]
        return (
            f"You are playing {rules.name} as {symbol} against an opponent who plays "
            f"{_SYMBOLS[1 - self.possible_agents.index(agent)]}. X moves first. {rules.goal} "
            f"On your turn, answer with {rules.move_hint} inside <answer>...</answer>, "
            f"for example <answer>{rules.move_names[len(rules.move_names) // 2]}</answer>."
        )

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        if seed is not None:
            self.np_random, self.np_random_seed = seeding.np_random(seed)
        options = dict(options or {})
        for name in options:
            if name != "level":
                gymnasium.logger.warn(
                    f"{type(self).__name__}.reset ignores the option {name!r}."
                    f"{did_you_mean(name, ['level'])} Valid options: level."
                )
        self.agents = self.possible_agents[:]
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {agent: {"system_prompt": self.system_prompt(agent)} for agent in self.agents}
        self._feedback = dict.fromkeys(self.agents, "")
        self._invalid_counts = dict.fromkeys(self.agents, 0)
        self.outcomes = {}
        self.board = self.rules.new_board()
        self.history = []
        opening = self._parse_opening(options["level"]) if "level" in options else self._draw_opening()
        for move in opening:
            self.rules.play(self.board, move, len(self.history) % 2 + 1)
            self.history.append(self.rules.move_names[move])
        self.opening = list(self.history)
        self.agent_selection = self.agents[len(self.history) % 2]

    def observe(self, agent: str) -> dict[str, np.ndarray | str]:
        piece = self.possible_agents.index(agent) + 1
        planes = np.stack([self.board == piece, self.board == 3 - piece], axis=-1).astype(np.int8)
        to_move = agent == self.agent_selection and not self.outcomes
        mask = self.rules.legal_mask(self.board) if to_move else np.zeros(self.rules.num_moves, np.int8)
        return {"observation": planes, "action_mask": mask, "text": to_charset(self._text(agent))}

    def step(self, action: str | int | None) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[agent] = 0.0
        self._clear_rewards()
        move, parsed, error = self._resolve(action)
        if error is not None:
            self._reject(agent, parsed, error)
        else:
            assert move is not None
            self._play(agent, move)
        self._accumulate_rewards()

    def render(self) -> str | np.ndarray | None:
        if self.render_mode == "ansi":
            return self.rules.render(self.board)
        if self.render_mode == "rgb_array":
            from llmgym.render import board

            return board(self.board, self.rules.name)
        return None

    def close(self) -> None:
        pass

    # ------------------------------------------------------------------ helpers for callers
    def get_state(self) -> dict[str, Any]:
        """A deep copy of the game's state (see the class docstring)."""
        return game_state(self, self.state_fields)

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`get_state` value."""
        restore_game(self, state)

    def legal_moves(self) -> list[int]:
        """Legal move indices of the player to move (empty once the game is over)."""
        if self.outcomes:
            return []
        return [int(move) for move in np.flatnonzero(self.rules.legal_mask(self.board))]

    def piece_of(self, agent: str) -> int:
        """The board value of ``agent``'s pieces (1 for X, 2 for O)."""
        return self.possible_agents.index(agent) + 1

    # ------------------------------------------------------------------ internals
    def check_move(self, text: str) -> tuple[int | None, str | None]:
        """``(move, None)`` when the parsed action ``text`` names a legal move, else ``(None, reason)``."""
        rules = self.rules
        move = move_from_text(rules, text)
        if move is None:
            return None, f"{text[:40]!r} is not a move. Answer with {rules.move_hint}."
        return self._check_index(move)

    def _check_index(self, move: int) -> tuple[int | None, str | None]:
        rules = self.rules
        if not 0 <= move < rules.num_moves:
            return None, f"move index {move} is outside 0..{rules.num_moves - 1}."
        if self.outcomes or not rules.legal_mask(self.board)[move]:
            return None, f"{rules.describe_move(move)} is not available. Choose {rules.move_hint}."
        return move, None

    def _resolve(self, action: Any) -> tuple[int | None, str | None, str | None]:
        """``(move, parsed text, error)`` for an action; ``error`` is None when the move is legal."""
        if isinstance(action, (int, np.integer)) and not isinstance(action, bool):
            move, error = self._check_index(int(action))
            return move, None, error
        if not isinstance(action, str):
            return None, None, f"an action must be a string (the completion), got {type(action).__name__}."
        try:
            parsed = self.action_parser(action)
        except Exception:  # a user-supplied parser must not crash the game
            parsed = None
        if not isinstance(parsed, str) or not parsed:
            return None, None, f"no move found. Put {self.rules.move_hint} inside <answer>...</answer>."
        move, error = self.check_move(parsed)
        return move, parsed, error

    def _reject(self, agent: str, parsed: str | None, error: str) -> None:
        self._invalid_counts[agent] += 1
        count = self._invalid_counts[agent]
        self.rewards[agent] = self.invalid_penalty
        self._feedback[agent] = f"Invalid move: {error} The board is unchanged."
        self.infos[agent] = {"action_is_valid": False, "parsed_action": parsed, "invalid_actions": count}
        if self.max_invalid_actions is not None and count >= self.max_invalid_actions:
            other = self._other(agent)
            self._feedback[agent] += f" That was your invalid move number {count}: you forfeit the game."
            self._feedback[other] = f"Your opponent made {count} invalid moves and forfeits."
            self._finish({agent: "forfeit", other: "win"})

    def _play(self, agent: str, move: int) -> None:
        rules = self.rules
        row, col = rules.play(self.board, move, self.piece_of(agent))
        name = rules.move_names[move]
        self.history.append(name)
        other = self._other(agent)
        self._feedback[agent] = f"You played {rules.describe_move(move)}."
        self._feedback[other] = f"Your opponent played {rules.describe_move(move)}."
        self.infos[agent] = {"action_is_valid": True, "parsed_action": name}
        if rules.wins_at(self.board, row, col):
            self._finish({agent: "win", other: "loss"})
        elif not rules.legal_mask(self.board).any():
            self._finish({agent: "draw", other: "draw"})
        self.agent_selection = other

    def _finish(self, outcomes: dict[str, GameOutcome]) -> None:
        reward_of = {"win": WIN_REWARD, "draw": DRAW_REWARD, "loss": LOSS_REWARD, "forfeit": LOSS_REWARD}
        self.outcomes = outcomes
        for agent, outcome in outcomes.items():
            self.rewards[agent] += reward_of[outcome]
            self.infos[agent] = {**self.infos.get(agent, {}), "outcome": outcome}
            self.terminations[agent] = True

    def _other(self, agent: str) -> str:
        return self.possible_agents[1 - self.possible_agents.index(agent)]

    def _text(self, agent: str) -> str:
        rules = self.rules
        symbol = _SYMBOLS[self.possible_agents.index(agent)]
        lines = [self._feedback.get(agent, "")] if self._feedback.get(agent) else []
        lines += [f"{rules.name}: you are {symbol}. Board:", rules.render(self.board)]
        outcome = self.outcomes.get(agent)
        if outcome is not None:
            lines.append(_RESULTS[outcome])
        elif agent == self.agent_selection:
            lines.append(f"Your move ({symbol}): answer with {rules.move_hint} inside <answer>...</answer>.")
        else:
            lines.append(f"Waiting for your opponent ({_SYMBOLS[1 - self.possible_agents.index(agent)]}).")
        return "\n".join(lines)

    def _draw_opening(self) -> list[int]:
        opening: list[int] = []
        board = self.rules.new_board()
        for ply in range(self.opening_plies):
            legal = np.flatnonzero(self.rules.legal_mask(board))
            move = int(self.np_random.choice(legal))
            self.rules.play(board, move, ply % 2 + 1)
            opening.append(move)
        return opening

    def _parse_opening(self, level: Any) -> list[int]:
        rules = self.rules
        if not isinstance(level, dict) or not isinstance(level.get("opening", []), list):
            raise LevelFormatError(
                f"A {rules.name} level is a dict like {{'opening': ['5', '1']}}, got {level!r}."
            )
        board = rules.new_board()
        opening = []
        for ply, name in enumerate(level.get("opening", [])):
            move = move_from_text(rules, str(name))
            if move is None or not rules.legal_mask(board)[move]:
                raise LevelFormatError(
                    f"Opening move {ply + 1} ({name!r}) is not a legal {rules.name} move there; "
                    f"moves are {', '.join(rules.move_names)}. Fix the level's 'opening'."
                )
            row, col = rules.play(board, move, ply % 2 + 1)
            if rules.wins_at(board, row, col) or not rules.legal_mask(board).any():
                raise LevelFormatError(f"The opening {level['opening']} ends the game; give a shorter one.")
            opening.append(move)
        return opening


class TicTacToeEnv(BoardGameEnv):
    __doc__ = "TicTacToe: three in a row on a 3x3 board; moves are cells 1-9.\n\n" + (
        BoardGameEnv.__doc__ or ""
    )
    metadata: ClassVar[dict[str, Any]] = {**BoardGameEnv.metadata, "name": "tictactoe_v0"}
    rules = TicTacToeRules()


class ConnectFourEnv(BoardGameEnv):
    __doc__ = "ConnectFour: four in a row on a 6x7 board with gravity; moves are columns 1-7.\n\n" + (
        BoardGameEnv.__doc__ or ""
    )
    metadata: ClassVar[dict[str, Any]] = {**BoardGameEnv.metadata, "name": "connect_four_v0"}
    rules = ConnectFourRules()
