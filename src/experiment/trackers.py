"""Experiment trackers: each metrics row also goes to TensorBoard, Weights & Biases and
MLflow as the config asks (metrics.jsonl stays the record a resume cuts back).

A resumed run continues the same W&B and MLflow runs: their ids are kept in
OUTPUT_DIR/trackers.json. A batch redone after a kill logs its step again; TensorBoard and
MLflow keep both values, W&B ignores a step it has seen.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Protocol

from src.configuration.assignment import MlflowConfig, TrackersConfig, WandbConfig
from src.storage.files import atomic_write_json

IDS_FILE = "trackers.json"


class Tracker(Protocol):
    def log(self, step: int, metrics: dict[str, float]) -> None: ...

    def close(self) -> None: ...


class TensorBoardTracker:
    def __init__(self, folder: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=str(folder))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self._writer.add_scalar(key, value, global_step=step)
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
        self._client = MlflowClient(tracking_uri=uri)
        if run_id is None:
            experiment = self._client.get_experiment_by_name(settings.experiment)
            experiment_id = (experiment.experiment_id if experiment is not None
                             else self._client.create_experiment(settings.experiment))
            run_id = self._client.create_run(experiment_id,
                                             run_name=output_dir.name).info.run_id
        self.run_id = run_id

    def log(self, step: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._client.log_batch(self.run_id, metrics=[
            Metric(key, value, now, step) for key, value in metrics.items()])

    def close(self) -> None:
        self._client.set_terminated(self.run_id)


def open_trackers(settings: TrackersConfig, output_dir: Path) -> list[Tracker]:
    """The configured trackers, attached to the run's earlier tracker runs if any."""
    ids_path = output_dir / IDS_FILE
    ids = json.loads(ids_path.read_text(encoding="utf-8")) if ids_path.is_file() else {}
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
        atomic_write_json(ids_path, ids)
    return trackers
