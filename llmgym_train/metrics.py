"""Where a run's numbers go: ``metrics.jsonl``, TensorBoard events, a progress bar, a curve PNG.

:class:`RunLog` is the only writer; the trainer hands it one flat dict per step (and one per
evaluation) and never formats anything itself.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

CURVE_FILE = "learning_curve.png"
METRICS_FILE = "metrics.jsonl"


class RunLog:
    """Metrics sinks of one run in ``output``.

    Arguments:
        output: the run folder.
        total_steps: for the progress bar's ETA.
        progress: show a rich progress bar (disable in tests and non-interactive logs).
        start_step: the step a resumed run starts from (the bar and ETA continue from it).
    """

    def __init__(self, output: Path, total_steps: int, *, progress: bool = True, start_step: int = 0) -> None:
        self.output = output
        self.records: list[dict[str, Any]] = _read_jsonl(output / METRICS_FILE)
        self._file = (output / METRICS_FILE).open("a")
        self._writer = _tensorboard_writer(output / "tensorboard")
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
        if self._writer is not None:
            for name, value in values.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    self._writer.add_scalar(f"{kind}/{name}", value, step)
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


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _tensorboard_writer(folder: Path) -> Any:
    """A TensorBoard ``SummaryWriter``, or ``None`` when tensorboard is not installed."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(log_dir=str(folder))
