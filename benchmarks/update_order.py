"""Benchmark: seconds of one GRPO update on single-turn groups, micro-batches cut by group or by length alone.

    python -m benchmarks.update_order [--env llmgym/Math-Easy-v0] [--groups 4] [--group-size 16] [--rounds 3]

The workload is a step of the ``math-easy-grpo`` recipe: ``--groups`` problems of ``--env``
(their real prompts, rendered by the SmolLM2 chat template with the recipe's ``<answer>``
prefix), ``--group-size`` replies each of 1 to ``--reply-tokens`` tokens (ids drawn at random;
the seconds do not depend on them), rewards of 1 on every fourth reply so every group carries
a gradient. Two orders of the rows before they are cut into micro-batches of
``--group-size``:

* ``groups``: :func:`llmgym_train.update.micro_batch_order`, the trainer's (each group's rows
  together, so a micro-batch runs its group's whole prompt once);
* ``length``: longest row first alone, the trainer's order before it (groups interleave and a
  micro-batch shares no more than the system prompt).

The gradient is the same either way (up to float rounding); each round runs both orders a few
seconds apart, in one process, after one warm-up update that creates AdamW's moments.

Results: ``benchmarks/results/update_order.json``, with the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS_DIR, write_result
from benchmarks.step_memory import _batch, _step


def length_order(batch: Any) -> Any:
    """Longest row first, rows of one context together: the order without groups."""
    import torch

    from llmgym_train.policy import same_context_rows

    lengths = batch.attention_mask.sum(dim=1)
    _, context = same_context_rows(batch.input_ids, batch.attention_mask)
    return torch.argsort(-lengths * (len(batch) + 1) + context, stable=True)


def group_samples(env_id: str, groups: int, group_size: int, reply_tokens: int, tokenizer: Any) -> list[Any]:
    """``groups`` x ``group_size`` single-turn samples: each group one real prompt of ``env_id``, random
    replies."""
    import gymnasium as gym
    import numpy as np

    import llmgym  # noqa: F401 - registers the ids
    from llmgym_train.chat import ChatTokens
    from llmgym_train.data import Sample

    chat = ChatTokens(tokenizer, response_prefix="<answer>")
    env = gym.make(env_id)
    rng = np.random.default_rng(0)
    samples = []
    for group in range(groups):
        observation, info = env.reset(seed=group)
        prompt = chat.prompt(observation, info.get("system_prompt"))
        for member in range(group_size):
            reply = rng.integers(10, len(tokenizer), size=int(rng.integers(1, reply_tokens + 1))).tolist()
            loss_mask = [0] * len(prompt) + [1] * len(reply)
            reward = float(member % 4 == 0)
            samples.append(Sample(
                token_ids=prompt + reply, loss_mask=loss_mask,
                behavior_logprobs=[-1.0 if mask else 0.0 for mask in loss_mask],
                token_rewards=[0.0] * len(loss_mask), reward=reward, episode_return=reward,
                success=reward > 0,
                actions_valid=True, cut_off=False, truncated=False, group_id=group,
                episode_index=group * group_size + member, turn_index=0, num_turns=1,
            ))
    env.close()
    order = rng.permutation(len(samples))  # as a rollout of several envs leaves them
    return [samples[index] for index in order]


def measure(args: argparse.Namespace) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """Seconds of each order's update, one per round, and the workload's shape."""
    import torch
    from transformers import AutoTokenizer

    from llmgym_train import update
    from llmgym_train.config import load_config
    from llmgym_train.models import resolve_model
    from llmgym_train.policy import Policy

    folder = resolve_model(args.model)
    config = load_config(values={
        "model": args.model, "model_options.gradient_checkpointing": False, "algo": "grpo",
        "loss.normalize_std": False, "optim.micro_batch_size": args.group_size,
    })
    policy = Policy.load(folder, config.model_options, with_value=False, with_reference=False)
    samples = group_samples(args.env, args.groups, args.group_size, args.reply_tokens,
                            AutoTokenizer.from_pretrained(folder))
    batch = _batch(samples, policy.pad_token_id, config)
    orders = {"groups": update.micro_batch_order, "length": length_order}
    seconds: dict[str, list[float]] = {name: [] for name in orders}
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-9)
    try:
        _step(policy, optimizer, batch, config)  # warm-up: AdamW's moments, allocator pools
        for round_index in range(args.rounds):
            for name, order in orders.items():
                update.micro_batch_order = order
                started = time.perf_counter()
                _step(policy, optimizer, batch, config)
                seconds[name].append(round(time.perf_counter() - started, 2))
                print(f"round {round_index + 1}/{args.rounds}  {name}: {seconds[name][-1]} s", flush=True)
    finally:
        update.micro_batch_order = orders["groups"]
    lengths = [len(sample.token_ids) for sample in samples]
    shape = {"samples": len(samples), "tokens": sum(lengths), "longest": max(lengths),
             "shortest": min(lengths)}
    return seconds, shape


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="llmgym/Math-Easy-v0")
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=16)
    parser.add_argument("--reply-tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "update_order.json")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    seconds, shape = measure(args)
    speedups = [length / groups for length, groups in zip(seconds["length"], seconds["groups"], strict=True)]
    path = write_result(args.out.stem, {
        "model": args.model, "env": args.env, "groups": args.groups, "group_size": args.group_size,
        "reply_tokens": args.reply_tokens, "rounds": args.rounds, "workload": shape,
        "seconds": seconds,
        "seconds_median": {name: statistics.median(times) for name, times in seconds.items()},
        "speedup_groups_vs_length": [round(value, 2) for value in speedups],
        "speedup_median": round(statistics.median(speedups), 2),
        "load_average_before": [round(value, 2) for value in load_before],
        "load_average_after": [round(value, 2) for value in os.getloadavg()],
    }, args.out.parent)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
