"""Each env-reward recipe's loss moves the tiny model toward what its env rewards, in a few steps.

The recipes (``math-easy-grpo``, ``tool-calculator-grpo``, ``sokoban-v1-grpo``) run as they
ship: their algorithm, credit, agent, layout, response prefix, choices, temperature and env
options, on the real env classes and their verifiers. What changes is what a tiny model can do
in seconds: the character-level test model (``llmgym_train.testing``), a learning rate of 0.01,
and one fixed level per env (a wrapper passes it at every reset), whose rewarded reply is one
token of the tiny vocabulary:

* math: ``What is 3 + 4?`` after the prefix ``<answer>``; the token ``7</answer>`` is the
  right answer (about 1% of the untrained model's first tokens), scored by the env's verifier.
* tool use: the calculator task ``3 + 4`` after the prefix ``<``; over three turns the model
  may call the calculator (one token: the whole call) and answer (``answer>7</answer>``).
* Sokoban: a room solved by two moves right, played with the recipe's choice among the four
  moves at temperature 20, its lookahead on the env's own rewards and its four draws a state.

The math and tool tests assert the untrained policy's sampled success is near chance and the
last steps' is high: a loss that did not follow the reward would leave it at chance. The Sokoban
recipe samples at temperature 20, near uniform whatever it learnt, so its test reads the greedy
policy, the one its evaluation plays: it fails the room before training and solves it after.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from llmgym.envs.math.env import MathEnv
from llmgym.envs.sokoban.env import SokobanEnv
from llmgym.envs.tool_use.env import ToolUseEnv
from llmgym.envs.tool_use.sandbox import SandboxConfig
from llmgym.envs.tool_use.tasks import tool_call
from llmgym_train.recipes import load_recipe
from llmgym_train.trainer import Trainer
from test_recipes import tiny_model_for, tiny_overrides

MATH_LEVEL = {"question": "What is 3 + 4?", "answer": "7"}
CALL = tool_call("calculator", expression="3 + 4")
TOOL_LEVEL = {"kind": "calculator", "question": "What is 3 + 4? Give the exact integer.", "answer": "7",
              "plan": [CALL, "7"]}
#: Two pushes right put the box on the target.
SOKOBAN_LEVEL = "\n".join(["######", "#@ $.#", "#    #", "######"])


class FixedLevel(gym.Wrapper):
    """Every reset plays ``level`` (the env's own ``options={"level": ...}``), whatever the seed."""

    def __init__(self, env: gym.Env, level: Any) -> None:
        super().__init__(env)
        self.level = level

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return self.env.reset(seed=seed, options={**(options or {}), "level": self.level})


def fixed_math(**options: Any) -> gym.Env:
    return FixedLevel(MathEnv(difficulty="easy", **options), MATH_LEVEL)


def fixed_tool(**options: Any) -> gym.Env:
    # No python sandbox launched ahead of a call (the calculator task calls none): 64 envs would start 64.
    return FixedLevel(ToolUseEnv(task="calculator", sandbox_config=SandboxConfig(spares=0), **options), TOOL_LEVEL)


def fixed_sokoban(**options: Any) -> gym.Env:
    return FixedLevel(SokobanEnv(grid="spaced", coordinates=True, **options), SOKOBAN_LEVEL)


FIXED = {"llmgym-test/MathFixed-v0": fixed_math, "llmgym-test/ToolFixed-v0": fixed_tool,
         "llmgym-test/SokobanFixed-v0": fixed_sokoban}
for _env_id, _entry_point in FIXED.items():
    if _env_id not in gym.registry:
        gym.register(_env_id, entry_point=_entry_point)


def train_recipe(tmp_path: Path, name: str, env_id: str, steps: int, n_groups: int,
                 words: tuple[str, ...] = (), extra: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The recipe on ``env_id`` with the tiny model; the train records of its metrics file, step by step."""
    recipe = load_recipe(name)
    entry = {**recipe.config["train_envs"][0], "id": env_id, "n_groups": n_groups}
    group_size = recipe.config["rollout"]["group_size"]
    config = recipe.load([
        *tiny_overrides(recipe, tiny_model_for(recipe, tmp_path / "model", words=words), tmp_path / "run", steps),
        f"train_envs={json.dumps([entry])}", f"rollout.group_size={group_size}",
        "optim.lr=0.01", "optim.warmup_steps=0", *extra,
    ])
    started = time.perf_counter()
    with Trainer(config) as trainer:
        summary = trainer.train()
    assert summary.completed
    records = run_records(tmp_path / "run", "train")
    success = [round(record["success_rate"], 2) for record in records]
    print(f"{name}: sampled success {success} in {time.perf_counter() - started:.0f}s")
    return records


def run_records(run: Path, kind: str) -> list[dict[str, Any]]:
    """The records of ``kind`` (``train``, ``eval``) in ``run``'s metrics file, in order."""
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [record for record in records if record["kind"] == kind]


def assert_learned(name: str, records: list[dict[str, Any]], chance: float, learned: float) -> None:
    success = [record["success_rate"] for record in records]
    assert success[0] <= chance, f"{name}: the untrained model should be near chance, got {success[0]}"
    last = sum(success[-3:]) / 3
    assert last >= learned, f"{name} did not learn: sampled success {success[0]} -> {success[-3:]}"


@pytest.mark.slow
def test_math_recipe_learns_the_verified_answer(tmp_path: Path) -> None:
    records = train_recipe(tmp_path, "math-easy-grpo", "llmgym-test/MathFixed-v0", steps=16, n_groups=8,
                           words=("7</answer>",), extra=("rollout.max_new_tokens=1",))
    assert_learned("math-easy-grpo", records, chance=0.1, learned=0.6)


@pytest.mark.slow
def test_tool_recipe_learns_the_right_final_answer(tmp_path: Path) -> None:
    env = fixed_tool()
    # The system prompt and the format line as one token each (a character per token made every
    # episode 2,000 tokens long and a step 15 s).
    long_texts = (env.unwrapped.system_prompt, ToolUseEnv.format_hint)
    env.close()
    # The recipe's loss and optimizer on free replies after the prefix "<", on the hf backend: the tiny
    # model writes a whole call or answer as one token, which the constraint's regex (enforced by vLLM,
    # tests/test_constraints.py and test_recipes.py) cannot see as one choice.
    free = ("rollout.constrain=none", "rollout.backend=hf", "rollout.response_prefix=<",
            "rollout.max_turns=3", "rollout.temperature=1.0", "rollout.max_new_tokens=1")
    records = train_recipe(tmp_path, "tool-calculator-grpo", "llmgym-test/ToolFixed-v0", steps=16, n_groups=8,
                           words=(CALL[1:], "answer>7</answer>", *long_texts), extra=free)
    assert_learned("tool-calculator-grpo", records, chance=0.15, learned=0.7)
    # The episodes' tool calls reach the metrics: the share that ran the calculator, for every step.
    called = [record["called_calculator_rate"] for record in records]
    assert all(0.0 <= share <= 1.0 for share in called) and max(called) > 0.0, called


#: The recipe's evaluation settings on the fixed room: greedy, the env's own turn limit, every 5 steps.
FIXED_ROOM_EVAL = [{"id": "llmgym-test/SokobanFixed-v0",
                    "options": {"max_turns": 10, "action_parser": "lenient"}}]
SOKOBAN_EVAL = (
    f"eval_envs={json.dumps(FIXED_ROOM_EVAL)}",
    "eval.disabled=false", "eval.use_eval_set=false", "eval.levels=1", "eval.every=5",
)


def greedy_success(run: Path) -> list[tuple[int, float]]:
    """``(step, success)`` of each evaluation in ``run``'s metrics file."""
    return [(record["step"], record["success_rate"]) for record in run_records(run, "eval")]


@pytest.mark.slow
def test_sokoban_env_reward_recipe_learns_to_push_the_box_home(tmp_path: Path) -> None:
    train_recipe(tmp_path, "sokoban-v1-grpo", "llmgym-test/SokobanFixed-v0", steps=10, n_groups=4,
                 extra=SOKOBAN_EVAL)
    greedy = greedy_success(tmp_path / "run")
    print(f"sokoban-v1-grpo: greedy success by step {greedy}")
    assert [step for step, _ in greedy] == [0, 5, 10]
    assert greedy[0][1] == 0.0, "the untrained greedy policy should not solve the room"
    assert greedy[-1][1] == 1.0, f"sokoban-v1-grpo did not learn: greedy success {greedy}"


@pytest.mark.slow
def test_a_policy_trained_cooler_than_it_samples_settles_and_its_pull_fades(tmp_path: Path) -> None:
    """``loss.policy_temperature=1`` under the recipe's moves sampled at 20: the policy at 1 learns the
    room and settles on it, and its gradient fades; trained at 20 (on-policy), the pull never does."""
    norms = {}
    for temperature in (1, 20):
        run = tmp_path / f"t{temperature}"
        records = train_recipe(run, "sokoban-v1-grpo", "llmgym-test/SokobanFixed-v0", steps=15, n_groups=4,
                               extra=(*SOKOBAN_EVAL, f"loss.policy_temperature={temperature}"))
        greedy = greedy_success(run / "run")
        assert greedy[-1][1] == 1.0, f"trained at {temperature}: greedy success {greedy}"
        norms[temperature] = [record["grad_norm"] for record in records]
        print(f"trained at {temperature}: entropy {[round(r['entropy'], 3) for r in records]}")
    early, late = max(norms[1][:4]), max(norms[1][-3:])
    assert late < 0.1 * early, f"the pull at temperature 1 should fade: grad norms {norms[1]}"
    early, late = max(norms[20][:4]), max(norms[20][-3:])
    assert late > 0.5 * early, f"at temperature 20 the pull should not fade: grad norms {norms[20]}"
