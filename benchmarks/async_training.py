"""Training steps per hour, asynchronous vs synchronous: the same run and config, the engine and the trainer on one core each.

Each mode trains in a process of its own, one after the other, with evaluation off: the same
model, envs, batch, seed and step count, ``trainer.mode=sync`` then ``trainer.mode=async``.
vLLM's engine core runs in a process of its own (``rollout.vllm_process=own_process``) with
all its threads on the engine's core (``VLLM_CPU_OMP_THREADS_BIND`` and the affinity of every
thread of that process); every thread of the trainer's process (its update, and the async
producer's request bookkeeping and env steps) is on the other core, with one torch thread.
In sync mode each core idles while the other works; in async mode both work at once, so
the ceiling is 2x when both halves take equal time.

Figures per mode (the first ``--warmup`` steps excluded): steps per hour, the mean share of
time the engine and the trainer idled (each step's ``time/engine_idle``, ``time/trainer_idle``),
the staleness of async steps, and the distributions of episode lengths (generated tokens) over
every episode generated vs every episode trained on, with their two-sample
Kolmogorov-Smirnov distance (0: the same distribution). ``async_over_sync`` is the ratio of
steps per hour. The load average at the start and end of each mode says whether the machine
was quiet.

Run the measurement (tens of minutes on a quiet 2-core machine; nothing else may run)::

    python -m benchmarks.async_training

and a smoke run of the script itself (minutes, numbers meaningless)::

    python -m benchmarks.async_training --smoke
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import write_result

MODES = ("sync", "async")


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="llmgym/FrozenLake-v0")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--groups", type=int, default=4, help="groups per step")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=3)
    # 2x2 lakes, moves read leniently: the goal is two moves away, so groups differ in reward
    # and every step updates (on 4x4 lakes in 3 turns no episode could succeed, no group would
    # carry an advantage, and the trainer would have nothing to update).
    parser.add_argument("--lake-size", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--steps", type=int, default=14, help="steps per mode, warm-up included")
    parser.add_argument("--warmup", type=int, default=2, help="first steps left out of the figures")
    parser.add_argument("--max-staleness", type=int, default=1)
    parser.add_argument("--engine-core", type=int, default=0)
    parser.add_argument("--trainer-core", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", default="async_training", help="results file name (benchmarks/results/NAME.json)")
    parser.add_argument("--smoke", action="store_true", help="a tiny model, 4 steps: checks the script, not the speed")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--child-output", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def overrides(args: argparse.Namespace, mode: str, model: str, output: Path) -> list[str]:
    """The run's config: the same for both modes but ``trainer.mode``."""
    return [
        f"model={model}",
        f"train_envs=[{{id: {args.env}, n_groups: {args.groups}, options: "
        f"{{size: {args.lake_size}, max_turns: {args.max_turns}, action_parser: lenient}}}}]",
        f"steps={args.steps}", f"seed={args.seed}", f"output={output}", "rollout.backend=vllm",
        "rollout.vllm_process=own_process", f"rollout.group_size={args.group_size}",
        f"rollout.max_new_tokens={args.max_new_tokens}", "rollout.max_model_len=2048", "optim.lr=2e-5",
        "eval.disabled=true", "checkpoint_every=0", "progress=false", "threads=1",
        f"trainer.mode={mode}", f"trainer.max_staleness={args.max_staleness}",
    ]


def pin_process(pid: int, cores: set[int]) -> None:
    """Every thread of process ``pid`` on ``cores`` (``sched_setaffinity`` of a pid moves one thread only)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cores)
        except (ProcessLookupError, PermissionError):  # a thread that ended meanwhile
            pass


def pin_engine(cores: set[int]) -> list[int]:
    """Pin this process's descendants (vLLM's engine core) to ``cores``; their pids."""
    pids, pending = [], [os.getpid()]
    while pending:
        for task in Path(f"/proc/{pending.pop()}/task").iterdir():
            try:
                children = [int(pid) for pid in (task / "children").read_text().split()]
            except (FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
                continue
            pids += children
            pending += children
    for pid in pids:
        pin_process(pid, cores)
    return pids


def run_child(args: argparse.Namespace) -> None:
    """One mode's training in this process; writes its figures to ``--child-output``."""
    from llmgym_train.config import load_config
    from llmgym_train.trainer import Trainer

    assert args.child is not None and args.child_output is not None
    engine, trainer_cores = {args.engine_core}, {args.trainer_core}
    pin_process(os.getpid(), trainer_cores)
    model = tiny_model_folder() if args.smoke else args.model
    with tempfile.TemporaryDirectory(prefix="llmgym-async-bench-") as folder:
        config = load_config(overrides=overrides(args, args.child, str(model), Path(folder) / "run"))
        load_start = os.getloadavg()
        with Trainer(config) as trainer:
            engine_pids = pin_engine(engine)
            pin_process(os.getpid(), trainer_cores)  # threads started since (Ray, vLLM's client, torch)
            trained: list[int] = []
            filtered = trainer._filtered_samples

            def recorded(trajectories: list[Any]) -> Any:
                trained.extend(trajectory.num_generated_tokens for trajectory in trajectories)
                return filtered(trajectories)

            trainer._filtered_samples = recorded  # type: ignore[method-assign]
            trainer.train()
            generated = trainer.rollouts.generated_lengths if trainer.rollouts is not None else list(trained)
        records = [json.loads(line) for line in (Path(folder) / "run" / "metrics.jsonl").read_text().splitlines()]
    figures = mode_figures([r for r in records if r["kind"] == "train"], args.warmup)
    figures.update(lengths=length_figures(generated, trained), engine_pids=engine_pids,
                   load_average_start=load_start, load_average_end=os.getloadavg())
    Path(args.child_output).write_text(json.dumps(figures))


def tiny_model_folder() -> Path:
    """The smoke run's model: the tests' tiny Llama, with heads vLLM's CPU attention takes."""
    from llmgym_train.testing import save_tiny_model

    return save_tiny_model(Path(tempfile.mkdtemp(prefix="llmgym-tiny-")) / "model", seed=0, num_heads=2)


def mode_figures(train: list[dict[str, Any]], warmup: int) -> dict[str, Any]:
    """Steps per hour over the steps after ``warmup`` (from the log's clock), idle shares and staleness."""
    measured = train[warmup:]
    if len(measured) < 2:
        raise SystemExit(f"{len(train)} steps with {warmup} of warm-up leave too few to time; raise --steps.")
    seconds = measured[-1]["time"] - train[warmup - 1]["time"] if warmup else measured[-1]["time"]
    mean = lambda key: float(np.mean([record.get(key, 0.0) for record in measured]))  # noqa: E731
    return {
        "steps_timed": len(measured),
        "seconds": seconds,
        "steps_per_hour": 3600 * len(measured) / seconds,
        "idle_engine": mean("time/engine_idle"),
        "idle_trainer": mean("time/trainer_idle"),
        "staleness_mean": mean("staleness/mean"),
        "staleness_max": max((record.get("staleness/max", 0.0) for record in measured), default=0.0),
        "success_rate_last": measured[-1].get("success_rate"),
        "samples_trained_mean": mean("samples_trained"),  # 0 would mean no update ran: nothing to overlap
        "samples_trained_per_hour": 3600 * sum(record.get("samples_trained", 0) for record in measured) / seconds,
        "update_s_mean": mean("time/update_s"),
        "generation_s_mean": mean("time/generation_s"),
    }


def length_figures(generated: list[int], trained: list[int]) -> dict[str, Any]:
    """Quantiles of both length distributions and their Kolmogorov-Smirnov distance."""
    quantiles = [0.1, 0.25, 0.5, 0.75, 0.9]

    def summary(lengths: list[int]) -> dict[str, Any]:
        values = np.asarray(lengths, dtype=float)
        return {"count": len(lengths), "mean": float(values.mean()) if len(values) else 0.0,
                "quantiles": {str(q): float(np.quantile(values, q)) for q in quantiles} if len(values) else {}}

    return {"generated": summary(generated), "trained": summary(trained), "ks_distance": ks_distance(generated, trained)}


def ks_distance(first: list[int], second: list[int]) -> float:
    """The two-sample Kolmogorov-Smirnov statistic: the largest gap between the two empirical CDFs."""
    if not first or not second:
        return 0.0
    a, b = np.sort(first), np.sort(second)
    points = np.union1d(a, b)
    gaps = np.abs(np.searchsorted(a, points, side="right") / len(a) - np.searchsorted(b, points, side="right") / len(b))
    return float(gaps.max())


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    if args.child:
        run_child(args)
        return
    if args.smoke:
        args.steps, args.warmup, args.groups, args.group_size, args.max_new_tokens = 4, 1, 2, 2, 8
    if os.cpu_count() is None or max(args.engine_core, args.trainer_core) >= os.cpu_count():
        raise SystemExit(f"--engine-core/--trainer-core must be cores of this machine (it has {os.cpu_count()}).")
    results = {mode: run_mode(args, mode) for mode in MODES}
    ratio = results["async"]["steps_per_hour"] / results["sync"]["steps_per_hour"]
    config = {key: value for key, value in vars(args).items() if not key.startswith("child")}
    # Groups without reward variance are not trained, so the modes may train different sample counts a step.
    sync_samples = results["sync"]["samples_trained_per_hour"]
    samples = results["async"]["samples_trained_per_hour"] / sync_samples if sync_samples else None  # None: no update ran
    path = write_result(args.name, {
        "async_over_sync": ratio, "async_over_sync_samples_trained": samples, "goal": 1.6, "modes": results,
        "config": config,
    })
    print(f"async {results['async']['steps_per_hour']:.1f} vs sync {results['sync']['steps_per_hour']:.1f} steps/h: "
          f"{ratio:.2f}x -> {path}")


def run_mode(args: argparse.Namespace, mode: str) -> dict[str, Any]:
    """One mode in a child process pinned as the module docstring says; its figures."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        output = Path(handle.name)
    forwarded = argv_of(args)
    environment = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": str(args.engine_core)}
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "benchmarks.async_training", *forwarded, "--child", mode, "--child-output", str(output)],
        env=environment, check=True,
    )
    figures = json.loads(output.read_text())
    output.unlink()
    figures["process_seconds"] = time.perf_counter() - started
    return figures


def argv_of(args: argparse.Namespace) -> list[str]:
    """``args`` back as command-line options for the child (after ``--smoke`` settled the sizes)."""
    options = ["--env", args.env, "--model", args.model, "--groups", str(args.groups), "--group-size", str(args.group_size),
               "--max-turns", str(args.max_turns), "--lake-size", str(args.lake_size), "--max-new-tokens", str(args.max_new_tokens), "--steps", str(args.steps),
               "--warmup", str(args.warmup), "--max-staleness", str(args.max_staleness), "--engine-core",
               str(args.engine_core), "--trainer-core", str(args.trainer_core), "--seed", str(args.seed)]
    return options + (["--smoke"] if args.smoke else [])


if __name__ == "__main__":
    main()
