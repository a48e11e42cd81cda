"""``llmgym-train``: train an LLM policy on llmgym envs from the command line.

    llmgym-train --env llmgym/FrozenLake-v0:8 --model smollm2-135m --algo grpo \\
        [--config run.yaml] [--output runs/fl] [--resume] [key=value ...]
    llmgym-train --recipe sokoban-v1 [--output runs/sk] [key=value ...]
    llmgym-train --list-recipes

``--recipe NAME`` starts from a recipe that ships with the package (:mod:`llmgym_train.recipes`;
``--list-recipes`` prints them); a ``--config`` file, overrides and flags go on top of it.

``--env ID[:N_GROUPS]`` may repeat (an env mixture). Flags win over ``key=value`` overrides,
which win over the YAML file, which wins over the recipe, which wins over the defaults (see
:mod:`llmgym_train.config`).
The whole config, env ids and agent name included, is checked before any model loads.

``--resume`` continues the run in ``--output`` with that run's own ``config.yaml``: the command
line may change only :data:`llmgym_train.config.RESUMABLE_KEYS` (``steps``, ``max_minutes``,
...); any other key given with a different value is refused, showing the difference.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from llmgym.error import Error, InvalidOptionError
from llmgym_train.config import ALGORITHMS, TrainConfig, load_config, load_run_config, parse_override
from llmgym_train.recipes import load_recipe, recipe_table


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
    parser.add_argument("--recipe", metavar="NAME", help="start from a packaged recipe (see --list-recipes)")
    parser.add_argument("--list-recipes", action="store_true", help="print the packaged recipes and exit")
    parser.add_argument("--config", metavar="FILE.yaml", help="YAML config file")
    parser.add_argument("--output", metavar="DIR", help="output folder")
    parser.add_argument("--steps", type=int, help="training steps")
    parser.add_argument("--seed", type=int, help="random seed")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --output with its own config.yaml, from its last checkpoint "
                             "(only steps, max_minutes, progress, threads, eval.every, checkpoint_every may change)")
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
    if args.resume:
        if args.recipe is not None:
            raise InvalidOptionError(
                f"--resume continues the run with its own config.yaml, so --recipe {args.recipe} has no say; drop --recipe."
            )
        return load_run_config(_run_folder(args), args.config, args.overrides, values)
    if args.recipe is not None:
        return load_recipe(args.recipe).load(args.overrides, values, args.config)
    return load_config(args.config, args.overrides, values)


def _run_folder(args: argparse.Namespace) -> str:
    """The run folder ``--resume`` continues: ``--output``, else an ``output=`` override, else the default."""
    if args.output is not None:
        return str(args.output)
    for key, value in (parse_override(text) for text in args.overrides):
        if key == "output":
            return str(value)
    return TrainConfig.output


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list_recipes:
        print(recipe_table())
        return 0
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
