"""Run an `offline_training_config` file (src/run_experiment.py dispatches here)."""

from __future__ import annotations

import functools
from pathlib import Path

from src.configuration.errors import ConfigError
from src.configuration.models import SECTION_RESUME_SAFE_KEYS
from src.configuration.yaml_source import YamlSource
from src.language_models.language_model import LanguageModel, TrainableLanguageModel
from src.offline_training.config import (
    OFFLINE_TRAINING_KEY,
    TODAYS_NAMES,
    GroupsConfig,
    OfflineTrainingPlan,
    load_offline_config,
    plan_offline_training,
)
from src.offline_training.groups import (
    GroupFileError,
    ScoredGroup,
    read_runs_jsonl,
    read_scored_rows,
    snapshot_groups,
)
from src.offline_training.trainer import OfflineGroupTrainer
from src.run.assembly import instantiate
from src.run.evaluation import Evaluator
from src.run.folder import RunDirectory, RunNotFound, RunState, resolve_latest
from src.run.pipeline import EvaluationParts, Pipeline
from src.run.start import RunOptions, Started, keyed_config, train_run
from src.runtime.reproducibility import prepare_model_building
from src.tasks.task import Task


def read_configured_groups(groups: GroupsConfig) -> tuple[list[ScoredGroup], str]:
    """The configured source's groups, unfiltered, and the file they came from."""
    if groups.runs_jsonl is not None:
        path = resolve_latest(groups.runs_jsonl.path)
        return read_runs_jsonl(path), str(path)
    source = groups.scored_rows
    assert source is not None  # the config demands exactly one source
    path = Path(source.path)
    return read_scored_rows(path, source.prompt_key, source.candidates_key, source.scores_key,
                            source.id_key), str(path)


def run_offline_training(source: YamlSource, options: RunOptions) -> int:
    """Validate, then train (or resume); the exit status of the command."""
    prepare = keyed_config(source, OFFLINE_TRAINING_KEY, load_offline_config,
                           plan_offline_training, options.output_dir)

    def train_groups(started: Started[OfflineTrainingPlan]) -> dict:
        offline = started.plan.config.offline_training_config
        groups = snapshot_groups(started.run.path,
                                 lambda: read_configured_groups(offline.groups),
                                 offline.groups.min_score_spread)
        return train(started.plan, groups, started.run, started.state, options.show_progress)

    return train_run(prepare, source.path, options, "epoch", PIPELINE.resume_rules,
                     train_groups, (GroupFileError, RunNotFound))


def train(plan: OfflineTrainingPlan, groups: list[ScoredGroup], run: RunDirectory,
          state: RunState, show_progress: bool) -> dict:
    """Build the language model (and the evaluation task and agent), then train."""
    offline = plan.config.offline_training_config
    language_model = build_policy(plan)
    evaluator = offline_evaluator(plan, language_model)
    trainer = OfflineGroupTrainer(
        offline, language_model, groups, run.path,
        None if evaluator is None else functools.partial(evaluator.evaluate,
                                                         output_dir=run.path),
        show_progress)
    try:
        return trainer.train(run, state)
    finally:
        if evaluator is not None:
            evaluator.task.close()


def build_policy(plan: OfflineTrainingPlan) -> TrainableLanguageModel:
    """The trained language model, built as every run of the config builds it (the
    evaluate command too)."""
    offline = plan.config.offline_training_config
    prepare_model_building(offline.reproducible, offline.random_seed)
    return instantiate(plan.language_model, {})


def offline_evaluator(plan: OfflineTrainingPlan,
                      language_model: TrainableLanguageModel) -> Evaluator | None:
    """Validation samples of the evaluation's task, answered by its agent on the trained
    model, at the start and after every epoch (None without evaluation settings)."""
    offline = plan.config.offline_training_config
    evaluation = offline.evaluation
    if evaluation is None or plan.task is None or plan.agent is None:
        return None
    models = {offline.language_model.name: language_model}
    agent = instantiate(plan.agent, models)
    task: Task = instantiate(plan.task, models)
    return Evaluator(task, agent, ["validation"], evaluation.max_samples,
                     evaluation.temperature, evaluation.batch_size, offline.random_seed)


def build_for_evaluation(path: Path, models: dict[str, LanguageModel]) -> EvaluationParts:
    """The policy as the run built it, and the evaluation's task and agent."""
    source = YamlSource(path)
    plan = plan_offline_training(load_offline_config(source), source)
    offline = plan.config.offline_training_config
    if offline.evaluation is None:
        raise ConfigError(f"{path}: the run has no evaluation settings (evaluation: null)")
    policy = models[offline.language_model.name] = build_policy(plan)
    evaluator = offline_evaluator(plan, policy)
    assert evaluator is not None  # the settings were checked above
    return EvaluationParts(evaluator, policy, [policy])


PIPELINE = Pipeline(OFFLINE_TRAINING_KEY, run_offline_training, build_for_evaluation,
                    task_path=("evaluation", "task"), evaluation_path=("evaluation",),
                    resume_safe_keys=SECTION_RESUME_SAFE_KEYS,
                    translate_names=TODAYS_NAMES)
