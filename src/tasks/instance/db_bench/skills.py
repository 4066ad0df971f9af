"""The 22 SQL skills of LifelongAgentBench's DB-bench, and which task lists count as single-skill."""

from __future__ import annotations

from collections.abc import Sequence

SKILLS: tuple[str, ...] = (
    "select",
    "insert",
    "delete",
    "update",
    "where_single_condition",
    "where_multiple_conditions",
    "where_nested_conditions",
    "order_by_single_column",
    "order_by_multiple_columns_same_direction",
    "order_by_multiple_columns_different_directions",
    "limit_only",
    "limit_and_offset",
    "column_alias",
    "table_alias",
    "group_by_single_column",
    "group_by_multiple_columns",
    "having_single_condition_with_aggregate",
    "having_multiple_conditions_with_aggregate",
    "having_aggregate_calculation",
    "subquery_single",
    "subquery_multiple",
    "subquery_nested",
)
MODIFICATION_SKILLS = frozenset({"insert", "delete", "update"})
ORDERING_SKILLS = frozenset(skill for skill in SKILLS if skill.startswith("order_by"))


def check_skills(skills: Sequence[str], where: str) -> None:
    unknown = [skill for skill in skills if skill not in SKILLS]
    if unknown:
        raise ValueError(f"{where}: unknown skills {unknown}; known: {', '.join(SKILLS)}")


def single_skill_of(skill_list: Sequence[str]) -> str | None:
    """The one skill a task exercises besides plain `select`, or None for a multi-skill task.

    A task whose only skill is `select` is the single-skill task of `select`.
    """
    others = sorted(set(skill_list) - {"select"})
    if len(others) == 1:
        return others[0]
    if not others and "select" in skill_list:
        return "select"
    return None
