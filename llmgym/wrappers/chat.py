"""The conversation an LLM agent sees, kept beside the env.

A text env's observation is only the next user turn; a chat model needs the whole exchange.
:class:`ChatHistory` records it as the message list chat APIs and chat templates take:
``system`` (the env's system prompt), then alternating ``user`` (observations) and
``assistant`` (actions) turns. After every ``reset`` and ``step`` the list ends with the user
turn the model is to answer.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym

Message = dict[str, str]


class ChatHistory(gym.Wrapper[str, str, str, str]):
    """Keep ``messages``: the episode so far as ``{"role", "content"}`` chat messages.

    Arguments:
        include_system_prompt: start the list with the env's ``system_prompt`` (from reset
            ``info``). Turn it off for models whose chat template has no system role; the
            prompt is then prepended to the first user turn instead, so the task is never lost.
    """

    def __init__(self, env: gym.Env[str, str], include_system_prompt: bool = True) -> None:
        super().__init__(env)
        self.include_system_prompt = include_system_prompt
        self.messages: list[Message] = []

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        observation, info = self.env.reset(seed=seed, options=options)
        system_prompt = info.get("system_prompt", "")
        if not system_prompt:
            self.messages = [{"role": "user", "content": observation}]
        elif self.include_system_prompt:
            self.messages = [
                {"role": "system", "content": system_prompt},
                {"role": "user", "content": observation},
            ]
        else:
            self.messages = [{"role": "user", "content": f"{system_prompt}\n\n{observation}"}]
        return observation, info

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.messages.append({"role": "assistant", "content": action})
        self.messages.append({"role": "user", "content": observation})
        return observation, reward, terminated, truncated, info
