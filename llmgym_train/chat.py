"""Chat-template token handling for token-exact multi-turn rollouts.

A multi-turn episode is one growing token sequence::

    prompt(system + first observation + generation prompt)
    generated tokens of turn 0 (as sampled, ending with the end-of-turn token)
    observation tokens of turn 1 (rest of the assistant suffix + user turn + generation prompt)
    generated tokens of turn 1
    ...

Generated tokens are never re-tokenized. The observation tokens are computed as the
difference of two renderings of a probe conversation (with and without the new user turn),
so that the whole sequence equals the tokenizer's encoding of the rendered conversation on
templates that render stably (each rendering a prefix of the next). The template is checked
once, when :class:`ChatTokens` is built: a template that rewrites earlier turns (or does not
render stably) fails then, with the reason, rather than producing silently wrong samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmgym.error import InvalidOptionError

Message = dict[str, str]

_PROBE_USER = "Probe question?"
_PROBE_ASSISTANT = "Probe reply."
_PROBE_FEEDBACK = "Probe feedback."


class ChatTemplateError(InvalidOptionError):
    """The tokenizer's chat template cannot be extended turn by turn token-exactly."""


class ChatTokens:
    """Token ids of the pieces of a multi-turn conversation, for one tokenizer and its chat template.

    Arguments:
        tokenizer: a transformers tokenizer with a chat template.
        end_of_turn_ids: token ids the model ends its turn with (default: the tokenizer's
            ``eos_token_id``). A completion that ends with one of them gets only the rest of
            the template's assistant suffix appended; one cut at ``max_tokens`` gets all of it.
        response_prefix: text every assistant turn starts with, written after the generation
            prompt as part of the prompt (so never trained), e.g. ``"<answer>"``: the model
            then only completes the answer. The env reads prefix + completion
            (:meth:`action_text`), and the conversation's assistant messages hold the same.
    """

    def __init__(
        self, tokenizer: Any, end_of_turn_ids: Sequence[int] | None = None, response_prefix: str = ""
    ) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ChatTemplateError(
                f"Tokenizer {type(tokenizer).__name__} has no chat_template; expected an instruct/chat "
                "tokenizer. Set tokenizer.chat_template to a Jinja template (see transformers' chat "
                "templating docs) or use an instruct model."
            )
        self.tokenizer = tokenizer
        self.response_prefix = ""  # the template is checked bare; the prefix is plain text after it
        if end_of_turn_ids is None:
            if tokenizer.eos_token_id is None:
                raise ChatTemplateError("The tokenizer has no eos_token_id; pass end_of_turn_ids explicitly.")
            end_of_turn_ids = [tokenizer.eos_token_id]
        self.end_of_turn_ids = tuple(end_of_turn_ids)
        self._eos_texts = {token: tokenizer.decode([token]) for token in self.end_of_turn_ids}
        self._supports_system = self._renders_system_role()
        self._assistant_suffix = self._find_assistant_suffix()
        self._validate()
        self.response_prefix = response_prefix

    # ------------------------------------------------------------------ public API
    def prompt(self, first_observation: str, system_prompt: str | None = None) -> list[int]:
        """Tokens of the system prompt + first user turn + generation prompt (+ the response prefix)."""
        rendered = self.render(self.messages(first_observation, system_prompt), add_generation_prompt=True)
        return self.encode(rendered + self.response_prefix)

    def observation(self, text: str, after_token: int | None) -> list[int]:
        """Tokens to append after a generated turn so the model sees ``text`` as the next user turn.

        ``after_token`` is the last generated token: when it is an end-of-turn token the model
        already produced the start of the assistant suffix; otherwise (cut at ``max_tokens``,
        or an empty turn) the whole suffix is appended.
        """
        suffix = self._assistant_suffix
        eos_text = self._eos_texts.get(after_token) if after_token is not None else None
        if eos_text is not None:
            position = suffix.find(eos_text)
            if position != -1:
                suffix = suffix[position + len(eos_text) :]
        return self.encode(suffix + self._user_turn_text(text) + self.response_prefix)

    def decode(self, token_ids: Sequence[int]) -> str:
        """The text of generated tokens (special tokens dropped)."""
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)

    def choice_token_ids(self, choices: Sequence[str]) -> tuple[int, ...]:
        """The one token each of ``choices`` is, written right after the response prefix.

        Raises :class:`~llmgym.error.InvalidOptionError` when a choice is not exactly one token
        there (a choice among actions samples a single token per turn) or two share a token.
        """
        before = self.encode(self.response_prefix) if self.response_prefix else []
        ids: list[int] = []
        for choice in choices:
            tokens = self.encode(self.response_prefix + choice)
            own = tokens[len(before) :] if tokens[: len(before)] == before else tokens
            if len(own) != 1 or tokens[: len(before)] != before:
                raise InvalidOptionError(
                    f"rollout.choices: {choice!r} after the response prefix {self.response_prefix!r} is the tokens "
                    f"{own}, expected exactly one token. Fix: choose replies that are single tokens for this "
                    "tokenizer (e.g. the env's action names), or leave rollout.choices empty."
                )
            ids.append(own[0])
        if len(set(ids)) != len(ids):
            raise InvalidOptionError(f"rollout.choices {list(choices)} share tokens {ids}; each needs its own token.")
        return tuple(ids)

    def action_text(self, token_ids: Sequence[int]) -> str:
        """A turn's text as the env reads it and the conversation records it: response prefix + completion."""
        return self.response_prefix + self.decode(token_ids)

    def encode(self, text: str) -> list[int]:
        """Tokenize rendered template text (special tokens in the text are parsed, none added)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def messages(self, first_observation: str, system_prompt: str | None = None) -> list[Message]:
        """The opening messages; a system prompt is folded into the user turn where the template has no system role."""
        if not system_prompt:
            return [{"role": "user", "content": first_observation}]
        if self._supports_system:
            return [{"role": "system", "content": system_prompt}, {"role": "user", "content": first_observation}]
        return [{"role": "user", "content": f"{system_prompt}\n\n{first_observation}"}]

    def render(self, messages: list[Message], add_generation_prompt: bool) -> str:
        """The template's text for ``messages``."""
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)

    # ------------------------------------------------------------------ template analysis
    def _user_turn_text(self, text: str) -> str:
        """Text the template adds for a new user turn + generation prompt after a finished assistant turn."""
        history = [
            {"role": "user", "content": _PROBE_USER},
            {"role": "assistant", "content": _PROBE_ASSISTANT},
        ]
        before = self.render(history, add_generation_prompt=False)
        after = self.render([*history, {"role": "user", "content": text}], add_generation_prompt=True)
        if not after.startswith(before):
            raise ChatTemplateError(
                "The chat template does not render stably: adding a user turn changed the text of earlier "
                f"turns (expected the rendering to start with {before[-80:]!r}, got {after[: len(before)][-80:]!r}). "
                "Token-exact multi-turn rollout needs a template whose renderings extend each other; "
                "use another template or single-turn episodes."
            )
        return after[len(before) :]

    def _find_assistant_suffix(self) -> str:
        """What the template writes after an assistant message's content (e.g. ``<|im_end|>\\n``)."""
        history = [{"role": "user", "content": _PROBE_USER}]
        opened = self.render(history, add_generation_prompt=True)
        closed = self.render([*history, {"role": "assistant", "content": _PROBE_ASSISTANT}], add_generation_prompt=False)
        expected_start = opened + _PROBE_ASSISTANT
        if not closed.startswith(expected_start):
            raise ChatTemplateError(
                "The chat template renders an assistant reply differently from its generation prompt "
                f"followed by the reply (expected a prefix {expected_start[-80:]!r}, got {closed[: len(expected_start)][-80:]!r}); "
                "token-exact rollout needs the generation prompt to be the start of the assistant turn."
            )
        return closed[len(expected_start) :]

    def _renders_system_role(self) -> bool:
        try:
            text = self.render(
                [{"role": "system", "content": "Probe system."}, {"role": "user", "content": _PROBE_USER}],
                add_generation_prompt=True,
            )
        except Exception:  # templates without a system role raise from inside Jinja
            return False
        return "Probe system." in text

    def _validate(self) -> None:
        """Check that turn-by-turn tokens equal the encoding of the rendered conversation."""
        eos = self.end_of_turn_ids[0]
        reply = self.encode(_PROBE_ASSISTANT) + [eos]
        tokens = self.prompt(_PROBE_USER, "Probe system.") + reply
        tokens += self.observation(_PROBE_FEEDBACK, eos) + reply
        messages = self.messages(_PROBE_USER, "Probe system.") + [
            {"role": "assistant", "content": _PROBE_ASSISTANT},
            {"role": "user", "content": _PROBE_FEEDBACK},
            {"role": "assistant", "content": _PROBE_ASSISTANT},
        ]
        expected = self.encode(self.render(messages, add_generation_prompt=False))
        if expected[: len(tokens)] != tokens:
            first = next(
                (i for i, (a, b) in enumerate(zip(tokens, expected, strict=False)) if a != b), min(len(tokens), len(expected))
            )
            raise ChatTemplateError(
                "Turn-by-turn tokens differ from the tokenization of the rendered conversation at position "
                f"{first}: expected {expected[first:first + 8]}, got {tokens[first:first + 8]}. The template or "
                "tokenizer merges text across turn boundaries, or the end-of-turn token is not what the "
                f"template writes after a reply (end_of_turn_ids={list(self.end_of_turn_ids)})."
            )
