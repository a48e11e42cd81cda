"""Python sandbox: call cost before and after a change, measured back-to-back in one run.

Each call is a fresh, fully isolated sandbox (see :mod:`llmgym.envs.tool_use.sandbox`):
the figures are the price of that isolation. Measured, per implementation:

* ``print``: ``print(6 * 7)``, the smallest call, back to back from one thread, and from
  ``--threads`` threads (calls overlap: the waits release the GIL);
* ``print_paced``: the same call with a 100 ms pause between calls (latency only), as in
  an episode where the model generates between tool calls;
* ``print_cold`` (implementations with ``SandboxConfig.spares``): no sandbox launched ahead;
* ``compute``: a sieve of primes below 200,000, a typical tool-use computation;
* ``tool_use_step``: a ``ToolUse-Python-v0`` step that runs one python tool call.

"before" is the ``llmgym`` package of ``--baseline-ref`` (default ``main``), unpacked with
``git archive`` into a temporary directory; "after" is this checkout's. Each runs in its own
process with ``PYTHONPATH`` pointing at its package, in the order before, after, after,
before (for ``--rounds 2``), so that a drift in the machine's load falls on both alike; the
summary takes the median over rounds. The committed figures compare 4d8ca10 (main before the
bubblewrap sandbox: a fork server that isolated by hand, as root only) with b9caf94:
``python -m benchmarks.sandbox_throughput --baseline-ref 4d8ca10`` measures that pair again.

Usage: ``python -m benchmarks.sandbox_throughput [--quick] [--baseline-ref main] [--rounds 2]``.
Writes ``benchmarks/results/sandbox_throughput.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import markdown_table, write_result
from benchmarks.verify_throughput import latency_stats, timed_calls

REPO = Path(__file__).resolve().parents[1]
SIEVE = ("n = 200_000\nsieve = bytearray([1]) * n\nsieve[:2] = b'\\x00\\x00'\n"
         "for i in range(2, int(n ** 0.5) + 1):\n"
         "    if sieve[i]:\n        sieve[i*i::i] = bytearray(len(range(i*i, n, i)))\nprint(sum(sieve))")
PACE_SECONDS = 0.1


def measure(calls: int, threads: int) -> dict[str, Any]:
    """Figures of the ``llmgym`` this process imports (run once per implementation, in its own process)."""
    import llmgym
    from llmgym.envs.tool_use import PythonSandbox, SandboxConfig, ToolUseEnv
    from llmgym.envs.tool_use.tasks import tool_call

    sandbox = PythonSandbox()
    assert sandbox.run("print(6 * 7)").stdout.strip() == "42"  # warm-up, and a check
    figures = {
        "print": timed_calls(lambda i: sandbox.run("print(6 * 7)"), calls),
        "print_threads": timed_calls(lambda i: sandbox.run("print(6 * 7)"), calls, threads=threads),
        "print_paced": _paced(sandbox, calls),
        "compute": timed_calls(lambda i: sandbox.run(SIEVE), calls // 2),
    }
    if "spares" in {field.name for field in dataclasses.fields(SandboxConfig)}:
        cold = PythonSandbox(SandboxConfig(spares=0))
        figures["print_cold"] = timed_calls(lambda i: cold.run("print(6 * 7)"), calls)
    env = ToolUseEnv(task="python", max_turns=None)
    env.reset(seed=0)
    action = tool_call("python", code="print(sum(range(10**5)))")
    figures["tool_use_step"] = timed_calls(lambda i: env.step(action), calls)
    return {"llmgym": str(Path(llmgym.__file__).parent), "isolation": sandbox.isolation().as_dict(),
            "limits": dict(vars(sandbox.config)), "figures": figures}


def _paced(sandbox: Any, calls: int) -> dict[str, float]:
    """Latency of calls that come ``PACE_SECONDS`` apart; the rate counts only time inside calls."""
    latencies = []
    for _ in range(calls):
        time.sleep(PACE_SECONDS)
        start = time.perf_counter()
        sandbox.run("print(6 * 7)")
        latencies.append(time.perf_counter() - start)
    return latency_stats(latencies, sum(latencies))


def _baseline(ref: str, into: Path) -> str:
    """Unpack ``ref``'s ``llmgym`` package into ``into``; the commit it names."""
    commit = subprocess.run(["git", "rev-parse", ref], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout.strip()
    archive = subprocess.run(["git", "archive", commit, "llmgym"], cwd=REPO, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return commit


def _run_one(package_root: Path, calls: int, threads: int) -> dict[str, Any]:
    """:func:`measure` in a fresh process whose ``llmgym`` is the one under ``package_root``."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(package_root), str(REPO)])}
    completed = subprocess.run(  # cwd: ``-m`` puts it first on sys.path
        [sys.executable, "-m", "benchmarks.sandbox_throughput", "--measure", str(calls),
         "--threads", str(threads)],
        cwd=package_root, env=environment, capture_output=True, text=True, check=True)
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert Path(result["llmgym"]).parent == package_root, (result["llmgym"], package_root)
    return result


def _summary(rounds: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per figure: the median over rounds of the rate and of p50/p99."""
    names = rounds[0]["figures"]
    return {name: {key: statistics.median(run["figures"][name][key] for run in rounds)
                   for key in ("per_second", "p50_ms", "p99_ms")} for name in names}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls (20 instead of 60 per figure)")
    parser.add_argument("--threads", type=int, default=4, help="threads for the overlapped figure")
    parser.add_argument("--baseline-ref", default="main", help="git ref whose llmgym is measured as 'before'")
    parser.add_argument("--rounds", type=int, default=2, help="measurements of each implementation")
    parser.add_argument("--measure", type=int, metavar="CALLS", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure is not None:  # the child process of one measurement
        print(json.dumps(measure(args.measure, args.threads)))
        return
    calls = 20 if args.quick else 60
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    load_before = os.getloadavg()
    order = (["before", "after", "after", "before"] * args.rounds)[: 2 * args.rounds]
    with tempfile.TemporaryDirectory(prefix="llmgym-baseline-") as baseline:
        baseline_commit = _baseline(args.baseline_ref, Path(baseline))
        for label in order:
            runs[label].append(_run_one(Path(baseline) if label == "before" else REPO, calls, args.threads))
    summary = {label: _summary(rounds) for label, rounds in runs.items()}
    path = write_result("sandbox_throughput", {
        "baseline": {"ref": args.baseline_ref, "commit": baseline_commit}, "order": order, "calls": calls,
        "load_average": {"start": load_before, "end": os.getloadavg()}, "summary": summary, "runs": runs})
    rows = [(name, before["per_second"], summary["after"][name]["per_second"], before["p50_ms"],
             summary["after"][name]["p50_ms"])
            for name, before in summary["before"].items() if name in summary["after"]]
    rows += [(name, "-", after["per_second"], "-", after["p50_ms"])
             for name, after in summary["after"].items() if name not in summary["before"]]
    print(markdown_table(["call", "before calls/s", "after calls/s", "before p50 ms", "after p50 ms"], rows))
    print("before:", runs["before"][0]["isolation"])
    print("after:", runs["after"][0]["isolation"])
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
