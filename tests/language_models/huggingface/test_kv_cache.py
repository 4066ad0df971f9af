"""The growing key/value layer holds exactly what transformers' concatenating one holds."""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicLayer

from src.language_models.huggingface.kv_cache import GROWTH, GrowingLayer, growing_cache


def test_growing_layer_matches_dynamic_layer_across_growth_and_selection() -> None:
    torch.manual_seed(0)
    growing, dynamic = GrowingLayer(), DynamicLayer()
    chunks = [5, 1, 1, GROWTH, 1, 3]  # a prefill, decode steps, and a jump past the buffer
    batch = 4
    for step, length in enumerate(chunks):
        keys, values = torch.randn(batch, 2, length, 8), torch.randn(batch, 2, length, 8)
        got, expected = growing.update(keys, values), dynamic.update(keys, values)
        assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
        if step == 2:  # rows leave the batch mid-way
            rows = torch.tensor([0, 2, 3])
            growing.batch_select_indices(rows)
            dynamic.batch_select_indices(rows)
            batch = len(rows)
    assert growing.get_seq_length() == dynamic.get_seq_length() == sum(chunks)
    assert torch.equal(growing.keys, dynamic.keys) and torch.equal(growing.values, dynamic.values)


def test_growing_cache_starts_from_given_keys_and_values() -> None:
    prefilled = [(torch.randn(2, 1, 3, 4), torch.randn(2, 1, 3, 4)) for _ in range(2)]
    cache = growing_cache(prefilled)
    assert cache.get_seq_length() == 3
    assert all(torch.equal(layer.keys, keys) for layer, (keys, _) in zip(cache.layers, prefilled,
                                                                          strict=True))
