"""llmgym envs as TRL ``environment_factory`` classes, for ``GRPOTrainer``.

    from trl import GRPOConfig, GRPOTrainer
    from llmgym.integrations.trl import environment_factory, seed_dataset

    trainer = GRPOTrainer(
        model=model, args=GRPOConfig(num_generations=4, ...),
        train_dataset=seed_dataset("llmgym/Sokoban-v0", num_levels=256),
        environment_factory=environment_factory("llmgym/Sokoban-v0"),
    )

TRL builds one instance per rollout, calls ``reset(**row)`` with the dataset row (its ``seed``
picks the level, so the ``num_generations`` rollouts of a GRPO group share it), exposes the
public methods as the model's tools, and scores the rollout with ``get_reward()``, the sum of
the env's rewards over the moves the model made.

The tools fit the env: FrozenLake and Sokoban get ``move(direction)``; math gets
``answer(answer)``; tool use gets the env's own tools (``python``, ``calculator``, ``search``)
and ``answer``. Every tool call is one env step.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any, Literal

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator

from llmgym.error import DependencyNotInstalled, InvalidOptionError

ENDED = "The episode has ended; no further moves count."


def accepts_split(env_id: str) -> bool:
    """Whether ``env_id``'s constructor takes ``split=`` (train/eval levels kept apart)."""
    entry_point = gym.spec(env_id).entry_point
    creator = load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
    target = creator.__init__ if isinstance(creator, type) else creator
    return "split" in inspect.signature(target).parameters


def make_training_env(env_id: str, options: dict[str, Any] | None = None) -> gym.Env:
    """``gym.make(env_id, **options)`` on the train split where the env has one.

    Training draws exclude eval levels: with ``split="train"`` a seed never yields a level of the
    id's frozen eval set (compared by content), so GRPO never trains on what it is scored on.
    """
    kwargs = dict(options or {})
    if accepts_split(env_id):
        kwargs.setdefault("split", "train")
    return gym.make(env_id, **kwargs)


def _tool(
    name: str, doc: str, parameter: str, annotation: Any, play: Callable[[Any, str], str]
) -> Callable[..., str]:
    """A method ``name(self, <parameter>: annotation) -> str``; TRL reads its docstring as the tool schema."""

    def method(self: Any, *args: Any, **kwargs: Any) -> str:
        bound = signature.bind(self, *args, **kwargs)
        return play(self, bound.arguments[parameter])

    signature = inspect.Signature(
        [
            inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            inspect.Parameter(parameter, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=annotation),
        ],
        return_annotation=str,
    )
    method.__name__ = method.__qualname__ = name
    method.__doc__ = doc
    method.__signature__ = signature  # type: ignore[attr-defined]
    method.__annotations__ = {parameter: annotation, "return": str}
    return method


class _Episode:
    """What every generated class shares: the env, the episode's reward, reset and get_reward."""

    env_id: str
    options: dict[str, Any]

    def __init__(self) -> None:
        self._env = make_training_env(self.env_id, self.options)
        self._total_reward = 0.0
        self._done = False
        self.transcript: list[dict[str, Any]] = []

    # TRL passes every column of the dataset row; ``seed`` is the one that matters.
    def reset(self, seed: int | None = None, **row: Any) -> str:
        observation, info = self._env.reset(seed=None if seed is None else int(seed))
        self._total_reward, self._done = 0.0, False
        self.transcript = [{"observation": observation, "seed": seed}]
        return observation

    def get_reward(self) -> float:
        return self._total_reward

    def _play(self, completion: str) -> str:
        if self._done:
            return ENDED
        observation, reward, terminated, truncated, info = self._env.step(completion)
        self._total_reward += float(reward)
        self._done = bool(terminated or truncated)
        self.transcript.append(
            {
                "action": completion,
                "observation": observation,
                "reward": float(reward),
                "terminated": terminated,
                "truncated": truncated,
                "success": bool(info.get("success")),
            }
        )
        return observation + (f"\n{ENDED}" if self._done else "")


def _tools_for(env: gym.Env) -> dict[str, Callable[..., str]]:
    unwrapped = env.unwrapped
    env_tools = getattr(unwrapped, "tools", None)
    if isinstance(env_tools, dict):  # tool use: the env's own tools, each call one step
        methods = {}
        for schema in unwrapped.tool_schemas():
            function = schema["function"]
            ((parameter, spec),) = function["parameters"]["properties"].items()
            doc = f"{function['description']}\n\nArgs:\n    {parameter}: {spec.get('description', parameter)}"

            def play(self: Any, value: str, tool_name: str = function["name"], key: str = parameter) -> str:
                call = json.dumps({"name": tool_name, "arguments": {key: value}})
                return self._play(f"<tool_call>{call}</tool_call>")

            methods[function["name"]] = _tool(function["name"], doc, parameter, str, play)
        methods["answer"] = _tool(
            "answer",
            "Give the final answer to the question; this ends the episode.\n\nArgs:\n"
            "    answer: The final answer, exactly as asked for.",
            "answer",
            str,
            lambda self, value: self._play(f"<answer>{value}</answer>"),
        )
        return methods
    names = getattr(unwrapped, "action_names", None)
    if names:  # grid games: one move per call
        listed = ", ".join(names)
        return {
            "move": _tool(
                "move",
                "Make one move in the puzzle and see the new state.\n\n"
                f"Args:\n    direction: One of {listed}.",
                "direction",
                Literal[tuple(names)],
                lambda self, value: self._play(f"<answer>{value}</answer>"),
            )
        }
    return {
        "answer": _tool(  # math and other single-answer tasks
            "answer",
            "Submit the final answer to the problem.\n\nArgs:\n    answer: The final answer, e.g. 42 or 3/4.",
            "answer",
            str,
            lambda self, value: self._play(f"<answer>{value}</answer>"),
        )
    }


def environment_factory(env_id: str, *, options: dict[str, Any] | None = None) -> type:
    """A class for ``GRPOTrainer(environment_factory=...)`` playing ``env_id`` (made with ``options``).

    Instances have ``reset(seed=..., **row)``, ``get_reward()``, a ``transcript`` of the episode,
    and the tools that fit the env (see the module docstring).
    """
    if env_id not in gym.registry:
        import llmgym  # noqa: F401 - registers the llmgym ids

    if env_id not in gym.registry:
        from llmgym.error import did_you_mean

        raise InvalidOptionError(f"Unknown env id {env_id!r}.{did_you_mean(env_id, gym.registry)}")
    probe = make_training_env(env_id, options)
    tools = _tools_for(probe)
    probe.close()
    name = env_id.split("/")[-1].replace("-", "_") + "_Env"
    return type(
        name,
        (_Episode,),
        {
            "env_id": env_id,
            "options": dict(options or {}),
            **tools,
            "__doc__": f"{env_id} for TRL's environment_factory; tools: {', '.join(tools)}.",
        },
    )


def seed_dataset(
    env_id: str, num_levels: int, *, start_seed: int = 0, options: dict[str, Any] | None = None
) -> Any:
    """A ``datasets.Dataset`` of ``num_levels`` rows: ``prompt`` (the env's system prompt and how to use
    the tools; TRL appends the first observation to the user turn) and ``seed`` (the level)."""
    try:
        from datasets import Dataset
    except ImportError as missing:
        raise DependencyNotInstalled(
            f"seed_dataset needs the datasets package ({missing}). "
            "Install it with: pip install 'llmgym[integrations]'"
        ) from missing
    if num_levels < 1:
        raise InvalidOptionError(f"num_levels must be >= 1, got {num_levels}.")
    env = make_training_env(env_id, options)
    _, info = env.reset(seed=start_seed)
    tools = ", ".join(_tools_for(env))
    env.close()
    system = f"{info.get('system_prompt', '')}\nAct only through your tools ({tools}): each call is one step."
    prompt = [{"role": "system", "content": system.strip()}, {"role": "user", "content": ""}]
    seeds = list(range(start_seed, start_seed + num_levels))
    return Dataset.from_dict({"prompt": [prompt] * num_levels, "seed": seeds})
