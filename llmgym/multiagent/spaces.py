"""The action space of llmgym's multi-agent games: completions, sampled as named moves."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from llmgym.spaces import CHARSET, MAX_ACTION_LENGTH


class MoveText(spaces.Text):
    """A :class:`~gymnasium.spaces.Text` space of raw completions whose samples name a move.

    The space holds every string over llmgym's charset, like every llmgym action space. Only
    sampling differs: ``sample()`` returns a completion naming a uniformly random move
    (``"<answer>5</answer>"``), and ``sample(mask)`` with a 1-D legal-move mask (PettingZoo's
    ``action_mask`` convention) a random *legal* one. Random agents, including PettingZoo's
    ``api_test`` and ``seed_test``, therefore play real games instead of only invalid text.
    Text's own ``(length, charset_mask)`` tuple mask still samples raw text.
    """

    def __init__(
        self,
        move_names: Sequence[str],
        *,
        answer_format: str = "<answer>{}</answer>",
        max_length: int = MAX_ACTION_LENGTH,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        super().__init__(max_length=max_length, min_length=0, charset=CHARSET, seed=seed)
        self.move_names = tuple(move_names)
        self.answer_format = answer_format

    def sample(self, mask: Any = None, probability: Any = None) -> str:  # type: ignore[override]
        if isinstance(mask, np.ndarray) and mask.shape == (len(self.move_names),):
            legal = np.flatnonzero(mask)
            choices = legal if len(legal) else np.arange(len(self.move_names))
            return self.answer_format.format(self.move_names[int(self.np_random.choice(choices))])
        if mask is None and probability is None:
            move = int(self.np_random.integers(len(self.move_names)))
            return self.answer_format.format(self.move_names[move])
        return super().sample(mask=mask, probability=probability)

    def __repr__(self) -> str:
        return f"MoveText(moves={list(self.move_names)}, max_length={self.max_length})"
