"""The text spaces of every llmgym env: one charset, bounded lengths, shared-memory batches.

:func:`text_space` is the observation and action space of every env: a
:class:`gymnasium.spaces.Text` over :data:`CHARSET` (printable ASCII plus newline and tab),
and :func:`to_charset` keeps an observation inside it.

The space is a :class:`SharedText`, because Gymnasium 1.4 writes a ``Text`` observation into shared memory as character indices, but its
reader decodes the buffer into a tuple of strings once, when the vector env is built, and
returns that same tuple after every step: with ``shared_memory=True`` (``make_vec``'s default
for ``"async"``) every observation stays the initial blank string. :class:`SharedText` is a
``Text`` that differs only there: its reader returns :class:`LiveTexts`, a view that decodes
the buffer when read. ``AsyncVectorEnv`` hands out ``deepcopy(view)``, which is a plain tuple
of the current strings (with ``copy=False`` it hands out the view itself). Everything else
(sampling, ``contains``, equality with ``Text``, batching, flattening) is ``Text``'s.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import read_from_shared_memory

#: Every printable ASCII character plus newline and tab: the charset of all llmgym Text spaces.
CHARSET = "".join(chr(code) for code in range(32, 127)) + "\n\t"
#: Upper bound on an observation's length; longer text is cut (and marked) by the core.
MAX_OBSERVATION_LENGTH = 8192
#: Upper bound on an action in the action space. Longer actions are still accepted (parsed
#: like any other), they are only outside what ``action_space.sample()`` draws.
MAX_ACTION_LENGTH = 8192

_OUTSIDE_CHARSET = re.compile(r"[^\x20-\x7e\n\t]")
_TRUNCATION_MARK = "\n[...truncated]"


def to_charset(text: str, max_length: int = MAX_OBSERVATION_LENGTH) -> str:
    """``text`` with characters outside :data:`CHARSET` replaced by ``?`` and cut to ``max_length``."""
    if _OUTSIDE_CHARSET.search(text) is not None:
        text = _OUTSIDE_CHARSET.sub("?", text)
    if len(text) > max_length:
        text = text[: max_length - len(_TRUNCATION_MARK)] + _TRUNCATION_MARK
    return text


class SharedText(spaces.Text):
    """:class:`gymnasium.spaces.Text` whose shared-memory batches are read live (see module)."""


class LiveTexts(Sequence[str]):
    """The ``n`` strings in a shared-memory buffer of character indices, decoded on access."""

    def __init__(self, space: spaces.Text, shared_memory: Any, n: int) -> None:
        self._rows = np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape(n, space.max_length)
        # Index -> code point, with the padding index (len(charset)) last.
        self._code_points = np.array([ord(char) for char in space.character_list] + [0], dtype=np.uint32)
        self._padding = len(space.character_list)

    def _decode(self, row: np.ndarray) -> str:
        ends = np.flatnonzero(row >= self._padding)
        length = int(ends[0]) if ends.size else row.size
        return self._code_points[row[:length]].tobytes().decode("utf-32-le")

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...
    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        if isinstance(index, slice):
            return tuple(self._decode(row) for row in self._rows[index])
        return self._decode(self._rows[index])

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[str]:
        return (self._decode(row) for row in self._rows)

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __repr__(self) -> str:
        return f"LiveTexts({tuple(self)!r})"


@read_from_shared_memory.register(SharedText)
def _read_shared_text(space: SharedText, shared_memory: Any, n: int = 1) -> Sequence[str]:
    return LiveTexts(space, shared_memory, n)


def text_space(max_length: int) -> spaces.Text:
    """A :class:`gymnasium.spaces.Text` over :data:`CHARSET` with lengths ``0..max_length``.

    A :class:`SharedText`, so its batches in ``AsyncVectorEnv``'s shared memory are read live.
    """
    return SharedText(max_length=max_length, min_length=0, charset=CHARSET)
