"""Evaluate a run's checkpoint: python -m src.evaluate OUTPUT_DIR [--checkpoint best] [...]

Rebuilds the run's task, agent and model from OUTPUT_DIR/config.yaml (an RL assignment, a
supervised stage or offline groups), loads the checkpoint's adapter (and the task's and
agent's state at that step, where the run kept one) and evaluates it as the run does, with
the same seeds: on the run's own settings it reproduces the run's evaluation file for that
step reply for reply. `--task KEY=VALUE` changes task parameters (another seed, another
state set; dotted keys reach nested ones), `--split`, `--max_samples` and `--temperature`
the evaluation. Writes TARGET_DIR/config.yaml (what was evaluated),
TARGET_DIR/evaluation/[SPLIT/]step-N.jsonl and TARGET_DIR/metrics.jsonl, and prints the
figures with 95% Wilson intervals.

A run folder may come from anyone, so the command imports no code from a run folder: a
module path in its config.yaml (a component's `module`, an agent or reward function) that
resolves to a file inside a run folder, or outside the project and the installed
packages, is refused before it runs (exit status 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from src.configuration.errors import ConfigError
from src.configuration.import_guard import RefusedImport, confined_imports
from src.export.checkpoint_export import ExportError, find_adapter
from src.language_models.language_model import LanguageModel
from src.report.run_end import evaluation_line
from src.run.folder import RunDirectory
from src.run.pipeline import pipeline_of
from src.run_experiment import PIPELINES
from src.runtime.worker_process import prepare_process
from src.storage.checkpoint_store import BEST, CheckpointStore, check_checkpoint, marked_step
from src.storage.files import DamagedRunFolder, atomic_write_json, atomic_write_text, read_json
from src.storage.run_layout import CONFIG_FILE, EVALUATION_PREFIXES, METRICS_LOG, STATE_FILE
from src.training.training_state import TRAINING_STEP

START = "start"


def _parse_assignment(text: str) -> tuple[list[str], Any]:
    key, separator, value = text.partition("=")
    if not separator or not key:
        raise ConfigError(f"--task {text!r}: expected KEY=VALUE (for example seed=7)")
    try:
        return key.split("."), yaml.safe_load(value)
    except yaml.YAMLError as error:
        raise ConfigError(f"--task {text!r}: the value is not YAML ({error})") from error


def _section(config: dict[str, Any], path: Sequence[str], what: str) -> dict[str, Any]:
    section: Any = config
    for key in path:
        section = section.get(key) if isinstance(section, dict) else None
    if not isinstance(section, dict):
        raise ConfigError(f"the run's {CONFIG_FILE} has no {what} ({'.'.join(path)})")
    return section


def evaluated_config(run_config: dict[str, Any], target_dir: Path,
                     task_changes: Sequence[str], evaluation_changes: dict[str, Any]
                     ) -> tuple[str, dict[str, Any]]:
    """The run's config with the task and evaluation changes applied and its output_dir
    set to `target_dir`; and which kind of run it is."""
    pipeline = pipeline_of(run_config, PIPELINES, CONFIG_FILE)
    kind, task_path, evaluation_path = pipeline.key, pipeline.task_path, pipeline.evaluation_path
    section = run_config[kind]
    section["output_dir"] = str(target_dir)
    parameters = _section(section, task_path, "task")
    if parameters.get("parameters") is None:
        parameters["parameters"] = {}
    for text in task_changes:
        keys, value = _parse_assignment(text)
        place = parameters["parameters"]
        for key in keys[:-1]:
            place = place.setdefault(key, {})
            if not isinstance(place, dict):
                raise ConfigError(f"--task {text!r}: {key} is not a mapping")
        place[keys[-1]] = value
    evaluation = _section(section, evaluation_path, "evaluation settings")
    for key, value in evaluation_changes.items():
        if key not in evaluation:
            raise ConfigError(f"this kind of run ({kind}) has no evaluation.{key} to change")
        evaluation[key] = value
    return kind, run_config


def checkpoint_step(output_dir: Path, checkpoint: str, callback: str | None
                    ) -> tuple[int, Path | None, int]:
    """(step, adapter folder, policy version) of `checkpoint`: best, latest, a committed
    step, or start (step 0: the model as the config builds it, no checkpoint loaded)."""
    if checkpoint == START:
        return 0, None, 0
    found = find_adapter(output_dir, checkpoint, callback)
    if found.checkpoint == BEST:
        store = CheckpointStore(found.store)
        step = marked_step(store.best_record(), store.best_mark)
    else:
        step = int(found.checkpoint)
    # best/ holds its step's record since best/ keeps it; before, only the step's own folder
    candidates = [found.path.parent / TRAINING_STEP,
                  CheckpointStore(found.store).path(step) / TRAINING_STEP]
    record = next((path for path in candidates if path.is_file()), None)
    if record is None:
        raise ExportError(f"{candidates[0]} is missing: the checkpoint's policy version "
                          "is unknown")
    saved = read_json(record)
    return step, found.path, int(saved["policy_version"])


def evaluate(output_dir: Path, target_dir: Path, checkpoint: str = "best",
             callback: str | None = None, task_changes: Sequence[str] = (),
             evaluation_changes: dict[str, Any] | None = None) -> dict[str, float]:
    """Evaluate `checkpoint` of the run in `output_dir` into `target_dir`; its figures.
    Code the run's config names is imported only from the project and the installed
    packages, never from a run folder (RefusedImport)."""
    with confined_imports([output_dir, target_dir], STATE_FILE):
        return _evaluate(output_dir, target_dir, checkpoint, callback, task_changes,
                         evaluation_changes)


def _evaluate(output_dir: Path, target_dir: Path, checkpoint: str, callback: str | None,
              task_changes: Sequence[str], evaluation_changes: dict[str, Any] | None
              ) -> dict[str, float]:
    run_config = RunDirectory(output_dir).stored_config()
    if not run_config:
        raise ConfigError(f"{output_dir} is not a run folder (no {CONFIG_FILE})")
    # in today's spelling, as the run's pipeline reads a stored config
    translate = pipeline_of(run_config, PIPELINES, CONFIG_FILE).translate_names
    if translate is not None:
        translate(run_config, output_dir / CONFIG_FILE)
    if (target_dir / STATE_FILE).exists() or target_dir.resolve() == output_dir.resolve():
        raise ConfigError(f"--target_dir {target_dir} is a run folder: evaluate writes into "
                          "a folder of its own, never over a run's files")
    step, adapter, version = checkpoint_step(output_dir, checkpoint, callback)
    kind, config = evaluated_config(run_config, target_dir, task_changes,
                                    evaluation_changes or {})
    config_path = target_dir / CONFIG_FILE
    atomic_write_text(config_path, yaml.safe_dump(config, sort_keys=False))
    models: dict[str, LanguageModel] = {}
    try:
        built = PIPELINES[kind].build_for_evaluation(config_path, models)
    except (ValueError, TypeError, OSError, ImportError) as error:
        for language_model in models.values():
            language_model.close()
        if isinstance(error, ConfigError):
            raise
        raise ConfigError(f"{config_path}: the evaluated run cannot be built: {error}") from error
    try:
        if adapter is not None:
            built.policy.load_adapter(adapter, version)
        for store, owner in built.stateful.items():
            folder = RunDirectory(output_dir).path / store / f"checkpoint-{step:06d}"
            if folder.is_dir():
                check_checkpoint(folder)
                owner.restore_state(folder)
            elif step > 0:
                raise ExportError(f"{folder} is missing: the run pruned the {store} of step "
                                  f"{step}, which this evaluation needs")
        for language_model in built.language_models:
            language_model.serve_latest_policy()
        stats = built.evaluator.evaluate(step, target_dir)
    finally:
        built.evaluator.task.close()
        for language_model in built.language_models:
            language_model.close()
    atomic_write_text(target_dir / METRICS_LOG, json.dumps({"step": step, **stats}) + "\n")
    atomic_write_json(target_dir / "evaluated.json", {
        "run": str(output_dir), "checkpoint": checkpoint, "step": step,
        "adapter": None if adapter is None else str(adapter), "policy_version": version,
        "task_changes": list(task_changes), "evaluation_changes": evaluation_changes or {}})
    return {"step": step, **stats}


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output_dir", type=Path, metavar="OUTPUT_DIR", help="a run folder")
    parser.add_argument("--checkpoint", default="best",
                        help="best (default), latest, a committed step, or start (step 0)")
    parser.add_argument("--callback", default=None,
                        help="the callback whose checkpoints to use, when a run has several")
    parser.add_argument("--target_dir", type=Path, default=None,
                        help="where to write (default OUTPUT_DIR/evaluations/CHECKPOINT)")
    parser.add_argument("--task", action="append", default=[], metavar="KEY=VALUE",
                        help="change a task parameter (repeatable; VALUE is read as YAML)")
    parser.add_argument("--split", action="append", default=None, dest="splits",
                        choices=sorted(EVALUATION_PREFIXES),
                        help="the held-out split (repeatable; default: the run's)")
    parser.add_argument("--max_samples", type=int, default=None)
    parser.add_argument("--temperature", type=float, default=None)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Exit status: 0 done, 2 a config error or a checkpoint the run does not hold."""
    arguments = parse_arguments(argv)
    prepare_process("evaluate", None)
    changes = {key: value for key, value in (("splits", arguments.splits),
                                             ("max_samples", arguments.max_samples),
                                             ("temperature", arguments.temperature))
               if value is not None}
    # the default folder names everything that was changed, so that two evaluations differ
    label = [arguments.checkpoint, *arguments.task, *(arguments.splits or []),
             *(f"{key}={value}" for key, value in changes.items() if key != "splits")]
    target_dir = arguments.target_dir or (
        arguments.output_dir / "evaluations" / "_".join(text.replace("/", "-") for text in label))
    try:
        row = evaluate(arguments.output_dir, target_dir, arguments.checkpoint,
                       arguments.callback, arguments.task, changes)
    except (ConfigError, ExportError, DamagedRunFolder, RefusedImport) as error:
        print(f"evaluate error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(row, indent=2))
    for split, prefix in EVALUATION_PREFIXES.items():
        if f"{prefix}episodes" in row:
            print(evaluation_line(row, split))
    print(f"episodes: {target_dir / 'evaluation'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
