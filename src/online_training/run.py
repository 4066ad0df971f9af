"""Run an `assignment_config` file: online RL (src/run_experiment.py dispatches here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from src.agents.agent import Agent
from src.configuration.errors import ConfigError
from src.configuration.yaml_source import YamlSource
from src.language_models.language_model import LanguageModel, TrainableLanguageModel
from src.online_training.config import ONLINE_TRAINING_KEY, RESUME_SAFE_KEYS
from src.online_training.loop import OnlineTraining, online_evaluator
from src.online_training.plan import (
    OnlineTrainingPlan,
    build_components,
    build_language_models,
    load_online_config,
    plan_online_training,
    read_in_todays_names,
)
from src.run.assembly import instantiate
from src.run.folder import AGENT_STATE, TASK_STATE
from src.run.judge_models import reward_term_models
from src.run.pipeline import EvaluationParts, Pipeline
from src.run.start import RunOptions, Started, keyed_config, train_run
from src.run.step_loop import run_steps
from src.storage.state import keeps_state
from src.tasks.task import Task


def run_online_training(source: YamlSource, options: RunOptions) -> int:
    """Validate, then train (or resume); the exit status of the command."""

    prepare = keyed_config(source, ONLINE_TRAINING_KEY, lambda file: load_online_config(file)[0],
                           plan_online_training, options.output_dir)
    def train(started: Started[OnlineTrainingPlan]) -> dict:
        components = build_components(started.plan)
        try:
            steps = OnlineTraining(started.plan.config.assignment_config, components,
                                   started.run)
            summary = run_steps(steps, started.run, started.state, options.show_progress)
        finally:
            for language_model in components.language_models.values():
                language_model.close()
        return summary["overall"]  # empty when the run only evaluated (max_batches 0)

    return train_run(prepare, source.path, options, "batch", PIPELINE.resume_rules, train)


def _only_trainable(models: dict[str, LanguageModel],
                    plan: OnlineTrainingPlan) -> TrainableLanguageModel:
    """The one trainable model the run trains: a model a trainer only scores with (its
    `frozen_models`: the RL trainer's teacher) and a judge's model (a reward term's) are
    trainable in kind but frozen, and never the run's checkpoints."""
    frozen = {trainer.parameters.get(parameter) for trainer in plan.trainers.values()
              for parameter in trainer.cls.frozen_models(trainer.parameters)}
    frozen |= {model for _, model in reward_term_models(plan.task)}
    trainable = [model for name, model in models.items()
                 if isinstance(model, TrainableLanguageModel) and name not in frozen]
    if len(trainable) != 1:
        raise ConfigError(f"the run has {len(trainable)} trainable language models besides "
                          "a teacher and judges; evaluate needs exactly one")
    return trainable[0]


def build_for_evaluation(path: Path, models: dict[str, LanguageModel]) -> EvaluationParts:
    """The run's language models, task and agent as the run built them; no trainers
    (nothing is trained)."""
    config, source = load_online_config(path)
    plan = plan_online_training(config, source)
    build_language_models(plan, models)
    agent: Agent = instantiate(plan.agent, models)
    task: Task[Any] = instantiate(plan.task, models)
    stateful = {store: owner for store, owner in ((TASK_STATE, task), (AGENT_STATE, agent))
                if keeps_state(owner)}
    return EvaluationParts(online_evaluator(config.assignment_config, task, agent),
                           _only_trainable(models, plan), list(models.values()), stateful)


PIPELINE = Pipeline(ONLINE_TRAINING_KEY, run_online_training, build_for_evaluation,
                    task_path=("task",), evaluation_path=("evaluation",),
                    resume_safe_keys=RESUME_SAFE_KEYS, translate_names=read_in_todays_names)
