"""Pydantic models of an assignment file (the LifelongAgentBench format, strictly checked)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ComponentConfig(StrictModel):
    """A component: a registered `name`, or any class by its dotted `module` path."""

    name: str
    module: str | None = None
    parameters: dict[str, Any] = Field(default_factory=dict)


class DynamicSamplingConfig(StrictModel):
    """DAPO: leave out groups whose task rewards are all equal and refill the batch with
    further samples' groups, for at most `max_rounds` extra generation rounds."""

    max_rounds: PositiveInt = 3


class RolloutConfig(StrictModel):
    """How samples become episodes: B samples a batch, each rolled out G times."""

    batch_size: PositiveInt = 4
    group_size: PositiveInt = 1
    num_epochs: PositiveInt = 1
    max_batches: PositiveInt | None = None
    dynamic_sampling: DynamicSamplingConfig | None = None


class EvaluationConfig(StrictModel):
    """Greedy or sampled evaluation on the task's validation split."""

    every_n_batches: PositiveInt | None = None
    at_start: bool = False
    at_end: bool = False
    max_samples: PositiveInt | None = None
    temperature: float = Field(default=0.0, ge=0.0)


class AssignmentConfig(StrictModel):
    task: ComponentConfig
    agent: ComponentConfig
    language_model_list: list[ComponentConfig] = Field(default_factory=list)
    callback_dict: dict[str, ComponentConfig] = Field(default_factory=dict)
    output_dir: str
    sample_order: Literal["default", "random"] | list[str] = "default"
    random_seed: int = 42
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)


class ExperimentConfig(StrictModel):
    assignment_config: AssignmentConfig


# Keys whose change does not alter what a resumed run computes.
RESUME_SAFE_KEYS: frozenset[str] = frozenset({
    "assignment_config.output_dir",
    "assignment_config.rollout.max_batches",
    "assignment_config.rollout.num_epochs",
    "assignment_config.evaluation.every_n_batches",
    "assignment_config.evaluation.at_end",
})
