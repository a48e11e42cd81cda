"""Where a run's numbers go: ``metrics.jsonl``, TensorBoard events, a progress bar, a curve PNG.

:class:`RunLog` is the only writer; the trainer hands it one flat dict per step (and one per
evaluation) and never formats anything itself.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

CURVE_FILE = "learning_curve.png"
METRICS_FILE = "metrics.jsonl"
TENSORBOARD_FOLDER = "tensorboard"


class RunLog:
    """Metrics sinks of one run in ``output``.

    Arguments:
        output: the run folder.
        total_steps: for the progress bar's ETA.
        progress: show a rich progress bar (disable in tests and non-interactive logs).
        start_step: the step a resumed run starts from (the bar and ETA continue from it).
        keep_records: a resumed run's count of records its checkpoint covers: later ones (written
            after that checkpoint by the interrupted process) are dropped, and the TensorBoard
            events are written again from the kept ones, so no step appears twice in either.
            ``None``: a new run, whose metrics replace any earlier run's in ``output``.
    """

    def __init__(
        self,
        output: Path,
        total_steps: int,
        *,
        progress: bool = True,
        start_step: int = 0,
        keep_records: int | None = None,
    ) -> None:
        self.output = output
        path = output / METRICS_FILE
        self.records: list[dict[str, Any]] = [] if keep_records is None else _keep_first(path, keep_records)
        if keep_records is None:
            path.unlink(missing_ok=True)
        shutil.rmtree(output / TENSORBOARD_FOLDER, ignore_errors=True)
        self._file = path.open("a")
        self._writer = _tensorboard_writer(output / TENSORBOARD_FOLDER)
        for record in self.records:
            self._write_scalars(record)
        self._progress = None
        self._task = None
        if progress:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self._progress = Progress(
                TextColumn("step {task.completed:>4.0f}/{task.total:.0f}"),
                BarColumn(),
                TextColumn("{task.fields[status]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
            )
            self._task = self._progress.add_task("train", total=total_steps, completed=start_step, status="")
            self._progress.start()
        self._started = time.monotonic()

    def log(self, step: int, kind: str, values: dict[str, Any]) -> None:
        """Record ``values`` (``kind`` is ``train`` or ``eval``) at ``step`` in every sink."""
        record = {"step": step, "kind": kind, "time": round(time.monotonic() - self._started, 3), **values}
        self.records.append(record)
        self._file.write(json.dumps(record, default=float) + "\n")
        self._file.flush()
        self._write_scalars(record)

    def _write_scalars(self, record: dict[str, Any]) -> None:
        if self._writer is None:
            return
        for name, value in record.items():
            if name in ("step", "kind", "time"):
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                self._writer.add_scalar(f"{record['kind']}/{name}", value, record["step"])
        self._writer.flush()

    def advance(self, step: int, reward: float, success: float | None) -> None:
        """Move the progress bar to ``step`` and show the latest reward and eval success."""
        if self._progress is None:
            return
        success_text = "-" if success is None else f"{success:.2f}"
        self._progress.update(self._task, completed=step, status=f"reward {reward:+.3f}  success {success_text}")

    def plot(self) -> Path:
        """Write the learning curve (train reward/success per step, eval success) to a PNG."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        train = [r for r in self.records if r["kind"] == "train"]
        evals = [r for r in self.records if r["kind"] == "eval"]
        figure, axis = plt.subplots(figsize=(7, 4))
        if train:
            steps = [r["step"] for r in train]
            axis.plot(steps, [r.get("reward_mean", float("nan")) for r in train], label="train reward", alpha=0.7)
            axis.plot(steps, [r.get("success_rate", float("nan")) for r in train], label="train success", alpha=0.7)
        if evals:
            axis.plot([r["step"] for r in evals], [r["success_rate"] for r in evals], "o-", label="eval success (greedy)")
        axis.set_xlabel("step")
        axis.set_ylabel("rate / reward")
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend()
        figure.tight_layout()
        path = self.output / CURVE_FILE
        figure.savefig(path, dpi=100)
        plt.close(figure)
        return path

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._file.close()


def _keep_first(path: Path, count: int) -> list[dict[str, Any]]:
    """The first ``count`` records of ``path``; the file is rewritten (atomically) to hold only them."""
    lines = path.read_text().splitlines()[:count] if path.is_file() else []
    staging = path.with_name(path.name + ".tmp")
    staging.write_text("".join(line + "\n" for line in lines))
    os.replace(staging, path)
    return [json.loads(line) for line in lines]


def _tensorboard_writer(folder: Path) -> Any:
    """A TensorBoard ``SummaryWriter``, or ``None`` when tensorboard is not installed."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(log_dir=str(folder))
