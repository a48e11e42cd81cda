"""``llmgym/Remote-v0``: an env served by ``llmgym-serve`` (on this machine or another), as a Gymnasium env.

    env = gym.make("llmgym/Remote-v0", url="ws://host:8000", env_id="llmgym/Sokoban-v0")

Each instance holds one WebSocket session (one env on the server), so llmgym's vector env and
trainer play served envs as they play local ones.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, ClassVar

import gymnasium as gym

from llmgym.error import DependencyNotInstalled, InvalidOptionError, RemoteEnvError, ResetNeeded
from llmgym.spaces import MAX_ACTION_LENGTH, MAX_OBSERVATION_LENGTH, text_space


def ws_url(url: str) -> str:
    """``http://h:p`` / ``ws://h:p`` / ``ws://h:p/ws`` -> ``ws://h:p/ws`` (``https`` -> ``wss``)."""
    for plain, secure in (("http://", "ws://"), ("https://", "wss://")):
        if url.startswith(plain):
            url = secure + url[len(plain) :]
    if not url.startswith(("ws://", "wss://")):
        raise InvalidOptionError(f"url must start with ws://, wss://, http:// or https://, got {url!r}.")
    url = url.rstrip("/")
    return url if url.endswith("/ws") else url + "/ws"


class RemoteEnv(gym.Env[str, str]):
    """A served llmgym env, played over one WebSocket session.

    Action Space:
        ``Text`` (llmgym's charset, max 8192 characters), as every llmgym env.

    Observation Space:
        ``Text`` (llmgym's charset, max 8192 characters): the served env's observations, unchanged.

    Rewards:
        The served env's.

    Episode End:
        The served env's ``terminated`` and ``truncated``, which travel apart on the wire.

    Arguments:
        url: the server, ``ws://host:port`` (``http://`` works too; ``/ws`` is added).
        env_id: the id the server must be serving (checked when connecting); None: any.
        timeout: seconds to wait for the connection and for each answer.
        render_mode: ``None`` only (the server keeps the state).

    Version History:
        * v0: initial version.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(
        self, *, url: str, env_id: str | None = None, timeout: float = 60.0, render_mode: str | None = None
    ) -> None:
        if render_mode is not None:
            raise InvalidOptionError(
                f"llmgym/Remote-v0 has no render modes, got render_mode={render_mode!r}."
            )
        try:
            from websockets.sync.client import connect
        except ImportError as missing:
            raise DependencyNotInstalled(
                f"llmgym/Remote-v0 needs websockets ({missing}). "
                "Install it with: pip install 'llmgym[integrations]'"
            ) from missing
        self.url = ws_url(url)
        self.env_id = env_id
        self.timeout = timeout
        self.render_mode = None
        self.observation_space = text_space(MAX_OBSERVATION_LENGTH)
        self.action_space = text_space(MAX_ACTION_LENGTH)
        target = self.url if env_id is None else f"{self.url}?env_id={env_id}"
        try:
            self._socket = connect(target, open_timeout=timeout, max_size=None, proxy=None)
        except OSError as error:
            raise RemoteEnvError(
                f"Cannot connect to {self.url}: {error}. Is llmgym-serve running there?",
                code="CONNECTION_LOST",
            ) from error
        try:
            self._request({"type": "state"})  # a wrong env_id or a full server fails here, at make
        except RemoteEnvError:
            self._socket.close()
            raise

    def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        from websockets.exceptions import ConnectionClosed

        try:
            # A refused session gets an error frame, then the close: read the frame even when the
            # close beat this send.
            with contextlib.suppress(ConnectionClosed):
                self._socket.send(json.dumps(message))
            answer = json.loads(self._socket.recv(timeout=self.timeout))
        except (ConnectionClosed, TimeoutError, OSError) as error:
            raise RemoteEnvError(
                f"Lost the session with {self.url}: {error!r}.", code="CONNECTION_LOST"
            ) from error
        if answer.get("type") == "error":
            data = answer.get("data", {})
            code, text = data.get("code", "UNKNOWN"), data.get("message", "")
            if code in ("RESET_NEEDED", "EPISODE_ENDED"):
                raise ResetNeeded(f"{text} (server code {code})")
            raise RemoteEnvError(f"{self.url} answered {code}: {text}", code=code)
        return answer["data"]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        data = self._request({"type": "reset", "data": {"seed": seed, "options": options}})
        return data["observation"]["text"], data["observation"]["info"]

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        data = self._request({"type": "step", "data": {"text": action}})
        observation = data["observation"]
        return (
            observation["text"],
            float(data["reward"]),
            observation["terminated"],
            observation["truncated"],
            observation["info"],
        )

    def state(self) -> dict[str, Any]:
        """The session's state on the server (episode id, step count, env id, seed)."""
        return self._request({"type": "state"})

    def close(self) -> None:
        socket = getattr(self, "_socket", None)
        if socket is None:
            return
        self._socket = None
        try:
            socket.send(json.dumps({"type": "close"}))
        except Exception:  # already gone: nothing to tell the server
            pass
        socket.close()
        super().close()
