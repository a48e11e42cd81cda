"""The iterated prisoner's dilemma: a simultaneous-move PettingZoo ParallelEnv with text observations,
and a single-agent view of it against a fixed strategy."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, ClassVar, Literal, TypeAlias

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils.conversions import parallel_to_aec

from llmgym.core import (
    MAX_OBSERVATION_LENGTH,
    Outcome,
    TextEnv,
    level_rng,
    restore_rng,
    rng_state,
    text_space,
    to_charset,
)
from llmgym.error import InvalidOptionError, LevelFormatError, did_you_mean
from llmgym.multiagent.spaces import MoveText
from llmgym.multiagent.state import game_state, require_stateless, restore_game
from llmgym.parsing import ActionParser, extract_answer
from llmgym.splits import Split

Move = Literal["cooperate", "defect"]
MOVES: tuple[Move, Move] = ("cooperate", "defect")
#: ``PAYOFFS[(mine, theirs)]``: the textbook values T=5 > R=3 > P=1 > S=0.
PAYOFFS: dict[tuple[Move, Move], float] = {
    ("cooperate", "cooperate"): 3.0,
    ("cooperate", "defect"): 0.0,
    ("defect", "cooperate"): 5.0,
    ("defect", "defect"): 1.0,
}
_MOVE_WORDS = {"cooperate": "cooperate", "c": "cooperate", "defect": "defect", "d": "defect"}
_CODE = {"cooperate": 1, "defect": 2}
_WORD = re.compile(r"[a-z]+")


def move_from_text(text: str) -> Move | None:
    """``"cooperate"`` or ``"defect"`` when ``text`` is one of them (or ``C`` / ``D``), else ``None``."""
    words = _WORD.findall(text.lower())
    return _MOVE_WORDS.get(words[0]) if len(words) == 1 else None  # type: ignore[return-value]


class PrisonersDilemmaEnv(ParallelEnv):
    """The iterated prisoner's dilemma: each round both players cooperate or defect at once.

    ## Action Space
    :class:`~llmgym.multiagent.spaces.MoveText`: the raw completion; the move is the last
    ``<answer>...</answer>`` holding ``cooperate`` or ``defect`` (``C`` / ``D`` accepted).

    ## Observation Space
    ``Dict``:
    - ``"observation"``: ``Box(0, 2, (num_rounds, 2), int8)``, one row per round: the
      observer's move and the opponent's (0 not yet played, 1 cooperate, 2 defect);
    - ``"text"``: ``Text``: feedback, the last round's result, the scores, and the request.

    ## Rewards
    Per round, from :data:`PAYOFFS`: both cooperate 3 each; both defect 1 each; a defector
    against a cooperator gets 5 and the cooperator 0. An invalid action (no answer, or an answer
    that is neither move) gives ``invalid_penalty`` (default ``-0.1``); then the round is not played (both moves are
    discarded) and is replayed, with the reason in the observations.

    ## Episode End
    Both players terminate after ``num_rounds`` rounds, or when a player makes its
    ``max_invalid_actions``-th invalid action: it forfeits the remaining rounds (whose payoffs
    are never negative, so forfeiting never pays). ``infos[agent]["outcome"]`` is then
    ``"done"`` or ``"forfeit"`` (this player forfeited). No truncation.

    ## Arguments
    - ``num_rounds``: rounds per game, told to the players. Default 10.
    - ``invalid_penalty``: default ``-0.1``. ``max_invalid_actions``: default 3 (``None``: never forfeit).
    - ``action_parser``: default :func:`llmgym.parsing.extract_answer`.
    - ``render_mode``: ``None`` or ``"ansi"``.

    ## Version History
    - v0: initial release.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "name": "prisoners_dilemma_v0"}
    #: What ``reset`` and ``step`` write: the content of ``get_state()`` (deep copies).
    state_fields: ClassVar[tuple[str, ...]] = (
        "agents", "history", "scores", "outcomes", "_feedback", "_invalid_counts", "np_random",
    )

    def __init__(
        self,
        *,
        num_rounds: int = 10,
        invalid_penalty: float = -0.1,
        max_invalid_actions: int | None = 3,
        action_parser: ActionParser | None = None,
        render_mode: str | None = None,
    ) -> None:
        if num_rounds < 1:
            raise InvalidOptionError(f"num_rounds must be >= 1, got {num_rounds}.")
        if max_invalid_actions is not None and max_invalid_actions < 1:
            raise InvalidOptionError(f"max_invalid_actions must be >= 1 or None, got {max_invalid_actions}.")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise InvalidOptionError(f"render_mode must be 'ansi' or None, got {render_mode!r}.")
        self.num_rounds = num_rounds
        self.invalid_penalty = float(invalid_penalty)
        self.max_invalid_actions = max_invalid_actions
        self.action_parser: ActionParser = action_parser or extract_answer
        self.render_mode = render_mode
        self.possible_agents = ["player_0", "player_1"]
        self.agents: list[str] = []
        observation_space = spaces.Dict({
            "observation": spaces.Box(0, 2, (num_rounds, 2), np.int8),
            "text": text_space(MAX_OBSERVATION_LENGTH),
        })
        self._observation_spaces = dict.fromkeys(self.possible_agents, observation_space)
        self._action_spaces = {agent: MoveText(MOVES) for agent in self.possible_agents}
        self.np_random, self.np_random_seed = seeding.np_random()
        self.history: list[tuple[Move, Move]] = []  # (player_0's move, player_1's move) per round
        self.scores: dict[str, float] = {}
        self.outcomes: dict[str, str] = {}
        self._feedback: dict[str, str] = {}
        self._invalid_counts: dict[str, int] = {}

    def observation_space(self, agent: str) -> spaces.Dict:
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> MoveText:
        return self._action_spaces[agent]

    def system_prompt(self, agent: str) -> str:
        """The system prompt of ``agent``'s conversation: the game, the payoffs, the move format."""
        return (
            f"You are playing an iterated prisoner's dilemma for {self.num_rounds} rounds against one "
            "opponent. Each round you both choose, at the same time, to cooperate or defect. Points per "
            "round: both cooperate, 3 each; both defect, 1 each; if one defects and the other cooperates, "
            "the defector gets 5 and the cooperator 0. Maximise your own total points. Answer with "
            "cooperate or defect inside <answer>...</answer>, for example <answer>cooperate</answer>."
        )

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.np_random, self.np_random_seed = seeding.np_random(seed)
        for name in options or {}:
            gymnasium.logger.warn(
                f"{type(self).__name__}.reset has no options and ignores {name!r}."
            )
        self.agents = self.possible_agents[:]
        self.history = []
        self.scores = dict.fromkeys(self.agents, 0.0)
        self.outcomes = {}
        self._feedback = dict.fromkeys(self.agents, "")
        self._invalid_counts = dict.fromkeys(self.agents, 0)
        infos = {agent: {"system_prompt": self.system_prompt(agent)} for agent in self.agents}
        return {agent: self.observe(agent) for agent in self.agents}, infos

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        agents = list(self.agents)
        moves = {agent: self._resolve(actions.get(agent)) for agent in agents}
        rewards = dict.fromkeys(agents, 0.0)
        infos: dict[str, dict[str, Any]] = {agent: {} for agent in agents}
        invalid = [agent for agent in agents if isinstance(moves[agent], tuple)]
        if invalid:
            self._reject(moves, invalid, rewards, infos)
        else:
            self._play_round(moves, rewards, infos)  # type: ignore[arg-type]
        terminated = bool(self.outcomes)
        for agent in agents:
            if terminated:
                infos[agent]["outcome"] = self.outcomes[agent]
        observations = {agent: self.observe(agent) for agent in agents}
        terminations = dict.fromkeys(agents, terminated)
        truncations = dict.fromkeys(agents, False)
        if terminated:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def observe(self, agent: str) -> dict[str, np.ndarray | str]:
        seat = self.possible_agents.index(agent)
        board = np.zeros((self.num_rounds, 2), np.int8)
        for round_index, pair in enumerate(self.history):
            board[round_index] = (_CODE[pair[seat]], _CODE[pair[1 - seat]])
        return {"observation": board, "text": to_charset(self._text(agent))}

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        rounds = "\n".join(f"round {i + 1}: {a} / {b}" for i, (a, b) in enumerate(self.history))
        return f"{rounds}\nscores: {self.scores}"

    def close(self) -> None:
        pass

    def get_state(self) -> dict[str, Any]:
        """A deep copy of the game's state (:attr:`state_fields`)."""
        return game_state(self, self.state_fields)

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`get_state` value."""
        restore_game(self, state)

    # ------------------------------------------------------------------ internals
    def _resolve(self, action: Any) -> Move | tuple[str | None, str]:
        """The move, or ``(parsed text, reason)`` when the action is invalid."""
        if not isinstance(action, str):
            return None, f"an action must be a string (the completion), got {type(action).__name__}."
        try:
            parsed = self.action_parser(action)
        except Exception:  # a user-supplied parser must not crash the game
            parsed = None
        if not isinstance(parsed, str) or not parsed:
            return None, "no move found. Put cooperate or defect inside <answer>...</answer>."
        move = move_from_text(parsed)
        if move is None:
            return parsed, f"{parsed[:40]!r} is not a move. Answer with cooperate or defect."
        return move

    def _reject(self, moves: dict, invalid: list[str], rewards: dict, infos: dict) -> None:
        for agent in self.agents:
            if agent in invalid:
                parsed, reason = moves[agent]
                self._invalid_counts[agent] += 1
                rewards[agent] = self.invalid_penalty
                self._feedback[agent] = f"Invalid move: {reason} The round was not played."
                infos[agent] = {"action_is_valid": False, "parsed_action": parsed}
            else:
                self._feedback[agent] = (
                    "Your opponent's move was invalid, so the round was not played; choose again."
                )
                infos[agent] = {"action_is_valid": True, "parsed_action": moves[agent]}
        limit = self.max_invalid_actions
        forfeits = [agent for agent in invalid if limit is not None and self._invalid_counts[agent] >= limit]
        if forfeits:
            self.outcomes = {agent: "forfeit" if agent in forfeits else "done" for agent in self.agents}
            for agent in self.agents:
                self._feedback[agent] += (
                    " You made too many invalid moves and forfeit the game." if agent in forfeits
                    else " Your opponent made too many invalid moves and forfeits; the game is over."
                )

    def _play_round(self, moves: dict[str, Move], rewards: dict, infos: dict) -> None:
        first, second = self.possible_agents
        self.history.append((moves[first], moves[second]))
        for agent, other in ((first, second), (second, first)):
            payoff = PAYOFFS[(moves[agent], moves[other])]
            rewards[agent] = payoff
            self.scores[agent] += payoff
            self._feedback[agent] = (
                f"Round {len(self.history)}: you chose {moves[agent]}, your opponent chose {moves[other]}; "
                f"you scored {payoff:g}."
            )
            infos[agent] = {"action_is_valid": True, "parsed_action": moves[agent]}
        if len(self.history) >= self.num_rounds:
            self.outcomes = dict.fromkeys(self.agents, "done")

    def _text(self, agent: str) -> str:
        other = self.possible_agents[1 - self.possible_agents.index(agent)]
        lines = [self._feedback[agent]] if self._feedback.get(agent) else []
        lines.append(
            f"Scores after {len(self.history)} of {self.num_rounds} rounds: "
            f"you {self.scores.get(agent, 0):g}, your opponent {self.scores.get(other, 0):g}."
        )
        if self.outcomes:
            lines.append("Game over.")
        else:
            lines.append(
                f"Round {len(self.history) + 1}: answer with cooperate or defect inside <answer>...</answer>."
            )
        return "\n".join(lines)


# ---------------------------------------------------------------------------------- opponents
#: A fixed strategy: ``(history from its own point of view as (mine, theirs) pairs, rng) -> move``.
DilemmaStrategy: TypeAlias = Callable[[list[tuple[Move, Move]], np.random.Generator], Move]


def tit_for_tat(history: list[tuple[Move, Move]], rng: np.random.Generator) -> Move:
    """Cooperate first, then copy the opponent's last move."""
    return history[-1][1] if history else "cooperate"


def always_cooperate(history: list[tuple[Move, Move]], rng: np.random.Generator) -> Move:
    return "cooperate"


def always_defect(history: list[tuple[Move, Move]], rng: np.random.Generator) -> Move:
    return "defect"


def random_strategy(history: list[tuple[Move, Move]], rng: np.random.Generator) -> Move:
    return MOVES[int(rng.integers(2))]


StrategyName = Literal["titfortat", "always_cooperate", "always_defect", "random"]
STRATEGIES: dict[str, DilemmaStrategy] = {
    "titfortat": tit_for_tat,
    "always_cooperate": always_cooperate,
    "always_defect": always_defect,
    "random": random_strategy,
}


class PrisonersDilemmaVersusEnv(TextEnv):
    """The iterated prisoner's dilemma (:class:`PrisonersDilemmaEnv`) against a fixed strategy.

    The agent plays ``player_0``; each step is one round, the opponent choosing at the same
    time without seeing the agent's move.

    ## Action Space
    Any string (``Text``): the raw completion; the move is the last ``<answer>...</answer>``
    holding ``cooperate`` or ``defect`` (``C`` / ``D`` accepted).

    ## Observation Space
    ``Text``: the last round's moves and points, the scores so far, and the request.

    ## Rewards
    The round's payoff (both cooperate 3, both defect 1, defecting against a cooperator 5, the
    cooperator 0). An invalid action gives ``invalid_penalty`` (default ``-0.1``); the round is
    not played and the opponent's choice for it is discarded.

    ## Episode End
    Terminated after ``num_rounds`` rounds, or on the ``max_invalid_actions``-th invalid action
    (the remaining rounds are forfeited: their payoffs are never negative, so this never pays).
    ``info["success"]``: the agent averaged at least the mutual-cooperation payoff, 3 a round.

    ## Arguments
    - ``opponent``: ``"titfortat"``, ``"always_cooperate"``, ``"always_defect"``, ``"random"``, or a
      callable ``(history as (its move, agent's move) pairs, rng) -> "cooperate" | "defect"``.
    - ``num_rounds``: default 10, told to the agent.
    - ``invalid_penalty``, ``max_invalid_actions`` (default 3), ``max_turns``, ``render_mode``,
      ``action_parser``: see :class:`llmgym.core.TextEnv`.

    Reset options: ``{"level": {"opponent_seed": 7}}`` (the random strategy's draws come from it).

    Snapshots: ``get_state()`` holds the game, the opponent's RNG and the counters (a custom
    callable opponent raises :class:`~llmgym.error.SnapshotNotSupported` unless it has
    ``stateless = True``); ``state_key()`` (also ``info["state_key"]``) is the rounds played.
    ``self_play_game()`` returns the game as a PettingZoo AEC env with both seats free, for
    self-play training (the trainer's ``self-play`` agent).

    ## Version History
    - v0: initial release.
    """

    format_hint = "Put cooperate or defect inside <answer>...</answer>."

    def __init__(
        self,
        *,
        opponent: StrategyName | DilemmaStrategy = "titfortat",
        num_rounds: int = 10,
        invalid_penalty: float = -0.1,
        max_invalid_actions: int | None = 3,
        max_turns: int | None = None,
        render_mode: str | None = None,
        action_parser: ActionParser | None = None,
        split: Split = "train",
        held_out_levels: int | None = None,
    ) -> None:
        if not callable(opponent) and opponent not in STRATEGIES:
            raise InvalidOptionError(
                f"opponent must be one of {sorted(STRATEGIES)} or a callable, got {opponent!r}."
                f"{did_you_mean(str(opponent), STRATEGIES)}"
            )
        super().__init__(
            render_mode=render_mode,
            invalid_penalty=invalid_penalty,
            max_invalid_actions=max_invalid_actions,
            max_turns=max_turns,
            action_parser=action_parser,
            split=split,
            held_out_levels=held_out_levels,
        )
        # Moves reach the game already parsed; the agent's invalid actions never reach it.
        self.game = PrisonersDilemmaEnv(num_rounds=num_rounds, invalid_penalty=invalid_penalty,
                                        max_invalid_actions=None, action_parser=str.strip)
        self.strategy: DilemmaStrategy = opponent if callable(opponent) else STRATEGIES[opponent]
        self._level: dict[str, Any] = {}
        self._opponent_rng = level_rng(0)

    @property
    def system_prompt(self) -> str:
        return self.game.system_prompt("player_0")

    def level(self) -> dict[str, Any]:
        return dict(self._level)

    def valid_actions(self) -> list[str]:
        """The moves: ``cooperate`` and ``defect`` (what a uniformly random baseline draws from)."""
        return list(MOVES)

    def self_play_game(self, seed: int | None = None, options: dict[str, Any] | None = None) -> AECEnv:
        """A fresh game for self-play as a PettingZoo AEC env (the two seats choose in turn, neither
        seeing the other's choice before the round is scored), with this env's parser and rules."""
        self.reset(seed=seed, options=options)
        game = parallel_to_aec(PrisonersDilemmaEnv(
            num_rounds=self.game.num_rounds,
            invalid_penalty=self.invalid_penalty,
            max_invalid_actions=self.max_invalid_actions,
            action_parser=self.action_parser,
        ))
        game.reset()
        return game

    def _reset_task(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        info: dict[str, Any] = {}
        if "level" in options:
            level = options["level"]
            well_formed = isinstance(level, dict) and set(level) == {"opponent_seed"}
            if not (well_formed and type(level["opponent_seed"]) is int):
                raise LevelFormatError(
                    f"A prisoner's dilemma level is {{'opponent_seed': <int>}}, got {level!r}."
                )
        else:
            level_seed = self._draw_level_seed()
            level = {"opponent_seed": int(level_rng(level_seed).integers(2**31))}
            info["seed"] = level_seed
        self._level = dict(level)
        self._opponent_rng = level_rng(level["opponent_seed"])
        observations, _ = self.game.reset()
        return str(observations["player_0"]["text"]), info

    def _apply(self, action: str) -> Outcome:
        move = move_from_text(action)
        if move is None:
            return Outcome(
                f"Invalid move: {action[:40]!r} is not a move. {self.format_hint} The round was not played.\n"
                f"{self._observe()}",
                valid=False,
                effective=False,
            )
        their_view = [(theirs, mine) for mine, theirs in self.game.history]
        opponent_move = self.strategy(their_view, self._opponent_rng)
        moves = {"player_0": move, "player_1": opponent_move}
        observations, rewards, terminations, _, _ = self.game.step(moves)
        terminated = terminations["player_0"]
        mutual_cooperation = PAYOFFS[("cooperate", "cooperate")] * self.game.num_rounds
        success = terminated and self.game.scores["player_0"] >= mutual_cooperation
        return Outcome(
            str(observations["player_0"]["text"]),
            reward=rewards["player_0"],
            terminated=terminated,
            success=success,
            info={"opponent_move": opponent_move},
        )

    def _observe(self) -> str:
        return str(self.game.observe("player_0")["text"])

    # ------------------------------------------------------------------ snapshots
    def _task_state(self) -> tuple[int, dict[str, Any], dict[str, Any]]:
        require_stateless(self.strategy, self.strategy in STRATEGIES.values(), type(self).__name__)
        return self._level["opponent_seed"], rng_state(self._opponent_rng), self.game.get_state()

    def _restore_task(self, task: tuple[int, dict[str, Any], dict[str, Any]]) -> None:
        opponent_seed, opponent_rng, game = task
        self._level = {"opponent_seed": opponent_seed}
        self._opponent_rng = restore_rng(opponent_rng, self._opponent_rng)
        self.game.set_state(game)

    def _state_key(self) -> str:
        # The rounds played, as (agent, opponent) first letters: "rounds: cd dd".
        return "rounds:" + "".join(f" {mine[0]}{theirs[0]}" for mine, theirs in self.game.history)
