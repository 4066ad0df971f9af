"""Run an `assignment_config` file: online RL (src/run_experiment.py dispatches here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from src.agents.agent import Agent
from src.configuration.errors import ConfigError
from src.configuration.yaml_source import YamlSource
from src.language_models.language_model import LanguageModel, TrainableLanguageModel
from src.online_training.loop import ExperimentLoop, assignment_evaluator
from src.report.run_end import end_of_run_report
from src.run.assembly import (
    ExperimentPlan,
    build_components,
    build_language_models,
    instantiate,
    load_experiment_config,
    plan_experiment,
)
from src.run.folder import AGENT_STATE, TASK_STATE
from src.run.judge_models import reward_term_models
from src.run.pipeline import EvaluationParts, Pipeline
from src.run.start import RunOptions, Stopped, start_run
from src.run.storage_guard import storage_guard
from src.storage.state import keeps_state
from src.tasks.task import Task

ASSIGNMENT_KEY = "assignment_config"


def run_online_training(source: YamlSource, options: RunOptions) -> int:
    """Validate, then train (or resume); the exit status of the command."""

    def prepare() -> tuple[Any, ExperimentPlan, str]:
        config, _ = load_experiment_config(source)
        if options.output_dir is not None:
            assignment = config.assignment_config.model_copy(
                update={"output_dir": options.output_dir})
            config = config.model_copy(update={"assignment_config": assignment})
        return config, plan_experiment(config, source), config.assignment_config.output_dir

    started = start_run(prepare, source.path, options, "batch")
    if isinstance(started, Stopped):
        return started.exit_status
    run, plan = started.run, started.plan
    with storage_guard(run.path):
        components = build_components(plan)
        try:
            loop = ExperimentLoop(plan.config.assignment_config, components, run,
                                  show_progress=options.show_progress)
            summary = loop.execute(started.state)
        finally:
            for language_model in components.language_models.values():
                language_model.close()
        report = end_of_run_report(run.path)
    if summary["overall"]:  # empty when the run only evaluated (max_batches 0)
        print(json.dumps(summary["overall"], indent=2))
    print(report)
    return 0


def _only_trainable(models: dict[str, LanguageModel],
                    plan: ExperimentPlan) -> TrainableLanguageModel:
    """The one trainable model the run trains: a model a callback only scores with (its
    `frozen_models`: the RL trainer's teacher) and a judge's model (a reward term's) are
    trainable in kind but frozen, and never the run's checkpoints."""
    frozen = {callback.parameters.get(parameter) for callback in plan.callbacks.values()
              for parameter in callback.cls.frozen_models(callback.parameters)}
    frozen |= {model for _, model in reward_term_models(plan.task)}
    trainable = [model for name, model in models.items()
                 if isinstance(model, TrainableLanguageModel) and name not in frozen]
    if len(trainable) != 1:
        raise ConfigError(f"the run has {len(trainable)} trainable language models besides "
                          "a teacher and judges; evaluate needs exactly one")
    return trainable[0]


def build_for_evaluation(path: Path, models: dict[str, LanguageModel]) -> EvaluationParts:
    """The run's language models, task and agent as the run built them; no callbacks
    (nothing is trained)."""
    config, source = load_experiment_config(path)
    plan = plan_experiment(config, source)
    build_language_models(plan, models)
    agent: Agent = instantiate(plan.agent, models)
    task: Task[Any] = instantiate(plan.task, models)
    stateful = {store: owner for store, owner in ((TASK_STATE, task), (AGENT_STATE, agent))
                if keeps_state(owner)}
    return EvaluationParts(assignment_evaluator(config.assignment_config, task, agent),
                           _only_trainable(models, plan), list(models.values()), stateful)


PIPELINE = Pipeline(ASSIGNMENT_KEY, run_online_training, build_for_evaluation,
                    task_path=("task",), evaluation_path=("evaluation",))
