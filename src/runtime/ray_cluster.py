"""Joining or starting the Ray cluster that rollout engines and trainer workers share
(process-wide: one cluster per process, whichever part starts it)."""

from __future__ import annotations

import os
from collections.abc import Set
from pathlib import Path

import torch

from src.runtime.threads import host_cpus

REPO_ROOT = Path(__file__).resolve().parents[2]


def gpus_of(device: torch.device) -> set[int]:
    """The GPU index a trainer on `device` holds (none on a CPU)."""
    if device.type != "cuda":
        return set()
    return {device.index if device.index is not None else torch.cuda.current_device()}


def all_gpus() -> set[int]:
    """The indices of the GPUs this process sees."""
    return set(range(torch.cuda.device_count()))


def connect_ray(num_cpus: int, address: str | None = None,
                hidden_gpus: Set[int] = frozenset()) -> bool:
    """Join the cluster at `address`, or start a local one with at least `num_cpus` CPUs
    that does not hand out the GPUs in `hidden_gpus` (a trainer's); nothing if Ray is up
    in this process already. True if this call started or joined it (then close it)."""
    import ray

    if ray.is_initialized():
        return False
    # Actors import `src`: point them at this checkout (same path on every node).
    runtime_env = {"env_vars": {"PYTHONPATH": os.pathsep.join(
        filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}}
    if address is not None:
        ray.init(address=address, runtime_env=runtime_env)
        return True
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hidden_gpus:
        ids = visible.split(",") if visible else [str(i) for i in sorted(all_gpus())]
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(
            gpu for index, gpu in enumerate(ids) if index not in hidden_gpus)
    try:
        ray.init(num_cpus=max(host_cpus().usable, num_cpus), runtime_env=runtime_env,
                 include_dashboard=False, log_to_driver=True)
    finally:  # this process keeps seeing what it saw
        if visible is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = visible
    return True
