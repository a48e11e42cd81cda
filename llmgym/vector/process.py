"""The process backend: worker processes, each owning a contiguous shard of the sub-envs.

One message per worker per call (the ops of its shard) and one reply, over a
:func:`multiprocessing.Pipe`. Sub-envs are built inside their worker, so nothing but their
factory crosses the process boundary.

Start method: ``forkserver`` by default. ``fork`` copies the parent as it is, including the
locks held by its other threads (torch's and OpenMP's pools, a tokenizer's, the asyncio
executor's), and a child that touches such a lock hangs forever; a trainer has all of these
running. ``forkserver`` forks workers from a small server process started clean, so it is safe
beside threads, and after the server's one-time start a worker starts in milliseconds instead
of the full interpreter start of ``spawn`` (a worker still imports what the server has not:
the env's own modules). Like ``spawn``, it imports the main module once, in the server:
scripts need the ``if __name__ == "__main__":`` guard, and a script that imports torch at
the top pays that import once more there.

Timeouts: each worker publishes, in shared memory, the sub-env it is running and since when.
The parent waits on the pipes in slices and, when a sub-env has run longer than
``step_timeout``, kills every worker and raises; the other workers' results of that call are
dropped. A worker that dies shows as end-of-file on its pipe; a worker whose parent dies sees
the pipe hang up and exits, even in the middle of a step (no orphans).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import multiprocessing.connection
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import CloudpickleWrapper

from llmgym.vector.backends import BackendFailure, Op, SubEnvConstructionError, build_sub_envs

StartMethod = Literal["forkserver", "spawn", "fork"]

#: Seconds a worker gets to exit after the close message before it is terminated.
_CLOSE_GRACE = 2.0
#: Longest single wait while a call runs; bounds how late a dead worker is noticed.
_POLL_SLICE = 1.0
_IDLE = -1.0


def shard_indices(num_envs: int, num_workers: int) -> list[range]:
    """Contiguous, near-equal shards; consecutive sub-envs (a seeding group) share a worker."""
    bounds = np.linspace(0, num_envs, num_workers + 1).round().astype(int)
    return [range(start, stop) for start, stop in zip(bounds[:-1], bounds[1:]) if stop > start]


class ProcessBackend:
    """Sub-envs in ``num_workers`` worker processes (see the module docstring)."""

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        num_workers: int,
        context: StartMethod,
        step_timeout: float | None,
    ) -> None:
        self._ctx = multiprocessing.get_context(context)
        self._step_timeout = step_timeout
        self._shards = shard_indices(len(env_fns), num_workers)
        self._owner = np.empty(len(env_fns), dtype=np.int64)
        for worker, shard in enumerate(self._shards):
            self._owner[shard.start : shard.stop] = worker
        self._conns: list[Connection] = []
        self._processes: list[multiprocessing.process.BaseProcess] = []
        # Per worker: (index of the sub-env it runs or -1, time.monotonic() when it started).
        self._progress = self._ctx.RawArray("d", 2 * len(self._shards))
        try:
            self._start_workers(env_fns)
        except BaseException:
            self.close()
            raise

    @property
    def pids(self) -> list[int]:
        """Process ids of the workers (for monitoring, and for tests that check clean-up)."""
        return [process.pid for process in self._processes if process.pid is not None]

    def _start_workers(self, env_fns: Sequence[Callable[[], gym.Env]]) -> None:
        for worker, shard in enumerate(self._shards):
            self._progress[2 * worker] = _IDLE
            parent_end, child_end = self._ctx.Pipe()
            factories = [(index, CloudpickleWrapper(env_fns[index])) for index in shard]
            process = self._ctx.Process(
                target=_worker_main,
                args=(child_end, factories, self._progress, worker),
                name=f"llmgym-vector-worker-{worker}",
                daemon=True,
            )
            process.start()
            child_end.close()
            self._conns.append(parent_end)
            self._processes.append(process)
        for worker, conn in enumerate(self._conns):
            status, payload = self._receive(worker, conn)
            if status == "error":
                raise SubEnvConstructionError(payload)

    # ------------------------------------------------------------------ running ops
    def run(self, ops: Sequence[Op]) -> list[Any]:
        waiting = self._send(ops)
        replies: dict[int, list[Any]] = {}
        while waiting:
            timeout = self._wait_budget(waiting)
            ready = multiprocessing.connection.wait([self._conns[w] for w in waiting], timeout)
            for conn in ready:
                worker = self._conns.index(conn)  # type: ignore[arg-type]
                replies[worker] = self._receive(worker, conn)[1]
                waiting.discard(worker)
            self._check_timeouts(waiting)
        return _in_order(ops, replies)

    async def arun(self, ops: Sequence[Op]) -> list[Any]:
        waiting = self._send(ops)
        loop = asyncio.get_running_loop()
        readable = asyncio.Event()
        ready: set[int] = set()

        def on_readable(worker: int) -> None:
            ready.add(worker)
            loop.remove_reader(self._conns[worker].fileno())
            readable.set()

        for worker in waiting:
            loop.add_reader(self._conns[worker].fileno(), on_readable, worker)
        replies: dict[int, list[Any]] = {}
        try:
            while waiting:
                try:
                    await asyncio.wait_for(readable.wait(), self._wait_budget(waiting))
                except TimeoutError:
                    pass
                readable.clear()
                for worker in list(ready):
                    replies[worker] = self._receive(worker, self._conns[worker])[1]
                    waiting.discard(worker)
                ready.clear()
                self._check_timeouts(waiting)
        finally:
            for worker in waiting:
                loop.remove_reader(self._conns[worker].fileno())
        return _in_order(ops, replies)

    def _send(self, ops: Sequence[Op]) -> set[int]:
        by_worker: dict[int, list[Op]] = {}
        for op in ops:
            by_worker.setdefault(int(self._owner[op.index]), []).append(op)
        for worker, worker_ops in by_worker.items():
            try:
                self._conns[worker].send(worker_ops)
            except (BrokenPipeError, ConnectionResetError, EOFError):
                raise self._died(worker) from None
        return set(by_worker)

    def _receive(self, worker: int, conn: Connection) -> tuple[str, Any]:
        try:
            return conn.recv()
        except (EOFError, ConnectionResetError):
            raise self._died(worker) from None

    def _wait_budget(self, waiting: set[int]) -> float:
        """Seconds until the earliest running sub-env's deadline (at most one poll slice)."""
        if self._step_timeout is None:
            return _POLL_SLICE
        now = time.monotonic()
        budget = _POLL_SLICE
        for worker in waiting:
            index, started = self._progress[2 * worker], self._progress[2 * worker + 1]
            if index != _IDLE:
                budget = min(budget, started + self._step_timeout - now)
        return max(budget, 0.0)

    def _check_timeouts(self, waiting: set[int]) -> None:
        for worker in waiting:
            if not self._processes[worker].is_alive():
                raise self._died(worker)
        if self._step_timeout is None:
            return
        now = time.monotonic()
        for worker in waiting:
            index = self._progress[2 * worker]
            started = self._progress[2 * worker + 1]
            if index != _IDLE and now - started > self._step_timeout:
                raise BackendFailure(
                    "timeout",
                    int(index),
                    f"worker {worker} (pid {self._processes[worker].pid}) ran it for more than "
                    f"step_timeout={self._step_timeout} s",
                )

    def _died(self, worker: int) -> BackendFailure:
        """The failure for a worker found dead; it names the sub-env it was running, if any."""
        process = self._processes[worker]
        process.join(_CLOSE_GRACE)  # its pipe is closed: it is gone or going; this reads the exit code
        shard = self._shards[worker]
        running = int(self._progress[2 * worker])
        doing = f"while working on sub-env {running}" if running != _IDLE else "between calls"
        return BackendFailure(
            "died",
            running if running != _IDLE else shard.start,
            f"worker {worker} (pid {process.pid}, sub-envs {shard.start}..{shard.stop - 1}) died {doing} "
            f"(exit code {process.exitcode})",
        )

    # ------------------------------------------------------------------ shutting down
    def close(self) -> None:
        """Ask every worker to exit; terminate, then kill, whoever does not within the grace period."""
        for conn in self._conns:
            try:
                conn.send(None)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + _CLOSE_GRACE
        for process in self._processes:
            process.join(max(deadline - time.monotonic(), 0.0))
        for process in self._processes:
            if process.is_alive():
                process.terminate()
                process.join(1.0)
            if process.is_alive():
                process.kill()
                process.join()
        for conn in self._conns:
            conn.close()
        for process in self._processes:
            process.close()
        self._conns, self._processes = [], []

    def kill(self) -> None:
        """End every worker at once (after a timeout or death: their state is lost anyway)."""
        for process in self._processes:
            if process.is_alive():
                process.kill()
        for process in self._processes:
            process.join()
        self.close()


def _in_order(ops: Sequence[Op], replies: dict[int, list[Any]]) -> list[Any]:
    by_index = {}
    for worker_results in replies.values():
        for result in worker_results:
            by_index[result[0]] = result[1]
    return [by_index[op.index] for op in ops]


def _worker_main(
    conn: Connection,
    factories: list[tuple[int, CloudpickleWrapper]],
    progress: Any,
    worker: int,
) -> None:
    """A worker's life: build its shard, then run op batches until told to stop or orphaned."""
    # Ctrl-C reaches the whole process group; the parent decides what to do and closes us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _exit_when_orphaned(conn)

    def on_start(index: int) -> None:
        progress[2 * worker + 1] = time.monotonic()
        progress[2 * worker] = index

    try:
        sub_envs = build_sub_envs({index: factory.fn for index, factory in factories}, on_start)
    except SubEnvConstructionError as error:
        conn.send(("error", error.failure))
        return
    progress[2 * worker] = _IDLE
    conn.send(("ready", None))

    try:
        while True:
            try:
                ops = conn.recv()
            except (EOFError, ConnectionResetError):  # the parent is gone
                return
            if ops is None:
                return
            results = sub_envs.run(ops, on_start)
            progress[2 * worker] = _IDLE
            conn.send(("ok", [(op.index, result) for op, result in zip(ops, results)]))
    except (BrokenPipeError, ConnectionResetError):
        return
    finally:
        sub_envs.close()
        conn.close()


def _exit_when_orphaned(conn: Connection) -> None:
    """End this worker as soon as the parent's end of the pipe closes, even in the middle of a step.

    Without it an orphaned worker (its parent was killed) would notice only at its next pipe
    read, which a hung step never reaches. The parent is watched through the pipe rather than
    by pid or parent-death signal because under ``forkserver`` the worker's parent process is
    the fork server, which outlives a killed vector env while its workers hold it open.
    """
    hang_up = getattr(select, "POLLRDHUP", 0) | select.POLLHUP
    poller = select.poll()
    poller.register(conn.fileno(), hang_up)

    def watch() -> None:
        while True:
            if any(events & hang_up for _, events in poller.poll()):
                os._exit(1)

    threading.Thread(target=watch, name="llmgym-orphan-watch", daemon=True).start()


__all__ = ["ProcessBackend", "StartMethod", "shard_indices"]
