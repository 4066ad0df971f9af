"""The RL settings' names mean their papers' forms by default."""

from __future__ import annotations

import pytest
import torch

from src.training.advantages import ADVANTAGE_ESTIMATORS
from src.training.settings import AdvantageSettings, PPOSettings, loss_aggregation


@pytest.mark.parametrize(("loss", "estimator", "aggregation"), [
    ("ppo_clip", "grpo", "token-mean"),
    ("reinforce", "reinforce", "token-mean"),
    ("gspo", "grpo", "seq-mean-token-mean"),  # GSPO: each sequence's token mean
    ("ppo_clip", "dr_grpo", "seq-mean-token-sum-norm"),  # Dr. GRPO: a constant normaliser
])
def test_each_name_takes_its_papers_aggregation(loss: str, estimator: str,
                                                aggregation: str) -> None:
    assert loss_aggregation(PPOSettings(loss=loss),
                            AdvantageSettings(estimator=estimator)) == aggregation


def test_a_given_aggregation_wins_and_differing_papers_must_choose() -> None:
    assert loss_aggregation(PPOSettings(loss="gspo", aggregation="token-mean"),
                            AdvantageSettings()) == "token-mean"
    with pytest.raises(ValueError, match="set ppo.aggregation"):
        loss_aggregation(PPOSettings(loss="gspo"), AdvantageSettings(estimator="dr_grpo"))


def test_the_default_clip_keeps_a_large_groups_zero_sum() -> None:
    """One success among 27: GRPO's advantage of the success is 26 / sqrt(27) > 5."""
    returns = torch.tensor([1.0] + [0.0] * 26)
    advantages = ADVANTAGE_ESTIMATORS["grpo"]()(returns, torch.zeros(27, dtype=torch.long))
    assert advantages.max() > 5.0
    clip = AdvantageSettings().clip
    kept = advantages if clip is None else advantages.clamp(-clip, clip)
    assert abs(float(kept.sum())) < 1e-5
