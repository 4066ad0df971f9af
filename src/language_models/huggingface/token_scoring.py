"""Scoring a TokenBatch with a PEFT model: each scored token's log-prob (and entropy)
given the tokens before it, at a temperature, with or without the adapter.

The output head runs on the scored positions only, in chunks that bound the
[positions, vocabulary] logits; rows that share a prefix (a group's prompt) can run as
one packed sequence with the prefix laid out once (src.language_models.shared_prefix).
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
from peft import PeftModel
from torch.utils.checkpoint import checkpoint

from src.language_models.huggingface.custom_masks import custom_mask
from src.language_models.language_model import ScoredTokens, TokenBatch
from src.language_models.shared_prefix import PackedBatch, pack_rows, plan_packs

LOGIT_CHUNK = 256  # scored positions per lm_head chunk: bounds the [chunk, vocab] logits


def packed_batch(batch: TokenBatch, pad_id: int) -> PackedBatch | None:
    """The rows packed by shared prefix, or None where nothing is shared (or the rows are
    not right-padded, which packing assumes)."""
    attention = batch.attention_mask
    lengths = attention.sum(-1).tolist()
    if not all(bool(attention[row, :length].all()) for row, length in enumerate(lengths)):
        return None
    sequences = [batch.input_ids[row, :length].tolist() for row, length in enumerate(lengths)]
    packs = plan_packs(sequences)
    if all(len(pack.rows) == 1 for pack in packs):
        return None
    return pack_rows(batch.input_ids, lengths, packs, pad_id)


def score_tokens(model: PeftModel, batch: TokenBatch, *, device: torch.device, pad_id: int,
                 temperature: float, with_adapter: bool, with_entropy: bool,
                 bfloat16_autocast: bool, pack_shared_prefixes: bool) -> ScoredTokens:
    """The `TrainableLanguageModel.score` contract for `model` on `device`; gradients flow
    where they are enabled."""
    input_ids = batch.input_ids.to(device)
    target_mask = batch.loss_mask.to(device)[:, 1:] > 0
    base = model.get_base_model()
    adapter = nullcontext() if with_adapter else model.disable_adapter()
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=bfloat16_autocast)
    packed = packed_batch(batch, pad_id) if pack_shared_prefixes else None
    with adapter, autocast:
        if packed is None:
            hidden = base.get_decoder()(
                input_ids=input_ids,
                attention_mask=batch.attention_mask.to(device)).last_hidden_state
            # hidden state t predicts token t + 1: score only positions the loss needs
            selected = hidden[:, :-1][target_mask]
        else:
            hidden = base.get_decoder()(
                input_ids=packed.input_ids.to(device),
                attention_mask=custom_mask(packed.attention.to(device),
                                           base.config._attn_implementation),
                position_ids=packed.position_ids.to(device)).last_hidden_state
            rows, positions = target_mask.nonzero(as_tuple=True)
            pack_index, columns = packed.locate(rows.cpu(), positions.cpu())
            selected = hidden[pack_index.to(device), columns.to(device)]
    targets = input_ids[:, 1:][target_mask]
    head = base.get_output_embeddings()
    scale = 1.0 / (temperature if temperature > 0 else 1.0)

    def chunk_scores(h: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bfloat16_autocast):
            logits = head(h)
        log_probs = torch.log_softmax(logits.float() * scale, dim=-1)
        token_logprobs = log_probs.gather(-1, t[:, None]).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1) if with_entropy else token_logprobs
        return token_logprobs, entropy

    pieces = []
    for start in range(0, selected.shape[0], LOGIT_CHUNK):
        h, t = selected[start:start + LOGIT_CHUNK], targets[start:start + LOGIT_CHUNK]
        # recomputing the chunk in backward keeps only hidden states, not vocab-wide logits
        pieces.append(checkpoint(chunk_scores, h, t, use_reentrant=False)
                      if torch.is_grad_enabled() else chunk_scores(h, t))
    flat_logprobs = torch.cat([p[0] for p in pieces]) if pieces else selected.new_zeros(0)
    logprobs = torch.zeros(input_ids.shape, dtype=torch.float32, device=device)
    logprobs[:, 1:][target_mask] = flat_logprobs.float()
    entropy = None
    if with_entropy:
        entropy = torch.zeros_like(logprobs)
        entropy[:, 1:][target_mask] = torch.cat([p[1] for p in pieces]).float()
    return ScoredTokens(logprobs=logprobs, entropy=entropy)
