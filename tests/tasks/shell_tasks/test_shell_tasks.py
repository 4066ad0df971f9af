"""Shell tasks in the real sandbox: seeded files and questions, every kind solved by its
oracle through the bash tool, wrong answers and files scored 0, and what the agent changes
in its sandbox (the input files, a script that prints the answer it saw) never moves the
host's expected values; the oracle's smoke run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import permutations
from pathlib import Path

import pytest

from src.agents.instance.oracle_agent import OracleAgent
from src.language_models.tool_calls import hermes_text
from src.records.episode import EpisodeStatus, Outcome
from src.run.rollout import roll_out_lockstep
from src.run_experiment import main
from src.tasks.instance.shell_tasks.generation import KINDS, WORDS
from src.tasks.instance.shell_tasks.task import ShellTask, same_answer
from src.tasks.splits import Splits
from src.tasks.task import TaskSettingError
from tests.conftest import PROJECT_ROOT
from tests.tasks.stepping import step_through

SMOKE = PROJECT_ROOT / "configs" / "assignments" / "smoke_oracle_shell_tasks.yaml"


@pytest.fixture(scope="module")
def task() -> Iterator[ShellTask]:
    family = ShellTask(splits=Splits(num_train=16, num_validation=8, seed=2), script_timeout_s=2.0)
    yield family
    family.close()


def bash(command: str) -> str:
    return hermes_text(None, [("bash", {"command": command})])


def test_tasks_are_seeded_and_splits_draw_their_own() -> None:
    first, again, other = (ShellTask(splits=Splits(num_train=16, num_validation=8, seed=seed))
                           for seed in (2, 2, 3))
    try:
        ids = [*first.sample_ids("train"), *first.sample_ids("validation")]
        samples = [first.get_sample(sample_id) for sample_id in ids]
        assert [again.get_sample(sample_id) for sample_id in ids] == samples
        assert [other.get_sample(sample_id) for sample_id in ids] != samples
    finally:
        for family in (first, again, other):
            family.close()
    assert [sample.category for sample in samples[:8]] == list(KINDS)
    train, validation = samples[:16], samples[16:]
    assert not {json.dumps(s.data["files"]) for s in train} & \
        {json.dumps(s.data["files"]) for s in validation}
    # "a line holding the word" is what grep counts: no word is inside another
    assert not [pair for pair in permutations(WORDS, 2) if pair[0] in pair[1]]
    script = samples[7].data["script"]
    assert script["files"]["numbers.txt"] != samples[7].data["files"]["numbers.txt"]


def test_the_oracle_solves_every_kind_through_the_bash_tool(task: ShellTask) -> None:
    samples = [(task.get_sample(f"train-{index:06d}"), 0) for index in range(8)]
    episodes = roll_out_lockstep(samples, task, OracleAgent(), 0, list(range(8)))
    assert [episode.sample.category for episode in episodes] == list(KINDS)
    for episode in episodes:
        assert episode.status is EpisodeStatus.COMPLETED, episode.info
        assert episode.outcome is Outcome.CORRECT and episode.reward == 1.0, episode.info
        assert episode.metrics["correct"] == 1.0 and episode.metrics["answer_given"] == 1.0
        assert episode.metrics["sandbox/ok"] == 1.0 and episode.turns == 2


def test_wrong_answers_and_files_score_zero(task: ShellTask) -> None:
    count = task.get_sample("train-000000").data["answer"]  # count_lines
    assert step_through(task, "train-000000", [f"\\boxed{{{count}}}"])[0] == 1.0
    reward, info = step_through(task, "train-000000", [f"\\boxed{{{int(count) + 1}}}"])
    assert reward == 0.0 and info["metrics"]["answer_given"] == 1.0
    reward, info = step_through(task, "train-000000", [f"It is {count}."])
    assert reward == 0.0 and info["metrics"]["answer_given"] == 0.0
    # sort_file: no sorted.txt, then one in the wrong order
    reward, info = step_through(task, "train-000004", ["Done."])
    assert reward == 0.0 and info["metrics"]["answer_given"] == 0.0
    assert info["extras"]["check_detail"] == "no file sorted.txt"
    reward, info = step_through(task, "train-000004", [bash("cp names.txt sorted.txt"),
                                                       "Done."])
    assert reward == 0.0 and info["metrics"]["answer_given"] == 1.0
    assert same_answer(" `./docs/a.txt` ", "docs/a.txt") and not same_answer("a.txt", "docs/a.txt")


def test_changing_the_inputs_does_not_move_the_expected_values(task: ShellTask) -> None:
    # the agent rewrites notes.txt to hold its (wrong) count: the host's value stands
    count = int(task.get_sample("train-000000").data["answer"])
    word_lines = "\n".join(["apple"] * (count + 5))
    reward, _ = step_through(task, "train-000000", [
        bash(f"printf '{word_lines}\\n' > notes.txt; grep -c -w apple notes.txt"),
        f"\\boxed{{{count + 5}}}"])
    assert reward == 0.0
    # replace_in_file: emptying the file it edits in place is not the expected content
    assert step_through(task, "train-000006", [bash(": > config.txt"), "Done."])[0] == 0.0


def test_a_script_that_prints_the_answer_it_saw_fails_the_hidden_inputs(
        task: ShellTask) -> None:
    sample = task.get_sample("train-000007")
    assert sample.category == "fix_script"
    solved = step_through(task, "train-000007", [bash(sample.data["oracle_command"]), "Done."])
    assert solved[0] == 1.0
    # the repaired script's output on the visible numbers, printed as a constant
    cheat = (f"{sample.data['oracle_command']}\n"
             "value=$(python3 script.py); printf 'print(%s)\\n' \"$value\" > script.py")
    reward, info = step_through(task, "train-000007", [bash(cheat), "Done."])
    assert reward == 0.0 and "on the check's inputs" in info["extras"]["check_detail"]
    looping = step_through(task, "train-000007", [
        bash("printf 'while True:\\n    pass\\n' > script.py"), "Done."])
    assert looping[0] == 0.0 and "timeout" in looping[1]["extras"]["check_detail"]


def test_an_unknown_kind_is_a_setting_error() -> None:
    with pytest.raises(TaskSettingError) as refused:
        ShellTask.check_parameters({"kinds": ["sort_files"]})
    assert refused.value.key == ("kinds", 0) and "did you mean 'sort_file'" in \
        refused.value.message


def test_the_oracle_smoke_run_solves_every_held_out_task(tmp_path: Path) -> None:
    output = tmp_path / "run"
    assert main(["--config_path", str(SMOKE), "--output_dir", str(output),
                 "--no_progress"]) == 0
    episodes = [json.loads(line) for line in
                (output / "evaluation" / "step-000001.jsonl").open()]
    assert len(episodes) == 8 and all(e["outcome"] == "correct" for e in episodes)
    assert {e["category"] for e in episodes} == set(KINDS)

