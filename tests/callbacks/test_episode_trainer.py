"""The loop trains through an EpisodeTrainer on purpose: the schedule first, then per
batch `train`, the observers' hook, and `consider_best` with the step's figures (the
evaluation's on evaluated steps) before the commit writes its state."""

from __future__ import annotations

from pathlib import Path

import yaml

from src.callbacks.callback import TrainingSchedule
from src.experiment.assembly import build_components, load_experiment_config, plan_experiment
from src.experiment.loop import ExperimentLoop
from src.experiment.run_directory import RunDirectory
from tests.callbacks.recording_trainer import RecordingTrainer

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def test_the_loop_calls_its_trainer_on_purpose(tmp_path: Path) -> None:
    config = yaml.safe_load((PROJECT_ROOT / "configs/assignments/smoke_oracle_math.yaml")
                            .read_text())
    assignment = config["assignment_config"]
    assignment["output_dir"] = str(tmp_path / "run")
    assignment["evaluation"] = {"every_n_batches": 2, "at_end": True}
    assignment["callback_dict"] = {"recorder": {
        "name": "recorder", "module": "tests.callbacks.recording_trainer.RecordingTrainer"}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))

    experiment, source = load_experiment_config(path)
    run = RunDirectory(tmp_path / "run")
    state = run.start(experiment, path)
    components = build_components(plan_experiment(experiment, source))
    ExperimentLoop(experiment.assignment_config, components, run,
                   show_progress=False).execute(state)

    calls = RecordingTrainer.calls
    # 32 train samples in batches of 8, each rolled out twice
    assert calls[0] == ("prepare", TrainingSchedule(total_batches=4, episodes_per_batch=16))
    per_batch = [calls[1 + 4 * index: 5 + 4 * index] for index in range(4)]
    for index, (train, observed, best, saved) in enumerate(per_batch):
        step = index + 1
        assert train == ("train", (index, 16))
        assert observed == ("on_batch_end", index)
        assert best[0] == "consider_best" and best[1][0] == step
        figures = best[1][1]
        assert figures["probe/episodes"] == 16.0  # its own metrics, as logged
        assert "rollout/reward" in figures
        assert ("eval/success_rate" in figures) == (step % 2 == 0)
        # into a fresh temporary folder, renamed to checkpoint-NNNNNN once written
        assert saved[0] == "save_state" and f"checkpoint-{step:06d}" in str(saved[1])
    assert len(calls) == 1 + 4 * 4
    # the math family keeps no state: no task_state/ store beside the trainer's
    assert (tmp_path / "run" / "callback_state" / "recorder").is_dir()
    assert not (tmp_path / "run" / "task_state").exists()
