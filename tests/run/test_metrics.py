"""metrics.jsonl reaches the trackers (TensorBoard here) only up to the commit point, each
committed row once: rows a kill left between a commit and its sending are sent on resume,
rows never committed never are, and rows redone after going back to an earlier
checkpoint are sent again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from src.run.metrics import MetricsLog
from src.run.trackers import IDS_FILE
from src.storage.files import DamagedRunFolder
from tests.run_folders import scalar_steps


def logged(run: Path, steps: range) -> MetricsLog:
    """A new run's metrics log with `steps` logged (none committed yet)."""
    metrics = MetricsLog(run)
    metrics.restore(0)
    for step in steps:
        metrics.log(step, {"loss": float(step)})
    return metrics


def test_only_committed_rows_are_sent_and_each_once(tmp_path: Path) -> None:
    metrics = logged(tmp_path, range(1, 3))
    committed = metrics.jsonl.size
    metrics.publish(committed)
    metrics.log(3, {"loss": 3.0})  # a step in flight, never committed
    metrics.publish(committed)  # nothing new is committed: nothing is sent again
    metrics.close()
    assert scalar_steps(tmp_path, "loss") == [1, 2]
    assert json.loads((tmp_path / IDS_FILE).read_text())["metrics_sent"] == committed


def test_rows_committed_but_not_yet_sent_when_killed_are_sent_on_resume(
        tmp_path: Path) -> None:
    metrics = logged(tmp_path, range(1, 2))
    metrics.publish(metrics.jsonl.size)
    metrics.log(2, {"loss": 2.0})
    committed = metrics.jsonl.size  # step 2 committed, then killed before its sending
    metrics.log(3, {"loss": 3.0})  # and step 3 in flight
    metrics.close()

    resumed = MetricsLog(tmp_path)
    resumed.restore(committed)
    resumed.close()
    assert scalar_steps(tmp_path, "loss") == [1, 2]


def test_rows_redone_after_going_back_are_sent_again(tmp_path: Path) -> None:
    metrics = logged(tmp_path, range(1, 2))
    back_to = metrics.jsonl.size
    metrics.publish(back_to)
    metrics.log(2, {"loss": 2.0})
    metrics.publish(metrics.jsonl.size)
    metrics.close()

    resumed = MetricsLog(tmp_path)
    resumed.restore(back_to)  # the run went back to step 1: step 2 is redone
    resumed.log(2, {"loss": 2.5})
    resumed.publish(resumed.jsonl.size)
    resumed.close()
    assert scalar_steps(tmp_path, "loss") == [1, 2, 2]


def test_a_run_folder_without_the_record_had_its_committed_rows_sent(tmp_path: Path) -> None:
    # written before the trackers' progress was kept: every row went to them when logged
    metrics = logged(tmp_path, range(1, 3))
    metrics.close()
    (tmp_path / IDS_FILE).unlink(missing_ok=True)
    resumed = MetricsLog(tmp_path)
    resumed.restore(resumed.jsonl.size)
    resumed.log(3, {"loss": 3.0})
    resumed.publish(resumed.jsonl.size)
    resumed.close()
    assert scalar_steps(tmp_path, "loss") == [3]


def test_a_damaged_trackers_record_is_named(tmp_path: Path) -> None:
    (tmp_path / IDS_FILE).write_text('{"metrics_sent": 12')
    with pytest.raises(DamagedRunFolder, match=rf"{IDS_FILE}: not JSON .*remove it"):
        MetricsLog(tmp_path).restore(0)
