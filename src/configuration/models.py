"""The config models every pipeline shares: strict models, components, the fault policy of
rollouts, the trackers, the threads setting."""

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


class ThreadsSetting(StrictModel):
    """A pipeline section's `num_threads`, read (and checked as the pipeline checks it)
    before the rest: the threads are set before the pipeline builds anything."""

    num_threads: PositiveInt | None = None


# Keys of every pipeline's section (and sections: every key under them) whose change does
# not alter what a resumed run computes; each pipeline adds its own (`Pipeline`).
SECTION_RESUME_SAFE_KEYS: frozenset[str] = frozenset({
    # the same sums in a fixed order, not other sums: a run started without the setting
    # (or before it existed) goes on with it
    "reproducible",
    # how many threads do the work: where the config does not say, the host decides, and a
    # resumed run may have another host
    "num_threads",
})
