"""Run an assignment: python src/run_experiment.py --config_path configs/assignments/X.yaml

The file's top-level key picks the pipeline: `assignment_config` online RL
(src/online_training), `supervised_training_config` the supervised stage
(src/supervised_training), `offline_training_config` offline group training
(src/offline_training).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `import src...` work from anywhere
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from src.configuration.errors import ConfigError  # noqa: E402
from src.configuration.models import ThreadsSetting  # noqa: E402
from src.configuration.yaml_source import YamlSource  # noqa: E402
from src.offline_training.run import PIPELINE as OFFLINE_TRAINING  # noqa: E402
from src.online_training.run import PIPELINE as ONLINE_TRAINING  # noqa: E402
from src.run.pipeline import pipeline_of, pipelines_by_key  # noqa: E402
from src.run.start import RunOptions  # noqa: E402
from src.run.storage_guard import StorageFailure  # noqa: E402
from src.runtime.worker_process import prepare_process  # noqa: E402
from src.storage.files import DamagedRunFolder  # noqa: E402
from src.storage.run_lock import RunFolderInUse  # noqa: E402
from src.supervised_training.run import PIPELINE as SUPERVISED_TRAINING  # noqa: E402
from src.training.learner import NonFiniteUpdate  # noqa: E402

# The file's top-level key -> its pipeline (the evaluate command reads the same table).
PIPELINES = pipelines_by_key([ONLINE_TRAINING, SUPERVISED_TRAINING, OFFLINE_TRAINING])


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
    """The command's exit status: 0 done, 2 a config or data error (a damaged run folder,
    or one another process is training, too), 3 the output folder refused a write (full or read-only; the run resumes once it
    is fixed), 4 an update left non-finite weights (nothing of it committed)."""
    arguments = parse_arguments(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return run_command(arguments)
    except (DamagedRunFolder, RunFolderInUse) as error:
        print(f"run folder error: {error}", file=sys.stderr)
        return 2
    except StorageFailure as failure:
        print(f"storage error: {failure}", file=sys.stderr)
        return 3
    except NonFiniteUpdate as error:
        print(f"training error: {error}; the batch was not committed, so the run resumes "
              "from its last commit (with a lower learning rate, say)", file=sys.stderr)
        return 4


def run_command(arguments: argparse.Namespace) -> int:
    """Read the file once, prepare this process (src.runtime.worker_process: torch threads
    from the section's `num_threads`, else the environment's or the host's; freed memory
    kept), then hand the file to the pipeline its top-level key names."""
    try:
        source = YamlSource(arguments.config_path)
        pipeline = pipeline_of(source.data, PIPELINES, str(arguments.config_path))
        section = source.data[pipeline.key]
        written = ({"num_threads": section["num_threads"]}
                   if isinstance(section, dict) and "num_threads" in section else {})
        threads = source.validate(ThreadsSetting, written, (pipeline.key,)).num_threads
    except ConfigError as error:
        print(f"config error: {error}", file=sys.stderr)
        return 2
    prepare_process("run", threads)
    return pipeline.train(source, RunOptions(arguments.output_dir, arguments.dry_run,
                                             arguments.new_run, not arguments.no_progress))


if __name__ == "__main__":
    sys.exit(main())
