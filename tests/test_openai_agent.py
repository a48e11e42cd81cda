"""The ``openai:<base_url>#<model>`` agent against a real ``vllm serve`` of SmolLM2 on loopback."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from llmgym_train.eval.agents import AgentOptions, Sampling, Turn, make_agent
from llmgym_train.eval.leaderboard import main

pytestmark = pytest.mark.vllm

SERVED_NAME = "smollm2"
#: Engine start is about a minute on a 2-core machine; the rest of the budget is slack.
STARTUP_TIMEOUT_SECONDS = 150


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_healthy(url: str, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"vllm serve exited with {server.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(1)
    pytest.fail(f"vllm serve not healthy after {STARTUP_TIMEOUT_SECONDS}s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of an OpenAI-compatible vLLM server of SmolLM2; killed (with its engine) at teardown."""
    pytest.importorskip("vllm")
    from llmgym_train.models import resolve_model

    model = resolve_model("smollm2-135m")
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm-serve") / "server.log"
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model), "--served-model-name", SERVED_NAME,
        "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", "1024", "--gpu-memory-utilization", "0.5", "--enforce-eager",
        # float32: bf16 sums depend on how requests are batched, and greedy ties then differ.
        "--dtype", "float32",
    ]
    environment = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2"}
    with log.open("w") as output:
        # A session of its own, so teardown reaches the engine process the server spawns.
        server = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=environment,
                                  start_new_session=True)
    try:
        _wait_healthy(f"http://127.0.0.1:{port}/health", server, log)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def test_agent_replies_deterministically_at_temperature_zero(server_url: str) -> None:
    options = AgentOptions(sampling=Sampling(temperature=0.0, max_tokens=32))
    agent = make_agent(f"openai:{server_url}#{SERVED_NAME}", options)
    env = gym.make("llmgym/FrozenLake-v0").unwrapped
    observation, info = env.reset(seed=0)
    messages = [
        {"role": "system", "content": info["system_prompt"]},
        {"role": "user", "content": observation},
    ]
    turns = [Turn(env=env, messages=messages, rng=np.random.default_rng(seed)) for seed in (0, 1, 2)]
    replies = [agent.act([turn])[0] for turn in turns]  # one at a time: the same batch shape each call
    agent.close()
    assert len({reply.text for reply in replies}) == 1, "greedy decoding of one prompt gives one answer"
    assert replies[0].text.strip()
    assert replies[0].prompt_tokens > 40, "the system prompt and the board were sent"
    assert 1 <= replies[0].completion_tokens <= 32


def test_leaderboard_row_through_the_endpoint(server_url: str, tmp_path: Path) -> None:
    spec = f"openai:{server_url}#{SERVED_NAME}"
    main(["--agents", spec, "--envs", "FrozenLake-v0", "--limit", "4", "--max-turns", "3",
          "--max-tokens", "48", "--output-dir", str(tmp_path), "--no-progress"])
    row = json.loads((tmp_path / "leaderboard.json").read_text())["results"][0]
    assert row["agent"] == spec
    assert row["agent_settings"]["base_url"] == server_url and row["agent_settings"]["max_tokens"] == 48
    episodes = row["episodes"]
    assert len(episodes) == 4 and all(1 <= episode["turns"] <= 3 for episode in episodes)
    for episode in episodes:
        assert 1 <= episode["completion_tokens"] <= 48 * episode["turns"]
    assert row["summary"]["completion_tokens_per_episode"] > 0
    assert f"`{spec}`" in (tmp_path / "leaderboard.md").read_text()
