"""The wire format of ``llmgym-serve``: OpenEnv's WebSocket messages, with Gymnasium's step result.

Pure functions and constants, shared by the server (:mod:`llmgym.integrations.serve`) and the
client (:mod:`llmgym.integrations.remote`); no third-party import.

A client sends one JSON object per text frame: ``{"type": "reset" | "step" | "state" | "close",
"data": {...}}``. The server answers each one (``close`` excepted) with one frame:

* ``{"type": "observation", "data": {"observation": {"text", "terminated", "truncated", "info"},
  "reward", "done"}}`` after ``reset`` (``reward`` is ``None``) and ``step``;
* ``{"type": "state", "data": {...}}`` after ``state``;
* ``{"type": "error", "data": {"message", "code"}}`` when the request cannot be served.

This is OpenEnv's envelope (its ``GenericEnvClient`` reads ``observation``, ``reward`` and
``done``); Gymnasium's ``terminated`` and ``truncated`` travel apart inside the observation,
beside the step's ``info`` made JSON-safe by :func:`json_safe`.

Batched (``WS /ws/batch?num_envs=N``, llmgym's own; one connection holds ``N`` envs, indexed
``0 .. N-1``): a ``batch`` message is a list of the messages above, each with the index of the
env it goes to, and its answer is the list of their answers, in the same order::

    {"type": "batch", "data": {"items": [
        {"index": 0, "type": "reset", "data": {"seed": 3}},
        {"index": 1, "type": "step", "data": {"text": "<answer>Up</answer>"}}]}}
    -> {"type": "batch", "data": {"items": [
        {"index": 0, "type": "observation", "data": {...}},
        {"index": 1, "type": "error", "data": {"message": ..., "code": "RESET_NEEDED"}}]}}

An item's type is ``reset``, ``step`` or ``state``; each env keeps a ``/ws`` session's rules, and a
request one env cannot serve (or an item naming no env of the connection: ``UNKNOWN_INDEX``) gets
an ``error`` item while the others are served. ``{"type": "state"}`` answers with the envs' id,
``env_kwargs`` and each env's state; ``{"type": "close"}`` ends the connection.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

#: Keys a ``reset`` message's data may hold (``episode_id`` is OpenEnv's; it is echoed in ``state``).
RESET_KEYS = frozenset({"seed", "options", "episode_id"})
#: Keys a ``step`` message's data may hold (``metadata`` is OpenEnv's ``Action`` field; it is ignored).
STEP_KEYS = frozenset({"text", "metadata"})
#: Keys of one item of a ``batch`` message, and the request types an item may carry.
BATCH_ITEM_KEYS = frozenset({"index", "type", "data"})
BATCH_ITEM_TYPES = ("reset", "step", "state")

ACTION_SCHEMA: dict[str, Any] = {
    "title": "TextAction",
    "type": "object",
    "properties": {
        "text": {"type": "string", "description": "The model's completion, played as one env step."},
        "metadata": {"type": "object", "description": "Ignored (OpenEnv's Action field)."},
    },
    "required": ["text"],
}
OBSERVATION_SCHEMA: dict[str, Any] = {
    "title": "TextObservation",
    "type": "object",
    "properties": {
        "text": {"type": "string", "description": "The next user turn."},
        "terminated": {"type": "boolean", "description": "Gymnasium's terminated: the task ended."},
        "truncated": {"type": "boolean", "description": "Gymnasium's truncated: a limit cut the episode."},
        "info": {"type": "object", "description": "The step's info dict, JSON-safe."},
    },
    "required": ["text", "terminated", "truncated", "info"],
}
STATE_SCHEMA: dict[str, Any] = {
    "title": "SessionState",
    "type": "object",
    "properties": {
        "episode_id": {"type": ["string", "null"]},
        "step_count": {"type": "integer"},
        "env_id": {"type": "string"},
        "seed": {"type": ["integer", "null"]},
        "started": {"type": "boolean"},
        "done": {"type": "boolean"},
    },
}


#: Exact types JSON carries unchanged (subclasses, such as an ``IntEnum``, take the general path).
_PLAIN_TYPES = frozenset({str, bool, int, type(None)})


def json_safe(value: Any) -> Any:
    """``value`` as plain JSON types: NumPy scalars and arrays, tuples, sets and dataclasses unwrapped,
    keys made strings, non-finite floats as ``None``, anything else as its ``repr``."""
    # A step's info is usually a flat dict of plain values: copied at once, without the walk below.
    if type(value) is dict and all(
        type(key) is str and (type(item) in _PLAIN_TYPES or (type(item) is float and math.isfinite(item)))
        for key, item in value.items()
    ):
        return dict(value)
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    if isinstance(value, (set, frozenset)):
        return sorted((json_safe(item) for item in value), key=repr)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_safe(dataclasses.asdict(value))
    tolist = getattr(value, "tolist", None)  # NumPy scalars and arrays, without importing NumPy here
    if callable(tolist):
        return json_safe(tolist())
    return repr(value)


def observation_message(
    text: str, reward: float | None, terminated: bool, truncated: bool, info: dict[str, Any]
) -> dict[str, Any]:
    """The answer to a ``reset`` (``reward=None``) or a ``step``."""
    return {
        "type": "observation",
        "data": {
            "observation": {
                "text": text,
                "terminated": bool(terminated),
                "truncated": bool(truncated),
                "info": json_safe(info),
            },
            "reward": _finite_or_none(reward),
            "done": bool(terminated or truncated),
        },
    }


def _finite_or_none(reward: float | None) -> float | None:
    value = None if reward is None else float(reward)
    return value if value is not None and math.isfinite(value) else None


def error_message(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"type": "error", "data": {"message": message, "code": code, **json_safe(extra)}}
