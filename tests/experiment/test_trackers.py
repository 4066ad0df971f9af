"""Trackers chosen in the config: offline W&B and MLflow's local store write their files,
a resumed run continues the same tracker runs, and a missing package is a config error."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from src.configuration.errors import ConfigError
from src.experiment.assembly import load_experiment_config
from src.run_experiment import main
from tests.experiment.crash_in_batch import run_until_crash

ASSIGNMENT = """\
assignment_config:
  output_dir: {output}
  rollout: {{batch_size: 2, group_size: 1, max_batches: {batches}}}
  evaluation: {{at_start: false, at_end: false}}
  trackers:
{trackers}
  task:
    name: math_problems
    parameters: {{num_train: 8, num_validation: 2}}
  agent:
    name: oracle_agent
"""
BOTH = """\
    wandb: {project: agent-rl-test, mode: offline}
    mlflow: {experiment: agent-rl-test}"""


def write(folder: Path, trackers: str, batches: int = 2) -> Path:
    path = folder / "assignment.yaml"
    path.write_text(ASSIGNMENT.format(output=folder / "run", trackers=trackers,
                                      batches=batches))
    return path


@pytest.mark.skipif(any(importlib.util.find_spec(p) is None for p in ("wandb", "mlflow")),
                    reason="the trackers extra is not installed: pip install -e '.[trackers]'")
def test_offline_wandb_and_local_mlflow_write_their_files_and_resume_the_same_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_SILENT", "true")
    config = write(tmp_path, BOTH, batches=3)
    run_until_crash(config, batch_index=2)
    run = tmp_path / "run"
    ids = json.loads((run / "trackers.json").read_text())
    # the resumed run continues both tracker runs
    assert main(["--config_path", str(config), "--no_progress"]) == 0
    assert json.loads((run / "trackers.json").read_text()) == ids

    offline_runs = list((run / "wandb").glob(f"offline-run-*-{ids['wandb']}"))
    assert offline_runs and all(list(folder.glob("*.wandb")) for folder in offline_runs)

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run / 'mlflow.db'}")
    history = client.get_metric_history(ids["mlflow"], "rollout/reward")
    assert sorted({metric.step for metric in history}) == [1, 2, 3]
    assert (run / "tensorboard").is_dir()


def test_a_missing_tracker_package_is_named_at_validation(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "wandb" else real_find_spec(name, *a))
    with pytest.raises(ConfigError, match=r"trackers.*needs the package 'wandb', which is "
                                          r"not installed"):
        load_experiment_config(write(tmp_path, "    wandb: {mode: offline}"))


def test_tensorboard_can_be_switched_off(tmp_path: Path) -> None:
    assert main(["--config_path", str(write(tmp_path, "    tensorboard: false")),
                 "--no_progress"]) == 0
    assert not (tmp_path / "run" / "tensorboard").exists()
    assert (tmp_path / "run" / "metrics.jsonl").is_file()


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb not installed")
def test_a_closed_wandb_tracker_leaves_no_service_address_behind(tmp_path: Path,
                                                                 monkeypatch) -> None:
    # A process started after the run (a vLLM engine) inherits the environment; with a
    # dead service's address in it, the engine aborted at start-up.
    from src.configuration.assignment import WandbConfig
    from src.experiment.trackers import SERVICE_VARIABLE, WandbTracker

    monkeypatch.delenv(SERVICE_VARIABLE, raising=False)
    tracker = WandbTracker(WandbConfig(), tmp_path, None)
    tracker.log(1, {"reward": 0.5})
    tracker.close()
    import os

    assert SERVICE_VARIABLE not in os.environ
