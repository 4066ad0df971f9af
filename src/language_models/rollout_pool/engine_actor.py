"""One inference engine inside one Ray actor: any `InferenceEngine` class.

The pool talks to it through four calls: generate, load_adapter, sequence_logprobs, pid.
Adapters arrive as file contents (not paths), so engines on other machines need no
shared file system.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from src.language_models.language_model import Generation, InferenceEngine, SamplingParams
from src.runtime.worker_process import prepare_worker_process


class EngineActor:
    def __init__(self, engine_class: type[InferenceEngine], parameters: dict[str, Any],
                 num_threads: int, reproducible: bool) -> None:
        prepare_worker_process(num_threads, reproducible)
        self._engine = engine_class(**parameters)
        self._adapters = Path(tempfile.mkdtemp(prefix="agent-rl-engine-"))

    def pid(self) -> int:
        return os.getpid()

    def load_adapter(self, files: dict[str, bytes], version: int) -> None:
        folder = self._adapters / f"v{version}"
        folder.mkdir(parents=True, exist_ok=True)
        for name, content in files.items():
            (folder / name).write_bytes(content)
        self._engine.load_adapter(folder, version)
        for old in self._adapters.iterdir():  # the new folder stays: an engine may read it late
            if old != folder:
                shutil.rmtree(old, ignore_errors=True)

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 seed: int) -> list[list[Generation]]:
        return self._engine.generate(prompts, params, seed)

    def sequence_logprobs(self, sequences: Sequence[Sequence[int]],
                          temperature: float) -> list[list[float]]:
        return self._engine.sequence_logprobs(sequences, temperature)
