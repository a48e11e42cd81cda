"""Python sandbox: calls/s and latency (p50/p99), and which isolation features hold here.

Each call is a fresh, fully isolated process (see :mod:`llmgym.envs.tool_use.sandbox`):
the figures are the price of that isolation. Measured:

* ``print``: ``print(6 * 7)``, the smallest call, from one thread and from ``--threads``
  threads (calls overlap: the wait on the subprocess releases the GIL);
* ``compute``: a sieve of primes below 200,000, a typical tool-use computation;
* ``tool_use_step``: a ``ToolUse-Python-v0`` step that runs one python tool call.

Usage: ``python -m benchmarks.sandbox_throughput [--quick]``. Writes
``benchmarks/results/sandbox_throughput.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse

from benchmarks.common import markdown_table, write_result
from benchmarks.verify_throughput import table_rows, timed_calls
from llmgym.envs.tool_use import PythonSandbox, ToolUseEnv
from llmgym.envs.tool_use.tasks import tool_call

SIEVE = ("n = 200_000\nsieve = bytearray([1]) * n\nsieve[:2] = b'\\x00\\x00'\n"
         "for i in range(2, int(n ** 0.5) + 1):\n"
         "    if sieve[i]:\n        sieve[i*i::i] = bytearray(len(range(i*i, n, i)))\nprint(sum(sieve))")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls")
    parser.add_argument("--threads", type=int, default=4, help="threads for the overlapped figure")
    args = parser.parse_args(argv)
    calls = 20 if args.quick else 60

    sandbox = PythonSandbox()
    assert sandbox.run("print(6 * 7)").stdout.strip() == "42"  # warm-up, and a check
    figures = {
        "print": timed_calls(lambda i: sandbox.run("print(6 * 7)"), calls),
        "print_threads": timed_calls(lambda i: sandbox.run("print(6 * 7)"), calls, threads=args.threads),
        "compute": timed_calls(lambda i: sandbox.run(SIEVE), calls // 2),
    }
    env = ToolUseEnv(task="python", max_turns=None)
    env.reset(seed=0)
    action = tool_call("python", code="print(sum(range(10**5)))")
    figures["tool_use_step"] = timed_calls(lambda i: env.step(action), calls)
    isolation = sandbox.isolation().as_dict()
    path = write_result("sandbox_throughput", {"isolation": isolation, "limits": sandbox.config.__dict__,
                                               "figures": figures})
    print(markdown_table(["call", "calls/s", "p50 ms", "p99 ms", "threads", "calls"], table_rows(figures)))
    print("isolation:", isolation)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
