"""A ``Text`` space whose batches Gymnasium's ``AsyncVectorEnv`` can share through memory.

Gymnasium 1.4 writes a ``Text`` observation into shared memory as character indices, but its
reader decodes the buffer into a tuple of strings once, when the vector env is built, and
returns that same tuple after every step: with ``shared_memory=True`` (``make_vec``'s default
for ``"async"``) every observation stays the initial blank string. :class:`SharedText` is a
``Text`` that differs only there: its reader returns :class:`LiveTexts`, a view that decodes
the buffer when read. ``AsyncVectorEnv`` hands out ``deepcopy(view)``, which is a plain tuple
of the current strings (with ``copy=False`` it hands out the view itself). Everything else
(sampling, ``contains``, equality with ``Text``, batching, flattening) is ``Text``'s.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import read_from_shared_memory


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
