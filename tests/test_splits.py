"""The train/test split: training draws never hold an eval level, compared by content (llmgym.splits)."""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest

import llmgym
from benchmarks.learning_curve import PRESETS, config_overrides
from llmgym.error import InvalidOptionError, TrainOnTestWarning
from llmgym.eval_sets import EVAL_SET_VERSION, eval_set_size, has_eval_set, load_eval_set
from llmgym.splits import held_out_keys, level_key, make_unsplit
from llmgym_train.config import load_config
from llmgym_train.planner import eval_levels_trained_on

EVAL_IDS = [env_id for env_id in llmgym.env_ids() if has_eval_set(env_id)]
TRAINING_DRAWS = 20_000
#: Ids whose reset runs a search (the exact Sokoban solver, ConnectFour's minimax opening): their
#: 20,000 draws skip that search where an option allows (solve_budget=1 changes no level), or
#: take 4,000 draws. Every id also replays the eval levels' own seeds, where a miss would show first.
SLOW_RESETS = {"llmgym/Sokoban-8x8-2box-v0": {"solve_budget": 1}, "llmgym/Sokoban-10x10-3box-v0": {"solve_budget": 1}}
FEWER_DRAWS = {"llmgym/ConnectFour-vs-minimax-v0": 4_000, "llmgym/ToolUse-v0": 4_000, "llmgym/ToolUse-Python-v0": 4_000,
               "llmgym/Sokoban-8x8-2box-v0": 4_000, "llmgym/Sokoban-10x10-3box-v0": 4_000}


def _keys(env_id: str) -> set[str]:
    return {level_key(record["level"]) for record in load_eval_set(env_id)}


@pytest.mark.parametrize("env_id", EVAL_IDS)
def test_every_eval_set_holds_distinct_levels(env_id):
    records = load_eval_set(env_id)
    assert len(_keys(env_id)) == len(records) == eval_set_size(env_id)
    assert [record["index"] for record in records] == list(range(len(records)))


@pytest.mark.parametrize("env_id", EVAL_IDS)
def test_training_draws_never_hold_an_eval_level(env_id):
    eval_keys = _keys(env_id)
    env = gym.make(env_id, **SLOW_RESETS.get(env_id, {})).unwrapped
    # The eval levels' own seeds first: without the split each gives its eval level.
    for record in load_eval_set(env_id)[:50]:
        _, info = env.reset(seed=record["seed"])
        assert info["split"] == "train"
        assert env.split_key() not in eval_keys, f"seed {record['seed']} drew eval level {record['index']}"
    drawn = set()
    for seed in range(FEWER_DRAWS.get(env_id, TRAINING_DRAWS)):
        env.reset(seed=seed)
        drawn.add(env.split_key())
    assert not drawn & eval_keys
    env.close()


@pytest.mark.parametrize("env_id", ["llmgym/FrozenLake-v1", "llmgym/Sokoban-v1", "llmgym/Math-Easy-v0"])
def test_without_the_split_the_same_seeds_do_draw_eval_levels(env_id):
    """The test above could not fail if the level spaces were too large to repeat: here they do repeat."""
    eval_keys = _keys(env_id)
    env = make_unsplit(gym.make, env_id).unwrapped
    hits = 0
    for seed in range(5_000):
        env.reset(seed=seed)
        hits += env.split_key() in eval_keys
    assert hits > 20


def test_a_seed_still_gives_one_level_and_eval_levels_stay_playable_on_purpose():
    env = gym.make("llmgym/FrozenLake-v1")
    first = env.reset(seed=7)
    assert env.reset(seed=7) == first
    record = load_eval_set("llmgym/FrozenLake-v1")[0]
    observation, info = env.reset(options={"level": record["level"]})
    assert env.unwrapped.level() == record["level"] and info["split"] == "train"


def test_opting_out_warns_and_says_so_in_info():
    with pytest.warns(TrainOnTestWarning, match="split='all'"):
        env = gym.make("llmgym/Sokoban-v1", split="all")
    assert env.reset(seed=0)[1]["split"] == "all"
    with pytest.raises(InvalidOptionError, match="split must be one of 'train', 'all'"):
        gym.make("llmgym/Sokoban-v1", split="test")


def test_start_on_a_solution_is_held_out_by_the_room_it_comes_from():
    """Positions along an eval room's solution are that room: compared by the room, not the position."""
    eval_keys = _keys("llmgym/Sokoban-v1")
    env = gym.make("llmgym/Sokoban-v1", start="solution").unwrapped
    rooms = set()
    for seed in range(3_000):
        env.reset(seed=seed)
        rooms.add(env.split_key())
        assert env.split_key() == level_key(env._room.xsb())
    assert not rooms & eval_keys


def test_a_curriculum_of_short_rooms_holds_out_the_full_rooms_eval_set_too():
    env = gym.make("llmgym/Sokoban-v1", max_level_moves=4).unwrapped
    env.reset(seed=0)
    assert env._held_out == _keys("llmgym/Sokoban-v1")
    evaluated = gym.make("llmgym/Sokoban-v1", max_level_moves=4, held_out_levels=50).unwrapped
    evaluated.reset(seed=0)
    assert len(evaluated._held_out - _keys("llmgym/Sokoban-v1")) == 50


def test_a_space_without_a_frozen_set_holds_out_what_is_asked_and_refuses_to_hold_out_all_of_it():
    held_out = gym.make("llmgym/FrozenLake-v1", size=3, held_out_levels=24).unwrapped
    keys = held_out_keys(held_out.level_space(), 24)
    assert len(keys) == 24
    assert not {held_out.reset(seed=seed) and held_out.split_key() for seed in range(2_000)} & keys
    env = gym.make("llmgym/FrozenLake-v1", size=3, held_out_levels=200)
    with pytest.raises(InvalidOptionError, match="gave only 51 distinct levels"):
        env.reset(seed=0)


def test_the_trainer_holds_out_the_seed_levels_it_evaluates_a_space_on():
    from llmgym_train.planner import EnvSpec, hold_out_evaluated_levels

    lakes = {"size": 3, "frozen_probability": 0.65}
    train = [EnvSpec("llmgym/FrozenLake-v1", options={**lakes, "max_turns": 6}, name="a"),
             EnvSpec("llmgym/FrozenLake-v1", options={"size": 2}, name="b"),
             EnvSpec("llmgym/FrozenLake-v1", name="c")]
    evaluation = [EnvSpec("llmgym/FrozenLake-v1", options=lakes)]
    hold_out_evaluated_levels(train, evaluation, levels=16, use_eval_set=False)
    assert [spec.options.get("held_out_levels") for spec in train] == [16, None, None]
    counts = eval_levels_trained_on(train, 1, 0, 200, evaluation, 16, use_eval_set=False)
    assert counts == {"llmgym/FrozenLake-v1": 0}


@pytest.mark.parametrize("preset", ["frozenlake-v1", "sokoban-v1"])
def test_a_300_step_run_of_each_preset_draws_none_of_its_eval_levels(preset):
    env_id = {"frozenlake-v1": "llmgym/FrozenLake-v1", "sokoban-v1": "llmgym/Sokoban-v1"}[preset]
    config = load_config(overrides=config_overrides(env_id, PRESETS[preset], seed=0, minutes=60, output="/tmp/x"))
    counts = eval_levels_trained_on(config.train_envs, config.rollout.group_size, config.seed, 300,
                                    config.validation_envs, 200, config.eval.use_eval_set)
    assert counts == {spec.label: 0 for spec in config.validation_envs}
    # The same plan without the split trains on eval levels: the count is real.
    for spec in config.train_envs:
        spec.options.pop("held_out_levels", None)
        spec.options["split"] = "all"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TrainOnTestWarning)
        leaked = eval_levels_trained_on(config.train_envs, config.rollout.group_size, config.seed, 300,
                                        config.validation_envs, 200, config.eval.use_eval_set)
    assert sum(leaked.values()) > 10


def test_the_version_one_eval_sets_stay_readable_for_old_results():
    old = load_eval_set("llmgym/FrozenLake-v1", version=1)
    assert len(old) == 200 and len({level_key(record["level"]) for record in old}) < 200
    assert [record["seed"] for record in old] == list(range(1_000_000, 1_000_200))
    assert EVAL_SET_VERSION == 2
