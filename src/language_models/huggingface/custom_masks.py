"""Custom 4-D attention masks (shared-prefix packs, the static cache's decode step) in the
form the model's attention implementation reads them.

transformers hands a 4-D mask to the attention function as it is. SDPA takes booleans
(True: may attend); eager attention adds the mask to the scores, so a boolean mask there
shifts scores by 0 or 1 and masks nothing: it needs 0 where a query may attend and the
lowest float elsewhere. Flash and flex attention take no dense 4-D mask at all.
"""

from __future__ import annotations

import torch

from src.language_models.huggingface.grouped_attention import GROUPED_SDPA

BOOLEAN_MASKS = frozenset({"sdpa", GROUPED_SDPA})
NO_DENSE_MASKS = ("flash_attention", "flex_attention", "paged")  # name prefixes


def takes_custom_masks(implementation: str) -> bool:
    """Whether attention of this implementation can read a dense 4-D mask."""
    return not implementation.startswith(NO_DENSE_MASKS)


def custom_mask(allowed: torch.Tensor, implementation: str) -> torch.Tensor:
    """`allowed` (bool, True: may attend) as `implementation` reads it: itself for SDPA,
    else additive float32 (adding it to scores of any dtype keeps the lowest value below
    every score)."""
    if implementation in BOOLEAN_MASKS:
        return allowed
    if not takes_custom_masks(implementation):
        raise ValueError(f"attention '{implementation}' takes no dense 4-D mask: use sdpa or "
                         "eager, or set shared_prefix_training: false and sampler: kv_cache")
    return torch.zeros(allowed.shape, dtype=torch.float32, device=allowed.device
                       ).masked_fill_(~allowed, torch.finfo(torch.float32).min)
