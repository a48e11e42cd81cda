"""Batched ``info`` dicts in Gymnasium's layout, built a key at a time.

Gymnasium's ``VectorEnv._add_info`` merges one sub-env's info at a time, allocating and
indexing arrays per sub-env and key; with hundreds of sub-envs that is most of a vector
step's own cost, and on the process backend it runs while every worker waits. Here the
values are gathered per key first and each array is filled in one go.

The result equals what ``_add_info`` gives when fed the same infos in order: a key's array
takes its type from the first sub-env that has the key (``int``/``float``/``bool``/NumPy
number: a typed array, cast like Gymnasium's element assignment; an ``ndarray``: a stacked
array; anything else: an object array), ``_key`` masks mark who has it, nested dicts nest,
``final_obs`` is an object array. One extension: where Gymnasium's typed array cannot hold a
later value (``None`` after ints, e.g. an unknown ``optimal_steps``) the array is an object
array instead of an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

_PLAIN_NUMBERS = (int, float, bool)


def batch_infos(num_envs: int, infos: Sequence[tuple[int, dict[str, Any]]]) -> dict[str, Any]:
    """Gymnasium's batched info dict for ``(sub-env index, info)`` pairs, indices distinct."""
    batched: dict[str, Any] = {}
    for key, (indices, values) in _columns(infos).items():
        batched[key] = _batch_column(num_envs, key, indices, values)
        mask = np.zeros(num_envs, dtype=np.bool_)
        mask[indices] = True
        batched[f"_{key}"] = mask
    return batched


def _columns(infos: Sequence[tuple[int, dict[str, Any]]]) -> dict[str, tuple[list[int], list[Any]]]:
    """``key -> (indices, values)`` in order of first appearance."""
    if not infos:
        return {}
    keys = infos[0][1].keys()
    if all(info.keys() == keys for _, info in infos):  # the usual case: one comprehension per key
        indices = [index for index, _ in infos]
        return {key: (indices, [info[key] for _, info in infos]) for key in keys}
    columns: dict[str, tuple[list[int], list[Any]]] = {}
    for index, info in infos:
        for key, value in info.items():
            key_indices, values = columns.setdefault(key, ([], []))
            key_indices.append(index)
            values.append(value)
    return columns


def _batch_column(num_envs: int, key: str, indices: list[int], values: list[Any]) -> Any:
    first = values[0]
    if key == "final_obs":
        return _object_array(num_envs, indices, values)
    if isinstance(first, dict):
        if not all(isinstance(value, dict) for value in values):
            other = next(type(value).__name__ for value in values if not isinstance(value, dict))
            raise TypeError(f"info key {key!r} holds a dict in one sub-env and a {other} in another.")
        return batch_infos(num_envs, list(zip(indices, values)))
    if type(first) in _PLAIN_NUMBERS or isinstance(first, np.number):
        return _typed_array(num_envs, type(first), indices, values)
    if isinstance(first, np.ndarray):
        stacked = np.zeros((num_envs, *first.shape), dtype=first.dtype)
        for index, value in zip(indices, values):
            stacked[index] = value
        return stacked
    return _object_array(num_envs, indices, values)


def _typed_array(num_envs: int, kind: type, indices: list[int], values: list[Any]) -> np.ndarray:
    array = np.zeros(num_envs, dtype=kind)
    if all(type(value) is kind for value in values):
        array[indices] = values  # one cast, the same as each element's
        return array
    try:
        for index, value in zip(indices, values):
            array[index] = value  # Gymnasium's cast, value by value
    except (TypeError, ValueError, OverflowError):
        return _object_array(num_envs, indices, values)
    return array


def _object_array(num_envs: int, indices: list[int], values: list[Any]) -> np.ndarray:
    # Element by element: a bulk assignment would unpack values that are lists or tuples.
    array = np.full(num_envs, fill_value=None, dtype=object)
    for index, value in zip(indices, values):
        array[index] = value
    return array


def sub_env_info(batched: dict[str, Any], index: int) -> dict[str, Any]:
    """Sub-env ``index``'s own ``info`` back out of a batched info dict (the keys its ``_key`` masks mark).

    NumPy scalars come back as the Python values they were made from (``bool``, ``int``,
    ``float``), so a caller that handles one episode at a time (the trainer's rollout, a
    JSON log) sees what the env returned. A key whose array held mixed number types was cast
    the way Gymnasium casts (see the module docstring); object arrays give back the objects.
    """
    info: dict[str, Any] = {}
    for key, value in batched.items():
        if key.startswith("_") and key[1:] in batched:
            continue
        present = batched.get(f"_{key}")
        if present is None or not present[index]:
            continue
        item = sub_env_info(value, index) if isinstance(value, dict) else value[index]
        info[key] = item.item() if isinstance(item, np.generic) else item
    return info
