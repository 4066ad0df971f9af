"""What a worker process that builds a model sets first (a trainer worker, a pool engine)."""

from __future__ import annotations

import torch

from src.runtime.reproducibility import make_reproducible


def prepare_worker_process(num_threads: int, reproducible: bool) -> None:
    """Its share of the CPU threads (0: torch's default) and, when the process that started
    it runs in the reproducible mode, the same kernels, before any model is built."""
    if num_threads > 0:
        torch.set_num_threads(num_threads)
    if reproducible:
        make_reproducible()
