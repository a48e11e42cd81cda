"""A board game against a fixed opponent, as a single-agent llmgym text env."""

from __future__ import annotations

from typing import Any, Literal, SupportsFloat

from llmgym.core import Outcome, TextEnv, level_rng, restore_rng, rng_state
from llmgym.error import InvalidOptionError, LevelFormatError
from llmgym.multiagent.board_env import LOSS_REWARD, BoardGameEnv, ConnectFourEnv, TicTacToeEnv
from llmgym.multiagent.opponents import MinimaxOpponent, Opponent, OpponentName, make_opponent, random_opponent
from llmgym.multiagent.state import require_stateless
from llmgym.parsing import ActionParser
from llmgym.splits import LevelSpace, Split

GameName = Literal["TicTacToe", "ConnectFour"]
Seat = Literal["player_0", "player_1"]
_GAMES: dict[str, type[BoardGameEnv]] = {"TicTacToe": TicTacToeEnv, "ConnectFour": ConnectFourEnv}
_SEATS: tuple[Seat, Seat] = ("player_0", "player_1")
#: Board values (0 empty, 1 X, 2 O) as state-key characters.
_CELL_SYMBOLS = bytes.maketrans(b"\x00\x01\x02", b".XO")


class VersusEnv(TextEnv):
    """Play one seat of a board game (:mod:`llmgym.multiagent.board_env`) against a fixed opponent.

    The opponent moves inside ``reset`` and ``step``, so the agent only ever sees its own turns:
    the trainer and the leaderboard use it like any single-agent env.

    ## Action Space
    Any string (``Text``): the raw completion. The move is the last ``<answer>...</answer>``,
    holding a move name: a cell ``1``-``9`` (TicTacToe) or a column ``1``-``7`` (ConnectFour).

    ## Observation Space
    ``Text``: the game's text observation for the agent's seat: feedback, the opponent's
    last move, the board with move names, and a request for a move or the result.

    ## Rewards
    The game's rewards for the agent's seat: win ``+1``, loss ``-1``, draw ``0`` at the end.
    An invalid action (no parseable move, not a move, an occupied cell or full column) gives
    ``invalid_penalty`` (default ``-0.1``) and leaves the board unchanged. The
    ``max_invalid_actions``-th invalid action forfeits: ``invalid_penalty - 1``, so that
    forfeiting never pays better than losing.

    ## Episode End
    Terminated when the game ends (win, loss, draw, or a forfeit by either side);
    ``info["outcome"]`` is ``"win"``, ``"loss"``, ``"draw"`` or ``"forfeit"``.
    ``info["success"]`` is a win, or a win or draw with ``success_on="win_or_draw"``.
    Truncated after ``max_turns`` agent turns when set.

    ## Arguments
    - ``game``: ``"TicTacToe"`` or ``"ConnectFour"``.
    - ``opponent``: ``"minimax"``, ``"random"``, or a callable ``(game, rng) -> move index or
      completion`` (see :mod:`llmgym.multiagent.opponents`).
    - ``minimax_depth``: search plies of the minimax opponent; ``None`` is exact for TicTacToe
      and the rules' default (4) for ConnectFour.
    - ``agent_seat``: ``"player_0"`` (X, moves first), ``"player_1"`` (O), or ``"random"`` (drawn
      per episode).
    - ``opening_plies``: random moves (both sides) played before the agent's first turn.
    - ``success_on``: ``"win"`` or ``"win_or_draw"`` (against a perfect player a draw is the best result).
    - ``invalid_penalty``, ``max_invalid_actions`` (default 3), ``max_turns``, ``render_mode``,
      ``action_parser``: see :class:`llmgym.core.TextEnv`.

    Reset options: ``{"level": {"agent_seat": "player_1", "opening": ["5"], "opponent_seed": 7}}``
    replays an episode exactly (the opponent's tie-breaks come from ``opponent_seed``).
    ``level()`` returns that dict for the current episode. ``self_play_game(seed, options)``
    returns the same level as a PettingZoo game with both seats free, for self-play training
    (the trainer's ``self-play`` agent).

    Snapshots: ``get_state()`` holds the game, the opponent's RNG and the counters (a custom
    callable opponent raises :class:`~llmgym.error.SnapshotNotSupported` unless it has
    ``stateless = True``); ``state_key()`` (also ``info["state_key"]``) is the agent's piece and
    the board.

    ## Version History
    - v0: initial release.
    """

    def __init__(
        self,
        *,
        game: GameName = "TicTacToe",
        opponent: OpponentName | Opponent = "minimax",
        minimax_depth: int | None = None,
        agent_seat: Seat | Literal["random"] = "random",
        opening_plies: int = 0,
        success_on: Literal["win", "win_or_draw"] = "win",
        invalid_penalty: float = -0.1,
        max_invalid_actions: int | None = 3,
        max_turns: int | None = None,
        render_mode: str | None = None,
        action_parser: ActionParser | None = None,
        split: Split = "train",
        held_out_levels: int | None = None,
    ) -> None:
        if game not in _GAMES:
            raise InvalidOptionError(f"game must be one of {sorted(_GAMES)}, got {game!r}.")
        if agent_seat not in (*_SEATS, "random"):
            raise InvalidOptionError(
                f"agent_seat must be 'player_0', 'player_1' or 'random', got {agent_seat!r}."
            )
        if success_on not in ("win", "win_or_draw"):
            raise InvalidOptionError(f"success_on must be 'win' or 'win_or_draw', got {success_on!r}.")
        super().__init__(
            render_mode=render_mode,
            invalid_penalty=invalid_penalty,
            max_invalid_actions=max_invalid_actions,
            max_turns=max_turns,
            action_parser=action_parser,
            split=split,
            held_out_levels=held_out_levels,
        )
        # The opponent's invalid completions are judged by the game; it must forfeit eventually.
        self.game = _GAMES[game](
            opening_plies=opening_plies,
            invalid_penalty=invalid_penalty,
            max_invalid_actions=max_invalid_actions or 3,
            action_parser=action_parser,
        )
        self.opponent = make_opponent(opponent, minimax_depth)
        self.agent_seat = agent_seat
        self._level_settings = {"game": game, "agent_seat": agent_seat, "opening_plies": opening_plies}
        self.success_on = success_on
        self.format_hint = f"Put {self.game.rules.move_hint} inside <answer>...</answer>."
        self._seat: Seat = "player_0"
        self._level: dict[str, Any] = {}
        self._opponent_rng = level_rng(0)

    @property
    def system_prompt(self) -> str:
        return self.game.system_prompt(self._seat)

    metadata = {**TextEnv.metadata, "render_modes": ["ansi", "rgb_array"]}

    def level(self) -> dict[str, Any]:
        return dict(self._level)

    def _render_rgb(self) -> Any:
        from llmgym.render import board

        return board(self.game.board, self.game.rules.name)

    def valid_actions(self) -> list[str]:
        """Names of the agent's legal moves now (what a uniformly random baseline draws from)."""
        return [self.game.rules.move_names[move] for move in self.game.legal_moves()]

    def self_play_game(self, seed: int | None = None, options: dict[str, Any] | None = None) -> BoardGameEnv:
        """A fresh game for self-play: both seats free, starting from the level that
        ``reset(seed=seed, options=options)`` plays (the same opening), with this env's parser
        and invalid-action rules. Drive it with the PettingZoo AEC loop (see :mod:`llmgym.multiagent`).
        """
        self.reset(seed=seed, options=options)
        game = type(self.game)(
            invalid_penalty=self.invalid_penalty,
            max_invalid_actions=self.max_invalid_actions,
            action_parser=self.action_parser,
        )
        game.reset(options={"level": {"opening": self._level["opening"]}})
        return game

    # ------------------------------------------------------------------ TextEnv hooks
    def level_space(self) -> LevelSpace:
        """The game, the agent's seat and the random opening's length decide a level (the opponent plays it)."""
        return LevelSpace.of(f"{type(self).__module__}:{type(self).__qualname__}", self._level_settings)

    def _reset_task(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        info: dict[str, Any] = {}
        if "level" in options:
            level = self._parse_level(options["level"])
            self.game.reset(options={"level": {"opening": level["opening"]}})
        else:
            level_seed = self._draw_level_seed()
            rng = level_rng(level_seed)
            seat = self.agent_seat if self.agent_seat != "random" else _SEATS[int(rng.integers(2))]
            self.game.reset(seed=int(rng.integers(2**31)))
            opponent_seed = int(rng.integers(2**31))
            level = {"agent_seat": seat, "opening": list(self.game.opening), "opponent_seed": opponent_seed}
            info["seed"] = level_seed
        self._level = level
        self._seat = level["agent_seat"]
        self._opponent_rng = level_rng(level["opponent_seed"])
        self._opponent_turns()
        info["agent_seat"] = self._seat
        return self._observe(), info

    def _apply(self, action: str) -> Outcome:
        move, error = self.game.check_move(action)
        if move is None:
            feedback = f"Invalid move: {error} The board is unchanged.\n{self._observe()}"
            return Outcome(feedback, valid=False, effective=False)
        self.game.step(move)
        reward = self.game.rewards[self._seat] + self._opponent_turns()
        outcome = self.game.outcomes.get(self._seat)
        success = outcome == "win" or (outcome == "draw" and self.success_on == "win_or_draw")
        info = {"outcome": outcome} if outcome else None
        return Outcome(
            self._observe(), reward=reward, terminated=outcome is not None, success=success, info=info
        )

    def _observe(self) -> str:
        text = self.game.observe(self._seat)["text"]
        assert isinstance(text, str)
        return text

    # ------------------------------------------------------------------ snapshots
    def _task_state(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        built_in = self.opponent is random_opponent or type(self.opponent) is MinimaxOpponent
        require_stateless(self.opponent, built_in, type(self).__name__)
        level = {**self._level, "opening": tuple(self._level["opening"])}
        return level, rng_state(self._opponent_rng), self.game.get_state()

    def _restore_task(self, task: tuple[dict[str, Any], dict[str, Any], dict[str, Any]]) -> None:
        level, opponent_rng, game = task
        self._level = {**level, "opening": list(level["opening"])}
        self._seat = level["agent_seat"]
        self._opponent_rng = restore_rng(opponent_rng, self._opponent_rng)
        self.game.set_state(game)

    def _state_key(self) -> str:
        # The agent's piece and the board, cell by cell ("X:..O.X...."): not the move order.
        piece = "X" if self._seat == "player_0" else "O"
        return f"{piece}:{self.game.board.tobytes().translate(_CELL_SYMBOLS).decode()}"

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        ended_before = self._ended
        observation, reward, terminated, truncated, info = super().step(action)
        if terminated and not ended_before and not self.game.outcomes:
            # The core ended the episode on too many invalid actions: that is a forfeit.
            reward = float(reward) + LOSS_REWARD
            info["outcome"] = "forfeit"
        return observation, reward, terminated, truncated, info

    # ------------------------------------------------------------------ internals
    def _opponent_turns(self) -> float:
        """Let the opponent move until the agent's turn or the game's end; the agent's rewards meanwhile."""
        reward = 0.0
        while not self.game.outcomes and self.game.agent_selection != self._seat:
            self.game.step(self.opponent(self.game, self._opponent_rng))
            reward += self.game.rewards[self._seat]
        return reward

    def _parse_level(self, level: Any) -> dict[str, Any]:
        example = '{"agent_seat": "player_0", "opening": ["5"], "opponent_seed": 0}'
        if not isinstance(level, dict) or set(level) != {"agent_seat", "opening", "opponent_seed"}:
            raise LevelFormatError(
                f"A {self.game.rules.name} versus level is a dict like {example}, got {level!r}."
            )
        if level["agent_seat"] not in _SEATS or not isinstance(level["opponent_seed"], int):
            raise LevelFormatError(
                "Level needs agent_seat 'player_0' or 'player_1' and an integer opponent_seed, "
                f"got {level!r}."
            )
        return {"agent_seat": level["agent_seat"], "opening": [str(move) for move in level["opening"]],
                "opponent_seed": level["opponent_seed"]}

