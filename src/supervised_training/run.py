"""Run a `supervised_training_config` file (src/run_experiment.py dispatches here)."""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

from src.agents.agent import Agent
from src.configuration.errors import ConfigError
from src.configuration.models import SECTION_RESUME_SAFE_KEYS
from src.configuration.yaml_source import YamlSource
from src.language_models.chat_template import (
    DemonstrationTools,
    demonstration_ids,
    probe_turn_boundary,
)
from src.language_models.language_model import LanguageModel, TrainableLanguageModel
from src.language_models.tool_calls import template_renders_tools
from src.run.assembly import instantiate
from src.run.evaluation import Evaluator
from src.run.folder import RunDirectory, RunNotFound, RunState
from src.run.pipeline import EvaluationParts, Pipeline
from src.run.start import RunOptions, keyed_config, train_run
from src.runtime.reproducibility import prepare_model_building
from src.supervised_training.config import (
    SUPERVISED_TRAINING_KEY,
    TODAYS_NAMES,
    SupervisedTrainingConfig,
    SupervisedTrainingPlan,
    load_supervised_config,
    plan_supervised_training,
)
from src.supervised_training.demonstrations import (
    Demonstration,
    DemonstrationError,
    snapshot_demonstrations,
)
from src.supervised_training.trainer import SupervisedTrainer
from src.tasks.task import Task
from src.training.token_rows import TokenRows

logger = logging.getLogger(__name__)


def run_supervised_training(source: YamlSource, options: RunOptions) -> int:
    """Validate, then train (or resume); the exit status of the command."""
    prepare = keyed_config(source, SUPERVISED_TRAINING_KEY, load_supervised_config,
                           plan_supervised_training, options.output_dir)
    return train_run(prepare, source.path, options, "step", PIPELINE.resume_rules,
                     lambda started: train(started.plan, started.run, started.state,
                                           options.show_progress),
                     (DemonstrationError, RunNotFound))


def train(plan: SupervisedTrainingPlan, run: RunDirectory, state: RunState,
          show_progress: bool) -> dict:
    """Build the language model, the task and the agent; read the demonstrations; train."""
    supervised = plan.config.supervised_training_config
    language_model, task, agent = build_parts(plan)
    try:
        demonstrations = snapshot_demonstrations(run.path, supervised.demonstrations, task,
                                                 supervised.random_seed)
        rows = demonstration_rows(demonstrations, language_model,
                                  getattr(agent, "system_prompt", None))
        evaluator = supervised_evaluator(supervised, task, agent)
        trainer = SupervisedTrainer(
            supervised, language_model, rows, run.path,
            None if evaluator is None else functools.partial(evaluator.evaluate,
                                                             output_dir=run.path),
            show_progress)
        return trainer.train(run, state)
    finally:
        task.close()


def build_parts(plan: SupervisedTrainingPlan,
                models: dict[str, LanguageModel] | None = None
                ) -> tuple[TrainableLanguageModel, Task[Any], Agent]:
    """The language model, the task and the agent of a supervised stage, built in this
    order (the evaluate command builds them the same way); the model also into `models`."""
    supervised = plan.config.supervised_training_config
    prepare_model_building(supervised.reproducible, supervised.random_seed)
    models = {} if models is None else models
    language_model = models[supervised.language_model.name] = instantiate(plan.language_model,
                                                                          {})
    task: Task[Any] = instantiate(plan.task, models)
    try:
        return language_model, task, instantiate(plan.agent, models)
    except BaseException:
        task.close()
        raise


def supervised_evaluator(supervised: SupervisedTrainingConfig, task: Task[Any],
                         agent: Agent) -> Evaluator | None:
    """The evaluator the stage's `evaluation` settings describe (None without them)."""
    evaluation = supervised.evaluation
    if evaluation is None:
        return None
    return Evaluator(task, agent, evaluation.splits, evaluation.max_samples,
                     evaluation.temperature, evaluation.batch_size, supervised.random_seed)


def demonstration_rows(demonstrations: list[Demonstration],
                       language_model: TrainableLanguageModel,
                       system_prompt: str | None) -> TokenRows:
    """One row per demonstration that fits the model's context, tokenised as the agent
    would have fed and sampled it (a tool episode's with its tools, as the agent renders
    one)."""
    boundaries: dict[str | None, Any] = {}
    sequences, masks, too_long = [], [], 0
    limit = language_model.max_context_tokens
    native = template_renders_tools(language_model.tokenizer)
    for demonstration in demonstrations:
        prompt = demonstration.system_prompt or system_prompt
        if prompt not in boundaries:
            boundaries[prompt] = probe_turn_boundary(language_model, prompt)
        tools = None if demonstration.tools is None else DemonstrationTools(
            demonstration.tools, native, demonstration.tool_results)
        try:
            ids, mask = demonstration_ids(language_model, boundaries[prompt], prompt,
                                          demonstration.chat, tools)
        except ValueError as error:
            raise DemonstrationError(f"{demonstration.source}: {error}") from error
        if len(ids) > limit:
            too_long += 1
            continue
        sequences.append(ids)
        masks.append(mask)
    if too_long:
        logger.warning("%d demonstrations longer than the model's %d tokens left out",
                       too_long, limit)
    if not sequences:
        raise DemonstrationError("no demonstration fits the model's context")
    return TokenRows.from_sequences(sequences, masks, pad_id=language_model.pad_id)


def build_for_evaluation(path: Path, models: dict[str, LanguageModel]) -> EvaluationParts:
    """The stage's model, task and agent as the run built them, and its evaluator."""
    source = YamlSource(path)
    plan = plan_supervised_training(load_supervised_config(source), source)
    if plan.config.supervised_training_config.evaluation is None:
        raise ConfigError(f"{path}: the run has no evaluation settings (evaluation: null)")
    policy, task, agent = build_parts(plan, models)
    evaluator = supervised_evaluator(plan.config.supervised_training_config, task, agent)
    assert evaluator is not None  # the settings were checked above
    return EvaluationParts(evaluator, policy, [policy])


PIPELINE = Pipeline(SUPERVISED_TRAINING_KEY, run_supervised_training, build_for_evaluation,
                    task_path=("task",), evaluation_path=("evaluation",),
                    resume_safe_keys=SECTION_RESUME_SAFE_KEYS,
                    translate_names=TODAYS_NAMES)
