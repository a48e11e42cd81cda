"""Which levels an evaluation plays: the frozen eval sets, or the eval seeds where there is none."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from llmgym.eval_sets import EVAL_SEED_BASE, has_eval_set, load_eval_set

if TYPE_CHECKING:
    from llmgym_train.config import EnvSpec
    from llmgym_train.episode import EpisodeStart


def eval_levels(env_id: str, count: int, use_eval_set: bool = True) -> list[tuple[int, dict[str, Any] | None]]:
    """``(seed, reset options)`` of the first ``count`` frozen eval levels of ``env_id``.

    An env without a frozen eval set (a user's own env), or one whose options change its
    levels (``use_eval_set=False``), is evaluated on the eval seeds ``EVAL_SEED_BASE + i``.
    """
    if not use_eval_set or not has_eval_set(env_id):
        return [(EVAL_SEED_BASE + index, None) for index in range(count)]
    return [(int(record["seed"]), {"level": record["level"]}) for record in load_eval_set(env_id)[:count]]


def eval_starts(
    envs: Sequence[EnvSpec], levels: int, use_eval_set: bool = True, samples: int = 1
) -> tuple[list[EpisodeStart], list[str]]:
    """The episodes of a policy evaluation and their metric labels: the first ``levels`` eval levels of each env.

    Each level is played ``samples`` times in a row (the leaderboard's ``--samples``; the
    trainer plays each once), as one group: an evaluation compares nothing within a group.
    Episodes play their level through reset options where the env has a frozen eval set (see
    :func:`eval_levels`).
    """
    from llmgym_train.episode import EpisodeStart  # the trainer's side: torch is loaded by then

    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}.")
    starts: list[EpisodeStart] = []
    labels: list[str] = []
    group = 0
    for spec in envs:
        for seed, options in eval_levels(spec.id, levels, use_eval_set):
            for _ in range(samples):
                starts.append(EpisodeStart(len(starts), spec.id, seed, group, dict(spec.options), options))
                labels.append(spec.label)
            group += 1
    return starts, labels
