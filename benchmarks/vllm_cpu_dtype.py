"""Benchmark: vLLM generation speed by engine dtype and KV block size on this machine.

    python -m benchmarks.vllm_cpu_dtype [--prompts 96]

Plays the generation of one Markov-agent turn over many FrozenLake-v1 levels: ``--prompts``
chat prompts (system prompt + one observation, about 107 SmolLM2 tokens) each sampled for 6
tokens, as one batch, with an engine per setting: float32 with KV blocks of 128
(vLLM's CPU default) and 32 (bfloat16 only with 32: it is slow enough to
show with one). Each setting is timed three times after a warm-up batch; the JSON
(``benchmarks/results/vllm_cpu_dtype.json``) has the median seconds and prompts/s, and the
load average at the start and end. It is why ``VllmGenerator`` runs float32 with 32-token
blocks on CPUs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from benchmarks.common import write_result

SETTINGS = (("bfloat16", 32), ("float32", 128), ("float32", 32))


def measure(dtype: str, block_size: int, prompts: list[list[int]]) -> dict[str, float]:
    from llmgym_train.generation import SamplingSpec
    from llmgym_train.generation.vllm_backend import VllmGenerator
    from llmgym_train.models import resolve_model

    generator = VllmGenerator(resolve_model("smollm2-135m"), max_model_len=512, dtype=dtype, block_size=block_size)
    sampling = [SamplingSpec(max_tokens=6, temperature=1.0)] * len(prompts)
    try:
        generator.generate(prompts, sampling)  # warm-up
        seconds = []
        for _ in range(3):
            generator.llm.reset_prefix_cache()  # each batch pays for its own prefixes once
            started = time.perf_counter()
            generator.generate(prompts, sampling)
            seconds.append(time.perf_counter() - started)
    finally:
        generator.close()
    median = statistics.median(seconds)
    return {"dtype": dtype, "block_size": block_size, "seconds": round(median, 2),
            "prompts_per_s": round(len(prompts) / median, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=96)
    args = parser.parse_args()
    import gymnasium as gym
    from transformers import AutoTokenizer

    import llmgym  # noqa: F401
    from llmgym_train.chat import ChatTokens
    from llmgym_train.models import resolve_model

    chat = ChatTokens(AutoTokenizer.from_pretrained(resolve_model("smollm2-135m")))
    env = gym.make("llmgym/FrozenLake-v1")
    prompts = []
    for seed in range(args.prompts):
        observation, info = env.reset(seed=seed)
        prompts.append(chat.prompt(observation, info["system_prompt"]))
    load_start = os.getloadavg()[0]
    rows = [measure(dtype, block_size, prompts) for dtype, block_size in SETTINGS]
    for row in rows:
        print(row, flush=True)
    by = {(row["dtype"], row["block_size"]): row["seconds"] for row in rows}
    path = write_result("vllm_cpu_dtype", {
        "prompts": len(prompts),
        "prompt_tokens": len(prompts[0]),
        "max_tokens": 6,
        "settings": rows,
        "float32_over_bfloat16": round(by[("bfloat16", 32)] / by[("float32", 32)], 2),
        "block32_over_block128_float32": round(by[("float32", 128)] / by[("float32", 32)], 2),
        "load_average_start": round(load_start, 2),
        "load_average_end": round(os.getloadavg()[0], 2),
    })
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
