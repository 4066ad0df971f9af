"""The online pipeline's config: an `assignment_config` file (the LifelongAgentBench format,
strictly checked)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeInt, PositiveInt

from src.configuration.models import (
    SECTION_RESUME_SAFE_KEYS,
    ComponentConfig,
    EvaluationSplits,
    FaultPolicy,
    StrictModel,
    TrackersConfig,
)

ONLINE_TRAINING_KEY = "assignment_config"


class DynamicSamplingConfig(StrictModel):
    """DAPO: leave out groups whose task rewards are all equal and refill the batch with
    further train samples' groups, for at most `max_rounds` extra generation rounds. Logs
    `dynamic_sampling/*`; the left-out episodes stay in runs.jsonl, marked
    `dynamic_sampling_dropped`."""

    max_rounds: PositiveInt = 3


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
    # on batch n (one update off policy; pair it with the RL trainer's
    # `max_policy_staleness: 1` and `mismatch: {old_logprobs: trainer, correction: tis}`).
    # Refused where the agent samples in process, the agent or task keeps a memory learnt
    # from episodes, or a trainer would drop the stale samples. A killed run samples its
    # batch in flight again on resume, from the checkpoint's policy
    max_staleness: int = Field(default=0, ge=0, le=1)
    faults: FaultPolicy = Field(default_factory=FaultPolicy)


class EvaluationConfig(StrictModel):
    """Greedy or sampled evaluation on held-out splits of the task.

    `splits`: "validation" gives the figures a run reports (metrics `eval/...`, episodes
    in evaluation/step-N.jsonl); "selection", where the task draws one, is for choices
    made while training, such as the stopping step (metrics `selection/...`, episodes in
    evaluation/selection/step-N.jsonl): with the RL trainer's `best_metric:
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


class OnlineTrainingConfig(StrictModel):
    """The `assignment_config` section (LifelongAgentBench's name for a run's file)."""

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


class OnlineExperimentConfig(StrictModel):
    assignment_config: OnlineTrainingConfig


# Keys (and sections: every key under them) of the section whose change does not alter
# what a resumed run computes.
RESUME_SAFE_KEYS: frozenset[str] = SECTION_RESUME_SAFE_KEYS | {
    "output_dir",
    "rollout.max_batches",
    "rollout.num_epochs",
    "evaluation.every_n_batches",
    "evaluation.at_end",
    "trackers",
}
