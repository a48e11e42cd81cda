"""llmgym's vector env: Gymnasium's VectorEnv contract plus async, partial and grouped calls."""

from __future__ import annotations

import asyncio
import copy
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import gymnasium as gym
import numpy as np
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from llmgym.error import (
    Error,
    InvalidOptionError,
    ResetNeeded,
    SnapshotMismatch,
    SnapshotNotSupported,
    SubEnvError,
    SubEnvTimeout,
    UnknownOptionError,
    WorkerDiedError,
    did_you_mean,
)
from llmgym.vector.backends import (
    Backend,
    BackendFailure,
    Failure,
    InlineBackend,
    Op,
    SubEnvConstructionError,
    ThreadBackend,
)
from llmgym.vector.infos import batch_infos
from llmgym.vector.process import ProcessBackend, StartMethod

BackendName = Literal["inline", "thread", "process", "ray", "jax"]
BACKENDS: tuple[str, ...] = get_args(BackendName)
START_METHODS: tuple[str, ...] = get_args(StartMethod)
#: The options :func:`make_vector_env` keeps for itself; every other keyword goes to the env.
VECTOR_OPTIONS = ("backend", "num_workers", "step_timeout", "autoreset_mode", "context")
#: Reset options the vector env consumes instead of passing them to the sub-envs.
GROUP_SIZE, RESET_MASK = "group_size", "reset_mask"
#: Errors of a sub-env's snapshot call that the vector env raises with their own type.
_SNAPSHOT_ERRORS: dict[str, type[Error]] = {
    error.__name__: error for error in (SnapshotNotSupported, SnapshotMismatch)
}
#: Thread backend default pool size: enough to overlap many waiting tool calls.
_MAX_DEFAULT_THREADS = 32

Observations = tuple[str, ...]
StepResult = tuple[Observations, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]


class TextVectorEnv(VectorEnv[Observations, Sequence[str], np.ndarray]):
    """``num_envs`` text envs stepped as one batch, on the backend of your choice.

    Batches follow Gymnasium for ``Text`` spaces: observations are a tuple of ``num_envs``
    strings (the space is a ``Tuple`` of ``Text``), actions any sequence of ``num_envs``
    strings; rewards, terminations and truncations are NumPy arrays; infos a dict of arrays
    with ``_key`` masks. With every sub-env stepped, results equal Gymnasium's
    ``SyncVectorEnv`` over the same envs and seeds, in each :class:`AutoresetMode`.

    Beyond Gymnasium:

    * ``step(actions, mask=...)`` steps only the sub-envs where ``mask`` is True. The others
      are not touched and report "nothing happened": their current observation, reward 0,
      ``terminated`` and ``truncated`` False, and no ``info`` entries (their ``_key`` masks are
      False). Summing rewards or counting episode ends over calls therefore counts each once.
      ``reset(mask=...)`` (or Gymnasium's ``options={"reset_mask": ...}``) likewise resets
      only the masked sub-envs.
    * ``reset(seed=s, options={"group_size": g})`` gives sub-envs ``k*g .. k*g+g-1`` the seed
      ``s + k``: each group of ``g`` consecutive sub-envs plays one level, distinct groups
      distinct levels (with ``seed=None`` a base seed is drawn from :attr:`np_random`).
      Other options go to every sub-env; a sequence of ``num_envs`` dicts gives each its own.
      An autoreset continues a sub-env's own random stream, so groups stay in step only while
      their members autoreset alike: for a fresh level per group, reset with ``group_size`` again.
    * ``await astep(...)`` / ``await areset(...)``: the same calls without blocking the event
      loop, so generation can run while the sub-envs work. One call at a time may be in
      flight; cancelling one closes the vector env (its sub-envs are mid-call).
    * Autoreset ``DISABLED``: an ended episode stays ended (:attr:`needs_reset`) until
      ``reset(mask=...)``; stepping it raises :class:`llmgym.error.ResetNeeded`.
    * Snapshots: ``get_state(indices)`` returns each sub-env's ``get_state()`` (picklable, see
      :class:`llmgym.core.EnvState`) and ``set_state(states, indices)`` restores them, into the
      same sub-envs or others made with the same id, on any backend; see :meth:`set_state`.
      ``await aget_state(...)`` / ``await aset_state(...)`` do the same from an event loop.

    Failures: a sub-env that raises surfaces as :class:`llmgym.error.SubEnvError` naming its
    index and seed, with the original traceback; the other sub-envs of that call did run, and
    the failed one must be reset before it is stepped again. On the process backend a sub-env
    call longer than ``step_timeout`` raises ``TimeoutError`` and a dead worker
    :class:`llmgym.error.WorkerDiedError`; both stop every worker and close the vector env.
    ``close()`` always ends every worker, and a worker whose vector env's process dies exits
    at once, even mid-step.

    Args:
        env_fns: one factory per sub-env. For the process backend they must pickle (lambdas
            and closures do, through cloudpickle) and are called in the workers.
        backend: ``"inline"``, ``"thread"``, ``"process"``, ``"ray"`` or ``"jax"`` (FrozenLake and
            Sokoban ids; see :mod:`llmgym.vector`); ``"ray"`` is
            :class:`~llmgym.vector.ray_backend.RayEnvBackend` with its defaults, and an instance of
            it (or any backend object with ``start``) sets its options.
        num_workers: threads or worker processes. Default: ``min(num_envs, 32)`` threads, or
            one process per CPU core (at most ``num_envs``).
        step_timeout: seconds one sub-env's ``step``/``reset``/``call`` may take (process
            backend only: only a process can be stopped from outside).
        autoreset_mode: a :class:`gymnasium.vector.AutoresetMode` or its value. Default
            ``NEXT_STEP`` as in Gymnasium; LLM rollouts usually want ``DISABLED``.
        context: the multiprocessing start method of the process backend (see
            :mod:`llmgym.vector.process` for why ``forkserver`` is the default).
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        *,
        backend: BackendName = "inline",
        num_workers: int | None = None,
        step_timeout: float | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        context: StartMethod = "forkserver",
    ) -> None:
        if len(env_fns) < 1:
            raise InvalidOptionError(f"A vector env needs at least one sub-env; got {len(env_fns)} env_fns.")
        self.num_envs = len(env_fns)
        self.autoreset_mode = _autoreset_mode(autoreset_mode)
        self._backend: Backend | None = None
        if backend == "ray":
            from llmgym.vector.ray_backend import RayEnvBackend

            backend = RayEnvBackend()  # type: ignore[assignment]
        elif backend == "jax":  # FrozenLake and Sokoban stepped in JAX; needs the jax extra
            from llmgym.vector.jax_backend import JaxEnvBackend

            backend = JaxEnvBackend()  # type: ignore[assignment]
        if callable(getattr(backend, "start", None)):  # a backend spec such as ray_backend.RayEnvBackend
            self.backend_name = backend.name  # type: ignore[attr-defined]
            self._backend = backend.start(env_fns, num_workers, step_timeout, self._describe)  # type: ignore[attr-defined]
        else:
            self.backend_name: BackendName = _check_backend(backend, num_workers, step_timeout, context)
            self._backend = self._start_backend(env_fns, backend, num_workers, step_timeout, context)
        self._observations: list[str] = ["" for _ in range(self.num_envs)]
        # Sub-envs whose episode ended (DISABLED: awaiting reset; NEXT_STEP: pending autoreset).
        self._needs_reset = np.zeros(self.num_envs, dtype=np.bool_)
        self._started = np.zeros(self.num_envs, dtype=np.bool_)
        self._failed = np.zeros(self.num_envs, dtype=np.bool_)
        # The seed of each sub-env's last reset and the autoresets since: enough to replay it.
        self._seeds: list[int | None] = [None] * self.num_envs
        self._autoresets = np.zeros(self.num_envs, dtype=np.int64)
        self._busy = False
        self._closed_because: str | None = None

    def _start_backend(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        backend: BackendName,
        num_workers: int | None,
        step_timeout: float | None,
        context: StartMethod,
    ) -> Backend:
        try:
            if backend == "process":
                probe = env_fns[0]()  # spaces and metadata; the sub-envs live in the workers
                self._describe(probe)
                probe.close()
                workers = num_workers or min(self.num_envs, _cpu_count())
                return ProcessBackend(env_fns, workers, context, step_timeout)
            if backend == "thread":
                started: InlineBackend | ThreadBackend = ThreadBackend(
                    env_fns, num_workers or min(self.num_envs, _MAX_DEFAULT_THREADS)
                )
            else:
                started = InlineBackend(env_fns)
        except SubEnvConstructionError as error:
            raise _sub_env_error([error.failure], "construction", [None] * self.num_envs, None) from None
        except BackendFailure as failure:  # a worker died while building its sub-envs
            raise WorkerDiedError(
                f"A worker died while building its sub-envs: {failure.detail}. Every worker was "
                "stopped. Check that the env can be built in a fresh process (its imports, memory).",
                index=failure.index, seed=None,
            ) from None
        self._describe(started.envs[0])
        return started

    def _describe(self, env: gym.Env) -> None:
        """Spaces and metadata from one sub-env, batched the Gymnasium way."""
        self.metadata = {**env.metadata, "autoreset_mode": self.autoreset_mode}
        self.render_mode = env.render_mode
        self.single_observation_space = env.observation_space
        self.single_action_space = env.action_space
        self.observation_space = batch_space(env.observation_space, self.num_envs)
        self.action_space = batch_space(env.action_space, self.num_envs)

    # ------------------------------------------------------------------ the Gymnasium API
    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        mask: np.ndarray | Sequence[bool] | None = None,
    ) -> tuple[Observations, dict[str, Any]]:
        """Reset the sub-envs in ``mask`` (default all); see the class docstring for seeding."""
        ops = self._plan_reset(seed, options, mask)
        return self._finish_reset(ops, self._execute(ops, "reset"))

    def step(self, actions: Sequence[str], mask: np.ndarray | Sequence[bool] | None = None) -> StepResult:
        """Step the sub-envs in ``mask`` (default all); ``actions[i]`` is ignored where unmasked."""
        ops = self._plan_step(actions, mask)
        return self._finish_step(ops, self._execute(ops, "step"))

    async def areset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        mask: np.ndarray | Sequence[bool] | None = None,
    ) -> tuple[Observations, dict[str, Any]]:
        """:meth:`reset` without blocking the event loop."""
        ops = self._plan_reset(seed, options, mask)
        return self._finish_reset(ops, await self._aexecute(ops, "reset"))

    async def astep(
        self, actions: Sequence[str], mask: np.ndarray | Sequence[bool] | None = None
    ) -> StepResult:
        """:meth:`step` without blocking the event loop."""
        ops = self._plan_step(actions, mask)
        return self._finish_step(ops, await self._aexecute(ops, "step"))

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` of every sub-env (or read the attribute) and return the results."""
        self._check_usable()
        ops = [Op("call", index, (name, args, kwargs)) for index in range(self.num_envs)]
        return tuple(self._run_calls(ops, f"call({name!r})"))

    async def acall_each(
        self, name: str, arguments: Sequence[tuple[tuple[Any, ...], dict[str, Any]]], indices: Sequence[int]
    ) -> list[Any]:
        """Call method ``name`` of sub-env ``indices[k]`` with ``arguments[k]`` (``(args, kwargs)``), without blocking.

        For calls that read a sub-env and leave it as it was, such as a lookahead's
        :meth:`~llmgym.core.TextEnv.random_rollout_returns`; the results come in ``indices``' order.
        """
        self._check_usable()
        selected = self._indices(indices, f"call({name!r})")
        if len(arguments) != len(selected):
            raise InvalidOptionError(
                f"call({name!r}) needs one (args, kwargs) per index: got {len(arguments)} for {len(selected)} sub-envs."
            )
        ops = [Op("call", index, (name, tuple(args), dict(kwargs))) for index, (args, kwargs) in zip(selected, arguments)]
        return self._check_calls(await self._aexecute(ops, f"call({name!r})"), f"call({name!r})")

    def get_state(self, indices: Sequence[int] | None = None) -> list[Any]:
        """Snapshots of the sub-envs ``indices`` (default all), in that order.

        Each is the sub-env's ``get_state()``: picklable, restorable with :meth:`set_state`
        into any sub-env of a vector env of the same id, in this process or another.

        Raises:
            SnapshotNotSupported: a sub-env cannot snapshot (the message names it and why).
        """
        self._check_usable()
        return self._check_calls(self._execute(self._get_state_ops(indices), "get_state"), "get_state")

    async def aget_state(self, indices: Sequence[int] | None = None) -> list[Any]:
        """:meth:`get_state` without blocking the event loop."""
        self._check_usable()
        return self._check_calls(await self._aexecute(self._get_state_ops(indices), "get_state"), "get_state")

    def set_state(self, states: Sequence[Any], indices: Sequence[int] | None = None) -> None:
        """Restore ``states[k]`` into sub-env ``indices[k]`` (default: sub-env ``k``).

        Afterwards each restored sub-env is where its snapshot was: its current observation
        (what a step that leaves it out reports) is the snapshot's, and an ended episode is
        ended (``needs_reset``, or an autoreset at its next step under ``NEXT_STEP``). A
        sub-env never reset is reset once first (``gym.make``'s wrappers want that).

        Raises:
            SnapshotMismatch: a state is not a snapshot of this id's env.
        """
        selected, never_reset = self._plan_set_state(states, indices)
        if never_reset.any():
            self.reset(mask=never_reset)
        ops = self._set_state_ops(states, selected)
        self._check_calls(self._execute(ops, "set_state"), "set_state")
        self._restored(states, selected)

    async def aset_state(self, states: Sequence[Any], indices: Sequence[int] | None = None) -> None:
        """:meth:`set_state` without blocking the event loop."""
        selected, never_reset = self._plan_set_state(states, indices)
        if never_reset.any():
            await self.areset(mask=never_reset)
        ops = self._set_state_ops(states, selected)
        self._check_calls(await self._aexecute(ops, "set_state"), "set_state")
        self._restored(states, selected)

    def _get_state_ops(self, indices: Sequence[int] | None) -> list[Op]:
        return [Op("call", index, ("get_state", (), {})) for index in self._indices(indices, "get_state")]

    def _plan_set_state(self, states: Sequence[Any], indices: Sequence[int] | None) -> tuple[list[int], np.ndarray]:
        """The sub-envs to restore, and those among them never reset (reset first)."""
        self._check_usable()
        selected = self._indices(indices, "set_state")
        if len(states) != len(selected):
            raise InvalidOptionError(
                f"set_state needs one state per index: got {len(states)} states for {len(selected)} sub-envs."
            )
        never_reset = np.zeros(self.num_envs, dtype=np.bool_)
        never_reset[selected] = ~self._started[selected]
        return selected, never_reset

    @staticmethod
    def _set_state_ops(states: Sequence[Any], selected: list[int]) -> list[Op]:
        return [Op("call", index, ("set_state", (state,), {})) for index, state in zip(selected, states)]

    def _restored(self, states: Sequence[Any], selected: list[int]) -> None:
        """Bookkeeping after a restore: each sub-env shows its snapshot's observation and ended flag."""
        for index, state in zip(selected, states):
            self._observations[index] = state.observation
            self._needs_reset[index] = state.ended
            self._failed[index] = False
            self._seeds[index] = None  # the snapshot's episode may have come from any reset
            self._autoresets[index] = 0

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Attribute ``name`` of every sub-env."""
        return self.call(name)

    def render(self) -> tuple[Any, ...]:
        return self.call("render")

    def close_extras(self, **kwargs: Any) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend = None

    def __del__(self) -> None:
        # At interpreter exit the modules a backend closes with may be gone (the thread backend's
        # executor needs ``queue``); its threads and worker processes end with the interpreter.
        if sys.is_finalizing():
            return
        if not getattr(self, "closed", True) and getattr(self, "_backend", None) is not None:
            self.close()

    # ------------------------------------------------------------------ extras
    @property
    def needs_reset(self) -> np.ndarray:
        """Sub-envs that must be reset before their next step: ended episodes and failed calls.

        Under ``NEXT_STEP`` an ended episode is reset by its next step instead.
        """
        pending = self._failed | ~self._started
        if self.autoreset_mode != AutoresetMode.NEXT_STEP:
            pending = pending | self._needs_reset
        return pending

    @property
    def backend(self) -> Any:
        """The started backend (``None`` once closed): for monitoring, e.g. a Ray backend's ``locations()``."""
        return self._backend

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the process backend's workers (empty for the other backends)."""
        return self._backend.pids if isinstance(self._backend, ProcessBackend) else []

    # ------------------------------------------------------------------ planning calls
    def _plan_step(self, actions: Sequence[str], mask: np.ndarray | Sequence[bool] | None) -> list[Op]:
        self._check_usable()
        selected = np.flatnonzero(self._as_mask(mask, "step"))
        if len(actions) != self.num_envs:
            raise InvalidOptionError(
                f"step needs one action per sub-env: expected {self.num_envs}, got {len(actions)}. "
                "Pass any placeholder (e.g. None) for sub-envs left out by the mask."
            )
        self._require_steppable(selected)
        ops = []
        for index in selected.tolist():
            if self.autoreset_mode == AutoresetMode.NEXT_STEP and self._needs_reset[index]:
                ops.append(Op("reset", index, (None, None)))
            elif self.autoreset_mode == AutoresetMode.SAME_STEP:
                ops.append(Op("step_reset", index, (actions[index],)))
            else:
                ops.append(Op("step", index, (actions[index],)))
        return ops

    def _require_steppable(self, selected: np.ndarray) -> None:
        never_reset = selected[~self._started[selected]]
        if never_reset.size:
            raise ResetNeeded(
                f"Sub-envs {never_reset.tolist()} were never reset; call reset() before step()."
            )
        failed = selected[self._failed[selected]]
        if failed.size:
            raise ResetNeeded(
                f"Sub-envs {failed.tolist()} raised in their last call; reset them "
                "(reset(mask=...)) or leave them out of the step mask."
            )
        if self.autoreset_mode == AutoresetMode.DISABLED:
            ended = selected[self._needs_reset[selected]]
            if ended.size:
                raise ResetNeeded(
                    f"Sub-envs {ended.tolist()} ended their episode and autoreset is DISABLED; reset "
                    "them with reset(mask=...) or leave them out of the step mask."
                )

    def _plan_reset(
        self,
        seed: int | Sequence[int | None] | None,
        options: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None,
        mask: np.ndarray | Sequence[bool] | None,
    ) -> list[Op]:
        self._check_usable()
        group_size = None
        if isinstance(options, Mapping):
            options = dict(options)
            group_size = options.pop(GROUP_SIZE, None)
            if RESET_MASK in options:
                if mask is not None:
                    raise InvalidOptionError(
                        "Pass the reset mask once: as mask=... or as options['reset_mask']."
                    )
                mask = options.pop(RESET_MASK)
        selected = np.flatnonzero(self._as_mask(mask, "reset"))
        if isinstance(seed, (int, np.integer)):
            # Later seedless group draws then replay too (Gymnasium's VectorEnv.reset does this).
            self._np_random, self._np_random_seed = seeding.np_random(int(seed))
        seeds = self._reset_seeds(seed, group_size)
        per_env_options = self._per_env_options(options)
        for index in selected.tolist():
            self._seeds[index] = seeds[index]
        return [Op("reset", index, (seeds[index], per_env_options[index])) for index in selected.tolist()]

    def _reset_seeds(self, seed: int | Sequence[int | None] | None, group_size: Any) -> list[int | None]:
        if group_size is None:
            if seed is None:
                return [None] * self.num_envs
            if isinstance(seed, (int, np.integer)):
                return [int(seed) + index for index in range(self.num_envs)]
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise InvalidOptionError(
                    f"A list of seeds needs one per sub-env: expected {self.num_envs}, got {len(seeds)}."
                )
            return seeds
        if not isinstance(group_size, (int, np.integer)) or isinstance(group_size, bool) or group_size < 1:
            raise InvalidOptionError(f"options['group_size'] must be an int >= 1, got {group_size!r}.")
        if self.num_envs % group_size:
            raise InvalidOptionError(
                f"num_envs={self.num_envs} is not a multiple of group_size={group_size}; make the "
                f"vector env with a multiple of it, or pick a group size that divides {self.num_envs}."
            )
        if seed is None:
            base = int(self.np_random.integers(0, 2**31 - 1))
        elif isinstance(seed, (int, np.integer)):
            base = int(seed)
        else:
            raise InvalidOptionError(
                "options['group_size'] draws one seed per group from seed=<int> (or seed=None); "
                "a list of seeds already says each sub-env's seed: drop group_size or pass an int."
            )
        return [base + index // int(group_size) for index in range(self.num_envs)]

    def _per_env_options(
        self, options: dict[str, Any] | Sequence[Mapping[str, Any] | None] | None
    ) -> list[dict[str, Any] | None]:
        if options is None or isinstance(options, dict):
            return [options or None] * self.num_envs
        per_env = [dict(item) if item is not None else None for item in options]
        if len(per_env) != self.num_envs:
            raise InvalidOptionError(
                f"A list of reset options needs one entry (dict or None) per sub-env: expected "
                f"{self.num_envs}, got {len(per_env)}."
            )
        return per_env

    def _as_mask(self, mask: np.ndarray | Sequence[bool] | None, call: str) -> np.ndarray:
        if mask is None:
            return np.ones(self.num_envs, dtype=np.bool_)
        array = np.asarray(mask)
        if array.shape != (self.num_envs,) or array.dtype != np.bool_:
            raise InvalidOptionError(
                f"{call} mask must be a boolean array of shape ({self.num_envs},), got dtype "
                f"{array.dtype} and shape {array.shape}."
            )
        return array

    def _indices(self, indices: Sequence[int] | None, call: str) -> list[int]:
        if indices is None:
            return list(range(self.num_envs))
        chosen = [int(index) for index in indices]
        if any(not 0 <= index < self.num_envs for index in chosen) or len(set(chosen)) != len(chosen):
            raise InvalidOptionError(
                f"{call} indices must be distinct sub-env indices in 0..{self.num_envs - 1}, got {list(indices)}."
            )
        return chosen

    # ------------------------------------------------------------------ running calls
    def _run_calls(self, ops: list[Op], call: str) -> list[Any]:
        """Run ``call`` ops; a failure raises (see :meth:`_check_calls`)."""
        return self._check_calls(self._execute(ops, call), call)

    def _check_calls(self, results: list[Any], call: str) -> list[Any]:
        """The results of ``call`` ops, or the error of the first failure (a snapshot error keeps its type across backends)."""
        failures = [result for result in results if isinstance(result, Failure)]
        if failures:
            error = _sub_env_error(failures, call, self._seeds, self._autoresets)
            typed = _SNAPSHOT_ERRORS.get(failures[0].error_type)
            if typed is not None:
                raise typed(f"Sub-env {failures[0].index}: {failures[0].message}") from error
            raise error
        return results

    def _check_usable(self) -> None:
        if self.closed or self._backend is None:
            reason = f" It was closed because {self._closed_because}." if self._closed_because else ""
            raise ClosedEnvironmentError(f"This vector env is closed.{reason} Make a new one.")
        if self._busy:
            raise AlreadyPendingCallError(
                "Another reset/step of this vector env is still running (an astep/areset not yet "
                "awaited to the end); await it first.",
                "step",
            )

    def _execute(self, ops: list[Op], call: str) -> list[Any]:
        assert self._backend is not None
        self._busy = True
        try:
            return self._backend.run(ops)
        except BackendFailure as failure:
            raise self._stop_after(failure, call) from None
        finally:
            self._busy = False

    async def _aexecute(self, ops: list[Op], call: str) -> list[Any]:
        assert self._backend is not None
        self._busy = True
        try:
            return await self._backend.arun(ops)
        except BackendFailure as failure:
            raise self._stop_after(failure, call) from None
        except asyncio.CancelledError:
            self._close_because(f"an {call} call was cancelled while its sub-envs ran")
            raise
        finally:
            self._busy = False

    def _stop_after(self, failure: BackendFailure, call: str) -> Exception:
        """Stop every worker after a timeout or a death, and the error that says so."""
        index, seed = failure.index, self._seeds[failure.index]
        where = f"Sub-env {index} ({_seed_text(seed, int(self._autoresets[index]))})"
        self._close_because(f"{where[0].lower()}{where[1:]} failed in {call}: {failure.detail}")
        advice = "Every worker was stopped and this vector env is closed; make a new one."
        if failure.reason == "timeout":
            return SubEnvTimeout(f"{where} did not finish {call}: {failure.detail}. {advice}", index=index, seed=seed)
        return WorkerDiedError(f"{where}: its worker died during {call}: {failure.detail}. {advice}",
                               index=index, seed=seed)

    def _close_because(self, reason: str) -> None:
        self._closed_because = reason
        backend, self._backend = self._backend, None
        if isinstance(backend, ProcessBackend):
            backend.kill()
        elif backend is not None:
            backend.close()
        self.closed = True

    # ------------------------------------------------------------------ collecting results
    def _finish_reset(self, ops: list[Op], results: list[Any]) -> tuple[Observations, dict[str, Any]]:
        infos: list[tuple[int, dict[str, Any]]] = []
        failures = []
        for op, result in zip(ops, results):
            index = op.index
            self._started[index] = True
            self._needs_reset[index] = False
            self._autoresets[index] = 0
            if isinstance(result, Failure):
                self._failed[index] = True
                failures.append(result)
                continue
            self._failed[index] = False
            self._observations[index], info = result
            infos.append((index, info))
        if failures:
            raise _sub_env_error(failures, "reset", self._seeds, self._autoresets)
        return tuple(self._observations), batch_infos(self.num_envs, infos)

    def _finish_step(self, ops: list[Op], results: list[Any]) -> StepResult:
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terminations = np.zeros(self.num_envs, dtype=np.bool_)
        truncations = np.zeros(self.num_envs, dtype=np.bool_)
        infos: list[tuple[int, dict[str, Any]]] = []
        failures = []
        for op, result in zip(ops, results):
            index = op.index
            if isinstance(result, Failure):
                self._failed[index] = True
                failures.append(result)
                continue
            if op.kind == "reset":  # NEXT_STEP autoreset
                self._observations[index], info = result
                self._autoresets[index] += 1
                self._needs_reset[index] = False
            else:
                self._observations[index], reward, terminated, truncated, info = result
                rewards[index], terminations[index], truncations[index] = reward, terminated, truncated
                ended = bool(terminated or truncated)
                if op.kind == "step_reset":
                    self._autoresets[index] += ended
                else:
                    self._needs_reset[index] = ended
            infos.append((index, info))
        if failures:
            raise _sub_env_error(failures, "step", self._seeds, self._autoresets)
        observations = tuple(self._observations)
        return observations, rewards, terminations, truncations, batch_infos(self.num_envs, infos)


# ---------------------------------------------------------------------- construction helpers
@dataclass(frozen=True)
class EnvFactory:
    """Picklable ``gym.make(env_id, **kwargs)``; imports llmgym first so its ids are registered."""

    env_id: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __call__(self) -> gym.Env:
        import llmgym  # noqa: F401  (registration, in a fresh worker process)

        return gym.make(self.env_id, **self.kwargs)


def make_vector_env(
    env_id: str,
    num_envs: int,
    *,
    backend: BackendName = "inline",
    num_workers: int | None = None,
    step_timeout: float | None = None,
    autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
    context: StartMethod = "forkserver",
    **env_kwargs: Any,
) -> TextVectorEnv:
    """``num_envs`` copies of ``gym.make(env_id, **env_kwargs)`` as a :class:`TextVectorEnv`.

    This is every llmgym id's ``vector_entry_point``: ``gym.make_vec(id, n, backend="process")``
    lands here with Gymnasium's keyword arguments. The options in :data:`VECTOR_OPTIONS` are
    the vector env's (see :class:`TextVectorEnv`); all other keywords go to the env's
    constructor, which is called once here so that a misspelled name fails now, in this process.
    """
    if not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
        raise InvalidOptionError(f"num_envs must be an int >= 1, got {num_envs!r}.")
    kwargs = {**gym.spec(env_id).kwargs, **env_kwargs}
    factory = EnvFactory(env_id, kwargs)
    try:
        factory().close()
    except UnknownOptionError as error:
        hints = "".join(did_you_mean(name, VECTOR_OPTIONS) for name in env_kwargs)
        raise UnknownOptionError(
            f"{error} The vector env's own options: {', '.join(VECTOR_OPTIONS)}.{hints}"
        ) from None
    venv = TextVectorEnv(
        [factory] * int(num_envs),
        backend=backend,
        num_workers=num_workers,
        step_timeout=step_timeout,
        autoreset_mode=autoreset_mode,
        context=context,
    )
    spec = copy.deepcopy(gym.spec(env_id))
    spec.kwargs = {**kwargs, "num_envs": int(num_envs), "vectorization_mode": "vector_entry_point",
                   "backend": backend, "num_workers": num_workers, "step_timeout": step_timeout,
                   "autoreset_mode": venv.autoreset_mode, "context": context}
    venv.spec = spec
    return venv


def _autoreset_mode(mode: AutoresetMode | str) -> AutoresetMode:
    if isinstance(mode, AutoresetMode):
        return mode
    try:
        return AutoresetMode(mode)
    except ValueError:
        by_name = {member.name: member for member in AutoresetMode}
        if isinstance(mode, str) and mode.upper() in by_name:
            return by_name[mode.upper()]
        valid = [member.value for member in AutoresetMode]
        raise InvalidOptionError(
            f"autoreset_mode must be a gymnasium.vector.AutoresetMode or one of {valid}, got {mode!r}."
            f"{did_you_mean(str(mode), valid)}"
        ) from None


def _check_backend(
    backend: str, num_workers: int | None, step_timeout: float | None, context: str
) -> BackendName:
    if backend not in BACKENDS:
        raise InvalidOptionError(
            f"backend must be one of {list(BACKENDS)}, got {backend!r}.{did_you_mean(str(backend), BACKENDS)}"
        )
    if num_workers is not None:
        if backend == "inline":
            raise InvalidOptionError(
                "num_workers applies to the 'thread' and 'process' backends, not 'inline'."
            )
        if not isinstance(num_workers, (int, np.integer)) or num_workers < 1:
            raise InvalidOptionError(f"num_workers must be an int >= 1 or None, got {num_workers!r}.")
    if step_timeout is not None:
        if backend != "process":
            raise InvalidOptionError(
                f"step_timeout needs backend='process' (got {backend!r}): a hung step can only be "
                "stopped by ending its process."
            )
        if not step_timeout > 0:
            raise InvalidOptionError(f"step_timeout must be > 0 seconds or None, got {step_timeout!r}.")
    if context not in START_METHODS:
        raise InvalidOptionError(
            f"context must be one of {list(START_METHODS)}, got {context!r}."
            f"{did_you_mean(str(context), START_METHODS)}"
        )
    return backend  # type: ignore[return-value]


def _sub_env_error(
    failures: list[Failure], call: str, seeds: list[int | None], autoresets: np.ndarray | None
) -> SubEnvError:
    first = failures[0]
    seed = seeds[first.index]
    seed_text = _seed_text(seed, int(autoresets[first.index]) if autoresets is not None else 0)
    others = [failure.index for failure in failures[1:]]
    also = f" Sub-envs {others} raised too." if others else ""
    return SubEnvError(
        f"Sub-env {first.index} ({seed_text}) raised {first.error_type} in {call}: {first.message}.{also} "
        "The other sub-envs of this call did run; reset the failed ones (reset(mask=...)) before "
        f"stepping them again.\nOriginal traceback:\n{first.traceback}",
        index=first.index,
        seed=seed,
    )


def _seed_text(seed: int | None, autoresets: int) -> str:
    text = "unseeded" if seed is None else f"seed {seed}"
    return text + (f", {autoresets} autoreset(s) later" if autoresets else "")


def _cpu_count() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

