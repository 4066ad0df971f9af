"""Reproducible execution: what a seeded run needs so that it gives the same bits every time
it runs, on a GPU as on the CPU, and a killed run resumes to the bits of an uninterrupted
one.

Seeds fix what is drawn, not how a kernel adds. On CUDA several kernels choose their
order of summation at run time: cuBLAS splits products over a workspace shared by
streams, cuDNN autotunes its algorithm, attention's backward accumulates with atomic
adds. Two runs of one seeded config can then part after their first update. On the CPU the
kernels the project uses are deterministic already, and this mode changes no bit there.

`make_reproducible` turns on, once per process and before the first model is built:

- `torch.use_deterministic_algorithms(True)`: torch's deterministic kernel wherever it
  has one, and a RuntimeError naming the op where it has none (never a silent fallback).
  It also makes the flash and memory-efficient attention backward deterministic (torch
  passes the flag to them, and they give up their atomic accumulation);
- `CUBLAS_WORKSPACE_CONFIG=:4096:8`: cuBLAS's deterministic workspace layout. torch reads
  it when it first sets up cuBLAS, so it only takes effect before the first product on
  the GPU (a warning says so when CUDA was started earlier);
- cuDNN's deterministic algorithms and no autotuning (`cudnn.benchmark` off);
- scaled-dot-product attention without the cuDNN backend, which has no deterministic
  backward (torch also skips it in this mode; off here, it stays off whatever torch does).

Each process that builds a model calls it: every pipeline before its models
(`assignment_config.reproducible`, on by default), and the trainer workers of
src/training/sharded_learner.py and a rollout pool's engine actors
(src/language_models/rollout_pool/engine_actor.py) when the process that started them
is in the mode. vLLM's own kernels are outside torch's switch: a vLLM engine is
deterministic only as far as vLLM makes it.
Deterministic kernels can be slower on CUDA (bench/gpu_check.sh times the step in the
mode). Whether a seeded run repeats on a GPU is checked there too: bench/gpu_check.sh,
docs/gpu.md.
"""

from __future__ import annotations

import logging
import os

import torch

logger = logging.getLogger(__name__)

CUBLAS_WORKSPACE_VARIABLE = "CUBLAS_WORKSPACE_CONFIG"
# cuBLAS's two deterministic layouts; the first is its documented default choice
DETERMINISTIC_CUBLAS_WORKSPACES = (":4096:8", ":16:8")

_on = False


def make_reproducible() -> None:
    """Deterministic kernels for this process (see the module's docstring); idempotent."""
    global _on
    if _on:
        return
    if os.environ.get(CUBLAS_WORKSPACE_VARIABLE) not in DETERMINISTIC_CUBLAS_WORKSPACES:
        if torch.cuda.is_initialized():
            logger.warning(
                "CUDA was started before the reproducible mode: cuBLAS may keep the workspace "
                "layout it chose then. Set %s=%s in the environment of the command.",
                CUBLAS_WORKSPACE_VARIABLE, DETERMINISTIC_CUBLAS_WORKSPACES[0])
        os.environ[CUBLAS_WORKSPACE_VARIABLE] = DETERMINISTIC_CUBLAS_WORKSPACES[0]
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.enable_cudnn_sdp(False)
    _on = True
    cost = ("; deterministic kernels may cost speed on CUDA" if torch.cuda.is_available()
            else "")
    logger.info("reproducible: deterministic kernels on (torch deterministic algorithms, "
                "%s=%s, cuDNN deterministic, no cuDNN attention)%s", CUBLAS_WORKSPACE_VARIABLE,
                os.environ[CUBLAS_WORKSPACE_VARIABLE], cost)


def is_reproducible() -> bool:
    """Whether this process runs in the reproducible mode (what a worker it starts copies)."""
    return _on


def prepare_model_building(reproducible: bool, seed: int) -> None:
    """What every pipeline does just before it builds its models: the mode, if asked, before
    any weight touches a device, and torch seeded, since LoRA's A matrices are drawn at
    construction and two runs of one config must start alike."""
    if reproducible:
        make_reproducible()
    torch.manual_seed(seed)
