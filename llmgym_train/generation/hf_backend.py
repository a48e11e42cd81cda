"""The transformers generation backend, for machines without vLLM and for tiny test models.

Prompts are left-padded into one batch per distinct :class:`SamplingSpec`; the behavior
logprob of each sampled token is the log-softmax of the processed scores ``generate``
sampled from (after temperature / top-k / top-p), the same quantity vLLM reports with
``logprobs_mode="processed_logprobs"``.

Per-request seeds are not available in a batched ``generate``: requests that differ only in
their seed share a batch, and the first request's seed seeds torch's RNG for it (inside
``torch.random.fork_rng``, so the caller's RNG state is untouched). Unseeded batches draw
from torch's global RNG.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmgym.error import DependencyNotInstalled
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
        self._pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_token_ids[0]

    def generate(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingSpec | Sequence[SamplingSpec]
    ) -> list[Completion]:
        specs = per_prompt(sampling, len(prompts))
        results: list[Completion | None] = [None] * len(prompts)
        by_spec: dict[SamplingSpec, list[int]] = {}
        for index, spec in enumerate(specs):
            by_spec.setdefault(replace(spec, seed=None), []).append(index)
        for spec, indices in by_spec.items():
            seeded = replace(spec, seed=specs[indices[0]].seed)
            completions = self._generate_batch([prompts[i] for i in indices], seeded)
            for index, completion in zip(indices, completions, strict=True):
                results[index] = completion
        return [completion for completion in results if completion is not None]

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

    def sleep(self) -> None:
        """Nothing to free: the model is also the trainer's or lives on the CPU."""

    def wake(self) -> None:
        """See :meth:`sleep`."""

    def close(self) -> None:
        self.model = None

    # ------------------------------------------------------------------ helpers
    def _generate_batch(self, prompts: list[Sequence[int]], spec: SamplingSpec) -> list[Completion]:
        torch = self._torch
        width = max(len(prompt) for prompt in prompts)
        input_ids = torch.full((len(prompts), width), self._pad_id, dtype=torch.long)  # (B, T)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)  # (B, T)
        for row, prompt in enumerate(prompts):
            input_ids[row, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
            attention_mask[row, width - len(prompt) :] = 1
        stop_ids = list(self.eos_token_ids) + list(spec.stop_token_ids)
        max_new = max(1, min(spec.max_tokens, self.max_model_len - width))
        options: dict[str, Any] = {"do_sample": spec.temperature > 0}
        if spec.temperature > 0:
            options.update(temperature=spec.temperature, top_p=spec.top_p, top_k=spec.top_k if spec.top_k > 0 else 0)
        with torch.random.fork_rng(enabled=spec.seed is not None), torch.no_grad():
            if spec.seed is not None:
                torch.manual_seed(spec.seed)
            output = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                max_new_tokens=max_new,
                eos_token_id=stop_ids,
                pad_token_id=self._pad_id,
                output_scores=True,
                return_dict_in_generate=True,
                **options,
            )
        generated = output.sequences[:, width:]  # (B, N)
        scores = torch.stack(output.scores, dim=1).float()  # (B, N, V)
        logprobs = torch.log_softmax(scores, dim=-1).gather(-1, generated.unsqueeze(-1)).squeeze(-1)  # (B, N)
        return [_cut(generated[row].tolist(), logprobs[row].tolist(), set(stop_ids)) for row in range(len(prompts))]


def _cut(tokens: list[int], logprobs: list[float], stop_ids: set[int]) -> Completion:
    """The completion up to and including its first stop token (``generate`` pads after it)."""
    for position, token in enumerate(tokens):
        if token in stop_ids:
            return Completion(tuple(tokens[: position + 1]), tuple(logprobs[: position + 1]), "stop")
    return Completion(tuple(tokens), tuple(logprobs), "length")


def _eos_token_ids(model: Any, tokenizer: Any) -> tuple[int, ...]:
    ids: list[int] = []
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in configured if isinstance(configured, list) else [configured]:
        if isinstance(value, int) and value not in ids:
            ids.append(value)
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return tuple(ids)
