"""Served-env throughput: Sokoban-v0 over loopback, beside in-process and beside OpenEnv's own server.

Ways to play the same episodes (env ``k`` resets with seed ``k * 100000 + episode``, then plays
``episode_steps`` moves cycled over the four directions), in one run:

* in-process: one ``gym.make`` env per session, stepped in a loop in this process;
* llmgym-serve, per session: ``num_sessions`` ``/ws`` sessions (one env each, one message per
  env step) from one asyncio client process;
* OpenEnv: OpenEnv's ``create_app`` around the same env (an OpenEnv ``Environment`` that wraps
  the gym env), served by uvicorn, played by the same client sending the same frames;
* llmgym-serve, batched: llmgym's vector env with ``backend=ServedEnvBackend(url)``, its
  ``num_sessions`` envs on ``/ws/batch`` (one message per vector step), over one connection and
  over each count in ``--batch-connections``; ``autoreset_mode="disabled"``, every env reset with
  its seed after ``episode_steps`` (a vector reset: one more message), ended envs masked out;
  the one-connection run is repeated as two vector envs of half the envs each, stepped at once
  (``areset`` / ``astep`` in one event loop, ``llmgym_serve_batched_pipelined``: one's messages
  travel and the client works while the server steps the other's, as a trainer's rollouts over
  several vector envs do), and with a ``/ws`` session stepping beside it every 2 ms
  (``llmgym_serve_batched_with_bystander``: that session's latency shows how long a batch keeps
  another connection waiting);
* inline vector env: the same vector-env loop with ``backend="inline"``, in this process.

Client and server share this machine's cores, so steps/s is what both ends together reach,
resets included in the wall time of every served row. Figures:

* ``steps_per_s``: env steps per second of the pipelined batched path (two vector envs in
  flight), over the wall time, resets included (one vector env's figure stands beside it);
  each vector row also has ``steps_per_s_stepping``, over the time spent in vector steps only
  (comparable to the in-process ``steps_per_s``, which times steps only);
* ``p50_overhead_ms``: the pipelined path's p50 overhead per env step, amortized over the vector
  step: (p50 vector-step latency, ``step`` call to results, minus the in-process time of the same
  env steps, ``envs per vector step * in-process mean step time``) / envs per vector step. A
  rollout waits on whole vector steps, so ``batched_p50_vector_step_overhead_ms`` (the same
  difference, not divided) stands beside it, with the vector step's p50 and p99 latency;
* ``ratio_vs_openenv``: per-session llmgym-serve steps/s over OpenEnv's (OpenEnv has no batched
  path, so this compares like with like);
* per session, kept beside them: ``per_session_steps_per_s``, ``per_session_p50_overhead_ms``
  (served p50 latency minus the in-process mean step time) and ``p50_overhead_one_session_ms``
  (the same with one session alone: with 64 sessions a step's latency is mostly the 63 steps
  queued ahead of it).

Goals: steps/s >= 10,000, p50 overhead < 1 ms, ratio >= 1.0; ``goals_judged_on`` names the row
each is judged on.

Run: ``python -m benchmarks.serve_throughput [--num-sessions 64] [--seconds 15] [--out PATH]``.
Writes ``benchmarks/results/serve_throughput.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import gymnasium as gym

import llmgym  # noqa: F401 - registers the ids
from benchmarks.common import RESULTS_DIR, write_result
from llmgym.vector import TextVectorEnv, make_vector_env
from llmgym.vector.served_backend import ServedEnvBackend

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


def play_vector(venv: TextVectorEnv, seconds: float, episode_steps: int) -> dict[str, Any]:
    """Episodes as the per-session client plays them, every env in one vector step at a time."""
    return play_vectors([venv], seconds, episode_steps)


def play_vectors(venvs: list[TextVectorEnv], seconds: float, episode_steps: int) -> dict[str, Any]:
    """:func:`play_vector` on each vector env at once (``areset`` / ``astep`` in one event loop),
    so one's messages travel while the server works on another's; figures over all of them. One
    vector env plays with plain ``reset`` / ``step``."""
    latencies: list[float] = []
    counted = [0]
    pipelined = len(venvs) > 1

    async def reset(venv: TextVectorEnv, seeds: list[int]) -> None:
        if pipelined:
            await venv.areset(seed=seeds)
        else:
            venv.reset(seed=seeds)

    async def step(venv: TextVectorEnv, actions: list[str], mask: Any) -> None:
        if pipelined:
            await venv.astep(actions, mask=mask)
        else:
            venv.step(actions, mask=mask)

    async def play(venv: TextVectorEnv, first_seed: int, deadline: float) -> None:
        num_envs, episode = venv.num_envs, 0
        while time.perf_counter() < deadline:
            await reset(venv, [first_seed + index * 100_000 + episode for index in range(num_envs)])
            for turn in range(episode_steps):
                mask = ~venv.needs_reset
                if not mask.any():
                    break
                sent = time.perf_counter()
                await step(venv, [MOVES[turn % 4]] * num_envs, mask)
                latencies.append(time.perf_counter() - sent)
                counted[0] += int(mask.sum())
            episode += 1

    async def play_all() -> None:
        deadline = time.perf_counter() + seconds
        firsts = [sum(venv.num_envs for venv in venvs[:index]) * 100_000 for index in range(len(venvs))]
        await asyncio.gather(*(play(venv, first, deadline) for venv, first in zip(venvs, firsts)))

    start = time.perf_counter()
    asyncio.run(play_all())
    elapsed, steps, ordered = time.perf_counter() - start, counted[0], sorted(latencies)
    return {
        "num_envs": sum(venv.num_envs for venv in venvs),
        "steps": steps,
        "seconds": round(elapsed, 2),
        "steps_per_s": round(steps / elapsed, 1),
        "steps_per_s_stepping": round(len(venvs) * steps / sum(latencies), 1),
        "vector_steps": len(latencies),
        "envs_per_vector_step": round(steps / len(latencies), 2),
        "p50_vector_step_ms": round(1000 * ordered[len(ordered) // 2], 3),
        "p99_vector_step_ms": round(1000 * ordered[int(len(ordered) * 0.99)], 3),
    }


def batched(
    env_id: str, num_envs: int, connections: int, seconds: float, episode_steps: int, bystander: bool = False,
    vectors: int = 1,
) -> dict[str, Any]:
    """The batched path: llmgym's vector env on ``/ws/batch``, ``connections`` connections; with
    ``bystander``, a ``/ws`` session steps beside it (see :func:`bystander_steps`); with ``vectors``
    above one, the envs split into that many vector envs stepped at once (:func:`play_vectors`)."""
    port = free_port()
    process = start_server("llmgym", env_id, port, num_envs + 1)
    stop, latencies = threading.Event(), []
    beside = threading.Thread(target=bystander_steps, args=(port, episode_steps, stop, latencies))
    venvs: list[TextVectorEnv] = []
    try:
        for _ in range(vectors):
            venvs.append(make_vector_env(env_id, num_envs // vectors, num_workers=connections,
                                         backend=ServedEnvBackend(f"ws://127.0.0.1:{port}"),
                                         autoreset_mode="disabled"))
        try:
            if bystander:
                beside.start()
            row = {"connections": connections, "vector_envs": vectors,
                   **play_vectors(venvs, seconds, episode_steps)}
        finally:
            stop.set()
            if bystander:
                beside.join()
    finally:
        for venv in venvs:
            venv.close()
        stop_server(process)
    if bystander:
        ordered = sorted(latencies)
        row["bystander_steps"] = len(ordered)
        row["bystander_p50_step_latency_ms"] = round(1000 * ordered[len(ordered) // 2], 3)
        row["bystander_p99_step_latency_ms"] = round(1000 * ordered[int(len(ordered) * 0.99)], 3)
    return row


def bystander_steps(port: int, episode_steps: int, stop: threading.Event, latencies: list[float]) -> None:
    """A ``/ws`` session stepping every 2 ms beside a batched connection: how long the batch's
    work keeps another connection waiting."""
    from websockets.sync.client import connect

    with connect(f"ws://127.0.0.1:{port}/ws", compression=None, max_size=None) as ws:
        episode = 0
        while not stop.is_set():
            ws.send(json.dumps({"type": "reset", "data": {"seed": 10_000_000 + episode}}))
            ws.recv(timeout=60)
            for turn in range(episode_steps):
                sent = time.perf_counter()
                ws.send(json.dumps({"type": "step", "data": {"text": MOVES[turn % 4]}}))
                answer = json.loads(ws.recv(timeout=60))
                latencies.append(time.perf_counter() - sent)
                if answer["data"]["done"] or stop.wait(0.002):
                    break
            episode += 1


def inline_vector(env_id: str, num_envs: int, seconds: float, episode_steps: int) -> dict[str, Any]:
    venv = make_vector_env(env_id, num_envs, autoreset_mode="disabled")
    try:
        return play_vector(venv, seconds, episode_steps)
    finally:
        venv.close()


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


def batched_figures(
    local: dict[str, Any], rows: list[dict[str, Any]], pipelined: dict[str, Any]
) -> dict[str, Any]:
    """The batched rows and their overheads (see the module docstring for the definitions)."""

    def overheads(row: dict[str, Any]) -> tuple[float, float, float]:
        same_steps_ms = row["envs_per_vector_step"] * local["mean_step_ms"]
        vector_overhead = row["p50_vector_step_ms"] - same_steps_ms
        per_env_step = vector_overhead / row["envs_per_vector_step"]
        return round(same_steps_ms, 3), round(vector_overhead, 3), round(per_env_step, 4)

    first = rows[0]
    same, vector_overhead, per_step = overheads(first)
    pipelined_same, pipelined_vector_overhead, pipelined_per_step = overheads(pipelined)
    return {
        "llmgym_serve_batched": first,
        "llmgym_serve_batched_connections": rows[1:],
        "llmgym_serve_batched_pipelined": pipelined,
        "batched_in_process_same_steps_ms": same,
        "batched_p50_vector_step_overhead_ms": vector_overhead,
        "batched_p50_overhead_per_env_step_ms": per_step,
        "pipelined_in_process_same_steps_ms": pipelined_same,
        "pipelined_p50_vector_step_overhead_ms": pipelined_vector_overhead,
        "pipelined_p50_overhead_per_env_step_ms": pipelined_per_step,
    }


#: What each headline figure means, written into the JSON beside it.
DEFINITIONS = {
    "steps_per_s": "env steps per second of llmgym_serve_batched_pipelined (num_sessions envs as two vector "
    "envs on a /ws/batch connection each, both stepping at once), over wall time with the resets between "
    "episodes included",
    "p50_overhead_ms": "(p50 vector-step latency - envs per vector step * in-process mean step time) / envs "
    "per vector step, of llmgym_serve_batched_pipelined: the wire's cost per env step, amortized over a "
    "vector step (batched_p50_overhead_per_env_step_ms: the same for one vector env of num_sessions)",
    "batched_p50_vector_step_overhead_ms": "p50 batched vector-step latency - in-process time of the same "
    "env steps: what a rollout waiting on a whole vector step waits beyond in-process",
    "per_session_p50_overhead_ms": "p50 /ws step latency with num_sessions sessions - in-process mean step "
    "time",
    "p50_overhead_one_session_ms": "p50 /ws step latency of one session alone - in-process mean step time",
    "ratio_vs_openenv": "per-session llmgym-serve steps/s over OpenEnv create_app's, same client and frames",
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-id", default="llmgym/Sokoban-v0")
    parser.add_argument("--num-sessions", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=15.0, help="per way of playing")
    parser.add_argument("--episode-steps", type=int, default=20)
    parser.add_argument("--batch-connections", type=int, nargs="*", default=[2, 4],
                        help="more connection counts for the batched path (beside one connection)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "serve_throughput.json",
                        help="the JSON to write")
    parser.add_argument("--openenv-server", type=int, default=None, help=argparse.SUPPRESS)
    return parser.parse_args()


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every way of playing, one after the other, and the figures derived from them."""
    load_start = os.getloadavg()
    play = (args.env_id, args.num_sessions, args.seconds, args.episode_steps)
    local = in_process(*play)
    ours = served("llmgym", *play)
    theirs = served("openenv", *play)
    # One session alone: the latency a step pays for the wire, without 63 others queued ahead of it.
    alone = served("llmgym", args.env_id, 1, min(args.seconds, 5.0), args.episode_steps)
    rows = [batched(args.env_id, args.num_sessions, connections, args.seconds, args.episode_steps)
            for connections in [1, *args.batch_connections]]
    pipelined = batched(args.env_id, args.num_sessions, 1, args.seconds, args.episode_steps, vectors=2)
    beside = batched(args.env_id, args.num_sessions, 1, args.seconds, args.episode_steps, bystander=True)
    inline = inline_vector(*play)
    load_end = os.getloadavg()
    per_session_overhead = ours["p50_step_latency_ms"] - local["mean_step_ms"]
    return {
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
        **batched_figures(local, rows, pipelined),
        "llmgym_serve_batched_with_bystander": beside,
        "inline_vector_env": inline,
        "per_session_steps_per_s": ours["steps_per_s"],
        "per_session_p50_overhead_ms": round(per_session_overhead, 3),
        "p50_overhead_one_session_ms": round(alone["p50_step_latency_ms"] - local["mean_step_ms"], 3),
        "ratio_vs_openenv": round(ours["steps_per_s"] / theirs["steps_per_s"], 3),
    }


def main() -> None:
    args = parse_args()
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
    figures = measure(args)
    figures["steps_per_s"] = figures["llmgym_serve_batched_pipelined"]["steps_per_s"]
    figures["p50_overhead_ms"] = figures["pipelined_p50_overhead_per_env_step_ms"]
    figures["goals"] = {"steps_per_s": 10_000, "p50_overhead_ms": 1.0, "ratio_vs_openenv": 1.0}
    figures["definitions"] = DEFINITIONS
    figures["goals_judged_on"] = {
        "steps_per_s": "llmgym_serve_batched_pipelined (two vector envs of num_sessions / 2, both in flight)",
        "p50_overhead_ms": "llmgym_serve_batched_pipelined, per env step "
        "(pipelined_p50_overhead_per_env_step_ms)",
        "ratio_vs_openenv": "llmgym_serve (per session, /ws) against openenv_create_app",
    }
    figures["goals_met"] = {
        "steps_per_s": figures["steps_per_s"] >= 10_000,
        "p50_overhead_ms": figures["p50_overhead_ms"] < 1.0,
        "ratio_vs_openenv": figures["ratio_vs_openenv"] >= 1.0,
    }
    path = write_result(args.out.stem, figures, args.out.parent)
    keys = ("steps_per_s", "p50_overhead_ms", "ratio_vs_openenv", "per_session_steps_per_s")
    print(json.dumps({key: figures[key] for key in keys}))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
