"""The RL update's settings, grouped as a config file writes them (pydantic; unknown keys
are errors). Each group is consumed by one piece of the training core."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from src.training.advantages import AdvantageEstimatorName
from src.training.aggregation import LossAggregation
from src.training.kl import KLEstimator
from src.training.mismatch import Correction, Level
from src.training.optimisation import LearningRateSchedule
from src.training.policy_losses import PolicyLossName


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OptimizerSettings(_Settings):
    """One optimiser step per mini-batch; micro-batches only bound memory. The defaults
    are the RL trainer's; the supervised stage has its own (its `optimizer`)."""

    optimizer_class: str = "AdamW"  # a torch.optim name or a dotted path
    learning_rate: float = 1e-5
    weight_decay: float = 0.0
    lr_schedule: LearningRateSchedule = "constant"  # after the warmup; cosine ends at 0
    warmup_ratio: float = Field(0.0, ge=0.0, lt=1.0)  # share of the steps: linear warmup
    max_grad_norm: float | None = 1.0  # gradient norm clipping; None: off
    # each mini-batch is cut into at least this many micro-batches (still one step)
    gradient_accumulation_steps: int = Field(1, ge=1)
    # each micro-batch's padded size (rows x longest row; with shared-prefix training,
    # packs x longest pack) stays under it, a group kept in one pack where it fits.
    # Activation memory grows with it, the loss does not change. auto: 512 on a CPU, on
    # a GPU what fits 60% of its free memory (src.training.micro_batches) when first
    # needed, then kept for the run (checkpoints carry it)
    micro_batch_max_tokens: Annotated[int, Field(ge=1)] | Literal["auto"] | None = "auto"


class AdvantageSettings(_Settings):
    """One advantage per episode from the returns. A group whose task returns are all
    equal carries no signal and gets advantage exactly 0 (group-relative estimators)."""

    # grpo: (R - group mean) / group std; dr_grpo: R - group mean; rloo: R - mean of the
    # group's others; reinforce: R - `reinforce_baseline`
    estimator: AdvantageEstimatorName = "grpo"
    # running_mean: an EMA of earlier batches' mean return (never the batch's own)
    reinforce_baseline: Literal["none", "running_mean", "group_mean"] = "running_mean"
    baseline_decay: float = Field(0.9, ge=0.0, le=1.0)  # the running mean's decay
    whiten: bool = False  # over the batch (REINFORCE++)
    # advantages clipped to [-clip, clip]; off by default, as in the papers: a clip
    # breaks a group's zero sum (grpo's largest |A| is (G - 1) / sqrt(G), above 5 from
    # G = 27 on)
    clip: float | None = Field(None, gt=0.0)
    # groups whose task returns are all equal: advantage 0 (keep) or left out of the loss
    zero_std_groups: Literal["keep", "drop"] = "keep"


class PPOSettings(_Settings):
    """The policy loss and how a batch is stepped through.

    A name's default aggregation follows its paper unless a setting says otherwise:
    `loss: gspo` averages each sequence's tokens, then the sequences
    (seq-mean-token-mean), so a long reply weighs as much as a short one;
    `advantage.estimator: dr_grpo` divides each sequence's token sum by a constant, the
    generation budget (seq-mean-token-sum-norm, see `norm_length`); GRPO, PPO and
    REINFORCE average over the mini-batch's tokens (token-mean, as TRL and verl do by
    default for GRPO; DeepSeekMath's GRPO itself averages each sequence's tokens, then
    the sequences: seq-mean-token-mean). A given `aggregation` overrides the default;
    gspo with dr_grpo must give one. Advantages are not clipped unless `advantage.clip` is
    set: a clip breaks a group's zero sum once |A| reaches it (GRPO's largest is
    (G-1)/sqrt(G))."""

    # ppo_clip: each token's ratio in the clipped surrogate; reinforce: -A logp, no ratio;
    # gspo: one ratio per sequence (the geometric mean of its tokens'), clipped as a whole;
    # the GSPO paper's range is clip_ratio_low: 3e-4, clip_ratio_high: 4e-4
    loss: PolicyLossName = "ppo_clip"
    clip_ratio_low: float = 0.2  # in [0, 1): the ratio's floor is 1 - clip_ratio_low
    clip_ratio_high: float = 0.2  # the ratio's ceiling is 1 + clip_ratio_high
    dual_clip: float | None = 3.0  # > 1: bounds a negative advantage's loss at -A c
    epochs: int = Field(1, ge=1)  # passes over each batch
    mini_batch_size: int | None = Field(None, ge=1)  # episodes a step; None: the batch
    # token-mean: over all tokens of the mini-batch; seq-mean-token-mean: mean over
    # sequences of each one's token mean; seq-mean-token-sum: of each one's token sum;
    # seq-mean-token-sum-norm (Dr. GRPO): token sum / (sequences x norm_length).
    # None: the papers' form for the names chosen (`loss_aggregation`)
    aggregation: LossAggregation | None = None
    # seq-mean-token-sum-norm's constant: a generation budget per episode, the same for
    # every batch (Dr. GRPO's MAX_TOKENS). None: the agent's max_new_tokens, a reply's
    # budget, as Dr. GRPO and TRL use; for episodes of several turns give the budget of an
    # episode (max_new_tokens x turns) to keep a one-reply loss scale. Never the batch's
    # longest episode, which would scale every other episode's gradient by it
    norm_length: int | None = Field(None, ge=1)
    entropy_coeff: float = 0.0  # > 0 adds an entropy bonus to the loss
    # episodes whose last reply hit max_new_tokens add nothing to the loss
    mask_truncated_completions: bool = False

    @model_validator(mode="after")
    def _clip_range(self) -> PPOSettings:
        if not 0.0 <= self.clip_ratio_low < 1.0:
            raise ValueError(f"clip_ratio_low must be in [0, 1), got {self.clip_ratio_low}")
        if self.clip_ratio_high < 0.0:
            raise ValueError(f"clip_ratio_high must be >= 0, got {self.clip_ratio_high}")
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1 (it bounds the loss of a negative "
                             f"advantage at -A c), got {self.dual_clip}")
        return self


# The aggregation each name's paper uses: GSPO averages each sequence's tokens, then the
# sequences (seq-mean-token-mean); Dr. GRPO sums tokens and divides by a constant length
# (seq-mean-token-sum-norm); GRPO, PPO and REINFORCE here average over tokens (TRL's and
# verl's default, not DeepSeekMath's sequence mean of token means).
PAPER_AGGREGATION: dict[str, LossAggregation] = {"gspo": "seq-mean-token-mean",
                                                 "dr_grpo": "seq-mean-token-sum-norm"}


def loss_aggregation(ppo: PPOSettings, advantage: AdvantageSettings) -> LossAggregation:
    """`ppo.aggregation` where given, else the papers' form of the loss and estimator
    named (token-mean for names without one); names whose papers differ must choose."""
    if ppo.aggregation is not None:
        return ppo.aggregation
    forms = {name: PAPER_AGGREGATION[name] for name in (ppo.loss, advantage.estimator)
             if name in PAPER_AGGREGATION}
    if len(set(forms.values())) > 1:
        raise ValueError(f"loss {ppo.loss} and estimator {advantage.estimator} come from "
                         f"papers that aggregate differently ({forms}): set ppo.aggregation")
    return next(iter(forms.values()), "token-mean")


class KLSettings(_Settings):
    """A KL penalty towards a reference policy, per token of the sampled replies."""

    coef: float = Field(0.0, ge=0.0)  # beta; 0: no penalty, the reference is not scored
    # with D = logp - ref: k1 = D, whose expected gradient is 0; k2 = D^2/2, whose gradient
    # is that of KL(pi||ref); k3 (verl's low_var_kl) = exp(-D) + D - 1, an unbiased value
    # of KL(pi||ref) whose gradient is that of the reverse KL(ref||pi); k3+k2grad: k3's
    # value with k2's gradient
    estimator: KLEstimator = "k3"
    in_reward: bool = False  # subtract beta * sum_t KL from the return instead of the loss
    # adaptive (PPO): beta moves towards the KL `target` over `horizon` episodes; band:
    # beta x 1.5 after a batch whose KL is above 0.1, / 1.5 below 0.01
    controller: Literal["fixed", "adaptive", "band"] = "fixed"
    target: float = 0.1  # adaptive only
    horizon: int = 10000  # adaptive only
    # base: the model with the adapter off; initial_adapter: the adapter the run started
    # from (the language model's adapter_path), e.g. an SFT checkpoint
    reference: Literal["base", "initial_adapter"] = "base"


class RewardSettings(_Settings):
    """An episode's return: the task's reward times `weight`. Outcome rewards (DB-bench's
    `reward_correct`, `reward_incorrect`, `reward_timeout`) are the task's own settings."""

    weight: float = 1.0

    @model_validator(mode="before")
    @classmethod
    def _outcome_rewards_are_the_task_s(cls, data: Any) -> Any:
        # the keys of configs written when the trainer could score outcomes itself
        moved = sorted({"source", "correct", "incorrect", "timeout"} & set(data)
                       if isinstance(data, dict) else ())
        if moved:
            raise ValueError(
                f"{moved}: outcome rewards are the task's own settings (DB-bench's "
                "reward_correct, reward_incorrect, reward_timeout) and the trainer takes the "
                "task's reward times `weight`: set them among the task's parameters")
        return data


class DistillationSettings(_Settings):
    """On-policy distillation (the trainer's `teacher`): each agent token the student
    sampled gets the advantage weight x (teacher log-prob - student log-prob), the negative
    of the per-token reverse KL estimate, so the student moves towards what the teacher
    would have said at that token of its own reply; the task's advantage can be mixed in."""

    # the distillation term's scale: the per-token advantage is -weight x (student log-prob
    # - teacher log-prob); the student's is the PPO ratio's "old" (sampled), no gradient
    weight: float = Field(1.0, ge=0.0, allow_inf_nan=False)
    # the task's advantage (the estimator's, from the returns) times this, added to every
    # token's: 0 trains on the teacher alone (the task's reward is still logged beside the
    # reverse KL, to read whether imitating the teacher solves the task); 1 adds the usual
    # RL signal on top
    reward_weight: float = Field(0.0, ge=0.0, allow_inf_nan=False)


class TrainerWorkerSettings(_Settings):
    """Where the update runs: `count` 1 in this process; 2 or more in that many Ray actors
    that shard the model with FSDP (src.training.sharded_learner)."""

    count: int = Field(1, ge=1)
    cpus_per_worker: int = Field(1, ge=1)  # also each worker's torch threads
    gpus_per_worker: int = Field(0, ge=0)  # 1: a GPU for each worker


class MismatchSettings(_Settings):
    """Sampler vs trainer log-probs, for a sampler in another dtype or engine (bf16, vLLM)
    or a policy some updates old; logs `mismatch/*` (KL, ratio, share corrected, ESS)."""

    # sampler: the PPO ratio's "old" is the sampler's recorded log-prob; trainer: the
    # trainer's log-prob before the update, from the update's own forward when the batch is
    # one optimiser step, else from a scoring pass first (needed by a correction)
    old_logprobs: Literal["sampler", "trainer"] = "sampler"
    # with rho = exp(trainer - sampler) per token: tis weighs each token's loss by
    # min(rho, threshold); mis masks tokens with rho outside [1/threshold, threshold]
    correction: Correction = "none"
    level: Level = "token"  # sequence: rho is the product over the sequence's tokens
    threshold: float = Field(2.0, gt=1.0)

    @model_validator(mode="after")
    def _needs_trainer(self) -> MismatchSettings:
        if self.correction != "none" and self.old_logprobs != "trainer":
            raise ValueError(f"correction '{self.correction}' weighs the trainer's log-probs "
                             "against the sampler's: set old_logprobs: trainer")
        return self
