"""Rollout throughput against raw vLLM generation, in the same run.

Plays 64 multi-turn Sokoban episodes (16 groups x 4) with SmolLM2-135M-Instruct on an
in-process vLLM engine, and measures generated tokens per second of the whole rollout (env
steps, chat-template token bookkeeping, queueing and all). It then asks ``LLM.generate`` for
the same number of tokens from the episodes' first prompts in one call (every completion
the same length, no env in between): the best case for the engine. The figure is
``ratio = rollout tokens/s / raw tokens/s``; the raw pass runs before and after the rollout
and their mean is used, since the machine's speed drifts. The prefix cache is cleared
between passes, so neither reuses the other's prompt computation.

Run: ``python -m benchmarks.rollout_throughput [--episodes 64 --max-turns 4 --max-tokens 64]``.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

from benchmarks.common import write_result


def _first_turn(episode: Any) -> tuple[str, str]:
    """The first observation and system prompt of ``episode``'s level."""
    import gymnasium as gym

    observation, info = gym.make(episode.env_id, **episode.env_kwargs).reset(seed=episode.seed)
    return observation, info["system_prompt"]


def raw_generate_rate(generator: Any, prompts: list[list[int]], tokens_per_prompt: int) -> tuple[float, int]:
    """Tokens/s of one ``LLM.generate`` call producing ``tokens_per_prompt`` tokens per prompt."""
    import vllm

    params = vllm.SamplingParams(max_tokens=tokens_per_prompt, min_tokens=tokens_per_prompt, ignore_eos=True,
                                 temperature=1.0, logprobs=0, detokenize=False)
    start = time.perf_counter()
    outputs = generator.llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    elapsed = time.perf_counter() - start
    produced = sum(len(output.outputs[0].token_ids) for output in outputs)
    return produced / elapsed, produced


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="llmgym/Sokoban-v0")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens per turn")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from llmgym_train.agents import AgentConfig
    from llmgym_train.chat import ChatTokens
    from llmgym_train.generation import SamplingSpec
    from llmgym_train.generation.vllm_backend import VllmGenerator
    from llmgym_train.models import resolve_model
    from llmgym_train.planner import EnvMix, group_episodes
    from llmgym_train.rollout import rollout

    model = resolve_model("smollm2-135m")
    generator = VllmGenerator(model, max_model_len=2048, dtype="bfloat16", seed=args.seed)
    chat = ChatTokens(AutoTokenizer.from_pretrained(model))
    episodes = group_episodes([EnvMix(args.env, n_groups=args.episodes // args.group_size)], args.group_size, args.seed)
    config = AgentConfig(sampling=SamplingSpec(max_tokens=args.max_tokens, temperature=1.0), max_turns=args.max_turns,
                         max_context_tokens=2048, sampling_seed=args.seed)

    warm = rollout(generator, chat, episodes[: args.group_size], config=config)  # compiles kernels, fills caches
    print(f"warm-up done: {warm.metrics['tokens/generated']:.0f} tokens in {warm.metrics['time/total_s']:.1f} s", flush=True)
    # The raw pass gets as many tokens per prompt as the rollout is expected to produce.
    first_prompts = [chat.prompt(*_first_turn(episode)) for episode in episodes]
    per_prompt = math.ceil(warm.metrics["tokens/generated"] / len(warm.trajectories))
    raw_before, _ = raw_generate_rate(generator, first_prompts, per_prompt)
    generator.llm.reset_prefix_cache()  # neither pass may reuse the other's prompt KV
    result = rollout(generator, chat, episodes, config=config)
    print(f"rollout done: {result.metrics['tokens/generated']:.0f} tokens in {result.metrics['time/total_s']:.1f} s", flush=True)
    generated = int(result.metrics["tokens/generated"])
    rollout_rate = generated / result.metrics["time/total_s"]
    per_prompt = math.ceil(generated / len(first_prompts))
    generator.llm.reset_prefix_cache()
    raw_after, produced = raw_generate_rate(generator, first_prompts, per_prompt)
    raw_rate = (raw_before + raw_after) / 2
    figures = {
        "ratio": rollout_rate / raw_rate,
        "rollout_tokens_per_s": rollout_rate,
        "raw_generate_tokens_per_s": raw_rate,
        "raw_generate_tokens_per_s_runs": [raw_before, raw_after],
        "generated_tokens": generated,
        "raw_generated_tokens": produced,
        "env": args.env,
        "model": "smollm2-135m (SmolLM2-135M-Instruct), vLLM bfloat16, in-process engine",
        "episodes": args.episodes,
        "group_size": args.group_size,
        "max_turns": args.max_turns,
        "max_tokens_per_turn": args.max_tokens,
        "rollout_metrics": result.metrics,
    }
    path = write_result("rollout_throughput", figures)
    print(f"rollout {rollout_rate:.0f} tok/s, raw generate {raw_rate:.0f} tok/s, ratio {figures['ratio']:.3f} -> {path}")


if __name__ == "__main__":
    main()
