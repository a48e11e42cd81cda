"""Benchmark: how often a model's samples solve a single-turn env's eval problems, greedy and pass@k, by kind.

    python -m benchmarks.pass_at_k [--env llmgym/Math-Easy-v0] [--model smollm2-135m] [--levels 64]
                                   [--prefix "<answer>"] [--samples 16] [--temperatures 0.7,1.0]

What a recipe that learns from the env's reward can hope for: GRPO sharpens what the model's
samples already do, so the share of problems that some sample in ``k`` solves bounds, in
practice, what a short run lifts greedy success to. Each of the first ``--levels`` eval
problems is played once greedily and ``--samples`` times at each temperature (seeded); a reply
is the response prefix plus the completion, scored by the env's own verifier. Figures per
problem kind (``level["kind"]``) and overall: greedy success, the mean success of a sample,
the share of samples that hold an answer the env can parse (``sample_answered``: the
format, right or wrong), and pass@k for k = 1, 4, ..., ``--samples`` (the unbiased estimator of Chen et al. 2021:
``1 - C(n - c, k) / C(n, k)`` per problem, averaged). ``--model`` takes what
:func:`llmgym_train.models.resolve_model` takes: an alias, an HF folder, or a training run's folder.

Results: ``benchmarks/results/pass_at_k_<Name>.json`` (``--out`` to change), with the load
average before and after.
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS_DIR, offline_llm, timed, write_result


def pass_at_k(samples: int, correct: int, k: int) -> float:
    """The chance that at least one of ``k`` of ``samples`` replies, ``correct`` of them right, is right."""
    if samples - correct < k:
        return 1.0
    return 1.0 - math.comb(samples - correct, k) / math.comb(samples, k)


def summarize(rows: list[dict[str, Any]], samples: int) -> dict[str, Any]:
    """Greedy success, mean sampled success and pass@k over ``rows`` (one per problem)."""
    ks = sorted({1, *range(4, samples + 1, 4), samples})
    summary: dict[str, Any] = {"problems": len(rows),
                               "greedy": round(sum(row["greedy"] for row in rows) / len(rows), 4)}
    for temperature in rows[0]["correct"]:
        summary[f"t{temperature}"] = {
            "sample_success": round(sum(row["correct"][temperature] for row in rows)
                                    / (samples * len(rows)), 4),
            "sample_answered": round(sum(row["answered"][temperature] for row in rows)
                                     / (samples * len(rows)), 4),
            **{f"pass@{k}": round(sum(pass_at_k(samples, row["correct"][temperature], k) for row in rows)
                                  / len(rows), 4) for k in ks},
        }
    return summary


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import gymnasium as gym

    import llmgym  # noqa: F401 - registers the ids
    from llmgym.eval_sets import load_eval_set

    vllm, llm = offline_llm(args.model, args.max_model_len)
    tokenizer = llm.get_tokenizer()
    env = gym.make(args.env)
    records = load_eval_set(args.env)[: args.levels]
    prompts = []
    for record in records:
        observation, info = env.reset(seed=int(record["seed"]), options={"level": record["level"]})
        messages = [{"role": "system", "content": info["system_prompt"]},
                    {"role": "user", "content": observation}]
        prompts.append(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
                       + args.prefix)

    def verdict(record: dict[str, Any], completion: str) -> tuple[bool, bool]:
        """(solved, answered): right, and holding an answer the env parsed."""
        env.reset(seed=int(record["seed"]), options={"level": record["level"]})
        info = env.step(args.prefix + completion)[4]
        return bool(info.get("success")), bool(info.get("action_is_valid"))

    greedy_params = vllm.SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    greedy = llm.generate(prompts, greedy_params, use_tqdm=False)
    rows = [{"kind": str(record["level"].get("kind", "all")) if isinstance(record["level"], dict) else "all",
             "greedy": verdict(record, output.outputs[0].text)[0], "correct": {}, "answered": {}}
            for record, output in zip(records, greedy, strict=True)]
    for temperature in args.temperatures:
        sampled = llm.generate(prompts, vllm.SamplingParams(
            temperature=temperature, max_tokens=args.max_tokens, n=args.samples, seed=0), use_tqdm=False)
        for row, record, output in zip(rows, records, sampled, strict=True):
            verdicts = [verdict(record, choice.text) for choice in output.outputs]
            row["correct"][temperature] = sum(right for right, _ in verdicts)
            row["answered"][temperature] = sum(answered for _, answered in verdicts)
        print(f"t={temperature}: {summarize(rows, args.samples)[f't{temperature}']}", flush=True)
    env.close()
    kinds: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        kinds[row["kind"]].append(row)
    return {"all": summarize(rows, args.samples),
            "by_kind": {kind: summarize(members, args.samples) for kind, members in sorted(kinds.items())}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="llmgym/Math-Easy-v0")
    parser.add_argument("--model", default="smollm2-135m", help="alias, HF folder or training run folder")
    parser.add_argument("--levels", type=int, default=64, help="the first N problems of the eval set")
    parser.add_argument("--prefix", default="<answer>", help="response prefix (part of the prompt)")
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--temperatures", default="0.7,1.0")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--max-model-len", type=int, default=512)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    args.temperatures = [float(part) for part in args.temperatures.split(",")]
    out = args.out or RESULTS_DIR / f"pass_at_k_{args.env.split('/')[-1]}.json"
    figures = timed(lambda: measure(args))
    path = write_result(out.stem, {
        "env": args.env, "model": args.model, "levels": args.levels, "prefix": args.prefix,
        "samples": args.samples,
        "temperatures": args.temperatures, "max_tokens": args.max_tokens, **figures,
    }, out.parent)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
