"""Write a `skill_to_tasks` file in LifelongAgentBench's entry format, for the seed's
example assignment (`configs/assignments/rl_training_example.yaml`) to read.

LifelongAgentBench's own file comes from its dataset, which cannot be downloaded here;
this one holds the project's procedural DB-bench problems written as its entries
(`{skill: [{instruction, answer_info{md5, direct, sql}, table_info{name,
column_info_list, row_list}, skill_list}, ...]}`), so the seed's loader reads it as it
would read theirs. Queries carry no `direct` answer: the reference SQL gives it.

    python examples/lifelong_agent_bench/make_single_skill_tasks.py [--per_skill 5]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from src.tasks.instance.db_bench.problem import DBBenchProblem
from src.tasks.instance.db_bench.procedural_generator import ProceduralTaskGenerator

DEFAULT_PATH = Path(__file__).parent / "single_skill_tasks.json"


def as_entry(problem: DBBenchProblem) -> dict:
    return {
        "instruction": problem.question,
        "answer_info": {"md5": None, "direct": None, "sql": problem.reference_sql},
        "table_info": {"name": problem.table.name,
                       "column_info_list": [column.model_dump() for column in
                                            problem.table.columns],
                       "row_list": [list(row) for row in problem.table.rows]},
        "skill_list": list(problem.skills),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per_skill", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=DEFAULT_PATH)
    arguments = parser.parse_args()
    generator = ProceduralTaskGenerator()
    rng = random.Random(arguments.seed)
    skill_to_tasks = {
        skill: [as_entry(generator.generate(skill, "train", rng))
                for _ in range(arguments.per_skill)]
        for skill in generator.get_available_skills()}
    arguments.output.write_text(json.dumps(skill_to_tasks, indent=1) + "\n")
    print(f"{arguments.output}: {len(skill_to_tasks)} skills x {arguments.per_skill} tasks")


if __name__ == "__main__":
    main()
