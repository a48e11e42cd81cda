"""Ray scale-out on one machine: what a second env worker and a second rollout engine buy.

Two figures, each as a ratio "2 actors over 1 actor" measured in the same run:

* env resets/s: 256 ``llmgym/Sokoban-v0`` sub-envs (and 256 of the costlier 8x8 two-box
  level) in a :class:`~llmgym.vector.TextVectorEnv` on the Ray backend with 1 and with 2 env
  actors; one ``reset`` of all 256 is one unit of work, timed after a warm-up, median of
  ``--repeats``, the two configurations alternating.
* rollout tokens/s: multi-turn Sokoban episodes played by SmolLM2-135M-Instruct through
  :class:`~llmgym_train.generation.ray_engines.RolloutEngines` with 1 engine (both CPUs) and with 2
  engines (one CPU each), their rollouts alternating: generated tokens over the rollout's wall
  time. The weight-sync time of the full model into all engines (object-store path) is
  reported beside it.

Both configurations get the machine's whole CPU budget, so the ratio isolates what splitting
the work over actors gives: on one 2-core machine that is the parallelism the single actor
did not already use, minus the actors' overhead. On N machines each actor brings its own
cores, which is where the scaling is (see the README's "Scale-out on Ray").

Usage: ``python -m benchmarks.ray_scaling [--backend hf|vllm] [--episodes 8] [--repeats 5]``.
Writes ``benchmarks/results/ray_scaling.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from benchmarks.common import markdown_table, write_result

NUM_ENVS = 256
ENV_ID = "llmgym/Sokoban-v0"
CPUS = 2


def env_resets_per_second(env_id: str, repeats: int) -> dict[int, float]:
    """Resets/s of ``NUM_ENVS`` sub-envs of ``env_id`` over 1 and over 2 Ray actors.

    Both vector envs live at once and their resets alternate, so a burst of load on the shared
    machine hits both configurations alike instead of biasing the ratio.
    """
    from llmgym.vector import make_vector_env
    from llmgym.vector.ray_backend import RayEnvBackend

    venvs = {
        workers: make_vector_env(env_id, NUM_ENVS, backend=RayEnvBackend(num_cpus=1), num_workers=workers)
        for workers in (1, 2)
    }
    try:
        rates: dict[int, list[float]] = {workers: [] for workers in venvs}
        for repeat in range(repeats + 1):
            for workers, venv in venvs.items():
                started = time.perf_counter()
                venv.reset(seed=1000 * repeat)
                if repeat:  # the first round warms up: actors built, code paths hot
                    rates[workers].append(NUM_ENVS / (time.perf_counter() - started))
        return {workers: statistics.median(values) for workers, values in rates.items()}
    finally:
        for venv in venvs.values():
            venv.close()


def rollout_figures(backend: str, episodes: int, repeats: int) -> dict[int, dict[str, float]]:
    """Per engine count (1 and 2): generated tokens/s of Sokoban rollouts, and one weight sync's seconds.

    Both engine groups live at once (1 engine on both CPUs, 2 engines on one CPU each) and their
    rollouts alternate, as in the reset figure, so load from other work on the machine hits both.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from llmgym_train.agents import AgentConfig
    from llmgym_train.chat import ChatTokens
    from llmgym_train.generation import SamplingSpec
    from llmgym_train.generation.ray_engines import RolloutEngines
    from llmgym_train.models import resolve_model
    from llmgym_train.planner import EnvSpec, group_episodes
    from llmgym_train.rollout import rollout

    folder = resolve_model("smollm2-135m")
    chat = ChatTokens(AutoTokenizer.from_pretrained(folder))
    # No per-request seeds: the hf backend batches requests with equal sampling specs.
    config = AgentConfig(sampling=SamplingSpec(max_tokens=32, temperature=1.0), max_turns=2,
                         max_context_tokens=2048)
    plan = group_episodes([EnvSpec(ENV_ID, n_groups=episodes // 4)], group_size=4, seed=0)
    groups = {
        count: RolloutEngines(backend, folder, num_engines=count, max_model_len=2048, num_cpus=CPUS / count)
        for count in (1, 2)
    }
    try:
        rates: dict[int, list[float]] = {count: [] for count in groups}
        for repeat in range(repeats + 1):
            for count, engines in groups.items():
                played = rollout(engines, chat, plan[:4] if repeat == 0 else plan, config=config)
                if repeat:  # the first round warms up
                    rates[count].append(played.metrics["tokens/generated_per_s"])
        state = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).state_dict()
        figures = {}
        for count, engines in groups.items():
            started = time.perf_counter()
            engines.update_weights(state.items())
            sync_seconds = time.perf_counter() - started
            assert len(set(engines.weights_digests())) == 1, "engines must hold identical weights after a sync"
            figures[count] = {"tokens_per_s": statistics.median(rates[count]), "weight_sync_s": sync_seconds}
        return figures
    finally:
        for engines in groups.values():
            engines.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["hf", "vllm"], default="hf", help="rollout engine backend")
    parser.add_argument("--episodes", type=int, default=8, help="episodes per rollout (a multiple of 4)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--env-ids", nargs="+", default=[ENV_ID, "llmgym/Sokoban-8x8-2box-v0"],
                        help="envs for the reset figure (Sokoban-v0 is the headline; 8x8 resets cost more)")
    parser.add_argument("--skip-rollout", action="store_true", help="measure the env figure only")
    args = parser.parse_args()

    os.environ.setdefault("RAY_DISABLE_USAGE_STATS", "1")
    import ray

    # Room for both configurations at once (they alternate): 3 env actors, then 3 engines.
    ray.init(num_cpus=2 * CPUS, include_dashboard=False, object_store_memory=2**30, log_to_driver=False)
    try:
        # The machine is shared: its load says how much of the 2 cores the actors could get.
        figures: dict[str, Any] = {"num_envs": NUM_ENVS, "cpus": CPUS, "load_average_at_start": os.getloadavg(),
                                   "env_resets_per_s": {}, "env_resets_ratio_2_over_1": {}}
        rows = []
        for env_id in args.env_ids:
            resets = env_resets_per_second(env_id, args.repeats)
            figures["env_resets_per_s"][env_id] = {"1_worker": resets[1], "2_workers": resets[2]}
            figures["env_resets_ratio_2_over_1"][env_id] = resets[2] / resets[1]
            rows.append([f"resets/s, {NUM_ENVS} x {env_id}", resets[1], resets[2], resets[2] / resets[1]])
        if not args.skip_rollout:
            rollouts = rollout_figures(args.backend, args.episodes, args.repeats)
            ratio = rollouts[2]["tokens_per_s"] / rollouts[1]["tokens_per_s"]
            figures.update({
                "rollout_backend": args.backend,
                "rollout_episodes": args.episodes,
                "rollout_tokens_per_s": {"1_engine": rollouts[1]["tokens_per_s"],
                                         "2_engines": rollouts[2]["tokens_per_s"]},
                "rollout_tokens_ratio_2_over_1": ratio,
                "weight_sync_s": {"1_engine": rollouts[1]["weight_sync_s"],
                                  "2_engines": rollouts[2]["weight_sync_s"]},
            })
            rows.append([f"rollout tokens/s ({args.backend}, SmolLM2-135M)", rollouts[1]["tokens_per_s"],
                         rollouts[2]["tokens_per_s"], ratio])
            sync = (rollouts[1]["weight_sync_s"], rollouts[2]["weight_sync_s"])
            rows.append(["weight sync s (object store)", *sync, sync[1] / sync[0]])
    finally:
        ray.shutdown()
    path = write_result("ray_scaling", figures)
    print(markdown_table(["figure", "1 actor", "2 actors", "ratio 2/1"], rows))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
