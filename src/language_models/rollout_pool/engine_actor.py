"""One inference engine inside one Ray actor: the Hugging Face model or a vLLM engine.

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
from typing import Any, Literal

import torch

from src.language_models.language_model import Generation, SamplingParams

EngineKind = Literal["hf", "vllm"]


class EngineActor:
    def __init__(self, kind: EngineKind, parameters: dict[str, Any], num_threads: int) -> None:
        if num_threads > 0:
            torch.set_num_threads(num_threads)
        self.kind = kind
        self._engine: Any = self.engine_class(kind)(**parameters)
        self._adapters = Path(tempfile.mkdtemp(prefix="agent-rl-engine-"))

    @staticmethod
    def engine_class(kind: EngineKind) -> type:
        if kind == "hf":
            from src.language_models.instance.huggingface_lora_language_model import (
                HuggingfaceLoRALanguageModel,
            )
            return HuggingfaceLoRALanguageModel
        from src.language_models.instance.vllm_language_model import VLLMLanguageModel
        return VLLMLanguageModel

    def pid(self) -> int:
        return os.getpid()

    def load_adapter(self, files: dict[str, bytes], version: int) -> None:
        folder = self._adapters / f"v{version}"
        folder.mkdir(parents=True, exist_ok=True)
        for name, content in files.items():
            (folder / name).write_bytes(content)
        if self.kind == "hf":
            self._engine.load_adapter(folder)
            self._engine.set_policy_version(version)
        else:  # vLLM reads the folder at the first request that names it
            self._engine.load_adapter(folder, version)
        for old in self._adapters.iterdir():
            if old != folder:
                shutil.rmtree(old, ignore_errors=True)

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 seed: int) -> list[list[Generation]]:
        if self.kind == "hf":
            torch.manual_seed(seed)
            return self._engine.generate(prompts, params)
        return self._engine.generate(prompts, params, seed=seed)

    def sequence_logprobs(self, sequences: Sequence[Sequence[int]],
                          temperature: float) -> list[list[float]]:
        return self._engine.sequence_logprobs(sequences, temperature=temperature)
