"""Single-skill problems from LifelongAgentBench data, grouped by the one skill they exercise.

Built from a prepared `skill_to_tasks` JSON file (`{skill: [entry, ...]}`, entries in the
entry_dict.json format) or filtered from an entry_dict.json by `load_from_existing_data`.
A task is single-skill when it has exactly one skill besides plain `select` (or `select`
alone). Every fifth task of a skill is held out for validation; a skill with fewer than
five tasks has none there. The procedural counterpart is `ProceduralTaskGenerator`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import ValidationError

from src.tasks.instance.db_bench.data_loaders import lifelong_problem, load_lifelong_entry_dict
from src.tasks.instance.db_bench.problem import DBBenchProblem
from src.tasks.instance.db_bench.skills import check_skills, single_skill_of

VALIDATION_EVERY = 5


def _read_skill_to_tasks(path: Path) -> dict[str, list[DBBenchProblem]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON: {error}") from error
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        raise ValueError(f"{path}: expected an object mapping each skill to a list of entries")
    grouped: dict[str, list[DBBenchProblem]] = {}
    for skill, entries in data.items():
        for index, entry in enumerate(entries):
            try:
                grouped.setdefault(skill, []).append(lifelong_problem(entry))
            except (KeyError, TypeError, IndexError, AttributeError, ValueError,
                    ValidationError) as error:
                raise ValueError(f"{path}: skill '{skill}', task {index}: not a "
                                 f"LifelongAgentBench entry: {error}") from error
    return grouped


class SingleSkillTaskGenerator:
    def __init__(self, skill_to_tasks_path: str | None = None,
                 skill_to_tasks: Mapping[str, Sequence[DBBenchProblem]] | None = None) -> None:
        if skill_to_tasks_path is not None and skill_to_tasks is not None:
            raise ValueError("give skill_to_tasks_path or skill_to_tasks, not both")
        if skill_to_tasks_path is not None:
            skill_to_tasks = _read_skill_to_tasks(Path(skill_to_tasks_path))
        self._tasks = {skill: tuple(problem.model_copy(update={"skills": (skill,)})
                                    for problem in problems)
                       for skill, problems in (skill_to_tasks or {}).items() if problems}
        check_skills(list(self._tasks), skill_to_tasks_path or "skill_to_tasks")

    @classmethod
    def load_from_existing_data(cls, data_file_path: str) -> SingleSkillTaskGenerator:
        """The single-skill tasks of a LifelongAgentBench entry_dict.json."""
        grouped: dict[str, list[DBBenchProblem]] = {}
        for sample in load_lifelong_entry_dict(data_file_path):
            problem = DBBenchProblem.model_validate(sample.data)
            skill = single_skill_of(problem.skills)
            if skill is not None:
                grouped.setdefault(skill, []).append(problem)
        return cls(skill_to_tasks=grouped)

    def _pool(self, skill: str, split: str) -> tuple[DBBenchProblem, ...]:
        tasks = self._tasks.get(skill, ())
        held_out = split == "validation"
        return tuple(task for index, task in enumerate(tasks)
                     if (index % VALIDATION_EVERY == VALIDATION_EVERY - 1) == held_out)

    def get_available_skills(self, split: str = "train") -> list[str]:
        return sorted(skill for skill in self._tasks if self._pool(skill, split))

    def task_count(self, skill: str, split: str = "train") -> int:
        return len(self._pool(skill, split))

    def generate(self, skill: str, split: str, rng: random.Random) -> DBBenchProblem:
        pool = self._pool(skill, split)
        if not pool:
            raise ValueError(f"no {split} tasks for skill '{skill}'; skills with {split} tasks: "
                             f"{self.get_available_skills(split)}")
        return rng.choice(pool)
