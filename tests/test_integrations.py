"""The TRL and verifiers adapters, run by the real libraries (no stand-ins for them)."""

from __future__ import annotations

import gymnasium as gym
import pytest

import llmgym  # noqa: F401 - registers the ids
from llmgym.integrations.trl import accepts_split, environment_factory, seed_dataset

#: Qwen's chat tokens: TRL recognizes Qwen3's template (and its tool-call format) by its text.
QWEN_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>",
                 "<tool_response>", "</tool_response>", "<think>", "</think>")


def qwen_char_tokenizer():
    """A character-level tokenizer with Qwen3's chat template, as TRL ships it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen3_chat_template

    characters = [chr(code) for code in range(32, 127)] + ["\n", "\t"]
    vocab = {token: index for index, token in enumerate([*QWEN_SPECIALS, *characters])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="?"))
    backend.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<|endoftext|>", eos_token="<|im_end|>",
        additional_special_tokens=list(QWEN_SPECIALS[1:3]),
    )
    tokenizer.add_tokens(list(QWEN_SPECIALS[3:]))
    tokenizer.chat_template = qwen3_chat_template
    return tokenizer


@pytest.mark.parametrize(
    ("env_id", "tools"),
    [("llmgym/FrozenLake-v0", {"move"}), ("llmgym/Sokoban-v0", {"move"}), ("llmgym/Math-v0", {"answer"}),
     ("llmgym/ToolUse-Calculator-v0", {"python", "calculator", "search", "answer"})],
)
def test_trl_adapter_tools_play_the_env_to_full_reward(env_id: str, tools: set[str]) -> None:
    from transformers.utils import get_json_schema

    env_class = environment_factory(env_id)
    public = {name for name in vars(env_class) if not name.startswith("_")} - {"env_id", "options"}
    assert public == tools
    for name in tools:
        assert get_json_schema(getattr(env_class(), name))["function"]["name"] == name
    episode = env_class()
    reference = gym.make(env_id)
    assert episode.reset(seed=5, prompt=[]) == reference.reset(seed=5)[0]
    for step in reference.unwrapped.solution():
        if "move" in tools:
            episode.move(step)
        elif step.startswith("<tool_call>"):
            episode.calculator(step.split('"expression": "')[1].split('"')[0])
        else:
            episode.answer(step)
    assert episode.transcript[-1]["success"] is True
    assert episode.get_reward() == pytest.approx(sum(turn.get("reward", 0.0) for turn in episode.transcript))


def test_trl_adapter_trains_on_the_train_split_where_there_is_one() -> None:
    env = environment_factory("llmgym/Sokoban-v0")()
    made = env._env.spec.kwargs
    assert ("split" in made) == accepts_split("llmgym/Sokoban-v0")
    if "split" in made:
        assert made["split"] == "train"


def test_grpo_trainer_runs_two_steps_on_llmgym_episodes(tmp_path) -> None:
    trl = pytest.importorskip("trl")
    from llmgym_train.testing import tiny_model

    tokenizer = qwen_char_tokenizer()
    model = tiny_model(len(tokenizer), seed=0)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.config.eos_token_id = tokenizer.eos_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    env_id = "llmgym/FrozenLake-v0"
    dataset = seed_dataset(env_id, num_levels=4, start_seed=10)
    env_class = environment_factory(env_id)
    config = trl.GRPOConfig(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=2, num_generations=2,
        max_completion_length=8, max_tool_calling_iterations=1, learning_rate=1e-4, logging_steps=1,
        report_to="none", use_cpu=True, bf16=False, save_strategy="no", seed=0, temperature=1.0,
        shuffle_dataset=False,
    )
    trainer = trl.GRPOTrainer(model=model, processing_class=tokenizer, args=config, train_dataset=dataset,
                              environment_factory=env_class)
    trainer.train()
    assert trainer.state.global_step == 2
    logged = trainer._logs
    assert logged["prompt"], "GRPOTrainer logged no episodes"
    first_observations = {seed: gym.make(env_id).reset(seed=seed)[0] for seed in range(10, 14)}
    for prompt in logged["prompt"]:
        user_turn = next(message["content"] for message in prompt if message["role"] == "user")
        assert user_turn in first_observations.values(), user_turn
    # each GRPO group shares its level: rollouts come in pairs with the same first observation
    users = [next(m["content"] for m in prompt if m["role"] == "user") for prompt in logged["prompt"]]
    assert all(users[i] == users[i + 1] for i in range(0, len(users), 2))
    rewards = logged["rewards"][env_class.__name__]
    assert len(rewards) == len(users)
    pooled = trainer._environment_pool[None]
    assert {env.transcript[0]["observation"] for env in pooled} <= set(first_observations.values())
