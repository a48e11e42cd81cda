"""Served-env reliability: many sessions, hostile messages and vanished clients against one llmgym-serve.

One server (a subprocess, ``llmgym-serve llmgym/Sokoban-v0`` on loopback) and, from one asyncio
client process, all at once for ``--seconds``:

* ``--num-sessions`` sessions each playing full episodes (the solver's plan for a level drawn
  from a pool of seeds, so every episode ends solved) and checking each one ends with success;
* hostile clients sending ``--hostile`` malformed or out-of-turn messages (bad JSON, binary
  junk, wrong types, unknown types and keys, step before reset, step after the end, an
  over-long action, a bad seed, an unknown option), each of which must get an error answer;
* ``--dropped`` clients that reset, step, and then vanish mid-episode without a close frame.

Afterwards the server's own ``/health`` session count is read once the idle timeout has
passed: ``sessions_leaked`` is what is still open (goal 0). ``server_restarts`` counts the
times the server process had to be started again (goal 0).

Run: ``python -m benchmarks.serve_reliability [--seconds 60]``.
Writes ``benchmarks/results/serve_reliability.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import time
import urllib.request
from typing import Any

import gymnasium as gym

import llmgym  # noqa: F401 - registers the ids
from benchmarks.common import write_result
from benchmarks.serve_throughput import free_port, start_server, stop_server

HOSTILE_FRAMES: list[str | bytes] = [
    "not json {",
    b"\xff\xfe\x00binary junk",
    "[1, 2, 3]",
    '{"type": 7}',
    '{"type": "dance", "data": {}}',
    '{"type": "step", "data": "Up"}',
    '{"type": "step", "data": {"txt": "<answer>Up</answer>"}}',
    '{"type": "step", "data": {"text": "<answer>Up</answer>"}}',  # before any reset on this connection
    '{"type": "reset", "data": {"seed": -3}}',
    '{"type": "reset", "data": {"options": {"levle": 1}}}',
    json.dumps({"type": "step", "data": {"text": "x" * 70_000}}),
    "{" * 5000,
]


def health(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as answer:
        return json.loads(answer.read())


def level_plans(env_id: str, count: int) -> dict[int, list[str]]:
    env = gym.make(env_id)
    plans = {}
    for seed in range(count):
        env.reset(seed=seed)
        plans[seed] = [f"<answer>{move}</answer>" for move in env.unwrapped.solution()]
    env.close()
    return plans


async def hostile(url: str, index: int, count: int, seconds: float, figures: dict[str, Any]) -> None:
    """Send ``count`` hostile frames, spread over the run; each must be answered with an error."""
    from websockets.asyncio.client import connect

    shift = index % len(HOSTILE_FRAMES)
    frames = itertools.cycle(HOSTILE_FRAMES[shift:] + HOSTILE_FRAMES[:shift])
    pause = seconds * 0.8 / max(count, 1)
    try:
        async with connect(url, max_size=None) as ws:
            for _ in range(count):
                await ws.send(next(frames))
                figures["hostile_sent"] += 1
                answer = json.loads(await ws.recv())
                if answer["type"] == "error":
                    figures["hostile_answered_with_error"] += 1
                    figures["errors_returned"] += 1
                await asyncio.sleep(pause)
    except Exception:
        figures["client_failures"] += 1


async def dropper(url: str, index: int, delay: float, figures: dict[str, Any]) -> None:
    """Reset, step once, then vanish mid-episode: no close frame, no FIN handshake."""
    from websockets.asyncio.client import connect

    await asyncio.sleep(delay)
    ws = await connect(url, max_size=None)
    await ws.send(json.dumps({"type": "reset", "data": {"seed": index}}))
    await ws.recv()
    await ws.send(json.dumps({"type": "step", "data": {"text": "<answer>Up</answer>"}}))
    await ws.recv()
    ws.transport.abort()
    figures["dropped"] += 1


async def run_load(port: int, args: argparse.Namespace, plans: dict[int, list[str]]) -> dict[str, Any]:
    from websockets.asyncio.client import connect

    url = f"ws://127.0.0.1:{port}/ws"
    stop_at = time.perf_counter() + args.seconds
    figures = {
        "episodes_completed": 0,
        "episodes_unsolved": 0,
        "steps": 0,
        "errors_returned": 0,
        "hostile_sent": 0,
        "hostile_answered_with_error": 0,
        "dropped": 0,
        "client_failures": 0,
    }
    latencies: list[float] = []

    async def player(index: int) -> None:
        rng = random.Random(index)
        try:
            async with connect(url, max_size=None) as ws:
                while time.perf_counter() < stop_at:
                    seed = rng.randrange(len(plans))
                    await ws.send(json.dumps({"type": "reset", "data": {"seed": seed}}))
                    json.loads(await ws.recv())
                    answer: dict[str, Any] = {}
                    for action in plans[seed]:
                        sent = time.perf_counter()
                        await ws.send(json.dumps({"type": "step", "data": {"text": action}}))
                        answer = json.loads(await ws.recv())
                        latencies.append(time.perf_counter() - sent)
                        figures["steps"] += 1
                    solved = (
                        answer.get("data", {}).get("observation", {}).get("info", {}).get("success") is True
                    )
                    figures["episodes_completed" if solved else "episodes_unsolved"] += 1
        except Exception:
            figures["client_failures"] += 1

    hostile_clients = 10
    per_client = args.hostile // hostile_clients
    tasks = [player(index) for index in range(args.num_sessions)]
    tasks += [
        hostile(url, index, per_client + (index < args.hostile % hostile_clients), args.seconds, figures)
        for index in range(hostile_clients)
    ]
    tasks += [
        dropper(url, index, args.seconds * 0.8 * index / max(args.dropped, 1), figures)
        for index in range(args.dropped)
    ]
    start = time.perf_counter()
    await asyncio.gather(*tasks)
    return {**figures, **speed(figures["steps"], time.perf_counter() - start, latencies)}


def speed(steps: int, elapsed: float, latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "seconds": round(elapsed, 1),
        "steps_per_s": round(steps / elapsed, 1),
        "p50_step_latency_ms": round(1000 * ordered[len(ordered) // 2], 2),
        "p99_step_latency_ms": round(1000 * ordered[int(len(ordered) * 0.99)], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-id", default="llmgym/Sokoban-v0")
    parser.add_argument("--num-sessions", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--hostile", type=int, default=1000)
    parser.add_argument("--dropped", type=int, default=50)
    parser.add_argument("--idle-timeout", type=float, default=10.0)
    parser.add_argument("--levels", type=int, default=64, help="seeds whose solver plans the players replay")
    parser.add_argument("--name", default="serve_reliability")
    args = parser.parse_args()

    plans = level_plans(args.env_id, args.levels)
    load_start = os.getloadavg()
    port = free_port()
    limit = args.num_sessions + args.dropped + 32
    server = start_server("llmgym", args.env_id, port, limit)  # sized for everyone at once
    restarts = 0
    try:
        before = health(port)
        figures = asyncio.run(run_load(port, args, plans))
        if server.poll() is not None:
            restarts += 1
        during = health(port)
        time.sleep(args.idle_timeout + 6)  # past the idle timeout and a reaper period
        after = health(port)
    finally:
        stop_server(server)
    load_end = os.getloadavg()
    result = {
        "env_id": args.env_id,
        "num_sessions": args.num_sessions,
        "hostile_messages": args.hostile,
        "dropped_clients": args.dropped,
        "idle_timeout_s": args.idle_timeout,
        "cpu_count": os.cpu_count(),
        "load_average_start": [round(value, 2) for value in load_start],
        "load_average_end": [round(value, 2) for value in load_end],
        **figures,
        "sessions_open_right_after_load": during["active_sessions"],
        "sessions_leaked": after["active_sessions"],
        "sessions_reaped": after["sessions_reaped"],
        "sessions_opened": after["sessions_opened"] - before["sessions_opened"],
        "server_restarts": restarts,
        "goals": {"sessions_leaked": 0, "server_restarts": 0},
    }
    path = write_result(args.name, result)
    headline = (
        "episodes_completed",
        "errors_returned",
        "sessions_leaked",
        "server_restarts",
        "p50_step_latency_ms",
        "p99_step_latency_ms",
    )
    print(json.dumps({key: result[key] for key in headline}))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
