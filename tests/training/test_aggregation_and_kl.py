"""Loss aggregation and KL estimators (references sections 1 and 1b)."""

from __future__ import annotations

import math

import pytest
import torch

from src.training.aggregation import aggregate
from src.training.kl import kl_penalty
from src.training.kl_control import KLController

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])


@pytest.mark.parametrize(("mode", "expected"), [
    ("token-mean", 10 / 4),
    ("seq-mean-token-mean", (2.0 + 4.0) / 2),
    ("seq-mean-token-sum", (6.0 + 4.0) / 2),
    ("seq-mean-token-sum-norm", 10 / (2 * 5)),
])
def test_loss_aggregation(mode: str, expected: float) -> None:
    assert aggregate(LOSS, MASK, mode, norm_length=5).item() == pytest.approx(expected)


def test_micro_batches_add_up_to_the_mini_batch() -> None:
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                 "seq-mean-token-sum-norm"):
        whole = aggregate(LOSS, MASK, mode, norm_length=3)
        parts = sum(aggregate(LOSS[i:i + 1], MASK[i:i + 1], mode, norm_length=3,
                              num_sequences=2, num_tokens=4.0) for i in range(2))
        assert parts.item() == pytest.approx(whole.item())


def test_kl_values() -> None:
    logp, ref = torch.tensor([-1.0]), torch.tensor([-1.5])
    assert kl_penalty(logp, ref, "k1").item() == pytest.approx(0.5)
    assert kl_penalty(logp, ref, "k2").item() == pytest.approx(0.125)
    assert kl_penalty(logp, ref, "k3").item() == pytest.approx(math.exp(-0.5) + 0.5 - 1)
    assert kl_penalty(logp, ref, "k3+k2grad").item() == pytest.approx(math.exp(-0.5) + 0.5 - 1)
    assert kl_penalty(torch.tensor([-30.0]), torch.tensor([0.0]), "k3").item() == 10.0


def _expected_gradient(estimator: str, pi_logits: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """The exact expectation over tokens drawn from pi of the estimator's gradient with
    respect to pi's logits (score-function terms excluded, as in a loss on sampled tokens)."""
    logits = pi_logits.clone().requires_grad_(True)
    logp = torch.log_softmax(logits, -1)
    probabilities = logp.exp().detach()
    penalty = kl_penalty(logp, ref, estimator)
    (probabilities * penalty).sum().backward()
    return logits.grad


def test_which_kl_each_estimator_regularises() -> None:
    """k2 and k3+k2grad follow KL(pi || ref); k3 follows the reverse KL(ref || pi)."""
    pi_logits = torch.tensor([0.3, -0.2, 1.1, 0.0])
    ref = torch.log_softmax(torch.tensor([0.0, 0.5, -0.3, 0.2]), -1)
    logits = pi_logits.clone().requires_grad_(True)
    logp = torch.log_softmax(logits, -1)
    forward = (logp.exp() * (logp - ref)).sum()
    forward_gradient = torch.autograd.grad(forward, logits)[0]
    logits = pi_logits.clone().requires_grad_(True)
    reverse = (ref.exp() * (ref - torch.log_softmax(logits, -1))).sum()
    reverse_gradient = torch.autograd.grad(reverse, logits)[0]
    assert _expected_gradient("k2", pi_logits, ref).tolist() == pytest.approx(
        forward_gradient.tolist(), abs=1e-6)
    assert _expected_gradient("k3+k2grad", pi_logits, ref).tolist() == pytest.approx(
        forward_gradient.tolist(), abs=1e-6)
    assert _expected_gradient("k3", pi_logits, ref).tolist() == pytest.approx(
        reverse_gradient.tolist(), abs=1e-6)
    assert _expected_gradient("k3", pi_logits, ref).tolist() != pytest.approx(
        forward_gradient.tolist(), abs=1e-3)


def test_kl_controllers() -> None:
    adaptive = KLController(kind="adaptive", beta=0.1, target=0.1, horizon=100)
    assert adaptive.update(kl=0.5, n_steps=10) == pytest.approx(0.1 * (1 + 0.2 * 10 / 100))
    band = KLController(kind="band", beta=0.1, band_factor=2.0)
    assert band.update(0.2) == pytest.approx(0.2)
    assert band.update(0.05) == pytest.approx(0.2)
    assert band.update(0.001) == pytest.approx(0.1)
    assert KLController(kind="fixed", beta=0.3).update(5.0) == 0.3
