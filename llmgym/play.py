"""Play an llmgym env in the terminal: yourself, or watch the solver or a random agent.

    python -m llmgym.play llmgym/Sokoban-v0                 # you type the actions
    python -m llmgym.play llmgym/Sokoban-v0 --agent optimal --episodes 3
    python -m llmgym.play llmgym/FrozenLake-8x8-v0 --agent random --seed 7

Typed actions are wrapped in ``<answer>...</answer>`` unless they already hold a tag.
"""

from __future__ import annotations

import argparse
from typing import Literal

import gymnasium as gym
import numpy as np

import llmgym
from llmgym.error import did_you_mean

Agent = Literal["human", "optimal", "random"]


def choose_action(env: gym.Env, agent: Agent, rng: np.random.Generator) -> str:
    """The next completion for ``agent``: typed, the solver's next step, or a random action name."""
    inner = env.unwrapped
    if agent == "human":
        typed = input("your action> ").strip()
        return typed if "<" in typed else f"<answer>{typed}</answer>"
    if agent == "optimal":
        plan = inner.solution()
        if not plan:
            raise SystemExit(f"{type(inner).__name__} has no solution from this state.")
        return f"<answer>{plan[0]}</answer>"
    names = getattr(inner, "action_names", None)
    if not names:
        raise SystemExit(f"{type(inner).__name__} has no action_names to draw a random action from.")
    return f"<answer>{names[int(rng.integers(len(names)))]}</answer>"


def play(env_id: str, agent: Agent = "human", episodes: int = 1, seed: int = 0) -> list[dict]:
    """Play ``episodes`` episodes, printing every observation; return one summary per episode."""
    env = gym.make(env_id)
    rng = np.random.default_rng(seed)
    summaries = []
    for episode in range(episodes):
        observation, info = env.reset(seed=seed + episode)
        print(f"\n=== {env_id} episode {episode} (seed {seed + episode}, optimal steps {info.get('optimal_steps')})")
        print(observation)
        total, turns, done = 0.0, 0, False
        while not done:
            action = choose_action(env, agent, rng)
            observation, reward, terminated, truncated, info = env.step(action)
            total += float(reward)
            turns += 1
            done = terminated or truncated
            print(f"\n--- turn {turns}: {info['parsed_action']!r} -> reward {float(reward):+g}")
            print(observation)
        summaries.append({"episode": episode, "success": bool(info["success"]), "return": total, "turns": turns})
        print(f"=== {'SUCCESS' if info['success'] else 'failure'}: return {total:+.2f} in {turns} turns")
    env.close()
    return summaries


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Play an llmgym environment in the terminal.")
    parser.add_argument("env_id", help=f"one of: {', '.join(llmgym.env_ids())}")
    parser.add_argument("--agent", choices=["human", "optimal", "random"], default="human")
    parser.add_argument("--episodes", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.env_id not in llmgym.env_ids():
        parser.error(f"unknown env id {args.env_id!r}.{did_you_mean(args.env_id, llmgym.env_ids())}")
    summaries = play(args.env_id, args.agent, args.episodes, args.seed)
    wins = sum(summary["success"] for summary in summaries)
    print(f"\n{args.agent} agent on {args.env_id}: {wins}/{len(summaries)} solved")


if __name__ == "__main__":
    main()
