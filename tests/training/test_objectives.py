"""When the policy objective vanishes (its loss 0 with a zero gradient whatever the model
scores): the learner then takes its step without a forward."""

from __future__ import annotations

import math

import torch

from src.training.objectives import CrossEntropyObjective, PolicyObjective
from src.training.policy_losses import POLICY_LOSSES
from src.training.token_rows import TokenRows


def _rows(advantages: list[float]) -> TokenRows:
    rows = TokenRows.from_sequences([[1, 2, 3]] * len(advantages), [[0, 1, 1]] * len(advantages),
                                    pad_id=0)
    rows.advantages = torch.tensor(advantages)
    return rows


def test_the_policy_objective_vanishes_only_on_zero_advantages_and_nothing_else() -> None:
    objective = PolicyObjective(POLICY_LOSSES["ppo_clip"]())
    rows = _rows([0.0, -0.0, 0.5])
    assert objective.vanishes(rows, [0, 1])
    assert not objective.vanishes(rows, [1, 2])
    assert not objective.vanishes(_rows([0.0, math.nan]), [0, 1])  # NaN is not 0


def test_an_entropy_bonus_or_a_scored_reference_keeps_the_objective() -> None:
    rows = _rows([0.0, 0.0])
    assert not PolicyObjective(POLICY_LOSSES["ppo_clip"](), entropy_coeff=0.01).vanishes(
        rows, [0, 1])
    # a reference scored: its KL is penalised (kl_coef > 0) or measured for the KL
    # controller (kl_coef 0, KL in the reward), and either needs the forward
    rows.ref_logprobs = torch.zeros(2, 3)
    for kl_coef in (0.0, 0.1):
        assert not PolicyObjective(POLICY_LOSSES["reinforce"](), kl_coef=kl_coef).vanishes(
            rows, [0, 1])


def test_the_cross_entropy_objective_never_vanishes() -> None:
    assert not CrossEntropyObjective().vanishes(_rows([0.0]), [0])
