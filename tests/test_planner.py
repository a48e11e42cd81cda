"""The episode planner: its seeds are the trainer's from before the planner existed, bit for bit.

The pinned numbers were computed with the trainer's own ``_seeds`` and ``eval_starts`` before
they moved here: a resumed or repeated seeded run must draw the same levels as it did then.
"""

from __future__ import annotations

import pytest

from llmgym.error import InvalidOptionError
from llmgym_train.config import EnvSpec
from llmgym_train.planner import group_episodes, plan_eval, plan_groups, sampling_seed, step_seeds, update_seed


def test_step_seeds_sampling_and_update_seeds_are_pinned() -> None:
    assert [int(x) for x in step_seeds(0, 0, 0, 3)] == [6569863346532939967, 3167266501525879370, 2361836109651742017]
    assert [int(x) for x in step_seeds(3, 17, 1, 2)] == [3376504804895725084, 2961206871954096295]
    assert sampling_seed(5, 2) == 1922003681
    assert update_seed(5, 2) == 318889613635596090


def test_a_mixture_plans_the_trainers_groups_and_levels() -> None:
    mixture = [EnvSpec("llmgym/FrozenLake-v0", n_groups=2), EnvSpec("llmgym/Sokoban-v0", name="sok")]
    plan = plan_groups(mixture, group_size=2, seed=7, step=3)
    assert [(s.episode_index, s.env_id, s.seed, s.group_id) for s in plan.starts] == [
        (0, "llmgym/FrozenLake-v0", 5061563556724077661, 0),
        (1, "llmgym/FrozenLake-v0", 5061563556724077661, 0),
        (2, "llmgym/FrozenLake-v0", 210118453951307734, 1),
        (3, "llmgym/FrozenLake-v0", 210118453951307734, 1),
        (4, "llmgym/Sokoban-v0", 4107299323832339242, 2),
        (5, "llmgym/Sokoban-v0", 4107299323832339242, 2),
    ]
    assert plan.labels == ["llmgym/FrozenLake-v0"] * 4 + ["sok"] * 2
    assert group_episodes([EnvSpec("llmgym/FrozenLake-v0", 2), EnvSpec("llmgym/Sokoban-v0")], 2, 7, 3) == plan.starts
    with pytest.raises(InvalidOptionError, match="group_size must be >= 1"):
        plan_groups(mixture, group_size=0, seed=0)


def test_evaluation_plays_the_frozen_levels_each_its_own_group() -> None:
    plan = plan_eval([EnvSpec("llmgym/FrozenLake-v0"), EnvSpec("llmgym/Math-v0", name="m")], 2)
    assert [(s.episode_index, s.env_id, s.seed, s.group_id) for s in plan.starts] == [
        (0, "llmgym/FrozenLake-v0", 1000000, 0), (1, "llmgym/FrozenLake-v0", 1000001, 1),
        (2, "llmgym/Math-v0", 1000000, 2), (3, "llmgym/Math-v0", 1000001, 3),
    ]
    assert plan.starts[0].reset_options == {"level": ["SFFF", "FHFH", "FFFF", "FFFG"]}
    assert plan.starts[3].reset_options["level"]["question"] == "Solve for x: 5x + 12 = -3x - 20. Give the exact value of x."
    assert plan.labels == ["llmgym/FrozenLake-v0"] * 2 + ["m"] * 2
    # Without the frozen set: the first distinct levels the eval seeds give under the env's options.
    seeds_only = plan_eval([EnvSpec("llmgym/FrozenLake-v0", options={"size": 3})], 3, use_eval_set=False)
    levels = [s.reset_options["level"] for s in seeds_only.starts]
    assert len({tuple(level) for level in levels}) == 3 and all(len(level) == 3 for level in levels)
    assert [s.seed for s in seeds_only.starts][0] == 1000000
    assert all(s.seed >= 1000000 and s.env_kwargs == {"size": 3} for s in seeds_only.starts)
