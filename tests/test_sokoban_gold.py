"""Gold tests: the solver's plan solves every level it is asked about, in the real env.

500 generated levels per Sokoban id, and every level of the frozen eval sets (whose recorded
``optimal_steps`` the plan's length must equal). The eval sets must also regenerate exactly.
"""

from __future__ import annotations

import gymnasium as gym
import pytest

import llmgym
from llmgym.envs.sokoban.env import SokobanEnv
from llmgym.eval_sets import build_eval_set, load_eval_set

SOKOBAN_IDS = [env_id for env_id in llmgym.env_ids() if "/Sokoban" in env_id]
GENERATED_LEVELS = 500


def plays_to_success(env: SokobanEnv, plan: list[str]) -> bool:
    """Play ``plan`` as completions; True when the last move solves the level and none before does."""
    for number, action in enumerate(plan, start=1):
        _, _, terminated, truncated, info = env.step(f"<answer>{action}</answer>")
        assert info["action_is_valid"] and info["action_is_effective"], (action, env.level_xsb())
        if terminated:
            return info["success"] and number == len(plan)
        assert not truncated
    return False


@pytest.mark.parametrize("env_id", SOKOBAN_IDS)
def test_solver_plan_solves_generated_levels(env_id):
    # solve_budget=0: reset skips its own solve, so each level is solved once, by solution().
    env = gym.make(env_id, solve_budget=0, max_turns=None).unwrapped
    for seed in range(GENERATED_LEVELS):
        env.reset(seed=seed)
        plan = env.solution()
        assert plan, f"seed {seed}: no plan for\n{env.level()}"
        assert plays_to_success(env, plan), f"seed {seed}: plan {plan} does not solve\n{env.level()}"


@pytest.mark.parametrize("env_id", SOKOBAN_IDS)
def test_solver_plan_solves_every_frozen_eval_level_in_the_recorded_optimum(env_id):
    env = gym.make(env_id, solve_budget=0, max_turns=None).unwrapped
    for record in load_eval_set(env_id):
        env.reset(options={"level": record["level"]})
        assert env.level() == record["level"]
        plan = env.solution()
        assert plan is not None and len(plan) == record["optimal_steps"], record
        assert plays_to_success(env, plan), record


@pytest.mark.parametrize("env_id", SOKOBAN_IDS)
def test_eval_set_regenerates_identically(env_id):
    frozen = load_eval_set(env_id)
    assert len(frozen) == 200 and all(record["optimal_steps"] is not None for record in frozen)
    assert build_eval_set(env_id) == frozen, f"{env_id}'s levels changed: bump the env's version"
