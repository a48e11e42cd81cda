"""llmgym envs as verifiers environments, evaluated on their frozen eval sets.

    import verifiers.v1 as vf
    from llmgym.integrations.verifiers import load_environment

    env = load_environment(env_id="llmgym/Sokoban-v0", num_levels=50)

or from the command line, against any OpenAI-compatible endpoint, with ``vf-eval``'s own
options (``python -m llmgym.integrations.vf_eval`` is ``vf-eval`` with this taskset known as
``llmgym``: verifiers 0.4 does not import a dotted module path as a taskset id)::

    python -m llmgym.integrations.vf_eval llmgym --env.taskset.env-id llmgym/Sokoban-v0 -n 50 \\
        --model my-model --client.base-url http://127.0.0.1:8000/v1 --client.api-key-var OPENAI_API_KEY

verifiers 0.4 is its ``verifiers.v1`` API: a :class:`LlmgymTaskset` yields one task per eval level
(``llmgym.eval_sets.load_eval_set(env_id)``), and :class:`LlmgymEnv` plays it: the env's first
observation opens the exchange, every model reply is one ``env.step``, the next observation is
the next user turn, and the episode's end ends the exchange. The rollout's reward is the sum
of the env's rewards (``env_reward``); ``info["success"]`` is recorded beside it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import gymnasium as gym

import llmgym  # noqa: F401 - registers the ids
from llmgym.error import DependencyNotInstalled
from llmgym.eval_sets import load_eval_set

try:
    import verifiers.v1 as vf
except ImportError as missing:  # pragma: no cover - depends on the environment
    raise DependencyNotInstalled(
        f"llmgym.integrations.verifiers needs verifiers 0.4 ({missing}). "
        "Install it with: pip install 'llmgym[integrations]'"
    ) from missing


__all__ = ["LlmgymEnv", "LlmgymTaskset", "load_environment"]

#: The plugin id verifiers knows this taskset by. verifiers 0.4 imports a plugin id as a top-level
#: module or as ``verifiers.v1.tasksets.<id>``, never as a dotted path, so this module is also
#: registered under that name when imported.
PLUGIN_ID = "llmgym"
sys.modules.setdefault(f"verifiers.v1.tasksets.{PLUGIN_ID}", sys.modules[__name__])


class LlmgymTasksetConfig(vf.TasksetConfig):
    env_id: str = "llmgym/FrozenLake-v0"
    """The llmgym id whose frozen eval set is played."""
    options: dict[str, Any] = {}
    """Options to ``gym.make(env_id, **options)``."""
    num_levels: int | None = None
    """Play the first ``num_levels`` eval levels (None: all 200)."""


class LlmgymData(vf.TaskData):
    info: dict
    """The env id, its options, and the eval level (what ``reset(options={"level": ...})`` takes)."""


class LlmgymTask(vf.Task[LlmgymData, vf.State, vf.TaskConfig]):
    pass


class LlmgymTaskset(vf.Taskset[LlmgymTask, LlmgymTasksetConfig]):
    def load(self) -> Iterator[LlmgymTask]:
        config = self.config
        records = load_eval_set(config.env_id)[: config.num_levels]
        env = gym.make(config.env_id, **config.options)
        for record in records:
            _, info = env.reset(options={"level": record["level"]})
            yield LlmgymTask(
                LlmgymData(
                    name=f"{config.env_id}#{record['index']}",
                    prompt=None,  # the env speaks first: its observation opens the exchange
                    system_prompt=info.get("system_prompt"),
                    info={
                        "env_id": config.env_id,
                        "options": config.options,
                        "level": record["level"],
                        "index": record["index"],
                        "optimal_steps": record.get("optimal_steps"),
                    },
                ),
                config.task,
            )
        env.close()


class LlmgymEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig.model_validate(
        {"harness": {"id": "null"}, "runtime": {"type": "subprocess"}}
    )
    """The model's seat: verifiers' plain chat program (no tools, no sandbox), run on this machine."""


class LlmgymEnv(vf.Env[LlmgymEnvConfig]):
    async def run(self, task: LlmgymTask, agents: Any) -> None:
        info = task.data.info
        env = gym.make(info["env_id"], **info["options"])
        observation, _ = env.reset(options={"level": info["level"]})
        total, success, steps = 0.0, False, 0
        async with agents.player.interaction(task) as interaction:
            segment = await interaction.turn(observation)
            while not segment.terminated:
                observation, reward, terminated, truncated, step_info = env.step(segment.last_reply)
                total += float(reward)
                success, steps = bool(step_info.get("success")), steps + 1
                if terminated or truncated:
                    break
                segment = await interaction.turn(observation)
        env.close()
        trace = interaction.trace
        trace.record_reward("env_reward", total, 1.0)
        trace.info.update(success=success, steps=steps, level_index=info["index"])


def load_environment(
    env_id: str = "llmgym/FrozenLake-v0",
    num_levels: int | None = None,
    harness: str = "null",
    runtime: str = "subprocess",
    **options: Any,
) -> LlmgymEnv:
    """A verifiers environment playing ``env_id``'s eval levels; ``options`` go to ``gym.make``.

    ``harness="null"`` is verifiers' plain chat program (no tools, no sandbox): the model answers
    each observation. ``runtime`` is where that program runs: ``"subprocess"`` on this machine
    (verifiers' default is a Prime cloud sandbox).
    """
    taskset = LlmgymTasksetConfig(id=PLUGIN_ID, env_id=env_id, options=options, num_levels=num_levels)
    player = vf.AgentConfig.model_validate({"harness": {"id": harness}, "runtime": {"type": runtime}})
    return LlmgymEnv(LlmgymEnvConfig(taskset=taskset, player=player))
