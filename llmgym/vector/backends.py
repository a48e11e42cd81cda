"""Where a vector env's sub-envs live and run: in-process or on a thread pool.

A backend executes a batch of :class:`Op` (at most one per sub-env) and returns one result per
op, in order. A sub-env that raises yields a :class:`Failure` in its place instead of
aborting the batch, so the other sub-envs of the call still advance and the vector env can
keep its bookkeeping exact. Errors that leave a backend unusable (a hung or dead worker) are
raised as :class:`BackendFailure`.

The process backend lives in :mod:`llmgym.vector.process`; it runs the same
:class:`SubEnvSet` inside each worker.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NamedTuple, Protocol

import gymnasium as gym

#: ``reset``: ``env.reset(seed, options)``; ``step``: ``env.step(action)``;
#: ``step_reset``: step, and reset at once when the episode ends (``SAME_STEP`` autoreset);
#: ``call``: read an attribute of the sub-env, or call it when it is a method.
OpKind = Literal["reset", "step", "step_reset", "call"]


class Op(NamedTuple):
    """One operation on one sub-env; ``args`` depends on ``kind`` (see :func:`run_op`)."""

    kind: OpKind
    index: int
    args: tuple[Any, ...]


class Failure(NamedTuple):
    """A sub-env raised while running an op; the traceback is kept as text across processes."""

    index: int
    error_type: str
    message: str
    traceback: str


class BackendFailure(Exception):
    """The backend cannot go on: ``reason`` is ``"timeout"`` or ``"died"``; ``index`` the sub-env."""

    def __init__(self, reason: Literal["timeout", "died"], index: int, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.index = index
        self.detail = detail


class Backend(Protocol):
    """What :class:`llmgym.vector.TextVectorEnv` needs from a backend."""

    def run(self, ops: Sequence[Op]) -> list[Any]:
        """Run ``ops`` and block until every result (or :class:`Failure`) is in."""

    async def arun(self, ops: Sequence[Op]) -> list[Any]:
        """Like :meth:`run`, without blocking the running event loop."""

    def close(self) -> None:
        """End every sub-env and worker; safe to call more than once and after errors."""


def run_op(env: gym.Env, op: Op) -> Any:
    """Execute ``op`` on ``env``; results are the Gymnasium tuples (``call``: the value)."""
    if op.kind == "step":
        return env.step(op.args[0])
    if op.kind == "reset":
        seed, options = op.args
        return env.reset(seed=seed, options=options)
    if op.kind == "step_reset":
        observation, reward, terminated, truncated, info = env.step(op.args[0])
        if terminated or truncated:
            final_observation, final_info = observation, info
            observation, reset_info = env.reset()
            # The layout Gymnasium's vector envs give SAME_STEP infos.
            info = {"final_obs": final_observation, "final_info": final_info, **reset_info}
        return observation, reward, terminated, truncated, info
    if op.kind == "call":
        name, args, kwargs = op.args
        attribute = env.get_wrapper_attr(name)
        return attribute(*args, **kwargs) if callable(attribute) else attribute
    raise AssertionError(f"unknown op kind {op.kind!r}")


class SubEnvSet:
    """Some sub-envs by their index in the vector env; runs ops on them, catching their errors."""

    def __init__(self, envs: dict[int, gym.Env]) -> None:
        self.envs = envs

    def run_one(self, op: Op) -> Any:
        try:
            return run_op(self.envs[op.index], op)
        except Exception as error:  # a sub-env's bug must not take the others down
            return Failure(op.index, type(error).__name__, str(error), traceback.format_exc())

    def run(self, ops: Sequence[Op], on_start: Callable[[int], None] | None = None) -> list[Any]:
        results = []
        for op in ops:
            if on_start is not None:
                on_start(op.index)
            results.append(self.run_one(op))
        return results

    def close(self) -> None:
        for env in self.envs.values():
            try:
                env.close()
            except Exception:  # closing must reach every sub-env
                pass


class SubEnvConstructionError(Exception):
    """A sub-env factory raised; ``failure`` says which and why."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def build_sub_envs(
    env_fns: Mapping[int, Callable[[], gym.Env]], on_start: Callable[[int], None] | None = None
) -> SubEnvSet:
    """Construct the sub-envs ``{index: factory}`` (``on_start(index)`` before each).

    Raises:
        SubEnvConstructionError: carrying the :class:`Failure` of the first factory that raised,
            after closing the sub-envs already built.
    """
    envs: dict[int, gym.Env] = {}
    for index, env_fn in env_fns.items():
        if on_start is not None:
            on_start(index)
        try:
            envs[index] = env_fn()
        except Exception as error:
            SubEnvSet(envs).close()
            raise SubEnvConstructionError(
                Failure(index, type(error).__name__, str(error), traceback.format_exc())
            ) from error
    return SubEnvSet(envs)


class InlineBackend:
    """Every sub-env in this process, run one after the other.

    The async methods run the batch on one helper thread, so the event loop stays free while
    the sub-envs work (the GIL is released between bytecodes, so other coroutines progress).
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]]) -> None:
        self._sub_envs = build_sub_envs(dict(enumerate(env_fns)))
        self._helper: concurrent.futures.ThreadPoolExecutor | None = None

    @property
    def envs(self) -> list[gym.Env]:
        return list(self._sub_envs.envs.values())

    def run(self, ops: Sequence[Op]) -> list[Any]:
        return self._sub_envs.run(ops)

    async def arun(self, ops: Sequence[Op]) -> list[Any]:
        if self._helper is None:
            self._helper = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="llmgym-inline")
        return await asyncio.get_running_loop().run_in_executor(self._helper, self._sub_envs.run, ops)

    def close(self) -> None:
        if self._helper is not None:
            self._helper.shutdown(wait=True)
            self._helper = None
        self._sub_envs.close()


class ThreadBackend:
    """Every sub-env in this process; the ops of one call run concurrently on a thread pool.

    Worth it when sub-envs wait on I/O (subprocesses, sockets) with the GIL released; for
    CPU-bound pure-Python envs the GIL makes it slower than :class:`InlineBackend`.
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], num_workers: int) -> None:
        self._sub_envs = build_sub_envs(dict(enumerate(env_fns)))
        self._pool = concurrent.futures.ThreadPoolExecutor(num_workers, thread_name_prefix="llmgym-vector")

    @property
    def envs(self) -> list[gym.Env]:
        return list(self._sub_envs.envs.values())

    def run(self, ops: Sequence[Op]) -> list[Any]:
        return [future.result() for future in self._submit(ops)]

    async def arun(self, ops: Sequence[Op]) -> list[Any]:
        return list(await asyncio.gather(*(asyncio.wrap_future(future) for future in self._submit(ops))))

    def _submit(self, ops: Sequence[Op]) -> list[concurrent.futures.Future[Any]]:
        return [self._pool.submit(self._sub_envs.run_one, op) for op in ops]

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._sub_envs.close()
