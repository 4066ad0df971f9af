"""The record of one DB-bench problem: a table, a question and how its answer is graded.

Whatever the source (AgentBench rows, LifelongAgentBench entries, the procedural
generator), a problem becomes this record and travels as `Sample.data`. Reference SQL
is written with MySQL's quoting (backticks), as in both benchmarks; the sandbox
translates it to the episode's dialect.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator

Value = int | float | str | None  # one cell of a table or of an answer


class ProblemKind(StrEnum):
    QUERY = "query"  # graded on the final answer
    MODIFICATION = "modification"  # INSERT/UPDATE/DELETE: graded on the table afterwards


class ColumnSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    type: str = "TEXT"


class TableSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    columns: tuple[ColumnSpec, ...] = Field(min_length=1)
    rows: tuple[tuple[Value, ...], ...] = ()

    @model_validator(mode="after")
    def _check_shape(self) -> TableSpec:
        names = [column.name.lower() for column in self.columns]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"table '{self.name}': duplicate column names {duplicates}")
        for index, row in enumerate(self.rows):
            if len(row) != len(self.columns):
                raise ValueError(f"table '{self.name}': row {index} has {len(row)} values for "
                                 f"{len(self.columns)} columns")
        return self

    def describe(self) -> str:
        """AgentBench's sentence that introduces the table to the agent."""
        headers = ",".join(column.name for column in self.columns)
        return f"The name of this table is {self.name}, and the headers of this table are {headers}."


class DBBenchProblem(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    question: str = Field(min_length=1)
    table: TableSpec
    kind: ProblemKind
    skills: tuple[str, ...] = ()
    reference_sql: str | None = None  # MySQL quoting; required for modifications
    expected_answer: tuple[Value, ...] | None = None  # flat; None: run reference_sql
    ordered: bool = False  # the answer's order matters (the question asks for an order)
    answer_md5: str | None = None  # the benchmark's MySQL table hash after the reference SQL

    @model_validator(mode="after")
    def _check_reference(self) -> DBBenchProblem:
        if self.kind is ProblemKind.MODIFICATION and not self.reference_sql:
            raise ValueError("a modification problem needs reference_sql")
        if (self.kind is ProblemKind.QUERY and self.expected_answer is None
                and not self.reference_sql):
            raise ValueError("a query problem needs expected_answer or reference_sql")
        return self
