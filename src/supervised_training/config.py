"""The `supervised_training_config` file: checked strictly, errors name file, line and key."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import Field, NonNegativeFloat, PositiveInt, model_validator

from src.agents.agent import Agent
from src.configuration.models import ComponentConfig, EvaluationSplits, StrictModel
from src.configuration.short_names import short_names
from src.configuration.yaml_source import YamlSource, validate_keyed
from src.language_models.language_model import TrainableLanguageModel
from src.records.episode import Outcome
from src.run.assembly import ComponentPlan, check_selection_split, plan_component
from src.storage.run_layout import EVALUATION_PREFIXES
from src.tasks.task import Task
from src.training.settings import OptimizerSettings

SUPERVISED_TRAINING_KEY = "supervised_training_config"


class OracleDemonstrations(StrictModel):
    """The task's expert (its `oracle_reply`) rolled through train samples; only the
    episodes it wins are kept. DB-bench's runs the reference SQL, reads the result and
    answers; math's gives the boxed answer; econ's decides by the rule policy, or the
    planner with the task's `oracle_policy: planner`; math_python_tool's calls the python
    tool on the problem and boxes its output. A tool task's episodes are kept with their
    tools and tool results and tokenised as the LoRA agent renders a tool episode."""

    num_samples: PositiveInt | None = None  # the first N train samples; None: all


class RunsJsonlDemonstrations(StrictModel):
    """A finished run's episodes, filtered (rejection sampling: train on your successes).
    `{LATEST}` in the path stands for the newest finished run folder."""

    path: str
    # the outcomes kept: correct, incorrect, unknown (None: any)
    outcomes: list[Outcome] | None = Field(default_factory=lambda: [Outcome.CORRECT])
    min_reward: float | None = None  # and only episodes with at least this reward


class ChatsJsonlDemonstrations(StrictModel):
    """One chat a line: {"messages": [{"role": "system" | "user" | "assistant",
    "content": ...}, ...]}; a leading system message replaces the agent's system prompt."""

    path: str


class OversampledDemonstrations(StrictModel):
    """Demonstrations trained on `times` times an epoch: those whose last agent turn matches
    `reply_pattern` (a regular expression, searched) and whose category is `category`, where
    each is given. A rare decision the expert takes a few times in a hundred (the econ
    planner's rests) is otherwise learned less than the common one."""

    reply_pattern: str | None = None
    category: str | None = None
    times: int = Field(ge=2)

    @model_validator(mode="after")
    def _some_filter(self) -> OversampledDemonstrations:
        if self.reply_pattern is None and self.category is None:
            raise ValueError("give reply_pattern, category or both: which demonstrations to "
                             "repeat")
        if self.reply_pattern is not None:
            try:
                re.compile(self.reply_pattern)
            except re.error as error:
                raise ValueError(f"reply_pattern {self.reply_pattern!r} is not a regular "
                                 f"expression: {error}") from error
        return self

    def describe(self) -> str:
        return f"oversample x{self.times}: {self.model_dump(exclude_none=True, exclude={'times'})}"


class DemonstrationsConfig(StrictModel):
    """Where demonstrations come from: one or more sources, joined. The run keeps them in
    OUTPUT_DIR/demonstrations.jsonl, so a resumed run trains on the same ones."""

    oracle: OracleDemonstrations | None = None
    runs_jsonl: RunsJsonlDemonstrations | None = None
    chats_jsonl: ChatsJsonlDemonstrations | None = None
    # after the sources are joined: the first N of a seeded shuffle (a small SFT budget)
    max_demonstrations: PositiveInt | None = None
    # then these are repeated (a demonstration two of them match: the larger `times`)
    oversample: list[OversampledDemonstrations] = Field(default_factory=list)

    @model_validator(mode="after")
    def _some_source(self) -> DemonstrationsConfig:
        if self.oracle is None and self.runs_jsonl is None and self.chats_jsonl is None:
            raise ValueError("give at least one source: oracle, runs_jsonl or chats_jsonl")
        return self


def _default_optimizer() -> OptimizerSettings:
    return OptimizerSettings(learning_rate=2e-4, lr_schedule="cosine", warmup_ratio=0.05,
                             micro_batch_max_tokens=4096)


class SupervisedSettings(StrictModel):
    epochs: PositiveInt = 2
    batch_size: PositiveInt = 8  # demonstrations per optimiser step
    # mini-batches are cut from windows of this many batches sorted by length, so that
    # rows of one micro-batch have similar lengths (less padding); 1 turns it off
    length_bucket_batches: PositiveInt = 8
    save_every_steps: PositiveInt = 10  # a commit point: checkpoint, metrics, run state
    # defaults here: learning_rate 2e-4, lr_schedule cosine, warmup_ratio 0.05,
    # micro_batch_max_tokens 4096 (the rest as the table of OptimizerSettings)
    optimizer: OptimizerSettings = Field(default_factory=_default_optimizer)


class SupervisedEvaluationConfig(StrictModel):
    """The agent on the task's held-out splits: at the start (unless `at_start: false`:
    the base model's figures may be known from another run), every `every_steps` optimiser
    steps (at a commit point) and at the end. `splits` as the assignment's
    `evaluation.splits`; best/ is the step with the most selection successes where the
    selection split is evaluated, else the most validation successes."""

    at_start: bool = True
    every_steps: PositiveInt | None = None
    max_samples: PositiveInt | None = None
    temperature: NonNegativeFloat = 0.0
    batch_size: PositiveInt = 32  # episodes rolled out together
    splits: EvaluationSplits = Field(default_factory=lambda: ["validation"])

    @property
    def best_metric(self) -> str:
        split = "selection" if "selection" in self.splits else "validation"
        return f"{EVALUATION_PREFIXES[split]}success_rate"


class SupervisedTrainingConfig(StrictModel):
    """Token-level cross-entropy on the agent's tokens of demonstrations, tokenised exactly
    as the LoRA agent feeds and samples a chat (the same template rendering and loss mask):
    length-bucketed mini-batches, one optimiser step each, a checkpoint every
    `save_every_steps`, held-out evaluations and best/ by held-out success. The adapter
    (OUTPUT_DIR/training_state/best/lora_weights) starts an RL run through the language
    model's `adapter_path`; the RL trainer's `kl.reference` then chooses the KL
    reference: `base`, or `initial_adapter` (this adapter)."""

    output_dir: str
    random_seed: int = 42
    reproducible: bool = True  # deterministic kernels: as the assignment's `reproducible`
    # torch's CPU threads: as the assignment's `num_threads` (None: environment or host)
    num_threads: PositiveInt | None = None
    language_model: ComponentConfig
    # the oracle's demonstrations (train split) and the evaluation (held-out splits)
    task: ComponentConfig
    # the LoRA agent whose rendering and system prompt the demonstrations are tokenised
    # with, and that is evaluated
    agent: ComponentConfig
    demonstrations: DemonstrationsConfig
    training: SupervisedSettings = Field(default_factory=SupervisedSettings)
    evaluation: SupervisedEvaluationConfig | None = Field(
        default_factory=SupervisedEvaluationConfig)


class SupervisedExperimentConfig(StrictModel):
    supervised_training_config: SupervisedTrainingConfig


@dataclass(frozen=True)
class SupervisedTrainingPlan:
    """The config with its components resolved and their parameters checked."""

    config: SupervisedExperimentConfig
    source: YamlSource
    language_model: ComponentPlan
    task: ComponentPlan
    agent: ComponentPlan

    def describe(self) -> str:
        supervised = self.config.supervised_training_config
        demonstrations = supervised.demonstrations
        sources = []
        if demonstrations.oracle is not None:
            count = demonstrations.oracle.num_samples
            sources.append(f"oracle on {f'the first {count}' if count else 'all'} "
                           "train samples")
        if demonstrations.runs_jsonl is not None:
            sources.append(f"runs_jsonl {demonstrations.runs_jsonl.path}")
        if demonstrations.chats_jsonl is not None:
            sources.append(f"chats_jsonl {demonstrations.chats_jsonl.path}")
        training = supervised.training
        lines = [f"supervised training: {self.source.path}", self.language_model.describe(),
                 self.task.describe(), self.agent.describe(),
                 f"demonstrations: {', '.join(sources)} "
                 f"(at most {demonstrations.max_demonstrations or 'all'} of them)",
                 *(rule.describe() for rule in demonstrations.oversample),
                 f"{training.epochs} epochs, {training.batch_size} per step, "
                 f"lr {training.optimizer.learning_rate} {training.optimizer.lr_schedule}",
                 f"output_dir: {supervised.output_dir}"]
        return "\n".join(lines)


# a file as read into today's spelling: a registered component by its name alone
TODAYS_NAMES = short_names(SupervisedExperimentConfig)


def load_supervised_config(source: YamlSource) -> SupervisedExperimentConfig:
    TODAYS_NAMES(source.data, source)
    return validate_keyed(source, SUPERVISED_TRAINING_KEY, SupervisedExperimentConfig)


def plan_supervised_training(config: SupervisedExperimentConfig,
                             source: YamlSource) -> SupervisedTrainingPlan:
    supervised = config.supervised_training_config
    root = (SUPERVISED_TRAINING_KEY,)
    language_model = plan_component(supervised.language_model, (*root, "language_model"),
                                    source, TrainableLanguageModel, {})
    names = {supervised.language_model.name: language_model}
    task = plan_component(supervised.task, (*root, "task"), source, Task, names)
    agent = plan_component(supervised.agent, (*root, "agent"), source, Agent, names)
    if supervised.evaluation is not None and "selection" in supervised.evaluation.splits:
        check_selection_split(task, source, (*root, "evaluation", "splits"))
    return SupervisedTrainingPlan(config, source, language_model, task, agent)
