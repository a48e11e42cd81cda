"""Snapshots of the multi-agent games, for the versus envs' ``get_state``/``set_state``.

A game's state is the named attributes its ``reset`` and ``step`` write, deep-copied out and
deep-copied back in, so a snapshot never shares a mutable object with a running game. NumPy
arrays and generators are stored as plain values (bytes, the bit-generator state), so equal
states compare equal and pickle small.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from llmgym.core import restore_rng, rng_state
from llmgym.error import SnapshotNotSupported


class _Array(NamedTuple):
    data: bytes
    dtype: str
    shape: tuple[int, ...]


class _Rng(NamedTuple):
    state: dict[str, Any]


def game_state(game: Any, fields: Sequence[str]) -> dict[str, Any]:
    """The attributes ``fields`` of ``game`` as an immutable-by-copy value (a missing one is ``None``)."""
    return {name: _freeze(getattr(game, name, None)) for name in fields}


def restore_game(game: Any, state: dict[str, Any]) -> None:
    """Put the attributes of a :func:`game_state` back on ``game``, as fresh objects."""
    for name, value in state.items():
        setattr(game, name, _thaw(value, getattr(game, name, None)))


def _freeze(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return _Array(value.tobytes(), value.dtype.str, value.shape)
    if isinstance(value, np.random.Generator):
        return _Rng(rng_state(value))
    return copy.deepcopy(value)


def _thaw(value: Any, current: Any) -> Any:
    if isinstance(value, _Array):
        return np.frombuffer(value.data, dtype=value.dtype).reshape(value.shape).copy()
    if isinstance(value, _Rng):
        return restore_rng(value.state, current if isinstance(current, np.random.Generator) else None)
    return copy.deepcopy(value)


def require_stateless(opponent: Any, built_in: bool, env_name: str) -> None:
    """Raise :class:`SnapshotNotSupported` unless ``opponent`` keeps no state a snapshot would miss.

    The built-in opponents draw only from the RNG the env hands them (which the snapshot
    holds); a callable the user passed may remember anything, unless it says it does not
    with a true ``stateless`` attribute.
    """
    if built_in or getattr(opponent, "stateless", False) is True:
        return
    raise SnapshotNotSupported(
        f"{env_name} cannot snapshot its state: its opponent {opponent!r} is a custom callable, which may keep "
        "state between moves that no snapshot holds. Use a built-in opponent, or set "
        "`stateless = True` on the callable if it draws only from the rng it is given."
    )
