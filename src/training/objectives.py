"""Losses of one micro-batch, given what the model scored: the policy-gradient objective
(RL, online or offline) and the cross-entropy objective (supervised, RCE warm-up).

Each is called by the learner (src.training.learner) once per micro-batch with the
mini-batch's totals, so that micro-batches add up to the mini-batch's loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import torch

from src.language_models.language_model import ScoredTokens
from src.training.aggregation import LossAggregation, aggregate
from src.training.kl import KLEstimator, kl_penalty
from src.training.mismatch import MismatchCorrection
from src.training.policy_losses import PolicyLossFunction
from src.training.token_metrics import TokenMetrics
from src.training.token_rows import TokenRows


@dataclass(frozen=True)
class MiniBatchTotals:
    """Denominators of the whole mini-batch (not of one micro-batch)."""

    num_sequences: int
    num_tokens: float
    longest_completion: int


@dataclass
class PolicyObjective:
    """L = agg(w_t * policy_loss_t) + beta * agg(KL_t) - entropy_coeff * agg(H_t).

    The policy loss takes each token's advantage: its row's plus, where the rows carry
    one, the token's own term (a distillation teacher's; `TokenRows.per_token_advantages`).
    w_t are the rows' importance weights (1 without a mismatch correction). KL is taken to
    `ref_logprobs` when the rows carry them (and only logged when beta is 0).
    `measure_drift` logs |trainer - sampler| before the first step of a batch.

    `old_from_forward`: the batch takes one optimiser step, so the trainer's log-probs
    before it are this very forward's (detached). They are the PPO ratio's "old" and the
    correction's o_t against the sampler's s_t, with no separate scoring pass.

    The loss vanishes, value and gradient, whatever the model scores, when every token's
    A is 0 and no other term is there: no entropy bonus, and no KL reference scored
    (then the KL is neither penalised nor measured, and a measured KL feeds the KL
    controller). `vanishes` says so, and the learner then skips the forward.
    """

    policy_loss: PolicyLossFunction
    aggregation: LossAggregation = "token-mean"
    norm_length: int | None = None  # None: the mini-batch's longest completion
    kl_coef: float = 0.0
    kl_estimator: KLEstimator = "k3"
    entropy_coeff: float = 0.0
    measure_drift: bool = False
    with_entropy: bool = True
    dropout: bool = False  # the ratio is 1 on policy only if scoring matches sampling
    old_from_forward: MismatchCorrection | None = None

    def __call__(self, part: TokenRows, scored: ScoredTokens, totals: MiniBatchTotals,
                 metrics: TokenMetrics) -> torch.Tensor:
        assert part.old_logprobs is not None
        logp = scored.logprobs
        device = logp.device  # the rows are built on the CPU; the model may score on a GPU
        mask = part.batch.loss_mask.to(device)
        old = part.old_logprobs.to(device)
        token_weights = part.token_weights
        if self.old_from_forward is not None:
            assert part.sampler_logprobs is not None
            old = logp.detach()
            token_weights = self.old_from_forward.apply(
                old, part.sampler_logprobs.to(device), mask, metrics)
        result = self.policy_loss(logp, old, part.per_token_advantages().to(device), mask)
        per_token = result.per_token
        if token_weights is not None:
            per_token = per_token * token_weights.to(device)
        reduce = partial(aggregate, mask=mask, mode=self.aggregation,
                         norm_length=self.norm_length or totals.longest_completion,
                         num_sequences=totals.num_sequences, num_tokens=totals.num_tokens)
        loss = reduce(per_token)
        if self.entropy_coeff:
            assert scored.entropy is not None
            loss = loss - self.entropy_coeff * reduce(scored.entropy)
        if part.ref_logprobs is not None:
            kl = kl_penalty(logp, part.ref_logprobs.to(device), self.kl_estimator)
            if self.kl_coef > 0:
                loss = loss + self.kl_coef * reduce(kl)
            metrics.add("kl", kl, mask)
        metrics.add("clip_ratio/low_mean", result.clipped_low.float(), mask)
        metrics.add("clip_ratio/high_mean", result.clipped_high.float(), mask)
        if scored.entropy is not None:
            metrics.add("entropy", scored.entropy, mask)
        if self.measure_drift and part.sampler_logprobs is not None:
            metrics.add("logprob_diff/sampler_trainer",
                        (logp - part.sampler_logprobs.to(device)).abs(), mask)
        return loss

    def vanishes(self, rows: TokenRows, indices: Sequence[int]) -> bool:
        """Whether the loss of these rows is 0 with a zero gradient whatever the model
        scores: every advantage exactly 0, per-token terms (a teacher's) included (a NaN
        is not 0), no entropy term, no reference."""
        return (not self.entropy_coeff and rows.ref_logprobs is None
                and bool((rows.per_token_advantages()[list(indices)] == 0).all()))


@dataclass
class CrossEntropyObjective:
    """L = agg(-w_row * logp_t) over the masked tokens (references 1b: the supervised
    loss is token-mean). With softmax weights per group, `seq-mean-token-sum` and
    `num_sequences` = the mini-batch's groups, this is the RCE warm-up loss
    (1 / groups) sum_g sum_i w_i CE(pi, y_i)."""

    aggregation: LossAggregation = "token-mean"
    num_sequences: int | None = None  # overrides the mini-batch's row count
    with_entropy: bool = False
    dropout: bool = True

    def __call__(self, part: TokenRows, scored: ScoredTokens, totals: MiniBatchTotals,
                 metrics: TokenMetrics) -> torch.Tensor:
        logp = scored.logprobs
        mask = part.batch.loss_mask.to(logp.device)
        negative = -logp
        if part.row_weights is not None:
            negative = negative * part.row_weights.to(logp.device)[:, None]
        metrics.add("nll", -logp, mask)
        return aggregate(negative, mask, self.aggregation,
                         num_sequences=self.num_sequences or totals.num_sequences,
                         num_tokens=totals.num_tokens)

    def vanishes(self, rows: TokenRows, indices: Sequence[int]) -> bool:
        return False  # -logp is what the model scores
