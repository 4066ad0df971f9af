"""The `offline_training_config` file: checked strictly, errors name file, line and key."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from src.agents.agent import Agent
from src.configuration.models import ComponentConfig, StrictModel
from src.configuration.short_names import short_names
from src.configuration.yaml_source import YamlSource, validate_keyed
from src.language_models.language_model import TrainableLanguageModel
from src.run.assembly import ComponentPlan, plan_component
from src.tasks.task import Task
from src.training.aggregation import LossAggregation
from src.training.kl import KLEstimator

OFFLINE_TRAINING_KEY = "offline_training_config"


class RunsJsonlSource(StrictModel):
    """runs.jsonl of an online run; `{LATEST}` in the path stands for the newest finished
    run folder."""

    path: str


class ScoredRowsSource(StrictModel):
    """A .jsonl (a row a line) or .json (a list) file of {prompt, candidates[], scores[]}."""

    path: str
    prompt_key: str = "prompt"
    candidates_key: str = "candidates"
    scores_key: str = "scores"
    id_key: str | None = None


class GroupsConfig(StrictModel):
    runs_jsonl: RunsJsonlSource | None = None
    scored_rows: ScoredRowsSource | None = None
    # Groups whose max - min score is below this are skipped: equal scores give every
    # candidate a zero advantage, and RCE would imitate all-wrong groups as readily.
    min_score_spread: NonNegativeFloat = 1e-6

    @model_validator(mode="after")
    def _one_source(self) -> GroupsConfig:
        if (self.runs_jsonl is None) == (self.scored_rows is None):
            raise ValueError("give exactly one source: runs_jsonl or scored_rows")
        return self


class WarmupConfig(StrictModel):
    """RCE: L = sum_i w_i CE(pi_theta, y_i), w = softmax(score / tau) per group."""

    epochs: NonNegativeInt = 1
    learning_rate_scale: PositiveFloat = 0.1  # of training.learning_rate
    tau_start: PositiveFloat = 2.0
    tau_end: PositiveFloat = 0.5


class GRPOConfig(StrictModel):
    epochs: NonNegativeInt = 3
    top_k: PositiveInt = 3  # curriculum: the best top_k candidates of each group ...
    top_k_epochs: NonNegativeInt = 1  # ... in the first top_k_epochs GRPO epochs
    advantage_clip: PositiveFloat = 5.0
    clip_ratio_low: NonNegativeFloat = 0.2
    clip_ratio_high: NonNegativeFloat = 0.2
    dual_clip: PositiveFloat | None = 3.0
    loss_aggregation: LossAggregation = "token-mean"
    kl_estimator: KLEstimator = "k3"
    kl_coef: NonNegativeFloat = 0.04  # the starting beta
    kl_band_low: NonNegativeFloat = 0.01  # after each GRPO epoch: KL below -> beta / factor
    kl_band_high: NonNegativeFloat = 0.1  # KL above -> beta * factor; also the best/ limit
    kl_band_factor: PositiveFloat = 1.5
    warmup_ratio: float = Field(default=0.1, ge=0.0, le=1.0)  # linear, then cosine


class TrainingConfig(StrictModel):
    learning_rate: PositiveFloat = 5e-5
    weight_decay: NonNegativeFloat = 0.0
    max_grad_norm: PositiveFloat | None = 1.0
    groups_per_step: PositiveInt = 8  # groups per optimiser step (a mini-batch)
    micro_batch_max_tokens: PositiveInt | None = 2048  # padded tokens per forward pass
    temperature: PositiveFloat = 1.0  # log-probs of logits / temperature, as sampled


class OfflineEvaluationConfig(StrictModel):
    """Validation samples of `task`, answered by `agent` on the trained language model
    (its `language_model` parameter names it), at the start and after every epoch."""

    task: ComponentConfig
    agent: ComponentConfig
    max_samples: PositiveInt | None = None
    temperature: NonNegativeFloat = 1.0
    batch_size: PositiveInt = 32  # episodes rolled out together


class OfflineTrainingConfig(StrictModel):
    output_dir: str
    random_seed: int = 42
    reproducible: bool = True  # deterministic kernels: as the assignment's `reproducible`
    # torch's CPU threads: as the assignment's `num_threads` (None: environment or host)
    num_threads: PositiveInt | None = None
    language_model: ComponentConfig
    system_prompt: str | None = None  # as the agent that produced the candidates had it
    groups: GroupsConfig
    warmup: WarmupConfig = Field(default_factory=WarmupConfig)
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    evaluation: OfflineEvaluationConfig | None = None


class OfflineExperimentConfig(StrictModel):
    offline_training_config: OfflineTrainingConfig


@dataclass(frozen=True)
class OfflineTrainingPlan:
    """The config with its components resolved and their parameters checked."""

    config: OfflineExperimentConfig
    source: YamlSource
    language_model: ComponentPlan
    task: ComponentPlan | None
    agent: ComponentPlan | None

    def describe(self) -> str:
        offline = self.config.offline_training_config
        groups = offline.groups.runs_jsonl or offline.groups.scored_rows
        assert groups is not None
        lines = [f"offline training: {self.source.path}", self.language_model.describe(),
                 f"groups: {groups.path} (min_score_spread={offline.groups.min_score_spread})",
                 f"epochs: {offline.warmup.epochs} RCE warm-up + {offline.grpo.epochs} GRPO "
                 f"(top-{offline.grpo.top_k} in the first {offline.grpo.top_k_epochs})"]
        lines += [plan.describe() for plan in (self.task, self.agent) if plan is not None]
        lines.append(f"output_dir: {offline.output_dir}")
        return "\n".join(lines)


# a file as read into today's spelling: a registered component by its name alone
TODAYS_NAMES = short_names(OfflineExperimentConfig)


def load_offline_config(source: YamlSource) -> OfflineExperimentConfig:
    TODAYS_NAMES(source.data, source)
    return validate_keyed(source, OFFLINE_TRAINING_KEY, OfflineExperimentConfig)


def plan_offline_training(config: OfflineExperimentConfig,
                          source: YamlSource) -> OfflineTrainingPlan:
    offline = config.offline_training_config
    root = (OFFLINE_TRAINING_KEY,)
    language_model = plan_component(offline.language_model, (*root, "language_model"), source,
                                    TrainableLanguageModel, {})
    task = agent = None
    if offline.evaluation is not None:
        names = {offline.language_model.name: language_model}
        task = plan_component(offline.evaluation.task, (*root, "evaluation", "task"), source,
                              Task, names)
        agent = plan_component(offline.evaluation.agent, (*root, "evaluation", "agent"),
                               source, Agent, names)
    return OfflineTrainingPlan(config, source, language_model, task, agent)
