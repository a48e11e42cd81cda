"""The served backend: a vector env whose sub-envs live in an ``llmgym-serve`` server.

``make_vector_env("llmgym/Sokoban-v0", 64, backend=ServedEnvBackend("ws://host:8000"))`` (or
``gym.make_vec`` with the same keywords) gives a :class:`~llmgym.vector.TextVectorEnv` whose 64
sub-envs are envs of the server, held by one ``/ws/batch`` connection (see
:mod:`llmgym.integrations.serve_batch`). Every vector call is one message and one answer: the
ops of the call (resets, steps, the resets of ``NEXT_STEP`` autoresets) travel together, so a
vector step costs one round trip however many sub-envs it steps. ``num_workers`` splits the
sub-envs into that many connections (contiguous shards, as the process backend's), whose
messages travel concurrently; the vector env's seeding, groups, partial steps and autoreset
modes are unchanged and give the inline backend's results.

Every sub-env is the server's env: ``env_fns[0]`` is built once here, to describe the spaces and
to check that the server serves the same id with the same options (``llmgym-serve ID key=value``);
a mismatch fails at construction. Results travel as JSON, so infos arrive JSON-safe (tuples as
lists, as on ``/ws``). ``SAME_STEP`` autoreset costs a second round trip on the steps where an
episode ended. ``call`` (snapshots, solver queries, ``render``) needs the env object itself and is
refused: snapshots with :class:`~llmgym.error.SnapshotNotSupported`.

Failures: a request a sub-env cannot serve comes back as that sub-env's failure (the vector env
raises :class:`~llmgym.error.SubEnvError` with its index and seed; the others of the call did
run). A lost connection raises :class:`~llmgym.error.WorkerDiedError` and a server that does not
answer within ``timeout`` :class:`~llmgym.error.SubEnvTimeout`, both naming the first sub-env of
the connection's call; both close the vector env. No wait is unbounded.

The connections live on a helper thread's event loop, so ``step`` blocks only the calling
thread and ``astep`` leaves the caller's event loop free.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar
from urllib.parse import quote

import gymnasium as gym

from llmgym.error import DependencyNotInstalled, InvalidOptionError, RemoteEnvError
from llmgym.integrations.protocol import json_safe
from llmgym.integrations.remote import ws_url
from llmgym.integrations.serve_batch import decode, encode
from llmgym.vector.backends import BackendFailure, Failure, Op
from llmgym.vector.process import shard_indices

#: Seconds the connections get to close.
_CLOSE_TIMEOUT = 5.0
#: ``call`` names refused with the snapshot error type (the vector env raises it as such).
_SNAPSHOT_CALLS = frozenset({"get_state", "set_state"})

Result = TypeVar("Result")


@dataclass(frozen=True)
class ServedEnvBackend:
    """``backend=ServedEnvBackend(url)`` plays a :class:`~llmgym.vector.TextVectorEnv`'s sub-envs on a server.

    The vector env's ``num_workers`` is the number of ``/ws/batch`` connections (default one);
    ``step_timeout`` does not apply (the server's envs cannot be stopped from here): ``timeout``
    bounds each answer instead.

    Attributes:
        url: the ``llmgym-serve`` server, ``ws://host:port`` (``http://`` works too).
        timeout: seconds to wait for the connections and for each answer.
    """

    name: ClassVar[str] = "served"
    url: str
    timeout: float = 60.0

    def start(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        num_workers: int | None,
        step_timeout: float | None,
        describe: Callable[[gym.Env], None],
    ) -> ServedBackend:
        """Describe the spaces from one local probe env, then open the connections."""
        if step_timeout is not None:
            raise InvalidOptionError(
                f"step_timeout does not apply to served sub-envs (got {step_timeout!r}): a server's env "
                "cannot be stopped from the client. Bound each answer with "
                "ServedEnvBackend(url, timeout=...)."
            )
        if not self.timeout > 0:
            raise InvalidOptionError(f"ServedEnvBackend's timeout must be > 0 seconds, got {self.timeout!r}.")
        if num_workers is not None and (not isinstance(num_workers, int) or num_workers < 1):
            raise InvalidOptionError(
                f"num_workers (connections) must be an int >= 1 or None, got {num_workers!r}."
            )
        probe = env_fns[0]()
        try:
            describe(probe)
            spec = probe.spec
        finally:
            probe.close()
        expected = None if spec is None else (spec.id, json_safe(spec.kwargs))
        connections = min(num_workers or 1, len(env_fns))
        return ServedBackend(self.url, len(env_fns), connections, expected, self.timeout)


class ServedBackend:
    """The running backend: ``/ws/batch`` connections, one per shard of sub-envs."""

    def __init__(
        self,
        url: str,
        num_envs: int,
        num_connections: int,
        expected: tuple[str, Any] | None,
        timeout: float,
    ) -> None:
        self.url = ws_url(url) + "/batch"
        self._timeout = timeout
        self._shards = shard_indices(num_envs, num_connections)
        #: sub-env index -> (connection, index on that connection)
        self._where = {index: (worker, index - shard.start) for worker, shard in enumerate(self._shards)
                       for index in shard}
        self._sockets: list[Any] = []
        #: A connection failed: closing drops the sockets instead of waiting on a server that may not answer.
        self._broken = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="llmgym-served", daemon=True)
        self._thread.start()
        try:
            self._wait(self._connect(expected), timeout * (1 + len(self._shards)))
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ the Backend protocol
    def run(self, ops: Sequence[Op]) -> list[Any]:
        return self._wait(self._run(ops), None)

    async def arun(self, ops: Sequence[Op]) -> list[Any]:
        if self._loop is None:
            raise RemoteEnvError(f"The connections to {self.url} are closed.", code="CONNECTION_LOST")
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._run(ops), self._loop))

    def close(self) -> None:
        """Close every connection (the server frees their envs) and stop the helper thread."""
        loop = self._loop
        if loop is None:
            return
        self._loop = None  # type: ignore[assignment]
        if self._thread.is_alive():
            closing = asyncio.run_coroutine_threadsafe(self._close_sockets(), loop)
            try:
                closing.result(timeout=2 * _CLOSE_TIMEOUT)
            except Exception:  # the sockets are dropped with the loop either way
                pass
            loop.call_soon_threadsafe(loop.stop)
            self._thread.join(timeout=_CLOSE_TIMEOUT)
        if not loop.is_running():
            loop.close()

    # ------------------------------------------------------------------ on the helper loop
    def _wait(self, work: Coroutine[Any, Any, Result], timeout: float | None) -> Result:
        if self._loop is None:
            work.close()
            raise RemoteEnvError(f"The connections to {self.url} are closed.", code="CONNECTION_LOST")
        future: concurrent.futures.Future[Result] = asyncio.run_coroutine_threadsafe(work, self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            if future.done():  # the work itself raised it
                raise
            future.cancel()
            raise RemoteEnvError(
                f"{self.url} did not accept the connections within {timeout:g} s.", code="CONNECTION_LOST"
            ) from None

    async def _connect(self, expected: tuple[str, Any] | None) -> None:
        try:
            from websockets.asyncio.client import connect
        except ImportError as missing:
            raise DependencyNotInstalled(
                f"The served backend needs websockets ({missing}). "
                "Install it with: pip install 'llmgym[integrations]'"
            ) from missing
        for shard in self._shards:
            target = f"{self.url}?num_envs={len(shard)}"
            if expected is not None:
                target += f"&env_id={quote(expected[0], safe='/')}"
            try:
                # No permessage-deflate: compressing each answer costs more than sending it on a LAN.
                opening = connect(
                    target, max_size=None, close_timeout=_CLOSE_TIMEOUT, proxy=None, compression=None
                )
                socket = await asyncio.wait_for(opening, self._timeout)
            except (OSError, TimeoutError) as error:
                raise RemoteEnvError(
                    f"Cannot connect to {self.url}: {error!r}. Is llmgym-serve running there?",
                    code="CONNECTION_LOST",
                ) from error
            self._sockets.append(socket)
            self._check_server(await self._state(socket, shard), expected)

    async def _state(self, socket: Any, shard: range) -> dict[str, Any]:
        """The connection's state; a refusal (full server, wrong id) fails here, at construction."""
        from websockets.exceptions import ConnectionClosed

        try:
            try:  # a refused connection gets an error frame, then the close: read the frame even then
                await socket.send(encode({"type": "state"}))
            except ConnectionClosed:
                pass
            answer = decode(await asyncio.wait_for(socket.recv(), self._timeout))
        except (ConnectionClosed, OSError, TimeoutError) as error:
            raise RemoteEnvError(
                f"{self.url} closed the connection for sub-envs {shard.start}..{shard.stop - 1}: {error!r}.",
                code="CONNECTION_LOST",
            ) from error
        if answer.get("type") == "error":
            data = answer.get("data", {})
            raise RemoteEnvError(f"{self.url} answered {data.get('code')}: {data.get('message')}",
                                 code=str(data.get("code")))
        return answer["data"]

    def _check_server(self, state: dict[str, Any], expected: tuple[str, Any] | None) -> None:
        if expected is None:
            return
        env_id, kwargs = expected
        if (state["env_id"], state["env_kwargs"]) != (env_id, kwargs):
            raise InvalidOptionError(
                f"{self.url} serves {state['env_id']} with options {state['env_kwargs']}, but this vector "
                f"env asked for {env_id} with {kwargs}. Serve the same (llmgym-serve {env_id} key=value "
                "...) or make the vector env with the server's options."
            )

    async def _close_sockets(self) -> None:
        sockets, self._sockets = self._sockets, []
        for socket in sockets:
            if self._broken:
                socket.transport.abort()
                continue
            try:
                await socket.send(encode({"type": "close"}))
            except Exception:  # already gone: nothing to tell the server
                pass
            try:
                await asyncio.wait_for(socket.close(), _CLOSE_TIMEOUT)
            except Exception:
                pass

    # ------------------------------------------------------------------ a call
    async def _run(self, ops: Sequence[Op]) -> list[Any]:
        results: list[Any] = [None] * len(ops)
        requests: list[tuple[int, Op, dict[str, Any]]] = []
        for slot, op in enumerate(ops):
            if op.kind == "call":
                results[slot] = _refused_call(op)
            else:
                requests.append((slot, op, _request(op)))
        answers = await self._exchange([(op.index, request) for _, op, request in requests])
        ended: list[tuple[int, Op]] = []
        for (slot, op, _), item in zip(requests, answers):
            results[slot] = _result(op, item)
            if op.kind == "step_reset" and not isinstance(results[slot], Failure) and (
                results[slot][2] or results[slot][3]
            ):
                ended.append((slot, op))
        if ended:  # SAME_STEP: reset the sub-envs whose episode just ended, in one more round trip
            resets = await self._exchange([(op.index, _reset_request(None, None)) for _, op in ended])
            for (slot, op), item in zip(ended, resets):
                results[slot] = _same_step_result(op, results[slot], item)
        return results

    async def _exchange(self, requests: list[tuple[int, dict[str, Any]]]) -> list[dict[str, Any]]:
        """Send each connection its items in one message, concurrently; the answer items, in order."""
        by_worker: dict[int, list[dict[str, Any]]] = {}
        order: list[tuple[int, int]] = []
        for index, request in requests:
            worker, local = self._where[index]
            order.append((worker, len(by_worker.setdefault(worker, []))))
            by_worker[worker].append({"index": local, **request})
        try:  # every message is encoded before any is sent: an option JSON cannot carry sends nothing
            messages = {worker: encode({"type": "batch", "data": {"items": items}}) for worker, items in
                        by_worker.items()}
        except (TypeError, ValueError) as error:
            raise InvalidOptionError(
                f"The served backend sends reset options as JSON, and these are not: {error}. "
                "Pass levels and options as JSON values (str, numbers, lists, dicts)."
            ) from None
        workers = list(messages)
        if len(workers) == 1:  # most calls: no tasks to gather
            answered = [await self._round_trip(workers[0], messages[workers[0]], len(by_worker[workers[0]]))]
        else:
            answered = await asyncio.gather(
                *(self._round_trip(worker, messages[worker], len(by_worker[worker])) for worker in workers)
            )
        by_worker_answers = dict(zip(workers, answered))
        return [by_worker_answers[worker][position] for worker, position in order]

    async def _round_trip(self, worker: int, message: str, count: int) -> list[dict[str, Any]]:
        from websockets.exceptions import ConnectionClosed

        shard = self._shards[worker]
        where = f"{self.url} (connection {worker}: sub-envs {shard.start}..{shard.stop - 1})"
        try:
            await self._sockets[worker].send(message)
            raw = await asyncio.wait_for(self._sockets[worker].recv(), self._timeout)
        except TimeoutError:
            self._broken = True
            raise BackendFailure(
                "timeout", shard.start, f"{where} did not answer within {self._timeout:g} s"
            ) from None
        except (ConnectionClosed, OSError) as error:
            self._broken = True
            raise BackendFailure("died", shard.start, f"lost the connection to {where}: {error!r}") from None
        answer = decode(raw)
        items = answer.get("data", {}).get("items") if answer.get("type") == "batch" else None
        if not isinstance(items, list) or len(items) != count:
            raise RemoteEnvError(f"{where} answered a batch of {count} with {str(answer)[:300]}",
                                 code=str(answer.get("data", {}).get("code", "UNKNOWN")))
        return items


def _request(op: Op) -> dict[str, Any]:
    if op.kind == "reset":
        return _reset_request(*op.args)
    return {"type": "step", "data": {"text": op.args[0]}}


def _reset_request(seed: int | None, options: dict[str, Any] | None) -> dict[str, Any]:
    return {"type": "reset", "data": {"seed": None if seed is None else int(seed), "options": options}}


def _result(op: Op, item: dict[str, Any]) -> Any:
    """The Gymnasium tuple of an answer item (``reset``: observation and info; a step: all five), or
    a :class:`Failure` for an error item."""
    data = item.get("data", {})
    if item.get("type") == "error":
        return Failure(op.index, str(data.get("code", "ERROR")), str(data.get("message", "")), "")
    observation = data["observation"]
    if op.kind == "reset":
        return observation["text"], observation["info"]
    return (observation["text"], float(data["reward"]), observation["terminated"], observation["truncated"],
            observation["info"])


def _same_step_result(op: Op, stepped: tuple[Any, ...], item: dict[str, Any]) -> Any:
    """A step that ended its episode and the reset after it, laid out as Gymnasium's ``SAME_STEP``."""
    reset = _result(Op("reset", op.index, (None, None)), item)
    if isinstance(reset, Failure):
        return reset
    final_observation, reward, terminated, truncated, final_info = stepped
    observation, reset_info = reset
    return observation, reward, terminated, truncated, {
        "final_obs": final_observation, "final_info": final_info, **reset_info}


def _refused_call(op: Op) -> Failure:
    name = op.args[0]
    kind = "SnapshotNotSupported" if name in _SNAPSHOT_CALLS else "NotImplementedError"
    message = (
        f"call({name!r}) needs the env object, which lives on the server with the served backend; "
        "use a local backend (inline, thread, process, ray) for snapshots and env queries."
    )
    return Failure(op.index, kind, message, "")


__all__ = ["ServedBackend", "ServedEnvBackend"]
