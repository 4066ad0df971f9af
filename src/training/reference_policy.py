"""The KL reference: the base model (adapter off) or the adapter the run started from."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

import torch

from src.language_models.language_model import TrainableLanguageModel
from src.training.token_rows import TokenRows


class Scorer(Protocol):  # a Learner or a ShardedLearner
    def score(self, rows: TokenRows, *, temperature: float = 1.0, with_adapter: bool = True,
              adapter: Sequence[torch.Tensor] | None = None) -> torch.Tensor: ...


class ReferencePolicy:
    def __init__(self, model: TrainableLanguageModel,
                 kind: Literal["base", "initial_adapter"]) -> None:
        self.kind = kind
        # Taken when the trainer is built, before any update or resume: the weights then
        # are those of the model's adapter_path (or the zero-delta start).
        self._initial = ([parameter.detach().clone() for parameter in
                          model.trainable_parameters()] if kind == "initial_adapter" else [])

    @torch.no_grad()
    def score(self, learner: Scorer, rows: TokenRows, temperature: float) -> torch.Tensor:
        if self.kind == "base":
            return learner.score(rows, temperature=temperature, with_adapter=False)
        return learner.score(rows, temperature=temperature, adapter=self._initial)
