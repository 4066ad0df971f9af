"""Scaled-dot-product attention that keeps grouped key/value heads grouped.

transformers' `sdpa` copies the key/value heads `num_key_value_groups` times before
attending whenever an attention mask is given on CPU (it enables SDPA's own
grouped-query attention only without a mask). Padded batches always carry a mask, so
every decode step copied the whole cache that many times: at batch 16 with 300 tokens,
1.2 ms per layer against 0.31 ms for the grouped call, with identical output. Every
other case is left to transformers' implementation.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

GROUPED_SDPA = "grouped_sdpa"


def grouped_sdpa_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                         value: torch.Tensor, attention_mask: torch.Tensor | None,
                         dropout: float = 0.0, scaling: float | None = None,
                         is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    grouped = getattr(module, "num_key_value_groups", 1) > 1
    special = kwargs.get("position_bias") is not None or kwargs.get("cache") is not None
    if not grouped or attention_mask is None or special:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    # With a mask transformers attends non-causally too: the mask carries causality.
    output = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling,
        enable_gqa=True)
    return output.transpose(1, 2).contiguous(), None


AttentionInterface.register(GROUPED_SDPA, grouped_sdpa_forward)
# transformers shapes the mask by the implementation's name: ask for SDPA's masks.
AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)
