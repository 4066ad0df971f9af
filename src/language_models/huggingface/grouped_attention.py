"""Scaled-dot-product attention that keeps grouped key/value heads grouped.

transformers' `sdpa` copies the key/value heads `num_key_value_groups` times before
attending whenever an attention mask is given (it enables SDPA's own grouped-query
attention only without a mask). Padded batches always carry a mask, so every decode step
copied the whole cache that many times: on CPU at batch 16 with 300 tokens, 1.2 ms per
layer against 0.31 ms for the grouped call, with identical output; on CUDA the copy reads
and writes the cache again each step. The policy's sampling copy attends through here on
both (src.language_models.huggingface.fused_lora_sampler).

A decode step (one query per row) is two small batched products instead: torch's CPU
flash kernel takes about 2 ms per layer for it at batch 32 with a mask (measured in
bf16), against about 0.1 ms here. Every other case is left to transformers'
implementation.
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
    special = kwargs.get("position_bias") is not None or kwargs.get("cache") is not None
    if query.shape[-2] == 1 and dropout == 0.0 and not special:
        return _one_query_attention(query, key, value, attention_mask, scaling), None
    grouped = getattr(module, "num_key_value_groups", 1) > 1
    # On CUDA a mask with grouped heads would send SDPA to its math kernel: transformers'
    # path (heads copied, the memory-efficient kernel) is the faster one there
    if not grouped or attention_mask is None or special or query.device.type == "cuda":
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    # With a mask transformers attends non-causally too: the mask carries causality.
    output = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling,
        enable_gqa=True)
    return output.transpose(1, 2).contiguous(), None


def _one_query_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         mask: torch.Tensor | None, scaling: float | None) -> torch.Tensor:
    """softmax(q k^T * scale + mask) v for one query per row, the query heads of each
    key/value head batched as rows of one product; output [batch, 1, heads, head_dim].

    Keys and values that carry their cache's `whole_buffer` (src.language_models.huggingface.kv_cache)
    are read from it: contiguous, zeros past the filled length, which is masked."""
    batch, heads, _, width = query.shape
    kv_heads, length = key.shape[1], key.shape[2]
    whole_keys = getattr(key, "whole_buffer", None)
    whole_values = getattr(value, "whole_buffer", None)
    if whole_keys is not None and whole_values is not None:
        key, value = whole_keys, whole_values
    unfilled = key.shape[2] - length
    grouped = query.reshape(batch * kv_heads, heads // kv_heads, width)
    scores = torch.bmm(grouped, key.reshape(batch * kv_heads, -1, width).transpose(1, 2))
    scores = scores.float().view(batch, kv_heads, heads // kv_heads, -1)
    scores = scores * (scaling if scaling is not None else width ** -0.5)
    if mask is not None and mask.dtype == torch.bool:  # [batch, 1, 1, keys]: True = seen
        scores[..., :length].masked_fill_(~mask, float("-inf"))
    elif mask is not None:
        scores[..., :length] += mask.float()
    if unfilled:
        scores[..., length:] = float("-inf")
    weights = torch.softmax(scores, dim=-1).to(value.dtype)
    output = torch.bmm(weights.view(batch * kv_heads, heads // kv_heads, -1),
                       value.reshape(batch * kv_heads, -1, width))
    return output.view(batch, 1, heads, width)


AttentionInterface.register(GROUPED_SDPA, grouped_sdpa_forward)
# transformers shapes the mask by the implementation's name: ask for SDPA's masks.
AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)
