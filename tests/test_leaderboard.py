"""The leaderboard: metrics, reference agents, reproducibility and the files one command writes."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import llmgym
from llmgym_train.eval.agents import AgentOptions, make_agent
from llmgym_train.eval.leaderboard import (
    LeaderboardConfig,
    main,
    markdown,
    merge_results,
    pass_at_k,
    run,
    wilson_interval,
)
from llmgym.error import InvalidOptionError
from llmgym.eval_sets import has_eval_set

#: Deterministic puzzle envs with eval sets: the solver must win every level of these.
SOLVABLE_ENVS = [
    env_id
    for env_id in llmgym.env_ids()
    if env_id.split("/")[1].startswith(("FrozenLake", "Sokoban"))
    and "Slippery" not in env_id
    and has_eval_set(env_id)
]


def _config(tmp_path: Path, agents: tuple[str, ...], envs: tuple[str, ...], **overrides) -> LeaderboardConfig:
    return LeaderboardConfig(agents=agents, envs=envs, output_dir=tmp_path, progress=False, **overrides)


# ---------------------------------------------------------------------- metrics
def test_wilson_interval_matches_reference_values() -> None:
    # Reference values from the closed form (as statsmodels' proportion_confint(method="wilson")).
    low, high = wilson_interval(5, 10)
    assert low == pytest.approx(0.23659, abs=1e-4) and high == pytest.approx(0.76341, abs=1e-4)
    low, high = wilson_interval(0, 20)
    assert low == 0.0 and high == pytest.approx(0.16113, abs=1e-4)
    low, high = wilson_interval(200, 200)
    assert high == 1.0 and low == pytest.approx(0.98116, abs=1e-4)


@pytest.mark.parametrize("samples", [1, 3, 5])
def test_pass_at_k_equals_the_brute_force_probability(samples: int) -> None:
    for correct, k in itertools.product(range(samples + 1), range(1, samples + 1)):
        outcomes = [True] * correct + [False] * (samples - correct)
        subsets = list(itertools.combinations(outcomes, k))
        expected = sum(any(subset) for subset in subsets) / len(subsets)
        assert pass_at_k(samples, correct, k) == pytest.approx(expected)
    with pytest.raises(InvalidOptionError, match="1 <= k <= samples"):
        pass_at_k(samples, 0, samples + 1)


# ---------------------------------------------------------------------- agents
def test_unknown_agent_names_the_valid_forms() -> None:
    with pytest.raises(InvalidOptionError, match="Did you mean 'random'.*openai:<base_url>#<model>"):
        make_agent("randm", AgentOptions())
    with pytest.raises(InvalidOptionError, match="openai:<base_url>#<model>"):
        LeaderboardConfig(agents=("random", "openai:http://127.0.0.1:8000/v1"))  # no #model: fails up front


def test_config_rejects_an_env_without_eval_set() -> None:
    with pytest.raises(InvalidOptionError, match="No eval set"):
        LeaderboardConfig(envs=("llmgym/FrozenLake-v9",))


#: Levels the optimal agent plays where solving all 200 takes long: the first 50 of the 10x10
#: three-box set (half a minute for all 200 on a 2-core CPU; test_sokoban_gold checks the recorded
#: optimal steps of every tenth level there by an independent search).
OPTIMAL_LIMIT = {"llmgym/Sokoban-10x10-3box-v0": 50}


@pytest.mark.parametrize("env_id", SOLVABLE_ENVS)
def test_optimal_agent_solves_every_eval_level(env_id: str, tmp_path: Path) -> None:
    limit = OPTIMAL_LIMIT.get(env_id)
    row = run(_config(tmp_path, ("optimal",), (env_id,), limit=limit))["results"][0]
    summary = row["summary"]
    assert row["eval_set_size"] == 200 and row["levels"] == (limit or 200)
    assert summary["success_rate"] == 1.0
    assert summary["invalid_action_rate"] == 0.0
    optimal = [episode["optimal_steps"] for episode in row["episodes"]]
    assert [episode["turns"] for episode in row["episodes"]] == optimal, "the solver's plans are shortest"


def test_random_agent_is_far_below_optimal_and_reproducible(tmp_path: Path) -> None:
    envs = ("llmgym/FrozenLake-v0", "llmgym/FrozenLake-8x8-v0")
    first = run(_config(tmp_path, ("random",), envs, limit=40))
    again = run(_config(tmp_path, ("random",), envs, limit=40))
    for row, repeat in zip(first["results"], again["results"], strict=True):
        assert row["summary"]["success_rate"] < 0.3
        assert row["episodes"] == repeat["episodes"], "same seed -> the same episodes"
    other_seed = run(_config(tmp_path, ("random",), envs[:1], limit=40, seed=1))
    assert other_seed["results"][0]["episodes"] != first["results"][0]["episodes"]


def test_samples_give_pass_at_k(tmp_path: Path) -> None:
    row = run(_config(tmp_path, ("random",), ("llmgym/FrozenLake-v0",), limit=30, samples=4))["results"][0]
    summary = row["summary"]
    assert len(row["episodes"]) == 120
    assert set(summary["pass_at_k"]) == {"1", "2", "3", "4"}
    assert summary["pass_at_k"]["1"] == pytest.approx(summary["success_rate"])
    assert summary["pass_at_k"]["4"] >= summary["pass_at_k"]["1"]
    assert "pass@k" in markdown({"results": [row]})


def test_agents_say_which_envs_they_can_play() -> None:
    plain = _NoBoardEnv()
    frozen_lake = gym.make("llmgym/FrozenLake-v0").unwrapped
    for spec, plays_plain in (("random", True), ("optimal", False), ("sb3-ppo", False)):
        agent = make_agent(spec, AgentOptions())
        assert agent.supports(frozen_lake)
        assert agent.supports(plain) is plays_plain, spec


class _NoBoardEnv(llmgym.TextEnv):
    """A text env without a board: sb3-ppo cannot play it."""


def test_sb3_ppo_row_beats_random_on_frozenlake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMGYM_CACHE", str(tmp_path / "cache"))
    config = _config(
        tmp_path, ("random", "sb3-ppo"), ("llmgym/FrozenLake-v0",), limit=100,
        options=AgentOptions(ppo_timesteps=10_000),
    )
    rows = {row["agent"]: row["summary"]["success_rate"] for row in run(config)["results"]}
    assert rows["sb3-ppo"] > rows["random"] + 0.1, rows
    assert list((tmp_path / "cache" / "sb3").glob("*.zip")), "the trained policy is cached for the next run"


# ---------------------------------------------------------------------- files
def test_one_command_writes_table_json_and_chart(tmp_path: Path) -> None:
    main(["--agents", "random", "optimal", "--envs", "FrozenLake-v0", "FrozenLake-Slippery-v0",
          "--limit", "10", "--output-dir", str(tmp_path), "--no-progress"])
    document = json.loads((tmp_path / "leaderboard.json").read_text())
    assert {(row["agent"], row["env_id"]) for row in document["results"]} == {
        (agent, env)
        for agent in ("random", "optimal")
        for env in ("llmgym/FrozenLake-v0", "llmgym/FrozenLake-Slippery-v0")
    }
    for row in document["results"]:
        assert len(row["episodes"]) == 10
        assert {"commit", "versions", "machine"} <= set(row["provenance"])
        assert {"env_seed", "success", "turns", "invalid_actions"} <= set(row["episodes"][0])
    table = (tmp_path / "leaderboard.md").read_text()
    assert "| FrozenLake-v0 | `optimal` | 10/200 | 100.0 (72.2-100.0) |" in table
    assert (tmp_path / "leaderboard.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_merge_keeps_rows_this_run_did_not_redo(tmp_path: Path) -> None:
    main(["--agents", "optimal", "--envs", "FrozenLake-v0", "--limit", "3",
          "--output-dir", str(tmp_path), "--no-progress"])
    main(["--agents", "random", "--envs", "FrozenLake-v0", "--limit", "3",
          "--output-dir", str(tmp_path), "--no-progress", "--merge"])
    document = json.loads((tmp_path / "leaderboard.json").read_text())
    assert sorted(row["agent"] for row in document["results"]) == ["optimal", "random"]
    redo = merge_results(document, {"results": [dict(document["results"][0], levels=1)]})
    assert len(redo["results"]) == 2 and any(row["levels"] == 1 for row in redo["results"])


def test_max_turns_override_is_applied_and_shown(tmp_path: Path) -> None:
    config = _config(tmp_path, ("random",), ("llmgym/FrozenLake-8x8-v0",), limit=20, max_turns=2)
    row = run(config)["results"][0]
    assert max(episode["turns"] for episode in row["episodes"]) <= 2
    assert "(max 2 turns)" in markdown({"results": [row]})
    assert math.isclose(row["summary"]["mean_turns"], sum(e["turns"] for e in row["episodes"]) / 20)


def test_every_leaderboard_env_can_be_made() -> None:
    for env_id in LeaderboardConfig().env_ids():
        gym.make(env_id).close()


def test_checkpoint_agent_plays_a_run_folder_of_llmgym_train(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file

    from llmgym_train.cli import main as train
    from llmgym_train.testing import save_tiny_model

    model, run = save_tiny_model(tmp_path / "tiny", seed=3), tmp_path / "run"
    assert train([
        "--env", "llmgym/FrozenLake-v0:1", "--model", str(model), "--algo", "reinforce_pp", "--steps", "2",
        "--output", str(run), "rollout.backend=hf", "rollout.group_size=2", "rollout.max_new_tokens=4",
        "rollout.max_turns=1", "eval.disabled=true", "checkpoint_every=1", "progress=false", "threads=1",
    ]) == 0
    trained = torch.load(run / "checkpoint.pt", weights_only=False)["policy"]["weights"]
    exported = load_file(run / "model" / "model.safetensors")
    assert all(torch.equal(tensor, trained[name]) for name, tensor in exported.items()), "model/ is the last step's policy"
    main(["--agents", f"checkpoint:{run}", "--backend", "hf", "--envs", "FrozenLake-v0", "--limit", "1",
          "--max-turns", "1", "--max-tokens", "8", "--output-dir", str(tmp_path / "board"), "--no-progress"])
    (row,) = json.loads((tmp_path / "board" / "leaderboard.json").read_text())["results"]
    assert row["agent"] == "checkpoint:.../run"  # results keep only the name of a path outside the repo
    assert row["agent_settings"]["backend"] == "hf" and row["agent_settings"]["model"] == ".../model"
    (episode,) = row["episodes"]
    assert episode["turns"] == 1 and 1 <= episode["completion_tokens"] <= 8


#: A run of the markov agent choosing one move token after ``<answer>`` (as presets frozenlake-v1 and sokoban-v1).
_CHOICE_RUN = """\
model: {model}
output: {output}
algo: grpo
seed: 0
steps: 1
train_envs:
- {{id: llmgym/FrozenLake-v1, n_groups: 1, options: {{size: 3, max_turns: 4, action_parser: lenient}}}}
eval_envs:
- {{id: llmgym/FrozenLake-v1, options: {{max_turns: 6, action_parser: lenient}}, name: lake}}
rollout: {{backend: hf, group_size: 2, agent: markov, layout: turn, max_new_tokens: 1, max_model_len: 1024,
  temperature: 2.0, response_prefix: <answer>, choices: [Left, Down, Right, Up]}}
eval: {{levels: 8, every: 0}}
progress: false
threads: 1
"""


MOVES = ["Left", "Down", "Right", "Up"]


def _choice_run(tmp_path: Path, evaluate: bool = False) -> tuple[Path, Path, Any]:
    """A tiny model and an untrained run folder of it (``_CHOICE_RUN``); with ``evaluate``, its evaluation."""
    from llmgym_train.config import load_config
    from llmgym_train.testing import save_tiny_model
    from llmgym_train.trainer import Trainer

    model, run_folder = save_tiny_model(tmp_path / "tiny", seed=1, words=MOVES), tmp_path / "run"
    config_file = tmp_path / "run.yaml"
    config_file.write_text(_CHOICE_RUN.format(model=model, output=run_folder))
    with Trainer(load_config(config_file)) as trainer:
        trainer.save_checkpoint()  # model/ (the starting weights) and config.yaml: a run folder
        if evaluate:
            trainer.evaluate()
        evaluation = trainer.last_evaluation
    return model, run_folder, evaluation


def test_checkpoint_row_of_a_run_plays_as_the_trainers_evaluation(tmp_path: Path) -> None:
    """A ``checkpoint:<run>`` row: the run's agent, prefix and choices, the same episodes as ``Trainer.evaluate``."""
    from llmgym_train.eval.agents import VllmAgent
    from llmgym_train.eval.policy import RunAgent

    moves = MOVES
    model, run_folder, evaluation = _choice_run(tmp_path, evaluate=True)
    assert evaluation is not None
    played = [[m["content"] for m in t.messages if m["role"] == "assistant"] for t in evaluation.trajectories]

    row = run(_config(tmp_path, (f"checkpoint:{run_folder}",), ("llmgym/FrozenLake-v1",), limit=8,
                      options=AgentOptions(backend="hf")))["results"][0]
    settings = row["agent_settings"]
    assert (settings["agent"], settings["response_prefix"], settings["choices"]) == ("markov", "<answer>", moves)
    assert (settings["max_new_tokens"], settings["max_model_len"], settings["temperature"]) == (1, 1024, 0.0)
    assert settings["env_options"] == {"max_turns": 6, "action_parser": "lenient"}, "the run's eval env"
    episodes = row["episodes"]
    assert [e["level_index"] for e in episodes] == list(range(8))
    assert [e["actions"] for e in episodes] == played, "the trainer's evaluation, move for move"
    assert [e["success"] for e in episodes] == [t.success for t in evaluation.trajectories]
    assert [e["episode_return"] for e in episodes] == pytest.approx([t.episode_return for t in evaluation.trajectories])
    assert row["summary"]["success_rate"] == pytest.approx(evaluation.metrics["success_rate"])
    assert row["summary"]["invalid_action_rate"] == pytest.approx(evaluation.metrics["invalid_action_rate"])
    every_action = [action for actions in played for action in actions]
    assert set(every_action) <= {f"<answer>{move}" for move in moves}, "one move token after the prefix"
    # A random tiny policy plays one move everywhere; its episodes still differ by level (a hole
    # early, late, or never on the way), and the prompts below tell the agent that played them.
    assert [e["turns"] for e in episodes] == [len(t.turns) for t in evaluation.trajectories]
    assert len({e["turns"] for e in episodes}) > 1
    assert all(e["completion_tokens"] == e["turns"] for e in episodes)
    # markov: each turn's prompt is the system prompt and the latest observation, as in the trainer's episodes.
    contexts = [sum(turn.start - turn.observation_start for turn in t.turns) for t in evaluation.trajectories]
    assert any(t.fresh_contexts for t in evaluation.trajectories), "episodes of several turns began fresh contexts"
    assert [e["prompt_tokens"] for e in episodes] == contexts

    plain = make_agent(f"checkpoint:{model}", AgentOptions(backend="hf"))  # an HF folder without config.yaml
    runs = make_agent(f"checkpoint:{run_folder}", AgentOptions(backend="hf"))
    assert isinstance(plain, VllmAgent) and isinstance(runs, RunAgent)
    plain.close()
    runs.close()


def test_base_row_of_a_run_plays_the_starting_model_with_the_runs_settings(tmp_path: Path) -> None:
    """``base:<run>``: the model the run started from, played exactly as ``checkpoint:<run>`` plays."""
    from llmgym_train.models import resolve_model

    model, run_folder, _ = _choice_run(tmp_path)  # untrained: model/ holds the starting weights
    with (run_folder / "metrics.jsonl").open("a") as metrics:  # as if 3 steps had been trained
        metrics.write(json.dumps({"kind": "train", "step": 3}) + "\n")
    rows = run(_config(tmp_path, (f"checkpoint:{run_folder}", f"base:{run_folder}"), ("llmgym/FrozenLake-v1",),
                       limit=6, options=AgentOptions(backend="hf")))["results"]
    trained, base = sorted(rows, key=lambda row: row["agent"].startswith("base:"))
    assert base["agent"].startswith("base:") and trained["agent"].startswith("checkpoint:")
    assert base["agent_settings"]["model"] == str(resolve_model(str(model))), "the config's model, not model/"
    assert trained["agent_settings"]["model"] != base["agent_settings"]["model"]
    assert trained["agent_settings"]["teacher"] is None, "FrozenLake's own rewards"
    assert base["agent_settings"]["teacher"] is None
    assert (trained["agent_settings"]["trained_steps"], base["agent_settings"]["trained_steps"]) == (3, 0)
    settings = ("agent", "response_prefix", "choices", "max_new_tokens", "env_options")
    assert [base["agent_settings"][key] for key in settings] == [trained["agent_settings"][key] for key in settings]
    assert [e["actions"] for e in base["episodes"]] == [e["actions"] for e in trained["episodes"]], "same weights"
    with pytest.raises(InvalidOptionError, match="run folder"):
        make_agent(f"base:{model}", AgentOptions(backend="hf"))


def test_checkpoint_agent_rejects_a_folder_that_is_neither_a_model_nor_a_run(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError, match="config.json.*run folder"):
        make_agent(f"checkpoint:{tmp_path}", AgentOptions())


@pytest.mark.vllm
def test_vllm_agent_plays_a_row_with_token_counts(vllm_generator, smollm2_tokenizer, tmp_path: Path) -> None:
    from llmgym_train.eval.agents import Sampling, VllmAgent
    from llmgym_train.eval.leaderboard import evaluate

    sampling = Sampling(temperature=0.0, max_tokens=16, max_model_len=1024)
    agent = VllmAgent(vllm_generator, smollm2_tokenizer, sampling, name="vllm:smollm2-135m")
    config = _config(tmp_path, ("vllm:smollm2-135m",), ("llmgym/FrozenLake-v0",), limit=2, max_turns=2)
    row = evaluate(agent, "llmgym/FrozenLake-v0", config)
    again = evaluate(agent, "llmgym/FrozenLake-v0", config)
    assert row is not None and again is not None
    assert row["episodes"] == again["episodes"], "greedy decoding replays the row exactly"
    for episode in row["episodes"]:
        assert 1 <= episode["turns"] <= 2
        assert episode["turns"] <= episode["completion_tokens"] <= 16 * episode["turns"]
        assert episode["prompt_tokens"] > 60 * episode["turns"], "system prompt and board are in every prompt"
    assert row["agent_settings"]["max_tokens"] == 16
