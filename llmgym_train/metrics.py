"""Where a run's numbers go: ``metrics.jsonl``, TensorBoard events, a progress bar, a curve PNG.

:class:`RunLog` is the only writer; the trainer hands it one flat dict per step (and one per
evaluation) and never formats anything itself. :func:`episode_figures` computes the episode
figures (success, return, turns, invalid actions, tokens) for the trainer's metrics and the
rollout's report alike.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from llmgym_train.data import Trajectory, Turn

CURVE_FILE = "learning_curve.png"
METRICS_FILE = "metrics.jsonl"
TENSORBOARD_FOLDER = "tensorboard"
#: vLLM's, transformers' and Python warnings' log lines of a run, kept out of the console.
LOG_FILE = "run.log"
_LIBRARY_LOGGERS = ("vllm", "transformers", "torch", "ray", "py.warnings")
#: The run log :func:`route_library_logs` chose, for :func:`native_output_to_run_log`.
_run_log: Path | None = None


# ---------------------------------------------------------------------- episode figures
def episode_figures(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """The figures every report of episodes gives, the one place they are computed.

    ``success_rate``, ``mean_return``, ``mean_turns``, ``invalid_action_rate`` (per turn) and
    ``generated_tokens``; all 0 for no episodes.
    """
    if not trajectories:
        return {"success_rate": 0.0, "mean_return": 0.0, "mean_turns": 0.0, "invalid_action_rate": 0.0,
                "generated_tokens": 0}
    turns = [turn for trajectory in trajectories for turn in trajectory.turns]
    return {
        "success_rate": float(np.mean([t.success for t in trajectories])),
        "mean_return": float(np.mean([t.episode_return for t in trajectories])),
        "mean_turns": float(np.mean([len(t.turns) for t in trajectories])),
        "invalid_action_rate": float(np.mean([not turn.action_is_valid for turn in turns])) if turns else 0.0,
        "generated_tokens": int(sum(t.num_generated_tokens for t in trajectories)),
    }


def episode_metrics(trajectories: Sequence[Trajectory], labels: Sequence[str]) -> dict[str, Any]:
    """The trainer's episode metrics: :func:`episode_figures` overall, per env (``labels[i]``: trajectory i's) and per seat.

    Keys: ``success_rate``, ``reward_mean``, ``turns_mean``, ``invalid_action_rate``,
    ``generated_tokens``, each also as ``KEY/LABEL``; envs with tools add ``called_TOOL_rate``
    (:func:`tool_call_rates`); two-player games (:mod:`llmgym.multiagent`)
    add ``SEAT/KEY`` for the agent's seat, e.g. ``player_0/reward_mean``.
    """
    metrics = _labelled(trajectories, "")
    for label in sorted(set(labels)):
        members = [t for t, own in zip(trajectories, labels, strict=True) if own == label]
        metrics.update(_labelled(members, f"/{label}"))
    for seat in sorted({str(t.info["agent_seat"]) for t in trajectories if "agent_seat" in t.info}):
        members = [t for t in trajectories if t.info.get("agent_seat") == seat]
        metrics.update({f"{seat}/{key}": value for key, value in _labelled(members, "").items()})
    return metrics


#: The trainer's names for :func:`episode_figures` (its metrics files have always used them).
_TRAINER_NAMES = {"success_rate": "success_rate", "mean_return": "reward_mean", "mean_turns": "turns_mean",
                  "invalid_action_rate": "invalid_action_rate", "generated_tokens": "generated_tokens"}


def _labelled(trajectories: Sequence[Trajectory], suffix: str) -> dict[str, Any]:
    if not trajectories:
        return {}
    figures = {f"{_TRAINER_NAMES[name]}{suffix}": value for name, value in episode_figures(trajectories).items()}
    for name, rate in (("best_choice_rate", best_choice_rate), ("choice_signal_rate", choice_signal_rate)):
        value = rate(trajectories)
        if value is not None:
            figures[f"{name}{suffix}"] = value
    figures.update({f"{key}{suffix}": value for key, value in tool_call_rates(trajectories).items()})
    return figures


def tool_call_rates(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Per tool the envs offer: the share of episodes that ran it at least once, ``called_TOOL_rate``.

    The tools offered are those of the reset ``info["tools"]`` (OpenAI function schemas) and any
    that ran; a call counts when the tool ran without error (:attr:`Turn.tools_run`). Empty for
    envs without tools.
    """
    called = [{tool for turn in t.turns for tool in turn.tools_run} for t in trajectories]
    offered = {schema["function"]["name"] for t in trajectories for schema in t.info.get("tools", ())}
    return {f"called_{tool}_rate": float(np.mean([tool in tools for tools in called]))
            for tool in sorted(offered.union(*called))}


def best_choice_rate(trajectories: Sequence[Trajectory]) -> float | None:
    """Share of looked-ahead turns (``loss.credit=lookahead``) whose choice earned the best any choice earned.

    With Sokoban's ``progress_reward`` that is the share of moves on an optimal path. ``None``
    when no turn looked ahead.
    """
    best = [_played_credit(turn) >= max(turn.choice_rewards) for t in trajectories for turn in t.turns
            if turn.choice_rewards]
    return float(np.mean(best)) if best else None


def choice_signal_rate(trajectories: Sequence[Trajectory]) -> float | None:
    """Share of looked-ahead turns whose choices did not all earn the same: the turns that carry a signal.

    Under the env's sparse rewards and ``loss.lookahead_turns``, these are the states from which
    the policy's greedy continuation finishes what some choice starts. ``None`` when no turn looked ahead.
    """
    told = [max(turn.choice_rewards) > min(turn.choice_rewards) for t in trajectories for turn in t.turns
            if turn.choice_rewards]
    return float(np.mean(told)) if told else None


def _played_credit(turn: Turn) -> float:
    assert turn.choice_rewards is not None
    return turn.reward if turn.played_choice is None else turn.choice_rewards[turn.played_choice]


def route_library_logs(path: Path) -> None:
    """Send the engines' log lines and Python warnings to ``path``, keeping the console for progress.

    vLLM and transformers log at every engine start and weight sync; in a training run those
    lines bury the progress line. Warnings raised from llmgym's own code still reach the
    console (they say something the user chose or must fix), and go to the file as well.
    Call before vLLM is imported, so that it leaves logging to us.
    """
    global _run_log
    os.environ["VLLM_CONFIGURE_LOGGING"] = "0"
    os.environ.setdefault("TQDM_DISABLE", "1")  # weight-loading bars of both libraries
    path.parent.mkdir(parents=True, exist_ok=True)
    _run_log = path
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_default_handler()
        hf_logging.disable_progress_bar()
    except ImportError:
        pass
    for name in _LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        for old in list(logger.handlers):
            if getattr(old, "_llmgym_run_log", False) or type(old) is logging.StreamHandler:
                logger.removeHandler(old)
        logger.addHandler(handler)
        logger.propagate = False
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)
    console = logging.StreamHandler()
    console.addFilter(lambda record: "/llmgym" in record.getMessage())
    logging.getLogger("py.warnings").addHandler(console)
    handler._llmgym_run_log = True  # type: ignore[attr-defined]
    console._llmgym_run_log = True  # type: ignore[attr-defined]
    logging.captureWarnings(True)


@contextmanager
def native_output_to_run_log() -> Iterator[None]:
    """Inside, whatever writes to file descriptor 2 writes to the run log, if a run routed its logs there.

    Native code does not log through Python: torch's C++ warnings at vLLM's engine start (its
    NUMA binding notice) go straight to the process's stderr. An engine core started inside
    (``rollout.vllm_process=own_process``) keeps the run log as its stderr. Outside a run (no
    :func:`route_library_logs` call), nothing changes.
    """
    if _run_log is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(_run_log, "ab") as log:
            os.dup2(log.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


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
        mode: how the run trains, shown on the progress line (``sync``; ``async, max staleness 1``).
    """

    def __init__(
        self,
        output: Path,
        total_steps: int,
        *,
        progress: bool = True,
        start_step: int = 0,
        max_minutes: float = 0.0,
        keep_records: int | None = None,
        mode: str = "",
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

            # Under a time budget the bar counts minutes, not steps: the budget ends the run first.
            columns = (
                [TextColumn("{task.fields[status]}"), BarColumn(bar_width=20), TimeElapsedColumn()]
                if max_minutes
                else [TextColumn("{task.fields[status]}"), BarColumn(bar_width=20), TimeElapsedColumn(),
                      TextColumn("ETA"), TimeRemainingColumn()]
            )
            self._progress = Progress(*columns)
            self._task = self._progress.add_task(
                "train", total=60 * max_minutes if max_minutes else total_steps,
                completed=0 if max_minutes else start_step, status=f"step {start_step}: starting",
            )
            self._progress.start()
        self._started = time.monotonic()
        self._total_steps = total_steps
        self._budget = 60 * max_minutes
        self._budget_start: float | None = None
        self._train_success: float | None = None
        self._mode = mode

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

    def start_budget(self, used: float = 0.0) -> None:
        """The time budget starts now (after the first evaluation), ``used`` seconds of it already spent (a resumed run)."""
        self._budget_start = time.monotonic() - used

    def status(self, text: str) -> None:
        """Show what the run is doing now (``evaluating``, ``training``) on the progress line."""
        if self._progress is not None:
            self._progress.update(self._task, status=text)

    def advance(
        self, step: int, train_success: float | None, eval_success: float | None, staleness: float | None = None
    ) -> None:
        """Move the progress line to ``step``: the mode, train success, last eval success, the step's staleness, time left."""
        if self._progress is None:
            return
        text = self.progress_text(step, train_success, eval_success, staleness)
        if self._budget and self._budget_start is not None:
            used = time.monotonic() - self._budget_start
            text += f"  {max(self._budget - used, 0) / 60:.1f} min left"
            self._progress.update(self._task, completed=min(used, self._budget), status=text)
        else:
            self._progress.update(self._task, completed=step, status=text)

    def progress_text(
        self, step: int, train_success: float | None, eval_success: float | None, staleness: float | None = None
    ) -> str:
        """The progress line's text: ``step 3/10 [async, max staleness 1] train success 40% last eval - staleness 1``."""
        train = "-" if train_success is None else f"{train_success:.0%}"
        last_eval = "-" if eval_success is None else f"{eval_success:.0%}"
        mode = f" [{self._mode}]" if self._mode else ""
        text = f"step {step}/{self._total_steps}{mode}  train success {train}  last eval {last_eval}"
        if staleness is not None:
            text += f"  staleness {staleness:.0f}"
        return text

    def plot(self) -> Path:
        """Write the learning curve of the records so far to the run folder's PNG."""
        return plot_curve(self.records, self.output / CURVE_FILE)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._file.close()


def plot_curve(records: Sequence[dict[str, Any]], path: Path) -> Path:
    """Write a learning curve PNG from metric records (``metrics.jsonl`` lines).

    Success rates (train, and greedy eval) share the left axis, 0 to 100%; the mean train
    reward, whose scale is the env's, has the right axis of its own.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import PercentFormatter

    train = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "eval"]
    figure, rates = plt.subplots(figsize=(7, 4))
    lines = []
    if train:
        steps = [r["step"] for r in train]
        rewards = rates.twinx()
        lines += rewards.plot(
            steps, [r.get("reward_mean", float("nan")) for r in train], color="tab:gray", alpha=0.45,
            linewidth=1, label="train reward (right axis)",
        )
        rewards.set_ylabel("mean train reward")
        lines += rates.plot(
            steps, [r.get("success_rate", float("nan")) for r in train], color="tab:orange", alpha=0.8,
            linewidth=1, label="train success",
        )
        rates.set_zorder(rewards.get_zorder() + 1)
        rates.patch.set_visible(False)
    if evals:
        lines += rates.plot(
            [r["step"] for r in evals], [r["success_rate"] for r in evals], "o-", color="tab:green",
            label="eval success (greedy)",
        )
    rates.set_ylim(-0.02, 1.02)
    rates.yaxis.set_major_formatter(PercentFormatter(1.0))
    rates.set_xlabel("step")
    rates.set_ylabel("success rate")
    rates.grid(alpha=0.3)
    if lines:
        rates.legend(lines, [line.get_label() for line in lines], loc="upper left")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


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
