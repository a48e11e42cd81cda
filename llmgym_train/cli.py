"""``llmgym-train``: train an LLM policy on llmgym envs from the command line.

    llmgym-train --env llmgym/FrozenLake-v0:8 --model smollm2-135m --algo grpo \\
        [--config run.yaml] [--output runs/fl] [--resume] [key=value ...]

``--env ID[:N_GROUPS]`` may repeat (an env mixture). Flags win over ``key=value`` overrides,
which win over the YAML file, which wins over the defaults (see :mod:`llmgym_train.config`).
The whole config is checked before any model loads.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from llmgym.error import Error
from llmgym_train.config import ALGORITHMS, TrainConfig, load_config


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llmgym-train",
        description="Train an LLM policy with GRPO, PPO or REINFORCE++ on llmgym environments.",
        epilog="Any config key can be set as key=value, with dotted keys for sections "
        "(optim.lr=3e-6 rollout.group_size=8 loss.clip_high=0.28).",
    )
    parser.add_argument("--env", action="append", metavar="ID[:N_GROUPS]",
                        help="training env and its groups per step; repeat for a mixture")
    parser.add_argument("--eval-env", action="append", metavar="ID[:N_GROUPS]",
                        help="validation env (default: the training envs)")
    parser.add_argument("--model", help="model alias, local HF folder, or hub id (default smollm2-135m)")
    parser.add_argument("--algo", choices=ALGORITHMS, help="algorithm (default grpo)")
    parser.add_argument("--config", metavar="FILE.yaml", help="YAML config file")
    parser.add_argument("--output", metavar="DIR", help="output folder")
    parser.add_argument("--steps", type=int, help="training steps")
    parser.add_argument("--seed", type=int, help="random seed")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --output")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    return parser


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The validated config the parsed command line describes."""
    values: dict[str, object] = {}
    if args.env:
        values["train_envs"] = list(args.env)
    if args.eval_env:
        values["eval_envs"] = list(args.eval_env)
    for flag in ("model", "algo", "output", "steps", "seed"):
        if getattr(args, flag) is not None:
            values[flag] = getattr(args, flag)
    return load_config(args.config, args.overrides, values)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = config_from_args(args)
    except Error as error:
        print(f"llmgym-train: config error: {error}", file=sys.stderr)
        return 2
    from llmgym_train.trainer import Trainer

    try:
        with Trainer(config, resume=args.resume) as trainer:
            summary = trainer.train()
    except Error as error:
        print(f"llmgym-train: {error}", file=sys.stderr)
        return 1
    print(summary.describe())
    return 0 if summary.completed else 1


if __name__ == "__main__":
    raise SystemExit(main())
