"""Served-env throughput: Sokoban-v0 over loopback, beside in-process and beside OpenEnv's own server.

Three ways to play the same episodes (seed ``k`` reset, then ``episode_steps`` moves cycled over
the four directions), in one run:

* in-process: one ``gym.make`` env per session, stepped in a loop in this process;
* llmgym-serve: ``num_sessions`` WebSocket sessions from one asyncio client process;
* OpenEnv: OpenEnv's ``create_app`` around the same env (an OpenEnv ``Environment`` that wraps
  the gym env), served by uvicorn, played by the same client sending the same frames.

Client and server share this machine's cores, so steps/s is what both ends together reach.
Figures: ``steps_per_s`` (served), ``p50_step_latency_ms`` (client send -> answer),
``p50_overhead_ms`` (served p50 latency minus the in-process mean step time),
``ratio_vs_openenv`` (llmgym-serve steps/s over OpenEnv's), and ``p50_overhead_one_session_ms``
(the same overhead with one session alone: with 64 sessions a step's latency is mostly the
63 steps queued ahead of it, ``num_sessions / steps_per_s``). Goals: steps/s >= 10,000,
p50 overhead < 1 ms, ratio >= 1.0.

Run: ``python -m benchmarks.serve_throughput [--num-sessions 64] [--seconds 15]``.
Writes ``benchmarks/results/serve_throughput.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import gymnasium as gym

import llmgym  # noqa: F401 - registers the ids
from benchmarks.common import write_result

ROOT = Path(__file__).resolve().parents[1]
MOVES = [f"<answer>{move}</answer>" for move in ("Up", "Right", "Down", "Left")]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_healthy(port: int, process: subprocess.Popen, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
            return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError("server did not come up")


def start_server(kind: str, env_id: str, port: int, num_sessions: int) -> subprocess.Popen:
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    if kind == "llmgym":
        command = [
            sys.executable,
            "-m",
            "llmgym.integrations.serve",
            env_id,
            "--port",
            str(port),
            "--max-sessions",
            str(num_sessions + 8),
            "--ping-interval",
            "0",
        ]
    else:
        command = [
            sys.executable,
            "-m",
            "benchmarks.serve_throughput",
            "--openenv-server",
            str(port),
            "--env-id",
            env_id,
            "--num-sessions",
            str(num_sessions),
        ]
    # Output is dropped, not piped: a server that logs every closed socket (OpenEnv's does) would
    # block on a full pipe nobody reads.
    process = subprocess.Popen(
        command, cwd=ROOT, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    wait_healthy(port, process)
    return process


# ---------------------------------------------------------------- OpenEnv's server around the same env
def openenv_app(env_id: str, num_sessions: int) -> Any:
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, Observation, State

    class TextAction(Action):
        text: str

    class TextObservation(Observation):
        text: str = ""
        terminated: bool = False
        truncated: bool = False
        info: dict[str, Any] = {}

    class GymTextEnvironment(Environment):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self) -> None:
            super().__init__()
            self.env = gym.make(env_id)
            self._state = State(step_count=0)

        def reset(
            self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
        ) -> TextObservation:
            text, info = self.env.reset(seed=seed)
            self._state = State(episode_id=episode_id, step_count=0)
            return TextObservation(text=text, info=info)

        def step(self, action: TextAction, timeout_s: float | None = None, **kwargs: Any) -> TextObservation:
            text, reward, terminated, truncated, info = self.env.step(action.text)
            self._state.step_count += 1
            return TextObservation(
                text=text,
                reward=float(reward),
                done=terminated or truncated,
                terminated=terminated,
                truncated=truncated,
                info=info,
            )

        @property
        def state(self) -> State:
            return self._state

        def close(self) -> None:
            self.env.close()

    return create_app(GymTextEnvironment, TextAction, TextObservation, max_concurrent_envs=num_sessions + 8)


# ---------------------------------------------------------------- the client
async def play_sessions(port: int, num_sessions: int, seconds: float, episode_steps: int) -> dict[str, Any]:
    from websockets.asyncio.client import connect

    latencies: list[float] = []
    steps = [0]
    stop_at = [0.0]

    async def session(index: int) -> None:
        async with connect(f"ws://127.0.0.1:{port}/ws", max_size=None, ping_interval=None) as ws:
            episode = 0
            while time.perf_counter() < stop_at[0]:
                await ws.send(json.dumps({"type": "reset", "data": {"seed": index * 100_000 + episode}}))
                json.loads(await asyncio.wait_for(ws.recv(), 60))
                for turn in range(episode_steps):
                    sent = time.perf_counter()
                    await ws.send(json.dumps({"type": "step", "data": {"text": MOVES[turn % 4]}}))
                    answer = json.loads(await asyncio.wait_for(ws.recv(), 60))
                    latencies.append(time.perf_counter() - sent)
                    assert answer["type"] == "observation", answer
                    steps[0] += 1
                    if answer["data"]["done"]:
                        break
                episode += 1

    stop_at[0] = time.perf_counter() + seconds
    start = time.perf_counter()
    await asyncio.gather(*(session(index) for index in range(num_sessions)))
    elapsed = time.perf_counter() - start
    ordered = sorted(latencies)
    return {
        "steps": steps[0],
        "seconds": round(elapsed, 2),
        "steps_per_s": round(steps[0] / elapsed, 1),
        "p50_step_latency_ms": round(1000 * ordered[len(ordered) // 2], 3),
        "p99_step_latency_ms": round(1000 * ordered[int(len(ordered) * 0.99)], 3),
    }


def in_process(env_id: str, num_sessions: int, seconds: float, episode_steps: int) -> dict[str, Any]:
    envs = [gym.make(env_id) for _ in range(num_sessions)]
    step_time, steps, episode = 0.0, 0, 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for index, env in enumerate(envs):
            env.reset(seed=index * 100_000 + episode)
            for turn in range(episode_steps):
                began = time.perf_counter()
                _, _, terminated, truncated, _ = env.step(MOVES[turn % 4])
                step_time += time.perf_counter() - began
                steps += 1
                if terminated or truncated:
                    break
        episode += 1
    elapsed = time.perf_counter() - start
    return {
        "steps": steps,
        "seconds": round(elapsed, 2),
        "steps_per_s_with_resets": round(steps / elapsed, 1),
        "steps_per_s": round(steps / step_time, 1),
        "mean_step_ms": round(1000 * step_time / steps, 4),
    }


def served(kind: str, env_id: str, num_sessions: int, seconds: float, episode_steps: int) -> dict[str, Any]:
    port = free_port()
    process = start_server(kind, env_id, port, num_sessions)
    try:
        return asyncio.run(play_sessions(port, num_sessions, seconds, episode_steps))
    finally:
        stop_server(process)


def stop_server(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:  # uvicorn waits for open sockets; the figures are in already
        process.kill()
        process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-id", default="llmgym/Sokoban-v0")
    parser.add_argument("--num-sessions", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=15.0, help="per way of playing")
    parser.add_argument("--episode-steps", type=int, default=20)
    parser.add_argument("--openenv-server", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.openenv_server is not None:  # the OpenEnv server's own process
        import uvicorn

        uvicorn.run(
            openenv_app(args.env_id, args.num_sessions),
            host="127.0.0.1",
            port=args.openenv_server,
            log_level="warning",
            ws_ping_interval=None,
        )
        return

    load_start = os.getloadavg()
    local = in_process(args.env_id, args.num_sessions, args.seconds, args.episode_steps)
    ours = served("llmgym", args.env_id, args.num_sessions, args.seconds, args.episode_steps)
    theirs = served("openenv", args.env_id, args.num_sessions, args.seconds, args.episode_steps)
    # One session alone: the latency a step pays for the wire, without 63 others queued ahead of it.
    alone = served("llmgym", args.env_id, 1, min(args.seconds, 5.0), args.episode_steps)
    load_end = os.getloadavg()
    overhead = ours["p50_step_latency_ms"] - local["mean_step_ms"]
    figures = {
        "env_id": args.env_id,
        "num_sessions": args.num_sessions,
        "seconds_each": args.seconds,
        "episode_steps": args.episode_steps,
        "cpu_count": os.cpu_count(),
        "load_average_start": [round(value, 2) for value in load_start],
        "load_average_end": [round(value, 2) for value in load_end],
        "in_process": local,
        "llmgym_serve": ours,
        "openenv_create_app": theirs,
        "llmgym_serve_one_session": alone,
        "p50_overhead_one_session_ms": round(alone["p50_step_latency_ms"] - local["mean_step_ms"], 3),
        "steps_per_s": ours["steps_per_s"],
        "p50_overhead_ms": round(overhead, 3),
        "ratio_vs_openenv": round(ours["steps_per_s"] / theirs["steps_per_s"], 3),
        "goals": {"steps_per_s": 10_000, "p50_overhead_ms": 1.0, "ratio_vs_openenv": 1.0},
        "goals_met": {
            "steps_per_s": ours["steps_per_s"] >= 10_000,
            "p50_overhead_ms": overhead < 1.0,
            "ratio_vs_openenv": ours["steps_per_s"] >= theirs["steps_per_s"],
        },
    }
    path = write_result("serve_throughput", figures)
    print(json.dumps({key: figures[key] for key in ("steps_per_s", "p50_overhead_ms", "ratio_vs_openenv")}))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
