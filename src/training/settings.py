"""The RL update's settings, grouped as a config file writes them (pydantic; unknown keys
are errors). Each group is consumed by one piece of the training core."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from src.training.aggregation import LossAggregation
from src.training.kl import KLEstimator
from src.training.mismatch import Correction, Level
from src.training.optimisation import LearningRateSchedule


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OptimizerSettings(_Settings):
    """One optimiser step per mini-batch; micro-batches only bound memory."""

    optimizer_class: str = "AdamW"  # a torch.optim name or a dotted path
    learning_rate: float = 1e-5
    weight_decay: float = 0.0
    lr_schedule: LearningRateSchedule = "constant"
    warmup_ratio: float = Field(0.0, ge=0.0, lt=1.0)
    max_grad_norm: float | None = 1.0
    gradient_accumulation_steps: int = Field(1, ge=1)
    # each micro-batch's padded size (rows x longest row) stays under it: activation
    # memory grows with it, the loss does not change
    micro_batch_max_tokens: int | None = Field(512, ge=1)


class AdvantageSettings(_Settings):
    estimator: Literal["grpo", "dr_grpo", "rloo", "reinforce"] = "grpo"
    reinforce_baseline: Literal["none", "running_mean", "group_mean"] = "running_mean"
    baseline_decay: float = Field(0.9, ge=0.0, le=1.0)
    whiten: bool = False  # over the batch (REINFORCE++)
    clip: float | None = Field(5.0, gt=0.0)
    # groups whose task returns are all equal: advantage 0 (keep) or left out of the loss
    zero_std_groups: Literal["keep", "drop"] = "keep"


class PPOSettings(_Settings):
    loss: Literal["ppo_clip", "reinforce", "gspo"] = "ppo_clip"
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    dual_clip: float | None = 3.0
    epochs: int = Field(1, ge=1)  # passes over each batch
    mini_batch_size: int | None = Field(None, ge=1)  # episodes per optimiser step
    aggregation: LossAggregation = "token-mean"
    # seq-mean-token-sum-norm's constant length; None = the generation budget (the
    # agent's max_new_tokens per sampled turn), as Dr. GRPO and TRL use
    norm_length: int | None = Field(None, ge=1)
    entropy_coeff: float = 0.0
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


class KLSettings(_Settings):
    coef: float = Field(0.0, ge=0.0)  # beta
    estimator: KLEstimator = "k3"
    in_reward: bool = False  # subtract beta * sum_t KL from the return instead of the loss
    controller: Literal["fixed", "adaptive", "band"] = "fixed"
    target: float = 0.1
    horizon: int = 10000
    # base: the model with the adapter off; initial_adapter: the adapter the run started
    # from (the language model's adapter_path), e.g. an SFT checkpoint
    reference: Literal["base", "initial_adapter"] = "base"


class RewardSettings(_Settings):
    source: Literal["task", "outcome"] = "task"
    weight: float = 1.0
    correct: float = 1.0
    incorrect: float = -0.1
    timeout: float = -0.3


class MismatchSettings(_Settings):
    """Sampler vs trainer log-probs (bf16 or vLLM sampling, fp32 training)."""

    # sampler: the PPO ratio's "old" is the sampler's recorded log-prob; trainer: it is
    # recomputed by the trainer before the update (needed by a correction)
    old_logprobs: Literal["sampler", "trainer"] = "sampler"
    correction: Correction = "none"
    level: Level = "token"
    threshold: float = Field(2.0, gt=1.0)

    @model_validator(mode="after")
    def _needs_trainer(self) -> MismatchSettings:
        if self.correction != "none" and self.old_logprobs != "trainer":
            raise ValueError(f"correction '{self.correction}' weighs the trainer's log-probs "
                             "against the sampler's: set old_logprobs: trainer")
        return self
