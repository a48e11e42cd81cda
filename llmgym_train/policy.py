"""The trained model: loading (full or LoRA), the scoring forward pass, and weights for the generator.

:class:`Policy` owns the torch side of training: a causal LM (optionally wrapped in peft
LoRA adapters), an optional :class:`~llmgym_train.value.ValueHead`, and a frozen reference
for the KL term. With LoRA the reference costs nothing: it is the same model with the
adapters switched off. The generator always receives plain HF parameter names with
adapters merged, so vLLM never needs to know about LoRA.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

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
        head_chunk_tokens: positions whose full-vocabulary logits are alive at once (see
            :func:`head_scores`); 0: all of a pass's at once.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        value_head: ValueHead | None,
        with_reference: bool,
        autocast: torch.dtype | None = None,
        head_chunk_tokens: int = 256,
    ) -> None:
        self.model = model
        self.autocast = autocast
        self.head_chunk_tokens = head_chunk_tokens
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
            model.gradient_checkpointing_enable()  # the training forwards pass use_cache=False themselves
        if options.lora:
            model = _with_lora(model, options)
        if options.frozen_layers:
            freeze_lower_layers(model, options.frozen_layers)
        value_head = ValueHead(model.config.hidden_size) if with_value else None
        autocast = choose_autocast(options.autocast, choose_dtype(options.dtype))
        return cls(model, tokenizer, value_head, with_reference, autocast, options.head_chunk_tokens)

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
            hidden, features, head, wanted = self._forward(
                self.model, input_ids, attention_mask, positions, merge_last_token=not values
            )
            targets = self._choice_targets(input_ids[:, 1:][wanted])  # (N,)
            # entropy: (B, T), with a gradient only when an entropy bonus is trained
            logprobs, entropies = head_scores(
                self._choice_head(head), features, targets, self.head_chunk_tokens,
                entropy=entropy, entropy_grad=entropy_grad,
            )
            result = {"logprobs": _place(logprobs, wanted)}  # (B, T)
            if entropies is not None:
                result["entropy"] = _place(entropies, wanted)
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
                    _, features, head, wanted = self._forward(self.model, input_ids, attention_mask, positions)
                    return self._reference_scores(features, head, input_ids, wanted)
            assert self.reference is not None, "reference logprobs need with_reference=True"
            _, features, head, wanted = self._forward(self.reference, input_ids, attention_mask, positions)
            return self._reference_scores(features, head, input_ids, wanted)

    def _reference_scores(
        self, features: torch.Tensor, head: Callable[[torch.Tensor], torch.Tensor], input_ids: torch.Tensor,
        wanted: torch.Tensor,
    ) -> torch.Tensor:
        """``(B, T)`` logprobs of the wanted tokens from the head's inputs (see :meth:`_forward`)."""
        targets = self._choice_targets(input_ids[:, 1:][wanted])  # (N,)
        logprobs, _ = head_scores(self._choice_head(head), features, targets, self.head_chunk_tokens)
        return _place(logprobs, wanted)

    def _choice_head(self, head: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
        """The logits the policy samples from: ``head``'s ``(n, V)``, or over the allowed tokens only ``(n, K)``, tempered."""
        allowed = self.allowed_token_ids
        if allowed is None:
            return head
        temperature = self.choice_temperature

        def restricted(features: torch.Tensor) -> torch.Tensor:
            return head(features)[:, allowed.to(features.device)] / temperature  # (n, K)

        return restricted

    def _choice_targets(self, targets: torch.Tensor) -> torch.Tensor:
        """Targets ``(N,)`` as indices among the allowed tokens (or unchanged); a stray token is refused."""
        allowed = self.allowed_token_ids
        if allowed is None:
            return targets
        matches = targets.unsqueeze(-1) == allowed.to(targets.device)  # (N, K)
        if not bool(matches.any(dim=-1).all()):
            stray = sorted(set(targets[~matches.any(dim=-1)].tolist()))
            raise ValueError(
                f"Generated tokens {stray[:8]} are not among the allowed choices {allowed.tolist()}: samples "
                "scored under rollout.choices must come from a generator restricted to them."
            )
        return matches.float().argmax(dim=-1)

    def _autocast(self) -> Any:
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.autocast is not None)

    def _forward(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        positions: torch.Tensor | None,
        merge_last_token: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor, Callable[[torch.Tensor], torch.Tensor], torch.Tensor]:
        """Final hidden states ``(B, T, H)``, what predicts the wanted tokens ``(N, F)`` and the head that makes it logits, and ``wanted`` ``(B, T-1)``.

        With a plain head, the features are the final hidden states at the wanted positions and
        the head is the LM head, which :func:`head_scores` runs a chunk at a time; otherwise
        they are the model's own logits there and the head is the identity.
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
            return hidden, hidden[:, :-1][wanted], model.get_output_embeddings(), wanted
        outputs = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, use_cache=False)
        return outputs.hidden_states[-1], outputs.logits[:, :-1][wanted], _identity, wanted

    def _decode(self, decoder: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The decoder's final hidden states ``(B, T, H)``; a prefix every row shares runs once.

        Rows of a batch often begin with the same tokens (the system prompt and the chat
        template's header: about half of each turn sample of a grid env). That prefix is run
        once, its keys and values repeated over the batch, and only the rows' own tokens are
        run against them: the same function of the weights (causal attention: a prefix never
        sees what follows it), so logprobs and gradients are those of the full forward, up to
        float rounding, at the cost of the unshared tokens only. Under gradient checkpointing
        too: the caches are :class:`SharedPrefixLayer`'s, which a layer's replay in the
        backward leaves as its forward saw them.
        """
        batch, width = input_ids.shape
        shared = shared_prefix_length(input_ids, attention_mask)
        if batch < 2 or shared < MIN_SHARED_PREFIX or not _prefix_runs_once(decoder):
            return decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
        recorded = _shared_prefix_cache(decoder.config)
        with _checkpoints_with_cache(decoder):
            # use_cache=False: the caches are passed in (and transformers refuses True under checkpointing)
            head = decoder(input_ids=input_ids[:1, :shared], past_key_values=recorded, use_cache=False)
            repeated = [
                (layer.keys.repeat_interleave(batch, dim=0), layer.values.repeat_interleave(batch, dim=0))
                for layer in recorded.layers
            ]  # (B, heads, shared, head_dim) each
            tail = decoder(
                input_ids=input_ids[:, shared:], attention_mask=attention_mask,
                past_key_values=_shared_prefix_cache(decoder.config, repeated), use_cache=False,
            )
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


def _prefix_runs_once(decoder: Any) -> bool:
    """Whether :meth:`Policy._decode` may run a shared prefix once: plain (full-attention) key/value caches, and
    under gradient checkpointing layers that take a cache (transformers' ``_can_checkpoint_with_cache``)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer
    from transformers.modeling_layers import GradientCheckpointingLayer

    layers = DynamicCache(config=decoder.config).layers
    if not layers or any(type(layer) is not DynamicLayer for layer in layers):
        return False  # sliding windows and other caches: the full forward
    checkpointed = any(getattr(module, "gradient_checkpointing", False) for module in decoder.modules())
    return not checkpointed or hasattr(GradientCheckpointingLayer, "_can_checkpoint_with_cache")


@contextlib.contextmanager
def _checkpoints_with_cache(decoder: Any) -> Iterator[None]:
    """Let checkpointed layers take the shared-prefix caches (they drop any cache otherwise, as a replay would write it twice)."""
    layers = [module for module in decoder.modules() if hasattr(module, "_can_checkpoint_with_cache")]
    before = [vars(layer).get("_can_checkpoint_with_cache") for layer in layers]  # None: the class's value
    for layer in layers:
        layer._can_checkpoint_with_cache = True
    try:
        yield
    finally:
        for layer, value in zip(layers, before, strict=True):
            if value is None:
                del layer._can_checkpoint_with_cache
            else:
                layer._can_checkpoint_with_cache = value


def _shared_prefix_cache(config: Any, prefix: list[tuple[torch.Tensor, torch.Tensor]] | None = None) -> Any:
    """A ``DynamicCache`` of :class:`SharedPrefixLayer`: recording a prefix (``prefix`` None), or reading each layer's keys and values."""
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    layer_class = _shared_prefix_layer_class()
    cache.layers = [layer_class(None) for _ in cache.layers] if prefix is None else [layer_class(kv) for kv in prefix]
    return cache


@functools.cache
def _shared_prefix_layer_class() -> type:
    """:class:`SharedPrefixLayer`, made on first use so that importing this module does not import transformers."""
    from transformers.cache_utils import DynamicLayer

    class SharedPrefixLayer(DynamicLayer):
        """One layer's keys and values of a prefix shared by a batch's rows, safe to replay under gradient checkpointing.

        A checkpointed layer runs its forward again in the backward, cache update and all. Recording
        (``prefix`` None) sets the prefix's states, so a replay sets equal ones instead of appending;
        reading returns the prefix's states before the rows' own without storing those, so a replay
        sees the cache its forward saw. Values are ``DynamicLayer``'s: the concatenation it would hold.
        """

        def __init__(self, prefix: tuple[torch.Tensor, torch.Tensor] | None) -> None:
            super().__init__()
            self.reading = prefix is not None
            if prefix is not None:
                self.lazy_initialization(*prefix)
                self.keys, self.values = prefix  # (B, heads, shared, head_dim) each

        def update(
            self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
        ) -> tuple[torch.Tensor, torch.Tensor]:
            if self.reading:
                return torch.cat([self.keys, key_states], dim=-2), torch.cat([self.values, value_states], dim=-2)
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            self.keys, self.values = key_states, value_states
            return key_states, value_states

    return SharedPrefixLayer


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


def head_scores(
    head: Callable[[torch.Tensor], torch.Tensor],
    features: torch.Tensor,
    targets: torch.Tensor,
    chunk_tokens: int,
    *,
    entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logprobs of ``targets`` ``(N,)`` under ``head(features)``, and with ``entropy`` each distribution's entropy ``(N,)``.

    Runs ``chunk_tokens`` positions at a time (0: all at once). SmolLM2's logits are 49,152
    floats a position: at 1,000 generated tokens in a pass that is 200 MB, and the log-softmax,
    the entropy's terms and the gradients of each hold as much again. Under a gradient each
    chunk is checkpointed: only its inputs are kept, and the backward recomputes its logits, so
    one chunk's logits are alive at a time in either direction, for one more pass of the head.
    Each position's math is :func:`token_logprobs` and :func:`entropy_from_logits` on its own
    row, so results and gradients are the unchunked ones up to float rounding.

    Args:
        head: ``(n, F) -> (n, V)`` logits.
        features: ``(N, F)`` what the head reads at each position.
        targets: ``(N,)`` the token each position predicts, as an index into the head's logits.
        chunk_tokens: positions per chunk; 0: all.
        entropy: also return the entropies (else ``None``).
        entropy_grad: the entropies carry a gradient (an entropy bonus is trained).
    """
    size = chunk_tokens if chunk_tokens > 0 else max(len(features), 1)
    scores = functools.partial(_head_chunk, head, entropy=entropy, entropy_grad=entropy_grad)
    pieces = []
    for start in range(0, len(features), size) or [0]:  # one empty chunk keeps the graph of an empty pass
        chunk = (features[start : start + size], targets[start : start + size])  # (n, F), (n,)
        pieces.append(checkpoint(scores, *chunk, use_reentrant=False) if torch.is_grad_enabled() else scores(*chunk))
    logprobs = torch.cat([piece[0] for piece in pieces])  # (N,)
    return logprobs, torch.cat([piece[1] for piece in pieces]) if entropy else None


def _head_chunk(
    head: Callable[[torch.Tensor], torch.Tensor], features: torch.Tensor, targets: torch.Tensor, *,
    entropy: bool, entropy_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One chunk of :func:`head_scores`: logprobs ``(n,)`` and entropies ``(n,)`` (empty when not asked)."""
    logits = head(features)  # (n, V)
    logprobs = token_logprobs(logits, targets)  # (n,)
    if not entropy:
        return logprobs, logprobs.new_zeros(0)
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        return logprobs, entropy_from_logits(logits)  # (n,)


def _identity(features: torch.Tensor) -> torch.Tensor:
    return features


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


def freeze_lower_layers(model: Any, count: int) -> None:
    """Stop training the input embeddings and the first ``count`` decoder layers of a HF causal LM (or its LoRA wrap).

    A head tied to the embeddings stays frozen with them. Autograd then keeps no activations for the
    frozen layers, and the backward ends at layer ``count``.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = getattr(getattr(base, "model", None), "layers", None)
    if layers is None:
        raise ValueError(
            f"model_options.frozen_layers needs a decoder with a `model.layers` list; {type(base).__name__} has none. "
            "Set model_options.frozen_layers=0 to train every layer."
        )
    if count >= len(layers):
        raise ValueError(
            f"model_options.frozen_layers={count}, but the model has {len(layers)} decoder layers: "
            f"use at most {len(layers) - 1} to leave one to train."
        )
    base.get_input_embeddings().requires_grad_(False)
    for layer in layers[:count]:
        layer.requires_grad_(False)


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
