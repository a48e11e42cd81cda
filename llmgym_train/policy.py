"""The trained model: loading (full or LoRA), the scoring forward pass, and weights for the generator.

:class:`Policy` owns the torch side of training: a causal LM (optionally wrapped in peft
LoRA adapters), an optional :class:`~llmgym_train.value.ValueHead`, and a frozen reference
for the KL term. With LoRA the reference costs nothing: it is the same model with the
adapters switched off. The generator always receives plain HF parameter names with
adapters merged, so vLLM never needs to know about LoRA.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from llmgym_train.algorithms.losses import entropy_from_logits, token_logprobs
from llmgym_train.config import ModelConfig
from llmgym_train.value import ValueHead


def choose_dtype(name: str) -> torch.dtype:
    """``auto`` is bfloat16 on a GPU and float32 on CPU (CPU bf16 training is slow and lossy)."""
    if name == "auto":
        return torch.bfloat16 if torch.cuda.is_available() else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[name]


class Policy:
    """A causal LM being trained, with its tokenizer, optional value head and reference.

    Arguments:
        model: a transformers causal LM (possibly a peft model).
        tokenizer: its tokenizer (gives the pad id).
        value_head: PPO's critic head, or ``None``.
        with_reference: keep a frozen reference for the KL term.
        autocast: run the forward passes under CPU autocast to this dtype (see :func:`choose_autocast`).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        value_head: ValueHead | None,
        with_reference: bool,
        autocast: torch.dtype | None = None,
    ) -> None:
        self.model = model
        self.autocast = autocast
        self._selective_head = _has_plain_head(model)
        self.tokenizer = tokenizer
        self.value_head = value_head
        self.is_lora = hasattr(model, "disable_adapter") and hasattr(model, "peft_config")
        #: When set, the policy is the model's distribution renormalized over these tokens (a
        #: choice among actions, see ``rollout.choices``): every generated token is one of them.
        self.allowed_token_ids: torch.Tensor | None = None
        #: The temperature of that choice: the policy is ``softmax(logits[allowed] / choice_temperature)``,
        #: the distribution the rollouts sample from at ``rollout.temperature``.
        self.choice_temperature = 1.0
        self.reference = None
        if with_reference and not self.is_lora:
            self.reference = copy.deepcopy(model).eval().requires_grad_(False)
        pad = tokenizer.pad_token_id
        self.pad_token_id = int(pad if pad is not None else tokenizer.eos_token_id)

    @classmethod
    def load(cls, folder: str | Path, options: ModelConfig, *, with_value: bool, with_reference: bool) -> Policy:
        """Load the HF model in ``folder`` for training, as ``options`` says."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=choose_dtype(options.dtype))
        if options.gradient_checkpointing:
            model.gradient_checkpointing_enable()
            model.config.use_cache = False
        if options.lora:
            model = _with_lora(model, options)
        value_head = ValueHead(model.config.hidden_size) if with_value else None
        autocast = choose_autocast(options.autocast, choose_dtype(options.dtype))
        return cls(model, tokenizer, value_head, with_reference, autocast)

    # ------------------------------------------------------------------ training side
    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        parameters = [p for p in self.model.parameters() if p.requires_grad]
        if self.value_head is not None:
            parameters += list(self.value_head.parameters())
        return parameters

    def train(self) -> None:
        self.model.train()

    def score(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        *,
        positions: torch.Tensor | None = None,
        values: bool = False,
        entropy: bool = False,
        entropy_grad: bool = False,
    ) -> dict[str, torch.Tensor]:
        """Per-token logprobs of ``input_ids`` (and values / entropy of the next-token distribution), aligned to tokens.

        ``logprobs[:, t] = log p(input_ids[:, t] | input_ids[:, :t])`` with ``logprobs[:, 0] = 0``
        (the first token is never generated).

        Args:
            input_ids: ``(B, T)`` right-padded.
            attention_mask: ``(B, T)``.
            positions: ``(B, T)``, nonzero at the tokens whose logprob (and entropy) is wanted,
                usually the generated ones; elsewhere both read 0. The LM head, a fifth of a
                small model's compute and most of its activation memory, then runs only there.
                ``None``: every position.
        """
        with self._autocast():
            hidden, logits, wanted = self._forward(
                self.model, input_ids, attention_mask, positions, merge_last_token=not values
            )
            logits, targets = self._restrict(logits, input_ids[:, 1:][wanted])
            result = {"logprobs": _place(token_logprobs(logits, targets), wanted)}  # (B, T)
            if entropy:  # (B, T); with a gradient only when an entropy bonus is trained
                with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                    result["entropy"] = _place(entropy_from_logits(logits), wanted)
            if values:
                assert self.value_head is not None, "values requested from a policy without a value head"
                result["values"] = self.value_head(hidden.float())  # (B, T)
        return result

    @torch.no_grad()
    def reference_logprobs(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``(B, T)`` logprobs under the frozen reference (the base model with LoRA off); see :meth:`score`."""
        with self._autocast():
            if self.is_lora:
                with self.model.disable_adapter():
                    _, logits, wanted = self._forward(self.model, input_ids, attention_mask, positions)
            else:
                assert self.reference is not None, "reference logprobs need with_reference=True"
                _, logits, wanted = self._forward(self.reference, input_ids, attention_mask, positions)
            logits, targets = self._restrict(logits, input_ids[:, 1:][wanted])
            return _place(token_logprobs(logits, targets), wanted)

    def _restrict(self, logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits ``(N, V)`` and targets ``(N,)`` over the allowed tokens only ``(N, K)``, ``(N,)`` (or unchanged)."""
        allowed = self.allowed_token_ids
        if allowed is None:
            return logits, targets
        matches = targets.unsqueeze(-1) == allowed.to(targets.device)  # (N, K)
        if not bool(matches.any(dim=-1).all()):
            stray = sorted(set(targets[~matches.any(dim=-1)].tolist()))
            raise ValueError(
                f"Generated tokens {stray[:8]} are not among the allowed choices {allowed.tolist()}: samples "
                "scored under rollout.choices must come from a generator restricted to them."
            )
        return logits[:, allowed.to(logits.device)] / self.choice_temperature, matches.float().argmax(dim=-1)

    def _autocast(self) -> Any:
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.autocast is not None)

    def _forward(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        positions: torch.Tensor | None,
        merge_last_token: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Final hidden states ``(B, T, H)``, the logits that predict the wanted tokens ``(N, V)``, and ``wanted`` ``(B, T-1)``.

        ``wanted[:, t]`` marks token ``t + 1``, predicted by position ``t``. With
        ``merge_last_token``, rows that differ in their last token only run once (see
        :func:`same_context_rows`); the hidden state at a row's last token is then its
        representative's, which no logit reads (callers that read it, the value head, pass False).
        """
        batch, width = input_ids.shape
        if positions is None:
            wanted = torch.ones((batch, width - 1), dtype=torch.bool, device=input_ids.device)
        else:
            wanted = positions[:, 1:].bool()
        if self._selective_head:
            decoder = model.get_decoder()
            if merge_last_token:
                unique, inverse = same_context_rows(input_ids, attention_mask)
            if merge_last_token and len(unique) < batch:
                hidden = self._decode(decoder, input_ids[unique], attention_mask[unique])[inverse]
            else:
                hidden = self._decode(decoder, input_ids, attention_mask)
            return hidden, model.get_output_embeddings()(hidden[:, :-1][wanted]), wanted
        outputs = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        return outputs.hidden_states[-1], outputs.logits[:, :-1][wanted], wanted

    def _decode(self, decoder: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The decoder's final hidden states ``(B, T, H)``; a prefix every row shares runs once.

        Rows of a batch often begin with the same tokens (the system prompt and the chat
        template's header: about half of each turn sample of a grid env). That prefix is run
        once, its keys and values repeated over the batch, and only the rows' own tokens are
        run against them: the same function of the weights (causal attention: a prefix never
        sees what follows it), so logprobs and gradients are those of the full forward, up to
        float rounding, at the cost of the unshared tokens only.
        """
        batch, width = input_ids.shape
        shared = shared_prefix_length(input_ids, attention_mask)
        if batch < 2 or shared < MIN_SHARED_PREFIX or getattr(decoder, "gradient_checkpointing", False):
            return decoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        head = decoder(input_ids=input_ids[:1, :shared], use_cache=True)
        cache = head.past_key_values
        cache.batch_repeat_interleave(batch)
        tail = decoder(input_ids=input_ids[:, shared:], attention_mask=attention_mask, past_key_values=cache, use_cache=True)
        return torch.cat([head.last_hidden_state.expand(batch, -1, -1), tail.last_hidden_state], dim=1)

    # ------------------------------------------------------------------ generator side
    def export_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """HF-named weights for the generator (LoRA merged in), detached; the model is left untouched."""
        if not self.is_lora:
            for name, tensor in self.model.state_dict().items():
                yield name, tensor.detach()
            return
        # base + delta computed aside: merging in place and unmerging after would leave the
        # base weights off by float rounding, a little more after every export.
        from peft.tuners.lora import LoraLayer

        base = self.model.get_base_model()
        deltas = {
            f"{name}.base_layer.weight": sum(module.get_delta_weight(adapter) for adapter in module.active_adapters)
            for name, module in base.named_modules()
            if isinstance(module, LoraLayer) and module.active_adapters
        }
        with torch.no_grad():
            for name, tensor in base.state_dict().items():
                if "lora_" in name:
                    continue
                merged = tensor + deltas[name].to(tensor.dtype) if name in deltas else tensor
                yield name.replace(".base_layer.", "."), merged.detach()

    # ------------------------------------------------------------------ checkpoints
    def trainable_state(self) -> dict[str, Any]:
        """What a checkpoint must hold to restore training: trained weights and the value head."""
        if self.is_lora:
            from peft import get_peft_model_state_dict

            weights = get_peft_model_state_dict(self.model)
        else:
            weights = self.model.state_dict()
        state = {"weights": {name: tensor.detach().clone() for name, tensor in weights.items()}}
        if self.value_head is not None:
            state["value_head"] = self.value_head.state_dict()
        return state

    def load_trainable_state(self, state: dict[str, Any]) -> None:
        if self.is_lora:
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(self.model, state["weights"])
        else:
            self.model.load_state_dict(state["weights"])
        if self.value_head is not None:
            self.value_head.load_state_dict(state["value_head"])

    def save_pretrained(self, folder: Path) -> None:
        """Save the policy as a plain HF model folder with its tokenizer (LoRA merged in): what vLLM and transformers load.

        The value head is not part of it (the trainer's checkpoint holds it).
        """
        if self.is_lora:
            self.model.get_base_model().save_pretrained(folder, state_dict=dict(self.export_weights()))
        else:
            self.model.save_pretrained(folder)
        self.tokenizer.save_pretrained(folder)


#: Shortest prefix shared by all rows of a batch that :meth:`Policy._decode` runs once.
MIN_SHARED_PREFIX = 16


def shared_prefix_length(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> int:
    """Tokens every row begins with, inside every row's attention mask, leaving each row one token of its own.

    Args:
        input_ids: ``(B, T)`` right-padded.
        attention_mask: ``(B, T)``.
    """
    same = ((input_ids == input_ids[:1]) & attention_mask.bool()).all(dim=0)  # (T,)
    differs = (~same).nonzero()
    length = int(differs[0]) if len(differs) else input_ids.shape[1]
    return min(length, int(attention_mask.sum(dim=1).min()) - 1)


def same_context_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows to run, ``(U,)``, and each row's representative among them, ``(B,)``: rows alike but for their last token share one.

    Under causal attention a position never sees what follows it, so two rows of the same
    length whose tokens agree everywhere but at the last have the same hidden states at every
    earlier position, and those predict every token of both rows (the last included). In turn
    samples of a grid env one state is often visited by several episodes of a group: the same
    prompt with another chosen action. Indexing the representatives' hidden states back out
    sums the duplicates' gradients into them, so gradients are those of the full batch.

    Args:
        input_ids: ``(B, T)`` right-padded.
        attention_mask: ``(B, T)``.
    """
    lengths = attention_mask.sum(dim=1)  # (B,)
    keys = torch.where(attention_mask.bool(), input_ids, -1)  # (B, T)
    keys[torch.arange(len(keys)), (lengths - 1).clamp(min=0)] = -2
    _, inverse = torch.unique(keys, dim=0, return_inverse=True)  # (B,) numbered in sorted key order
    first = torch.full((int(inverse.max()) + 1,), len(keys), dtype=torch.long)
    first = first.scatter_reduce(0, inverse, torch.arange(len(keys)), reduce="amin")  # each key's first row
    order = torch.argsort(first)  # representatives in batch order: the rows stay sorted by length
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order))
    return first[order], rank[inverse]


def _place(picked: torch.Tensor, wanted: torch.Tensor) -> torch.Tensor:
    """Per-token values ``(N,)`` at ``wanted`` ``(B, T-1)`` -> ``(B, T)`` aligned to tokens, 0 elsewhere."""
    placed = picked.new_zeros(wanted.shape)
    placed[wanted] = picked
    return torch.nn.functional.pad(placed, (1, 0))


def _has_plain_head(model: Any) -> bool:
    """Whether logits are exactly ``lm_head(decoder(...))``, so the head can run on chosen positions only."""
    config = getattr(model, "config", None)
    return (
        callable(getattr(model, "get_decoder", None))
        and model.get_output_embeddings() is not None
        and not getattr(config, "final_logit_softcapping", None)
        and getattr(config, "logit_scale", None) in (None, 1.0)
    )


def choose_autocast(name: str, parameter_dtype: torch.dtype) -> torch.dtype | None:
    """The autocast dtype for ``model_options.autocast`` (``None``: no autocast).

    ``auto`` turns bfloat16 autocast on for float32 parameters on a CPU with native bfloat16
    (AVX512-BF16 or AMX), where matmuls run about twice as fast; GPUs train in bfloat16
    parameters already.
    """
    if name == "off" or parameter_dtype != torch.float32:
        return None
    if name == "bfloat16":
        return torch.bfloat16
    native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    return torch.bfloat16 if native and not torch.cuda.is_available() else None


def _with_lora(model: Any, options: ModelConfig) -> Any:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as error:
        from llmgym.error import DependencyNotInstalled

        raise DependencyNotInstalled("LoRA training needs peft; run `pip install peft`.") from error
    config = LoraConfig(
        r=options.lora_rank,
        lora_alpha=options.lora_alpha,
        target_modules=list(options.lora_target_modules),
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)
