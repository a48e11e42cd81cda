"""Benchmark: seconds of one policy update on choice turns, by trained layers and by micro-batch size.

    python -m benchmarks.update_speed [--frozen 0,15,20,25] [--tokens 2048] [--contexts 32] [--context 110]
        [--shared 0] [--repeats 1] [--micro-batch-size 8] [--rounds 3] [--out PATH]

The workload is a step of the FrozenLake/Sokoban recipes (the ``markov`` agent, a choice among
the moves): ``--contexts`` distinct prompts of ``--context`` tokens, each followed by one
trained token (token ids drawn at random; the seconds do not depend on them). ``--shared N``
makes the first N tokens of every prompt the same (a turn sample's chat header and system
prompt, which a micro-batch runs once), and ``--repeats R`` gives each prompt R rows that
differ in the trained token only (one state met by several episodes of a group, which the
forward runs once). Each setting is a pair of ``model_options.frozen_layers`` (0: every weight
trains), ``update.micro_batch_tokens`` (the padded tokens of a micro-batch) and
``optim.micro_batch_size`` (its most rows), every combination of ``--frozen``, ``--tokens`` and
``--micro-batch-size``; an update is the trainer's own
(``accumulate_gradients`` then ``optimizer_step``, the trainer's defaults otherwise, without
gradient checkpointing as the markov recipes train) after one warm-up update that creates AdamW's moments. The
settings run in turn within each of ``--rounds`` rounds, in one process, so each round's
ratio to the first setting compares updates that ran a few seconds apart on a shared machine.

Results: ``benchmarks/results/update_speed.json`` (or ``--out``), with the load average before and after.
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

#: Seed of the prompt tokens that every context shares (``--shared``); each context's own come from its index.
SHARED_PREFIX_SEED = 2**31


def choice_sample(
    context: int, vocab: int, index: int, reward: float, shared: int = 0, repeat: int = 0
) -> Any:
    """A markov turn: a ``context``-token prompt, then one generated (trained) token.

    The prompt's first ``shared`` tokens are the same for every index; ``repeat`` changes the
    generated token only. Four consecutive indices form a group.
    """
    import numpy as np

    from llmgym_train.data import Sample

    prompt = np.random.default_rng(index).integers(10, vocab, size=context).tolist()
    prompt[:shared] = np.random.default_rng(SHARED_PREFIX_SEED).integers(10, vocab, size=shared).tolist()
    token_ids = [*prompt, 10 + (index + repeat) % (vocab - 10)]
    loss_mask = [0] * context + [1]
    return Sample(
        token_ids=token_ids, loss_mask=loss_mask, behavior_logprobs=[-1.0 if m else 0.0 for m in loss_mask],
        token_rewards=[0.0] * len(token_ids), reward=reward, episode_return=reward, success=reward > 0,
        actions_valid=True, cut_off=False, truncated=False, group_id=index // 4, episode_index=index,
        turn_index=0, num_turns=1,
    )


def workload(args: argparse.Namespace, vocab: int) -> list[Any]:
    """``--contexts`` prompts, ``--repeats`` rows each; rewards alternate, so every row carries a gradient."""
    return [
        choice_sample(args.context, vocab, index, (index + repeat) % 2, args.shared, repeat)
        for index in range(args.contexts)
        for repeat in range(args.repeats)
    ]


def measure(args: argparse.Namespace) -> dict[tuple[int, int, int], list[float]]:
    """Seconds of each setting's update, one per round; a setting is ``(frozen_layers, micro_batch_tokens,
    micro_batch_size)``."""
    import torch

    from llmgym_train.config import load_config
    from llmgym_train.models import resolve_model
    from llmgym_train.policy import Policy, freeze_lower_layers

    config = load_config(values={"model": args.model, "model_options.gradient_checkpointing": False})
    policy = Policy.load(resolve_model(config.model), config.model_options, with_value=False, with_reference=False)
    batch = _batch(workload(args, policy.model.config.vocab_size), policy.pad_token_id, config)
    settings = [
        (frozen, tokens, rows)
        for frozen in args.frozen for tokens in args.tokens for rows in args.micro_batch_size
    ]
    seconds: dict[tuple[int, int, int], list[float]] = {setting: [] for setting in settings}
    for round_index in range(args.rounds):
        for frozen, tokens, rows in settings:
            config.update.micro_batch_tokens, config.optim.micro_batch_size = tokens, rows
            policy.model.requires_grad_(True)
            if frozen:
                freeze_lower_layers(policy.model, frozen)
            optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-9)
            _step(policy, optimizer, batch, config)  # warm-up: AdamW's moments, allocator pools
            started = time.perf_counter()
            _step(policy, optimizer, batch, config)
            seconds[frozen, tokens, rows].append(round(time.perf_counter() - started, 2))
            took = seconds[frozen, tokens, rows][-1]
            print(f"round {round_index + 1}/{args.rounds}  frozen_layers={frozen} "
                  f"micro_batch_tokens={tokens} micro_batch_size={rows}: {took} s", flush=True)
    return seconds


def figures(
    args: argparse.Namespace, seconds: dict[tuple[int, int, int], list[float]], load_before: tuple[float, ...]
) -> dict[str, Any]:
    baseline = next(iter(seconds.values()))
    rows = []
    for (frozen, tokens, size), times in seconds.items():
        speedups = [base / time_ for base, time_ in zip(baseline, times, strict=True)]
        rows.append({
            "frozen_layers": frozen, "micro_batch_tokens": tokens, "micro_batch_size": size, "seconds": times,
            "seconds_median": statistics.median(times),
            "speedup_vs_first": [round(value, 2) for value in speedups],
            "speedup_median": round(statistics.median(speedups), 2),
        })
    return {
        "model": args.model, "contexts": args.contexts, "context_tokens": args.context,
        "shared_tokens": args.shared, "rows_per_context": args.repeats, "rounds": args.rounds,
        "first_setting": {"frozen_layers": args.frozen[0], "micro_batch_tokens": args.tokens[0],
                          "micro_batch_size": args.micro_batch_size[0]},
        "runs": rows,
        "load_average_before": [round(value, 2) for value in load_before],
        "load_average_after": [round(value, 2) for value in os.getloadavg()],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frozen", default="0,15,20,25", help="comma-separated frozen_layers")
    parser.add_argument("--tokens", default="2048", help="comma-separated update.micro_batch_tokens")
    parser.add_argument("--contexts", type=int, default=32)
    parser.add_argument("--context", type=int, default=110, help="prompt tokens per context")
    parser.add_argument("--shared", type=int, default=0, help="prompt tokens every context shares")
    parser.add_argument("--repeats", type=int, default=1, help="rows per context (trained tokens differ)")
    parser.add_argument("--micro-batch-size", default="8",
                        help="comma-separated optim.micro_batch_size (most rows a micro-batch holds)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "update_speed.json")
    args = parser.parse_args(argv)
    args.frozen = [int(part) for part in args.frozen.split(",")]
    args.tokens = [int(part) for part in args.tokens.split(",")]
    args.micro_batch_size = [int(part) for part in args.micro_batch_size.split(",")]
    load_before = os.getloadavg()
    seconds = measure(args)
    path = write_result(args.out.stem, figures(args, seconds, load_before), args.out.parent)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
