"""Benchmark: peak memory of one training step at long episodes, under the default settings and without each memory lever.

    python -m benchmarks.step_memory [--episodes 16] [--context 2048] [--settings default,no-checkpointing,no-checkpointing+head_chunk=0]

One policy update of the trainer's default path (GRPO, one on-policy update over the whole
step's batch, ``optim.micro_batch_size`` from the defaults) on ``--episodes`` episodes that
each fill a ``--context``-token context, as multi-turn episodes do: a prompt, then turns of
64 generated tokens each followed by a 60-token observation, until the context is full
(token ids drawn at random; what is measured does not depend on them). Each setting runs in a
child process of its own: the model loads, a warm-up step on two short episodes creates the
optimizer's moments (as after a run's first step), the peak-RSS counter is reset
(``/proc/self/clear_refs``), and the measured step runs; its peak is the child's resident
high-water mark (``VmHWM``, the kernel's ``ru_maxrss``) over that step: weights, gradients,
optimizer moments and activations. tracemalloc does not see torch's allocations.

``--settings``: comma-separated; each is ``default`` (the trainer's defaults) or
``+``-joined changes to them, the memory levers:

* ``tokens=N`` (or a bare ``N``): ``update.micro_batch_tokens``, the padded tokens of one
  forward/backward pass; 0 is no token budget (only the sample count bounds a micro-batch: at
  16 x 2,048 tokens that is 8 x 2,048 tokens per pass and well over 16 GB, so it is not
  measured unless asked). With a budget at least the context length, one pass holds one long
  episode however many there are, so the peak does not grow with ``--episodes``.
* ``checkpointing`` / ``no-checkpointing``: ``model_options.gradient_checkpointing`` (each
  layer keeps only its input and recomputes the rest in the backward).
* ``release`` / ``no-release``: ``update.release_memory`` (after each pass's backward the C
  heap's freed pages go back to the kernel; without it glibc keeps them mapped, and they
  count in the resident peak).
* ``head_chunk=N``: ``model_options.head_chunk_tokens``, the positions whose full-vocabulary
  logits are alive at once (0: a pass's all at once, as before chunking).

The goal, from the issue, is <= 4 GB on CPU (the generator's KV cache aside: no engine runs
here). Results: ``benchmarks/results/step_memory.json`` (``--out`` to write elsewhere),
rewritten after each setting, with the load average before and after (memory does not depend
on the machine's load; the step's seconds do).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS_DIR, write_result

GOAL_GB = 4.0
GENERATED_PER_TURN = 64
OBSERVATION_TOKENS = 60
PROMPT_TOKENS = 200


def episode_sample(context: int, vocab: int, seed: int, episode: int, group: int, reward: float) -> Any:
    """A training sample shaped like a multi-turn episode that fills ``context`` tokens."""
    import numpy as np

    from llmgym_train.data import Sample

    rng = np.random.default_rng([seed, episode])
    loss_mask = [0] * min(PROMPT_TOKENS, context)
    while len(loss_mask) < context:
        loss_mask += [1] * GENERATED_PER_TURN + [0] * OBSERVATION_TOKENS
    loss_mask = loss_mask[:context]
    token_ids = rng.integers(10, vocab, size=context).tolist()
    logprobs = [-1.0 if mask else 0.0 for mask in loss_mask]
    return Sample(
        token_ids=token_ids, loss_mask=loss_mask, behavior_logprobs=logprobs, token_rewards=[0.0] * context,
        reward=reward, episode_return=reward, success=reward > 0, actions_valid=True, cut_off=False, truncated=True,
        group_id=group, episode_index=episode, turn_index=None, num_turns=context // (GENERATED_PER_TURN + OBSERVATION_TOKENS),
    )


def _batch(samples: list[Any], pad_token_id: int, config: Any) -> Any:
    from llmgym_train.algorithms import with_advantages
    from llmgym_train.batching import collate

    batch = collate(samples, pad_token_id)
    batch.old_logprobs = None  # the trainer's single on-policy update: its own forward gives the ratio's anchor
    loss = config.loss
    return with_advantages(batch, config.algo, normalize_std=loss.normalize_std, gamma=loss.gamma, lam=loss.lam)


def _step(policy: Any, optimizer: Any, batch: Any, config: Any) -> int:
    """One update as the trainer runs it; returns the number of micro-batches."""
    from llmgym_train.update import accumulate_gradients, micro_batches, optimizer_step

    budget = config.update.micro_batch_tokens
    policy.train()
    stats = accumulate_gradients(
        policy, batch, config.optim.micro_batch_size, config.loss, config.algo, max_tokens=budget,
        release_memory=config.update.release_memory,
    )
    assert stats["loss"] == stats["loss"], "the step's loss is not finite"
    optimizer_step(policy, optimizer, config.optim.max_grad_norm)
    return sum(1 for _ in micro_batches(batch, config.optim.micro_batch_size, budget))


def setting_values(setting: str) -> dict[str, Any]:
    """The config values a ``--settings`` entry changes from the defaults (see the module docstring)."""
    values: dict[str, Any] = {}
    for part in setting.split("+"):
        name, _, number = part.partition("=")
        if part == "default":
            continue
        if part.isdigit() or (name == "tokens" and number.isdigit()):
            values["update.micro_batch_tokens"] = int(number or part)
        elif part in ("checkpointing", "no-checkpointing"):
            values["model_options.gradient_checkpointing"] = part == "checkpointing"
        elif part in ("release", "no-release"):
            values["update.release_memory"] = part == "release"
        elif name == "head_chunk" and number.isdigit():
            values["model_options.head_chunk_tokens"] = int(number)
        else:
            raise SystemExit(
                f"--settings entries are 'default' or '+'-joined tokens=N, checkpointing, no-checkpointing, "
                f"release, no-release, head_chunk=N; got {part!r} in {setting!r}."
            )
    return values


def _peak_kb() -> int:
    match = re.search(r"VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text())
    return int(match.group(1)) if match else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child(args: argparse.Namespace) -> dict[str, Any]:
    """Measure one setting in this process (see the module docstring); its figures as a dict."""
    import torch

    from llmgym_train.config import load_config
    from llmgym_train.models import resolve_model
    from llmgym_train.policy import Policy

    if args.threads:
        torch.set_num_threads(args.threads)
    config = load_config(values={"model": args.model, **json.loads(args.values)})
    policy = Policy.load(resolve_model(config.model), config.model_options, with_value=False, with_reference=False)
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=config.optim.lr, weight_decay=config.optim.weight_decay)
    vocab = policy.model.config.vocab_size
    pad = policy.pad_token_id
    warm = [episode_sample(256, vocab, args.seed, index, 0, float(index % 2)) for index in range(2)]
    _step(policy, optimizer, _batch(warm, pad, config), config)  # creates AdamW's moments
    group_size = min(8, args.episodes)
    samples = [
        episode_sample(args.context, vocab, args.seed, index, index // group_size, float(index % 3 == 0))
        for index in range(args.episodes)
    ]
    batch = _batch(samples, pad, config)
    load_peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    before_kb = _current_kb()
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    started = time.perf_counter()
    micro = _step(policy, optimizer, batch, config)
    seconds = time.perf_counter() - started
    return {
        "micro_batch_tokens": config.update.micro_batch_tokens,
        "gradient_checkpointing": config.model_options.gradient_checkpointing,
        "release_memory": config.update.release_memory,
        "head_chunk_tokens": config.model_options.head_chunk_tokens,
        "micro_batch_size": config.optim.micro_batch_size,
        "micro_batches": micro,
        "step_peak_gb": round(_peak_kb() / 2**20, 3),
        "rss_before_step_gb": round(before_kb / 2**20, 3),
        "load_and_warmup_peak_gb": round(load_peak_kb / 2**20, 3),
        "step_seconds": round(seconds, 1),
        "parameters": sum(p.numel() for p in policy.trainable_parameters()),
        # what the step holds whatever the levers: weights, as much again in gradients, AdamW's two moments
        "weights_gb": round(_bytes(policy.model.parameters()) / 2**30, 3),
        "optimizer_state_gb": round(_bytes(
            value for state in optimizer.state.values() for value in state.values() if torch.is_tensor(value)
        ) / 2**30, 3),
        "dtype": str(next(policy.model.parameters()).dtype),
        "autocast": str(policy.autocast),
    }


def _bytes(tensors: Any) -> int:
    return sum(tensor.numel() * tensor.element_size() for tensor in tensors)


def _current_kb() -> int:
    match = re.search(r"VmRSS:\s+(\d+) kB", Path("/proc/self/status").read_text())
    return int(match.group(1)) if match else 0


def measure(args: argparse.Namespace, setting: str) -> dict[str, Any]:
    """One ``--settings`` entry in a child process of its own."""
    command = [
        sys.executable, "-m", "benchmarks.step_memory", "--child", "--values", json.dumps(setting_values(setting)),
        "--episodes", str(args.episodes), "--context", str(args.context), "--model", args.model,
        "--seed", str(args.seed), "--threads", str(args.threads),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"setting": setting, "failed": f"exit code {done.returncode}", "stderr": done.stderr[-2000:]}
    return {"setting": setting, **json.loads(done.stdout.strip().splitlines()[-1])}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--context", type=int, default=2048, help="tokens per episode")
    parser.add_argument("--settings", default="default,no-checkpointing,no-checkpointing+head_chunk=0",
                        help="comma-separated: 'default' or '+'-joined tokens=N, checkpointing, no-checkpointing, head_chunk=N")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "step_memory.json")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--values", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for setting in () if args.child else args.settings.split(","):
        setting_values(setting.strip())  # a typo fails before the first child runs
    if args.child:
        print(json.dumps(child(args)))
        return
    load_before = os.getloadavg()
    runs: list[dict[str, Any]] = []
    for setting in args.settings.split(","):
        runs.append(measure(args, setting.strip()))
        print(json.dumps(runs[-1]), flush=True)
        path = write_result(args.out.stem, figures(args, runs, load_before), args.out.parent)
    print(f"wrote {path}")


def figures(args: argparse.Namespace, runs: list[dict[str, Any]], load_before: tuple[float, ...]) -> dict[str, Any]:
    measured = [run for run in runs if "step_peak_gb" in run]
    within = [run["setting"] for run in measured if run["step_peak_gb"] <= GOAL_GB]
    return {
        "episodes": args.episodes,
        "context_tokens": args.context,
        "model": args.model,
        "goal_gb": GOAL_GB,
        "runs": runs,
        "settings_within_goal": within,
        "load_average_before": [round(value, 2) for value in load_before],
        "load_average_after": [round(value, 2) for value in os.getloadavg()],
    }

if __name__ == "__main__":
    main()
