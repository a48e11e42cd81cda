"""Sokoban: XSB levels, the generator, the exact solver, and the env's rules and rewards."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import llmgym  # noqa: F401  (registers the ids)
from llmgym.envs.sokoban.env import BOX_ON_TARGET, SOLVED_BONUS, STEP_PENALTY, SokobanEnv
from llmgym.envs.sokoban.generator import MIN_SINGLE_BOX_MOVES, generate_level, max_boxes
from llmgym.envs.sokoban.level import PaddedMaze, parse_xsb
from llmgym.envs.sokoban.solver import optimal_steps, solve
from llmgym.error import InvalidOptionError, LevelFormatError, UnknownOptionError
from llmgym.wrappers.classic import encode_board

SOKOBAN_IDS = [env_id for env_id in llmgym.env_ids() if "/Sokoban" in env_id]


def brute_force_steps(xsb: str) -> int | None:
    """Fewest moves by plain breadth-first search over (player, boxes): the oracle for the solver."""
    level = parse_xsb(xsb)
    maze = PaddedMaze.of(level)
    width = maze.padded_width
    start = (maze.pad(level.player), frozenset(maze.pad(box) for box in level.boxes))
    goal = frozenset(maze.targets)
    seen, layer, moves = {start}, [start], 0
    while layer:
        following = []
        for player, boxes in layer:
            if boxes == goal:
                return moves
            for step in (-width, width, -1, 1):
                ahead = player + step
                if maze.walls[ahead]:
                    continue
                if ahead in boxes:
                    beyond = ahead + step
                    if maze.walls[beyond] or beyond in boxes:
                        continue
                    state = (ahead, (boxes - {ahead}) | {beyond})
                else:
                    state = (ahead, boxes)
                if state not in seen:
                    seen.add(state)
                    following.append(state)
        layer, moves = following, moves + 1
    return None


def play(env: SokobanEnv, actions: list[str]) -> tuple[float, bool]:
    total, terminated = 0.0, False
    for action in actions:
        _, reward, terminated, _, info = env.step(f"<answer>{action}</answer>")
        total += float(reward)
        assert info["action_is_valid"]
    return total, terminated


# Hand-made levels and their optimum, worked out by hand:
HAND_LEVELS = {
    # one push
    "#####\n#@$.#\n#####": 1,
    # one step, one push
    "######\n#@ $.#\n######": 2,
    # the box goes down then right (or right then down): 2 pushes, and the player changes
    # sides once through a 2-move detour: Right, Down*, Left, Down, Right* = 5
    "#####\n#@  #\n# $ #\n#  .#\n#####": 5,
    # two boxes either side: push left first (1), walk back 2, push right (1) = 4;
    # right first costs 1 + 1 + 2 + 1 = 5
    "########\n#.$@ $.#\n########": 4,
    # already solved
    "####\n#@*#\n####": 0,
}


@pytest.mark.parametrize("xsb, expected", list(HAND_LEVELS.items()))
def test_solver_length_equals_the_known_optimum_on_hand_made_levels(xsb, expected):
    assert brute_force_steps(xsb) == expected
    assert optimal_steps(parse_xsb(xsb)) == expected
    plan = solve(parse_xsb(xsb))
    assert plan is not None and len(plan) == expected
    env = SokobanEnv()
    env.reset(options={"level": xsb})
    if expected:
        assert play(env, plan)[1]


def test_unsolvable_levels_give_none():
    # two boxes in a row in a corridor can never be separated
    assert optimal_steps(parse_xsb("#######\n#@$$..#\n#######")) is None
    # a box in a corner off target
    assert solve(parse_xsb("#####\n#$  #\n# @.#\n#####")) is None


@pytest.mark.parametrize("dim_room, num_boxes, count", [((6, 6), 1, 40), ((7, 7), 2, 25), ((8, 8), 2, 15)])
def test_solver_matches_brute_force_on_generated_levels(dim_room, num_boxes, count):
    for seed in range(count):
        level = generate_level(np.random.default_rng(seed), dim_room, num_boxes)
        assert optimal_steps(level) == brute_force_steps(level.xsb()), level.xsb()


def test_solver_budget_exhaustion_returns_none():
    level = generate_level(np.random.default_rng(3), (10, 10), 3)
    assert optimal_steps(level, budget=1) is None
    assert optimal_steps(level) is not None


@pytest.mark.parametrize(
    "dim_room, num_boxes", [((6, 6), 1), ((8, 8), 2), ((10, 10), 3), ((7, 12), 4), ((5, 5), 1), ((6, 6), 3)]
)
def test_generated_levels_are_well_formed_and_nontrivial(dim_room, num_boxes):
    for seed in range(30):
        level = generate_level(np.random.default_rng(seed), dim_room, num_boxes)
        assert (level.height, level.width) == dim_room
        assert len(level.boxes) == len(level.targets) == num_boxes
        assert not set(level.boxes) & set(level.targets), "no box may start on a target"
        assert all(level.walls[cell] for cell in range(level.width))  # closed by walls
        assert parse_xsb(level.xsb()) == level
        if dim_room == (6, 6) and num_boxes == 1:  # the exhaustive reverse search's promise
            assert optimal_steps(level) >= MIN_SINGLE_BOX_MOVES


@pytest.mark.parametrize("max_level_moves", [1, 2, 3, 6])
def test_max_level_moves_caps_the_moves_a_level_needs(max_level_moves):
    env = gym.make("llmgym/Sokoban-v1", max_level_moves=max_level_moves)
    needed = []
    for seed in range(40):
        _, info = env.reset(seed=seed)
        level = parse_xsb(env.unwrapped.level())
        assert not set(level.boxes) & set(level.targets)
        assert info["optimal_steps"] == optimal_steps(level) <= max_level_moves
        needed.append(info["optimal_steps"])
    # Most rooms have positions that far: the cap is where levels are drawn, not a ceiling far above.
    assert np.mean(np.array(needed) == max_level_moves) > 0.8


def _fewest_moves_to(env: SokobanEnv, key: str) -> int:
    """Breadth-first over positions from ``env``'s current one: the fewest moves to the position ``key``."""
    frontier, seen, moves = [env.get_state()], {env.state_key()}, 0
    while frontier:
        if any(env.set_state(state) or env.state_key() == key for state in frontier):
            return moves
        following = []
        for state in frontier:
            for action in env.action_names:
                env.set_state(state)
                env.step(f"<answer>{action}</answer>")
                if env.state_key() not in seen:
                    seen.add(env.state_key())
                    following.append(env.get_state())
        frontier, moves = following, moves + 1
    raise AssertionError("position not reachable")


def _moves_left_on_the_rooms_solution(rooms: Any, partway: Any, seeds: range) -> list[tuple[int, int]]:
    """(room's fewest moves, moves left at the start) per seed, after checking that ``partway``
    starts on a fewest-moves solution of the room ``rooms`` draws from the same seed, reproducibly."""
    found = []
    for seed in seeds:
        _, room_info = rooms.reset(seed=seed)
        observation, info = partway.reset(seed=seed)
        room, start = parse_xsb(rooms.unwrapped.level()), parse_xsb(partway.unwrapped.level())
        assert (start.walls, start.targets) == (room.walls, room.targets)  # the same room, same seed
        assert 1 <= info["optimal_steps"] == optimal_steps(start) <= room_info["optimal_steps"]
        # On an optimal path: the fewest moves there plus the fewest moves left make the room's optimum.
        there = _fewest_moves_to(rooms.unwrapped, partway.unwrapped.state_key())
        assert there + info["optimal_steps"] == room_info["optimal_steps"]
        assert partway.reset(seed=seed)[0] == observation  # reproducible from the seed
        found.append((room_info["optimal_steps"], info["optimal_steps"]))
    return found


def test_start_on_solution_begins_partway_along_an_optimal_solution():
    rooms, partway = gym.make("llmgym/Sokoban-v1"), gym.make("llmgym/Sokoban-v1", start="solution")
    left = [moves / whole for whole, moves in _moves_left_on_the_rooms_solution(rooms, partway, range(40))]
    assert min(left) < 0.5 and max(left) == 1.0  # from the room's start to near the goal
    with pytest.raises(InvalidOptionError, match='"room" or "solution"'):
        gym.make("llmgym/Sokoban-v1", start="middle")


def test_max_moves_left_starts_near_the_end_of_the_same_solution():
    rooms, near = gym.make("llmgym/Sokoban-v1"), gym.make("llmgym/Sokoban-v1", start="solution", max_moves_left=2)
    found = _moves_left_on_the_rooms_solution(rooms, near, range(40))
    assert {moves for _, moves in found} == {1, 2} and max(whole for whole, _ in found) > 2
    for bad in ({"max_moves_left": 0, "start": "solution"}, {"max_moves_left": 3}):
        with pytest.raises(InvalidOptionError, match="max_moves_left"):
            gym.make("llmgym/Sokoban-v1", **bad)


def test_without_max_level_moves_levels_are_those_of_the_frozen_sets():
    capped, plain = gym.make("llmgym/Sokoban-v1", max_level_moves=None), gym.make("llmgym/Sokoban-v1")
    for seed in range(10):
        capped.reset(seed=seed)
        plain.reset(seed=seed)
        assert capped.unwrapped.level() == plain.unwrapped.level()


def test_generator_is_a_pure_function_of_the_rng():
    first = generate_level(np.random.default_rng(42), (8, 8), 2)
    assert generate_level(np.random.default_rng(42), (8, 8), 2) == first
    assert generate_level(np.random.default_rng(43), (8, 8), 2) != first


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"dim_room": (2, 2)}, "between 5x5 and 32x32"),
        ({"dim_room": (4, 9)}, "at least a 3x3 floor area"),
        ({"dim_room": (6, 6), "num_boxes": 4}, "between 1 and 3 for a 6x6 room"),
        ({"num_boxes": 0}, "num_boxes must be between 1"),
        ({"dim_room": "big"}, "pair of ints"),
        ({"max_actions_per_turn": 0}, "max_actions_per_turn must be >= 1"),
        ({"solve_budget": -5}, "solve_budget must be None"),
        ({"max_level_moves": 0}, "max_level_moves must be None or an int >= 1"),
        ({"max_level_moves": 3, "num_boxes": 2}, "max_level_moves needs one box"),
        ({"max_level_moves": 3, "dim_room": (8, 8)}, "at most 30 inner cells"),
        ({"coordinates": "boxes"}, 'coordinates must be False, True \\(the player\\) or "all"'),
    ],
)
def test_impossible_settings_raise_value_errors_naming_the_limit(kwargs, message):
    with pytest.raises(InvalidOptionError, match=message) as caught:
        gym.make("llmgym/Sokoban-v0", **kwargs)
    assert isinstance(caught.value, ValueError)
    assert max_boxes((6, 6)) == 3  # the limit the message above names


def test_unknown_constructor_option_raises_type_error_with_suggestion():
    with pytest.raises(UnknownOptionError, match="Did you mean 'num_boxes'") as caught:
        gym.make("llmgym/Sokoban-v0", num_box=2)
    assert isinstance(caught.value, TypeError)


# ---------------------------------------------------------------------- XSB levels
BOXOBAN_LEVEL = """; 17
##########
##########
####   ###
#### $ .##
###  @ $ #
### #  . #
###      #
##########
##########
##########"""


def test_reset_with_a_level_round_trips_through_level_xsb():
    env = SokobanEnv()
    for xsb in [*HAND_LEVELS, "  ####\n###  #\n#@$ .#\n#    #\n######", "#####\n#+$ #\n# * #\n#$. #\n#####"]:
        observation, info = env.reset(options={"level": xsb})
        assert env.level_xsb() == xsb
        assert env.level() == xsb
        assert info["optimal_steps"] == brute_force_steps(xsb)
        assert "seed" not in info


def test_boxoban_format_levels_play():
    env = SokobanEnv()
    observation, info = env.reset(options={"level": BOXOBAN_LEVEL})
    assert env.level_xsb() == BOXOBAN_LEVEL.split("\n", 1)[1]
    assert "#### $ .##" in env.level_xsb()
    assert "####_$_.##" in observation
    assert play(env, env.solution())[1]
    assert info["optimal_steps"] == len(solve(parse_xsb(BOXOBAN_LEVEL)))


def test_floor_aliases_are_read_as_floor():
    assert parse_xsb("#####\n#@$.#\n#-_ #\n#####") == parse_xsb("#####\n#@$.#\n#   #\n#####")


@pytest.mark.parametrize(
    "xsb, message",
    [
        ("#####\n#@$.#\n#x  #\n#####", r"Line 3, column 2: unexpected symbol 'x'"),
        ("#####\n#@$.#\n#3# #\n#####", "run-length encoded"),
        ("#####\n# $.#\n#####", "exactly one player .*got 0"),
        ("#####\n#@$.#\n#@  #\n#####", "exactly one player .*got 2 at line 2 column 2, line 3 column 2"),
        ("######\n#@$$.#\n######", "as many boxes .*got 2 boxes and 1 targets"),
        ("#####\n#@ .#\n#####", "got 0 boxes and 1 targets"),
        ("\n\n; only a comment\n", "empty"),
        (["#####"], "XSB text"),
    ],
)
def test_bad_levels_raise_level_format_errors(xsb, message):
    env = SokobanEnv()
    with pytest.raises(LevelFormatError, match=message):
        env.reset(options={"level": xsb})


# ---------------------------------------------------------------------- actions and rewards
CORRIDOR = "######\n#@ $.#\n######"


def test_moves_and_final_push_rewards():
    env = SokobanEnv()
    env.reset(options={"level": CORRIDOR})
    observation, reward, terminated, truncated, info = env.step("<answer>right</answer>")
    assert reward == pytest.approx(STEP_PENALTY)
    assert (terminated, truncated, info["success"]) == (False, False, False)
    assert info["action_is_effective"]
    assert info["parsed_action"] == "right"
    observation, reward, terminated, _, info = env.step("<answer> RIGHT </answer>")
    assert reward == pytest.approx(STEP_PENALTY + BOX_ON_TARGET + SOLVED_BONUS)
    assert terminated and info["success"]
    assert "onto a target" in observation and "#__@*#" in observation


def test_step_penalty_sets_the_reward_of_every_move():
    env = gym.make("llmgym/Sokoban-v1", step_penalty=0.0)
    env.reset(options={"level": "#####\n#@$.#\n#####"})
    _, reward, terminated, _, _ = env.step("<answer>Up</answer>")  # blocked by the wall
    assert (reward, terminated) == (0.0, False)
    _, reward, terminated, _, info = env.step("<answer>Right</answer>")
    assert (reward, terminated, info["success"]) == (BOX_ON_TARGET + SOLVED_BONUS, True, True)


def test_blocked_penalty_sets_the_reward_of_a_move_that_changes_nothing():
    env = gym.make("llmgym/Sokoban-v1", step_penalty=0.0, blocked_penalty=-0.5)
    env.reset(options={"level": "######\n#@$#.#\n#   ##\n######"})
    for action in ("Up", "Right"):  # into the wall; the box against the wall
        before = env.unwrapped.state_key()
        _, reward, _, _, info = env.step(f"<answer>{action}</answer>")
        assert (reward, info["action_is_effective"], info["state_key"]) == (-0.5, False, before)
    _, reward, _, _, info = env.step("<answer>Down</answer>")  # a move: the step penalty
    assert (reward, info["action_is_effective"]) == (0.0, True)
    default = gym.make("llmgym/Sokoban-v1")  # unset: blocked moves cost the step penalty
    default.reset(options={"level": "#####\n#@$.#\n#####"})
    assert default.step("<answer>Up</answer>")[1] == pytest.approx(STEP_PENALTY)


# Down pushes the box against the bottom wall, off the target's row and column: no solution left.
OPEN_ROOM = "######\n#.   #\n#  @ #\n#  $ #\n#    #\n######"


def test_progress_reward_follows_the_solver_along_a_gold_solution():
    env = SokobanEnv(step_penalty=0.0, progress_reward=0.5)
    for seed in range(5):
        _, info = env.reset(seed=seed)
        rewards = []
        for action in env.solution():
            _, reward, terminated, _, info = env.step(f"<answer>{action}</answer>")
            rewards.append(reward)
        assert terminated and info["success"]
        # Every move of an optimal plan is one move of progress; the last also solves.
        assert rewards[:-1] == [0.5] * (len(rewards) - 1)
        assert rewards[-1] == pytest.approx(0.5 + BOX_ON_TARGET + SOLVED_BONUS)


def test_progress_reward_ranks_moves_from_one_position():
    env = SokobanEnv(step_penalty=0.0, progress_reward=1.0)
    env.reset(options={"level": OPEN_ROOM})
    start = env.get_state()
    before = len(env.solution())
    for action in ("Up", "Left", "Right"):
        env.set_state(start)
        _, reward, _, _, info = env.step(f"<answer>{action}</answer>")
        assert info["action_is_effective"]
        assert reward == before - len(env.solution()), action  # +1 on an optimal path, -1 a step away
    env.set_state(start)
    _, reward, _, _, _ = env.step("<answer>Down</answer>")
    assert env.solution() is None and reward == -(before + 1)  # every move of progress left, and one more
    # In a position with no solution nothing more is gained or lost.
    _, reward, _, _, info = env.step("<answer>Left</answer>")
    assert reward == 0.0 and info["action_is_effective"]


def test_progress_reward_telescopes_so_wandering_earns_nothing():
    # Between solvable positions the turn rewards sum to the moves saved over the whole walk:
    # a walk that pushes the box away and back earns no more than standing still.
    env = SokobanEnv(step_penalty=0.0, progress_reward=1.0)
    rng = np.random.default_rng(0)
    walks = 0
    for seed in range(40):
        env.reset(seed=seed)
        start = len(env.solution())
        total = 0.0
        for _ in range(12):
            _, reward, terminated, _, _ = env.step(f"<answer>{rng.choice(['Up', 'Down', 'Left', 'Right'])}</answer>")
            total += reward
            if terminated or env.solution() is None:
                break
        else:
            walks += 1
            assert total == start - len(env.solution())
    assert walks >= 20


def test_progress_reward_is_zero_for_blocked_moves_and_leaves_invalid_turns_alone():
    env = SokobanEnv(step_penalty=0.0, progress_reward=1.0, invalid_penalty=-0.5)
    env.reset(options={"level": "#####\n#@$.#\n#####"})
    _, reward, _, _, info = env.step("<answer>Up</answer>")
    assert reward == 0.0 and not info["action_is_effective"]
    _, reward, _, _, info = env.step("<answer>Jump</answer>")
    assert reward == -0.5 and not info["action_is_valid"]
    _, reward, terminated, _, _ = env.step("<answer>Right</answer>")
    assert terminated and reward == pytest.approx(1.0 + BOX_ON_TARGET + SOLVED_BONUS)


def test_progress_reward_is_off_by_default_and_refused_beyond_two_boxes():
    env = gym.make("llmgym/Sokoban-v1", step_penalty=0.0)
    env.reset(options={"level": OPEN_ROOM})
    _, reward, _, _, _ = env.step("<answer>Down</answer>")
    assert reward == 0.0
    with pytest.raises(InvalidOptionError, match="at most 2|up to 2"):
        SokobanEnv(dim_room=(10, 10), num_boxes=3, progress_reward=1.0)


def test_pushing_a_box_off_a_target_costs_a_point():
    env = SokobanEnv()
    env.reset(options={"level": "#######\n#@*   #\n#   $.#\n#######"})
    _, reward, terminated, _, info = env.step("<answer>Right</answer>")
    assert reward == pytest.approx(STEP_PENALTY - BOX_ON_TARGET)
    assert not terminated and info["action_is_effective"]
    assert env.level_xsb() == "#######\n# +$  #\n#   $.#\n#######"


def test_blocked_moves_are_valid_but_ineffective():
    env = SokobanEnv()
    env.reset(options={"level": "######\n#@$$.#\n#   .#\n######"})
    before = env.level_xsb()
    for action, feedback in [("Up", "wall"), ("Left", "wall"), ("Right", "cannot move")]:
        observation, reward, terminated, _, info = env.step(f"<answer>{action}</answer>")
        assert info["action_is_valid"] and not info["action_is_effective"]
        assert reward == pytest.approx(STEP_PENALTY) and not terminated
        assert feedback in observation
        assert env.level_xsb() == before


@pytest.mark.parametrize(
    "completion",
    [
        "<answer>Jump</answer>",
        "Up",
        "<answer></answer>",
        "<answer>Up || Left</answer>",
        "<answer>Upp</answer>",
    ],
)
def test_invalid_actions_change_nothing_and_cost_the_invalid_penalty(completion):
    env = SokobanEnv(invalid_penalty=-0.5)
    env.reset(options={"level": CORRIDOR})
    before, board = env.level_xsb(), env._observe()
    observation, reward, terminated, truncated, info = env.step(completion)
    assert reward == -0.5
    assert not info["action_is_valid"] and not info["action_is_effective"]
    assert (terminated, truncated) == (False, False)
    assert env.level_xsb() == before and env._observe() == board
    assert "Invalid action" in observation and board in observation


def test_several_actions_per_turn():
    env = SokobanEnv(max_actions_per_turn=3)
    assert "up to 3 actions" in env.reset(options={"level": CORRIDOR})[1]["system_prompt"]
    before = env.level_xsb()
    _, reward, _, _, info = env.step("<answer>Right || Jump</answer>")  # one unknown name: nothing moves
    assert not info["action_is_valid"] and env.level_xsb() == before and reward == env.invalid_penalty
    _, _, _, _, info = env.step("<answer>Up||Up||Up||Up</answer>")  # too many
    assert not info["action_is_valid"] and env.level_xsb() == before
    observation, reward, terminated, _, info = env.step("<answer>Up || Right || Right</answer>")
    assert info["action_is_valid"] and info["action_is_effective"] and terminated and info["success"]
    assert reward == pytest.approx(3 * STEP_PENALTY + BOX_ON_TARGET + SOLVED_BONUS)
    assert observation.startswith("Up: You walked into a wall")
    assert info["turn"] == 3


def test_moves_after_the_solving_one_are_not_played():
    env = SokobanEnv(max_actions_per_turn=3)
    env.reset(options={"level": "#####\n#@$.#\n#####"})
    _, reward, terminated, _, _ = env.step("<answer>Right || Left || Left</answer>")
    assert terminated and reward == pytest.approx(STEP_PENALTY + BOX_ON_TARGET + SOLVED_BONUS)
    assert env.level_xsb() == "#####\n# @*#\n#####"


def test_turn_limit_truncates():
    env = SokobanEnv(max_turns=2)
    env.reset(options={"level": CORRIDOR})
    assert env.step("<answer>Left</answer>")[3] is False
    _, _, terminated, truncated, _ = env.step("<answer>Left</answer>")
    assert truncated and not terminated


def test_solution_is_from_the_current_position():
    env = SokobanEnv()
    env.reset(options={"level": "#######\n#@ $ .#\n#######"})
    assert env.solution() == ["Right", "Right", "Right"]
    env.step("<answer>Right</answer>")
    assert env.solution() == ["Right", "Right"]


def test_observation_shows_the_board_with_underscore_floor():
    env = SokobanEnv()
    observation, info = env.reset(options={"level": "#####\n#+$ #\n# * #\n#$. #\n#####"})
    assert observation.splitlines()[1:] == ["#####", "#+$_#", "#_*_#", "#$._#", "#####"]
    assert "_ floor" in info["system_prompt"] and "<answer>" in info["system_prompt"]
    assert env.render() is None
    assert SokobanEnv(render_mode="ansi").render() == ""


def test_coordinates_all_writes_out_the_player_boxes_and_targets_and_follows_a_push():
    level = "#######\n#@ $ .#\n#  $. #\n#######"
    env = SokobanEnv(grid="spaced", coordinates="all")
    observation, _ = env.reset(options={"level": level})
    assert observation.splitlines()[-1] == (
        "You are at row 2, column 2; boxes at row 2, column 4 and row 3, column 4; "
        "targets at row 2, column 6 and row 3, column 5."
    )
    assert SokobanEnv(grid="spaced", coordinates=True).reset(options={"level": level})[0].splitlines()[-1] == (
        "You are at row 2, column 2."
    )
    env.step("<answer>Right</answer>")
    observation, *_ = env.step("<answer>Right</answer>")  # pushes the first box one cell right
    assert observation.splitlines()[-1].startswith("You are at row 2, column 4; boxes at row 2, column 5 and")
    assert env.unwrapped.state_key().endswith(observation.splitlines()[-1])  # the key is what is shown
    grid = encode_board(observation, "#_.$*@+", (4, 7))  # the classic wrappers still read the board
    assert grid[1, 3, "#_.$*@+".index("@")] == 1 and grid[1, 4, "#_.$*@+".index("$")] == 1


# ---------------------------------------------------------------------- seeding
def test_reset_reports_seed_and_optimal_steps_and_replays_from_the_seed():
    env = gym.make("llmgym/Sokoban-8x8-2box-v0").unwrapped
    _, info = env.reset(seed=5)
    level, steps = env.level(), info["optimal_steps"]
    assert isinstance(info["seed"], int) and steps == len(env.solution())
    regenerated = generate_level(np.random.Generator(np.random.PCG64(info["seed"])), (8, 8), 2)
    assert regenerated.xsb() == level


def test_solve_budget_options():
    assert gym.make("llmgym/Sokoban-v0", solve_budget=0).unwrapped.reset(seed=1)[1]["optimal_steps"] is None
    exact = gym.make("llmgym/Sokoban-10x10-3box-v0", solve_budget=None).unwrapped
    budgeted = gym.make("llmgym/Sokoban-10x10-3box-v0", solve_budget=1).unwrapped
    assert exact.reset(seed=2)[1]["optimal_steps"] == len(exact.solution())
    assert budgeted.reset(seed=2)[1]["optimal_steps"] is None
    assert budgeted.solution() == exact.solution()


_LEVELS_OF_SEED = """
import json, sys
import gymnasium as gym
import llmgym
levels = []
for env_id in sys.argv[1:]:
    env = gym.make(env_id).unwrapped
    _, info = env.reset(seed=2026)
    levels.append([env.level(), info["seed"], info["optimal_steps"]])
print(json.dumps(levels))
"""


def test_same_seed_gives_the_same_level_in_two_processes():
    outputs = [
        subprocess.run(
            [sys.executable, "-c", _LEVELS_OF_SEED, *SOKOBAN_IDS], capture_output=True, text=True, check=True
        ).stdout
        for _ in range(2)
    ]
    assert outputs[0] == outputs[1]
    here = []
    for env_id in SOKOBAN_IDS:
        env = gym.make(env_id).unwrapped
        _, info = env.reset(seed=2026)
        here.append([env.level(), info["seed"], info["optimal_steps"]])
    assert json.loads(outputs[0]) == here
    # Ids that share room size and box count (v0 and v1) share levels; the others differ.
    settings = {(gym.spec(env_id).kwargs["dim_room"], gym.spec(env_id).kwargs["num_boxes"]) for env_id in SOKOBAN_IDS}
    assert len({level for level, _, _ in here}) == len(settings)
