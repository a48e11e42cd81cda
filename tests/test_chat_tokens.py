"""Chat-template token pieces: turn-by-turn tokens equal the encoding of the rendered conversation."""

from __future__ import annotations

from typing import Any

import pytest

from llmgym_train.chat import ChatTemplateError, ChatTokens

CONVERSATIONS = [
    # (system, [(user, assistant), ...])
    ("You play a grid game.", [("Move to the goal.\n#..\n.@.", "<answer>Up</answer>"), ("Moved up.", "Right then.")]),
    (None, [("What is 12+30?", "12 + 30 = 42."), ("Wrong, try again:", " 42"), ("Sure?", "Yes\n\n  42")]),
    ("Tabs\tand  spaces ", [("x", "y"), ("  leading space", "trailing space "), ("{json: [1, 2]}", "<tool_call>{}</tool_call>")]),
]


def build_turn_by_turn(chat: ChatTokens, system: str | None, turns: list[tuple[str, str]], cut_turns: set[int]) -> list[int]:
    """Tokens as a rollout builds them; replies in ``cut_turns`` end without the end-of-turn token."""
    tokens = chat.prompt(turns[0][0], system)
    for index, (_, reply) in enumerate(turns):
        generated = chat.encode(reply) + ([] if index in cut_turns else [chat.end_of_turn_ids[0]])
        tokens += generated
        if index + 1 < len(turns):
            tokens += chat.observation(turns[index + 1][0], generated[-1] if generated else None)
    return tokens


def rendered(chat: ChatTokens, system: str | None, turns: list[tuple[str, str]]) -> list[int]:
    messages = chat.messages(turns[0][0], system)
    for index, (user, reply) in enumerate(turns):
        if index:
            messages.append({"role": "user", "content": user})
        messages.append({"role": "assistant", "content": reply})
    return chat.encode(chat.render(messages, add_generation_prompt=False))


def assert_token_exact(chat: ChatTokens, system: str | None, turns: list[tuple[str, str]], cut_turns: set[int]) -> None:
    tokens = build_turn_by_turn(chat, system, turns, cut_turns)
    expected = rendered(chat, system, turns)
    assert tokens == expected[: len(tokens)]
    # Beyond the last reply the rendering holds the rest of the assistant suffix only: all of
    # it after a cut reply, what follows the end-of-turn token after a finished one.
    tail = chat.tokenizer.decode(expected[len(tokens) :])
    suffix = chat.render(chat.messages("u") + [{"role": "assistant", "content": "a"}], add_generation_prompt=False)
    suffix = suffix[suffix.rindex("a") + 1 :]
    eos_text = chat.tokenizer.decode(list(chat.end_of_turn_ids[:1]))
    assert tail == (suffix if len(turns) - 1 in cut_turns else suffix.split(eos_text, 1)[1])


@pytest.mark.parametrize("conversation", CONVERSATIONS)
@pytest.mark.parametrize("cut_turns", [set(), {0}])
def test_smollm2_template_turn_tokens_equal_rendering(smollm2_tokenizer: Any, conversation: Any, cut_turns: set[int]) -> None:
    system, turns = conversation
    assert_token_exact(ChatTokens(smollm2_tokenizer), system, turns, cut_turns)


@pytest.mark.parametrize("conversation", CONVERSATIONS)
@pytest.mark.parametrize("cut_turns", [set(), {0}])
def test_second_template_turn_tokens_equal_rendering(char_tokenizer: Any, conversation: Any, cut_turns: set[int]) -> None:
    """A Llama-3 style template: ``<|eot_id|>`` ends a turn and nothing follows it (ChatML adds a newline)."""
    system, turns = conversation
    assert_token_exact(ChatTokens(char_tokenizer), system, turns, cut_turns)


def test_observation_after_end_of_turn_completes_the_suffix(smollm2_tokenizer: Any) -> None:
    chat = ChatTokens(smollm2_tokenizer)
    after_stop = smollm2_tokenizer.decode(chat.observation("Next.", chat.end_of_turn_ids[0]))
    after_cut = smollm2_tokenizer.decode(chat.observation("Next.", None))
    assert after_stop == "\n<|im_start|>user\nNext.<|im_end|>\n<|im_start|>assistant\n"
    assert after_cut == "<|im_end|>" + after_stop


def test_prompt_is_template_with_generation_prompt(smollm2_tokenizer: Any) -> None:
    chat = ChatTokens(smollm2_tokenizer)
    text = smollm2_tokenizer.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], tokenize=False, add_generation_prompt=True
    )
    assert chat.prompt("U", "S") == smollm2_tokenizer.encode(text, add_special_tokens=False)
    assert smollm2_tokenizer.decode(chat.prompt("U", "S")).endswith("<|im_start|>assistant\n")


def test_template_without_system_role_folds_system_into_first_user_turn() -> None:
    from llmgym_train.testing import tiny_tokenizer  # a fresh one: the session fixture stays intact

    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('no system role') }}{% endif %}"
        "{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>' + m['content'] + '<|eot_id|>' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>' }}{% endif %}"
    )
    chat = ChatTokens(tokenizer)
    assert chat.messages("Task.", "Rules.") == [{"role": "user", "content": "Rules.\n\nTask."}]
    assert "Rules." in tokenizer.decode(chat.prompt("Task.", "Rules."))


def test_template_that_rewrites_history_is_rejected() -> None:
    from llmgym_train.testing import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    # Renders only the latest user message: adding a turn changes the earlier text.
    tokenizer.chat_template = (
        "{{ '<|start_header_id|>user<|end_header_id|>' + (messages | selectattr('role', 'equalto', 'user') | list)[-1]['content'] }}"
        "{% for m in messages if m['role'] == 'assistant' %}{{ m['content'] + '<|eot_id|>' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>' }}{% endif %}"
    )
    with pytest.raises(ChatTemplateError, match="render"):
        ChatTokens(tokenizer)


def test_tokenizer_without_template_is_rejected() -> None:
    from llmgym_train.testing import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = None
    with pytest.raises(ChatTemplateError, match="chat_template"):
        ChatTokens(tokenizer)
