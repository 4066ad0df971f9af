"""Freed memory kept for reuse: a tensor allocated and freed again and again takes fresh
pages from the kernel the first few times, not every time (checked in a child process,
whose allocator settings are its own)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]

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
for _ in range(10):
    torch.ones(256, 49152).sum()
print(kept, faults() - before)
"""


def _faults(mode: str) -> tuple[bool, int]:
    result = subprocess.run([sys.executable, "-c", CHILD.format(root=str(PROJECT_ROOT)), mode],
                            capture_output=True, text=True, timeout=120, check=True)
    kept, faults = result.stdout.split()
    return kept == "True", int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc settings")
def test_a_freed_tensor_is_reused_instead_of_faulted_in_again() -> None:
    pages_of_one = 256 * 49152 * 4 // 4096
    kept, faults_kept = _faults("keep")
    _, faults_default = _faults("default")
    assert kept
    assert faults_default > 5 * pages_of_one  # each of the 10 faults its pages in anew
    assert faults_kept < pages_of_one  # reused: at most a few pages a time
