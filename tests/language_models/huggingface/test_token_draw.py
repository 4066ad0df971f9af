"""The token sampler draws from exactly the distribution whose log-probs it reports."""

from __future__ import annotations

import torch

from src.language_models.huggingface.token_draw import (
    SAMPLING_BLOCK,
    fixed_point_mass_before,
    race_draw,
    sample_from_logits,
)


def test_sampled_frequencies_match_the_reported_distribution() -> None:
    torch.manual_seed(0)
    draws = 200_000
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, -3.0]]).repeat(draws, 1)
    given = logits.clone()
    for temperature, top_p in ((1.0, 1.0), (0.7, 1.0), (1.0, 0.8)):
        tokens, logprobs = sample_from_logits(logits, temperature, top_p)
        assert torch.equal(logits, given)  # the caller's logits are left as they were
        expected = torch.zeros(5)
        expected[tokens] = logprobs.exp()  # each drawn token's reported probability
        frequency = torch.bincount(tokens, minlength=5).float() / draws
        # binomial std of a frequency here is at most 0.0011: 0.005 is > 4 sigma
        assert torch.allclose(frequency, expected, atol=0.005), (temperature, top_p, frequency)
        assert abs(float(expected.sum()) - 1.0) < 1e-4  # every token in the nucleus was drawn
    # top_p 0.8 keeps tokens 0 and 1 (0.64 + 0.24 >= 0.8): the rest are never drawn
    assert set(tokens.tolist()) == {0, 1}


def test_greedy_takes_the_argmax() -> None:
    tokens, logprobs = sample_from_logits(torch.tensor([[0.1, 3.0, 2.9]]), 0.0, 1.0)
    assert tokens.tolist() == [1]
    assert torch.allclose(logprobs, torch.log_softmax(torch.tensor([0.1, 3.0, 2.9]), -1)[1:2])


def test_the_two_level_draw_over_a_vocabulary_of_several_blocks() -> None:
    """Mass on a block's first and last entry and in a partial last block, with empty
    blocks before and between: the draw matches it and never takes a token of zero mass."""
    torch.manual_seed(0)
    draws = 40_000
    vocabulary = 4 * SAMPLING_BLOCK + 17
    logits = torch.full((vocabulary,), float("-inf"))
    chosen = [SAMPLING_BLOCK, 2 * SAMPLING_BLOCK - 1, 4 * SAMPLING_BLOCK + 3]
    logits[chosen] = torch.tensor([0.0, 1.0, -0.5])
    tokens, logprobs = sample_from_logits(logits.repeat(draws, 1), 1.0, 1.0)
    assert set(tokens.tolist()) <= set(chosen)
    expected = torch.softmax(logits[chosen], dim=-1)
    frequency = torch.stack([(tokens == token).float().mean() for token in chosen])
    # binomial std of a frequency here is at most 0.0025: 0.012 is > 4.5 sigma
    assert torch.allclose(frequency, expected, atol=0.012), frequency
    assert torch.allclose(logprobs, torch.log_softmax(logits, dim=-1)[tokens])


def test_the_accelerators_draw_matches_the_distribution() -> None:
    """The exponential race (the draw on CUDA, run here on CPU tensors) takes token i with
    probability p_i and never a token of zero mass."""
    torch.manual_seed(0)
    draws = 200_000
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.15, 0.05, 0.0]]).repeat(draws, 1)
    frequency = torch.bincount(race_draw(probs), minlength=6).float() / draws
    assert torch.allclose(frequency, probs[0], atol=0.005), frequency  # > 4 sigma
    assert frequency[1] == 0 and frequency[5] == 0


def test_the_accelerators_nucleus_sum_is_the_running_sum() -> None:
    probs = torch.softmax(torch.randn(4, 5000), dim=-1).sort(dim=-1, descending=True).values
    assert torch.allclose(fixed_point_mass_before(probs),
                          (probs.double().cumsum(-1) - probs.double()), atol=1e-12)
