"""What a worker process that builds a model sets first (a trainer worker, a pool engine)."""

from __future__ import annotations

from src.runtime.reproducibility import make_reproducible
from src.runtime.threads import set_threads


def prepare_worker_process(num_threads: int, reproducible: bool) -> None:
    """Its torch threads (`num_threads`, the CPUs Ray reserved for it; 0: from the host,
    src.runtime.threads decides as for the run's process) and, when the process that
    started it runs in the reproducible mode, the same kernels, before any model is
    built."""
    set_threads(num_threads, "worker process")
    if reproducible:
        make_reproducible()
