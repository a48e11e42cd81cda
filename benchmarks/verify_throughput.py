"""Math answer verification: verifications/s and latency (p50/p99) on each path.

* ``fast``: answers that read as exact numbers (``\\boxed{7/4}``, ``1,000``, ``0.5``), decided
  in-process; this is what most verifications of generated problems take.
* ``worker``: answers that need math-verify (``2^{3}``, ``3 \\cdot 4``), sent to a warm worker
  process; measured from one thread and from ``--threads`` threads sharing the pool.
* ``hostile``: ``\\boxed{9^{9^{9^{9}}}}``, which must come back wrong within the timeout.
* ``Math-v0`` steps/s with reference answers (parse + verify + feedback).

Usage: ``python -m benchmarks.verify_throughput [--quick]``. Writes
``benchmarks/results/verify_throughput.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

from benchmarks.common import markdown_table, write_result
from llmgym.core import level_rng
from llmgym.envs.math import DIFFICULTIES, AnswerVerifier, MathEnv, generate_problem


HOSTILE = "\\boxed{9^{9^{9^{9}}}}"


def latency_stats(latencies: Sequence[float], wall: float, threads: int = 1) -> dict[str, float]:
    """Rate over the wall time, and p50/p99 per-call latency in milliseconds."""
    ordered = sorted(latencies)
    return {
        "per_second": len(ordered) / wall,
        "p50_ms": 1000 * statistics.median(ordered),
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
        "calls": len(ordered),
        "threads": threads,
    }


def table_rows(figures: dict[str, dict[str, float]]) -> list[tuple[object, ...]]:
    """One Markdown row per figure: name, rate, p50, p99, threads, calls."""
    return [(name, figure["per_second"], figure["p50_ms"], figure["p99_ms"], figure["threads"], figure["calls"])
            for name, figure in figures.items()]


def timed_calls(call: Callable[[int], object], count: int, threads: int = 1) -> dict[str, float]:
    """Run ``call(i)`` for ``i < count`` on ``threads`` threads; rate and latency figures."""
    latencies: list[float] = []

    def one(index: int) -> None:
        start = time.perf_counter()
        call(index)
        latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    if threads == 1:
        for index in range(count):
            one(index)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, range(count)))
    return latency_stats(latencies, time.perf_counter() - start, threads)


def fast_cases(count: int) -> list[tuple[str, str]]:
    """(gold, answer) pairs in number forms the fast path decides, from generated problems."""
    cases = []
    for index in range(count):
        problem = generate_problem(level_rng(index), DIFFICULTIES[index % 3])
        value = Fraction(problem.answer)
        latex = f"\\frac{{{value.numerator}}}{{{value.denominator}}}"
        form = latex if index % 2 else f"x = {problem.answer}"
        cases.append((problem.answer, form))
    return cases


def worker_cases(count: int) -> list[tuple[str, str]]:
    """(gold, answer) pairs that need math-verify: powers and products written in LaTeX."""
    cases = []
    for index in range(count):
        base, exponent = 2 + index % 5, 2 + index % 3
        cases.append((str(base**exponent), f"{base}^{{{exponent}}}") if index % 2 else
                     (str(base * (index + 3)), f"{base} \\cdot {index + 3}"))
    return cases


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls")
    parser.add_argument("--threads", type=int, default=2, help="threads for the shared-pool figure")
    args = parser.parse_args(argv)
    scale = 1 if args.quick else 4

    verifier = AnswerVerifier(timeout=5.0, workers=args.threads)
    verifier.warm_up()
    fast = fast_cases(5000 * scale)
    slow = worker_cases(50 * scale)
    figures = {
        "fast": timed_calls(lambda i: verifier.verify(*fast[i]), len(fast)),
        "worker": timed_calls(lambda i: verifier.verify(*slow[i]), len(slow)),
        "worker_threads": timed_calls(lambda i: verifier.verify(*slow[i]), len(slow), threads=args.threads),
        "hostile": timed_calls(lambda i: verifier.verify("3", HOSTILE), 2 if args.quick else 3),
    }
    assert all(verifier.verify(*case).correct for case in slow[:10])
    env = MathEnv()
    levels = []
    for seed in range(2000 * scale):
        env.reset(seed=seed)
        levels.append((env.level(), f"<answer>{env.solution()[0]}</answer>"))

    def play(index: int) -> None:
        env.reset(options={"level": levels[index][0]})
        env.step(levels[index][1])

    figures["math_v0_episodes"] = timed_calls(play, len(levels))
    verifier.close()
    path = write_result("verify_throughput", {"verifier_timeout_s": verifier.timeout,
                                              "backend": verifier.backend, "figures": figures})
    header = ["path", "verifications/s", "p50 ms", "p99 ms", "threads", "calls"]
    print(markdown_table(header, table_rows(figures)))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
