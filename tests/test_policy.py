"""The training forward pass: a prefix shared by a batch's rows runs once, with the same result."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from llmgym_train import policy as policy_module
from llmgym_train.policy import Policy, shared_prefix_length
from llmgym_train.value import ValueHead


def _batch(tokenizer: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Three right-padded rows sharing a 40-token prompt, then different replies of different lengths."""
    shared = tokenizer.encode("You are a careful agent. Move P to G now.\n", add_special_tokens=False)
    tails = ["Down, then right.", "Up!", "Left or right? Right."]
    rows = [shared + tokenizer.encode(tail, add_special_tokens=False) for tail in tails]
    width = max(map(len, rows))
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    positions = torch.zeros((len(rows), width), dtype=torch.long)
    for index, row in enumerate(rows):
        input_ids[index, : len(row)] = torch.tensor(row)
        attention_mask[index, : len(row)] = 1
        positions[index, len(shared) : len(row)] = 1  # the reply is what is trained
    return input_ids, attention_mask, positions


def test_shared_prefix_length_stops_at_the_first_difference_and_leaves_each_row_a_token() -> None:
    ids = torch.tensor([[5, 6, 7, 8, 0], [5, 6, 7, 9, 9], [5, 6, 7, 8, 1]])
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert shared_prefix_length(ids, mask) == 3
    same = torch.tensor([[5, 6, 7], [5, 6, 7]])
    assert shared_prefix_length(same, torch.ones_like(same)) == 2
    # A row whose prompt is padding where the others have tokens shares nothing past its end.
    short = torch.tensor([[5, 6, 0], [5, 6, 0]])
    assert shared_prefix_length(short, torch.tensor([[1, 1, 0], [1, 1, 1]])) == 1


@pytest.mark.parametrize(("with_value", "checkpointing"), [(False, False), (True, False), (False, True), (True, True)])
def test_shared_prefix_forward_gives_the_full_forwards_logprobs_values_and_gradients(
    random_tiny_model: Any, char_tokenizer: Any, monkeypatch: pytest.MonkeyPatch, with_value: bool, checkpointing: bool
) -> None:
    input_ids, attention_mask, positions = _batch(char_tokenizer)
    assert shared_prefix_length(input_ids, attention_mask) >= policy_module.MIN_SHARED_PREFIX
    if checkpointing:  # layers replay their forward in the backward: the prefix caches must survive it
        random_tiny_model.gradient_checkpointing_enable()
    head = ValueHead(random_tiny_model.config.hidden_size) if with_value else None
    policy = Policy(random_tiny_model, char_tokenizer, head, with_reference=False)
    policy.train()

    def run() -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
        policy.model.zero_grad()
        out = policy.score(input_ids, attention_mask, positions=positions, values=with_value, entropy=True)
        loss = (out["logprobs"] * torch.linspace(-1, 2, out["logprobs"].shape[1])).sum()
        if with_value:
            loss = loss + (out["values"] * attention_mask).square().sum()
        loss.backward()
        return out, [p.grad.clone() for p in policy.trainable_parameters()]

    calls: list[int] = []
    original = policy.model.get_decoder().forward
    monkeypatch.setattr(policy.model.get_decoder(), "forward", lambda *a, **k: calls.append(1) or original(*a, **k))
    shared, shared_grads = run()
    assert len(calls) == 2  # the prefix once, then the rows' own tokens
    monkeypatch.setattr(policy_module, "MIN_SHARED_PREFIX", 10**6)
    calls.clear()
    full, full_grads = run()
    assert len(calls) == 1
    for key in full:
        torch.testing.assert_close(shared[key], full[key], rtol=1e-4, atol=1e-5)
    assert full["logprobs"].abs().sum() > 0
    for got, expected in zip(shared_grads, full_grads, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("temperature", [1.0, 2.5])
def test_choice_policy_samples_only_the_choices_and_scores_them_as_the_generator_did(
    random_tiny_model: Any, char_tokenizer: Any, temperature: float
) -> None:
    from llmgym_train.chat import ChatTokens
    from llmgym_train.generation import SamplingSpec
    from llmgym_train.generation.hf_backend import HfGenerator

    chat = ChatTokens(char_tokenizer, response_prefix="<answer>")
    allowed = chat.choice_token_ids(["L", "D", "R", "U"])
    generator = HfGenerator(random_tiny_model, tokenizer=char_tokenizer, max_model_len=256)
    prompts = [chat.prompt(f"Board {index}: where to?", "Pick a move.") for index in range(12)]
    specs = [SamplingSpec(max_tokens=1, temperature=temperature, seed=seed, allowed_token_ids=allowed) for seed in range(12)]
    completions = generator.generate(prompts, specs)
    assert all(len(c.token_ids) == 1 and c.token_ids[0] in allowed for c in completions)
    assert len({c.token_ids[0] for c in completions}) > 1  # a distribution, not one forced token

    # The trainer's score of each sampled token is the generator's: log-softmax over the choices,
    # at the sampling temperature.
    policy = Policy(random_tiny_model, char_tokenizer, None, with_reference=False)
    policy.allowed_token_ids = torch.tensor(allowed)
    policy.choice_temperature = temperature
    rows = [prompt + list(c.token_ids) for prompt, c in zip(prompts, completions, strict=True)]
    width = max(map(len, rows))
    input_ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    positions = torch.zeros_like(input_ids)
    for index, row in enumerate(rows):
        input_ids[index, : len(row)] = torch.tensor(row)
        mask[index, : len(row)] = 1
        positions[index, len(row) - 1] = 1
    with torch.no_grad():
        scored = policy.score(input_ids, mask, positions=positions, entropy=True)
    got = scored["logprobs"][positions.bool()]
    expected = torch.tensor([c.logprobs[0] for c in completions])
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert bool((scored["entropy"][positions.bool()] <= torch.log(torch.tensor(4.0)) + 1e-5).all())
    # Greedy picks the likeliest choice.
    candidates = torch.tensor([prompts[0] + [token] for token in allowed])
    last = torch.zeros_like(candidates)
    last[:, -1] = 1
    with torch.no_grad():
        choice_logprobs = policy.score(candidates, torch.ones_like(candidates), positions=last)["logprobs"][:, -1]
    torch.testing.assert_close(choice_logprobs.exp().sum(), torch.tensor(1.0))
    greedy = generator.generate(prompts[:1], [SamplingSpec(max_tokens=1, temperature=0.0, allowed_token_ids=allowed)])
    assert greedy[0].token_ids[0] == allowed[int(choice_logprobs.argmax())]


def test_choices_that_are_not_one_token_are_refused_with_the_fix(char_tokenizer: Any) -> None:
    from llmgym.error import InvalidOptionError
    from llmgym_train.chat import ChatTokens

    with pytest.raises(InvalidOptionError, match="expected exactly one token"):
        ChatTokens(char_tokenizer).choice_token_ids(["Left", "Down"])


def _turn_rows(tokenizer: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Six one-token turn samples: three prompts, two of them chosen twice or three times with other actions."""
    prompts = ["Board A: P _ G. Move?", "Board B: _ P G. Move!", "Board A: P _ G. Move?"]
    prompts += ["Board A: P _ G. Move?", "Board B: _ P G. Move!", "Board C: G P _?"]
    actions = ["L", "R", "R", "L", "U", "D"]
    rows = [tokenizer.encode(p, add_special_tokens=False) + tokenizer.encode(a, add_special_tokens=False)
            for p, a in zip(prompts, actions, strict=True)]
    width = max(map(len, rows))
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    positions = torch.zeros((len(rows), width), dtype=torch.long)
    for index, row in enumerate(rows):
        input_ids[index, : len(row)] = torch.tensor(row)
        attention_mask[index, : len(row)] = 1
        positions[index, len(row) - 1] = 1
    return input_ids, attention_mask, positions


def test_same_context_rows_pairs_rows_that_differ_in_their_last_token_only(char_tokenizer: Any) -> None:
    input_ids, attention_mask, _ = _turn_rows(char_tokenizer)
    unique, inverse = policy_module.same_context_rows(input_ids, attention_mask)
    assert unique.tolist() == [0, 1, 5]  # the first row of each context, in batch order
    assert inverse.tolist() == [0, 1, 0, 0, 1, 2]
    # Same tokens but for the last, yet of different lengths (padding differs): not merged.
    ids = torch.tensor([[5, 6, 7, 0], [5, 6, 7, 8]])
    assert policy_module.same_context_rows(ids, torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]]))[0].tolist() == [0, 1]
    # A difference before the last token: not merged.
    ids = torch.tensor([[5, 6, 7], [5, 9, 7]])
    assert policy_module.same_context_rows(ids, torch.ones_like(ids))[0].tolist() == [0, 1]


def test_rows_differing_in_their_last_token_run_once_with_the_full_forwards_logprobs_and_gradients(
    random_tiny_model: Any, char_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    input_ids, attention_mask, positions = _turn_rows(char_tokenizer)
    policy = Policy(random_tiny_model, char_tokenizer, None, with_reference=False)
    policy.train()
    weights = torch.tensor([1.0, -2.0, 0.5, 3.0, -1.0, 2.0])  # per-row advantages, duplicates included

    def run() -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
        policy.model.zero_grad()
        out = policy.score(input_ids, attention_mask, positions=positions, entropy=True, entropy_grad=True)
        loss = (out["logprobs"].sum(dim=1) * weights).sum() + out["entropy"].sum()
        loss.backward()
        return out, [p.grad.clone() for p in policy.trainable_parameters()]

    rows_run: list[int] = []
    original = policy.model.get_decoder().forward

    def counting(*args: Any, **kwargs: Any) -> Any:
        rows_run.append(int(kwargs["input_ids"].shape[0]))
        return original(*args, **kwargs)

    monkeypatch.setattr(policy.model.get_decoder(), "forward", counting)
    merged, merged_grads = run()
    assert max(rows_run) == 3  # three contexts among six rows
    monkeypatch.setattr(policy_module, "same_context_rows", lambda ids, mask: (torch.arange(len(ids)), torch.arange(len(ids))))
    rows_run.clear()
    full, full_grads = run()
    assert max(rows_run) == 6
    assert merged["logprobs"][0].sum() != merged["logprobs"][2].sum()  # same context, other action
    for key in full:
        torch.testing.assert_close(merged[key], full[key], rtol=1e-4, atol=1e-5)
    for got, expected in zip(merged_grads, full_grads, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-5)


def test_head_scores_in_chunks_equal_the_whole_logits_and_their_gradients() -> None:
    from llmgym_train.algorithms import entropy_from_logits, token_logprobs

    generator = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(8, 50, bias=False)
    features = torch.randn(23, 8, generator=generator, requires_grad=True)  # (N, F)
    targets = torch.randint(0, 50, (23,), generator=generator)
    weights = torch.randn(23, generator=generator)

    def run(chunk: int | None) -> list[torch.Tensor]:
        head.zero_grad()
        features.grad = None
        if chunk is None:  # the whole logits at once, as before chunking
            logits = head(features)
            logprobs, entropies = token_logprobs(logits, targets), entropy_from_logits(logits)
        else:
            logprobs, entropies = policy_module.head_scores(head, features, targets, chunk, entropy=True, entropy_grad=True)
        ((logprobs * weights).sum() + entropies.sum()).backward()
        return [logprobs.detach(), entropies.detach(), features.grad.clone(), head.weight.grad.clone()]

    whole = run(None)
    for chunk in (0, 1, 5, 23, 64):
        for got, expected in zip(run(chunk), whole, strict=True):
            assert torch.allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_head_scores_hold_one_chunk_of_logits_and_recompute_it_in_the_backward() -> None:
    head = torch.nn.Linear(8, 50, bias=False)
    rows: list[int] = []
    head.register_forward_hook(lambda module, inputs, output: rows.append(output.shape[0]))
    features = torch.randn(23, 8, requires_grad=True)
    logprobs, entropies = policy_module.head_scores(head, features, torch.zeros(23, dtype=torch.long), 10)
    assert entropies is None
    assert rows == [10, 10, 3]
    logprobs.sum().backward()
    assert rows == [10, 10, 3, 3, 10, 10]  # each chunk again, last first, one at a time
    with torch.no_grad():
        rows.clear()
        policy_module.head_scores(head, features, torch.zeros(23, dtype=torch.long), 10)
    assert rows == [10, 10, 3]
    # No position to score still gives a graph, so an empty pass can be backed.
    empty, _ = policy_module.head_scores(head, features[:0], torch.zeros(0, dtype=torch.long), 10, entropy=True)
    assert empty.shape == (0,)
    empty.sum().backward()


@pytest.mark.parametrize("choices", [False, True])
def test_policy_scores_in_head_chunks_equal_the_unchunked_ones_with_gradients(
    random_tiny_model: Any, char_tokenizer: Any, choices: bool
) -> None:
    input_ids, attention_mask, positions = _batch(char_tokenizer)
    policy = Policy(random_tiny_model, char_tokenizer, None, with_reference=False)
    if choices:  # every scored token among the allowed ones, at a choice temperature
        allowed = sorted(set(input_ids[positions.bool()].tolist()))
        policy.allowed_token_ids = torch.tensor(allowed)
        policy.choice_temperature = 1.7
    policy.train()
    weights = torch.linspace(-1, 2, input_ids.shape[1])

    def run(chunk: int) -> list[torch.Tensor]:
        policy.head_chunk_tokens = chunk
        policy.model.zero_grad()
        out = policy.score(input_ids, attention_mask, positions=positions, entropy=True, entropy_grad=True)
        ((out["logprobs"] * weights).sum() + out["entropy"].sum()).backward()
        return [out["logprobs"].detach(), out["entropy"].detach()] + [p.grad.clone() for p in policy.trainable_parameters()]

    whole = run(0)
    assert int(positions[:, 1:].sum()) > 7  # several chunks
    for got, expected in zip(run(7), whole, strict=True):
        assert torch.allclose(got, expected, rtol=1e-4, atol=1e-6)
    assert whole[0].abs().sum() > 0 and whole[1].abs().sum() > 0


@pytest.mark.parametrize("checkpointing", [False, True])
def test_frozen_lower_layers_get_no_gradient_and_the_layers_above_get_the_full_models(
    char_tokenizer: Any, checkpointing: bool
) -> None:
    from llmgym_train.testing import tiny_model

    input_ids, attention_mask, positions = _batch(char_tokenizer)

    def gradients(frozen: int) -> dict[str, torch.Tensor | None]:
        model = tiny_model(len(char_tokenizer), seed=0)
        if checkpointing:  # the layers above replay their forward from an input that needs no gradient
            model.gradient_checkpointing_enable()
        if frozen:
            policy_module.freeze_lower_layers(model, frozen)
        policy = Policy(model, char_tokenizer, None, with_reference=False)
        policy.train()
        out = policy.score(input_ids, attention_mask, positions=positions)
        (out["logprobs"] * torch.linspace(-1, 2, out["logprobs"].shape[1])).sum().backward()
        return {name: p.grad for name, p in model.named_parameters()}

    full, frozen = gradients(0), gradients(1)
    trained = [name for name, grad in frozen.items() if grad is not None]
    assert trained and all(".layers.0." not in name and "embed_tokens" not in name for name in trained)
    assert all(grad is None for name, grad in frozen.items() if ".layers.0." in name or "embed_tokens" in name)
    assert all(full[name] is not None for name in full)
    for name in trained:
        torch.testing.assert_close(frozen[name], full[name], rtol=1e-4, atol=1e-6)


def test_freezing_every_layer_is_refused_with_the_most_it_allows(random_tiny_model: Any) -> None:
    count = len(random_tiny_model.model.layers)
    with pytest.raises(ValueError, match=f"has {count} decoder layers: use at most {count - 1}"):
        policy_module.freeze_lower_layers(random_tiny_model, count)
