"""Policy losses (references sections 1 and 1b) pinned to hand values."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from src.run_experiment import main
from src.training.policy_losses import (
    GSPO,
    POLICY_LOSSES,
    ClipRange,
    PolicyGradient,
    PolicyLoss,
    PPOClip,
)
from src.training.settings import PPOSettings

# an RL run by short names, its trainer's loss named by the test
ASSIGNMENT = """\
assignment_config:
  output_dir: {output}
  rollout: {{batch_size: 2, group_size: 2, max_batches: 1}}
  evaluation: {{at_start: false, at_end: false}}
  task: {{name: math_problems, parameters: {{num_train: 4, num_validation: 2}}}}
  language_model_list:
    - name: policy
      module: src.language_models.instance.huggingface_lora_language_model
      parameters:
        model_name_or_path: {model}
        dtype: float32
        lora_config: {{r: 4, lora_alpha: 8, target_modules: [q_proj, v_proj]}}
  agent: {{name: lora_rl_agent, parameters: {{max_new_tokens: 8}}}}
  callback_dict:
    rl_training:
      name: rl_training
      # the entropy bonus keeps every step's forward (an update whose advantages are
      # all 0 and nothing else in the loss skips it: the loss would not be called)
      parameters: {{ppo: {{loss: {loss}, entropy_coeff: 0.01}}}}
"""


def test_registry_names() -> None:
    assert set(POLICY_LOSSES) == {"ppo_clip", "reinforce", "gspo"}


@pytest.fixture
def halved_ppo_clip() -> Iterator[type[PPOClip]]:
    """A loss added the one way there is: its class, registered by its name where it is
    defined (here, for the test's length only)."""

    @POLICY_LOSSES.register("halved_ppo_clip")
    class HalvedPPOClip(PPOClip):
        """ppo_clip's per-token loss, halved; it counts its calls."""

        calls = 0

        def __call__(self, logp: torch.Tensor, old: torch.Tensor, advantage: torch.Tensor,
                     mask: torch.Tensor) -> PolicyLoss:
            HalvedPPOClip.calls += 1
            loss = super().__call__(logp, old, advantage, mask)
            return PolicyLoss(loss.per_token / 2, loss.clipped_low, loss.clipped_high)

    yield HalvedPPOClip
    POLICY_LOSSES.unregister("halved_ppo_clip")


def test_a_loss_registered_where_it_is_defined_is_a_config_value_that_trains(
        halved_ppo_clip: type[PPOClip], tiny_model_path: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert PPOSettings(loss="halved_ppo_clip").loss == "halved_ppo_clip"
    with pytest.raises(ValidationError, match="Input should be 'ppo_clip', 'reinforce', "
                                              "'gspo' or 'halved_ppo_clip'"):
        PPOSettings(loss="halved")
    path = tmp_path / "assignment.yaml"
    path.write_text(ASSIGNMENT.format(output=tmp_path / "run", model=tiny_model_path,
                                      loss="halved"))
    assert main(["--config_path", str(path), "--dry_run"]) == 2
    error = capsys.readouterr().err
    assert f"config error: {path}:" in error
    assert ("ppo.loss: Input should be 'ppo_clip', 'reinforce', 'gspo' or 'halved_ppo_clip'"
            in error)
    path.write_text(ASSIGNMENT.format(output=tmp_path / "run", model=tiny_model_path,
                                      loss="halved_ppo_clip"))
    assert main(["--config_path", str(path), "--no_progress"]) == 0
    assert halved_ppo_clip.calls > 0
    assert (tmp_path / "run" / "callback_state" / "rl_training").is_dir()


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
