"""The recipes that ship with the package: each loads, each trains a step, and the CLI finds them by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmgym.error import InvalidOptionError, UnknownOptionError
from llmgym_train.cli import main
from llmgym_train.planner import EnvSpec, curriculum_of, teacher_of
from llmgym_train.recipes import Recipe, load_recipe, parse_recipe, recipe_names

RECIPES = recipe_names()
#: The learning-curve presets before they moved into the package, and the env-reward recipes after them.
MOVED = {"frozenlake", "frozenlake-v1", "sokoban", "sokoban-v1"}
ENV_REWARD = {"sokoban-v1-grpo": "llmgym/Sokoban-v1", "math-easy-grpo": "llmgym/Math-Easy-v0",
              "tool-calculator-grpo": "llmgym/ToolUse-Calculator-v0"}


def test_the_package_holds_the_moved_presets_and_one_env_reward_recipe_per_family() -> None:
    assert MOVED | set(ENV_REWARD) <= set(RECIPES)
    for name, env_id in ENV_REWARD.items():
        assert load_recipe(name).env == env_id and load_recipe(name).teacher is None
    assert load_recipe("sokoban-v1").teacher == "solver"


@pytest.mark.parametrize("name", RECIPES)
def test_every_recipe_loads_and_trains_its_own_env_under_the_split(name: str) -> None:
    recipe = load_recipe(name)
    config = recipe.load()
    assert {spec.id for spec in [*config.train_envs, *config.validation_envs]} == {recipe.env}
    assert all(spec.options.get("split", "train") == "train" for spec in [*config.train_envs, *config.eval_envs])
    assert config.eval.use_eval_set and not config.eval.disabled, "recipes are measured on the frozen eval set"
    assert recipe.algorithm.startswith(config.algo)


@pytest.mark.parametrize("name", sorted(ENV_REWARD))
def test_env_reward_recipes_keep_the_solver_out_of_the_loss(name: str) -> None:
    config = load_recipe(name).load()
    # Lookahead branches may serve as the baseline of the sampled move, never as targets of their own.
    assert config.loss.credit != "lookahead" or config.loss.lookahead_choices == "sampled"
    assert all(not spec.options.get("progress_reward") for spec in config.train_envs)


@pytest.mark.parametrize("name", RECIPES)
def test_each_recipe_declares_the_teacher_its_training_envs_have(name: str) -> None:
    recipe = load_recipe(name)
    assert teacher_of(recipe.load().train_envs) == recipe.teacher


def test_the_teacher_comes_from_the_training_envs_options() -> None:
    def with_progress_reward(name: str, weight: float) -> Any:
        envs = [{**env, "options": {**env["options"], "progress_reward": weight}}
                for env in load_recipe(name).config["train_envs"]]
        return load_recipe(name).load(values={"train_envs": envs}).train_envs

    assert teacher_of(with_progress_reward("sokoban-v1-grpo", 1.0)) == "solver"
    assert teacher_of(with_progress_reward("sokoban-v1", 0.0)) is None


def test_the_curriculum_comes_from_the_training_envs_options_and_is_no_teacher() -> None:
    near = EnvSpec("llmgym/Sokoban-v1", name="near", options={"start": "solution", "max_moves_left": 5})
    short = EnvSpec("llmgym/Sokoban-v0", options={"max_level_moves": 3})
    evaluated = [EnvSpec("llmgym/Sokoban-v1"), EnvSpec("llmgym/Sokoban-v0")]
    assert curriculum_of([near, short], evaluated) == (
        "near: starts on the solver's fewest-moves solution, 1 to 5 moves from the end"
        " | llmgym/Sokoban-v0: max_level_moves=3")
    assert teacher_of([near, short]) is None
    lakes = [EnvSpec("llmgym/FrozenLake-v1", name="lake-2x2", options={"size": 2}), EnvSpec("llmgym/FrozenLake-v1")]
    assert curriculum_of(lakes, [EnvSpec("llmgym/FrozenLake-v1")]) == "lake-2x2: size=2"
    assert curriculum_of([EnvSpec("llmgym/Sokoban-v1"), EnvSpec("llmgym/FrozenLake-v1")], evaluated) is None


@pytest.mark.parametrize("name", RECIPES)
def test_each_recipe_names_a_curriculum_where_its_training_envs_have_one(name: str) -> None:
    recipe = load_recipe(name)
    config = recipe.load()
    assert (curriculum_of(config.train_envs, config.validation_envs) is None) == (recipe.curriculum is None)


def test_a_recipe_that_trains_on_the_test_split_is_refused() -> None:
    text = _recipe_text(options={"split": "all"})
    with pytest.raises(InvalidOptionError, match="sets split='all'; recipes train under the train/test split"):
        parse_recipe("leaky", text)
    assert parse_recipe("fine", _recipe_text(options={})).teacher is None


def test_recipe_fields_are_checked_with_suggestions() -> None:
    with pytest.raises(UnknownOptionError, match="Unknown key 'teachr' in recipe 'typo'. Did you mean 'teacher'"):
        parse_recipe("typo", _recipe_text(options={}).replace("teacher:", "teachr:"))
    with pytest.raises(InvalidOptionError, match="teacher must be null"):
        parse_recipe("bad", _recipe_text(options={}).replace("teacher: null", "teacher: oracle"))


def _recipe_text(options: dict[str, Any]) -> str:
    entry = {"id": "llmgym/Sokoban-v0", "n_groups": 1, "options": options}
    return (
        "family: Sokoban\nenv: llmgym/Sokoban-v0\nteacher: null\ndescription: a test\ncurriculum: null\n"
        f"config:\n  train_envs: [{json.dumps(entry)}]\n"
    )


# ---------------------------------------------------------------------- the command line
def test_list_recipes_prints_every_recipe_with_env_algorithm_and_teacher(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--list-recipes"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["name", "env", "algorithm", "teacher", "description"]
    rows = {line.split()[0]: line for line in lines[2:]}
    assert sorted(rows) == RECIPES
    assert "llmgym/Sokoban-v1" in rows["sokoban-v1"] and "lookahead" in rows["sokoban-v1"]
    assert rows["sokoban-v1"].split()[3] == "solver" and rows["sokoban-v1-grpo"].split()[3] == "-"


def test_an_unknown_recipe_name_fails_with_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--recipe", "sokoban-v1-grp", "--steps", "1"]) == 2
    error = capsys.readouterr().err
    assert "Unknown recipe 'sokoban-v1-grp'. Did you mean 'sokoban-v1-grpo'?" in error
    assert "--list-recipes" in error
    assert main(["--recipe", "frozenlake", "--resume"]) == 2
    assert "drop --recipe" in capsys.readouterr().err


def test_recipe_flags_and_overrides_go_on_top_of_the_recipe(tmp_path: Path) -> None:
    from llmgym_train.cli import build_parser, config_from_args

    extra = tmp_path / "extra.yaml"
    extra.write_text("optim: {lr: 3.0e-5}\n")
    args = build_parser().parse_args(
        ["--recipe", "frozenlake-v1", "--config", str(extra), "--seed", "3", "rollout.temperature=1.5"]
    )
    config = config_from_args(args)
    assert (config.seed, config.optim.lr, config.rollout.temperature) == (3, 3e-5, 1.5)
    assert config.optim.lr_schedule == "cosine", "the file's optim section merges into the recipe's"
    assert config.rollout.choices == ["Left", "Down", "Right", "Up"]


# ---------------------------------------------------------------------- one step on the tiny model
def tiny_overrides(recipe: Recipe, model: Path, output: Path, steps: int = 1) -> list[str]:
    """The recipe on the tiny test model: one group per env, short replies, no evaluation, the hf backend
    (vLLM for a recipe that constrains its replies, which only vLLM enforces)."""
    rollout = recipe.config.get("rollout", {})
    train = [{**entry, "n_groups": 1} for entry in recipe.config["train_envs"]]
    backend = "vllm" if constrains_replies(recipe) else "hf"
    return [
        f"model={model}", f"output={output}", f"steps={steps}", f"train_envs={json.dumps(train)}",
        f"rollout.backend={backend}", f"rollout.group_size={min(rollout.get('group_size', 8), 2)}",
        f"rollout.max_new_tokens={min(rollout.get('max_new_tokens', 64), 8)}", "rollout.max_model_len=2048",
        "optim.micro_batch_size=64", "update.micro_batch_tokens=0", "model_options.gradient_checkpointing=false",
        "eval.disabled=true", "checkpoint_every=0", "max_minutes=0", "progress=false", "threads=1",
    ]


def tiny_model_for(recipe: Recipe, folder: Path, seed: int = 0, words: tuple[str, ...] = ()) -> Path:
    """The tiny model, with the recipe's choices (if any) as one token each, as a real tokenizer has them (and
    heads vLLM's CPU attention takes, for a recipe that generates with vLLM here)."""
    from llmgym_train.testing import save_tiny_model

    choices = recipe.config.get("rollout", {}).get("choices", [])
    heads = {"num_heads": 2} if constrains_replies(recipe) else {}
    return save_tiny_model(folder, seed=seed, words=(*choices, *words), **heads)


def constrains_replies(recipe: Recipe) -> bool:
    """Whether the recipe constrains its replies (``rollout.constrain``): only the vllm backend can."""
    return recipe.config.get("rollout", {}).get("constrain", "none") != "none"


@pytest.mark.parametrize("name", RECIPES)
def test_every_recipe_trains_a_step_on_the_tiny_model(tmp_path: Path, name: str) -> None:
    from llmgym_train.trainer import Trainer

    recipe = load_recipe(name)
    config = recipe.load(tiny_overrides(recipe, tiny_model_for(recipe, tmp_path / "model"), tmp_path / "run"))
    with Trainer(config) as trainer:
        summary = trainer.train()
    assert summary.completed and summary.step == 1
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [record for record in records if record["kind"] == "train"]
    assert len(train) == 1 and train[0]["samples"] > 0 and "success_rate" in train[0]
