"""Loading AgentBench rows and LifelongAgentBench entries; single-skill filtering."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from src.tasks.instance.db_bench.data_loaders import (
    load_agentbench_jsonl,
    load_lifelong_entry_dict,
)
from src.tasks.instance.db_bench.problem import DBBenchProblem, ProblemKind
from src.tasks.instance.db_bench.single_skill_task_generator import SingleSkillTaskGenerator
from src.tasks.instance.db_bench.skills import SKILLS, single_skill_of


def entry(skills: list[str], sql: str = "SELECT `name` FROM `people` WHERE `age` > 20",
          direct: Any = (("Alice",),), md5: str | None = None) -> dict[str, Any]:
    return {"instruction": "Who is older than 20?",
            "answer_info": {"md5": md5, "direct": None if md5 else direct, "sql": sql},
            "table_info": {"name": "people",
                           "column_info_list": [{"name": "name", "type": "VARCHAR(50)"},
                                                {"name": "age", "type": "INT"}],
                           "row_list": [["Alice", 25], ["Bob", 19]]},
            "skill_list": skills}


def test_agentbench_dev_rows(shared_data: Path) -> None:
    samples = load_agentbench_jsonl(shared_data / "agentbench-dbbench" / "dev.jsonl")
    assert len(samples) == 60 and samples[0].sample_id == "dev-0001"
    problems = [DBBenchProblem.model_validate(sample.data) for sample in samples]
    assert sum(p.kind is ProblemKind.MODIFICATION for p in problems) == 40
    assert all(p.answer_md5 and len(p.answer_md5) == 32 for p in problems
               if p.kind is ProblemKind.MODIFICATION)
    assert problems[0].expected_answer == ("March 19, 1998",)
    assert {sample.category for sample in samples} >= {"INSERT", "UPDATE", "counting"}


def test_agentbench_errors_name_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"description": "x"}\n')
    with pytest.raises(ValueError, match=r"rows\.jsonl:1: .*missing field 'table'"):
        load_agentbench_jsonl(path)
    path.write_text("\n{not json\n")
    with pytest.raises(ValueError, match=r"rows\.jsonl:2: not JSON"):
        load_agentbench_jsonl(path)


def test_lifelong_entries(tmp_path: Path) -> None:
    path = tmp_path / "entry_dict.json"
    path.write_text(json.dumps({
        "0": entry(["select", "where_single_condition"]),
        "1": entry(["insert"], sql="INSERT INTO `people` VALUES ('Cy', 30)", md5="ab" * 16),
        "2": entry(["select", "where_single_condition", "order_by_single_column"])}))
    samples = load_lifelong_entry_dict(path)
    assert [s.category for s in samples] == [
        "where_single_condition", "insert",
        "select+where_single_condition+order_by_single_column"]
    query, insert, multi = (DBBenchProblem.model_validate(s.data) for s in samples)
    assert query.expected_answer == ("Alice",) and not query.ordered
    assert insert.kind is ProblemKind.MODIFICATION and insert.expected_answer is None
    assert multi.ordered
    path.write_text(json.dumps({"7": entry(["select", "juggling"])}))
    with pytest.raises(ValueError, match=r"entry_dict\.json: sample '7': .*unknown skills"):
        load_lifelong_entry_dict(path)


def test_single_skill_generator(tmp_path: Path) -> None:
    path = tmp_path / "entry_dict.json"
    data = {str(i): entry(["select", "where_single_condition"]) for i in range(5)}
    data["5"] = entry(["select"])
    data["6"] = entry(["select", "where_single_condition", "limit_only"])
    path.write_text(json.dumps(data))
    generator = SingleSkillTaskGenerator.load_from_existing_data(str(path))
    assert generator.get_available_skills() == ["select", "where_single_condition"]
    assert generator.get_available_skills("validation") == ["where_single_condition"]
    assert generator.task_count("where_single_condition") == 4  # every fifth is held out
    problem = generator.generate("where_single_condition", "train", random.Random(0))
    assert problem.skills == ("where_single_condition",)
    with pytest.raises(ValueError, match="no validation tasks for skill 'select'"):
        generator.generate("select", "validation", random.Random(0))

    prepared = tmp_path / "single_skill_tasks.json"
    prepared.write_text(json.dumps({"limit_only": [entry(["select", "limit_only"])]}))
    assert SingleSkillTaskGenerator(skill_to_tasks_path=str(prepared)).get_available_skills() \
        == ["limit_only"]
    prepared.write_text(json.dumps({"limit_only": [{"instruction": "x"}]}))
    with pytest.raises(ValueError, match="skill 'limit_only', task 0"):
        SingleSkillTaskGenerator(skill_to_tasks_path=str(prepared))


def test_single_skill_rule() -> None:
    assert len(SKILLS) == 22
    assert single_skill_of(["select", "limit_only"]) == "limit_only"
    assert single_skill_of(["select"]) == "select"
    assert single_skill_of(["insert"]) == "insert"
    assert single_skill_of(["select", "limit_only", "column_alias"]) is None
