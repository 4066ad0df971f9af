"""Freed memory kept by the C allocator for the next allocation, instead of handed back.

glibc serves an allocation over its mmap threshold (32 MB at most by default) with fresh
pages from the kernel and unmaps them when freed, and hands the top of the heap back past
its trim threshold. An update allocates and frees the same large tensors again and again
(a scoring chunk's fp32 logits are 256 positions x the vocabulary: 50 MB for SmolLM2), so
each time the kernel maps, zeroes and faults in new pages: 2.8 GiB of fresh pages an
update of the step benchmark (bench/grpo_step_memory.py, steps 1 and 2), 0.1 GiB with
freed memory kept (the first update still takes 1.0 GiB as the heap grows to its peak).
The process's resident memory then stays near its peak instead of falling between
updates (peak 2.30 -> 2.55 GiB there).
"""

from __future__ import annotations

import ctypes
import logging
import sys

logger = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # mallopt's parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
KEPT_BYTES = 1 << 30  # allocations up to 1 GiB come from the heap; up to 1 GiB of free top kept


def keep_freed_memory(process: str) -> bool:
    """Tell glibc's malloc to keep freed memory for reuse (a no-op elsewhere); whether it
    took the settings. Logs what was done."""
    mallopt = _glibc_mallopt()
    kept = (mallopt is not None and mallopt(M_MMAP_THRESHOLD, KEPT_BYTES) == 1
            and mallopt(M_TRIM_THRESHOLD, KEPT_BYTES) == 1)
    logger.info("%s: %s", process, "freed memory kept for reuse (glibc malloc)" if kept
                else "the C allocator's settings left as they are (not glibc)")
    return kept


def _glibc_mallopt():  # noqa: ANN202 - a ctypes function
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "gnu_get_libc_version"):  # musl and others: mallopt differs
        return None
    mallopt = libc.mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt
