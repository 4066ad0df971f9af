"""Procedural single-skill problems: a seeded table and, for each of the 22 skills, a question
in plain English with its reference SQL.

The tables are procedural_tables.py's (unique measures, so that every ORDER BY, LIMIT and
MAX/MIN is free of ties and one answer is right on every server; thresholds drawn from the
rows, so that no filter comes back empty). The reference SQL uses MySQL quoting (translated per dialect) and only
portable constructs (no integer division, no aggregate aliases in HAVING, no LIMIT in
subqueries); the expected answer is not stored but computed by running it in the
episode's sandbox.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from src.tasks.instance.db_bench.problem import (
    ColumnSpec,
    DBBenchProblem,
    ProblemKind,
    TableSpec,
)
from src.tasks.instance.db_bench.procedural_tables import (
    CITIES,
    ROLES,
    THEMES,
    TYPES,
    TableDraw,
    literal,
    shown,
)
from src.tasks.instance.db_bench.skills import MODIFICATION_SKILLS, ORDERING_SKILLS, SKILLS

Template = Callable[[TableDraw], tuple[str, str]]


def _select(d: TableDraw) -> tuple[str, str]:
    th = d.theme
    if d.rng.random() < 0.5:
        return (f"List the {th.label} of every {th.entity}.",
                f"SELECT {d.c('label')} FROM {d.t}")
    return (f"Show the {th.label} and {th.place} of all {th.entities}.",
            f"SELECT {d.c('label')}, {d.c('place')} FROM {d.t}")


def _insert(d: TableDraw) -> tuple[str, str]:
    th, new = d.theme, d.spare
    described = ", ".join(f"{d.name(role)} {shown(getattr(new, role))}" for role in ROLES[:-1])
    columns = ", ".join(d.c(role) for role in ROLES)
    values = ", ".join(literal(getattr(new, role)) for role in ROLES)
    return (f"Insert a new {th.entity} into the table with {described} and "
            f"{th.day} {shown(new.day)}.",
            f"INSERT INTO {d.t} ({columns}) VALUES ({values})")


def _delete(d: TableDraw) -> tuple[str, str]:
    th, row = d.theme, d.row()
    if d.rng.random() < 0.5:
        return (f"Delete the {th.entity} whose {th.key} is {row.key}.",
                f"DELETE FROM {d.t} WHERE {d.c('key')} = {row.key}")
    return (f"Remove the {th.entity} with {th.label} {shown(row.label)} from the table.",
            f"DELETE FROM {d.t} WHERE {d.c('label')} = {literal(row.label)}")


def _update(d: TableDraw) -> tuple[str, str]:
    th, row = d.theme, d.row()
    if d.rng.random() < 0.5:
        new = d.spare.count
        return (f"Change the {th.count} of the {th.entity} whose {th.key} is {row.key} "
                f"to {new}.",
                f"UPDATE {d.t} SET {d.c('count')} = {new} WHERE {d.c('key')} = {row.key}")
    new_place = d.rng.choice([city for city in CITIES if city != row.place])
    return (f"Set the {th.place} of the {th.entity} with {th.label} {shown(row.label)} "
            f"to {shown(new_place)}.",
            f"UPDATE {d.t} SET {d.c('place')} = {literal(new_place)} "
            f"WHERE {d.c('label')} = {literal(row.label)}")


def _where_single_condition(d: TableDraw) -> tuple[str, str]:
    th, choice = d.theme, d.rng.randrange(3)
    if choice == 0:
        limit = d.below_max([row.count for row in d.rows])
        return (f"Which {th.entities} have a {th.count} greater than {limit}? "
                f"Give their {th.label}.",
                f"SELECT {d.c('label')} FROM {d.t} WHERE {d.c('count')} > {limit}")
    if choice == 1:
        group = d.row().group
        return (f"List the {th.label} of the {th.entities} whose {th.group} is {shown(group)}.",
                f"SELECT {d.c('label')} FROM {d.t} WHERE {d.c('group')} = {literal(group)}")
    day = sorted(row.day for row in d.rows)[d.rng.randrange(1, len(d.rows))]
    return (f"List the {th.label} of the {th.entities} whose {th.day} is before {shown(day)}.",
            f"SELECT {d.c('label')} FROM {d.t} WHERE {d.c('day')} < {literal(day)}")


def _where_multiple_conditions(d: TableDraw) -> tuple[str, str]:
    th, row = d.theme, d.row()
    if d.rng.random() < 0.5:
        return (f"List the {th.label} of the {th.entities} whose {th.group} is "
                f"{shown(row.group)} and whose {th.amount} is at least "
                f"{shown(row.amount)}.",
                f"SELECT {d.c('label')} FROM {d.t} WHERE {d.c('group')} = "
                f"{literal(row.group)} AND {d.c('amount')} >= {literal(row.amount)}")
    limit = min(row.count for row in d.rows) + 1
    return (f"List the {th.label} of the {th.entities} whose {th.place} is "
            f"{shown(row.place)} or whose {th.count} is below {limit}.",
            f"SELECT {d.c('label')} FROM {d.t} WHERE {d.c('place')} = "
            f"{literal(row.place)} OR {d.c('count')} < {limit}")


def _where_nested_conditions(d: TableDraw) -> tuple[str, str]:
    th, row = d.theme, d.row()
    other = d.rng.choice([g for g in d.group_rows() if g != row.group] or [row.group])
    limit = row.count - 1
    return (f"List the {th.label} of the {th.entities} whose {th.group} is "
            f"{shown(row.group)} or {shown(other)}, and whose {th.count} is above {limit}.",
            f"SELECT {d.c('label')} FROM {d.t} WHERE ({d.c('group')} = "
            f"{literal(row.group)} OR {d.c('group')} = {literal(other)}) "
            f"AND {d.c('count')} > {limit}")


def _order_by_single_column(d: TableDraw) -> tuple[str, str]:
    th = d.theme
    role, direction = d.rng.choice([("amount", "DESC"), ("count", "ASC"), ("day", "ASC")])
    words = "from highest to lowest" if direction == "DESC" else "from lowest to highest"
    if role == "day":
        words = "from earliest to latest"
    return (f"List the {th.label} of all {th.entities} ordered by {d.name(role)} {words}.",
            f"SELECT {d.c('label')} FROM {d.t} ORDER BY {d.c(role)} {direction}")


def _order_by_multiple_columns_same_direction(d: TableDraw) -> tuple[str, str]:
    th = d.theme
    if d.rng.random() < 0.5:
        return (f"List the {th.label} of all {th.entities}, sorted by {th.group} and then by "
                f"{th.count}, both in ascending order.",
                f"SELECT {d.c('label')} FROM {d.t} ORDER BY {d.c('group')} ASC, "
                f"{d.c('count')} ASC")
    return (f"List the {th.label} of all {th.entities}, sorted by {th.place} and then by "
            f"{th.amount}, both in descending order.",
            f"SELECT {d.c('label')} FROM {d.t} ORDER BY {d.c('place')} DESC, "
            f"{d.c('amount')} DESC")


def _order_by_multiple_columns_different_directions(d: TableDraw) -> tuple[str, str]:
    th = d.theme
    return (f"List the {th.label} of all {th.entities}, sorted by {th.group} in ascending "
            f"order and then by {th.amount} in descending order.",
            f"SELECT {d.c('label')} FROM {d.t} ORDER BY {d.c('group')} ASC, "
            f"{d.c('amount')} DESC")


def _limit_only(d: TableDraw) -> tuple[str, str]:
    count = d.rng.randint(2, 5)
    return (f"Show the {d.theme.label} of the first {count} rows of the table.",
            f"SELECT {d.c('label')} FROM {d.t} LIMIT {count}")


def _limit_and_offset(d: TableDraw) -> tuple[str, str]:
    count, skip = d.rng.randint(2, 4), d.rng.randint(2, 4)
    return (f"Skip the first {skip} rows of the table and show the {d.theme.label} of the "
            f"next {count} rows.",
            f"SELECT {d.c('label')} FROM {d.t} LIMIT {count} OFFSET {skip}")


def _column_alias(d: TableDraw) -> tuple[str, str]:
    th = d.theme
    return (f"Show the {th.label} and the {th.count} of every {th.entity}, with the "
            f"{th.count} column renamed to '{th.count_alias}'.",
            f"SELECT {d.c('label')}, {d.c('count')} AS `{th.count_alias}` FROM {d.t}")


def _table_alias(d: TableDraw) -> tuple[str, str]:
    th = d.theme
    return (f"Using '{th.alias}' as an alias for the table, list the {th.label} and "
            f"{th.place} of every {th.entity}.",
            f"SELECT {th.alias}.{d.c('label')}, {th.alias}.{d.c('place')} "
            f"FROM {d.t} AS {th.alias}")


def _group_by_single_column(d: TableDraw) -> tuple[str, str]:
    th = d.theme
    if d.rng.random() < 0.5:
        return (f"How many {th.entities} are there in each {th.group}? Give each {th.group} "
                f"with its number of {th.entities}.",
                f"SELECT {d.c('group')}, COUNT(*) FROM {d.t} GROUP BY {d.c('group')}")
    return (f"What is the total {th.count} of the {th.entities} in each {th.group}? Give each "
            f"{th.group} with its total.",
            f"SELECT {d.c('group')}, SUM({d.c('count')}) FROM {d.t} GROUP BY {d.c('group')}")


def _group_by_multiple_columns(d: TableDraw) -> tuple[str, str]:
    th = d.theme
    return (f"Count the {th.entities} for each combination of {th.group} and {th.place}; give "
            f"the {th.group}, the {th.place} and the count.",
            f"SELECT {d.c('group')}, {d.c('place')}, COUNT(*) FROM {d.t} "
            f"GROUP BY {d.c('group')}, {d.c('place')}")


def _having_single_condition_with_aggregate(d: TableDraw) -> tuple[str, str]:
    th, groups = d.theme, d.group_rows()
    if d.rng.random() < 0.5:
        limit = d.below_max([len(rows) for rows in groups.values()])
        return (f"Which {th.group} values have more than {limit} {th.entities}?",
                f"SELECT {d.c('group')} FROM {d.t} GROUP BY {d.c('group')} "
                f"HAVING COUNT(*) > {limit}")
    limit = d.below_max([sum(r.count for r in rows) for rows in groups.values()])
    return (f"Which {th.group} values have a total {th.count} above {limit}?",
            f"SELECT {d.c('group')} FROM {d.t} GROUP BY {d.c('group')} "
            f"HAVING SUM({d.c('count')}) > {limit}")


def _having_multiple_conditions_with_aggregate(d: TableDraw) -> tuple[str, str]:
    th = d.theme
    rows = d.group_rows()[d.row().group]
    size, total = len(rows), sum(r.count for r in rows)
    return (f"Which {th.group} values have at least {size} {th.entities} and a total "
            f"{th.count} greater than {total - 1}?",
            f"SELECT {d.c('group')} FROM {d.t} GROUP BY {d.c('group')} "
            f"HAVING COUNT(*) >= {size} AND SUM({d.c('count')}) > {total - 1}")


def _having_aggregate_calculation(d: TableDraw) -> tuple[str, str]:
    th = d.theme
    # with 8+ rows in at most 4 groups, some group has two rows and so a spread
    rows = d.rng.choice([rows for rows in d.group_rows().values() if len(rows) > 1])
    counts = [r.count for r in rows]
    spread = max(counts) - min(counts) - 1
    return (f"For which {th.group} values is the difference between the highest and the "
            f"lowest {th.count} greater than {spread}?",
            f"SELECT {d.c('group')} FROM {d.t} GROUP BY {d.c('group')} "
            f"HAVING MAX({d.c('count')}) - MIN({d.c('count')}) > {spread}")


def _subquery_single(d: TableDraw) -> tuple[str, str]:
    th = d.theme
    if d.rng.random() < 0.5:
        return (f"List the {th.label} of the {th.entities} whose {th.count} is above the "
                f"average {th.count}.",
                f"SELECT {d.c('label')} FROM {d.t} WHERE {d.c('count')} > "
                f"(SELECT AVG({d.c('count')}) FROM {d.t})")
    return (f"What is the {th.label} of the {th.entity} with the highest {th.amount}?",
            f"SELECT {d.c('label')} FROM {d.t} WHERE {d.c('amount')} = "
            f"(SELECT MAX({d.c('amount')}) FROM {d.t})")


def _subquery_multiple(d: TableDraw) -> tuple[str, str]:
    th = d.theme
    if d.rng.random() < 0.5:
        return (f"List the {th.label} of the {th.entities} whose {th.count} is neither the "
                f"lowest nor the highest {th.count} in the table.",
                f"SELECT {d.c('label')} FROM {d.t} WHERE {d.c('count')} > "
                f"(SELECT MIN({d.c('count')}) FROM {d.t}) AND {d.c('count')} < "
                f"(SELECT MAX({d.c('count')}) FROM {d.t})")
    return (f"List the {th.label} of the {th.entity} with the earliest {th.day} and of the "
            f"one with the latest {th.day}.",
            f"SELECT {d.c('label')} FROM {d.t} WHERE {d.c('day')} = "
            f"(SELECT MIN({d.c('day')}) FROM {d.t}) OR {d.c('day')} = "
            f"(SELECT MAX({d.c('day')}) FROM {d.t})")


def _subquery_nested(d: TableDraw) -> tuple[str, str]:
    th = d.theme
    if d.rng.random() < 0.5:
        return (f"List the {th.label} of the {th.entities} whose {th.place} is the same as "
                f"that of the {th.entity} with the highest {th.count}.",
                f"SELECT {d.c('label')} FROM {d.t} WHERE {d.c('place')} IN "
                f"(SELECT {d.c('place')} FROM {d.t} WHERE {d.c('count')} = "
                f"(SELECT MAX({d.c('count')}) FROM {d.t}))")
    return (f"List the {th.label} of the {th.entities} in the same {th.group} as the "
            f"{th.entity} with the lowest {th.amount}.",
            f"SELECT {d.c('label')} FROM {d.t} WHERE {d.c('group')} IN "
            f"(SELECT {d.c('group')} FROM {d.t} WHERE {d.c('amount')} = "
            f"(SELECT MIN({d.c('amount')}) FROM {d.t}))")


_TEMPLATES: dict[str, Template] = {
    "select": _select,
    "insert": _insert,
    "delete": _delete,
    "update": _update,
    "where_single_condition": _where_single_condition,
    "where_multiple_conditions": _where_multiple_conditions,
    "where_nested_conditions": _where_nested_conditions,
    "order_by_single_column": _order_by_single_column,
    "order_by_multiple_columns_same_direction": _order_by_multiple_columns_same_direction,
    "order_by_multiple_columns_different_directions":
        _order_by_multiple_columns_different_directions,
    "limit_only": _limit_only,
    "limit_and_offset": _limit_and_offset,
    "column_alias": _column_alias,
    "table_alias": _table_alias,
    "group_by_single_column": _group_by_single_column,
    "group_by_multiple_columns": _group_by_multiple_columns,
    "having_single_condition_with_aggregate": _having_single_condition_with_aggregate,
    "having_multiple_conditions_with_aggregate": _having_multiple_conditions_with_aggregate,
    "having_aggregate_calculation": _having_aggregate_calculation,
    "subquery_single": _subquery_single,
    "subquery_multiple": _subquery_multiple,
    "subquery_nested": _subquery_nested,
}


class ProceduralTaskGenerator:
    """Problems for any of the 22 skills, drawn from a random.Random."""

    def get_available_skills(self, split: str = "train") -> list[str]:
        return list(SKILLS)

    def generate(self, skill: str, split: str, rng: random.Random) -> DBBenchProblem:
        if skill not in _TEMPLATES:
            raise ValueError(f"no procedural template for skill '{skill}'")
        draw = TableDraw(rng.choice(THEMES), rng)
        question, sql = _TEMPLATES[skill](draw)
        table = TableSpec(
            name=draw.table_name,
            columns=tuple(ColumnSpec(name=draw.name(role), type=column_type)
                          for role, column_type in zip(ROLES, TYPES, strict=True)),
            rows=tuple(row.cells() for row in draw.rows))
        modification = skill in MODIFICATION_SKILLS
        return DBBenchProblem(
            question=question, table=table,
            kind=ProblemKind.MODIFICATION if modification else ProblemKind.QUERY,
            skills=(skill,), reference_sql=sql, ordered=skill in ORDERING_SKILLS)
