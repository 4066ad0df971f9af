"""Drawing one token per row from logits, with its log-prob under the distribution drawn
from: logits / temperature, restricted to the top-p nucleus when top_p < 1 (the
`Generation` contract's log-prob). The draw of the in-process samplers (kv_cache_sampler.py,
static_cache_sampler.py).
"""

from __future__ import annotations

import torch

SAMPLING_BLOCK = 256  # vocabulary entries per block of the two-level token draw


def sample_from_logits(logits: torch.Tensor, temperature: float,
                        top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row; return it with its log-prob under the sampling distribution.

    Each [rows, vocab] float32 tensor made here is a fresh 6 MB allocation at batch 32,
    whose pages are faulted in and zeroed again at every step: hence one softmax, straight
    from the head's dtype, and the log of the drawn tokens' probabilities rather than a
    log_softmax over the vocabulary. On bf16 logits of 32 rows x 49,152 a draw took 1.0-1.4
    ms, against 17-25 ms for the single-level draw it replaced (five such tensors, one a
    float64 running sum over the vocabulary), measured in isolation."""
    if temperature == 0.0:
        tokens = logits.argmax(dim=-1)
        log_probs = torch.log_softmax(logits, dim=-1, dtype=torch.float32)
        return tokens, log_probs.gather(-1, tokens[:, None]).squeeze(-1)
    if temperature != 1.0:
        logits = logits.to(torch.float32, copy=True).div_(temperature)  # the caller's stays
    if top_p < 1.0:
        sorted_logits, order = logits.float().sort(dim=-1, descending=True)
        sorted_probs = sorted_logits.softmax(dim=-1)
        # drop a token when the mass before it already reaches top_p (the first always stays)
        outside = _mass_before(sorted_probs) >= top_p
        sorted_logits = sorted_logits.masked_fill(outside, float("-inf"))
        logits = torch.full_like(sorted_logits, float("-inf")).scatter(-1, order, sorted_logits)
    probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
    tokens = _inverse_cdf_draw(probs) if probs.device.type == "cpu" else race_draw(probs)
    return tokens, probs.gather(-1, tokens[:, None]).squeeze(-1).log()


def _inverse_cdf_draw(probs: torch.Tensor) -> torch.Tensor:
    """One token per row of `probs` [rows, vocab] (>= 0, not all 0): the same distribution
    as torch.multinomial, which takes ~14 ms for 16 rows x 49k tokens on CPU.

    Two levels of inverse CDF: a block of SAMPLING_BLOCK tokens by the blocks' masses, then
    a token within it, so that the float64 running sums cover 192 + 256 entries instead of
    the whole vocabulary. Each level takes the first entry whose running sum exceeds the
    draw, with the draw kept below the level's total, so an entry of zero mass (outside
    the nucleus) is never drawn."""
    rows, vocab = probs.shape
    if vocab % SAMPLING_BLOCK:
        probs = torch.nn.functional.pad(probs, (0, -vocab % SAMPLING_BLOCK))
    blocks = probs.view(rows, -1, SAMPLING_BLOCK)
    block_cdf = blocks.sum(dim=-1).double().cumsum(dim=-1)
    uniform = torch.rand((rows, 1), dtype=torch.float64, device=probs.device)
    draw = _below(uniform * block_cdf[:, -1:], block_cdf[:, -1:])
    block = torch.searchsorted(block_cdf, draw, right=True)
    mass_before = torch.where(block > 0, block_cdf.gather(-1, (block - 1).clamp(min=0)), 0.0)
    within_cdf = blocks.gather(1, block[:, :, None].expand(-1, -1, SAMPLING_BLOCK)
                               ).squeeze(1).double().cumsum(dim=-1)
    # the block's own running sum can end a rounding error below its mass in block_cdf
    within = torch.searchsorted(within_cdf, _below(draw - mass_before, within_cdf[:, -1:]),
                                right=True)
    return (block * SAMPLING_BLOCK + within).squeeze(-1)


def _below(values: torch.Tensor, limit: torch.Tensor) -> torch.Tensor:
    """`values`, each at most the largest float below its row's `limit`."""
    return torch.minimum(values, torch.nextafter(limit, torch.zeros_like(limit)))


# On CUDA torch has no deterministic kernel for a floating-point running sum and refuses
# one in the reproducible mode (src.runtime.reproducibility); the draw and the nucleus
# there take paths without one. The CPU keeps its own, bit for bit.
FIXED_POINT = 2.0**52  # probability units of the nucleus's integer running sum


def _mass_before(sorted_probs: torch.Tensor) -> torch.Tensor:
    """Each entry's running sum of the entries before it, along the last dimension. On
    CUDA in integers (`fixed_point_mass_before`): an integer sum is the same in any
    order."""
    if sorted_probs.device.type == "cpu":
        return sorted_probs.cumsum(dim=-1) - sorted_probs
    return fixed_point_mass_before(sorted_probs)


def fixed_point_mass_before(probs: torch.Tensor) -> torch.Tensor:
    """`_mass_before` in integers, exact but for each entry's rounding to 2^-52."""
    fixed = (probs.double() * FIXED_POINT).round_().long()
    return (fixed.cumsum(dim=-1) - fixed).double() / FIXED_POINT


def race_draw(probs: torch.Tensor) -> torch.Tensor:
    """One token per row of `probs` [rows, vocab] (>= 0, not all 0) on an accelerator:
    the row's largest p_i / E_i with E_i independent exponential draws, which is token i
    with probability p_i (each E_i / p_i is exponential with rate p_i, and the first of
    independent exponential arrivals is i with probability p_i / sum p). One elementwise
    pass and an argmax, no running sum; an entry of zero mass never wins."""
    arrivals = torch.empty_like(probs).exponential_()
    return probs.div(arrivals.clamp_(min=torch.finfo(arrivals.dtype).tiny)).argmax(dim=-1)
