"""``WS /ws/batch`` (many envs on one connection) and the vector env's served backend.

Every server is a real ``llmgym-serve`` subprocess on a loopback port (``Server`` from
``test_serve``); every client is the real WebSocket client. Every wait has a bound, so a failure
shows as an error, never as a hung test.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from llmgym.error import (
    InvalidOptionError,
    RemoteEnvError,
    SnapshotNotSupported,
    SubEnvError,
    SubEnvTimeout,
    WorkerDiedError,
)
from llmgym.vector import TextVectorEnv, make_vector_env
from llmgym.vector.served_backend import ServedEnvBackend

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
websockets_sync = pytest.importorskip("websockets.sync.client")

from test_serve import TRANSCRIPT_IDS, Server, in_process_transcript, scripted_actions  # noqa: E402
from test_serve import serve  # noqa: E402,F401 - the fixture
from test_vector import NUM_ENVS, assert_same, play_with_masks, script_with_resets  # noqa: E402

pytestmark = pytest.mark.timeout(240)


def batch_ws(server: Server, num_envs: int, query: str = "") -> str:
    return server.url.replace("http://", "ws://") + f"/ws/batch?num_envs={num_envs}{query}"


def exchange(connection: Any, message: Any) -> dict[str, Any]:
    connection.send(message if isinstance(message, (str, bytes)) else json.dumps(message))
    return json.loads(connection.recv(timeout=30))


def run_batch(connection: Any, items: list[Any]) -> list[dict[str, Any]]:
    answer = exchange(connection, {"type": "batch", "data": {"items": items}})
    assert answer["type"] == "batch", answer
    assert len(answer["data"]["items"]) == len(items)
    return answer["data"]["items"]


def wait_for_sessions(server: Server, count: int, seconds: float = 15.0) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while server.health()["active_sessions"] != count and time.monotonic() < deadline:
        time.sleep(0.1)
    return server.health()


# ---------------------------------------------------------------------- the protocol
def _batched_transcripts(server: Server, seeds: list[int], plans: list[list[str]]) -> list[list[Any]]:
    """Reset every env in one message, then step every env still playing in one message per turn."""
    got: list[list[Any]] = [[] for _ in seeds]
    with websockets_sync.connect(batch_ws(server, len(seeds))) as connection:
        answers = run_batch(connection, [{"index": index, "type": "reset", "data": {"seed": seed}}
                                         for index, seed in enumerate(seeds)])
        for index, item in enumerate(answers):
            assert item["index"] == index and item["type"] == "observation" and item["data"]["reward"] is None
            got[index].append((item["data"]["observation"]["text"], item["data"]["observation"]["info"]))
        playing = set(range(len(seeds)))
        for turn in range(max(len(plan) for plan in plans)):
            items = [{"index": index, "type": "step", "data": {"text": plans[index][turn]}}
                     for index in sorted(playing) if turn < len(plans[index])]
            if not items:
                break
            for item in run_batch(connection, items):
                data, index = item["data"], item["index"]
                observation = data["observation"]
                got[index].append((observation["text"], data["reward"], observation["terminated"],
                                   observation["truncated"], observation["info"]))
                assert data["done"] == (observation["terminated"] or observation["truncated"])
                if data["done"]:
                    playing.discard(index)
        states = run_batch(connection, [{"index": index, "type": "state"} for index in range(len(seeds))])
        assert [item["data"]["step_count"] for item in states] == [len(rows) - 1 for rows in got]
    return got


@pytest.mark.parametrize("env_id", TRANSCRIPT_IDS)
def test_batched_play_equals_in_process_play_step_by_step(serve: Any, env_id: str) -> None:
    server = serve(env_id)
    seeds = [0, 7]
    plans = [scripted_actions(env_id, seed) for seed in seeds]
    got = _batched_transcripts(server, seeds, plans)
    for seed, plan, transcript in zip(seeds, plans, got):
        expected = in_process_transcript(env_id, seed, plan)
        assert transcript == expected, f"{env_id} seed {seed}: batched and in-process transcripts differ"
        assert transcript[-1][4]["success"] is True  # the solver's plan reached the goal over the wire
    assert wait_for_sessions(server, 0)["active_sessions"] == 0


def test_item_errors_leave_the_other_items_and_the_connection_working(serve: Any) -> None:
    server = serve("llmgym/Sokoban-v0", "--max-sessions", "4", "--max-action-chars", "1000")
    ws = server.url.replace("http://", "ws://") + "/ws"
    with websockets_sync.connect(ws) as bystander, websockets_sync.connect(batch_ws(server, 3)) as connection:
        assert exchange(bystander, {"type": "reset", "data": {"seed": 1}})["type"] == "observation"
        items = [
            {"index": 0, "type": "step", "data": {"text": "<answer>Up</answer>"}},  # before its reset
            {"index": 1, "type": "reset", "data": {"seed": 2}},
            {"index": 3, "type": "reset"},  # no such env on this connection
            {"index": "2", "type": "reset"},
            "not an item",
            {"index": 1, "type": "state"},  # env 1 twice in one batch
        ]
        answers = run_batch(connection, items)
        assert [item["data"].get("code", item["type"]) for item in answers] == [
            "RESET_NEEDED", "observation", "UNKNOWN_INDEX", "UNKNOWN_INDEX", "VALIDATION_ERROR",
            "VALIDATION_ERROR"]
        assert [item["index"] for item in answers] == [0, 1, 3, "2", None, 1]
        assert "0..2" in answers[2]["data"]["message"] and "twice" in answers[5]["data"]["message"]
        items = [
            {"index": 0, "type": "dance"},
            {"index": 1, "type": "reset", "data": {"sed": 1}},
            {"index": 2, "type": "reset", "colour": "red"},
        ]
        answers = run_batch(connection, items)
        codes = [item["data"]["code"] for item in answers]
        assert codes == ["UNKNOWN_TYPE", "VALIDATION_ERROR", "VALIDATION_ERROR"]
        assert "'sed'" in answers[1]["data"]["message"] and "'colour'" in answers[2]["data"]["message"]
        for frame, code in {
            "not json {": "INVALID_JSON",
            "[1, 2]": "VALIDATION_ERROR",
            '{"type": "step", "data": {"items": []}}': "UNKNOWN_TYPE",
            '{"type": "batch", "data": {"items": 5}}': "VALIDATION_ERROR",
            '{"type": "batch", "data": {"itmes": []}}': "VALIDATION_ERROR",
            '{"type": "batch", "data": 5}': "VALIDATION_ERROR",
        }.items():
            answer = exchange(connection, frame)
            assert answer["type"] == "error" and answer["data"]["code"] == code, (frame, answer)
        assert exchange(connection, b"\xff\xfe binary junk")["type"] == "error"
        _errors_of_a_playing_env(connection)
        # the bystander's episode was untouched by all of it
        answer = exchange(bystander, {"type": "step", "data": {"text": "<answer>Up</answer>"}})
        assert answer["type"] == "observation" and answer["data"]["observation"]["info"]["turn"] == 1
    assert server.health()["status"] == "healthy" and server.process.poll() is None


def _errors_of_a_playing_env(connection: Any) -> None:
    """Too long an action, a bad level and a step after the end, each beside an env that plays on."""
    run_batch(connection, [{"index": 2, "type": "reset", "data": {"seed": 3}}])
    answers = run_batch(connection, [
        {"index": 1, "type": "step", "data": {"text": "x" * 1001}},
        {"index": 2, "type": "step", "data": {"text": "<answer>Up</answer>"}},
        {"index": 0, "type": "reset", "data": {"options": {"level": "not a level"}}},
    ])
    assert [item["data"].get("code", item["type"]) for item in answers] == [
        "ACTION_TOO_LONG", "observation", "ENV_ERROR"]
    env = gym.make("llmgym/Sokoban-v0")
    env.reset(seed=2)
    for move in env.unwrapped.solution():
        step = {"index": 1, "type": "step", "data": {"text": f"<answer>{move}</answer>"}}
        (answer,) = run_batch(connection, [step])
    assert answer["data"]["done"] is True, answer
    answers = run_batch(connection, [
        {"index": 1, "type": "step", "data": {"text": "<answer>Up</answer>"}},
        {"index": 2, "type": "step", "data": {"text": "<answer>Up</answer>"}},
    ])
    assert answers[0]["data"]["code"] == "EPISODE_ENDED"
    assert answers[1]["type"] == "observation" and answers[1]["data"]["observation"]["info"]["turn"] == 2
    state = exchange(connection, {"type": "state"})["data"]
    assert state["env_id"] == "llmgym/Sokoban-v0" and state["num_envs"] == 3
    assert [env["step_count"] for env in state["envs"]] == [0, len(env.unwrapped.solution()), 2]


def test_a_dropped_or_silent_batch_connection_frees_all_its_envs(serve: Any) -> None:
    server = serve("llmgym/Sokoban-v0", "--idle-timeout", "2", "--ping-interval", "1", "--ping-timeout", "1")
    dropped = websockets_sync.connect(batch_ws(server, 5))
    run_batch(dropped, [{"index": index, "type": "reset", "data": {"seed": index}} for index in range(5)])
    silent = websockets_sync.connect(batch_ws(server, 3))  # answers pings, never sends: idle, then reaped
    run_batch(silent, [{"index": 0, "type": "reset", "data": {"seed": 9}}])
    health = server.health()
    assert health["active_sessions"] == 8 and health["active_connections"] == 2, health
    dropped.socket.shutdown(socket.SHUT_RDWR)  # no close frame: a vanished client
    dropped.socket.close()
    health = wait_for_sessions(server, 0)
    assert health["active_sessions"] == 0 and health["sessions_reaped"] >= 1, health
    silent.close()
    with websockets_sync.connect(batch_ws(server, 4)) as closing:
        exchange(closing, {"type": "state"})
        assert server.health()["active_sessions"] == 4
        closing.send(json.dumps({"type": "close"}))
    assert wait_for_sessions(server, 0)["active_sessions"] == 0


def test_capacity_counts_every_env_and_refuses_what_does_not_fit(serve: Any) -> None:
    server = serve("llmgym/FrozenLake-v0", "--max-sessions", "6")
    ws = server.url.replace("http://", "ws://") + "/ws"
    with websockets_sync.connect(batch_ws(server, 4)) as first, websockets_sync.connect(ws) as single:
        assert exchange(first, {"type": "state"})["data"]["num_envs"] == 4
        assert exchange(single, {"type": "state"})["type"] == "state"
        with websockets_sync.connect(batch_ws(server, 2)) as refused:
            answer = json.loads(refused.recv(timeout=10))
        assert answer["data"]["code"] == "CAPACITY_REACHED" and "asks for 2 envs; 1 of the server's 6" in (
            answer["data"]["message"])
        for asked in ("0", "seven", "7"):
            bad_url = batch_ws(server, 0).replace("num_envs=0", f"num_envs={asked}")
            with websockets_sync.connect(bad_url) as bad:
                assert json.loads(bad.recv(timeout=10))["data"]["code"] == "VALIDATION_ERROR"
        with websockets_sync.connect(batch_ws(server, 1, "&env_id=llmgym/Sokoban-v0")) as stranger:
            assert json.loads(stranger.recv(timeout=10))["data"]["code"] == "UNKNOWN_ENV_ID"
        with pytest.raises(RemoteEnvError, match="CAPACITY_REACHED") as refusal:
            make_vector_env("llmgym/FrozenLake-v0", 2, backend=ServedEnvBackend(server.url))
        assert refusal.value.code == "CAPACITY_REACHED"
        with websockets_sync.connect(batch_ws(server, 1)) as last:
            assert exchange(last, {"type": "state"})["data"]["num_envs"] == 1
            assert server.health()["active_sessions"] == 6
    health = wait_for_sessions(server, 0)
    assert health["active_sessions"] == 0 and health["sessions_refused"] >= 2, health


# ---------------------------------------------------------------------- the vector env's served backend
@pytest.mark.parametrize(
    ("env_id", "autoreset_mode", "connections"),
    [
        ("llmgym/FrozenLake-Slippery-v0", "next_step", 1),  # slippery: the env's RNG moves in step too
        ("llmgym/FrozenLake-Slippery-v0", "same_step", 2),
        ("llmgym/FrozenLake-Slippery-v0", "disabled", 3),
        ("llmgym/Sokoban-v0", "next_step", 2),
    ],
)
def test_served_backend_matches_the_inline_backend(
    serve: Any, env_id: str, autoreset_mode: str, connections: int
) -> None:
    server = serve(env_id, "max_turns=4")
    local = make_vector_env(env_id, 8, autoreset_mode=autoreset_mode, max_turns=4)
    remote = make_vector_env(env_id, 8, autoreset_mode=autoreset_mode, backend=ServedEnvBackend(server.url),
                             num_workers=connections, max_turns=4)
    try:
        assert remote.backend_name == "served"
        health = server.health()
        assert health["active_sessions"] == 8 and health["active_connections"] == connections
        for use_async in (False, True):
            assert_same(play_with_masks(remote, 12, use_async), play_with_masks(local, 12, use_async))
    finally:
        local.close()
        remote.close()
    assert wait_for_sessions(server, 0)["active_sessions"] == 0


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.DISABLED, AutoresetMode.NEXT_STEP])
def test_served_autoreset_modes_match_gymnasium_sync_vector_env(serve: Any, mode: AutoresetMode) -> None:
    env_id = "llmgym/FrozenLake-v0"
    server = serve(env_id)
    local = SyncVectorEnv([lambda: gym.make(env_id)] * NUM_ENVS, autoreset_mode=mode)
    expected = script_with_resets(local, env_id, mode)
    venv = gym.make_vec(env_id, NUM_ENVS, backend=ServedEnvBackend(server.url), autoreset_mode=mode)
    got = script_with_resets(venv, env_id, mode)
    assert any(output[2].any() for output in expected[1:])  # episodes ended: autoreset was exercised
    assert_same(got, expected)


def test_served_backend_names_the_sub_env_when_the_server_errs_stalls_or_vanishes(serve: Any) -> None:
    server = serve("llmgym/Sokoban-v0")
    venv = make_vector_env("llmgym/Sokoban-v0", 4, backend=ServedEnvBackend(server.url, timeout=2.0),
                           num_workers=2, autoreset_mode="disabled")
    with pytest.raises(SubEnvError, match=r"Sub-env 1 \(seed 6\) raised ENV_ERROR in reset") as error:
        venv.reset(seed=[5, 6, 7, 8], options=[None, {"level": "not a level"}, None, None])
    assert error.value.index == 1
    assert venv.needs_reset.tolist() == [False, True, False, False]  # the others did reset
    venv.reset(seed=[None, 6, None, None], mask=np.array([False, True, False, False]))
    venv.step(["<answer>Up</answer>"] * 4)
    with pytest.raises(SnapshotNotSupported, match="lives on the server"):
        venv.get_state([0])
    os.kill(server.process.pid, signal.SIGSTOP)  # a server that takes the message and never answers
    started = time.monotonic()
    with pytest.raises(SubEnvTimeout, match=r"did not answer within 2 s") as stalled:
        venv.step(["<answer>Up</answer>"] * 4)
    assert stalled.value.index in (0, 2) and time.monotonic() - started < 15
    assert venv.closed
    os.kill(server.process.pid, signal.SIGCONT)
    assert wait_for_sessions(server, 0)["active_sessions"] == 0

    venv = make_vector_env("llmgym/Sokoban-v0", 4, backend=ServedEnvBackend(server.url, timeout=30.0))
    venv.reset(seed=0)
    server.process.kill()
    server.process.wait(timeout=20)
    started = time.monotonic()
    with pytest.raises(WorkerDiedError, match=r"Sub-env 0 \(seed 0\).*lost the connection") as died:
        venv.step(["<answer>Up</answer>"] * 4)
    assert died.value.index == 0 and time.monotonic() - started < 15 and venv.closed


def test_served_backend_refuses_a_server_of_another_id_or_options(serve: Any) -> None:
    server = serve("llmgym/FrozenLake-v0", "max_turns=4")
    with pytest.raises(RemoteEnvError, match="UNKNOWN_ENV_ID"):
        make_vector_env("llmgym/Sokoban-v0", 2, backend=ServedEnvBackend(server.url))
    with pytest.raises(InvalidOptionError, match="max_turns"):
        make_vector_env("llmgym/FrozenLake-v0", 2, backend=ServedEnvBackend(server.url), max_turns=5)
    with pytest.raises(InvalidOptionError, match="ServedEnvBackend"):
        make_vector_env("llmgym/FrozenLake-v0", 2, backend=ServedEnvBackend(server.url), step_timeout=1.0,
                        max_turns=4)
    assert wait_for_sessions(server, 0)["active_sessions"] == 0
