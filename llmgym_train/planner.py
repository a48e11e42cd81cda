"""The episode planner: which episodes a rollout plays (env, options, level seed, group), in one place.

Training, the trainer's evaluations and the benchmarks all plan here:

* :func:`plan_groups`: each env of a mixture gets ``n_groups`` groups of ``group_size``
  episodes; a group's members share one level seed (GRPO's groups). Level seeds come from
  :func:`step_seeds` ``(run seed, step, env's position in the mixture)``, so a run resumed at
  step ``k``, or run again with the same seed, plays the same levels at every step.
* :func:`plan_eval`: the first ``levels`` frozen eval levels of each env (:func:`eval_levels`),
  each episode its own group.
* :func:`eval_set_levels`: those levels with what the eval set says of them (position, optimal
  steps, difficulty): what the leaderboard's agents play, whether or not they are LLMs.
* :func:`eval_levels_trained_on`: how many of a run's eval levels its training draws held,
  compared by content (0 under the train/test split, :mod:`llmgym.splits`).
* :func:`sampling_seed`, :func:`update_seed` and :func:`draws_seed`: the step's other seeds, from
  streams of the same :func:`step_seeds` that no mixture reaches (:data:`SAMPLING_STREAM`,
  :data:`UPDATE_STREAM`, :data:`DRAWS_STREAM`).

The rollout plays a plan on llmgym's vector env with these seeds given per sub-env
(``areset(seed=[...])``). The vector env's own ``options={"group_size": g}`` (seeds ``s + k``
for group ``k``) serves users of the vector env alone; a plan does not use it.

Importing this module loads no torch: ``llmgym-bench`` reads its eval levels without it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from llmgym.error import InvalidOptionError, did_you_mean
from llmgym.eval_sets import has_eval_set, load_eval_set
from llmgym.splits import distinct_levels, level_key

if TYPE_CHECKING:
    from llmgym_train.episode import EpisodeStart

#: :func:`step_seeds` stream of the step's sampling seed (mixture positions stay far below it).
SAMPLING_STREAM = 10_000
#: :func:`step_seeds` stream of the step's minibatch order.
UPDATE_STREAM = 20_000
#: :func:`step_seeds` stream of the step's extra lookahead draws (``loss.lookahead_draws``).
DRAWS_STREAM = 30_000


def check_env_id(env_id: str) -> None:
    """Raise :class:`InvalidOptionError` unless ``env_id`` is in Gymnasium's registry (after ``import llmgym``).

    ``module:Env-v0`` (Gymnasium's form for an env registered on import of its module) imports
    the module first. The suggestion prefers llmgym's ids, so ``FrozenLake-v0`` points to
    ``llmgym/FrozenLake-v0`` rather than Gymnasium's own non-text FrozenLake.
    """
    import importlib

    import gymnasium as gym

    import llmgym

    module, sep, name = env_id.rpartition(":")
    if sep:
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise InvalidOptionError(
                f"Env id {env_id!r} names the module {module!r}, which does not import ({error}); "
                "fix the module path or register the env before loading the config."
            ) from None
    if name in gym.registry:
        return
    ours = llmgym.env_ids()
    hint = f" Did you mean 'llmgym/{name}'?" if f"llmgym/{name}" in gym.registry else did_you_mean(name, ours)
    raise InvalidOptionError(
        f"Unknown env id {env_id!r}.{hint or did_you_mean(name, gym.registry)} llmgym's ids: {', '.join(ours)}. "
        "An env of your own must be registered (gymnasium.register) before the config is loaded, "
        "or be given as 'module:Env-v0'."
    )


@dataclass
class EnvSpec:
    """One entry of an env mixture: an llmgym id, its constructor options and its share of groups."""

    #: A registered Gymnasium id, e.g. ``llmgym/FrozenLake-v0``.
    id: str
    #: Groups of this env per training step (each group plays one level ``group_size`` times).
    n_groups: int = 1
    #: Keyword arguments for ``gymnasium.make`` (e.g. ``{max_turns: 3}``); unknown ones fail at make.
    options: dict[str, Any] = field(default_factory=dict)
    #: What metrics call this entry (``success_rate/NAME``); empty: the id. Entries that share
    #: an id with different options need distinct names.
    name: str = ""

    @property
    def label(self) -> str:
        return self.name or self.id

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise InvalidOptionError(f"env id must be a non-empty string such as 'llmgym/FrozenLake-v0'; got {self.id!r}.")
        check_env_id(self.id)
        if self.n_groups < 1:
            raise InvalidOptionError(f"n_groups of {self.id!r} must be >= 1; got {self.n_groups}.")

    @classmethod
    def parse(cls, text: str) -> EnvSpec:
        """``"ID"`` or ``"ID:N_GROUPS"`` (the CLI's ``--env`` form)."""
        env_id, sep, count = text.rpartition(":")
        if not sep:
            return cls(id=text)
        try:
            n_groups = int(count)
        except ValueError:
            raise InvalidOptionError(
                f"--env takes ID or ID:N_GROUPS (e.g. llmgym/FrozenLake-v0:8); got {text!r}: "
                f"{count!r} is not an integer."
            ) from None
        return cls(id=env_id, n_groups=n_groups)


@dataclass
class EpisodePlan:
    """The episodes of a rollout, in order, and the metric label of each."""

    starts: list[EpisodeStart]
    labels: list[str]


def step_seeds(seed: int, step: int, stream: int, count: int) -> np.ndarray:
    """``count`` seeds for (run seed, step, stream): the same in every process and after a resume."""
    return np.random.SeedSequence([seed, step, stream]).generate_state(count, dtype=np.uint64) % (2**63 - 1)


def sampling_seed(seed: int, step: int) -> int:
    """The seed a step's sampling requests derive theirs from (``AgentConfig.sampling_seed``)."""
    return int(step_seeds(seed, step, SAMPLING_STREAM, count=1)[0] % (2**31 - 1))


def update_seed(seed: int, step: int) -> int:
    """The seed of a step's minibatch order (a ``torch.Generator`` seed)."""
    return int(step_seeds(seed, step, UPDATE_STREAM, count=1)[0] % 2**62)


def draws_seed(seed: int, step: int) -> int:
    """The seed of a step's extra lookahead draws (:func:`llmgym_train.data.choice_samples`)."""
    return int(step_seeds(seed, step, DRAWS_STREAM, count=1)[0])


def plan_groups(envs: Sequence[EnvSpec], group_size: int, seed: int, step: int = 0) -> EpisodePlan:
    """``sum(n_groups) x group_size`` episodes; a group's members share one level seed.

    Groups are numbered across the mixture in order; the ``k``-th env's level seeds are
    ``step_seeds(seed, step, k, n_groups)``. The trainer plans step ``s`` of a run with
    ``seed=config.seed, step=s``.
    """
    from llmgym_train.episode import EpisodeStart

    if group_size < 1:
        raise InvalidOptionError(f"group_size must be >= 1, got {group_size}.")
    if len(envs) >= SAMPLING_STREAM:
        raise InvalidOptionError(f"A mixture of {len(envs)} envs would share seeds with sampling; use fewer than {SAMPLING_STREAM}.")
    starts: list[EpisodeStart] = []
    labels: list[str] = []
    group = 0
    for env_index, spec in enumerate(envs):
        for level_seed in step_seeds(seed, step, env_index, count=spec.n_groups):
            for _ in range(group_size):
                starts.append(EpisodeStart(len(starts), spec.id, int(level_seed), group, dict(spec.options)))
                labels.append(spec.label)
            group += 1
    return EpisodePlan(starts, labels)


def group_episodes(envs: Sequence[EnvSpec], group_size: int, seed: int, step: int = 0) -> list[EpisodeStart]:
    """The episodes of :func:`plan_groups`, without their labels."""
    return plan_groups(envs, group_size, seed, step).starts


@dataclass(frozen=True)
class EvalLevel:
    """One evaluation level: where it sits in its eval set, how to reset to it, what the set says of it.

    Attributes:
        index: the level's position in the env's frozen eval set (its id in results files).
        seed: the level's seed (the eval set's; ``EVAL_SEED_BASE + index`` without one).
        options: the reset options that play it (``{"level": ...}``); ``None``: the seed alone does.
        optimal_steps: the fewest steps that solve it, where the eval set knows them.
        difficulty: the eval record's difficulty (its own, else its level's), where it has one.
    """

    index: int
    seed: int
    options: dict[str, Any] | None = None
    optimal_steps: int | None = None
    difficulty: str | None = None

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> EvalLevel:
        """The level of one eval-set line (:func:`llmgym.eval_sets.load_eval_set`)."""
        level = record["level"]
        difficulty = record.get("difficulty", level.get("difficulty") if isinstance(level, dict) else None)
        return cls(int(record["index"]), int(record["seed"]), {"level": level}, record.get("optimal_steps"),
                   None if difficulty is None else str(difficulty))


def eval_set_levels(
    env_id: str, count: int | None = None, use_eval_set: bool = True, options: dict[str, Any] | None = None
) -> list[EvalLevel]:
    """The first ``count`` eval levels of ``env_id`` (``None``: the whole eval set), in the set's order.

    An env without a frozen eval set (a user's own env), or one whose options change its
    levels (``use_eval_set=False``), is evaluated on the first ``count`` distinct levels that the
    eval seeds ``EVAL_SEED_BASE + i`` give it under ``options``: the levels that ``split="train"``
    holds out of its training draws (with ``held_out_levels >= count``). An env that cannot
    name its levels (no ``level()``) plays the eval seeds themselves.
    """
    if not use_eval_set or not has_eval_set(env_id):
        if count is None:
            raise InvalidOptionError(
                f"{env_id} is evaluated on seeds, not on a frozen eval set; say how many levels (count=...)."
            )
        return _seed_levels(env_id, count, options or {})
    records = load_eval_set(env_id)
    return [EvalLevel.from_record(record) for record in (records if count is None else records[:count])]


def _seed_levels(env_id: str, count: int, options: dict[str, Any]) -> list[EvalLevel]:
    import gymnasium as gym

    from llmgym.core import TextEnv
    from llmgym.eval_sets import EVAL_SEED_BASE

    env = gym.make(env_id, **options).unwrapped
    try:
        if not isinstance(env, TextEnv) or type(env).level is TextEnv.level:
            return [EvalLevel(index, EVAL_SEED_BASE + index) for index in range(count)]
        env.split = "all"  # the eval levels themselves: what the seeds give, held-out or not
        records = list(distinct_levels(env, count))
    finally:
        env.close()
    if len(records) < count:
        raise InvalidOptionError(
            f"{env_id} with options {options} gave only {len(records)} distinct levels from its eval seeds; "
            f"evaluate on at most {len(records)} (eval.levels)."
        )
    return [EvalLevel.from_record(record) for record in records]


def eval_levels(
    env_id: str, count: int, use_eval_set: bool = True, options: dict[str, Any] | None = None
) -> list[tuple[int, dict[str, Any] | None]]:
    """``(seed, reset options)`` of the first ``count`` eval levels of ``env_id`` (:func:`eval_set_levels`)."""
    return [(level.seed, level.options) for level in eval_set_levels(env_id, count, use_eval_set, options)]


def plan_eval(envs: Sequence[EnvSpec], levels: int, use_eval_set: bool = True, samples: int = 1) -> EpisodePlan:
    """The episodes of a policy evaluation: the first ``levels`` eval levels of each env.

    Each level is played ``samples`` times in a row (the leaderboard's ``--samples``; the
    trainer plays each once), as one group: an evaluation compares nothing within a group.
    Episodes play their level through reset options where the env has a frozen eval set (see
    :func:`eval_set_levels`).
    """
    from llmgym_train.episode import EpisodeStart

    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}.")
    starts: list[EpisodeStart] = []
    labels: list[str] = []
    group = 0
    for spec in envs:
        for level in eval_set_levels(spec.id, levels, use_eval_set, spec.options):
            for _ in range(samples):
                start = EpisodeStart(len(starts), spec.id, level.seed, group, dict(spec.options), level.options)
                starts.append(start)
                labels.append(spec.label)
            group += 1
    return EpisodePlan(starts, labels)


def eval_levels_trained_on(
    train_envs: Sequence[EnvSpec], group_size: int, seed: int, steps: int,
    eval_envs: Sequence[EnvSpec], levels: int, use_eval_set: bool = True,
) -> dict[str, int]:
    """How many of each eval env's first ``levels`` eval levels the first ``steps`` training steps drew.

    Re-plays the run's own draws (:func:`plan_groups` at every step; one reset per group, as
    the group's members share the level) and compares levels by content
    (:func:`llmgym.splits.level_key` of what each env draws, Sokoban's room for
    ``start="solution"``). Under the split every count is 0. Keys: the eval envs' labels.
    """
    drawn = drawn_level_keys(train_envs, seed, steps)
    counts = {}
    for spec in eval_envs:
        keys = {level_key(level.options["level"]) for level in eval_set_levels(spec.id, levels, use_eval_set,
                                                                                 spec.options) if level.options}
        counts[spec.label] = len(keys & drawn)
    return counts


def hold_out_evaluated_levels(
    train_envs: Sequence[EnvSpec], eval_envs: Sequence[EnvSpec], levels: int, use_eval_set: bool = True
) -> None:
    """Hold the evaluated eval-seed levels out of the training envs that share their level space.

    An env evaluated on eval-seed levels (no frozen eval set, or ``use_eval_set=False``) plays
    the first ``levels`` distinct levels of its space (:func:`eval_set_levels`); a training env
    of the same space (say, 3x3 lakes trained and evaluated) gets ``held_out_levels=levels`` in
    its options, unless its options already say (``held_out_levels`` or ``split``). Frozen eval
    sets need nothing: every env holds its space's set out. Changes ``train_envs`` in place.
    """
    evaluated = {
        space: levels for spec in eval_envs
        if not (use_eval_set and has_eval_set(spec.id)) and (space := _level_space(spec)) is not None
    }
    for spec in train_envs:
        if "held_out_levels" in spec.options or "split" in spec.options:
            continue
        space = _level_space(spec)
        if space in evaluated:
            spec.options["held_out_levels"] = evaluated[space]


def teacher_of(train_envs: Sequence[EnvSpec]) -> str | None:
    """Who besides the tasks shaped a run's rewards: its training envs' :meth:`llmgym.core.TextEnv.teacher`
    (``"solver"`` for Sokoban's ``progress_reward``), joined with ``+``; None for the envs' own rewards."""
    teachers: set[str] = set()
    for spec in train_envs:
        with _text_env(spec) as env:
            if env is not None and (teacher := env.teacher()) is not None:
                teachers.update(teacher.split("+"))
    return "+".join(sorted(teachers)) or None


def curriculum_of(train_envs: Sequence[EnvSpec], eval_envs: Sequence[EnvSpec] = ()) -> str | None:
    """What picked a run's training levels or starts, by entry name, joined with ``" | "``; None when
    every training env plays the levels its id's evaluation does, from where they start.

    Per entry: its level options that differ from those of the eval env of the same id
    (``"lake-2x2: size=2"``), and :meth:`llmgym.core.TextEnv.curriculum` (``"near: starts on ..."``).
    """
    parts = []
    for spec in train_envs:
        evaluated = next((entry for entry in eval_envs if entry.id == spec.id), None)
        space = None if evaluated is None else _level_space(evaluated)
        with _text_env(spec) as env:
            if env is None:
                continue
            own = env.level_space()
            names = [] if space is None or own is None else sorted(set(own.options) - set(space.options))
            words = [", ".join(f"{name}={value!r}" for name, value in names)] if names else []
            if (curriculum := env.curriculum()) is not None:
                words.append(curriculum)
        if words:
            parts.append(f"{spec.label}: {'; '.join(words)}")
    return " | ".join(parts) or None


def _level_space(spec: EnvSpec) -> Any:
    with _text_env(spec) as env:
        return None if env is None else env.level_space()


@contextlib.contextmanager
def _text_env(spec: EnvSpec) -> Iterator[Any]:
    """``spec``'s env, unwrapped, if it is a :class:`llmgym.core.TextEnv` (else None); closed on exit."""
    import gymnasium as gym

    from llmgym.core import TextEnv

    env = gym.make(spec.id, **spec.options).unwrapped
    try:
        yield env if isinstance(env, TextEnv) else None
    finally:
        env.close()


def drawn_level_keys(train_envs: Sequence[EnvSpec], seed: int, steps: int) -> set[str]:
    """The content keys of every level the first ``steps`` training steps of a run drew (see :func:`plan_groups`)."""
    import gymnasium as gym

    from llmgym.core import TextEnv

    drawn: set[str] = set()
    envs = {index: gym.make(spec.id, **spec.options).unwrapped for index, spec in enumerate(train_envs)}
    labels = {spec.label: index for index, spec in enumerate(train_envs)}
    try:
        for step in range(steps):
            plan = plan_groups(train_envs, 1, seed, step)
            for start, label in zip(plan.starts, plan.labels, strict=True):
                env = envs[labels[label]]
                if isinstance(env, TextEnv) and type(env).level is not TextEnv.level:
                    env.reset(seed=start.seed, options=start.reset_options)
                    drawn.add(env.split_key())
    finally:
        for env in envs.values():
            env.close()
    return drawn


__all__ = [
    "SAMPLING_STREAM", "UPDATE_STREAM", "DRAWS_STREAM", "EnvSpec", "EpisodePlan", "EvalLevel", "drawn_level_keys",
    "eval_levels", "eval_levels_trained_on", "hold_out_evaluated_levels", "eval_set_levels", "group_episodes",
    "plan_eval", "plan_groups", "sampling_seed", "step_seeds", "update_seed", "draws_seed",
]
