"""What every pipeline trains on: token rows with their masks and aligned values."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

import torch

from src.language_models.language_model import TokenBatch


@dataclass
class TokenRows:
    """Right-padded token rows (`batch`), and per row or per token what the loss needs.

    Per row [rows]: `advantages`, `row_weights` (cross-entropy weights). Per token
    [rows, length], aligned with `batch.input_ids`: `old_logprobs` (the PPO ratio's
    denominator), `ref_logprobs` (the KL reference), `sampler_logprobs` (what the
    sampler recorded), `token_weights` (importance weights, no gradient),
    `token_advantages` (a per-token term added to the row's advantage: on-policy
    distillation's, 0 off the loss mask; `per_token_advantages`).
    """

    batch: TokenBatch
    advantages: torch.Tensor | None = None
    row_weights: torch.Tensor | None = None
    old_logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    sampler_logprobs: torch.Tensor | None = None
    token_weights: torch.Tensor | None = None
    token_advantages: torch.Tensor | None = None

    @classmethod
    def from_sequences(cls, sequences: Sequence[Sequence[int]], masks: Sequence[Sequence[int]],
                       pad_id: int) -> TokenRows:
        return cls(TokenBatch.from_sequences(sequences, masks, pad_id=pad_id))

    def __len__(self) -> int:
        return int(self.batch.input_ids.shape[0])

    @property
    def lengths(self) -> list[int]:
        return self.batch.attention_mask.sum(-1).tolist()

    def check_within(self, max_tokens: int) -> None:
        """ValueError naming the rows longer than `max_tokens` (the model's context): a
        row past it is never trained on or scored, its positions mean nothing to the
        model and its cost has no bound."""
        past = [(row, length) for row, length in enumerate(self.lengths) if length > max_tokens]
        if past:
            listed = ", ".join(f"row {row} has {length} tokens" for row, length in past[:5])
            raise ValueError(f"{listed}, past the model's context of {max_tokens} tokens "
                             f"({len(past)} such rows): cut them to it before training")

    def sequences(self) -> list[list[int]]:
        """Each row's tokens, without padding."""
        return [ids[:length].tolist() for ids, length
                in zip(self.batch.input_ids, self.lengths, strict=True)]

    def per_token_advantages(self) -> torch.Tensor:
        """Each token's advantage: the row's, plus its own term where the rows carry
        one. [rows, 1] (broadcast over the row) without per-token terms, else [rows,
        length]; the one place the policy loss and its skip read advantages from."""
        assert self.advantages is not None
        advantages = self.advantages[:, None]
        if self.token_advantages is None:
            return advantages
        return advantages + self.token_advantages

    def aligned(self, per_row: Sequence[torch.Tensor]) -> torch.Tensor:
        """[rows, length] from one 1-D tensor per row of values at its masked positions."""
        full = torch.zeros_like(self.batch.loss_mask)
        full[self.batch.loss_mask > 0] = torch.cat(list(per_row)).to(full.dtype)
        return full

    def select(self, rows: Sequence[int]) -> TokenRows:
        """These rows, cut to the longest of them (padding costs compute)."""
        index = torch.tensor(list(rows), dtype=torch.long)
        width = int(self.batch.attention_mask[index].sum(-1).max().item())
        batch = TokenBatch(self.batch.input_ids[index, :width],
                           self.batch.attention_mask[index, :width],
                           self.batch.loss_mask[index, :width])
        values = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name == "batch" or value is None:
                continue
            values[item.name] = value[index, :width] if value.dim() == 2 else value[index]
        return replace(self, batch=batch, **values)
