"""Cutting rows into micro-batches whose padded size fits a token budget."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from src.language_models.language_model import TrainableLanguageModel
from src.language_models.shared_prefix import plan_packs, split_pack

CPU_TOKEN_BUDGET = 512  # a CPU's micro-batch: larger ones are no faster there
# the share of the GPU memory still free to torch that one micro-batch's activations may
# take: the rest is for the temporaries the estimate leaves out and the optimiser's step
MEMORY_SHARE = 0.6


def automatic_token_budget(model: TrainableLanguageModel) -> int:
    """The padded tokens of one micro-batch when its budget is `auto`: CPU_TOKEN_BUDGET on
    a CPU; on a GPU as many as fill MEMORY_SHARE of the memory torch can still take (the
    device's free memory and what torch's allocator holds unused) at the model's
    `activation_bytes_per_token`, and never fewer than on a CPU."""
    if model.device.type != "cuda":
        return CPU_TOKEN_BUDGET
    per_token = model.activation_bytes_per_token()
    if not per_token:
        return CPU_TOKEN_BUDGET
    free, _ = torch.cuda.mem_get_info(model.device)
    available = (free + torch.cuda.memory_reserved(model.device)
                 - torch.cuda.memory_allocated(model.device))
    return max(CPU_TOKEN_BUDGET, int(MEMORY_SHARE * available / per_token))


def split_by_token_budget(rows: Sequence[int], lengths: Sequence[int],
                          max_tokens: int | None) -> list[list[int]]:
    """Consecutive runs of `rows` whose padded size (rows x longest row, by `lengths[row]`)
    stays within `max_tokens`; a row longer than the budget goes alone. Activation memory
    grows with the padded size, and a loss summed over micro-batches is the same however
    the rows are split."""
    if max_tokens is None:
        return [list(rows)]
    micro_batches: list[list[int]] = []
    current: list[int] = []
    width = 0  # the longest row of `current`
    for row in rows:
        width = max(width, lengths[row])
        if current and (len(current) + 1) * width > max_tokens:
            micro_batches.append(current)
            current, width = [], lengths[row]
        current.append(row)
    micro_batches.append(current)
    return micro_batches


def split_packs_by_token_budget(rows: Sequence[int], sequences: Sequence[Sequence[int]],
                                max_tokens: int | None) -> list[list[int]]:
    """Micro-batches for a model that packs rows sharing a prefix: the rows regrouped into
    packs (src.language_models.shared_prefix), a pack cut where it alone exceeds the
    budget, and runs of packs whose padded packed size (packs x longest pack) stays
    within `max_tokens`. `sequences[row]` are the row's tokens."""
    own = [sequences[row] for row in rows]
    lengths = [len(sequence) for sequence in own]
    packs = plan_packs(own)
    if max_tokens is not None:
        packs = [part for pack in packs for part in split_pack(pack, lengths, max_tokens)]
    runs = split_by_token_budget(range(len(packs)), [pack.length(lengths) for pack in packs],
                                 max_tokens)
    return [[rows[index] for pack in run for index in packs[pack].rows] for run in runs]
