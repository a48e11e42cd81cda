"""Freed memory back to the operating system between the passes of an update (glibc's ``malloc_trim``).

torch frees a pass's activations to the C heap, and glibc keeps what it frees mapped for
reuse: chunks of up to 32 MB (a layer's activations at 2,048 tokens are 5-13 MB) are not
returned, and the next pass's tensors, of other shapes, do not all fit the holes they left. At
16 episodes of 2,048 tokens a step peaked at 4.32 GB resident with that memory kept and 3.73 GB
with a trim after each pass (``benchmarks/step_memory.py``). ``malloc_trim(0)`` hands every
free page back to the kernel, at the cost of faulting pages in again when the next pass
allocates: that step took 6% longer.
"""

from __future__ import annotations

import ctypes
import functools
import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or ``None`` where the C library has none (musl, macOS, Windows)."""
    try:
        libc = ctypes.CDLL(None)
    except (OSError, TypeError):  # TypeError: Windows takes no None
        libc = None
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        logger.info("This C library has no malloc_trim: freed heap memory stays mapped between passes.")
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_freed_memory() -> bool:
    """Return the C heap's free pages to the kernel; ``False`` (and nothing done) without glibc."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
