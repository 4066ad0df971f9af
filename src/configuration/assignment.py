"""Pydantic models of an assignment file (the LifelongAgentBench format, strictly checked)."""

from __future__ import annotations

import importlib.util
import types
import typing
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationInfo,
    field_validator,
    model_validator,
)


class StrictModel(BaseModel):
    """Unknown keys refused, and a number never given as true/false (pydantic would take
    `batch_size: true` as 1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _numbers_are_not_booleans(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name is not None:
            kinds = _plain_types(cls.model_fields[info.field_name].annotation)
            if bool not in kinds and kinds & {int, float}:
                raise ValueError(f"is a number, not {str(value).lower()}")
        return value


def _plain_types(annotation: Any) -> set[Any]:
    """The types a field's annotation allows, unions flattened."""
    arguments = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return set().union(*(_plain_types(argument) for argument in arguments))
    return {annotation}


def _each_once(splits: list[str]) -> list[str]:
    if len(set(splits)) != len(splits):
        raise ValueError(f"{splits} names a split twice")
    return splits


# The held-out splits an evaluation rolls out, each at most once (src.tasks.task.SPLITS).
EvaluationSplits = Annotated[list[Literal["validation", "selection"]], Field(min_length=1),
                             AfterValidator(_each_once)]


class ComponentConfig(StrictModel):
    """A component: a registered `name`, or any class by its dotted `module` path (a class
    path, or a module path whose module defines one class that fits the slot)."""

    name: str
    module: str | None = None
    parameters: dict[str, Any] = Field(default_factory=dict)


class NestedComponentConfig(StrictModel):
    """A component given as a parameter of another (LifelongAgentBench's task generator):
    `module` names it, `name` may be left out."""

    module: str
    name: str | None = None
    parameters: dict[str, Any] = Field(default_factory=dict)


class DynamicSamplingConfig(StrictModel):
    """DAPO: leave out groups whose task rewards are all equal and refill the batch with
    further train samples' groups, for at most `max_rounds` extra generation rounds. Logs
    `dynamic_sampling/*`; the left-out episodes stay in runs.jsonl, marked
    `dynamic_sampling_dropped`."""

    max_rounds: PositiveInt = 3


class FaultPolicy(StrictModel):
    """What a batch does when its environments or its model fail (`rollout.faults`). Each
    episode's environment runs in a thread of its own, so a call that waits (I/O, a lock,
    a sleep) can be left behind; one that holds the interpreter's lock in C code cannot be
    cut this way. Logs `batch/tries` and `batch/skipped`."""

    # an environment's reset or step that runs longer ends its episode as `task_error`
    # (None: wait for ever)
    step_timeout_s: PositiveFloat | None = 300.0
    # calls left running past step_timeout_s (threads that cannot be killed) the process
    # keeps at most: past it, a new episode ends as `task_error` at its reset, saying so
    max_hung_calls: PositiveInt = 256
    # a model call that raises is made again this many times; then the episodes it served
    # end as `agent_error`
    model_retries: NonNegativeInt = 2
    # a batch in which more than this share of the episodes failed (`task_error`,
    # `agent_error`) is rolled out once more with other seeds; if that fails too, it is
    # logged and skipped (no update)
    max_failed_share: float = Field(default=0.5, ge=0.0, le=1.0)
    # one more skipped batch in a row stops the run with an error: something is broken,
    # not flaky
    max_skipped_in_a_row: NonNegativeInt = 2


class RolloutConfig(StrictModel):
    """How samples become episodes: `batch_size` samples a batch, each rolled out
    `group_size` times; all episodes of a batch step in lockstep (one batched model call a
    round)."""

    batch_size: PositiveInt = 4
    group_size: PositiveInt = 1
    num_epochs: PositiveInt = 1  # passes over the task's train samples
    # 0: no batches, only the evaluation at the start (a trained adapter's held-out
    # figures, through the language model's `adapter_path`)
    max_batches: NonNegativeInt | None = None
    dynamic_sampling: DynamicSamplingConfig | None = None
    # 1: batch n+1 rolls out from a rollout pool, in a thread, while the trainer updates
    # on batch n (one update off policy; pair it with the RL callback's
    # `max_policy_staleness: 1` and `mismatch: {old_logprobs: trainer, correction: tis}`).
    # Refused where the agent samples in process, the agent or task keeps a memory learnt
    # from episodes, or a callback would drop the stale samples. A killed run samples its
    # batch in flight again on resume, from the checkpoint's policy
    max_staleness: int = Field(default=0, ge=0, le=1)
    faults: FaultPolicy = Field(default_factory=FaultPolicy)


class EvaluationConfig(StrictModel):
    """Greedy or sampled evaluation on held-out splits of the task.

    `splits`: "validation" gives the figures a run reports (metrics `eval/...`, episodes
    in evaluation/step-N.jsonl); "selection", where the task draws one, is for choices
    made while training, such as the stopping step (metrics `selection/...`, episodes in
    evaluation/selection/step-N.jsonl): with the RL callback's `best_metric:
    selection/success_rate`, best/ holds the checkpoint the selection split chose, and the
    validation figure at that step was used for nothing.

    `batch_size`: episodes rolled out together (default: a rollout batch, `batch_size *
    group_size`). With low-precision weights a greedy reply can depend on which episodes
    share its forward passes, so two runs compared reply for reply (an SFT stage and the
    RL run that starts from it) should evaluate with the same `batch_size`.
    """

    every_n_batches: PositiveInt | None = None
    at_start: bool = False  # before the first batch (the starting policy's figures)
    at_end: bool = False
    max_samples: PositiveInt | None = None  # the first N samples of each split; None: all
    temperature: float = Field(default=0.0, ge=0.0)  # 0: greedy
    batch_size: PositiveInt | None = None
    splits: EvaluationSplits = Field(default_factory=lambda: ["validation"])


class WandbConfig(StrictModel):
    """Weights & Biases; `offline` (the default) writes OUTPUT_DIR/wandb/ and needs no
    network (`wandb sync` uploads it later)."""

    project: str = "agent-rl"
    entity: str | None = None
    mode: Literal["offline", "online"] = "offline"


class MlflowConfig(StrictModel):
    """MLflow; the default store is a local SQLite file, OUTPUT_DIR/mlflow.db (MLflow's
    plain-folder store is in maintenance mode)."""

    tracking_uri: str | None = None
    experiment: str = "agent-rl"


def _require_package(package: str, config_key: str) -> None:
    if importlib.util.find_spec(package) is None:
        raise ValueError(f"{config_key} needs the package '{package}', which is not installed: "
                         f"pip install -e '.[trackers]'")


class TrackersConfig(StrictModel):
    """Where metrics go besides metrics.jsonl: TensorBoard (on by default), W&B, MLflow (these
    two need `pip install -e '.[trackers]'`). A resumed run continues the same W&B and
    MLflow runs."""

    tensorboard: bool = True
    wandb: WandbConfig | None = None
    mlflow: MlflowConfig | None = None
    # sampled episodes sent to the trackers as tables (W&B table, MLflow artifact table,
    # TensorBoard text): at most this many of each evaluation split and logged batch; 0: none
    episodes_per_table: NonNegativeInt = 8
    # a training batch's episodes every this many batches (0: never)
    train_episodes_every_n_batches: NonNegativeInt = 10

    @model_validator(mode="after")
    def _packages_installed(self) -> TrackersConfig:
        if self.wandb is not None:
            _require_package("wandb", "trackers.wandb")
        if self.mlflow is not None:
            _require_package("mlflow", "trackers.mlflow")
            if self.mlflow.tracking_uri is None:
                _require_package("alembic", "trackers.mlflow (its SQLite store)")
        return self


class AssignmentConfig(StrictModel):
    task: ComponentConfig
    agent: ComponentConfig
    language_model_list: list[ComponentConfig] = Field(default_factory=list)
    callback_dict: dict[str, ComponentConfig] = Field(default_factory=dict)
    # `{TIMESTAMP}` in it: a new folder per run, and the newest unfinished one resumed
    output_dir: str
    # default: the task's order; random: shuffled per epoch; or a list of sample ids
    sample_order: Literal["default", "random"] | list[str] = "default"
    random_seed: int = 42  # the sample order, episode seeds, torch's seed
    # deterministic kernels (src/runtime/reproducibility.py), so that a run repeats bit for
    # bit on CUDA as it does on the CPU (where they change nothing); on CUDA they may cost
    # speed
    reproducible: bool = True
    # torch's CPU threads in the run's process (src/runtime/threads.py); None: the
    # environment's OMP_NUM_THREADS where set, else the CPUs the process may use (its
    # affinity mask and cgroup CPU quota). More threads than CPUs make OpenMP threads spin
    # waiting for each other
    num_threads: PositiveInt | None = None
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    trackers: TrackersConfig = Field(default_factory=TrackersConfig)


class ExperimentConfig(StrictModel):
    assignment_config: AssignmentConfig


class ThreadsSetting(StrictModel):
    """A pipeline section's `num_threads`, read (and checked as the pipeline checks it)
    before the rest: the threads are set before the pipeline builds anything."""

    num_threads: PositiveInt | None = None


# Keys (and sections: every key under them) whose change does not alter what a resumed run
# computes.
RESUME_SAFE_KEYS: frozenset[str] = frozenset({
    "assignment_config.output_dir",
    "assignment_config.rollout.max_batches",
    "assignment_config.rollout.num_epochs",
    "assignment_config.evaluation.every_n_batches",
    "assignment_config.evaluation.at_end",
    "assignment_config.trackers",
    # the same sums in a fixed order, not other sums: a run started without the setting
    # (or before it existed) goes on with it
    "assignment_config.reproducible",
    "supervised_training_config.reproducible",
    "offline_training_config.reproducible",
    # how many threads do the work: where the config does not say, the host decides, and a
    # resumed run may have another host
    "assignment_config.num_threads",
    "supervised_training_config.num_threads",
    "offline_training_config.num_threads",
})
