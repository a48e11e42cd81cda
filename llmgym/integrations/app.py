"""The FastAPI app of ``llmgym-serve`` (imported only when serving: FastAPI stays out of ``--help``)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any

import gymnasium as gym
from fastapi import Body, FastAPI, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse

import llmgym
from llmgym.integrations.protocol import (
    ACTION_SCHEMA,
    OBSERVATION_SCHEMA,
    STATE_SCHEMA,
    error_message,
    json_safe,
)
from llmgym.integrations.serve import Connection, ServeConfig, Session, SessionPool, _close_quietly
from llmgym.integrations.serve_batch import BatchSession


def _env_description(env_id: str) -> str:
    entry_point = gym.spec(env_id).entry_point
    target = (
        gym.envs.registration.load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
    )
    doc = inspect.getdoc(target) or ""
    return doc.split("\n\n", 1)[0]


def build_app(config: ServeConfig) -> FastAPI:
    """The FastAPI app serving ``config.env_id``; run it with any ASGI server (``main`` uses uvicorn)."""
    gym.make(config.env_id, **config.options).close()  # unknown ids and options fail here, before serving
    pool = SessionPool(config)
    reaper: list[asyncio.Task[None]] = []

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):  # type: ignore[no-untyped-def]
        reaper.append(asyncio.get_running_loop().create_task(pool.reap_forever()))
        yield
        reaper[0].cancel()
        for session in list(pool.sessions.values()):
            pool.release(session)

    app = FastAPI(title=f"llmgym-serve {config.env_id}", lifespan=lifespan)
    app.state.pool = pool
    _add_http_routes(app, config, pool)
    _add_episode_routes(app, config)

    @app.websocket("/ws")
    async def play(websocket: WebSocket) -> None:
        await _play(websocket, config, pool)

    @app.websocket("/ws/batch")
    async def play_batch(websocket: WebSocket) -> None:
        await _play_batch(websocket, config, pool)

    return app


def _add_http_routes(app: FastAPI, config: ServeConfig, pool: SessionPool) -> None:
    """GET /health (with the server's own session count), /schema, /metadata, /state."""

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "healthy",
            "env_id": config.env_id,
            "active_sessions": pool.active_envs,
            "active_connections": len(pool.sessions),
            "max_sessions": config.max_sessions,
            "sessions_opened": pool.opened,
            "sessions_reaped": pool.reaped,
            "sessions_refused": pool.refused,
        }

    @app.get("/schema")
    async def schema() -> dict[str, Any]:
        action = json.loads(json.dumps(ACTION_SCHEMA))
        action["properties"]["text"]["maxLength"] = config.max_action_chars
        return {
            "action": action,
            "observation": OBSERVATION_SCHEMA,
            "reset_observation": OBSERVATION_SCHEMA,
            "state": STATE_SCHEMA,
        }

    @app.get("/metadata")
    async def metadata() -> dict[str, Any]:
        return {
            "name": config.env_id,
            "description": _env_description(config.env_id),
            "version": llmgym.__version__,
            "options": json_safe(config.options),
        }

    @app.get("/state")
    async def state() -> dict[str, Any]:
        return {
            "env_id": config.env_id,
            "active_sessions": pool.active_envs,
            "episode_id": None,
            "step_count": 0,
        }


def _add_episode_routes(app: FastAPI, config: ServeConfig) -> None:
    """HTTP /reset and /step, as OpenEnv's servers have them; episodes themselves live on /ws."""

    @app.post("/reset")
    async def reset(body: dict[str, Any] | None = Body(default=None)) -> JSONResponse:
        session = Session(config, None)
        try:
            answer, _ = await session.handle(json.dumps({"type": "reset", "data": body or {}}))
        finally:
            session.close()
        assert answer is not None
        status = 400 if answer["type"] == "error" else 200
        return JSONResponse(answer["data"], status_code=status)

    @app.post("/step")
    async def step() -> JSONResponse:
        return JSONResponse(
            error_message(
                "STATELESS_STEP",
                "An episode lives in a session: play it over WS /ws "
                "(OpenEnv's EnvClient does), not with HTTP POST /step.",
            )["data"],
            status_code=400,
        )


async def _play(websocket: WebSocket, config: ServeConfig, pool: SessionPool) -> None:
    """One WebSocket session: an env of its own, one answer per frame, freed however it ends."""
    await websocket.accept()
    if not await _serves_the_asked_id(websocket, config):
        return
    session = pool.open(websocket)
    if session is None:
        await _refuse(websocket, f"All {config.max_sessions} sessions are taken; retry later.", config, pool)
        return

    async def reply(raw: str | bytes) -> tuple[str | None, bool]:
        text = raw if isinstance(raw, str) else raw.decode("utf-8", errors="replace")
        answer, keep = await session.handle(text)
        return (None if answer is None else json.dumps(answer)), keep

    await _serve_frames(websocket, pool, session, reply)


async def _play_batch(websocket: WebSocket, config: ServeConfig, pool: SessionPool) -> None:
    """One batched connection (``/ws/batch?num_envs=N``): ``N`` envs, one answer per frame, all freed
    however it ends."""
    await websocket.accept()
    if not await _serves_the_asked_id(websocket, config):
        return
    asked = websocket.query_params.get("num_envs", "")
    num_envs = int(asked) if asked.isdigit() else 0
    if not 1 <= num_envs <= config.max_sessions:
        message = (
            f"/ws/batch needs ?num_envs=N with N from 1 to {config.max_sessions} (--max-sessions); "
            f"got {asked!r:.40}."
        )
        await websocket.send_text(json.dumps(error_message("VALIDATION_ERROR", message)))
        await _close_quietly(websocket, 1008, "bad num_envs")
        return
    batch = pool.admit(num_envs, lambda: BatchSession(config, websocket, num_envs))
    if batch is None:
        message = (
            f"This connection asks for {num_envs} envs; {pool.free_envs} of the server's "
            f"{config.max_sessions} are free. Retry later or ask for fewer."
        )
        await _refuse(websocket, message, config, pool)
        return
    try:
        await batch.build()
    except Exception as error:  # the id was made at start; say why it cannot be now, and free the rest
        pool.release(batch)
        failure = error_message("EXECUTION_ERROR", f"Making the envs failed: {type(error).__name__}: {error}")
        await websocket.send_text(json.dumps(failure))
        await _close_quietly(websocket, 1011, "env construction failed")
        return
    await _serve_frames(websocket, pool, batch, batch.handle)


async def _serves_the_asked_id(websocket: WebSocket, config: ServeConfig) -> bool:
    requested = websocket.query_params.get("env_id")
    if not requested or requested == config.env_id:
        return True
    await websocket.send_text(
        json.dumps(
            error_message("UNKNOWN_ENV_ID", f"This server serves {config.env_id!r}, not {requested!r}.")
        )
    )
    await _close_quietly(websocket, 1008, "unknown env id")
    return False


async def _refuse(websocket: WebSocket, message: str, config: ServeConfig, pool: SessionPool) -> None:
    refusal = error_message(
        "CAPACITY_REACHED", message, active_sessions=pool.active_envs, max_sessions=config.max_sessions
    )
    await websocket.send_text(json.dumps(refusal))
    await _close_quietly(websocket, 1013, "capacity reached")


async def _serve_frames(
    websocket: WebSocket,
    pool: SessionPool,
    connection: Connection,
    reply: Callable[[str | bytes], Awaitable[tuple[str | None, bool]]],
) -> None:
    """Answer each frame with ``reply`` until the peer closes, vanishes or is reaped; free the
    connection's envs however it ends."""
    try:
        while connection.session_id in pool.sessions:
            frame = await websocket.receive()
            if frame["type"] == "websocket.disconnect":
                break
            raw = frame.get("text")
            answer, keep = await reply(raw if raw is not None else frame.get("bytes") or b"")
            if answer is not None:
                await websocket.send_text(answer)
            if not keep:
                break
    except (WebSocketDisconnect, RuntimeError, OSError):
        pass  # the peer vanished or the reaper closed the socket under us
    finally:
        pool.release(connection)
        await _close_quietly(websocket)
