"""``WS /ws/batch`` of ``llmgym-serve``: many envs on one connection, one message per vector step.

A ``/ws`` session answers one env step per message, and on a small machine a message costs more
than a grid env's step (JSON, WebSocket framing and the ASGI stack: about half a millisecond
against tens of microseconds). A batched connection holds ``num_envs`` envs and answers a list
of requests in one message, so that cost is paid once per vector step instead of once per env
step. This is what llmgym's vector env plays through (``backend=ServedEnvBackend(url)``, see
:mod:`llmgym.vector.served_backend`); the wire format is in :mod:`llmgym.integrations.protocol`.

Stepping: a batch's items run one after the other in the event loop (a grid env's step is far
cheaper than a thread hop), and the loop is handed to the other connections between items once
:data:`YIELD_AFTER_S` of work has gone by, so a large batch never holds the others up for long.
Measured on a 2-core machine with Sokoban-v0 (64 envs on one connection, a ``/ws`` session
stepping beside it): without the hand-overs the session's p99 step latency was 42 ms (a batch
of 64 resets runs that long), with them 6 ms, and the batch's own throughput did not change;
stepping each item on a thread pool halved the batch's throughput (the GIL runs one step at a
time either way, and every hop costs more than a step). Envs that step in a thread
(``step_in_thread``: tools whose sandbox calls block and release the GIL) still run the items of
a batch concurrently on threads, as separate ``/ws`` sessions would.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

from llmgym.error import DependencyNotInstalled
from llmgym.integrations.protocol import BATCH_ITEM_KEYS, BATCH_ITEM_TYPES, error_message, json_safe
from llmgym.integrations.serve import (
    RequestError,
    ServeConfig,
    Session,
    answer,
    check_keys,
    parse_message,
    request_data,
)

try:
    import orjson
except ImportError as missing:  # the integrations extra holds it
    raise DependencyNotInstalled(
        f"Batched serving (/ws/batch, the served backend) needs orjson ({missing}). "
        "Install it with: pip install 'llmgym[integrations]'"
    ) from missing

#: Seconds of item work after which a batch hands the event loop to the other connections.
YIELD_AFTER_S = 0.0005


def decode(raw: str | bytes) -> Any:
    """JSON text to Python values (orjson: a batched frame holds up to ``num_envs`` answers)."""
    return orjson.loads(raw)


def encode(message: Any) -> str:
    """Python values to JSON text (orjson; json for what orjson refuses: integers beyond 64 bits)."""
    try:
        return orjson.dumps(message).decode()
    except TypeError:
        return json.dumps(message)


class BatchSession:
    """One ``/ws/batch`` connection: ``num_envs`` envs, each with a ``/ws`` session's rules."""

    def __init__(self, config: ServeConfig, websocket: Any, num_envs: int) -> None:
        self.config = config
        self.websocket = websocket
        self.session_id = uuid.uuid4().hex
        self.num_envs = num_envs
        self.slots: list[Session] = []
        self.concurrent = False
        self.closed = False
        self.last_activity = time.monotonic()

    async def build(self) -> None:
        """Make the envs, handing the event loop over between them (a tool env takes tens of
        milliseconds to make, and a connection may ask for hundreds)."""
        for _ in range(self.num_envs):
            if self.closed:  # released meanwhile (the server is shutting down)
                return
            self.slots.append(Session(self.config, None))
            await asyncio.sleep(0)
        self.concurrent = self.slots[0].in_thread
        self.last_activity = time.monotonic()

    async def handle(self, raw: str | bytes) -> tuple[str | None, bool]:
        """The answer frame to one frame (None for ``close``), and whether the connection goes on."""
        self.last_activity = time.monotonic()
        try:
            kind, data = parse_message(raw, decode)
            if kind == "close":
                return None, False
            if kind == "state":
                return encode(self.state()), True
            if kind != "batch":
                raise RequestError(
                    "UNKNOWN_TYPE",
                    f"Unknown message type {kind!r:.40}; /ws/batch expects batch, state or close.",
                )
            items = _items(data)
        except RequestError as error:
            return encode(error_message(error.code, str(error))), True
        answers = await (self._run_concurrently(items) if self.concurrent else self._run_in_order(items))
        self.last_activity = time.monotonic()  # a long batch is activity too, not idleness
        return encode({"type": "batch", "data": {"items": answers}}), True

    async def _run_in_order(self, items: list[Any]) -> list[dict[str, Any]]:
        answers = []
        seen: set[int] = set()
        since = time.perf_counter()
        for item in items:
            answers.append(await self._run_item(item, seen))
            if time.perf_counter() - since > YIELD_AFTER_S:
                await asyncio.sleep(0)  # let the other connections' frames in
                since = time.perf_counter()
        return answers

    async def _run_concurrently(self, items: list[Any]) -> list[dict[str, Any]]:
        seen: set[int] = set()  # filled as each coroutine starts, in order, before its first await
        return list(await asyncio.gather(*(self._run_item(item, seen) for item in items)))

    async def _run_item(self, item: Any, seen: set[int]) -> dict[str, Any]:
        """One item's answer: the ``/ws`` answer to its request, with its ``index``."""
        index = item.get("index") if isinstance(item, dict) else None
        try:
            slot, kind, data = self._check_item(item, seen)
        except RequestError as error:
            return {"index": json_safe(index), **error_message(error.code, str(error))}
        return {"index": index, **await answer(slot, kind, data)}

    def _check_item(self, item: Any, seen: set[int]) -> tuple[Session, str, dict[str, Any]]:
        if not isinstance(item, dict):
            raise RequestError("VALIDATION_ERROR", f"A batch item is an object, got {type(item).__name__}.")
        check_keys("A batch item", item, BATCH_ITEM_KEYS)
        index, kind = item.get("index"), item.get("type")
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < self.num_envs:
            raise RequestError(
                "UNKNOWN_INDEX",
                f"A batch item's 'index' must be one of this connection's envs, 0..{self.num_envs - 1}; "
                f"got {index!r:.40}.",
            )
        if index in seen:
            raise RequestError(
                "VALIDATION_ERROR",
                f"Env {index} appears twice in one batch; send its second request in the next.",
            )
        seen.add(index)
        if kind not in BATCH_ITEM_TYPES:
            raise RequestError(
                "UNKNOWN_TYPE",
                f"A batch item's type is one of {', '.join(BATCH_ITEM_TYPES)}; got {kind!r:.40}.",
            )
        return self.slots[index], kind, request_data(item.get("data"))

    def state(self) -> dict[str, Any]:
        """The connection's envs: the id, the options they were made with, and each env's ``/ws`` state."""
        spec = self.slots[0].env.spec
        return {
            "type": "state",
            "data": {
                "env_id": self.config.env_id,
                "env_kwargs": json_safe(spec.kwargs if spec is not None else self.config.options),
                "num_envs": self.num_envs,
                "max_action_chars": self.config.max_action_chars,
                "envs": [slot.state()["data"] for slot in self.slots],
            },
        }

    def close(self) -> None:
        self.closed = True
        for slot in self.slots:
            slot.close()


def _items(data: dict[str, Any]) -> list[Any]:
    check_keys("batch", data, frozenset({"items"}))
    items = data.get("items")
    if not isinstance(items, list):
        raise RequestError("VALIDATION_ERROR", f"batch's data needs 'items', a list; got {items!r:.80}.")
    return items
