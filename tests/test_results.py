"""Benchmark results files: portable paths, so a result reads the same on every machine."""

from __future__ import annotations

import json
import re
from pathlib import Path

from benchmarks.common import REPO_ROOT, RESULTS_DIR, write_result

#: A JSON string value that starts like an absolute POSIX or Windows path.
ABSOLUTE_PATH = re.compile(r'"(/|[A-Za-z]:\\\\)[^"]*"')


def test_write_result_records_paths_relative_to_the_repo(tmp_path: Path) -> None:
    figures = {
        "curve_png": str(REPO_ROOT / "benchmarks" / "results" / "learning_curve.png"),
        "config": {"output": REPO_ROOT / "runs" / "demo", "envs": ["llmgym/FrozenLake-v0"]},
        "model": str(Path.home() / ".cache" / "llmgym" / "models" / "smollm2-135m"),
        "scratch": "/tmp/lc_run",
        "steps": [(1, 0.5)],
    }
    path = write_result("paths", figures, directory=tmp_path)
    text = path.read_text()
    written = json.loads(text)
    assert written["curve_png"] == "benchmarks/results/learning_curve.png"
    assert written["config"] == {"output": "runs/demo", "envs": ["llmgym/FrozenLake-v0"]}
    assert written["model"] == "~/.cache/llmgym/models/smollm2-135m"
    assert written["scratch"] == ".../lc_run"
    assert written["steps"] == [[1, 0.5]]
    assert not ABSOLUTE_PATH.search(text), ABSOLUTE_PATH.search(text)


def test_committed_results_hold_no_absolute_paths() -> None:
    for path in sorted(RESULTS_DIR.iterdir()):
        if path.suffix in (".json", ".jsonl", ".md"):
            found = ABSOLUTE_PATH.search(path.read_text())
            assert found is None, f"{path.name} records the absolute path {found.group(0)}"


def test_only_code_changes_make_a_checkout_dirty(tmp_path: Path) -> None:
    import subprocess

    from llmgym_train.eval.results import code_differs

    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "benchmarks" / "results" / "old.json").write_text("{}\n")
    git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "-m", "start")
    (tmp_path / "benchmarks" / "results" / "old.json").write_text('{"seeds": [0]}\n')  # a run merged into it
    (tmp_path / "benchmarks" / "results" / "new.json").write_text("{}\n")  # and wrote another
    assert not code_differs(tmp_path / "benchmarks")
    (tmp_path / "code.py").write_text("x = 2\n")
    assert code_differs(tmp_path / "benchmarks")
    git("checkout", "code.py")
    (tmp_path / "helper.py").write_text("y = 1\n")  # new code, not committed
    assert code_differs(tmp_path)


def test_train_minutes_add_up_the_processes_of_a_resumed_run() -> None:
    from benchmarks.learning_curve import _train_minutes

    first = [{"kind": "eval", "time": 60.0}, {"kind": "train", "time": 120.0, "time/total_s": 60.0},
             {"kind": "train", "time": 180.0, "time/total_s": 60.0}]
    assert _train_minutes(first) == 2.0  # the first evaluation (60 s with model loading) is not counted
    resumed = [{"kind": "train", "time": 90.0, "time/total_s": 30.0}, {"kind": "train", "time": 150.0}]
    assert _train_minutes(first + resumed) == 3.5  # the second process's loop began at 60 s on its clock
