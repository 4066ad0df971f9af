"""The family and its episodes: messages, sample drawing, the round limit and its rewards,
settings, the sandbox's lifetime."""

from __future__ import annotations

import time
from collections import Counter

import pydantic
import pytest

from src.records.episode import EpisodeStatus, Outcome
from src.tasks.instance.db_bench.problem import DBBenchProblem
from src.tasks.instance.db_bench.skills import SKILLS
from src.tasks.instance.db_bench.task_single_skill import DBBenchSingleSkill, DBBenchSplits
from tests.tasks.db_bench.test_sandbox import BOUNDED_S, ENDLESS_VIEW, GROWTH, TIMEOUT_S, within


def test_first_message_and_an_episode() -> None:
    task = DBBenchSingleSkill(skills=["where_single_condition"], splits=DBBenchSplits(num_train=1))
    environment = task.new_episode()
    observation, info = environment.reset(options={"sample_id": "train-000000"})
    problem = DBBenchProblem.model_validate(task.get_sample("train-000000").data)
    rules, question = observation.split("\n\n", 1)
    assert rules.startswith("I will ask you a question, then you should help me operate a "
                            "SQLite database with SQL")
    assert question == f"{problem.question}\n{problem.table.describe()}"
    assert question.endswith(f"The name of this table is {problem.table.name}, and the headers "
                             f"of this table are {','.join(c.name for c in problem.table.columns)}.")
    assert info == {"sample_id": "train-000000", "category": "where_single_condition"}
    observation, reward, terminated, truncated, _ = environment.step(
        f"Action: Operation\n```sql\n{problem.reference_sql}\n```")
    assert observation.startswith("[(") and not terminated and not truncated
    *_, info = environment.step(environment.oracle_reply())
    assert info["outcome"] is Outcome.CORRECT and info["metrics"]["correct"] == 1.0
    environment.close()


def test_samples_are_deterministic_and_skills_uniform() -> None:
    first, second = (DBBenchSingleSkill(splits=DBBenchSplits(seed=3)),
                     DBBenchSingleSkill(splits=DBBenchSplits(seed=3)))
    ids = first.sample_ids("train")[:300]
    assert [first.get_sample(i) for i in ids[:20]] == [second.get_sample(i) for i in ids[:20]]
    other = DBBenchSingleSkill(splits=DBBenchSplits(seed=4))
    assert other.get_sample(ids[0]) != first.get_sample(ids[0])
    counts = Counter(first.get_sample(i).category for i in ids)
    assert set(counts) == set(SKILLS) and max(counts.values()) < 30
    assert len(first.sample_ids("validation")) == 64
    chosen = DBBenchSingleSkill(skills=["limit_only", "insert"])
    assert {chosen.get_sample(i).category for i in ids[:20]} == {"limit_only", "insert"}


@pytest.mark.parametrize(("skill", "setting", "outcome", "reward"), [
    ("update", "correct", Outcome.CORRECT, 1.0),
    ("update", "timeout", Outcome.INCORRECT, -0.3),
    ("limit_only", "correct", Outcome.INCORRECT, -0.3),
])
def test_round_limit(skill: str, setting: str, outcome: Outcome, reward: float) -> None:
    """A right modification at the limit counts as correct unless told otherwise."""
    task = DBBenchSingleSkill(skills=[skill], splits=DBBenchSplits(num_train=1), max_round=1,
                              modification_correct_at_round_limit=setting)
    environment = task.new_episode()
    environment.reset(options={"sample_id": "train-000000"})
    problem = DBBenchProblem.model_validate(task.get_sample("train-000000").data)
    _, step_reward, terminated, truncated, info = environment.step(
        f"Action: Operation\n```sql\n{problem.reference_sql}\n```")
    assert (terminated, truncated) == (False, True)
    assert (info["outcome"], step_reward) == (outcome, reward)
    assert info["metrics"]["round_limit"] == 1.0
    environment.close()


def test_wrong_modification_at_the_round_limit_is_a_timeout() -> None:
    task = DBBenchSingleSkill(skills=["delete"], splits=DBBenchSplits(num_train=1), max_round=2)
    environment = task.new_episode()
    environment.reset(options={"sample_id": "train-000000"})
    table = DBBenchProblem.model_validate(task.get_sample("train-000000").data).table.name
    assert environment.step("Action: Operation\n```sql\nSELECT 1\n```")[2:4] == (False, False)
    *_, reward, terminated, truncated, info = environment.step(
        f'Action: Operation\n```sql\nDELETE FROM "{table}"\n```')
    assert (reward, terminated, truncated, info["outcome"]) == (-0.3, False, True,
                                                                 Outcome.INCORRECT)
    environment.close()


def test_settings_are_checked() -> None:
    with pytest.raises(pydantic.ValidationError, match="extra"):
        DBBenchSingleSkill(sandbox={"url": "sqlite://", "timeout": 3})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown skills"):
        DBBenchSingleSkill(skills=["joins"])
    with pytest.raises(ValueError, match="needs data_file_path"):
        DBBenchSingleSkill(source="agentbench")
    with pytest.raises(ValueError, match="exactly one of data_file_path"):
        DBBenchSingleSkill(source="lifelong_agent_bench")
    with pytest.raises(KeyError, match="malformed"):
        DBBenchSingleSkill().get_sample("test-1")


def test_close_drops_the_sandbox_and_is_safe_twice() -> None:
    environment = DBBenchSingleSkill(splits=DBBenchSplits(num_train=1)).new_episode()
    environment.reset(options={"sample_id": "train-000000"})
    environment.close()
    environment.close()
    with pytest.raises(RuntimeError, match="no DB-bench episode"):
        environment.oracle_reply()


def test_episodes_of_one_family_have_their_own_sandboxes() -> None:
    """Episodes stepped together share the family, never a table."""
    task = DBBenchSingleSkill(skills=["delete"], splits=DBBenchSplits(num_train=1), max_round=3)
    first, second = task.new_episode(), task.new_episode()
    for environment in (first, second):
        environment.reset(options={"sample_id": "train-000000"})
    table = DBBenchProblem.model_validate(task.get_sample("train-000000").data).table.name
    first.step(f'Action: Operation\n```sql\nDELETE FROM "{table}"\n```')
    observation, *_ = second.step(f'Action: Operation\n```sql\nSELECT COUNT(*) FROM "{table}"\n```')
    assert observation != "[(0,)]"
    first.close()
    second.close()


def test_stratified_validation_takes_each_skill_in_turn() -> None:
    task = DBBenchSingleSkill(splits=DBBenchSplits(num_train=4, num_validation=44, seed=7),
                              stratified_validation=True)
    categories = [task.get_sample(sample_id).category
                  for sample_id in task.sample_ids("validation")]
    assert categories == list(task.skills) * 2
    drawn = DBBenchSingleSkill(splits=DBBenchSplits(num_train=4, num_validation=44, seed=7))
    assert [drawn.get_sample(i).category for i in drawn.sample_ids("validation")] != categories
    # the train split is drawn as before
    assert [task.get_sample(i) for i in task.sample_ids("train")] == [
        drawn.get_sample(i) for i in drawn.sample_ids("train")]


def test_selection_split_is_a_second_held_out_draw() -> None:
    """Selection problems: stratified like validation's, none of them a validation or a
    train problem, and adding them changes neither of those splits."""
    task = DBBenchSingleSkill(splits=DBBenchSplits(num_train=200, num_validation=44,
                                                   num_selection=44, seed=7),
                              stratified_validation=True)
    plain = DBBenchSingleSkill(splits=DBBenchSplits(num_train=200, num_validation=44, seed=7),
                               stratified_validation=True)
    selection = [task.get_sample(i) for i in task.sample_ids("selection")]
    assert [sample.sample_id for sample in selection][:2] == ["selection-000000",
                                                              "selection-000001"]
    assert [sample.category for sample in selection] == list(task.skills) * 2
    problems = {split: [task.get_sample(i).data for i in task.sample_ids(split)]
                for split in ("train", "validation")}
    assert not [sample for sample in selection
                if sample.data in problems["validation"] or sample.data in problems["train"]]
    for split in ("train", "validation"):
        assert problems[split] == [plain.get_sample(i).data for i in plain.sample_ids(split)]
    assert plain.sample_ids("selection") == []


def test_only_the_procedural_source_draws_selection_problems(tmp_path) -> None:
    with pytest.raises(ValueError, match="num_selection: 8 selection problems asked of source "
                                         "'lifelong_agent_bench'"):
        DBBenchSingleSkill(skill_to_tasks_path=str(tmp_path / "skill_to_tasks.json"),
                           splits=DBBenchSplits(num_selection=8))


def _operation(sql: str) -> str:
    return f"Action: Operation\n```sql\n{sql}\n```"


def _quoted(backend: str, name: str) -> str:
    return f"`{name}`" if backend == "mysql" else f'"{name}"'


def test_a_view_in_the_tables_place_is_graded_wrong_within_the_limit(
        backend: str, sandbox_url: str) -> None:
    """A modification answered after its table was renamed away and an endless view put in
    its place: the episode ends INCORRECT, its grading within the time limit."""
    task = DBBenchSingleSkill(skills=["delete"], splits=DBBenchSplits(num_train=1), max_round=4,
                              sandbox={"url": sandbox_url, "statement_timeout_s": TIMEOUT_S})
    table = DBBenchProblem.model_validate(task.get_sample("train-000000").data).table.name
    view = ENDLESS_VIEW[backend].replace("Team Name", "x").replace("points", "y")

    def episode() -> tuple[list[str], tuple, float]:
        environment = task.new_episode()
        try:
            environment.reset(options={"sample_id": "train-000000"})
            observations = [environment.step(_operation(sql))[0] for sql in (
                f"ALTER TABLE {_quoted(backend, table)} RENAME TO old_table",
                f"CREATE VIEW {_quoted(backend, table)} AS {view}")]
            started = time.monotonic()
            answered = environment.step("Action: Answer\nFinal Answer: []")
            return observations, answered, time.monotonic() - started
        finally:
            environment.close()

    observations, (_, reward, terminated, _, info), seconds = within(30, episode)
    assert not any(text.startswith("Error") for text in observations), observations
    assert (terminated, info["outcome"], reward) == (True, Outcome.INCORRECT, -0.1)
    assert seconds < 3 * BOUNDED_S


def test_a_sandbox_over_its_storage_bound_ends_the_episode(backend: str,
                                                           sandbox_url: str) -> None:
    """Servers: the statement that leaves the tables past the bound ends the episode
    INCORRECT; SQLite refuses the write and the episode goes on."""
    task = DBBenchSingleSkill(skills=["update"], splits=DBBenchSplits(num_train=1), max_round=6,
                              sandbox={"url": sandbox_url})
    environment = task.new_episode()
    environment.reset(options={"sample_id": "train-000000"})
    try:
        steps = [environment.step(_operation(sql.format(0))) for sql in GROWTH[backend]]
    finally:
        environment.close()
    observation, reward, terminated, truncated, info = steps[-1]
    if backend == "sqlite":
        assert observation.startswith("Error: database or disk is full")
        assert (terminated, info["status"]) == (False, EpisodeStatus.RUNNING)
    else:
        assert (terminated, info["outcome"], reward) == (True, Outcome.INCORRECT, -0.1)
        assert info["metrics"]["storage_limit"] == 1.0
