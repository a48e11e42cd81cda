"""Shared plumbing for benchmark scripts: timing and JSON output.

Every benchmark writes ``benchmarks/results/<name>.json`` holding its figures next to the
commit, the machine and the package versions they were measured with. Provenance, portable
paths and Markdown tables are the evaluation package's (:mod:`llmgym_train.eval.results`),
shared with ``llmgym-bench``; they are re-exported here for the scripts.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmgym_train.eval.results import (
    PROVENANCE_KEYS,
    REPO_ROOT,
    RESULTS_DIR,
    markdown_table,
    portable,
    portable_path,
    provenance,
)

__all__ = [
    "PROVENANCE_KEYS",
    "REPO_ROOT",
    "RESULTS_DIR",
    "markdown_table",
    "offline_llm",
    "portable",
    "portable_path",
    "provenance",
    "rate",
    "timed",
    "write_result",
]


def write_result(name: str, figures: dict[str, Any], directory: Path = RESULTS_DIR) -> Path:
    """Write ``figures`` with provenance to ``<directory>/<name>.json``, paths made :func:`portable`; return the path.

    The provenance is this write's, even when ``figures`` were read back from an older file. The
    file is replaced atomically: a reader (or a run killed mid-write) never sees half of it.
    """
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    figures = {key: value for key, value in figures.items() if key not in PROVENANCE_KEYS}
    staging.write_text(json.dumps(portable({**provenance(), **figures}), indent=2, default=str) + "\n")
    os.replace(staging, path)
    return path


def rate(work: Callable[[], int], repeats: int = 5, min_seconds: float = 0.2) -> float:
    """Median over ``repeats`` of (units of work done / seconds); ``work`` returns its unit count.

    Each repetition runs ``work`` until at least ``min_seconds`` have passed, so fast work is
    timed over many calls.
    """
    rates = []
    for _ in range(repeats):
        units, start = 0, time.perf_counter()
        while True:
            units += work()
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                break
        rates.append(units / elapsed)
    return statistics.median(rates)


def timed(work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``work()``'s figures, with its wall time and the load average before and after it."""
    load_before = os.getloadavg()
    started = time.perf_counter()
    figures = work()
    return {**figures, "seconds": round(time.perf_counter() - started, 1),
            "load_average_before": [round(value, 2) for value in load_before],
            "load_average_after": [round(value, 2) for value in os.getloadavg()]}


def offline_llm(model: str, max_model_len: int) -> tuple[Any, Any]:
    """``(vllm, engine)``: a seeded offline vLLM engine of ``model`` (an alias, HF folder or run folder)
    with the trainer's CPU settings (float32, blocks of 32), for benchmarks that sample ``n`` replies."""
    from llmgym_train.generation.vllm_backend import import_vllm
    from llmgym_train.models import resolve_model

    vllm = import_vllm()
    engine = vllm.LLM(model=str(resolve_model(model)), max_model_len=max_model_len, dtype="float32",
                      gpu_memory_utilization=0.5, block_size=32, enforce_eager=True, seed=0)
    return vllm, engine
