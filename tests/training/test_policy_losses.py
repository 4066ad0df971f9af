"""Policy losses (references sections 1 and 1b) pinned to hand values."""

from __future__ import annotations

import math

import pytest
import torch

from src.training.policy_losses import GSPO, POLICY_LOSSES, ClipRange, PolicyGradient, PPOClip


def test_registry_names() -> None:
    assert set(POLICY_LOSSES) == {"ppo_clip", "reinforce", "gspo"}


def test_ppo_clip_loss_pinned() -> None:
    old = torch.zeros(4)
    logp = torch.log(torch.tensor([1.5, 0.5, 1.1, 5.0]))
    advantage = torch.tensor([1.0, -1.0, -2.0, -1.0])
    result = PPOClip(ClipRange(0.2, 0.28, 3.0))(logp, old, advantage, torch.ones(4))
    # r=1.5, A=1: max(-1.5, -1.28) = -1.28 (clipped high)
    # r=0.5, A=-1: max(0.5, 0.8) = 0.8 (clipped low)
    # r=1.1, A=-2: max(2.2, 2.2) = 2.2
    # r=5.0, A=-1: max(5, 1.28) = 5, dual clip min(5, 3) = 3
    assert result.per_token.tolist() == pytest.approx([-1.28, 0.8, 2.2, 3.0], rel=1e-6)
    assert result.clipped_high.tolist() == [True, False, False, False]
    assert result.clipped_low.tolist() == [False, True, False, False]


def test_ratio_one_still_has_the_policy_gradient() -> None:
    logp = torch.tensor([-1.0, -2.0], requires_grad=True)
    advantage = torch.tensor([2.0, -1.0])
    PPOClip()(logp, logp.detach(), advantage, torch.ones(2)).per_token.sum().backward()
    assert logp.grad.tolist() == pytest.approx([-2.0, 1.0])
    loss = PolicyGradient()(torch.tensor([-1.0]), torch.tensor([0.0]), torch.tensor([2.0]),
                            torch.ones(1))
    assert loss.per_token.tolist() == [2.0]


def test_gspo_uses_the_sequence_ratio() -> None:
    # one sequence of 2 scored tokens (and one padded): log-ratios 0.2 and 0.0 -> s = e^0.1
    logp = torch.tensor([[-1.0, -2.0, -9.0]], requires_grad=True)
    old = torch.tensor([[-1.2, -2.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    advantage = torch.tensor([[1.0]])
    result = GSPO(ClipRange(0.2, 0.2, None))(logp, old, advantage, mask)
    ratio = math.exp(0.1)
    assert result.per_token[0, :2].tolist() == pytest.approx([-ratio, -ratio], rel=1e-6)
    (result.per_token * mask).sum().backward()
    # each token's gradient is -A * s (the value of s, the gradient of its own log-prob)
    assert logp.grad[0].tolist() == pytest.approx([-ratio, -ratio, 0.0], rel=1e-6)
    clipped = GSPO(ClipRange(3e-4, 4e-4, None))(logp.detach(), old, advantage, mask)
    assert clipped.per_token[0, 0].item() == pytest.approx(-(1 + 4e-4))
    assert bool(clipped.clipped_high[0, 0])


def test_gspo_equals_grpo_on_policy() -> None:
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -0.1]])
    mask = torch.ones_like(logp)
    advantage = torch.tensor([[1.0], [-0.5]])
    gspo = GSPO()(logp, logp, advantage, mask).per_token
    ppo = PPOClip()(logp, logp, advantage, mask).per_token
    assert torch.allclose(gspo, ppo)
