"""Benchmark: seconds of one policy update on choice turns, training every layer or only the layers above the first N.

    python -m benchmarks.update_speed [--frozen 0,15,20,25] [--contexts 32] [--context 110] [--rounds 3]

The workload is a step of the FrozenLake/Sokoban recipes (the ``markov`` agent, a choice among
the moves): ``--contexts`` distinct prompts of ``--context`` tokens, each followed by one
trained token (token ids drawn at random; the seconds do not depend on them). Each setting is
``model_options.frozen_layers`` (0: every weight trains); an update is the trainer's own
(``accumulate_gradients`` then ``optimizer_step``, the trainer's defaults otherwise, without
gradient checkpointing as the markov recipes train) after one warm-up update that creates AdamW's moments. The
settings run in turn within each of ``--rounds`` rounds, in one process, so each round's
ratio to ``frozen_layers=0`` compares updates that ran a few seconds apart on a shared machine.

Results: ``benchmarks/results/update_speed.json``, with the load average before and after.
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


def choice_sample(context: int, vocab: int, index: int, reward: float) -> Any:
    """A markov turn: a ``context``-token prompt, then one generated (trained) token."""
    import numpy as np

    from llmgym_train.data import Sample

    token_ids = np.random.default_rng(index).integers(10, vocab, size=context + 1).tolist()
    loss_mask = [0] * context + [1]
    return Sample(
        token_ids=token_ids, loss_mask=loss_mask, behavior_logprobs=[-1.0 if m else 0.0 for m in loss_mask],
        token_rewards=[0.0] * len(token_ids), reward=reward, episode_return=reward, success=reward > 0,
        actions_valid=True, cut_off=False, truncated=False, group_id=index // 4, episode_index=index,
        turn_index=0, num_turns=1,
    )


def measure(args: argparse.Namespace) -> dict[int, list[float]]:
    """Seconds of each setting's update, one per round."""
    import torch

    from llmgym_train.config import load_config
    from llmgym_train.models import resolve_model
    from llmgym_train.policy import Policy, freeze_lower_layers

    config = load_config(values={"model": args.model, "model_options.gradient_checkpointing": False})
    policy = Policy.load(resolve_model(config.model), config.model_options, with_value=False, with_reference=False)
    vocab = policy.model.config.vocab_size
    samples = [choice_sample(args.context, vocab, index, float(index % 2)) for index in range(args.contexts)]
    batch = _batch(samples, policy.pad_token_id, config)
    seconds: dict[int, list[float]] = {frozen: [] for frozen in args.frozen}
    for round_index in range(args.rounds):
        for frozen in args.frozen:
            policy.model.requires_grad_(True)
            if frozen:
                freeze_lower_layers(policy.model, frozen)
            optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-9)
            _step(policy, optimizer, batch, config)  # warm-up: AdamW's moments, allocator pools
            started = time.perf_counter()
            _step(policy, optimizer, batch, config)
            seconds[frozen].append(round(time.perf_counter() - started, 2))
            print(f"round {round_index + 1}/{args.rounds}  frozen_layers={frozen}: {seconds[frozen][-1]} s", flush=True)
    return seconds


def figures(args: argparse.Namespace, seconds: dict[int, list[float]], load_before: tuple[float, ...]) -> dict[str, Any]:
    baseline = seconds[args.frozen[0]]
    rows = []
    for frozen, times in seconds.items():
        speedups = [base / time_ for base, time_ in zip(baseline, times, strict=True)]
        rows.append({
            "frozen_layers": frozen, "seconds": times, "seconds_median": statistics.median(times),
            f"speedup_vs_frozen_{args.frozen[0]}": [round(value, 2) for value in speedups],
            "speedup_median": round(statistics.median(speedups), 2),
        })
    return {
        "model": args.model, "contexts": args.contexts, "context_tokens": args.context, "rounds": args.rounds,
        "runs": rows,
        "load_average_before": [round(value, 2) for value in load_before],
        "load_average_after": [round(value, 2) for value in os.getloadavg()],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frozen", default="0,15,20,25", help="comma-separated frozen_layers; the first is the baseline")
    parser.add_argument("--contexts", type=int, default=32)
    parser.add_argument("--context", type=int, default=110, help="prompt tokens per context")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "update_speed.json")
    args = parser.parse_args(argv)
    args.frozen = [int(part) for part in args.frozen.split(",")]
    load_before = os.getloadavg()
    seconds = measure(args)
    path = write_result(args.out.stem, figures(args, seconds, load_before), args.out.parent)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
