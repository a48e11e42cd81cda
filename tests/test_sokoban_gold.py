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


def breadth_first_steps(xsb: str) -> int | None:
    """Fewest moves that solve the XSB level, by plain breadth-first search over (player, boxes) states.

    Written from the rules alone and sharing nothing with the env's solver (not its level
    parser, its deadlock pruning or its heuristic): the independent check of ``optimal_steps``.
    Cells outside the rows count as walls.
    """
    cells = {(row, column): char for row, line in enumerate(xsb.split("\n")) for column, char in enumerate(line)}
    floor = {cell for cell, char in cells.items() if char != "#"}
    targets = frozenset(cell for cell, char in cells.items() if char in ".*+")
    boxes = frozenset(cell for cell, char in cells.items() if char in "$*")
    (player,) = [cell for cell, char in cells.items() if char in "@+"]
    if boxes == targets:
        return 0
    seen = {(player, boxes)}
    layer, moves = [(player, boxes)], 0
    while layer:
        moves += 1
        following = []
        for (row, column), boxes in layer:
            for step_row, step_column in ((-1, 0), (1, 0), (0, -1), (0, 1)):
                ahead = (row + step_row, column + step_column)
                if ahead not in floor:
                    continue
                if ahead in boxes:
                    beyond = (ahead[0] + step_row, ahead[1] + step_column)
                    if beyond not in floor or beyond in boxes:
                        continue
                    pushed = (boxes - {ahead}) | {beyond}
                    if pushed == targets:
                        return moves
                    state = (ahead, pushed)
                else:
                    state = (ahead, boxes)
                if state not in seen:
                    seen.add(state)
                    following.append(state)
        layer = following
    return None


#: Levels checked by the independent search: every 5th of the 8x8 set, every 10th of the 10x10 set
#: with 3 boxes (20 levels, about 10 s on a 2-core CPU), every level of the 6x6 sets.
INDEPENDENT_STRIDE = {"llmgym/Sokoban-8x8-2box-v0": 5, "llmgym/Sokoban-10x10-3box-v0": 10}


@pytest.mark.parametrize("env_id", SOKOBAN_IDS)
def test_recorded_optimal_steps_match_an_independent_breadth_first_search(env_id):
    for record in load_eval_set(env_id)[:: INDEPENDENT_STRIDE.get(env_id, 1)]:
        assert breadth_first_steps(record["level"]) == record["optimal_steps"], record


def test_breadth_first_search_on_levels_worked_out_by_hand():
    assert breadth_first_steps("#####\n#@$.#\n#####") == 1
    assert breadth_first_steps("#####\n#@  #\n# $ #\n#  .#\n#####") == 5
    assert breadth_first_steps("########\n#.$@ $.#\n########") == 4
    assert breadth_first_steps("####\n#@*#\n####") == 0
    assert breadth_first_steps("#######\n#@$$..#\n#######") is None
