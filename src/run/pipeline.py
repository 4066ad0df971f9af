"""A pipeline as the commands see it: the top-level key its config files declare, the
driver that trains one, and how the evaluate command rebuilds one of its runs.

src/run_experiment.py holds the table of pipelines by key; src/evaluate.py uses the same
table. A new pipeline is a package with a `PIPELINE` and one entry in that table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from src.configuration.errors import ConfigError
from src.configuration.yaml_source import YamlSource
from src.language_models.language_model import LanguageModel, TrainableLanguageModel
from src.run.evaluation import Evaluator
from src.run.resume import ResumeRules, Translate
from src.run.start import RunOptions
from src.storage.state import Stateful


@dataclass
class EvaluationParts:
    """What re-evaluating a run's checkpoint needs, built from the run's config."""

    evaluator: Evaluator
    policy: TrainableLanguageModel  # the model whose checkpoints the run saved
    language_models: list[LanguageModel]
    # task and agent state the run checkpointed beside the adapter: store folder -> owner
    stateful: dict[str, Stateful] = field(default_factory=dict)


@dataclass(frozen=True)
class Pipeline:
    key: str  # the config file's one top-level key
    # trains (or resumes, or with dry_run only checks) the run the file describes; the
    # command's exit status
    train: Callable[[YamlSource, RunOptions], int]
    # the run's parts as the run built them, from its config (for `python -m src.evaluate`)
    build_for_evaluation: Callable[[Path, dict[str, LanguageModel]], EvaluationParts]
    task_path: tuple[str, ...]  # where in the section the task's settings are
    evaluation_path: tuple[str, ...]  # and the evaluation's
    # the section's keys (and sections) whose change does not alter what a resumed run
    # computes: a resume may change them
    resume_safe_keys: frozenset[str] = frozenset()
    # rewrites a file as read (in place) into today's spelling: LifelongAgentBench's flat
    # names, say (None: read as it is)
    translate_names: Translate | None = None

    @property
    def resume_rules(self) -> ResumeRules:
        """How its runs resume: the resume-safe keys as dotted keys of the file."""
        return ResumeRules(frozenset(f"{self.key}.{key}" for key in self.resume_safe_keys),
                           self.translate_names)


def pipelines_by_key(pipelines: Iterable[Pipeline]) -> dict[str, Pipeline]:
    return {pipeline.key: pipeline for pipeline in pipelines}


def pipeline_of(data: Any, pipelines: dict[str, Pipeline], where: str) -> Pipeline:
    """The pipeline whose key the config's top-level mapping holds (exactly one)."""
    keys = [key for key in pipelines if isinstance(data, dict) and key in data]
    if len(keys) != 1:
        raise ConfigError(f"the file must hold a mapping with exactly one of the keys "
                          f"{', '.join(pipelines)}", file=where)
    return pipelines[keys[0]]
