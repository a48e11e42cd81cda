"""Training recipes that ship with the package: ``llmgym-train --recipe NAME [key=value ...]``.

A recipe is one YAML file in this folder, ``NAME.yaml``: a whole training config (env mixture,
evaluation, algorithm settings) under ``config``, and what a reader needs to choose it:

    family: Sokoban                      # the env family it is made for
    env: llmgym/Sokoban-v1               # the id it trains and evaluates
    teacher: null                        # null: the env's own rewards; "solver": the solver shaped the loss
    description: "one line"
    curriculum: "start: solution ..."    # or null: how training levels differ from the eval levels
    config: {algo: grpo, train_envs: [...], eval_envs: [...], rollout: {...}, ...}

``config`` is what ``--config FILE.yaml`` would hold; :meth:`Recipe.load` builds it with
:func:`llmgym_train.config.load_config`, so overrides go on top of it and everything is checked
before a model loads. Recipes train under the train/test split: a recipe whose env options set
``split`` to anything but ``"train"`` is refused when it is read.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal, get_args

from llmgym.error import InvalidOptionError, UnknownOptionError, did_you_mean

#: What shaped the loss besides the env's rewards: ``solver`` (the exact solver's best moves), or None.
Teacher = Literal["solver"]
TEACHERS: tuple[str, ...] = get_args(Teacher)
#: A recipe file's suffix.
SUFFIX = ".yaml"


@dataclass(frozen=True)
class Recipe:
    """One recipe file, read and checked (see the module docstring for the fields)."""

    #: The file's name without ``.yaml``: what ``--recipe`` takes.
    name: str
    #: The env family it is made for (``FrozenLake``, ``Sokoban``, ``Math``, ``ToolUse``).
    family: str
    #: The registered id it trains and evaluates.
    env: str
    #: ``"solver"`` when the solver shaped the loss; None when only the env's rewards did.
    teacher: Teacher | None
    #: One line: what it trains and how.
    description: str
    #: How its training levels differ from the eval levels (a curriculum), or None.
    curriculum: str | None
    #: The training config as a nested mapping (the keys of :class:`llmgym_train.config.TrainConfig`).
    config: dict[str, Any]

    @property
    def algorithm(self) -> str:
        """The algorithm and, when not per episode, its credit (``loss.credit``): ``grpo``, ``grpo/gigpo``."""
        algo = self.config.get("algo", "grpo")
        credit = self.config.get("loss", {}).get("credit", "episode")
        return algo if credit == "episode" else f"{algo}/{credit}"

    def load(self, overrides: list[str] | tuple[str, ...] = (), values: dict[str, Any] | None = None,
             path: str | Path | None = None) -> Any:
        """The validated :class:`~llmgym_train.config.TrainConfig`: this recipe <- ``path`` <- ``overrides`` <- ``values``."""
        from llmgym_train.config import load_config

        return load_config(path, overrides, values, base=self.config)


_FIELDS = tuple(field.name for field in dataclasses.fields(Recipe) if field.name != "name")


def recipe_names() -> list[str]:
    """The names of the recipes that ship with the package, sorted."""
    folder = resources.files(__name__)
    return sorted(entry.name[: -len(SUFFIX)] for entry in folder.iterdir() if entry.name.endswith(SUFFIX))


def load_recipe(name: str) -> Recipe:
    """The recipe called ``name``; an unknown name raises :class:`UnknownOptionError` with a suggestion."""
    names = recipe_names()
    if name not in names:
        raise UnknownOptionError(
            f"Unknown recipe {name!r}.{did_you_mean(str(name), names)} Recipes: {', '.join(names)} "
            "(`llmgym-train --list-recipes` describes them)."
        )
    text = resources.files(__name__).joinpath(name + SUFFIX).read_text()
    return parse_recipe(name, text)


def all_recipes() -> list[Recipe]:
    """Every recipe of the package, in name order."""
    return [load_recipe(name) for name in recipe_names()]


def parse_recipe(name: str, text: str) -> Recipe:
    """The recipe ``name`` from its YAML ``text``, its fields checked (the config itself is checked by :meth:`Recipe.load`)."""
    import yaml

    document = yaml.safe_load(text)
    if not isinstance(document, dict):
        raise InvalidOptionError(f"Recipe {name!r} must be a mapping with {', '.join(_FIELDS)}; got {document!r:.80}.")
    for key in document:
        if key not in _FIELDS:
            raise UnknownOptionError(
                f"Unknown key {key!r} in recipe {name!r}.{did_you_mean(str(key), _FIELDS)} A recipe has: {', '.join(_FIELDS)}."
            )
    missing = [key for key in _FIELDS if key not in document]
    if missing:
        raise InvalidOptionError(f"Recipe {name!r} lacks {', '.join(missing)}; a recipe has: {', '.join(_FIELDS)}.")
    recipe = Recipe(name=name, **{key: document[key] for key in _FIELDS})
    _check_recipe(recipe)
    return recipe


def _check_recipe(recipe: Recipe) -> None:
    """Metadata of the promised types; every env it plays is its id, under the train/test split."""
    name = recipe.name
    if recipe.teacher is not None and recipe.teacher not in TEACHERS:
        raise InvalidOptionError(
            f"Recipe {name!r}: teacher must be null (the env's rewards only) or one of {', '.join(map(repr, TEACHERS))}; "
            f"got {recipe.teacher!r}."
        )
    for key in ("family", "env", "description"):
        value = getattr(recipe, key)
        if not isinstance(value, str) or not value.strip() or "\n" in value:
            raise InvalidOptionError(f"Recipe {name!r}: {key} must be one non-empty line of text; got {value!r}.")
    if not isinstance(recipe.config, dict) or not recipe.config.get("train_envs"):
        raise InvalidOptionError(f"Recipe {name!r}: config must be a mapping with train_envs (and eval_envs).")
    for section in ("train_envs", "eval_envs"):
        for entry in recipe.config.get(section, []):
            _check_entry(name, section, entry, recipe.env)


def _check_entry(name: str, section: str, entry: Any, env_id: str) -> None:
    if not isinstance(entry, dict) or entry.get("id") != env_id:
        raise InvalidOptionError(
            f"Recipe {name!r}: every entry of {section} is a mapping with id {env_id!r} (the recipe's env); got {entry!r}."
        )
    split = (entry.get("options") or {}).get("split", "train")
    if split != "train":
        raise InvalidOptionError(
            f"Recipe {name!r}: {section} entry {entry.get('name') or env_id!r} sets split={split!r}; recipes train under "
            "the train/test split (split='train', every env's default), so that no eval level is trained on. Drop the option."
        )


def recipe_table(recipes: list[Recipe] | None = None) -> str:
    """The recipes as a plain-text table: name, env, algorithm, teacher, description."""
    rows = [("name", "env", "algorithm", "teacher", "description")]
    for recipe in all_recipes() if recipes is None else recipes:
        rows.append((recipe.name, recipe.env, recipe.algorithm, recipe.teacher or "-", recipe.description))
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    lines = ["  ".join([*(cell.ljust(width) for cell, width in zip(row, widths)), row[-1]]) for row in rows]
    lines.insert(1, "  ".join("-" * width for width in [*widths, len(rows[0][-1])]))
    return "\n".join(lines)
