"""The transformers generation backend, for machines without vLLM and for tiny test models.

Prompts are left-padded into one batch and decoded by a loop of its own over the model's
KV cache (not ``generate``), so each row samples with its own settings: temperature, top-k,
top-p, token budget, stop tokens and seed. A seeded row draws every token from a
``torch.Generator`` of its own, so a request with a seed gives the same completion alone or in
any batch, at any position; only its own logits and generator decide each token. (Padding
and batch size change the float rounding of a matmul, so a draw that lands within rounding of
a boundary between two tokens could still differ: rare enough that the tests never meet it.)
Unseeded rows draw from torch's global RNG; seeded ones leave it untouched.

Asynchronous training (:meth:`HfGenerator.publish`): a generator built from a folder holds its
own copy of the weights, so it can generate while the trainer updates the policy; new weights
arrive between two ``generate`` calls, and each completion is stamped with the version it was
sampled by.

The behavior logprob of each sampled token is the log-softmax of the processed logits it was
sampled from (after temperature / top-k / top-p), the same quantity vLLM reports with
``logprobs_mode="processed_logprobs"``; greedy rows (temperature 0) report the raw logits'
log-softmax.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmgym.error import DependencyNotInstalled, InvalidOptionError
from llmgym_train.generation.base import Completion, SamplingSpec, per_prompt

if TYPE_CHECKING:
    import torch

INSTALL_HINT = "The hf backend needs torch and transformers; run `pip install 'llmgym[train]'`."


class HfGenerator:
    """A :class:`~llmgym_train.generation.base.Generator` on a transformers causal LM.

    Arguments:
        model: a local HF model folder, or a loaded ``PreTrainedModel`` (used as is: a
            trainer may pass its policy, then weight updates are no-ops).
        tokenizer: required with a loaded model; loaded from the folder otherwise.
        max_model_len: longest prompt + completion, in tokens.
        dtype: weights dtype when loading from a folder (``"float32"`` or ``"bfloat16"``).
    """

    def __init__(
        self,
        model: str | Path | Any,
        *,
        tokenizer: Any | None = None,
        max_model_len: int = 2048,
        dtype: str = "float32",
    ) -> None:
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as error:
            raise DependencyNotInstalled(f"{INSTALL_HINT} (import failed: {error})") from error
        self._torch = torch
        if isinstance(model, (str, Path)):
            self.model = AutoModelForCausalLM.from_pretrained(model, dtype=getattr(torch, dtype)).eval()
            self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(model)
        else:
            if tokenizer is None:
                raise ValueError("HfGenerator with a loaded model needs its tokenizer: pass tokenizer=...")
            self.model, self.tokenizer = model, tokenizer
        self.max_model_len = max_model_len
        self.eos_token_ids = _eos_token_ids(self.model, self.tokenizer)
        #: The policy version the weights hold (``None``: never published; completions carry no versions).
        self.policy_version: int | None = None
        self._pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_token_ids[0]

    def generate(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingSpec | Sequence[SamplingSpec]
    ) -> list[Completion]:
        specs = per_prompt(sampling, len(prompts))
        if not prompts:
            return []
        if any(spec.regex for spec in specs):
            raise InvalidOptionError(
                "The hf backend does not constrain replies to a regular expression (rollout.constrain); "
                "vLLM does. Set rollout.backend=vllm, or rollout.constrain=none."
            )
        was_training = self.model.training
        self.model.eval()  # no dropout, and a KV cache even under gradient checkpointing
        try:
            return self._decode([list(prompt) for prompt in prompts], specs)
        finally:
            self.model.train(was_training)

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy tensors into the parameters of the same name (no-op for tensors that already are them).

        Tied weights answer to each of their names (``lm_head.weight`` and
        ``model.embed_tokens.weight``), as a state dict lists them.
        """
        parameters = dict(self.model.named_parameters(remove_duplicate=False))
        parameters.update(dict(self.model.named_buffers()))
        with self._torch.no_grad():
            for name, tensor in named_tensors:
                target = parameters.get(name)
                if target is None:
                    raise KeyError(f"Model has no parameter {name!r}; expected HF parameter names.")
                if target.data_ptr() != tensor.data_ptr():
                    target.copy_(tensor)

    def publish(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Copy in the weights of policy ``version``; later completions are stamped with it.

        A generator that shares its model with the trainer (built on a loaded model) cannot
        generate while the trainer updates: give asynchronous training one built from a folder.
        """
        self.update_weights(named_tensors)
        self.policy_version = version

    def sleep(self) -> None:
        """Nothing to free: the model is also the trainer's or lives on the CPU."""

    def wake(self) -> None:
        """See :meth:`sleep`."""

    def close(self) -> None:
        self.model = None

    # ------------------------------------------------------------------ helpers
    def _decode(self, prompts: list[list[int]], specs: list[SamplingSpec]) -> list[Completion]:
        """Decode every row to its own stop token or budget; one forward pass per new token."""
        torch = self._torch
        width = max(len(prompt) for prompt in prompts)
        input_ids = torch.full((len(prompts), width), self._pad_id, dtype=torch.long)  # (B, T)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)  # (B, T)
        for row, prompt in enumerate(prompts):
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            attention_mask[row, width - len(prompt) :] = 1
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (B, T)
        rows = [_Row(self, prompt, spec) for prompt, spec in zip(prompts, specs, strict=True)]
        sampler = _Sampler(torch, specs)
        cache = None
        with torch.no_grad():
            while not all(row.done for row in rows):
                output = self.model(
                    input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                    past_key_values=cache, use_cache=True, logits_to_keep=1,
                )
                cache = output.past_key_values
                active = [not row.done for row in rows]
                # (B,), (B,), (B, V)
                tokens, logprobs, distributions = sampler.draw(output.logits[:, -1, :].float(), active)
                for row, token, logprob, distribution in zip(
                    rows, tokens.tolist(), logprobs.tolist(), distributions, strict=True
                ):
                    row.add(token, logprob, distribution)
                input_ids = tokens.unsqueeze(-1)  # (B, 1)
                attention_mask = torch.cat([attention_mask, attention_mask.new_ones((len(rows), 1))], dim=-1)
                position_ids = position_ids[:, -1:] + 1  # (B, 1)
        return [row.completion(self.policy_version) for row in rows]


class _Row:
    """One request's tokens so far and when it ends."""

    def __init__(self, generator: HfGenerator, prompt: list[int], spec: SamplingSpec) -> None:
        self.budget = max(1, min(spec.max_tokens, generator.max_model_len - len(prompt)))
        self.stop_ids = set(generator.eos_token_ids) | set(spec.stop_token_ids)
        self.stop_texts = spec.stop
        self.decode = generator.tokenizer.decode
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        #: A one-token choice reports the distribution its token was drawn from (Completion.choice_logprobs).
        self.allowed = spec.allowed_token_ids if spec.max_tokens == 1 and spec.temperature > 0 else ()
        self.choice_logprobs: tuple[float, ...] | None = None
        self.stopped = False
        self.done = False

    def add(self, token: int, logprob: float, distribution: Any) -> None:
        """Append ``token``, drawn with ``logprob`` from ``distribution`` (log-probabilities over the vocabulary)."""
        if self.done:
            return
        self.tokens.append(token)
        self.logprobs.append(logprob)
        if self.allowed:
            self.choice_logprobs = tuple(distribution[list(self.allowed)].tolist())
        self.stopped = token in self.stop_ids or self._holds_stop_text()
        self.done = self.stopped or len(self.tokens) >= self.budget

    def _holds_stop_text(self) -> bool:
        if not self.stop_texts:
            return False
        text = self.decode(self.tokens, skip_special_tokens=True)  # as vLLM's detokenizer reads it
        return any(stop in text for stop in self.stop_texts)

    def completion(self, version: int | None) -> Completion:
        """The row's completion; every token stamped ``version`` (one call samples with one set of weights)."""
        reason = "stop" if self.stopped else "length"
        versions = None if version is None else (version,) * len(self.tokens)
        return Completion(
            tuple(self.tokens), tuple(self.logprobs), reason, policy_versions=versions,
            choice_logprobs=self.choice_logprobs,
        )


class _Sampler:
    """Next tokens for a batch whose rows each have their own sampling settings and RNG.

    Temperature, top-k and top-p are applied row by row in one batched pass (the order
    transformers and vLLM use); each sampled row then draws from its own ``torch.Generator``
    when it has a seed, else from torch's global RNG.
    """

    def __init__(self, torch: Any, specs: list[SamplingSpec]) -> None:
        self.torch = torch
        self.greedy = torch.tensor([spec.temperature == 0 for spec in specs])  # (B,)
        self.temperature = torch.tensor([spec.temperature or 1.0 for spec in specs]).unsqueeze(-1)  # (B, 1)
        self.top_k = [spec.top_k for spec in specs]
        self.top_p = torch.tensor([spec.top_p for spec in specs]).unsqueeze(-1)  # (B, 1)
        self.allowed = [spec.allowed_token_ids for spec in specs]
        self.generators = [
            torch.Generator().manual_seed(spec.seed) if spec.seed is not None and spec.temperature > 0 else None
            for spec in specs
        ]

    def draw(self, logits: Any, active: list[bool]) -> tuple[Any, Any, Any]:
        """``logits`` ``(B, V)`` -> next tokens ``(B,)``, their logprobs ``(B,)``, the distributions drawn from ``(B, V)``.

        Only ``active`` rows draw (a finished row's token is ignored), so no RNG, global or
        a row's own, advances for a row that has already ended.
        """
        torch = self.torch
        processed = self._process(logits)  # (B, V)
        logprobs = torch.log_softmax(processed, dim=-1)  # (B, V)
        tokens = processed.argmax(dim=-1)  # (B,)
        probabilities = logprobs.exp()
        for row, generator in enumerate(self.generators):
            if active[row] and not self.greedy[row]:
                tokens[row] = torch.multinomial(probabilities[row], 1, generator=generator)[0]
        return tokens, logprobs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1), logprobs

    def _process(self, logits: Any) -> Any:
        torch = self.torch
        scaled = torch.where(self.greedy.unsqueeze(-1), logits, logits / self.temperature)  # (B, V)
        for row, allowed in enumerate(self.allowed):
            if allowed:
                kept = torch.full_like(scaled[row], -math.inf)
                kept[list(allowed)] = scaled[row, list(allowed)]
                scaled[row] = kept
        for row, top_k in enumerate(self.top_k):
            if 0 < top_k < scaled.shape[-1] and not self.greedy[row]:
                kth = torch.topk(scaled[row], top_k).values[-1]
                scaled[row] = scaled[row].masked_fill(scaled[row] < kth, -math.inf)
        nucleus = (self.top_p < 1.0).squeeze(-1) & ~self.greedy  # (B,)
        if nucleus.any():
            ordered, order = scaled[nucleus].sort(dim=-1, descending=True)  # (N, V)
            probabilities = ordered.softmax(dim=-1)
            # Drop a token once the mass before it already reaches top_p (the first always stays).
            drop = probabilities.cumsum(dim=-1) - probabilities >= self.top_p[nucleus]
            ordered = ordered.masked_fill(drop, -math.inf)
            scaled[nucleus] = torch.empty_like(ordered).scatter(-1, order, ordered)
        return scaled


def _eos_token_ids(model: Any, tokenizer: Any) -> tuple[int, ...]:
    ids: list[int] = []
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in configured if isinstance(configured, list) else [configured]:
        if isinstance(value, int) and value not in ids:
            ids.append(value)
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return tuple(ids)
