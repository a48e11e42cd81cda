"""Small real models for tests: a character-level tokenizer with a chat template and a tiny Llama.

Tests of the trainer need a policy that runs in seconds on a CPU and that can actually learn.
:func:`tiny_tokenizer` maps each printable ASCII character to one token, plus the special
tokens of a Llama-3 style chat template, so any text tokenizes the same way in any context
(token exactness holds trivially, which makes it a clean second template for the chat tests).
:func:`tiny_model` is a randomly initialized ``LlamaForCausalLM`` of a few hundred thousand
parameters over that vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: A Llama-3 style template: header tokens around the role, ``<|eot_id|>`` ends every turn and
#: nothing follows it (unlike ChatML's ``<|im_end|>\n``).
TINY_CHAT_TEMPLATE = (
    "{{ '<|begin_of_text|>' }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
TINY_SPECIAL_TOKENS = ("<|pad|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")


def tiny_tokenizer(words: Sequence[str] = ()) -> Any:
    """A character-level ``PreTrainedTokenizerFast`` (vocab: 5 specials + printable ASCII, newline, tab).

    ``words`` become one token each wherever they occur (added tokens, matched before the
    character split), so a choice among actions such as ``["Left", "Down", "Right", "Up"]``
    is one token per reply, as with a real tokenizer.
    """
    tokenizer = character_tokenizer(
        TINY_SPECIAL_TOKENS,
        pad_token="<|pad|>",
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        additional_special_tokens=["<|start_header_id|>", "<|end_header_id|>"],
    )
    tokenizer.chat_template = TINY_CHAT_TEMPLATE
    if words:
        tokenizer.add_tokens(list(words))
    return tokenizer


def character_tokenizer(specials: Sequence[str], **special_tokens: Any) -> Any:
    """A ``PreTrainedTokenizerFast`` whose vocab is ``specials``, then printable ASCII, newline and tab.

    ``special_tokens`` (``pad_token``, ``eos_token``, ...) go to the tokenizer's constructor.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    characters = [chr(code) for code in range(32, 127)] + ["\n", "\t"]
    vocab = {token: index for index, token in enumerate([*specials, *characters])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="?"))
    backend.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=backend, **special_tokens)


def tiny_model(
    vocab_size: int,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    max_positions: int = 2048,
    seed: int = 0,
) -> Any:
    """A randomly initialized ``LlamaForCausalLM`` (float32) for ``vocab_size`` tokens."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=4,
        pad_token_id=0,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.eval()


def save_tiny_model(folder: str | Path, *, seed: int = 0, words: Sequence[str] = (), num_heads: int = 4) -> Path:
    """Write the tiny tokenizer (with ``words`` as single tokens) and a tiny model into ``folder`` (an HF folder any backend loads).

    ``num_heads``: 2 gives heads of 32 dimensions, the smallest vLLM's CPU attention takes.
    """
    folder = Path(folder)
    tokenizer = tiny_tokenizer(words)
    model = tiny_model(len(tokenizer), seed=seed, num_heads=num_heads)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
