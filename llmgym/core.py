"""The text-environment core every llmgym env builds on.

A :class:`TextEnv` is a real :class:`gymnasium.Env` whose observations and actions are
strings. The observation is the text of the next user turn; the action is the raw model
completion. The core owns what every text env shares, so that each env only describes its
task:

* parsing the completion with a parser that is passed in (default: the last
  ``<answer>...</answer>``), and never raising on a bad action;
* the invalid-action rule: state unchanged, ``invalid_penalty`` reward, feedback in the
  next observation, and an optional episode end after ``max_invalid_actions``;
* the turn limit ``max_turns`` (``truncated``), the standard ``info`` keys, ``render_mode="ansi"``;
* keeping observations inside the declared :class:`gymnasium.spaces.Text` space;
* rejecting unknown constructor options with a suggestion;
* snapshots: ``get_state()`` / ``set_state(state)`` and ``state_key()``, also reported as
  ``info["state_key"]`` at reset and at every step (see :class:`EnvState`);
* the train/test split (:mod:`llmgym.splits`): under ``split="train"`` a level drawn from a seed
  is never one of the env's eval levels, compared by content.

A subclass implements ``_reset_task``, ``_apply`` and ``_observe`` (see their docstrings), and
for snapshots ``_task_state`` and ``_restore_task`` (and ``_state_key`` where ``_observe`` is
not a fit key).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, SupportsFloat, TypeVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from llmgym.error import (
    InvalidOptionError,
    ResetNeeded,
    SnapshotMismatch,
    SnapshotNotSupported,
    TrainOnTestWarning,
    UnknownOptionError,
    did_you_mean,
)
from llmgym.parsing import (
    NAMED_PARSERS,
    ActionParser,
    extract_answer,
    extract_answer_or_boxed,
    extract_boxed,
    lenient_parser,
)
from llmgym.spaces import (  # noqa: F401 - CHARSET and the length bounds are re-exported
    CHARSET,
    MAX_ACTION_LENGTH,
    MAX_OBSERVATION_LENGTH,
    text_space,
    to_charset,
)
from llmgym.splits import MAX_REDRAWS, LevelSpace, Split, check_split, held_out_keys, level_key


class Outcome:
    """What one parsed action did; returned by :meth:`TextEnv._apply`.

    Attributes:
        observation: the next user turn (feedback plus the new state).
        reward: the step's reward (ignored when ``valid`` is False: ``invalid_penalty`` is used).
        terminated: the task ended (solved, failed, or lost).
        success: the task's own success, independent of reward shaping.
        valid: the action was legal. An invalid action must leave the state unchanged.
        effective: the state changed.
        info: extra env-specific ``info`` entries.
    """

    __slots__ = ("observation", "reward", "terminated", "success", "valid", "effective", "info")

    def __init__(
        self,
        observation: str,
        reward: float = 0.0,
        terminated: bool = False,
        success: bool = False,
        valid: bool = True,
        effective: bool = True,
        info: dict[str, Any] | None = None,
    ) -> None:
        self.observation = observation
        self.reward = reward
        self.terminated = terminated
        self.success = success
        self.valid = valid
        self.effective = effective
        self.info = info


@dataclass(frozen=True, slots=True)
class EnvState:
    """A snapshot of a :class:`TextEnv`: everything its future depends on (``get_state()``).

    Immutable and picklable: restoring it (``set_state``) in any process, on an env made with
    the same id, makes the same actions give the same observations, rewards, ``terminated``,
    ``truncated`` and infos as after the snapshot.

    Attributes:
        env: the env's class as ``"module:Class"``; ``set_state`` refuses another class.
        env_id: the registered id the env was made with (``None`` when built directly).
        task: the subclass's part (level, position, ...), from ``_task_state``.
        rng: ``np_random``'s bit-generator state (NumPy's dict).
        seed: ``np_random_seed`` at the snapshot.
        turn: steps taken in the episode.
        invalid_count: invalid actions in the episode.
        ended: the episode had ended (the next ``step`` reports that).
        success: ``info["success"]`` so far.
        observation: the last observation returned, the one the next action answers.
    """

    env: str
    env_id: str | None
    task: Any
    rng: dict[str, Any]
    seed: int | None
    turn: int
    invalid_count: int
    ended: bool
    success: bool
    observation: str


def rng_state(generator: np.random.Generator) -> dict[str, Any]:
    """The state of ``generator``'s bit generator (a picklable dict)."""
    return generator.bit_generator.state


def restore_rng(state: dict[str, Any], generator: np.random.Generator | None = None) -> np.random.Generator:
    """A generator in ``state``: ``generator`` itself when its bit generator is of the same kind."""
    if generator is None or type(generator.bit_generator).__name__ != state["bit_generator"]:
        generator = np.random.Generator(getattr(np.random, state["bit_generator"])())
    generator.bit_generator.state = state
    return generator


def _reject_unknown_options(init: Callable[..., None]) -> Callable[..., None]:
    """Wrap ``__init__`` so an unknown keyword fails with the valid names and a suggestion."""
    parameters = inspect.signature(init).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return init
    valid = [name for name in parameters if name != "self"]

    @functools.wraps(init)
    def checked_init(self: Any, *args: Any, **kwargs: Any) -> None:
        _check_option_names(type(self).__name__, kwargs, valid)
        init(self, *args, **kwargs)

    return checked_init


_Made = TypeVar("_Made")


def checked_options(make: Callable[..., _Made]) -> Callable[..., _Made]:
    """Wrap an env factory (an entry point that is a function) so an unknown keyword fails as a
    :class:`TextEnv`'s does: with the valid names and a suggestion."""
    valid = list(inspect.signature(make).parameters)

    @functools.wraps(make)
    def checked_make(*args: Any, **kwargs: Any) -> _Made:
        _check_option_names(make.__name__, kwargs, valid)
        return make(*args, **kwargs)

    return checked_make


def _check_option_names(owner: str, given: dict[str, Any], valid: list[str]) -> None:
    for name in given:
        if name not in valid:
            raise UnknownOptionError(
                f"{owner} has no option {name!r}.{did_you_mean(name, valid)} "
                f"Valid options: {', '.join(sorted(valid))}."
            )


class TextEnv(gym.Env[str, str]):
    """Base class of llmgym's single-agent text environments (see the module docstring).

    Arguments common to every text env:
        render_mode: ``None``, ``"ansi"`` (``render()`` returns the state as text), or
            ``"rgb_array"`` where the env lists it in ``metadata["render_modes"]`` (a tile
            picture, ``(H, W, 3)`` uint8, from the env's ``_render_rgb``).
        invalid_penalty: reward of an unparseable or illegal action.
        max_invalid_actions: end the episode (``terminated``) after this many invalid
            actions; ``None`` never ends it for that reason.
        max_turns: end the episode (``truncated``) after this many steps; ``None`` for no limit.
        action_parser: turns the raw completion into the action string, or ``None`` when it
            finds none. A callable, or a name from :data:`llmgym.parsing.NAMED_PARSERS`:
            ``"answer"`` (the default, :func:`llmgym.parsing.extract_answer`), ``"boxed"``,
            ``"answer_or_boxed"``, or ``"lenient"`` (the answer tag, else the last of the env's
            ``action_names`` in the text; for envs with named actions).
        split: ``"train"`` (default): a level drawn from a seed is never one of the env's eval
            levels (compared by content, see :mod:`llmgym.splits`); eval levels are played through
            ``reset(options={"level": ...})``. ``"all"``: no split, as eval-set version 1 drew
            (warns, and reset ``info["split"]`` says so).
        held_out_levels: for a level space without a frozen eval set (options such as ``size=3``),
            how many of its distinct eval-seed levels ``split="train"`` holds out (``None``: none,
            as for a space nobody evaluates on; the trainer sets it to ``eval.levels`` for a space
            it evaluates on). A space with a frozen eval set always holds out that set.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}
    #: Keys accepted in ``reset(options=...)``; others raise :class:`UnknownOptionError`.
    reset_options: ClassVar[frozenset[str]] = frozenset({"level"})
    #: Said in the feedback when no action could be parsed from the completion.
    format_hint: ClassVar[str] = "Put your action inside <answer>...</answer>."
    #: Constructor options that change which level a seed yields (see :meth:`level_space`).
    level_options: ClassVar[tuple[str, ...]] = ()
    #: Constructor options that, set to a true value, put a teacher's signal into the rewards
    #: (option name -> the teacher, e.g. Sokoban's ``progress_reward`` -> ``"solver"``); see :meth:`teacher`.
    teacher_options: ClassVar[dict[str, str]] = {}

    observation_space: spaces.Text
    action_space: spaces.Text

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = _reject_unknown_options(cls.__dict__["__init__"])  # type: ignore[method-assign]

    def __init__(
        self,
        *,
        render_mode: str | None = None,
        invalid_penalty: float = -0.1,
        max_invalid_actions: int | None = None,
        max_turns: int | None = None,
        action_parser: ActionParser | str | None = None,
        split: Split = "train",
        held_out_levels: int | None = None,
    ) -> None:
        check_split(split, held_out_levels)
        if split == "all":
            warnings.warn(
                f"{type(self).__name__} made with split='all': levels drawn from seeds may be eval levels "
                "(reset info['split'] says 'all'). Train with the default split='train'.",
                TrainOnTestWarning, stacklevel=3,
            )
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}."
            )
        if max_invalid_actions is not None and max_invalid_actions < 1:
            raise ValueError(f"max_invalid_actions must be >= 1 or None, got {max_invalid_actions}.")
        if max_turns is not None and max_turns < 1:
            raise ValueError(f"max_turns must be >= 1 or None, got {max_turns}.")
        self.render_mode = render_mode
        self.invalid_penalty = float(invalid_penalty)
        self.max_invalid_actions = max_invalid_actions
        self.max_turns = max_turns
        self.action_parser: ActionParser = self._resolve_parser(action_parser)
        self.split = split
        self.held_out_levels = held_out_levels
        self._held_out: frozenset[str] | None = None  # keys of the eval levels, read at the first drawn level
        self.observation_space = text_space(MAX_OBSERVATION_LENGTH)
        self.action_space = text_space(MAX_ACTION_LENGTH)
        self._turn = 0
        self._invalid_count = 0
        self._started = False
        self._ended = False
        self._success = False
        self._observation = ""

    # ------------------------------------------------------------------ the subclass's part
    @property
    def system_prompt(self) -> str:
        """The system prompt that explains the task and the action format."""
        raise NotImplementedError

    def _reset_task(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Start a new task from ``self.np_random`` (or ``options["level"]``).

        Returns the first observation and env-specific reset ``info`` (``level_id`` or
        ``seed``, and ``optimal_steps`` where known).
        """
        raise NotImplementedError

    def _apply(self, action: str) -> Outcome:
        """Apply one parsed action. An illegal action returns ``valid=False`` and changes nothing."""
        raise NotImplementedError

    def _observe(self) -> str:
        """The current state as text (used in feedback and by ``render``)."""
        raise NotImplementedError

    # For snapshots (get_state / set_state / state_key):
    def _task_state(self) -> Any:
        """The task's part of a snapshot: an immutable, picklable value (level, position, ...).

        It must not share mutable objects with the env: later steps must not change it.
        Counters and ``np_random`` are the core's; extra RNGs (an opponent's) belong here.
        """
        raise SnapshotNotSupported(
            f"{type(self).__name__} cannot snapshot its state: it does not implement _task_state and "
            "_restore_task. Implement both (see llmgym.core.TextEnv), or replay the episode from its "
            "reset seed instead."
        )

    def _restore_task(self, task: Any) -> None:
        """Put the task in the state ``task`` (a ``_task_state`` value), copying what later steps mutate."""
        raise SnapshotNotSupported(
            f"{type(self).__name__} cannot restore a snapshot: it does not implement _restore_task."
        )

    def _state_key(self) -> Any:
        """A hashable, compact key, equal for equal game states (the step count aside).

        Default: the state as text (``_observe()``). Override it where that text holds more
        than the game state (feedback, history) or where the state holds more than the text.
        """
        return self._observe()

    def split_key(self) -> str:
        """The content key by which the split compares the level of the last reset (:func:`llmgym.splits.level_key`)."""
        if not self._started:
            raise ResetNeeded(f"{type(self).__name__}.split_key was called before reset(); call env.reset() first.")
        return level_key(self._split_level())

    def _split_level(self) -> Any:
        """The drawn level as the split compares it: the level as eval sets store it (``level()``).

        Override where a drawn episode starts elsewhere than its level (Sokoban's ``start="solution"``
        compares the room it was taken from).
        """
        return self.level()

    def _eval_spaces(self) -> list[LevelSpace]:
        """The level spaces whose eval levels ``split="train"`` holds out of this env's draws."""
        space = self.level_space()
        return [] if space is None else [space]

    def level_space(self) -> LevelSpace | None:
        """What decides the level a seed yields: the class and its :attr:`level_options` values.

        ``None`` where the levels have no space that eval sets could name (a problem source
        passed in as an object).
        """
        if type(self).level is TextEnv.level:
            return None
        options = {name: getattr(self, name) for name in self.level_options}
        return LevelSpace.of(_class_name(type(self)), options)

    def teacher(self) -> str | None:
        """Who besides the task shapes this env's rewards: a :attr:`teacher_options` value, or None.

        Rewards that come from the task alone (success, a box onto a target) have no teacher;
        an option such as Sokoban's ``progress_reward``, which rewards the moves an exact solver
        counts as progress, makes the solver one. Learning results record it.
        """
        teachers = sorted({name for option, name in self.teacher_options.items() if getattr(self, option)})
        return "+".join(teachers) or None

    def curriculum(self) -> str | None:
        """Where this env's options start its levels, in words, when not where the eval sets do; else None.

        A curriculum may use anything (Sokoban's starts on a solver's solution) without teaching:
        it chooses what is played, not what is rewarded. Levels from another space (smaller lakes)
        are a curriculum too, found by comparing :meth:`level_space` with the evaluated env's
        (:func:`llmgym_train.planner.curriculum_of`). Learning results record both.
        """
        return None

    # Optional, for eval sets, gold tests and the optimal agent:
    def level(self) -> Any:
        """The current episode's starting level, JSON-serializable, as ``reset(options={"level": ...})`` takes it."""
        raise NotImplementedError(f"{type(self).__name__} does not expose its level.")

    def solution(self) -> list[str] | None:
        """An optimal sequence of parsed actions from the current state (``None``: unknown/unsolvable).

        Each element is what the parser would return, e.g. ``"Up"``; wrap it in the env's
        answer format (``<answer>Up</answer>``) to play it as a completion.
        """
        raise NotImplementedError(f"{type(self).__name__} has no solver.")

    # ------------------------------------------------------------------ the Gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = dict(options or {})
        for name in options:
            if name not in self.reset_options:
                raise UnknownOptionError(
                    f"{type(self).__name__}.reset has no option {name!r}."
                    f"{did_you_mean(name, self.reset_options)} "
                    f"Valid options: {', '.join(sorted(self.reset_options)) or 'none'}."
                )
        self._turn = 0
        self._invalid_count = 0
        self._started = True
        self._ended = False
        self._success = False
        observation, info = self._reset_task(options)
        if "level" not in options and self.split == "train":
            observation, info = self._redraw_held_out(observation, info, options)
        info["split"] = self.split
        info["system_prompt"] = self.system_prompt
        info["state_key"] = self._state_key()
        self._observation = observation = to_charset(observation)
        return observation, info

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        if not self._started:
            raise ResetNeeded(f"{type(self).__name__}.step was called before reset(); call env.reset() first.")
        if self._ended:
            return self._after_end()
        parsed = self._parse(action)
        if parsed is None:
            outcome = Outcome(f"Invalid action: {self.format_hint}\n\n{self._observe()}", valid=False, effective=False)
        else:
            outcome = self._apply(parsed)
        self._turn += 1
        observation = outcome.observation
        terminated = outcome.terminated
        reward = outcome.reward
        if not outcome.valid:
            reward = self.invalid_penalty
            self._invalid_count += 1
            if self.max_invalid_actions is not None and self._invalid_count >= self.max_invalid_actions:
                terminated = True
                observation += f"\n\nToo many invalid actions ({self._invalid_count}); the episode is over."
        self._success = self._success or outcome.success
        truncated = not terminated and self.max_turns is not None and self._turn >= self.max_turns
        self._ended = terminated or truncated
        info = {
            "success": self._success,
            "action_is_valid": outcome.valid,
            "action_is_effective": outcome.effective,
            "parsed_action": parsed,
            "turn": self._turn,
            "state_key": self._state_key(),
        }
        if outcome.info:
            info.update(outcome.info)
        self._observation = observation = to_charset(observation)
        return observation, reward, terminated, truncated, info

    # ------------------------------------------------------------------ snapshots
    def get_state(self) -> EnvState:
        """A snapshot of the episode now (see :class:`EnvState`); restore it with :meth:`set_state`.

        Raises:
            ResetNeeded: before the first ``reset`` (there is no episode yet).
            SnapshotNotSupported: the env cannot capture its state (the message says why).
        """
        if not self._started:
            raise ResetNeeded(f"{type(self).__name__}.get_state was called before reset(); call env.reset() first.")
        return EnvState(
            env=_class_name(type(self)),
            env_id=self.spec.id if self.spec is not None else None,
            task=self._task_state(),
            rng=rng_state(self.np_random),
            seed=self._np_random_seed,
            turn=self._turn,
            invalid_count=self._invalid_count,
            ended=self._ended,
            success=self._success,
            observation=self._observation,
        )

    def set_state(self, state: EnvState) -> None:
        """Restore a snapshot from :meth:`get_state` (of this env or another made with the same id).

        Works on a freshly made env too, before any ``reset``; then step ``env.unwrapped``
        (``gym.make``'s order-enforcing wrapper still wants one ``reset`` first).

        Raises:
            SnapshotMismatch: ``state`` is not an :class:`EnvState` of this env's class and id.
            SnapshotNotSupported: the env cannot restore a state.
        """
        self._check_state(state)
        self._restore_task(state.task)
        self._np_random = restore_rng(state.rng, self._np_random)
        self._np_random_seed = state.seed
        self._turn = state.turn
        self._invalid_count = state.invalid_count
        self._started = True
        self._ended = state.ended
        self._success = state.success
        self._observation = state.observation

    def state_key(self) -> Any:
        """A hashable key of the game state now, equal for equal states (step count aside).

        The same value is ``info["state_key"]`` at reset and after every step: steps that act
        on equal keys acted on the same state, which is how a trainer groups them.
        """
        if not self._started:
            raise ResetNeeded(f"{type(self).__name__}.state_key was called before reset(); call env.reset() first.")
        return self._state_key()

    def random_rollout_returns(
        self, actions: list[str], *, rollouts: int, turns: int, gamma: float = 1.0, seed: int = 0, reduce: str = "max"
    ) -> list[float]:
        """Each action's return from the state now, over random continuations; the state is kept.

        Every action is played from a snapshot, then ``rollouts`` times on from there for up to
        ``turns - 1`` more turns, each drawn uniformly from ``actions``, until the episode ends.
        A continuation's return is the sum of its turns' rewards, discounted by ``gamma`` a turn
        after the first; the action's figure is the best of them (``reduce="max"``: the most the
        env's rewards say a random search finds within ``turns``) or their mean (``"mean"``: the
        action's value under the uniform policy). Only the env's rewards and snapshots are used.
        """
        if reduce not in ("max", "mean") or rollouts < 1 or turns < 1 or not actions:
            raise InvalidOptionError(
                f"random_rollout_returns needs actions, rollouts >= 1, turns >= 1 and reduce 'max' or 'mean'; got "
                f"{len(actions)} actions, rollouts={rollouts}, turns={turns}, reduce={reduce!r}."
            )
        start = self.get_state()
        draws = np.random.default_rng(seed).integers(0, len(actions), size=(len(actions), rollouts, turns - 1))
        figures = []
        try:
            for index, action in enumerate(actions):
                self.set_state(start)
                _, first, terminated, truncated, _ = self.step(action)
                after = self.get_state()
                returns = []
                for continuation in draws[index] if not (terminated or truncated) else draws[index, :1, :0]:
                    self.set_state(after)
                    total, discount = float(first), 1.0
                    for draw in continuation:
                        _, reward, terminated, truncated, _ = self.step(actions[draw])
                        discount *= gamma
                        total += discount * float(reward)
                        if terminated or truncated:
                            break
                    returns.append(total)
                figures.append(max(returns) if reduce == "max" else float(np.mean(returns)))
        finally:
            self.set_state(start)
        return figures

    def _check_state(self, state: Any) -> None:
        name = _class_name(type(self))
        if not isinstance(state, EnvState) or state.env != name:
            got = state.env if isinstance(state, EnvState) else type(state).__name__
            raise SnapshotMismatch(
                f"{type(self).__name__}.set_state expected a state from get_state() of a {name} env, got "
                f"{got!r}. Restore a state into an env made with the id it was taken from."
            )
        env_id = self.spec.id if self.spec is not None else None
        if state.env_id is not None and env_id is not None and state.env_id != env_id:
            raise SnapshotMismatch(
                f"{type(self).__name__}.set_state got a state of {state.env_id!r}, but this env is {env_id!r}; "
                f"ids differ in their settings. Restore it into an env made with gym.make({state.env_id!r})."
            )

    def render(self) -> str | np.ndarray | None:  # type: ignore[override]
        if self.render_mode == "ansi":
            return self._observe() if self._started else ""
        if self.render_mode == "rgb_array":
            return self._render_rgb() if self._started else np.zeros((1, 1, 3), np.uint8)
        return None

    def _render_rgb(self) -> np.ndarray:
        """The state as a picture, ``(H, W, 3)`` uint8 (see :mod:`llmgym.render`).

        Envs that add ``"rgb_array"`` to ``metadata["render_modes"]`` implement it.
        """
        raise NotImplementedError(f"{type(self).__name__} has no rgb_array rendering.")

    # ------------------------------------------------------------------ helpers
    def _parse(self, action: Any) -> str | None:
        if not isinstance(action, str):
            return None
        try:
            parsed = self.action_parser(action)
        except Exception:  # a user-supplied parser must not crash the env either
            return None
        return parsed if isinstance(parsed, str) and parsed else None

    def _resolve_parser(self, parser: ActionParser | str | None) -> ActionParser:
        if parser is None or callable(parser):
            return parser or extract_answer
        named = {"answer": extract_answer, "boxed": extract_boxed, "answer_or_boxed": extract_answer_or_boxed}
        if parser in named:
            return named[parser]
        if parser == "lenient":
            names = getattr(self, "action_names", None)
            if not names:
                raise InvalidOptionError(
                    f"action_parser='lenient' needs named actions, and {type(self).__name__} has no "
                    "action_names; use 'answer' or pass a callable."
                )
            return lenient_parser(names)
        raise InvalidOptionError(
            f"action_parser must be a callable or one of {', '.join(NAMED_PARSERS)}; got {parser!r}."
            f"{did_you_mean(str(parser), NAMED_PARSERS)}"
        )

    def _after_end(self) -> tuple[str, float, bool, bool, dict[str, Any]]:
        info = {
            "success": self._success,
            "action_is_valid": False,
            "action_is_effective": False,
            "parsed_action": None,
            "turn": self._turn,
            "state_key": self._state_key(),
        }
        return "The episode is over; call reset() to start a new one.", 0.0, True, False, info

    def _redraw_held_out(
        self, observation: str, info: dict[str, Any], options: dict[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        """Draw again from ``np_random`` while the drawn level is a held-out eval level."""
        held_out = self._held_out
        if held_out is None:
            held_out = self._held_out = frozenset().union(
                *(held_out_keys(space, self.held_out_levels) for space in self._eval_spaces())
            )
        if not held_out:
            return observation, info
        for _ in range(MAX_REDRAWS):
            if level_key(self._split_level()) not in held_out:
                return observation, info
            observation, info = self._reset_task(options)
        raise InvalidOptionError(
            f"{type(self).__name__} drew {MAX_REDRAWS} held-out eval levels in a row: its level space "
            f"{self.level_space()} has (almost) no levels left for training. Hold out fewer "
            "(held_out_levels=k), or make the space larger."
        )

    def _draw_level_seed(self) -> int:
        """A seed for a level generator, drawn from ``self.np_random``.

        Generating from this seed (rather than from ``np_random`` directly) makes every level
        reproducible from one integer, which reset ``info`` reports as ``seed``.
        """
        return draw_level_seed(self.np_random)


def draw_level_seed(np_random: np.random.Generator) -> int:
    """A seed for a level generator, drawn from an env's ``np_random`` (see :func:`level_rng`)."""
    return int(np_random.integers(0, 2**63 - 1))


@functools.lru_cache(maxsize=4096)
def text_digest(text: str) -> str:
    """A short stable digest of ``text`` (16 hex digits), the same in every process: for state keys."""
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


@functools.cache
def _class_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def level_rng(level_seed: int) -> np.random.Generator:
    """The generator a level with ``level_seed`` is drawn from (see ``_draw_level_seed``)."""
    return np.random.Generator(np.random.PCG64(level_seed))
