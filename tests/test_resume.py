"""A run of ``llmgym-train`` killed at any moment resumes to the state of a run that was never killed.

The killed run is a real process (``llmgym-train``'s entry point in a subprocess) stopped by
SIGKILL at chosen points (``$LLMGYM_TRAIN_KILL_AT``): right after a step's metrics are logged,
in the middle of a checkpoint write, and between the two renames that swap ``model/`` in.
Each time it is resumed with nothing but ``--output DIR --resume``. The uninterrupted run is
the same command in a process of its own. Weights, optimizer state, ``model/``, ``metrics.jsonl`` and
the TensorBoard events must then match, with no step logged twice.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from llmgym_train.models import resolve_model
from llmgym_train.testing import save_tiny_model
from llmgym_train.trainer import CHECKPOINT_FILE, KILL_AT_VARIABLE
from test_trainer import GRADED_ENV_ID

TESTS = Path(__file__).resolve().parent
#: The CLI, after registering the test envs (as a user's own module would).
RUNNER = (
    "import sys\n"
    f"sys.path.insert(0, {str(TESTS)!r})\n"
    "import test_trainer  # registers llmgym-test/GradedChar-v0\n"
    "from llmgym_train.cli import main\n"
    "raise SystemExit(main(sys.argv[1:]))\n"
)
#: Metrics that measure time: they differ between any two runs.
TIMING = ("time", "step_seconds")


def _arguments(model: Path, output: Path) -> list[str]:
    return [
        "--env", f"{GRADED_ENV_ID}:2", "--model", str(model), "--algo", "grpo", "--output", str(output),
        "--steps", "4", "rollout.backend=hf", "rollout.group_size=4", "rollout.max_new_tokens=3",
        "rollout.max_model_len=64", "optim.lr=0.01", "optim.minibatch_size=4", "optim.micro_batch_size=2",
        "eval.levels=2", "eval.every=2", "checkpoint_every=1", "progress=false", "threads=1",
    ]


def _run_cli(arguments: list[str], kill_at: str | None = None) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(TESTS.parent)}
    environment.pop(KILL_AT_VARIABLE, None)
    if kill_at is not None:
        environment[KILL_AT_VARIABLE] = kill_at
    return subprocess.run(
        [sys.executable, "-c", RUNNER, *arguments], env=environment, capture_output=True, text=True, timeout=900
    )


def _killed(arguments: list[str], kill_at: str) -> None:
    result = _run_cli(arguments, kill_at)
    assert result.returncode == -9, f"expected SIGKILL at {kill_at}, got {result.returncode}:\n{result.stderr[-2000:]}"


def _records(output: Path) -> list[dict[str, Any]]:
    lines = (output / "metrics.jsonl").read_text().splitlines()
    return [{key: value for key, value in json.loads(line).items() if not _is_timing(key)} for line in lines]


def _is_timing(name: str) -> bool:
    return name in TIMING or name.startswith("time/") or name.endswith("_per_s")


def _scalars(output: Path) -> list[tuple[str, int, float]]:
    """Every scalar event in the run's TensorBoard files, as (tag, step, value)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    found = []
    for path in sorted((output / "tensorboard").glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                number = value.simple_value if value.HasField("simple_value") else float(value.tensor.float_val[0])
                found.append((value.tag, int(event.step), number))
    return found


def test_a_run_killed_at_any_moment_resumes_to_the_uninterrupted_state(tmp_path: Path) -> None:
    model = save_tiny_model(tmp_path / "tiny", seed=8)
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    # In a process of its own like the killed runs: earlier tests in this process may have
    # changed torch's global state (threads, flags), and with it float rounding.
    run = _run_cli(_arguments(model, straight))
    assert run.returncode == 0, run.stderr[-2000:]

    _killed(_arguments(model, killed), "step-logged@1")  # step 1 logged, its checkpoint not yet written
    assert not (killed / CHECKPOINT_FILE).exists() and [r["step"] for r in _records(killed)] == [0, 1]
    resume = ["--output", str(killed), "--resume"]
    _killed(resume, "checkpoint-staged@2")  # checkpoint.pt of step 2 written aside, not yet renamed
    assert (killed / "checkpoint.tmp").is_file()
    assert torch.load(killed / CHECKPOINT_FILE, weights_only=False)["step"] == 1
    _killed(resume, "model-moved-aside@3")  # between the renames that swap model/ in
    assert not (killed / "model").exists() and resolve_model(str(killed)) == killed / "model.old"
    result = _run_cli(resume)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "finished at step 4" in result.stdout

    expected, got = (torch.load(path / CHECKPOINT_FILE, weights_only=False) for path in (straight, killed))
    assert got["step"] == expected["step"] == 4
    for name, tensor in expected["policy"]["weights"].items():
        torch.testing.assert_close(got["policy"]["weights"][name], tensor, rtol=0, atol=0, msg=name)
    for index, moments in expected["optimizer"]["state"].items():
        for key, value in moments.items():
            torch.testing.assert_close(got["optimizer"]["state"][index][key], value, rtol=0, atol=0)
    initial = load_file(model / "model.safetensors")
    final = load_file(straight / "model" / "model.safetensors")
    assert any(not torch.equal(initial[name], final[name]) for name in initial), "training moved the weights"
    exported = load_file(killed / "model" / "model.safetensors")
    assert all(torch.equal(exported[name], final[name]) for name in final)
    assert sorted(path.name for path in killed.iterdir() if path.name.startswith(("model", "checkpoint"))) == [
        CHECKPOINT_FILE, "model"
    ], "no staging file or folder is left behind"

    records = _records(killed)
    assert [(r["step"], r["kind"]) for r in records] == [
        (0, "eval"), (1, "train"), (2, "train"), (2, "eval"), (3, "train"), (4, "train"), (4, "eval")
    ]
    assert records == _records(straight)
    scalars, reference = _scalars(killed), _scalars(straight)
    repeated = [key for key, count in Counter((tag, step) for tag, step, _ in scalars).items() if count > 1]
    assert repeated == [], f"logged twice in TensorBoard: {repeated[:5]}"
    by_key = {(tag, step): value for tag, step, value in scalars if not _is_timing(tag.split("/", 1)[1])}
    assert by_key == {(tag, step): value for tag, step, value in reference if not _is_timing(tag.split("/", 1)[1])}
    assert len(scalars) == len(reference)
