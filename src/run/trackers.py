"""Experiment trackers: each metrics row also goes to TensorBoard, Weights & Biases and
MLflow as the config asks (metrics.jsonl stays the record a resume cuts back), and so do
tables of sampled episodes: TensorBoard text entries, a W&B table a step, one MLflow
artifact table a split (`episodes/<name>.json`, a `step` column).

A resumed run continues the same W&B and MLflow runs: their ids are kept in
OUTPUT_DIR/trackers.json. Scalars reach the trackers only once their step is committed:
they are the rows of metrics.jsonl up to the commit point, and trackers.json keeps how far
into it the trackers have been sent, so a batch redone after a kill reaches them once
(TensorBoard and MLflow would keep both values of a step sent twice). Episode tables are
logged once a step: trackers.json also keeps the last step logged of each table.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Protocol

from src.configuration.models import MlflowConfig, TrackersConfig, WandbConfig
from src.storage.files import DamagedRunFolder, atomic_write_json, read_json

IDS_FILE = "trackers.json"
EPISODES_KEY = "episodes_logged"  # in IDS_FILE: {table name: the last step logged}
METRICS_KEY = "metrics_sent"  # in IDS_FILE: the bytes of metrics.jsonl sent to the trackers
EPISODE_COLUMNS = ["step", "sample_id", "group_index", "category", "status", "outcome",
                   "reward", "turns", "chat"]


class Tracker(Protocol):
    def log(self, step: int, metrics: dict[str, float]) -> None: ...

    def log_episodes(self, step: int, name: str, rows: list[list[Any]]) -> None:
        """Rows of EPISODE_COLUMNS as the table `episodes/<name>` at `step`."""

    def close(self) -> None: ...


class TensorBoardTracker:
    def __init__(self, folder: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=str(folder))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self._writer.add_scalar(key, value, global_step=step)
        self._writer.flush()

    def log_episodes(self, step: int, name: str, rows: list[list[Any]]) -> None:
        # Indented lines are a markdown code block: what the model wrote shows verbatim.
        blocks = []
        for row in rows:
            fields = dict(zip(EPISODE_COLUMNS, row, strict=True))
            header = " · ".join(f"{key} {fields[key]}" for key in EPISODE_COLUMNS[:-1])
            blocks.append("\n".join(f"    {line}"
                                    for line in [header, "", *fields["chat"].splitlines()]))
        self._writer.add_text(f"episodes/{name}", "\n\n---\n\n".join(blocks),
                              global_step=step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


SERVICE_VARIABLE = "WANDB_SERVICE"


class WandbTracker:
    def __init__(self, settings: WandbConfig, output_dir: Path, run_id: str | None) -> None:
        import wandb

        self._service_was_set = SERVICE_VARIABLE in os.environ
        self._run = wandb.init(project=settings.project, entity=settings.entity,
                               mode=settings.mode, dir=str(output_dir), id=run_id,
                               name=output_dir.name, resume="allow")
        self.run_id = self._run.id

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self._run.log(metrics, step=step)

    def log_episodes(self, step: int, name: str, rows: list[list[Any]]) -> None:
        import wandb

        self._run.log({f"episodes/{name}": wandb.Table(columns=EPISODE_COLUMNS, data=rows)},
                      step=step)

    def close(self) -> None:
        import wandb

        self._run.finish()
        # wandb leaves its service's address in this process's environment; a process
        # started later inherits it and, once the service is gone, a vLLM engine
        # started so aborts ("terminate called without an active exception").
        wandb.teardown()
        if not self._service_was_set:
            os.environ.pop(SERVICE_VARIABLE, None)


class MlflowTracker:
    def __init__(self, settings: MlflowConfig, output_dir: Path, run_id: str | None) -> None:
        from mlflow.tracking import MlflowClient

        uri = settings.tracking_uri or f"sqlite:///{(output_dir / 'mlflow.db').resolve()}"
        # The local store's artifacts (episode tables) stay in the run folder; MLflow's
        # default is ./mlruns in the working directory.
        artifacts = (None if settings.tracking_uri
                     else (output_dir / "mlflow-artifacts").resolve().as_uri())
        self._client = MlflowClient(tracking_uri=uri)
        # log_table reads the table back to append a step: no progress bar in the run's log
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        if run_id is None:
            experiment = self._client.get_experiment_by_name(settings.experiment)
            experiment_id = (experiment.experiment_id if experiment is not None
                             else self._client.create_experiment(settings.experiment,
                                                                 artifact_location=artifacts))
            run_id = self._client.create_run(experiment_id,
                                             run_name=output_dir.name).info.run_id
        self.run_id = run_id

    def log(self, step: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._client.log_batch(self.run_id, metrics=[
            Metric(key, value, now, step) for key, value in metrics.items()])

    def log_episodes(self, step: int, name: str, rows: list[list[Any]]) -> None:
        # log_table appends to the artifact table of an earlier step
        self._client.log_table(self.run_id, data={
            column: [row[index] for row in rows] for index, column in enumerate(EPISODE_COLUMNS)},
            artifact_file=f"episodes/{name}.json")

    def close(self) -> None:
        self._client.set_terminated(self.run_id)


def _read_ids(output_dir: Path) -> dict[str, Any]:
    path = output_dir / IDS_FILE
    if not path.is_file():
        return {}
    try:
        return read_json(path)
    except DamagedRunFolder as error:
        raise DamagedRunFolder(
            f"{error}. It holds the ids of the run's W&B and MLflow runs and how far the "
            "trackers got: put it back from a copy of the run folder, or remove it (the "
            "trackers then start new runs and get only what is committed from now on)"
        ) from error


def open_trackers(settings: TrackersConfig, output_dir: Path) -> list[Tracker]:
    """The configured trackers, attached to the run's earlier tracker runs if any."""
    ids = _read_ids(output_dir)
    trackers: list[Tracker] = []
    if settings.tensorboard:
        trackers.append(TensorBoardTracker(output_dir / "tensorboard"))
    if settings.wandb is not None:
        wandb_tracker = WandbTracker(settings.wandb, output_dir, ids.get("wandb"))
        ids["wandb"] = wandb_tracker.run_id
        trackers.append(wandb_tracker)
    if settings.mlflow is not None:
        mlflow_tracker = MlflowTracker(settings.mlflow, output_dir, ids.get("mlflow"))
        ids["mlflow"] = mlflow_tracker.run_id
        trackers.append(mlflow_tracker)
    if ids:
        atomic_write_json(output_dir / IDS_FILE, ids)
    return trackers


def last_episodes_logged(output_dir: Path, name: str) -> int | None:
    """The last step whose `name` episode table went to the trackers (None: none yet)."""
    return _read_ids(output_dir).get(EPISODES_KEY, {}).get(name)


def mark_episodes_logged(output_dir: Path, name: str, step: int) -> None:
    ids = _read_ids(output_dir)
    ids.setdefault(EPISODES_KEY, {})[name] = step
    atomic_write_json(output_dir / IDS_FILE, ids)


def metrics_sent(output_dir: Path) -> int | None:
    """How many bytes of metrics.jsonl went to the trackers (None: not recorded)."""
    return _read_ids(output_dir).get(METRICS_KEY)


def mark_metrics_sent(output_dir: Path, size: int) -> None:
    ids = _read_ids(output_dir)
    ids[METRICS_KEY] = size
    atomic_write_json(output_dir / IDS_FILE, ids)
