"""Benchmark: does the default model's state hold the right Sokoban move? A linear probe, per observation format.

    python -m benchmarks.readability [--formats v1 compact] [--levels 1 2 3 eval] [--train 384] [--test 128]

Reinforcement learning can only teach a policy what its model can tell apart. This script asks,
without any training of the model, whether SmolLM2-135M's hidden state at the moment the
policy chooses its move (the ``markov`` agent's prompt: the env's system prompt, the
observation, then ``<answer>``) already holds the move an optimal player makes, and for which
observation formats and levels:

* Levels (``--levels``): generated 6x6 one-box rooms of ``Sokoban-v1`` that need exactly 1, 2
  or 3 moves (``max_level_moves``; the learning-curve preset trains on these), and ``eval``:
  training levels from the full distribution, tested on the frozen ``Sokoban-v1`` eval set's
  levels. Train levels use seeds from 0, test levels are disjoint (seeds from 10**6, or the
  eval set).
* Formats (``--formats``): ``v1`` (cells separated by spaces, the player's row and column under
  the board: the v1 default), ``v1-all`` (the same line goes on with the box and target
  coordinates: ``coordinates="all"``), ``spaced`` (no coordinates) and ``compact`` (v0's rows, whose
  cells the tokenizer merges).
* Label: the first move of an optimal solution (:meth:`SokobanEnv.solution`). A prediction
  counts as right when it is *an* optimal first move: one after which the level needs one move
  fewer (a level may have several).

For each (format, levels) the script extracts the hidden state at the prompt's last token at
a few layers (``--layers``), fits a multinomial logistic regression (standardised features,
L2, L-BFGS) on the train levels and reports its accuracy on the test levels. Controls on the
same test levels: the share of the most common label (``majority``), the model's own choice
among the four move tokens (``zero_shot``: what the untrained policy plays greedily), and the
same probe fitted on shuffled train labels (``shuffled``: chance for this probe).

Results merge into ``benchmarks/results/readability.json`` under ``results["<format>/<levels>"]``
(a pair run again replaces its entry), with the load average at the start and end of each.
Not a test: a pair takes about three minutes of both cores (forward passes only).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch

import llmgym  # noqa: F401  (registers the ids)
from benchmarks.common import RESULTS_DIR, write_result
from llmgym.eval_sets import load_eval_set
from llmgym.error import InvalidOptionError, did_you_mean

ENV_ID = "llmgym/Sokoban-v1"
MODEL = "smollm2-135m"
NAME = "readability"
MOVES = ("Up", "Down", "Left", "Right")
FORMATS: dict[str, dict[str, Any]] = {
    "v1": {"grid": "spaced", "coordinates": True},
    "v1-all": {"grid": "spaced", "coordinates": "all"},
    "spaced": {"grid": "spaced", "coordinates": False},
    "compact": {"grid": "compact", "coordinates": False},
}
LEVEL_SETS = ("1", "2", "3", "eval")
#: (prompt token ids, index of the labelled optimal first move, indices of every optimal first move)
Example = tuple[list[int], int, frozenset[int]]


def optimal_first_moves(env: Any) -> frozenset[int]:
    """Indices (in :data:`MOVES`) of the moves after which the current level needs one move fewer."""
    start = env.get_state()
    needed = len(env.solution())
    best = set()
    for index, move in enumerate(MOVES):
        env.set_state(start)
        _, _, terminated, _, info = env.step(f"<answer>{move}</answer>")
        rest = [] if terminated else env.solution()  # None: the move made the level unsolvable
        if info["action_is_effective"] and rest is not None and len(rest) == needed - 1:
            best.add(index)
    env.set_state(start)
    return frozenset(best)


def examples(chat: Any, env_format: str, levels: str, seeds: Sequence[int], test: bool) -> list[Example]:
    """Prompts and labels of ``levels`` (``"1"``..``"3"`` moves, or ``"eval"``) in ``env_format``."""
    moves = None if levels == "eval" else int(levels)
    env = gym.make(ENV_ID, max_level_moves=moves, **FORMATS[env_format]).unwrapped
    resets: list[dict[str, Any]]
    if levels == "eval" and test:
        resets = [{"options": {"level": record["level"]}} for record in load_eval_set(ENV_ID)[: len(seeds)]]
    else:
        resets = [{"seed": int(seed)} for seed in seeds]
    found = []
    for reset in resets:
        observation, info = env.reset(**reset)
        prompt = chat.prompt(observation, info["system_prompt"])
        found.append((prompt, MOVES.index(env.solution()[0]), optimal_first_moves(env)))
    env.close()
    return found


@torch.no_grad()
def features(model: Any, choice_ids: Sequence[int], items: list[Example], layers: Sequence[int]) -> tuple[dict[int, torch.Tensor], torch.Tensor]:
    """Hidden states at each prompt's last token per layer, and the model's greedy move among ``choice_ids``.

    Prompts are padded on the left, so every prompt's last token is the batch's last position.
    """
    states: dict[int, list[torch.Tensor]] = {layer: [] for layer in layers}
    choices = []
    for start in range(0, len(items), 32):
        prompts = [prompt for prompt, _, _ in items[start : start + 32]]
        width = max(map(len, prompts))
        tokens = torch.zeros(len(prompts), width, dtype=torch.long)
        mask = torch.zeros_like(tokens)
        for row, prompt in enumerate(prompts):
            tokens[row, width - len(prompt) :] = torch.tensor(prompt)
            mask[row, width - len(prompt) :] = 1
        output = model(input_ids=tokens, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                       output_hidden_states=True, logits_to_keep=1)
        for layer in layers:
            states[layer].append(output.hidden_states[layer][:, -1])
        choices.append(output.logits[:, -1, list(choice_ids)].argmax(-1))
    return {layer: torch.cat(rows) for layer, rows in states.items()}, torch.cat(choices)


def probe_accuracy(train_x: torch.Tensor, train_y: torch.Tensor, test_x: torch.Tensor, test: list[Example], l2: float = 1e-2) -> float:
    """Test accuracy (any optimal first move counts) of a logistic regression fitted on the train states."""
    mean, scale = train_x.mean(0), train_x.std(0) + 1e-6
    train_x, test_x = (train_x - mean) / scale, (test_x - mean) / scale
    weights = torch.zeros(train_x.shape[1], len(MOVES), requires_grad=True)
    bias = torch.zeros(len(MOVES), requires_grad=True)
    optimizer = torch.optim.LBFGS([weights, bias], max_iter=200)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(train_x @ weights + bias, train_y) + l2 * weights.pow(2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    with torch.no_grad():
        return hit_rate((test_x @ weights + bias).argmax(-1), test)


def hit_rate(predicted: torch.Tensor, test: list[Example]) -> float:
    return float(np.mean([move in best for move, (_, _, best) in zip(predicted.tolist(), test, strict=True)]))


def measure(model: Any, chat: Any, env_format: str, levels: str, sizes: tuple[int, int], layers: Sequence[int]) -> dict[str, Any]:
    """One (format, levels) entry: the probe per layer and the three controls."""
    started, load_start = time.perf_counter(), os.getloadavg()
    train = examples(chat, env_format, levels, range(sizes[0]), test=False)
    test = examples(chat, env_format, levels, range(10**6, 10**6 + sizes[1]), test=True)
    choice_ids = chat.choice_token_ids(MOVES)
    train_x, _ = features(model, choice_ids, train, layers)
    test_x, greedy = features(model, choice_ids, test, layers)
    train_y = torch.tensor([label for _, label, _ in train])
    shuffled = train_y[torch.randperm(len(train_y), generator=torch.Generator().manual_seed(0))]
    labels = np.bincount([label for _, label, _ in test], minlength=len(MOVES))
    return {
        "format": env_format, "env_options": FORMATS[env_format], "levels": levels,
        "train_levels": len(train), "test_levels": len(test),
        "prompt_tokens_mean": float(np.mean([len(prompt) for prompt, _, _ in test])),
        "optimal_first_moves_mean": float(np.mean([len(best) for _, _, best in test])),
        "probe": {str(layer): probe_accuracy(train_x[layer], train_y, test_x[layer], test) for layer in layers},
        "shuffled": {str(layer): probe_accuracy(train_x[layer], shuffled, test_x[layer], test) for layer in layers},
        "zero_shot": hit_rate(greedy, test),
        "majority": float(labels.max() / labels.sum()),
        "seconds": time.perf_counter() - started,
        "load_average_start": load_start, "load_average_end": os.getloadavg(),
    }


def load_model() -> tuple[Any, Any]:
    """The default model (float32, eval mode) and its chat tokens with the ``<answer>`` response prefix."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from llmgym_train.chat import ChatTokens
    from llmgym_train.models import resolve_model

    path = resolve_model(MODEL)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return model, ChatTokens(AutoTokenizer.from_pretrained(path), response_prefix="<answer>")


def check_choice(values: Sequence[str], known: Sequence[str], what: str) -> None:
    for value in values:
        if value not in known:
            raise InvalidOptionError(f"Unknown {what} {value!r}; known: {', '.join(known)}.{did_you_mean(value, known)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--formats", nargs="+", default=list(FORMATS), help=f"observation formats: {', '.join(FORMATS)}")
    parser.add_argument("--levels", nargs="+", default=list(LEVEL_SETS), help="1, 2, 3 (moves) or eval")
    parser.add_argument("--train", type=int, default=384, help="train levels per pair")
    parser.add_argument("--test", type=int, default=128, help="test levels per pair")
    parser.add_argument("--layers", type=int, nargs="+", default=[10, 20, 30], help="hidden-state layers probed")
    args = parser.parse_args(argv)
    check_choice(args.formats, list(FORMATS), "format")
    check_choice(args.levels, LEVEL_SETS, "levels")
    torch.manual_seed(0)
    model, chat = load_model()
    path = RESULTS_DIR / f"{NAME}.json"
    document = json.loads(path.read_text()) if path.is_file() else {}
    results = document.get("results", {})
    for env_format in args.formats:
        for levels in args.levels:
            entry = measure(model, chat, env_format, levels, (args.train, args.test), args.layers)
            results[f"{env_format}/{levels}"] = entry
            print(f"{env_format}/{levels}: probe {entry['probe']} shuffled {entry['shuffled']} "
                  f"zero-shot {entry['zero_shot']:.2f} majority {entry['majority']:.2f}", flush=True)
            write_result(NAME, {"env_id": ENV_ID, "model": MODEL, "results": results})


if __name__ == "__main__":
    main()
