"""Trackers chosen in the config: offline W&B and MLflow's local store write their files
and hold tables of sampled episodes, a resumed run continues the same tracker runs without
logging a redone batch's episodes twice, and a missing package is a config error."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest

from src.configuration.errors import ConfigError
from src.online_training.plan import load_online_config
from src.run.trackers import EPISODE_COLUMNS
from src.run_experiment import main
from tests.run.crash_in_batch import run_until_crash
from tests.run_folders import jsonl_rows, scalar_steps

ASSIGNMENT = """\
assignment_config:
  output_dir: {output}
  rollout: {{batch_size: 2, group_size: 1, max_batches: {batches}}}
  evaluation: {{at_start: true, every_n_batches: 1}}
  trackers:
{trackers}
  task:
    name: math_problems
    parameters: {{num_train: 8, num_validation: 4}}
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


def table_rows(columns: list[str], data: list[list]) -> Counter[tuple]:
    """(table step, sample id, group) of each row, counted."""
    assert columns == EPISODE_COLUMNS
    return Counter((row[0], row[1], row[2]) for row in data)


@pytest.mark.skipif(any(importlib.util.find_spec(p) is None for p in ("wandb", "mlflow")),
                    reason="the trackers extra is not installed: pip install -e '.[trackers]'")
def test_offline_wandb_and_local_mlflow_write_their_files_and_resume_the_same_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_SILENT", "true")
    # every training batch's episodes, and 3 of each evaluation's 4
    config = write(tmp_path, BOTH + "\n    episodes_per_table: 3"
                   "\n    train_episodes_every_n_batches: 1", batches=3)
    # dies after batch 3's evaluation went to the trackers, before the batch is committed:
    # the resumed run redoes the batch and its evaluation, and must not log them again
    run_until_crash(config, batch_index=2, after_evaluation=True)
    run = tmp_path / "run"
    ids = json.loads((run / "trackers.json").read_text())
    # the resumed run continues both tracker runs
    assert main(["--config_path", str(config), "--no_progress"]) == 0
    resumed = json.loads((run / "trackers.json").read_text())
    assert (resumed["wandb"], resumed["mlflow"]) == (ids["wandb"], ids["mlflow"])

    offline_runs = list((run / "wandb").glob(f"offline-run-*-{ids['wandb']}"))
    assert len(offline_runs) == 2 and all(list(folder.glob("*.wandb"))
                                          for folder in offline_runs)

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run / 'mlflow.db'}")
    history = client.get_metric_history(ids["mlflow"], "rollout/reward")
    assert sorted({metric.step for metric in history}) == [1, 2, 3]
    assert (run / "tensorboard").is_dir()

    # Each step's table once (the redone batch 3's not again), in both trackers alike.
    runs = [json.loads(line) for line in (run / "runs.jsonl").read_text().split("\n") if line.strip()]
    expected = {
        "validation": [(step, f"validation-{index:06d}", 0) for step in range(4)
                       for index in (0, 2, 3)],  # the first, the last, one between
        "train": sorted((row["batch_index"] + 1, row["sample_id"], row["group_index"])
                        for row in runs)}
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # purge_orphaned_data False: a step written twice would show twice, not be cut back
    text = EventAccumulator(str(run / "tensorboard"), size_guidance={"tensors": 0},
                            purge_orphaned_data=False)
    text.Reload()
    for name, rows in expected.items():
        wandb_rows: Counter[tuple] = Counter()
        for table in (run / "wandb").glob(f"offline-run-*-{ids['wandb']}/files/media/table/"
                                         f"episodes/{name}_*.table.json"):
            wandb_rows += table_rows(**json.loads(table.read_text()))
        table = json.loads(Path(client.download_artifacts(
            ids["mlflow"], f"episodes/{name}.json", str(tmp_path))).read_text())
        mlflow_rows = table_rows(table["columns"], table["data"])
        assert sorted(mlflow_rows.elements()) == rows
        assert wandb_rows == mlflow_rows
        # TensorBoard: a text entry a step
        assert sorted(entry.step for entry in text.Tensors(f"episodes/{name}/text_summary")
                      ) == sorted({row[0] for row in rows})


def test_trackers_get_a_batchs_scalars_only_once_it_is_committed(tmp_path: Path) -> None:
    config = write(tmp_path, "    tensorboard: true", batches=3)
    # dies after batch 3's figures and evaluation went to metrics.jsonl, before its commit
    run_until_crash(config, batch_index=2, after_evaluation=True)
    run = tmp_path / "run"
    assert [row["step"] for row in jsonl_rows(run / "metrics.jsonl")] == [0, 1, 1, 2, 2, 3, 3]
    assert scalar_steps(run, "rollout/reward") == [1, 2]
    assert scalar_steps(run, "eval/reward") == [0, 1, 2]

    assert main(["--config_path", str(config), "--no_progress"]) == 0
    assert scalar_steps(run, "rollout/reward") == [1, 2, 3]
    assert scalar_steps(run, "eval/reward") == [0, 1, 2, 3]


def test_a_missing_tracker_package_is_named_at_validation(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "wandb" else real_find_spec(name, *a))
    with pytest.raises(ConfigError, match=r"trackers.*needs the package 'wandb', which is "
                                          r"not installed"):
        load_online_config(write(tmp_path, "    wandb: {mode: offline}"))


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
    from src.configuration.models import WandbConfig
    from src.run.trackers import SERVICE_VARIABLE, WandbTracker

    monkeypatch.delenv(SERVICE_VARIABLE, raising=False)
    tracker = WandbTracker(WandbConfig(), tmp_path, None)
    tracker.log(1, {"reward": 0.5})
    tracker.close()
    import os

    assert SERVICE_VARIABLE not in os.environ
