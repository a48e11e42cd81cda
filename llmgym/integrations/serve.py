"""``llmgym-serve``: any llmgym id behind OpenEnv's HTTP + WebSocket protocol.

    llmgym-serve llmgym/Sokoban-v0 --port 8000 max_turns=30

Each WebSocket connection to ``/ws`` is one session with its own env (``gym.make(ENV_ID,
**options)``); see :mod:`llmgym.integrations.protocol` for the messages. OpenEnv's own client
plays it unchanged::

    from openenv.core import GenericEnvClient
    with GenericEnvClient(base_url="http://127.0.0.1:8000").sync() as env:
        result = env.reset(seed=0)
        result = env.step({"text": "<answer>Up</answer>"})

``WS /ws/batch?num_envs=N`` (llmgym's own, beside OpenEnv's protocol) holds ``N`` envs on one
connection and answers a list of requests in one message: one round trip per vector step, which is
how llmgym's vector env plays served envs (:mod:`llmgym.integrations.serve_batch`).

HTTP: ``GET /health`` (with the server's own session count), ``GET /schema``, ``GET /metadata``,
``GET /state``, ``POST /reset`` (a one-off first observation). ``POST /step`` answers with an error:
an episode needs the session that only ``/ws`` keeps.

How it departs from OpenEnv's ``create_app``: a session's messages are answered in the event
loop, not in a thread per call, because a grid env's step takes microseconds and a thread hop
costs more than that; envs with blocking tools (the python sandbox) step in a thread
(``step_in_thread``). Sessions that stop talking are freed twice over: WebSocket pings find a
vanished peer (``ping_interval``/``ping_timeout``), and a reaper closes sessions idle longer than
``idle_timeout`` even where pings are answered by a client that never sends.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

import gymnasium as gym

from llmgym.error import DependencyNotInstalled, Error, InvalidOptionError
from llmgym.integrations.protocol import RESET_KEYS, STEP_KEYS, error_message, observation_message


@dataclass
class ServeConfig:
    """Options of ``llmgym-serve``."""

    env_id: str
    #: Options passed to ``gym.make(env_id, **options)`` for every session's env.
    options: dict[str, Any] = field(default_factory=dict)
    #: Interface to listen on; 127.0.0.1 keeps the server on this machine.
    host: str = "127.0.0.1"
    #: TCP port.
    port: int = 8000
    #: Envs open at once (a ``/ws`` session holds one, a ``/ws/batch`` connection its ``num_envs``); a
    #: connection beyond it gets a ``CAPACITY_REACHED`` error and is closed.
    max_sessions: int = 256
    #: Seconds without a message after which a session is closed and its env freed.
    idle_timeout: float = 300.0
    #: Seconds between WebSocket pings; a peer that misses ``ping_timeout`` is dropped (None: no pings).
    ping_interval: float | None = 20.0
    #: Seconds to wait for a ping's pong.
    ping_timeout: float | None = 20.0
    #: Longest action accepted, in characters; a longer one gets an ``ACTION_TOO_LONG`` error.
    max_action_chars: int = 65_536
    #: Step in a worker thread: ``"auto"`` does so for envs with tools (blocking sandbox calls).
    step_in_thread: Literal["auto", "yes", "no"] = "auto"

    def __post_init__(self) -> None:
        if self.max_sessions < 1:
            raise InvalidOptionError(f"max_sessions must be >= 1, got {self.max_sessions}.")
        if self.idle_timeout <= 0:
            raise InvalidOptionError(f"idle_timeout must be > 0 seconds, got {self.idle_timeout}.")
        if self.max_action_chars < 1:
            raise InvalidOptionError(f"max_action_chars must be >= 1, got {self.max_action_chars}.")
        if self.step_in_thread not in ("auto", "yes", "no"):
            raise InvalidOptionError(
                f"step_in_thread must be 'auto', 'yes' or 'no', got {self.step_in_thread!r}."
            )


class RequestError(Exception):
    """A request this session cannot serve; becomes an ``error`` message, the session lives on."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Session:
    """One connection's env and episode bookkeeping."""

    #: Envs this connection holds (counted against ``max_sessions``).
    num_envs = 1

    def __init__(self, config: ServeConfig, websocket: Any) -> None:
        self.config = config
        self.websocket = websocket
        self.session_id = uuid.uuid4().hex
        self.env = gym.make(config.env_id, **config.options)
        self.in_thread = config.step_in_thread == "yes" or (
            config.step_in_thread == "auto" and hasattr(self.env.unwrapped, "tools")
        )
        self.last_activity = time.monotonic()
        self.episode_id: str | None = None
        self.seed: int | None = None
        self.step_count = 0
        self.started = False
        self.done = False

    async def _call(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        if self.in_thread:
            return await asyncio.to_thread(function, *args, **kwargs)
        return function(*args, **kwargs)

    async def reset(self, data: dict[str, Any]) -> dict[str, Any]:
        check_keys("reset", data, RESET_KEYS)
        seed, options = data.get("seed"), data.get("options")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            raise RequestError(
                "VALIDATION_ERROR", f"reset's seed must be a non-negative integer or null, got {seed!r}."
            )
        if options is not None and not isinstance(options, dict):
            raise RequestError(
                "VALIDATION_ERROR", f"reset's options must be an object or null, got {options!r}."
            )
        self.started = False
        try:
            observation, info = await self._call(self.env.reset, seed=seed, options=options)
        except Exception:
            # A reset that raised can leave the env (and Gymnasium's checker wrapper around it) half
            # reset; the session goes on with a fresh one.
            self.close()
            self.env = gym.make(self.config.env_id, **self.config.options)
            raise
        self.started, self.done, self.step_count = True, False, 0
        self.seed = seed
        episode_id = data.get("episode_id")
        self.episode_id = str(episode_id) if episode_id is not None else uuid.uuid4().hex
        return observation_message(observation, None, False, False, info)

    async def step(self, data: dict[str, Any]) -> dict[str, Any]:
        check_keys("step", data, STEP_KEYS)
        text = data.get("text")
        if not isinstance(text, str):
            raise RequestError("VALIDATION_ERROR", f"step's data needs 'text', a string; got {text!r:.80}.")
        if len(text) > self.config.max_action_chars:
            raise RequestError(
                "ACTION_TOO_LONG",
                f"The action has {len(text)} characters; this server takes at most "
                f"{self.config.max_action_chars} "
                "(llmgym-serve --max-action-chars).",
            )
        if not self.started:
            raise RequestError("RESET_NEEDED", "step before reset: send {'type': 'reset'} first.")
        if self.done:
            raise RequestError(
                "EPISODE_ENDED", "The episode has ended: send {'type': 'reset'} to start another."
            )
        observation, reward, terminated, truncated, info = await self._call(self.env.step, text)
        self.step_count += 1
        self.done = bool(terminated or truncated)
        return observation_message(observation, float(reward), terminated, truncated, info)

    def state(self) -> dict[str, Any]:
        return {
            "type": "state",
            "data": {
                "episode_id": self.episode_id,
                "step_count": self.step_count,
                "env_id": self.config.env_id,
                "seed": self.seed,
                "started": self.started,
                "done": self.done,
            },
        }

    async def handle(self, raw: str) -> tuple[dict[str, Any] | None, bool]:
        """The answer to one frame (None for ``close``), and whether the session goes on."""
        self.last_activity = time.monotonic()
        try:
            kind, data = parse_message(raw, json.loads)
        except RequestError as error:
            return error_message(error.code, str(error)), True
        if kind == "close":
            return None, False
        return await answer(self, kind, data), True

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.env.close()


def check_keys(kind: str, data: dict[str, Any], valid: frozenset[str]) -> None:
    """Refuse keys of ``data`` outside ``valid`` (``kind`` names what they came in)."""
    if data.keys() <= valid:
        return
    unknown = sorted(set(data) - valid)
    raise RequestError(
        "VALIDATION_ERROR", f"{kind} got unknown keys {unknown}; valid keys: {', '.join(sorted(valid))}."
    )


def request_data(data: Any) -> dict[str, Any]:
    """A request's ``data`` as an object (missing or null: empty); otherwise a :class:`RequestError`."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise RequestError("VALIDATION_ERROR", f"'data' must be an object, got {type(data).__name__}.")
    return data


def parse_message(raw: str | bytes, loads: Callable[[str | bytes], Any]) -> tuple[str, dict[str, Any]]:
    """A frame's ``(type, data)``; a frame that is not such a message raises :class:`RequestError`."""
    try:
        message = loads(raw)
    except (ValueError, RecursionError) as error:
        raise RequestError("INVALID_JSON", f"Invalid JSON: {error}") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise RequestError("VALIDATION_ERROR", "A message is an object with a string 'type'.")
    return message["type"], request_data(message.get("data"))


async def answer(session: Session, kind: str, data: dict[str, Any]) -> dict[str, Any]:
    """The answer to a ``reset``, ``step`` or ``state`` request of ``session``: its result, or an
    ``error`` message when it cannot be served (the session goes on either way)."""
    try:
        if kind == "step":
            return await session.step(data)
        if kind == "reset":
            return await session.reset(data)
        if kind == "state":
            return session.state()
        return error_message(
            "UNKNOWN_TYPE", f"Unknown message type {kind!r:.40}; expected reset, step, state or close."
        )
    except RequestError as error:
        return error_message(error.code, str(error))
    except Error as error:  # the env refused the request (unknown reset option, bad level, ...)
        return error_message("ENV_ERROR", f"{type(error).__name__}: {error}")
    except Exception as error:  # the env raised: report it, keep serving
        return error_message("EXECUTION_ERROR", f"{type(error).__name__}: {error}")


class Connection(Protocol):
    """What the pool keeps of a connection: a ``Session`` (``/ws``) or a ``BatchSession`` (``/ws/batch``)."""

    session_id: str
    websocket: Any
    last_activity: float
    num_envs: int

    def close(self) -> None: ...


OpenedConnection = TypeVar("OpenedConnection", bound=Connection)


class SessionPool:
    """The open connections, the limit on the envs they hold, and the reaper of idle ones.

    Every env counts against ``max_sessions``: a ``/ws`` session holds one, a ``/ws/batch``
    connection as many as it asked for.
    """

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.sessions: dict[str, Connection] = {}
        self.active_envs = 0
        self.opened = 0
        self.reaped = 0
        self.refused = 0

    def open(self, websocket: Any) -> Session | None:
        return self.admit(1, lambda: Session(self.config, websocket))

    def admit(self, num_envs: int, build: Callable[[], OpenedConnection]) -> OpenedConnection | None:
        """``build()``'s connection, kept, when ``num_envs`` more envs fit; None (refused) otherwise."""
        if self.active_envs + num_envs > self.config.max_sessions:
            self.refused += 1
            return None
        connection = build()
        self.sessions[connection.session_id] = connection
        self.active_envs += connection.num_envs
        self.opened += 1
        return connection

    @property
    def free_envs(self) -> int:
        return self.config.max_sessions - self.active_envs

    def release(self, session: Connection) -> None:
        if self.sessions.pop(session.session_id, None) is not None:
            self.active_envs -= session.num_envs
            session.close()

    async def reap_forever(self) -> None:
        period = min(5.0, self.config.idle_timeout / 4)
        while True:
            await asyncio.sleep(period)
            self.reap()

    def reap(self) -> None:
        deadline = time.monotonic() - self.config.idle_timeout
        for session in [s for s in self.sessions.values() if s.last_activity < deadline]:
            self.release(session)
            self.reaped += 1
            # Freed first, closed after: a peer that never answers the close handshake holds a
            # socket for close_timeout, but no longer a session slot.
            asyncio.get_running_loop().create_task(_close_quietly(session.websocket, 1001, "idle timeout"))


async def _close_quietly(websocket: Any, code: int = 1000, reason: str = "") -> None:
    with contextlib.suppress(Exception):
        await websocket.close(code=code, reason=reason)


def create_app(config: ServeConfig) -> Any:
    """The FastAPI app serving ``config.env_id``; run it with any ASGI server (``main`` uses uvicorn)."""
    try:
        from llmgym.integrations.app import build_app
    except ImportError as missing:
        raise DependencyNotInstalled(
            f"llmgym-serve needs FastAPI ({missing}). Install it with: pip install 'llmgym[integrations]'"
        ) from missing
    return build_app(config)


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """``["size=8", "grid=spaced"]`` -> ``{"size": 8, "grid": "spaced"}``: JSON values, else strings."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise InvalidOptionError(
                f"Options are key=value, got {pair!r}. Example: llmgym-serve llmgym/Sokoban-v0 max_turns=30"
            )
        try:
            options[key] = json.loads(text)
        except ValueError:
            options[key] = text
    return options


def build_parser() -> argparse.ArgumentParser:
    defaults = ServeConfig(env_id="")
    parser = argparse.ArgumentParser(
        prog="llmgym-serve",
        description="Serve an llmgym env over OpenEnv's protocol (WS /ws, one env per session).",
    )
    parser.add_argument("env_id", help="a registered id, e.g. llmgym/Sokoban-v0")
    parser.add_argument("options", nargs="*", metavar="key=value", help="options to gym.make (JSON values)")
    parser.add_argument("--host", default=defaults.host)
    parser.add_argument("--port", type=int, default=defaults.port)
    parser.add_argument("--max-sessions", type=int, default=defaults.max_sessions)
    parser.add_argument("--idle-timeout", type=float, default=defaults.idle_timeout, help="seconds")
    parser.add_argument(
        "--ping-interval", type=float, default=defaults.ping_interval, help="seconds; 0: no pings"
    )
    parser.add_argument("--ping-timeout", type=float, default=defaults.ping_timeout, help="seconds")
    parser.add_argument("--max-action-chars", type=int, default=defaults.max_action_chars)
    parser.add_argument("--step-in-thread", choices=["auto", "yes", "no"], default=defaults.step_in_thread)
    parser.add_argument(
        "--ws-impl",
        default="websockets-sansio",
        choices=["websockets-sansio", "websockets"],
        help="uvicorn's WebSocket implementation",
    )
    parser.add_argument(
        "--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"]
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    # Intermixed: options may follow flags, as in `llmgym-serve ID --port 8000 max_turns=30`.
    args = build_parser().parse_intermixed_args(argv)
    try:
        import uvicorn
    except ImportError as missing:
        raise DependencyNotInstalled(
            f"llmgym-serve needs uvicorn ({missing}). Install it with: pip install 'llmgym[integrations]'"
        ) from missing
    try:
        config = ServeConfig(
            env_id=args.env_id,
            options=parse_options(args.options),
            host=args.host,
            port=args.port,
            max_sessions=args.max_sessions,
            idle_timeout=args.idle_timeout,
            ping_interval=args.ping_interval or None,
            ping_timeout=args.ping_timeout or None,
            max_action_chars=args.max_action_chars,
            step_in_thread=args.step_in_thread,
        )
        app = create_app(config)
    except (gym.error.Error, Error) as error:
        sys.exit(f"llmgym-serve: {error}")
    print(
        f"llmgym-serve: {config.env_id} on ws://{config.host}:{config.port}/ws and /ws/batch "
        f"(max {config.max_sessions} envs, idle timeout {config.idle_timeout:g} s)",
        flush=True,
    )
    uvicorn.run(
        app,
        host=config.host,
        port=config.port,
        log_level=args.log_level,
        ws=args.ws_impl,
        ws_ping_interval=config.ping_interval,
        ws_ping_timeout=config.ping_timeout,
        # Frames up to 4 bytes a character pass the socket, so an over-long action is answered
        # with ACTION_TOO_LONG instead of a dropped connection; on /ws/batch, a batch of every
        # env's longest action.
        ws_max_size=config.max_sessions * (4 * config.max_action_chars + 256) + 65_536,
    )


if __name__ == "__main__":
    main()
