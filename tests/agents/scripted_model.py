"""A language model whose replies a test writes: used where a real model cannot be made to
produce a chosen reply (a cut-off closing token, a tool call), with the real tokenizer."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from src.language_models.language_model import (
    FinishReason,
    Generation,
    LanguageModel,
    SamplingParams,
)


class ScriptedLanguageModel(LanguageModel):
    """Replies with chosen ids, so that a test decides exactly what was "sampled"."""

    def __init__(self, tokenizer_path: Path, replies: Sequence[tuple[list[int], FinishReason]],
                 chat_template: str | None = None) -> None:
        self._tokenizer: Any = AutoTokenizer.from_pretrained(tokenizer_path)
        if chat_template is not None:
            self._tokenizer.chat_template = chat_template
        self._replies = list(replies)
        self.prompts: list[list[int]] = []  # what each generate call was fed

    @property
    def tokenizer(self):
        return self._tokenizer

    @property
    def max_context_tokens(self) -> int:
        return 2048

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 seed: int | None = None) -> list[list[Generation]]:
        generations = []
        for prompt in prompts:
            self.prompts.append(list(prompt))
            ids, finish_reason = self._replies.pop(0)
            generations.append([Generation(ids, [-1.0] * len(ids), finish_reason)])
        return generations
