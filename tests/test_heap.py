"""Freed heap memory goes back to the kernel between update passes (llmgym_train.heap)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from llmgym_train.heap import release_freed_memory


def _resident_mb() -> float:
    return int(re.search(r"VmRSS:\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) / 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and glibc's heap")
def test_release_freed_memory_returns_a_fragmented_heap_to_the_kernel():
    # 64 KB blocks sit below glibc's mmap threshold, so they come from the heap; the last one
    # stays alive and pins the heap's top, so freeing the others returns nothing by itself.
    blocks = [bytearray(64 * 1024) for _ in range(1600)]  # about 100 MB, pages touched
    keep = blocks[-1]
    del blocks
    before = _resident_mb()
    assert release_freed_memory()
    assert before - _resident_mb() > 50, "malloc_trim returned less than half of 100 MB of freed blocks"
    assert keep
