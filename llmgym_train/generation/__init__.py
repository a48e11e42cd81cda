"""Generation backends behind one :class:`Generator` protocol.

``make_generator("vllm", model_path)`` or ``make_generator("hf", model_path)``. Backends are
imported only when chosen; a missing package fails with the command that installs it.
:mod:`llmgym_train.generation.ray_engines` runs many of them in Ray actors as one generator,
with the weight transports that keep them in sync with the trainer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from llmgym.error import InvalidOptionError, did_you_mean
from llmgym_train.generation.base import (
    Completion,
    FinishReason,
    Generator,
    SamplingSpec,
    StreamingGenerator,
    VersionedGenerator,
    per_prompt,
)

BackendName = Literal["vllm", "hf"]
BACKENDS: tuple[BackendName, ...] = ("vllm", "hf")

__all__ = [
    "BACKENDS",
    "BackendName",
    "Completion",
    "FinishReason",
    "Generator",
    "SamplingSpec",
    "StreamingGenerator",
    "VersionedGenerator",
    "make_generator",
    "per_prompt",
]


def make_generator(
    name: BackendName,
    model: str | Path,
    *,
    max_model_len: int = 2048,
    dtype: Literal["bfloat16", "float32"] | None = None,
    seed: int = 0,
    own_process: bool = False,
) -> Generator:
    """Build the ``name`` backend on the HF model folder ``model``.

    Arguments:
        max_model_len: longest prompt + completion in tokens.
        dtype: inference dtype; ``None`` takes the backend's default (vllm: bfloat16 on GPUs, float32 on CPUs; hf:
            float32, whose logprobs match a float32 trainer's exactly).
        seed: the engine's sampling seed (vllm) for requests without their own.
        own_process: vllm: run the engine core in a process of its own (hf: refused, it has no engine process).
    """
    if name == "vllm":
        from llmgym_train.generation.vllm_backend import VllmGenerator

        return VllmGenerator(model, max_model_len=max_model_len, dtype=dtype, seed=seed, own_process=own_process)
    if name == "hf":
        if own_process:
            raise InvalidOptionError("own_process=True runs vLLM's engine core aside; the hf backend generates in this process.")
        from llmgym_train.generation.hf_backend import HfGenerator

        return HfGenerator(model, max_model_len=max_model_len, dtype=dtype or "float32")
    raise InvalidOptionError(
        f"Unknown generator backend {name!r}.{did_you_mean(str(name), BACKENDS)} Expected one of: {', '.join(BACKENDS)}."
    )
