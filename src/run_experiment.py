"""Run an assignment: python src/run_experiment.py --config_path configs/assignments/X.yaml

A file whose top-level key is `offline_training_config` (instead of `assignment_config`)
runs offline group training (src/offline_training); `supervised_training_config`, the
supervised stage (src/supervised_training).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `import src...` work from anywhere
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from src.configuration.assignment import ExperimentConfig  # noqa: E402
from src.experiment.assembly import (  # noqa: E402
    ExperimentPlan,
    build_components,
    load_experiment_config,
    plan_experiment,
)
from src.experiment.loop import ExperimentLoop  # noqa: E402
from src.experiment.run_directory import StorageFailure, start_run, storage_guard  # noqa: E402
from src.offline_training.config import declares_offline_training  # noqa: E402
from src.offline_training.run import run_offline_training  # noqa: E402
from src.report.run_end import end_of_run_report  # noqa: E402
from src.supervised_training.config import declares_supervised_training  # noqa: E402
from src.supervised_training.run import run_supervised_training  # noqa: E402


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config_path", required=True, type=Path,
                        help="assignment (or offline_training_config, supervised_training_config) YAML file")
    parser.add_argument("--output_dir", default=None,
                        help="overrides assignment_config.output_dir ({TIMESTAMP} allowed)")
    parser.add_argument("--dry_run", action="store_true",
                        help="validate the assignment and print the plan; load no weights")
    parser.add_argument("--new_run", action="store_true",
                        help="with {TIMESTAMP} in output_dir, start fresh instead of resuming")
    parser.add_argument("--no_progress", action="store_true", help="hide the progress bar")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """The command's exit status: 0 done, 2 a config or data error, 3 the output folder
    refused a write (full or read-only; the run resumes once it is fixed)."""
    arguments = parse_arguments(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return run_command(arguments)
    except StorageFailure as failure:
        print(f"storage error: {failure}", file=sys.stderr)
        return 3


def run_command(arguments: argparse.Namespace) -> int:
    if declares_offline_training(arguments.config_path):
        return run_offline_training(arguments.config_path, arguments.output_dir,
                                    arguments.dry_run, arguments.new_run,
                                    show_progress=not arguments.no_progress)
    if declares_supervised_training(arguments.config_path):
        return run_supervised_training(arguments.config_path, arguments.output_dir,
                                       arguments.dry_run, arguments.new_run,
                                       show_progress=not arguments.no_progress)

    def prepare() -> tuple[ExperimentConfig, ExperimentPlan, str]:
        config, source = load_experiment_config(arguments.config_path)
        if arguments.output_dir is not None:
            assignment = config.assignment_config.model_copy(
                update={"output_dir": arguments.output_dir})
            config = config.model_copy(update={"assignment_config": assignment})
        return config, plan_experiment(config, source), config.assignment_config.output_dir

    started = start_run(prepare, arguments.config_path, arguments.dry_run, arguments.new_run,
                        "batch")
    if isinstance(started, int):
        return started
    run, state, plan = started
    assert isinstance(plan, ExperimentPlan)
    with storage_guard(run.path):
        components = build_components(plan)
        try:
            loop = ExperimentLoop(plan.config.assignment_config, components, run,
                                  show_progress=not arguments.no_progress)
            summary = loop.execute(state)
        finally:
            for language_model in components.language_models.values():
                language_model.close()
        report = end_of_run_report(run.path)
    if summary["overall"]:  # empty when the run only evaluated (max_batches 0)
        print(json.dumps(summary["overall"], indent=2))
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
