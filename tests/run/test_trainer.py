"""The online loop trains through a trainer on purpose: the schedule first, then per batch
`train` and the commit of its state with the step's figures (the evaluation's on evaluated
steps), which its best rule reads."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from src.online_training.loop import OnlineTraining
from src.online_training.plan import build_components, load_online_config, plan_online_training
from src.run.folder import RunDirectory
from src.run.step_loop import run_steps
from src.run.trainer import TrainingSchedule
from tests.run.recording_trainer import RecordingTrainer

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def test_the_loop_calls_its_trainer_on_purpose(tmp_path: Path) -> None:
    config = yaml.safe_load((PROJECT_ROOT / "configs/assignments/smoke_oracle_math.yaml")
                            .read_text())
    assignment = config["assignment_config"]
    assignment["output_dir"] = str(tmp_path / "run")
    assignment["evaluation"] = {"every_n_batches": 2, "at_end": True}
    assignment["callback_dict"] = {"recorder": {
        "name": "recorder", "module": "tests.run.recording_trainer.RecordingTrainer"}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))

    experiment, source = load_online_config(path)
    run = RunDirectory(tmp_path / "run")
    state = run.start(experiment, path)
    components = build_components(plan_online_training(experiment, source))
    steps = OnlineTraining(experiment.assignment_config, components, run)
    run_steps(steps, run, state, show_progress=False)

    calls = RecordingTrainer.calls
    # 32 train samples in batches of 8, each rolled out twice
    assert calls[0] == ("prepare", TrainingSchedule(total_batches=4, episodes_per_batch=16))
    per_batch = [calls[1 + 2 * index: 3 + 2 * index] for index in range(4)]
    for index, (train, saved) in enumerate(per_batch):
        step = index + 1
        assert train == ("train", (index, 16))
        # into a fresh temporary folder, renamed to checkpoint-NNNNNN once written
        assert saved[0] == "save_state" and f"checkpoint-{step:06d}" in str(saved[1])
    assert len(calls) == 1 + 4 * 2
    # its best rule reads the evaluation's figure, logged on batches 2 and 4 only
    store = tmp_path / "run" / "callback_state" / "recorder"
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    evaluated = {row["step"]: row["eval/success_rate"] for row in rows
                 if "eval/success_rate" in row and row["step"] > 0}
    assert sorted(evaluated) == [2, 4]
    best = json.loads((store / "best" / "best.json").read_text())
    assert best["step"] == (4 if evaluated[4] > evaluated[2] else 2)
    assert not (store / "checkpoint-000003" / "best.json").exists()
    # the math family keeps no state: no task_state/ store beside the trainer's
    assert (tmp_path / "run" / "callback_state" / "recorder").is_dir()
    assert not (tmp_path / "run" / "task_state").exists()
