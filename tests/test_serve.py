"""llmgym-serve against OpenEnv's own client, the remote env, bad requests and vanished clients.

Every server here is a subprocess started through the console script's module on 127.0.0.1,
on a free port, and stopped by the test.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import llmgym
from llmgym.integrations.protocol import json_safe

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
websockets_sync = pytest.importorskip("websockets.sync.client")

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server:
    """``python -m llmgym.integrations.serve ENV_ID ...`` on a free loopback port."""

    def __init__(self, env_id: str, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        environment = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "llmgym.integrations.serve", env_id, "--port", str(self.port), *args],
            cwd=ROOT,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.process.stdout.read() if self.process.stdout else ""
            try:
                self.health()
                return
            except OSError:
                time.sleep(0.2)
        raise TimeoutError(f"llmgym-serve {env_id} did not answer /health within 60 s")

    def get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + path, timeout=10) as answer:
            return json.loads(answer.read())

    def health(self) -> dict[str, Any]:
        return self.get("/health")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)  # a test may have left it stopped
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture()
def serve() -> Iterator[Any]:
    servers: list[Server] = []

    def start(env_id: str, *args: str) -> Server:
        servers.append(Server(env_id, *args))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def in_process_transcript(env_id: str, seed: int, actions: list[str]) -> list[Any]:
    env = gym.make(env_id)
    observation, info = env.reset(seed=seed)
    transcript: list[Any] = [(observation, json_safe(info))]
    for action in actions:
        observation, reward, terminated, truncated, info = env.step(action)
        transcript.append((observation, reward, terminated, truncated, json_safe(info)))
        if terminated or truncated:
            break
    env.close()
    return transcript


def scripted_actions(env_id: str, seed: int) -> list[str]:
    """The solver's plan for the seed; on grids an unparseable and an illegal move go in front
    (a math or tool-use episode ends at its first answer)."""
    env = gym.make(env_id)
    env.reset(seed=seed)
    plan = env.unwrapped.solution()
    env.close()
    noise = ["no answer here", "<answer>Sideways</answer>"] if "Lake" in env_id or "Sokoban" in env_id else []
    return noise + [f"<answer>{step}</answer>" for step in plan]


TRANSCRIPT_IDS = [
    "llmgym/FrozenLake-v0",
    "llmgym/Sokoban-v0",
    "llmgym/Math-v0",
    "llmgym/ToolUse-Calculator-v0",
]


@pytest.mark.parametrize("env_id", TRANSCRIPT_IDS)
def test_openenv_client_plays_the_same_transcript_as_in_process(serve: Any, env_id: str) -> None:
    from openenv.core import GenericEnvClient

    server = serve(env_id)
    for seed in (0, 7):
        actions = scripted_actions(env_id, seed)
        expected = in_process_transcript(env_id, seed, actions)
        with GenericEnvClient(base_url=server.url).sync() as client:
            result = client.reset(seed=seed)
            assert result.reward is None and result.done is False
            got: list[Any] = [(result.observation["text"], result.observation["info"])]
            for action in actions:
                result = client.step({"text": action})
                observation = result.observation
                got.append(
                    (
                        observation["text"],
                        result.reward,
                        observation["terminated"],
                        observation["truncated"],
                        observation["info"],
                    )
                )
                assert result.done == (observation["terminated"] or observation["truncated"])
                if result.done:
                    break
            state = client.state()
            assert state["step_count"] == len(got) - 1 and state["seed"] == seed
        assert got == expected, f"{env_id} seed {seed}: served transcript differs from the in-process one"
        assert got[-1][4]["success"] is True  # the solver's plan reached the goal over the wire
    assert server.health()["active_sessions"] == 0


def test_remote_env_is_a_gymnasium_env(serve: Any) -> None:
    from gymnasium.utils.env_checker import check_env

    server = serve("llmgym/Sokoban-v0")
    env = gym.make("llmgym/Remote-v0", url=server.url, env_id="llmgym/Sokoban-v0")
    check_env(env.unwrapped, skip_render_check=True)
    actions = scripted_actions("llmgym/Sokoban-v0", 3)
    observation, info = env.reset(seed=3)
    got: list[Any] = [(observation, info)]
    for action in actions:
        got.append(env.step(action))
        if got[-1][2] or got[-1][3]:
            break
    assert got == in_process_transcript("llmgym/Sokoban-v0", 3, actions)
    with pytest.raises(llmgym.error.ResetNeeded):
        env.step("<answer>Up</answer>")
    env.close()
    assert "llmgym/Remote-v0" in llmgym.env_ids(include_remote=True)
    assert "llmgym/Remote-v0" not in llmgym.env_ids()
    with pytest.raises(llmgym.error.RemoteEnvError, match="UNKNOWN_ENV_ID"):
        gym.make("llmgym/Remote-v0", url=server.url, env_id="llmgym/FrozenLake-v0")


def test_vector_env_plays_remote_envs(serve: Any) -> None:
    server = serve("llmgym/FrozenLake-v0")
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("llmgym/Remote-v0", url=server.url) for _ in range(3)])
    observations, infos = envs.reset(seed=[0, 1, 2])
    local = [gym.make("llmgym/FrozenLake-v0").reset(seed=seed)[0] for seed in (0, 1, 2)]
    assert list(observations) == local
    assert server.health()["active_sessions"] == 3
    envs.close()
    deadline = time.monotonic() + 10
    while server.health()["active_sessions"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.health()["active_sessions"] == 0


def exchange(connection: Any, frame: str | bytes) -> dict[str, Any]:
    connection.send(frame)
    return json.loads(connection.recv(timeout=10))


def test_bad_requests_get_errors_and_the_server_keeps_serving(serve: Any) -> None:
    server = serve("llmgym/Sokoban-v0", "--max-sessions", "3", "--max-action-chars", "1000")
    ws = server.url.replace("http://", "ws://") + "/ws"
    with websockets_sync.connect(ws) as bystander, websockets_sync.connect(ws) as hostile:
        assert (
            exchange(bystander, json.dumps({"type": "reset", "data": {"seed": 1}}))["type"] == "observation"
        )
        cases = {
            '{"type": "step", "data": {"text": "<answer>Up</answer>"}}': "RESET_NEEDED",
            "not json {": "INVALID_JSON",
            "[1, 2]": "VALIDATION_ERROR",
            '{"type": "dance"}': "UNKNOWN_TYPE",
            '{"type": "reset", "data": {"seed": "zero"}}': "VALIDATION_ERROR",
            '{"type": "reset", "data": {"sed": 1}}': "VALIDATION_ERROR",
            '{"type": "reset", "data": {"options": {"levle": 1}}}': "ENV_ERROR",
            '{"type": "reset", "data": {"options": {"level": "not a level"}}}': "ENV_ERROR",
            '{"type": "step", "data": 5}': "VALIDATION_ERROR",
        }
        for frame, code in cases.items():
            answer = exchange(hostile, frame)
            assert answer["type"] == "error" and answer["data"]["code"] == code, (frame, answer)
        assert exchange(hostile, b"\xff\xfe binary junk")["type"] == "error"
        assert exchange(hostile, json.dumps({"type": "reset", "data": {"seed": 2}}))["type"] == "observation"
        answer = exchange(hostile, json.dumps({"type": "step", "data": {"text": "x" * 1001}}))
        assert answer["data"]["code"] == "ACTION_TOO_LONG"
        env = gym.make("llmgym/Sokoban-v0")
        env.reset(seed=2)
        for move in env.unwrapped.solution():
            answer = exchange(
                hostile, json.dumps({"type": "step", "data": {"text": f"<answer>{move}</answer>"}})
            )
        assert answer["data"].get("done") is True, answer
        answer = exchange(hostile, json.dumps({"type": "step", "data": {"text": "<answer>Up</answer>"}}))
        assert answer["data"]["code"] == "EPISODE_ENDED"
        # the bystander's episode was untouched by all of it
        answer = exchange(bystander, json.dumps({"type": "step", "data": {"text": "<answer>Up</answer>"}}))
        assert answer["type"] == "observation" and answer["data"]["observation"]["info"]["turn"] == 1
        with websockets_sync.connect(ws + "?env_id=llmgym/Nope-v0") as stranger:
            assert json.loads(stranger.recv(timeout=10))["data"]["code"] == "UNKNOWN_ENV_ID"
        with websockets_sync.connect(ws) as third, websockets_sync.connect(ws) as fourth:
            assert exchange(third, '{"type": "state"}')["type"] == "state"
            assert json.loads(fourth.recv(timeout=10))["data"]["code"] == "CAPACITY_REACHED"
    assert server.health()["status"] == "healthy"
    schema = server.get("/schema")
    assert (
        schema["action"]["required"] == ["text"]
        and schema["action"]["properties"]["text"]["maxLength"] == 1000
    )
    assert server.process.poll() is None


def test_unknown_id_fails_at_start_with_a_suggestion() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "llmgym.integrations.serve", "llmgym/Sokoban-v9", "--port", str(free_port())],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "Sokoban" in result.stderr


def test_vanished_clients_free_their_sessions(serve: Any) -> None:
    """Clients that drop mid-episode without a close frame, and one that goes silent."""
    server = serve("llmgym/Sokoban-v0", "--idle-timeout", "2", "--ping-interval", "1", "--ping-timeout", "1")
    ws = server.url.replace("http://", "ws://") + "/ws"
    for index in range(5):
        connection = websockets_sync.connect(ws)
        exchange(connection, json.dumps({"type": "reset", "data": {"seed": index}}))
        exchange(connection, json.dumps({"type": "step", "data": {"text": "<answer>Up</answer>"}}))
        connection.socket.shutdown(socket.SHUT_RDWR)  # no close frame: a vanished client
        connection.socket.close()
    silent = websockets_sync.connect(ws)  # answers pings, never sends: only the idle timeout frees it
    exchange(silent, json.dumps({"type": "reset", "data": {"seed": 9}}))
    deadline = time.monotonic() + 15
    while server.health()["active_sessions"] and time.monotonic() < deadline:
        time.sleep(0.2)
    health = server.health()
    assert health["active_sessions"] == 0, health
    assert health["sessions_reaped"] >= 1
    silent.close()
