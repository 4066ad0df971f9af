"""What a process that builds a model sets first: the run's and evaluate's processes, a
trainer worker, a pool engine."""

from __future__ import annotations

from src.runtime.allocator import keep_freed_memory
from src.runtime.reproducibility import make_reproducible
from src.runtime.threads import set_threads


def prepare_process(process: str, num_threads: int | None) -> None:
    """Torch threads that fit the host (src.runtime.threads; `num_threads` None or 0: from
    the environment or the host) and freed memory kept for reuse (src.runtime.allocator)."""
    set_threads(num_threads, process)
    keep_freed_memory(process)


def prepare_worker_process(num_threads: int, reproducible: bool) -> None:
    """`prepare_process` with `num_threads` the CPUs Ray reserved for the worker and, when
    the process that started it runs in the reproducible mode, the same kernels, before any
    model is built."""
    prepare_process("worker process", num_threads)
    if reproducible:
        make_reproducible()
