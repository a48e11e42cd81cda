"""Math environments: one answer per problem, or several attempts with feedback."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from llmgym.core import Outcome, TextEnv, draw_level_seed, level_rng, text_digest
from llmgym.envs.math.problems import (
    DIFFICULTIES,
    PROBLEM_KINDS,
    Difficulty,
    Problem,
    ProblemKind,
    generate_problem,
)
from llmgym.envs.math.verify import AnswerVerifier, default_verifier
from llmgym.error import InvalidOptionError, did_you_mean
from llmgym.parsing import extract_answer_or_boxed
from llmgym.splits import LevelSpace, Split

#: The feedback after a wrong answer when attempts are left.
WRONG_TRY_AGAIN = "Unfortunately your answer is wrong. Let's try again."
#: The feedback after a wrong answer on the last attempt.
WRONG_FINAL = "Unfortunately your answer is wrong. No attempts are left."
#: The feedback after a correct answer.
CORRECT = "Congratulations! Your answer is correct."

_ANSWER_FORMAT = "Put your final answer inside <answer>...</answer> or \\boxed{...}."


class ProblemSource(Protocol):
    """Where a :class:`MathEnv`'s problems come from: generated, or rows of a dataset file."""

    #: Keys accepted in ``reset(options=...)``, ``level`` included.
    reset_options: frozenset[str]

    def draw(self, np_random: np.random.Generator, options: dict[str, Any]) -> tuple[Problem, dict[str, Any]]:
        """A new problem drawn from the env's ``np_random``, and the reset ``info`` that identifies it."""
        ...


@dataclass(frozen=True)
class GeneratedProblems:
    """Problems generated from a level seed (see :mod:`llmgym.envs.math.problems`); reset ``info`` has ``seed``."""

    difficulty: Difficulty
    kinds: tuple[ProblemKind, ...]
    reset_options: frozenset[str] = frozenset({"level", "difficulty"})

    def draw(self, np_random: np.random.Generator, options: dict[str, Any]) -> tuple[Problem, dict[str, Any]]:
        difficulty = _check_difficulty(options.get("difficulty", self.difficulty))
        seed = draw_level_seed(np_random)
        return generate_problem(level_rng(seed), difficulty, self.kinds), {"seed": seed}


class MathEnv(TextEnv):
    """Solve a math problem; answer in ``<answer>...</answer>`` or ``\\boxed{...}``.

    Problems are generated from ``np_random`` (see :mod:`llmgym.envs.math.problems`):
    arithmetic, fractions, linear equations and word problems, each with an exact answer.
    Answers are checked by :class:`~llmgym.envs.math.verify.AnswerVerifier`: exact numbers
    compare exactly, other forms go to math-verify in a worker with a hard timeout. Where the
    reference is a number, an answer that is still a computation (``5 + 11`` for "Compute
    5 + 11.") is wrong, with ``info["verification"] == "computation"``: the number is asked for.

    Action Space:
        Any string; the last ``<answer>`` (or, without one, the last ``\\boxed{}``) is the answer.

    Observation Space:
        ``Text``: the problem first; after each answer, the verdict.

    Rewards:
        On a correct answer ``turn_discount ** (attempt - 1)``: 1 on the first attempt. A
        wrong answer gives 0. A completion with no answer in it gives ``format_penalty``
        (default -0.1) and uses up an attempt.

    Episode End:
        ``terminated`` on a correct answer, and when the attempts are used up by wrong or
        missing answers: with one attempt (``llmgym/Math-v0``) the episode always ends after the
        first step with ``terminated=True, truncated=False``. With more attempts, running out
        of them on wrong answers is ``truncated`` (the turn limit), as Gymnasium's convention for limits.

    Arguments:
        difficulty: ``"easy"``, ``"medium"`` or ``"hard"`` (also a reset option).
        kinds: the problem kinds to draw from (default: all four).
        max_attempts: answers allowed; after a wrong one the agent is told
            ``"Unfortunately your answer is wrong. Let's try again."``.
        turn_discount: reward factor per extra attempt (1.0: no discount).
        format_penalty: reward of a completion with no answer in it.
        verifier: answer checker; default one shared per process.
        render_mode: ``None`` or ``"ansi"``.
        problems: where problems come from (a :class:`ProblemSource`); default
            ``GeneratedProblems(difficulty, kinds)``. ``llmgym/MathDataset-v0`` passes a
            dataset's rows (:func:`llmgym.envs.math.dataset.MathDatasetEnv`).

    Reset options: ``level`` (a problem dict, as :meth:`level` returns), and the problem
    source's own (``difficulty`` for generated problems).

    Snapshots: ``get_state()`` holds the problem, the attempts used and ``np_random``;
    ``state_key()`` (also ``info["state_key"]``) is the attempt number and a digest of the problem.

    Version History:
        * v0: initial version. A computation given for a numeric answer counted as right until
          the verifier's computation check; no recorded result changed (the leaderboard's math
          rows are the random agent's, whose random strings hold no answer, and the optimal
          agent's, which answers the number). An answer with ``=`` whose text after the last
          ``=`` is a number is judged by that number: ``16 * 6} = 9`` (a stray brace) had math-verify
          read ``16 * 6`` and score it right, which a trained policy learnt to write (recipe trial
          ``math-easy-grpo-stop-entropy-0.003``). The math leaderboard rows recorded before this check
          were not re-run. Then, for a numeric reference, the worker gets only the text after the
          last ``=``: ``2 * 63}{km} = 156 km`` had math-verify read ``2 * 63`` and score it right,
          which another trained policy learnt (recipe trial ``math-easy-grpo-stop-entropy-0.003-60min``).
          The recorded episodes of the trained math rows (``benchmarks/results/leaderboard_runs``),
          replayed under both checks, keep every verdict.
    """

    reset_options: ClassVar[frozenset[str]] = frozenset({"level", "difficulty"})
    format_hint: ClassVar[str] = _ANSWER_FORMAT
    level_options: ClassVar[tuple[str, ...]] = ("difficulty", "kinds")

    def __init__(
        self,
        *,
        difficulty: Difficulty = "medium",
        kinds: tuple[ProblemKind, ...] | None = None,
        max_attempts: int = 1,
        turn_discount: float = 1.0,
        format_penalty: float = -0.1,
        verifier: AnswerVerifier | None = None,
        render_mode: str | None = None,
        problems: ProblemSource | None = None,
        split: Split = "train",
        held_out_levels: int | None = None,
    ) -> None:
        if max_attempts < 1:
            raise InvalidOptionError(f"max_attempts must be >= 1, got {max_attempts}.")
        if not 0.0 < turn_discount <= 1.0:
            raise InvalidOptionError(f"turn_discount must be in (0, 1], got {turn_discount}.")
        super().__init__(
            render_mode=render_mode,
            invalid_penalty=format_penalty,
            max_invalid_actions=1 if max_attempts == 1 else None,
            max_turns=max_attempts,
            action_parser=extract_answer_or_boxed,
            split=split,
            held_out_levels=held_out_levels,
        )
        self.difficulty = _check_difficulty(difficulty)
        self.kinds = _check_kinds(kinds)
        self.problems: ProblemSource = problems or GeneratedProblems(self.difficulty, self.kinds)
        self.reset_options = self.problems.reset_options  # type: ignore[misc]  # the source's, per env
        self.max_attempts = max_attempts
        self.turn_discount = float(turn_discount)
        self.verifier = verifier
        self._problem = Problem("", "")

    @property
    def system_prompt(self) -> str:
        attempts = "" if self.max_attempts == 1 else f" You have {self.max_attempts} attempts."
        return (f"You are a careful mathematician. Solve the problem step by step, then give the final "
                f"answer as an exact number.{attempts} {_ANSWER_FORMAT}")

    def level(self) -> dict[str, str]:
        return self._problem.as_level()

    def solution(self) -> list[str]:
        """The reference answer, as the parser would return it."""
        return [self._problem.answer]

    # ------------------------------------------------------------------ TextEnv hooks
    def level_space(self) -> LevelSpace | None:
        """Generated problems: their difficulty and kinds; a dataset: its file; another source: none."""
        dataset_path = getattr(self, "dataset_path", None)
        if dataset_path is not None:
            return LevelSpace.of("llmgym.envs.math.dataset:MathDatasetEnv", {"dataset_path": str(dataset_path)})
        if not isinstance(self.problems, GeneratedProblems):
            return None
        return super().level_space()

    def _reset_task(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        info: dict[str, Any] = {}
        if "level" in options:
            self._problem = Problem.from_level(options["level"])
            info["level_id"] = "custom"
        else:
            self._problem, info = self.problems.draw(self.np_random, options)
        info.update(kind=self._problem.kind, difficulty=self._problem.difficulty, optimal_steps=1)
        return self._observe(), info

    def _apply(self, action: str) -> Outcome:
        verdict = (self.verifier or default_verifier()).verify(self._problem.answer, action)
        info = {"verification": verdict.source}
        if verdict.correct:
            reward = self.turn_discount**self._turn
            return Outcome(CORRECT, reward=reward, terminated=True, success=True, info=info)
        if self.max_attempts == 1:
            return Outcome("Your answer is wrong.", terminated=True, info=info)
        last = self._turn + 1 >= self.max_attempts
        return Outcome(WRONG_FINAL if last else WRONG_TRY_AGAIN, info=info)

    def _observe(self) -> str:
        return f"{self._problem.question}\n\n{_ANSWER_FORMAT}"

    # ------------------------------------------------------------------ snapshots
    def _task_state(self) -> Problem:
        return self._problem  # frozen

    def _restore_task(self, task: Problem) -> None:
        self._problem = task

    def _state_key(self) -> str:
        # The attempts used are the game state here: they set the reward and what is left.
        return f"attempt {self._turn + 1}: {text_digest(self._problem.question + chr(0) + self._problem.answer)}"


def _check_difficulty(difficulty: Any) -> Difficulty:
    if difficulty not in DIFFICULTIES:
        raise InvalidOptionError(
            f"difficulty must be one of {', '.join(DIFFICULTIES)}, got {difficulty!r}."
            f"{did_you_mean(str(difficulty), DIFFICULTIES)}"
        )
    return difficulty


def _check_kinds(kinds: tuple[ProblemKind, ...] | None) -> tuple[ProblemKind, ...]:
    if kinds is None:
        return PROBLEM_KINDS
    kinds = tuple(kinds)
    unknown = [kind for kind in kinds if kind not in PROBLEM_KINDS]
    if unknown or not kinds:
        raise InvalidOptionError(
            f"kinds must be a non-empty tuple of {', '.join(PROBLEM_KINDS)}; got {kinds!r}."
            f"{did_you_mean(str(unknown[0]), PROBLEM_KINDS) if unknown else ''}"
        )
    return kinds
