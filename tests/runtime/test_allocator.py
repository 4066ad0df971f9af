"""Freed memory kept for reuse: a tensor allocated and freed again and again takes fresh
pages from the kernel the first few times, not every time (checked in a child process,
whose allocator settings are its own)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
REPEATS = 20

# 50 MB: a scoring chunk's fp32 logits for SmolLM2's vocabulary, over glibc's default
# mmap threshold
CHILD = """
import resource, sys, torch
sys.path.insert(0, {root!r})
from src.runtime.allocator import keep_freed_memory
kept = keep_freed_memory("test") if sys.argv[1] == "keep" else False
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):  # the first few take fresh pages either way, as the heap settles
    torch.ones(256, 49152).sum()
before = faults()
for _ in range({repeats}):
    torch.ones(256, 49152).sum()
print(kept, faults() - before)
"""


def _faults(mode: str) -> tuple[bool, int]:
    child = CHILD.format(root=str(PROJECT_ROOT), repeats=REPEATS)
    result = subprocess.run([sys.executable, "-c", child, mode],
                            capture_output=True, text=True, timeout=120, check=True)
    kept, faults = result.stdout.split()
    return kept == "True", int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc settings")
def test_a_freed_tensor_is_reused_instead_of_faulted_in_again() -> None:
    pages_of_one = 256 * 49152 * 4 // 4096
    kept, faults_kept = _faults("keep")
    _, faults_default = _faults("default")
    assert kept
    # released, each of the 20 faults its pages in anew; kept, the heap still moves now and
    # then while small allocations settle between the large ones (seen: 0 to 3 of the 20)
    assert faults_default > 0.9 * REPEATS * pages_of_one
    assert faults_kept < 0.3 * REPEATS * pages_of_one
