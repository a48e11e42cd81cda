"""Benchmark: how fast the trainer's own update teaches SmolLM2-135M the best Sokoban move, per credit.

    python -m benchmarks.choice_learning [--modes sft best reward] [--levels any] [--steps 20] [--rooms 32]
    python -m benchmarks.choice_learning --checkpoints runs/x/model ... [--levels 1 3 any]

No rollouts and no engine: this isolates the update. Each step draws ``--rooms`` generated
``Sokoban-v1`` rooms (one box; ``--levels``: rooms that need 1, 2 or 3 moves, or ``any``: the
full distribution), plays each of the four moves once from the room's start with
``progress_reward=1`` (what ``loss.credit=lookahead`` sees: the moves it saved, a push into a
deadlock costing the moves left plus one), builds the samples the trainer would
(:func:`~llmgym_train.data.choice_samples`, the markov agent's prompt with the ``<answer>``
prefix, the choice at temperature 2) and runs the trainer's update on them
(:func:`~llmgym_train.update.run_epochs`: AdamW with gradients clipped at 1, as the
``sokoban-v1`` preset, here at a constant ``--lr``). Modes:

* ``sft``: the labelled optimal move alone, advantage 1 (supervised cross-entropy over the four moves).
* ``best``: ``loss.lookahead_target=best``: 1 for the moves of the highest reward, minus the mean.
* ``reward``: ``loss.lookahead_target=reward``: each move's reward minus the mean.
* ``greedy``: ``loss.lookahead_target=greedy``: the cross-entropy to a uniform pick among the moves of the highest reward.

Every ``--every`` steps: greedy accuracy (an optimal first move, see
:func:`benchmarks.readability.optimal_first_moves`) on 128 held-out rooms (``any``: the first 128
levels of the frozen ``Sokoban-v1`` eval set). Results merge into
``benchmarks/results/choice_learning.json`` under ``results["<mode>/<levels>"]``, with the load
average at the start and end of each. Not a test: a mode takes about ten minutes of both cores.
``--checkpoints`` trains nothing: it scores model folders (a run folder, read as its ``model/``, or the base
model's) on the same held-out rooms, under ``results["checkpoint:<folder>/<levels>"]``, and
plays greedy episodes on the first ``--play`` eval levels: how each ends (solved, a loop, a
deadlock, the turn limit) and how often a move on the way was optimal.
``--frozen-layers N`` trains only the layers above the first N (``model_options.frozen_layers``;
results under keys ending ``/frozenN``). After training, the trained policy plays ``--play``
greedy episodes as ``--checkpoints`` does.
``--oracle P ...`` trains nothing: it plays :func:`oracle_chooser` (optimal in a share ``P`` of
positions, fixed per position as a greedy policy's moves are) on the ``--play`` first eval
levels, under ``results["oracle:<P>"]``: the per-position accuracy a markov policy needs.
``--format`` picks the observation (:data:`benchmarks.readability.FORMATS`; results of another
format than ``v1`` go under keys ending ``/<format>``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import zlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

import llmgym  # noqa: F401  (registers the ids)
from benchmarks.common import RESULTS_DIR, write_result
from benchmarks.readability import ENV_ID, FORMATS, MODEL, MOVES, check_choice, optimal_first_moves
from llmgym.eval_sets import load_eval_set

NAME = "choice_learning"
MODES = ("sft", "best", "reward", "greedy")
LEVELS = ("1", "2", "3", "any")
TEMPERATURE = 2.0
#: (prompt token ids, each move's reward with progress_reward=1, indices of the optimal first moves)
Room = tuple[list[int], tuple[float, ...], frozenset[int]]


def step_off(env: Any, rng: np.random.Generator) -> str | None:
    """Half the time, one or two moves that keep the level solvable and unsolved; the observation after (``None``: none).

    With the env's ``start="solution"`` (a point of a fewest-moves solution), this gives the
    positions greedy play may reach: on an optimal path and a move or two off it.
    """
    observation = None
    for _ in range(int(rng.choice([0, 0, 1, 2]))):
        here = env.get_state()
        for move in rng.permutation(MOVES):
            observation_after, _, terminated, _, info = env.step(f"<answer>{move}</answer>")
            if info["action_is_effective"] and not terminated and env.solution() is not None:
                observation = observation_after
                break
            env.set_state(here)
    return observation


def rooms(chat: Any, levels: str, seeds: range, test: bool, env_format: str = "v1", states: str = "start") -> list[Room]:
    """Prompts, per-move rewards and optimal first moves of ``levels`` rooms (seeded, or the eval set's).

    ``states="walk"``: instead of each room's start, a point of its solution (``start="solution"``),
    then :func:`step_off` (seeded by the room's seed).
    """
    moves = None if levels == "any" else int(levels)
    env = gym.make(
        ENV_ID, max_level_moves=moves, progress_reward=1.0, step_penalty=0.0,
        start="solution" if states == "walk" else "room", **FORMATS[env_format],
    ).unwrapped
    if levels == "any" and test:
        resets = [{"options": {"level": record["level"]}} for record in load_eval_set(ENV_ID)[: len(seeds)]]
    else:
        resets = [{"seed": seed} for seed in seeds]
    found = []
    for reset in resets:
        observation, info = env.reset(**reset)
        if states == "walk":
            observation = step_off(env, np.random.default_rng(reset.get("seed", 0))) or observation
        start = env.get_state()
        rewards = []
        for move in MOVES:
            env.set_state(start)
            rewards.append(float(env.step(f"<answer>{move}</answer>")[1]))
        env.set_state(start)
        found.append((chat.prompt(observation, info["system_prompt"]), tuple(rewards), optimal_first_moves(env)))
    env.close()
    return found


def step_samples(batch: list[Room], mode: str, choice_ids: list[int]) -> list[Any]:
    """The trainer's samples for one step: one per move (``best``, ``reward``) or the optimal move only (``sft``)."""
    from llmgym_train.data import Sample, choice_samples

    samples = []
    for group, (prompt, rewards, best) in enumerate(batch):
        tokens = [*prompt, choice_ids[0]]
        sample = Sample(
            token_ids=tokens, loss_mask=[0] * len(prompt) + [1], behavior_logprobs=[0.0] * len(tokens),
            token_rewards=[0.0] * len(tokens), reward=0.0, episode_return=0.0, success=False, actions_valid=True,
            cut_off=False, truncated=False, group_id=group, episode_index=group, turn_index=0, num_turns=1,
        )
        if mode == "sft":
            samples.append(replace(sample, token_ids=[*prompt, choice_ids[min(best)]], advantage=1.0))
        else:
            samples += choice_samples(replace(sample, choice_rewards=rewards), choice_ids, mode)
    return samples


@torch.no_grad()
def greedy_moves(policy: Any, choice_ids: list[int], prompts: list[list[int]]) -> list[int]:
    """The policy's most likely move (index in :data:`MOVES`) after each prompt."""
    from llmgym_train.batching import collate

    policy.model.eval()
    moves = []
    for start in range(0, len(prompts), 32):
        # One row per prompt, a placeholder move in the slot after it; the prediction is read before the slot.
        chunk = [(prompt, (), frozenset({0})) for prompt in prompts[start : start + 32]]
        rows = collate(step_samples(chunk, "sft", choice_ids), policy.pad_token_id)
        hidden = policy.model.get_decoder()(input_ids=rows.input_ids, attention_mask=rows.attention_mask).last_hidden_state
        last = rows.attention_mask.sum(dim=1) - 2  # the position that predicts the move
        moves += policy.model.get_output_embeddings()(hidden[torch.arange(len(chunk)), last])[:, choice_ids].argmax(-1).tolist()
    policy.model.train()
    return moves


def accuracy(policy: Any, choice_ids: list[int], test: list[Room]) -> tuple[float, list[int]]:
    """Greedy accuracy on ``test`` (an optimal first move) and how often each move was chosen."""
    moves = greedy_moves(policy, choice_ids, [prompt for prompt, _, _ in test])
    return float(np.mean([move in room[2] for room, move in zip(test, moves, strict=True)])), np.bincount(
        moves, minlength=len(MOVES)).tolist()


#: A deterministic agent: (observation, system prompt) -> index in MOVES.
Chooser = Callable[[str, str], int]


def policy_chooser(policy: Any, chat: Any) -> Chooser:
    """The policy's greedy move, from the markov agent's prompt."""
    choice_ids = chat.choice_token_ids(MOVES)
    return lambda observation, system: greedy_moves(policy, choice_ids, [chat.prompt(observation, system)])[0]


def board_xsb(observation: str) -> str:
    """The board of a v1 observation (feedback line, spaced rows, coordinates line) as an XSB level."""
    return "\n".join(line.replace(" ", "") for line in observation.split("\n")[1:-1]).replace("_", " ")


def oracle_chooser(accuracy: float, seed: int) -> Chooser:
    """A markov agent that plays an optimal move in a share ``accuracy`` of positions and another move elsewhere.

    Which positions it gets wrong, and its moves, are fixed per position (drawn from ``seed`` and
    the board), as a greedy policy's are: what a model right on that share of the positions it
    meets would score. Reads the v1 board.
    """
    solver = gym.make(ENV_ID).unwrapped

    def choose(observation: str, system: str) -> int:
        board = board_xsb(observation)
        solver.reset(options={"level": board})
        best = sorted(optimal_first_moves(solver))
        rng = np.random.default_rng([seed, zlib.crc32(board.encode())])
        others = [move for move in range(len(MOVES)) if move not in best]
        pool = best if rng.random() < accuracy or not others else others
        return pool[int(rng.integers(len(pool)))]

    return choose


def oracle_play(accuracy: float, args: argparse.Namespace) -> dict[str, Any]:
    """:func:`play` of :func:`oracle_chooser` at ``accuracy`` over ``args.oracle_seeds`` seeds: solved share per seed."""
    runs = [play(oracle_chooser(accuracy, seed), "v1", args.play) for seed in range(args.oracle_seeds)]
    solved = [run["ends"]["solved"] / run["levels"] for run in runs]
    print(f"oracle:{accuracy}: solved {np.mean(solved):.3f} ({min(solved):.3f}-{max(solved):.3f})", flush=True)
    return {"accuracy": accuracy, "levels": args.play, "solved": solved, "solved_mean": float(np.mean(solved)), "runs": runs}


def play(choose: Chooser, env_format: str, count: int) -> dict[str, Any]:
    """Episodes of ``choose`` on the first ``count`` eval levels (30 turns): how each ends, how often a move was optimal.

    An episode ends ``solved``; in a ``loop`` (a position seen before: a deterministic markov
    agent repeats itself from there); in a ``deadlock`` (no solution left); or at the turn limit.
    """
    env = gym.make(ENV_ID, **FORMATS[env_format]).unwrapped
    ends, optimal = [], []
    for record in load_eval_set(ENV_ID)[:count]:
        observation, info = env.reset(options={"level": record["level"]})
        seen, end = set(), "turns"
        for _ in range(env.max_turns):
            key = env.state_key()
            if key in seen or env.solution() is None:
                end = "loop" if key in seen else "deadlock"
                break
            seen.add(key)
            move = choose(observation, info["system_prompt"])
            optimal.append(move in optimal_first_moves(env))
            observation, _, _, _, step_info = env.step(f"<answer>{MOVES[move]}</answer>")
            if step_info["success"]:
                end = "solved"
                break
        ends.append(end)
    env.close()
    return {"levels": count, "ends": {end: ends.count(end) for end in ("solved", "loop", "deadlock", "turns")},
            "optimal_move_rate": float(np.mean(optimal)), "moves": len(optimal)}


def load_policy(folder: str, frozen_layers: int = 0) -> tuple[Any, Any]:
    """The policy in ``folder`` as the trainer holds it (the choice at temperature 2), and its chat tokens.

    ``folder``: a model folder, or a run folder of ``llmgym-train`` (its ``model/``).
    """
    from llmgym_train.chat import ChatTokens
    from llmgym_train.config import ModelConfig
    from llmgym_train.eval.agents import is_run_folder
    from llmgym_train.models import RUN_MODEL_FOLDER
    from llmgym_train.policy import Policy
    from transformers import AutoTokenizer

    if is_run_folder(folder):
        folder = str(Path(folder) / RUN_MODEL_FOLDER)
    chat = ChatTokens(AutoTokenizer.from_pretrained(folder), response_prefix="<answer>")
    options = ModelConfig(gradient_checkpointing=False, frozen_layers=frozen_layers)
    policy = Policy.load(folder, options, with_value=False, with_reference=False)
    policy.allowed_token_ids, policy.choice_temperature = torch.tensor(chat.choice_token_ids(MOVES)), TEMPERATURE
    return policy, chat


def score_checkpoint(folder: str, levels: str, args: argparse.Namespace) -> dict[str, Any]:
    """One (checkpoint, levels) entry: greedy accuracy of the model in ``folder`` on the held-out rooms."""
    load_start = os.getloadavg()
    policy, chat = load_policy(folder)
    test = rooms(chat, levels, range(10**6, 10**6 + args.test), test=True, env_format=args.format)
    hit, moves = accuracy(policy, chat.choice_token_ids(MOVES), test)
    played = play(policy_chooser(policy, chat), args.format, args.play) if args.play else None
    print(f"checkpoint:{folder}/{levels}: {hit:.3f} {moves} greedy play: {played}", flush=True)
    return {
        "checkpoint": folder, "levels": levels, "format": args.format, "test_rooms": len(test), "accuracy": hit, "moves": moves,
        "greedy_play": played, "load_average_start": load_start, "load_average_end": os.getloadavg(),
    }


def train(mode: str, levels: str, args: argparse.Namespace) -> dict[str, Any]:
    """One (mode, levels) entry: held-out accuracy every ``args.every`` steps of the trainer's update."""
    from llmgym_train.algorithms import with_advantages
    from llmgym_train.batching import collate
    from llmgym_train.config import LossConfig, OptimConfig
    from llmgym_train.models import resolve_model
    from llmgym_train.update import normalizer, run_epochs, scheduled_lr, with_signal

    started, load_start = time.perf_counter(), os.getloadavg()
    torch.manual_seed(args.seed)
    policy, chat = load_policy(str(resolve_model(MODEL)), args.frozen_layers)
    choice_ids = chat.choice_token_ids(MOVES)
    optim = OptimConfig(lr=args.lr, max_grad_norm=1.0, micro_batch_size=64, warmup_steps=args.warmup)
    loss = LossConfig(credit="tree" if mode == "sft" else "lookahead", normalize_std=False)
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=args.lr, weight_decay=0.0)
    pool = rooms(chat, levels, range(args.steps * args.rooms), test=False, env_format=args.format, states=args.states)
    test = rooms(chat, levels, range(10**6, 10**6 + args.test), test=True, env_format=args.format)
    curve = [{"step": 0, **dict(zip(("accuracy", "moves"), accuracy(policy, choice_ids, test), strict=True))}]
    print(f"{mode}/{levels} step 0: {curve[-1]}", flush=True)
    for step in range(1, args.steps + 1):
        for group in optimizer.param_groups:
            group["lr"] = scheduled_lr(optim, 0.0, step - 1)
        batch = collate(step_samples(pool[(step - 1) * args.rooms : step * args.rooms], mode, choice_ids), policy.pad_token_id)
        batch = with_advantages(
            replace(batch, old_logprobs=None), "grpo", normalize_std=False, gamma=1.0, lam=1.0, credit=loss.credit
        )
        divisor = normalizer(batch, loss.aggregation)
        result = run_epochs(
            policy, optimizer, batch.select(with_signal(batch)), optim=optim, loss=loss, algo="grpo",
            generator=torch.Generator().manual_seed(step), divisor=divisor,
        )
        if step % args.every == 0 or step == args.steps:
            accuracy_now, moves = accuracy(policy, choice_ids, test)
            curve.append({"step": step, "accuracy": accuracy_now, "moves": moves, "entropy": result.means.get("entropy"),
                          "seconds": round(time.perf_counter() - started)})
            print(f"{mode}/{levels} step {step}: {curve[-1]}", flush=True)
    played = play(policy_chooser(policy, chat), args.format, args.play) if args.play else None
    print(f"{mode}/{levels} greedy play: {played}", flush=True)
    return {
        "mode": mode, "levels": levels, "format": args.format, "rooms_per_step": args.rooms, "steps": args.steps, "lr": args.lr, "warmup_steps": args.warmup,
        "frozen_layers": args.frozen_layers, "states": args.states, "test_rooms": len(test), "temperature": TEMPERATURE, "curve": curve,
        "greedy_play": played,
        "seconds": time.perf_counter() - started, "load_average_start": load_start, "load_average_end": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="+", default=list(MODES), help=f"credits: {', '.join(MODES)}")
    parser.add_argument("--levels", nargs="+", default=["any"], help="1, 2, 3 (moves) or any")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rooms", type=int, default=32, help="rooms per step")
    parser.add_argument("--test", type=int, default=128, help="held-out rooms")
    parser.add_argument("--every", type=int, default=5, help="steps between accuracy checks")
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--warmup", type=int, default=0, help="optim.warmup_steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoints", nargs="+", default=[], help="model folders to score instead of training")
    parser.add_argument("--play", type=int, default=32, help="greedy episodes on this many eval levels, after training or per checkpoint")
    parser.add_argument("--frozen-layers", type=int, default=0, help="model_options.frozen_layers of the trained policy")
    parser.add_argument("--states", default="start", choices=("start", "walk"), help="training positions: room starts, or points of their solutions and a move or two off them")
    parser.add_argument("--oracle", nargs="+", type=float, default=[],
                        help="instead of training: play oracle_chooser at these accuracies on --play eval levels")
    parser.add_argument("--oracle-seeds", type=int, default=5, help="seeds (which positions go wrong) per --oracle accuracy")
    parser.add_argument("--format", default="v1", help=f"observation: {', '.join(FORMATS)} (see benchmarks.readability)")
    args = parser.parse_args(argv)
    check_choice([args.format], tuple(FORMATS), "format")
    check_choice(args.modes, MODES, "mode")
    check_choice(args.levels, LEVELS, "levels")
    path = RESULTS_DIR / f"{NAME}.json"
    results = json.loads(path.read_text()).get("results", {}) if path.is_file() else {}
    for accuracy in args.oracle:
        results[f"oracle:{accuracy}"] = oracle_play(accuracy, args)
        write_result(NAME, {"env_id": ENV_ID, "model": MODEL, "results": results})
    if args.oracle:
        return
    jobs = [(f"checkpoint:{folder}", folder) for folder in args.checkpoints] or [(mode, mode) for mode in args.modes]
    for name, what in jobs:
        for levels in args.levels:
            run = score_checkpoint if args.checkpoints else train
            key = f"{name}/{levels}" if args.format == "v1" else f"{name}/{levels}/{args.format}"
            key += f"/frozen{args.frozen_layers}" if args.frozen_layers and not args.checkpoints else ""
            key += f"/{args.states}" if args.states != "start" and not args.checkpoints else ""
            results[key] = run(what, levels, args)
            write_result(NAME, {"env_id": ENV_ID, "model": MODEL, "results": results})


if __name__ == "__main__":
    main()
