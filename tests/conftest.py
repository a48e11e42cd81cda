"""Shared fixtures: the embedded model, its tokenizer, one vLLM engine per session, the tiny model.

Also: a skipped sandbox escape test fails the run unless ``LLMGYM_ALLOW_SANDBOX_SKIP=1``.

Everything here is created on first use: a test session that does not
ask for the vLLM engine never imports vLLM, and one that does starts it once (about 35 s on a
2-core CPU) and shares it between all tests, which run last (``pytest_collection_modifyitems``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: Set to 1 to let sandbox escape tests be skipped (say, on a machine without user namespaces).
ALLOW_SANDBOX_SKIP = "LLMGYM_ALLOW_SANDBOX_SKIP"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A skipped sandbox escape test is a failure, unless LLMGYM_ALLOW_SANDBOX_SKIP=1 says otherwise.

    An escape test that does not run proves nothing, and a green run must not hide that.
    """
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if (report.skipped and not hasattr(report, "wasxfail") and item.get_closest_marker("sandbox_escape")
            and os.environ.get(ALLOW_SANDBOX_SKIP) != "1"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (f"sandbox escape test skipped ({reason}); escape tests must run. "
                           f"Set {ALLOW_SANDBOX_SKIP}=1 to allow skipping them.")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests on the shared vLLM engine run last, each file's in its own order.

    A trainer's in-process engine tears down vLLM's process-wide parallel state when it shuts
    down; run after every such test, the shared engine starts once instead of again.
    """
    items.sort(key=lambda item: "vllm_generator" in getattr(item, "fixturenames", ()))


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """The converted SmolLM2-135M-Instruct folder (converted once, then cached)."""
    from llmgym_train.models import resolve_model

    return resolve_model("smollm2-135m")


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_path)


@pytest.fixture(scope="session")
def _vllm_engines() -> Iterator[list[Any]]:
    """The session's in-process vLLM engine (at most one), closed when the session ends."""
    engines: list[Any] = []
    yield engines
    for engine in engines:
        engine.close()


@pytest.fixture()
def vllm_generator(smollm2_path: Path, _vllm_engines: list[Any]) -> Any:
    """One in-process vLLM engine on SmolLM2 (bf16, 2048-token context), shared between tests.

    Tests that change its weights must restore them before they end. Shutting down any other
    in-process engine (a trainer's, say) tears down vLLM's process-wide parallel state, which
    this engine needs too; it is then started again.
    """
    from vllm.distributed.parallel_state import model_parallel_is_initialized

    from llmgym_train.generation.vllm_backend import VllmGenerator

    if _vllm_engines and not model_parallel_is_initialized():
        _vllm_engines.pop().close()
    if not _vllm_engines:
        _vllm_engines.append(VllmGenerator(smollm2_path, max_model_len=2048, dtype="bfloat16", seed=0))
    return _vllm_engines[0]


@pytest.fixture(scope="session")
def char_tokenizer() -> Any:
    """Character-level tokenizer with a Llama-3 style chat template (see ``llmgym_train.testing``)."""
    from llmgym_train.testing import tiny_tokenizer as build

    return build()


@pytest.fixture()
def random_tiny_model(char_tokenizer: Any) -> Any:
    """A fresh randomly initialized tiny Llama over ``char_tokenizer``'s vocabulary (function-scoped: tests train it)."""
    from llmgym_train.testing import tiny_model as build

    return build(len(char_tokenizer), seed=0)


@pytest.fixture()
def ray_idle() -> None:
    """Wait until every CPU of the connected Ray cluster is free again.

    Ray frees a stopped actor's CPUs a moment after ``ray.kill`` returns, and ``SPREAD`` passes
    over a node that looks full at that moment: a test that checks placement right after another
    test's actors stopped would otherwise find its actors packed onto one node.
    """
    import time

    import ray

    deadline = time.monotonic() + 60.0
    while ray.available_resources().get("CPU", 0.0) < ray.cluster_resources()["CPU"]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"Ray cluster CPUs still held after 60 s: {ray.available_resources()}")
        time.sleep(0.2)
