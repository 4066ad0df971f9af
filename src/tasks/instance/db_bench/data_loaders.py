"""Benchmark files into the project's `Sample` records, with a `DBBenchProblem` as data.

- AgentBench DB-bench jsonl (`dev.jsonl`): one row a line. For INSERT/UPDATE/DELETE rows
  `label` holds the reference SQL and `answer_md5` the MySQL table hash after it; for the
  other types `label` holds the expected values, and the row's `sql.query` is not used
  (its names are unquoted and do not run). Every column is TEXT, as AgentBench creates
  them whatever the declared type; a column without a name (which no server accepts)
  is called `column_<position>`.
- LifelongAgentBench `entry_dict.json`: `{id: {instruction, answer_info{md5, direct, sql},
  table_info{name, column_info_list, row_list}, skill_list}}`, columns typed as declared.
Errors name the file and the line or sample id.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from src.records.episode import Sample
from src.tasks.instance.db_bench.problem import (
    ColumnSpec,
    DBBenchProblem,
    ProblemKind,
    TableSpec,
    Value,
)
from src.tasks.instance.db_bench.skills import ORDERING_SKILLS, check_skills, single_skill_of

_MODIFICATION_TYPES = ("INSERT", "UPDATE", "DELETE")
_MD5 = re.compile(r"[0-9a-f]{32}")
_ENTRY_ERRORS = (KeyError, TypeError, IndexError, AttributeError, ValueError, ValidationError)


def _describe(error: Exception) -> str:
    return f"missing field {error}" if isinstance(error, KeyError) else str(error)


# ---- AgentBench --------------------------------------------------------------------------
def agentbench_problem(row: Mapping[str, Any]) -> DBBenchProblem:
    table = row["table"]
    info = table["table_info"]
    spec = TableSpec(name=table["table_name"],
                     columns=tuple(ColumnSpec(name=column["name"] or f"column_{index + 1}",
                                              type="TEXT")
                                   for index, column in enumerate(info["columns"])),
                     rows=tuple(tuple(r) for r in info["rows"]))
    kind, label = row["type"][0], row["label"]
    if kind in _MODIFICATION_TYPES:
        if len(label) != 1:
            raise ValueError(f"a {kind} row needs exactly one reference statement in 'label', "
                             f"got {len(label)}")
        md5 = _MD5.search(str(row.get("answer_md5") or ""))
        return DBBenchProblem(question=row["description"], table=spec,
                              kind=ProblemKind.MODIFICATION, skills=(kind.lower(),),
                              reference_sql=label[0], answer_md5=md5.group(0) if md5 else None)
    return DBBenchProblem(question=row["description"], table=spec, kind=ProblemKind.QUERY,
                          skills=tuple(row["type"]), expected_answer=tuple(label))


def load_agentbench_jsonl(path: str | Path) -> list[Sample]:
    path = Path(path)
    samples: list[Sample] = []
    with path.open(encoding="utf-8") as file:
        for line_number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                problem = agentbench_problem(row)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{line_number}: not JSON: {error}") from error
            except _ENTRY_ERRORS as error:
                raise ValueError(f"{path}:{line_number}: not an AgentBench DB-bench row: "
                                 f"{_describe(error)}") from error
            samples.append(Sample(sample_id=f"{path.stem}-{line_number:04d}",
                                  category=row["type"][0],
                                  data=problem.model_dump(mode="json")))
    return samples


# ---- LifelongAgentBench ------------------------------------------------------------------
def _flat(rows: Any) -> Iterator[Value]:
    for row in rows:
        if isinstance(row, list | tuple):
            yield from row
        else:
            yield row


def lifelong_problem(entry: Mapping[str, Any]) -> DBBenchProblem:
    answer, table = entry["answer_info"], entry["table_info"]
    skills = tuple(entry["skill_list"])
    check_skills(skills, "skill_list")
    spec = TableSpec(name=table["name"],
                     columns=tuple(ColumnSpec(**column) for column in table["column_info_list"]),
                     rows=tuple(tuple(row) for row in table["row_list"]))
    sql = str(answer["sql"]).strip()
    modification = (answer.get("md5") is not None
                    or sql.split(maxsplit=1)[0].upper() in _MODIFICATION_TYPES)
    direct = answer.get("direct")
    return DBBenchProblem(
        question=entry["instruction"], table=spec,
        kind=ProblemKind.MODIFICATION if modification else ProblemKind.QUERY,
        skills=skills, reference_sql=sql,
        expected_answer=None if modification or direct is None else tuple(_flat(direct)),
        ordered=any(skill in ORDERING_SKILLS for skill in skills),
        answer_md5=answer.get("md5"))


def load_lifelong_entry_dict(path: str | Path) -> list[Sample]:
    """Every entry, its category being its single skill or its skills joined by '+'."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON: {error}") from error
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected an object mapping sample ids to entries")
    samples: list[Sample] = []
    for sample_id, entry in data.items():
        try:
            problem = lifelong_problem(entry)
        except _ENTRY_ERRORS as error:
            raise ValueError(f"{path}: sample '{sample_id}': not a LifelongAgentBench entry: "
                             f"{_describe(error)}") from error
        category = single_skill_of(problem.skills) or "+".join(problem.skills)
        samples.append(Sample(sample_id=str(sample_id), category=category,
                              data=problem.model_dump(mode="json")))
    return samples
