"""The TRL and verifiers adapters, run by the real libraries (no stand-ins for them)."""

from __future__ import annotations

import gymnasium as gym
import pytest

import llmgym  # noqa: F401 - registers the ids
from llmgym.integrations.trl import accepts_split, environment_factory, seed_dataset

#: Qwen's chat tokens: TRL recognizes Qwen3's template (and its tool-call format) by its text.
QWEN_SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)


def qwen_char_tokenizer():
    """A character-level tokenizer with Qwen3's chat template, as TRL ships it."""
    from trl.chat_template_utils import qwen3_chat_template

    from llmgym_train.testing import character_tokenizer

    tokenizer = character_tokenizer(
        QWEN_SPECIALS,
        pad_token="<|endoftext|>",
        eos_token="<|im_end|>",
        additional_special_tokens=list(QWEN_SPECIALS[1:3]),
    )
    tokenizer.add_tokens(list(QWEN_SPECIALS[3:]))
    tokenizer.chat_template = qwen3_chat_template
    return tokenizer


@pytest.mark.parametrize(
    ("env_id", "tools"),
    [
        ("llmgym/FrozenLake-v0", {"move"}),
        ("llmgym/Sokoban-v0", {"move"}),
        ("llmgym/Math-v0", {"answer"}),
        ("llmgym/ToolUse-Calculator-v0", {"python", "calculator", "search", "answer"}),
    ],
)
def test_trl_adapter_tools_play_the_env_to_full_reward(env_id: str, tools: set[str]) -> None:
    from transformers.utils import get_json_schema

    env_class = environment_factory(env_id)
    public = {name for name in vars(env_class) if not name.startswith("_")} - {"env_id", "options"}
    assert public == tools
    for name in tools:
        assert get_json_schema(getattr(env_class(), name))["function"]["name"] == name
    episode = env_class()
    reference = gym.make(env_id)
    assert episode.reset(seed=5, prompt=[]) == reference.reset(seed=5)[0]
    for step in reference.unwrapped.solution():
        if "move" in tools:
            episode.move(step)
        elif step.startswith("<tool_call>"):
            episode.calculator(step.split('"expression": "')[1].split('"')[0])
        else:
            episode.answer(step)
    assert episode.transcript[-1]["success"] is True
    assert episode.get_reward() == pytest.approx(sum(turn.get("reward", 0.0) for turn in episode.transcript))


def test_trl_adapter_trains_on_the_train_split_where_there_is_one() -> None:
    env = environment_factory("llmgym/Sokoban-v0")()
    made = env._env.spec.kwargs
    assert ("split" in made) == accepts_split("llmgym/Sokoban-v0")
    if "split" in made:
        assert made["split"] == "train"


@pytest.mark.slow
def test_grpo_trainer_runs_two_steps_on_llmgym_episodes(tmp_path) -> None:
    trl = pytest.importorskip("trl")
    from llmgym_train.testing import tiny_model

    tokenizer = qwen_char_tokenizer()
    model = tiny_model(len(tokenizer), seed=0)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.config.eos_token_id = tokenizer.eos_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    env_id = "llmgym/FrozenLake-v0"
    dataset = seed_dataset(env_id, num_levels=4, start_seed=10)
    env_class = environment_factory(env_id)
    config = trl.GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=8,
        max_tool_calling_iterations=1,
        learning_rate=1e-4,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        bf16=False,
        save_strategy="no",
        seed=0,
        temperature=1.0,
        shuffle_dataset=False,
    )
    trainer = trl.GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=config,
        train_dataset=dataset,
        environment_factory=env_class,
    )
    trainer.train()
    assert trainer.state.global_step == 2
    logged = trainer._logs
    assert logged["prompt"], "GRPOTrainer logged no episodes"
    first_observations = {seed: gym.make(env_id).reset(seed=seed)[0] for seed in range(10, 14)}
    for prompt in logged["prompt"]:
        user_turn = next(message["content"] for message in prompt if message["role"] == "user")
        assert user_turn in first_observations.values(), user_turn
    # each GRPO group shares its level: rollouts come in pairs with the same first observation
    users = [next(m["content"] for m in prompt if m["role"] == "user") for prompt in logged["prompt"]]
    assert all(users[i] == users[i + 1] for i in range(0, len(users), 2))
    rewards = logged["rewards"][env_class.__name__]
    assert len(rewards) == len(users)
    pooled = trainer._environment_pool[None]
    assert {env.transcript[0]["observation"] for env in pooled} <= set(first_observations.values())


# ---------------------------------------------------------------- verifiers


def solver_replies(env_id: str, levels: list[dict]) -> dict[str, str]:
    """Observation text -> the optimal solver's reply, over the solved episodes of ``levels``."""
    table = {}
    for record in levels:
        env = gym.make(env_id)
        observation, _ = env.reset(options={"level": record["level"]})
        for move in env.unwrapped.solution():
            table[observation] = f"<answer>{move}</answer>"
            observation, *_ = env.step(f"<answer>{move}</answer>")
    return table


def scripted_endpoint(replies: dict[str, str], calls: list[dict]):
    """An OpenAI-compatible /v1/chat/completions that answers the last user turn from ``replies``."""
    import json

    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, StreamingResponse

    app = FastAPI()

    async def chat(request):  # a plain Starlette route: it gets the request as is
        body = await request.json()
        calls.append(body)
        last = [message for message in body["messages"] if message["role"] == "user"][-1]["content"]
        if isinstance(last, list):
            last = "".join(part.get("text", "") for part in last)
        reply = replies.get(last, "<answer>no idea</answer>")
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        if not body.get("stream"):
            return JSONResponse(
                {
                    "id": "scripted",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": reply},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": usage,
                }
            )

        def events():
            chunk = {
                "id": "scripted",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {"index": 0, "delta": {"role": "assistant", "content": reply}, "finish_reason": None}
                ],
            }
            yield f"data: {json.dumps(chunk)}\n\n"
            chunk["choices"] = [{"index": 0, "delta": {}, "finish_reason": "stop"}]
            yield f"data: {json.dumps({**chunk, 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    app.router.add_route("/v1/chat/completions", chat, methods=["POST"])
    return app


@pytest.mark.slow
def test_verifiers_evaluates_the_eval_set_and_the_solver_scores_one(tmp_path, monkeypatch) -> None:
    import asyncio
    import os
    import socket
    import sys
    import threading
    import time

    pytest.importorskip("verifiers.v1")
    import uvicorn
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig

    from llmgym.eval_sets import load_eval_set
    from llmgym.integrations.verifiers import load_environment

    env_id, num_levels = "llmgym/FrozenLake-v0", 2
    levels = load_eval_set(env_id)[:num_levels]
    calls: list[dict] = []
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            scripted_endpoint(solver_replies(env_id, levels), calls),
            host="127.0.0.1",
            port=port,
            log_level="warning",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    # verifiers runs its chat program with uv; the one this environment installed comes first
    monkeypatch.setenv("PATH", f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SCRIPTED_API_KEY", "unused")
    try:
        env = load_environment(env_id=env_id, num_levels=num_levels, runtime="subprocess")
        config = EvalConfig.model_validate(
            {
                "env": env.config.model_dump(),
                "model": "scripted",
                "num_rollouts": 1,
                "rich": None,
                "push": False,
                "client": {
                    "type": "eval",
                    "base_url": f"http://127.0.0.1:{port}/v1",
                    "api_key_var": "SCRIPTED_API_KEY",
                },
                "output_dir": str(tmp_path),
            }
        )
        episodes = asyncio.run(run_eval(config))
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    assert len(episodes) == num_levels and all(episode.ok for episode in episodes)
    played = sorted(episode.traces[0].info["level_index"] for episode in episodes)
    assert played == [record["index"] for record in levels]  # the frozen eval levels, in full
    for episode in episodes:
        trace = episode.traces[0]
        assert trace.rewards["env_reward"].score == 1.0 and trace.info["success"] is True
        assert trace.info["steps"] == levels[trace.info["level_index"]]["optimal_steps"]
    assert len(calls) == sum(record["optimal_steps"] for record in levels)
