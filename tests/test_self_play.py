"""Self-play: both seats of a game played by one policy, one trajectory per seat with its own reward."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import pytest

pytest.importorskip("pettingzoo")
pytest.importorskip("transformers")

from llmgym.error import InvalidOptionError  # noqa: E402
from llmgym_train.agents import AgentConfig, EpisodeStart, agent_names  # noqa: E402
from llmgym_train.chat import ChatTokens  # noqa: E402
from llmgym_train.cli import main  # noqa: E402
from llmgym_train.generation.base import Completion, SamplingSpec  # noqa: E402
from llmgym_train.rollout import rollout  # noqa: E402
from llmgym_train.testing import save_tiny_model, tiny_tokenizer  # noqa: E402

ENV_ID = "llmgym/TicTacToe-vs-random-v0"


class FirstEmptyCell:
    """A rule-based policy behind the Generator interface: it answers the first empty cell it sees.

    It reads the last board in the prompt (TicTacToe shows empty cells by number), so the
    whole game is known in advance: X takes 1, 3, 5, 7 and wins on the diagonal 3-5-7.
    """

    max_model_len = 4096

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.eos_token_ids = (tokenizer.eos_token_id,)
        self.prompts: list[str] = []

    def generate(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingSpec | Sequence[SamplingSpec]
    ) -> list[Completion]:
        completions = []
        for prompt in prompts:
            text = self.tokenizer.decode(list(prompt))
            self.prompts.append(text)
            board = text.rsplit("Board:", 1)[1]
            cell = re.search(r"[1-9]", board).group(0)
            answer = self.tokenizer.encode(f"<answer>{cell}</answer>", add_special_tokens=False)
            tokens = (*answer, *self.eos_token_ids)
            completions.append(Completion(tuple(tokens), (-0.5,) * len(tokens), "stop"))
        return completions

    def update_weights(self, named_tensors) -> None: ...
    def sleep(self) -> None: ...
    def wake(self) -> None: ...
    def close(self) -> None: ...


class Answer:
    """A policy behind the Generator interface that always gives the same answer."""

    max_model_len = 4096

    def __init__(self, tokenizer, answer: str) -> None:
        self.eos_token_ids = (tokenizer.eos_token_id,)
        answer_tokens = tokenizer.encode(f"<answer>{answer}</answer>", add_special_tokens=False)
        self.tokens = (*answer_tokens, *self.eos_token_ids)

    def generate(self, prompts, sampling) -> list[Completion]:
        return [Completion(self.tokens, (-0.1,) * len(self.tokens), "stop") for _ in prompts]

    def update_weights(self, named_tensors) -> None: ...
    def sleep(self) -> None: ...
    def wake(self) -> None: ...
    def close(self) -> None: ...


def _starts(count: int, group_size: int) -> list[EpisodeStart]:
    return [EpisodeStart(index, ENV_ID, seed=7, group_id=index // group_size) for index in range(count)]


def test_self_play_agent_is_registered():
    assert "self-play" in agent_names()


def test_each_seat_gets_its_own_trajectory_tokens_and_reward():
    tokenizer = tiny_tokenizer()
    chat, policy = ChatTokens(tokenizer), FirstEmptyCell(tokenizer)
    result = rollout(policy, chat, _starts(4, group_size=4), agent="self-play",
                     config=AgentConfig(max_context_tokens=4096))
    trajectories = result.trajectories
    assert [t.info["agent_seat"] for t in trajectories] == ["player_0", "player_1", "player_1", "player_0"]
    for trajectory in trajectories:
        x_seat = trajectory.info["agent_seat"] == "player_0"
        assert trajectory.info["self_play"] and trajectory.end_reason == "terminated"
        assert trajectory.info["outcome"] == ("win" if x_seat else "loss")
        assert trajectory.episode_return == (1.0 if x_seat else -1.0)
        assert trajectory.success is x_seat
        expected_rewards = [0.0, 0.0, 0.0, 1.0] if x_seat else [0.0, 0.0, -1.0]
        assert [turn.reward for turn in trajectory.turns] == expected_rewards
        trained = [token for token, mask in zip(trajectory.token_ids, trajectory.loss_mask) if mask]
        generated = tokenizer.decode(trained)
        own_cells = ["1", "3", "5", "7"] if x_seat else ["2", "4", "6"]
        # only this seat's own moves are in its loss
        assert re.findall(r"<answer>(\d)</answer>", generated) == own_cells
        text = tokenizer.decode(trajectory.token_ids)
        assert ("as X" if x_seat else "as O") in text
        assert text.count("Your opponent played") == len(own_cells) - x_seat
    assert len(policy.prompts) == 2 * 7  # two games of seven moves: no turn generated twice


def test_an_episode_without_a_partner_plays_the_fixed_opponent():
    tokenizer = tiny_tokenizer()
    chat, policy = ChatTokens(tokenizer), FirstEmptyCell(tokenizer)
    trajectories = rollout(policy, chat, _starts(3, group_size=3), agent="self-play",
                           config=AgentConfig(max_context_tokens=4096)).trajectories
    assert [bool(t.info.get("self_play")) for t in trajectories] == [True, True, False]
    alone = trajectories[2]
    assert alone.info["agent_seat"] in ("player_0", "player_1") and alone.end_reason == "terminated"


def test_a_seat_that_runs_out_of_turns_stops_the_game_for_both():
    tokenizer = tiny_tokenizer()
    chat, policy = ChatTokens(tokenizer), FirstEmptyCell(tokenizer)
    trajectories = rollout(policy, chat, _starts(2, group_size=2), agent="self-play",
                           config=AgentConfig(max_context_tokens=4096, max_turns=2)).trajectories
    assert sorted(t.end_reason for t in trajectories) == ["max_turns", "truncated"]
    assert all(len(t.turns) == 2 for t in trajectories)


def test_self_play_on_a_single_agent_env_fails_with_the_fix():
    tokenizer = tiny_tokenizer()
    starts = [EpisodeStart(index, "llmgym/FrozenLake-v0", seed=1) for index in range(2)]
    with pytest.raises(InvalidOptionError, match="agent=chain"):
        rollout(Answer(tokenizer, "Up"), ChatTokens(tokenizer), starts, agent="self-play",
                config=AgentConfig(max_context_tokens=4096))


def test_llmgym_train_self_play_smoke_run_logs_per_seat_metrics(tmp_path: Path):
    model = save_tiny_model(tmp_path / "model", seed=0)
    output = tmp_path / "run"
    code = main([
        "--env", f"{ENV_ID}:1", "--model", str(model), "--algo", "grpo", "--steps", "1",
        "--output", str(output),
        "rollout.agent=self-play", "rollout.backend=hf", "rollout.group_size=4", "rollout.max_new_tokens=8",
        "rollout.max_model_len=2048", "eval.disabled=true", "checkpoint_every=0", "progress=false",
    ])
    assert code == 0
    records = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    train = [record for record in records if record["kind"] == "train"]
    assert len(train) == 1
    record = train[0]
    # An untrained tiny model writes no valid move: X forfeits after 3 invalid turns (3 x -0.1, then -1),
    # and O wins without ever moving.
    assert record["player_0/reward_mean"] == pytest.approx(-1.3)
    assert record["player_0/invalid_action_rate"] == 1.0 and record["player_0/turns_mean"] == 3
    assert record["player_1/success_rate"] == 1.0 and record["player_1/turns_mean"] == 0


def test_self_play_of_the_simultaneous_prisoners_dilemma():
    tokenizer = tiny_tokenizer()
    starts = [EpisodeStart(index, "llmgym/PrisonersDilemma-vs-titfortat-v0", seed=1) for index in range(2)]
    trajectories = rollout(Answer(tokenizer, "cooperate"), ChatTokens(tokenizer), starts, agent="self-play",
                           config=AgentConfig(max_context_tokens=4096)).trajectories
    assert sorted(t.info["agent_seat"] for t in trajectories) == ["player_0", "player_1"]
    for trajectory in trajectories:
        assert [turn.reward for turn in trajectory.turns] == [3.0] * 10  # ten rounds of mutual cooperation
        assert trajectory.info["outcome"] == "done" and trajectory.end_reason == "terminated"
