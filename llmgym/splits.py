"""Train and test levels: eval levels are never drawn for training, compared by content.

An id's frozen eval set (:mod:`llmgym.eval_sets`) is its test set. Level spaces are often small
(a 4x4 lake has a few thousand maps; a 3x3 lake 51), so different seeds give the same level,
and a seed-disjoint split would still train on test levels. Under ``split="train"`` (every
env's default) a level drawn from a seed is compared with the held-out levels by
:func:`level_key` (the level as the eval set stores it: rows, XSB text, the problem) and drawn
again from the env's ``np_random`` while it is one of them: a seed still gives one level in any
process, and no seed gives a test level. Eval levels are played on purpose only, through
``reset(options={"level": ...})`` (the eval planner, the leaderboard).

Which levels are held out depends on the env's *level space*, the constructor options that
decide what a seed yields (:meth:`llmgym.core.TextEnv.level_space`):

* a space with a frozen eval set (a registered id's own options): that set, 200 distinct levels;
* any other space (``size=3`` lakes, a curriculum's short rooms, a dataset of your own): its
  first ``held_out_levels`` distinct levels from the eval seeds ``EVAL_SEED_BASE + i`` (none by
  default), which is what the trainer's evaluation plays on such a space
  (``eval.use_eval_set=false``); the trainer sets ``held_out_levels`` on the training envs of a
  space it evaluates on (:func:`llmgym_train.planner.hold_out_evaluated_levels`).

``split="all"`` turns the split off (the seed-to-level map of eval-set version 1) and warns.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from gymnasium.envs.registration import load_env_creator

from llmgym.error import InvalidOptionError

if TYPE_CHECKING:
    from llmgym.core import TextEnv

Split = Literal["train", "all"]
SPLITS: tuple[str, ...] = ("train", "all")
#: A space without a frozen eval set gives up after this many eval seeds per distinct level asked for.
SEEDS_PER_LEVEL = 50
#: ``reset`` draws again at most this many times before it calls the training space exhausted.
MAX_REDRAWS = 10_000


def level_key(level: Any) -> str:
    """The canonical key of a level as an eval set stores it (``env.level()``): equal levels, equal keys."""
    return json.dumps(level, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class LevelSpace:
    """What decides the levels a seed yields: an entry point and the options that change levels.

    Attributes:
        entry_point: ``"module:Class"`` (or a factory) that builds an env of this space.
        options: the level-deciding constructor options, sorted by name (hashable).
    """

    entry_point: str
    options: tuple[tuple[str, Any], ...]

    @classmethod
    def of(cls, entry_point: str, options: dict[str, Any]) -> LevelSpace:
        return cls(entry_point, tuple(sorted((name, _hashable(value)) for name, value in options.items())))

    def make(self) -> TextEnv:
        """A fresh env of this space with the split off (it draws what seeds give).

        The split is switched off on the made env rather than through its constructor, so an
        env class of your own need not take ``split``.
        """
        return make_unsplit(load_env_creator(self.entry_point), **dict(self.options))

    def __str__(self) -> str:
        options = ", ".join(f"{name}={value!r}" for name, value in self.options)
        return f"{self.entry_point}({options})"


def make_unsplit(make: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``make(*args, **kwargs)`` with the split switched off on the made env: for code that builds eval levels.

    Switched on the instance rather than through ``split="all"``, so it does not warn (nothing
    trains on it) and an env class of your own need not take ``split``.
    """
    env = make(*args, **kwargs)
    env.unwrapped.split = "all"
    return env


def _hashable(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_hashable(item) for item in value)
    return value


def distinct_levels(env: TextEnv, count: int, max_seeds: int | None = None) -> Iterator[dict[str, Any]]:
    """The first ``count`` distinct levels that the eval seeds give ``env``, as eval-set records.

    Each record: ``{"index": i, "seed": s, "level": ..., "optimal_steps": n | None}``; a seed
    whose level repeats an earlier one is skipped. Stops early after ``max_seeds`` seeds.
    """
    from llmgym.eval_sets import EVAL_SEED_BASE

    seen: set[str] = set()
    for offset in range(count * SEEDS_PER_LEVEL if max_seeds is None else max_seeds):
        if len(seen) >= count:
            return
        seed = EVAL_SEED_BASE + offset
        _, info = env.reset(seed=seed)
        level = env.level()
        key = level_key(level)
        if key in seen:
            continue
        seen.add(key)
        optimal_steps = info.get("optimal_steps")
        if optimal_steps is None and "optimal_steps" in info:
            plan = env.solution()
            optimal_steps = None if plan is None else len(plan)
        yield {"index": len(seen) - 1, "seed": seed, "level": level, "optimal_steps": optimal_steps}


def frozen_eval_id(space: LevelSpace) -> str | None:
    """The registered id whose frozen eval set covers ``space`` (its own level options), if any."""
    return _frozen_spaces(space.entry_point).get(space)


@functools.cache
def _frozen_spaces(entry_point: str) -> dict[LevelSpace, str]:
    """The level spaces of the registered ids with an eval set that ``entry_point`` builds."""
    import gymnasium as gym

    from llmgym.eval_sets import has_eval_set
    from llmgym.registration import ENTRIES

    spaces: dict[LevelSpace, str] = {}
    for entry in ENTRIES:
        if entry.entry_point != entry_point or not has_eval_set(entry.id):
            continue
        env = make_unsplit(gym.make, entry.id).unwrapped
        space = env.level_space()
        env.close()
        if space is not None:
            spaces.setdefault(space, entry.id)  # ids sharing a space (FrozenLake-v0 and -v1) share levels
    return spaces


@functools.lru_cache(maxsize=64)
def held_out_keys(space: LevelSpace, count: int | None) -> frozenset[str]:
    """Keys of the eval levels of ``space``: its frozen eval set, else its first ``count`` distinct eval-seed levels.

    Raises:
        InvalidOptionError: the space holds fewer than ``count`` distinct levels within
            ``count * SEEDS_PER_LEVEL`` eval seeds (holding them all out would leave nothing
            to train on); the message gives the fixes.
    """
    from llmgym.eval_sets import load_eval_set

    env_id = frozen_eval_id(space)
    if env_id is not None:
        return frozenset(level_key(record["level"]) for record in load_eval_set(env_id))
    if not count:
        return frozenset()
    env = space.make()
    try:
        keys = frozenset(level_key(record["level"]) for record in distinct_levels(env, count))
    finally:
        env.close()
    if len(keys) < count:
        raise InvalidOptionError(
            f"The level space {space} gave only {len(keys)} distinct levels in {count * SEEDS_PER_LEVEL} eval "
            f"seeds, and held_out_levels={count} asks to hold out {count}: training would be left with few "
            f"or no levels. Hold out fewer (held_out_levels=k, the number of levels you evaluate on, "
            f"at most about half of the space), or split='all' to turn the split off."
        )
    return keys


def check_split(split: str, held_out_levels: int | None) -> None:
    if split not in SPLITS:
        raise InvalidOptionError(f"split must be one of {', '.join(map(repr, SPLITS))}, got {split!r}.")
    if held_out_levels is not None and (not isinstance(held_out_levels, int) or held_out_levels < 0):
        raise InvalidOptionError(f"held_out_levels must be None or an integer >= 0, got {held_out_levels!r}.")


__all__ = [
    "MAX_REDRAWS", "SEEDS_PER_LEVEL", "SPLITS", "LevelSpace", "Split", "check_split", "distinct_levels",
    "frozen_eval_id", "held_out_keys", "level_key", "make_unsplit",
]
