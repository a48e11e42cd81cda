"""Math problems from a dataset file (JSONL or Parquet), such as GSM8K.

Each row needs a ``question`` and an ``answer``. GSM8K answers (a worked solution ending in
``#### 72``) are reduced to the number after ``####``; plain answers are kept as they are.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from llmgym.core import checked_options
from llmgym.envs.math.env import MathEnv
from llmgym.envs.math.problems import Problem
from llmgym.envs.math.verify import AnswerVerifier
from llmgym.error import DatasetError, DependencyNotInstalled
from llmgym.splits import Split

#: The small dataset shipped with llmgym: GSM8K-style word problems with ``#### n`` answers.
DEFAULT_DATASET = Path(__file__).resolve().parents[2] / "data" / "math_word_problems.jsonl"
_GSM8K_ANSWER = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)
_REQUIRED = ("question", "answer")


def final_answer(answer: str) -> str:
    """The final answer of a dataset row: the text after GSM8K's ``####``, without thousands commas.

    >>> final_answer("She pays 3 * 24 = 72 dollars.\\n#### 1,072")
    '1072'
    """
    match = _GSM8K_ANSWER.search(answer)
    if match is None:
        return answer.strip()
    value = match.group(1).strip()
    return value.replace(",", "") if re.fullmatch(r"[-+]?[\d,]+(\.\d+)?", value) else value


def load_problems(path: str | Path) -> list[Problem]:
    """Every row of a ``.jsonl`` or ``.parquet`` file as a :class:`Problem`.

    Raises :class:`DatasetError` naming the file and the line (JSONL) or row (Parquet) of the
    first bad record, and the fields expected.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"Dataset file {str(path)!r} does not exist. Pass dataset_path= a .jsonl or "
                           f".parquet file with 'question' and 'answer' fields.")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        rows = _parquet_rows(path)
        where = "row"
    elif suffix in (".jsonl", ".json"):
        rows = _jsonl_rows(path)
        where = "line"
    else:
        raise DatasetError(f"Dataset file {str(path)!r} has suffix {suffix!r}; expected .jsonl or .parquet.")
    problems = [_problem(row, path, where, number) for number, row in rows]
    if not problems:
        raise DatasetError(f"Dataset file {str(path)!r} holds no rows; expected at least one "
                           f"{{'question': ..., 'answer': ...}} record.")
    return problems


def _jsonl_rows(path: Path) -> list[tuple[int, Any]]:
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                rows.append((number, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{number}: not valid JSON ({exc.msg}); expected one JSON object "
                                   f"with 'question' and 'answer' per line.") from None
    return rows


def _parquet_rows(path: Path) -> list[tuple[int, Any]]:
    try:
        import pyarrow.parquet as parquet
    except ImportError:
        raise DependencyNotInstalled(
            f"Reading {path} needs pyarrow: pip install pyarrow (or pip install 'llmgym[math]')."
        ) from None
    table = parquet.read_table(path)
    missing = [name for name in _REQUIRED if name not in table.column_names]
    if missing:
        raise DatasetError(f"{path}: missing column(s) {', '.join(missing)}; expected 'question' and "
                           f"'answer', got {', '.join(table.column_names)}.")
    return list(enumerate(table.select(list(_REQUIRED)).to_pylist()))


def _problem(row: Any, path: Path, where: str, number: int) -> Problem:
    if not isinstance(row, dict):
        raise DatasetError(f"{path}:{where} {number}: expected a JSON object with 'question' and 'answer', "
                           f"got {type(row).__name__}.")
    bad = [name for name in _REQUIRED
           if not isinstance(row.get(name), (str, int, float)) or row.get(name) == ""]
    if bad:
        raise DatasetError(f"{path}:{where} {number}: field(s) {', '.join(bad)} missing or not a string; "
                           f"expected non-empty 'question' and 'answer', got keys {', '.join(sorted(row))}.")
    answer = final_answer(str(row["answer"]))
    if not answer:
        raise DatasetError(f"{path}:{where} {number}: the answer is empty after '####'.")
    return Problem(str(row["question"]), answer, "dataset", "dataset")


@lru_cache(maxsize=8)
def _cached_problems(path: str, modified: float) -> tuple[Problem, ...]:
    """Rows of ``path``; cached per modification time so many envs share one parse."""
    del modified  # part of the cache key only
    return tuple(load_problems(path))


@dataclass(frozen=True)
class DatasetProblems:
    """The rows of a dataset file as a :class:`~llmgym.envs.math.env.ProblemSource`, drawn by seed.

    Reset ``info["level_id"]`` is the row's index in the file; ``level`` is the only reset option.
    """

    problems: tuple[Problem, ...]
    reset_options: frozenset[str] = frozenset({"level"})

    @classmethod
    def from_file(cls, path: str | Path) -> DatasetProblems:
        """Rows of ``path`` (parsed once per file version and shared by the envs that read it)."""
        path = Path(path)
        return cls(_cached_problems(str(path), path.stat().st_mtime if path.is_file() else 0.0))

    def draw(self, np_random: np.random.Generator, options: dict[str, Any]) -> tuple[Problem, dict[str, Any]]:
        index = int(np_random.integers(len(self.problems)))
        return self.problems[index], {"level_id": index}

    # A sequence of its problems, as the env's ``problems`` has always been for dataset envs.
    def __len__(self) -> int:
        return len(self.problems)

    def __iter__(self) -> Iterator[Problem]:
        return iter(self.problems)

    def __getitem__(self, index: int) -> Problem:
        return self.problems[index]


@checked_options
def MathDatasetEnv(  # noqa: N802 - the entry point of llmgym/MathDataset-v0, named as the env it builds
    *,
    dataset_path: str | Path = DEFAULT_DATASET,
    max_attempts: int = 1,
    turn_discount: float = 1.0,
    format_penalty: float = -0.1,
    verifier: AnswerVerifier | None = None,
    render_mode: str | None = None,
    split: Split = "train",
    held_out_levels: int | None = None,
) -> MathEnv:
    """Math problems sampled by seed from a dataset file (JSONL or Parquet), such as GSM8K.

    A :class:`MathEnv` holding the file's rows as its problem source (:class:`DatasetProblems`):
    everything else (answer format, verification, rewards, attempts) is :class:`MathEnv`'s.
    ``info["level_id"]`` at reset is the row's index in the file. ``llmgym/MathDataset-v0``
    defaults to the small GSM8K-style set shipped with llmgym.

    Arguments:
        dataset_path: a ``.jsonl`` (one object a line) or ``.parquet`` file with ``question``
            and ``answer`` fields.
        max_attempts, turn_discount, format_penalty, verifier, render_mode, split, held_out_levels:
            as :class:`MathEnv`. The bundled dataset's eval set holds 26 of its 52 problems; the
            split holds them out, so training draws the other 26.

    Version History:
        * v0: initial version.
    """
    env = MathEnv(max_attempts=max_attempts, turn_discount=turn_discount, format_penalty=format_penalty,
                  verifier=verifier, render_mode=render_mode, problems=DatasetProblems.from_file(dataset_path),
                  split=split, held_out_levels=held_out_levels)
    env.dataset_path = Path(dataset_path)  # type: ignore[attr-defined]
    return env
