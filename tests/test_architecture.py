"""The structure docs/architecture.md describes, checked from the source without importing
it: files of one job (none over 400 lines), functions a reader takes in at once in the run
kernel and the pipelines (none over 60 lines), and the "files to touch" table naming
files and definitions that exist."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src"
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60
# the run kernel and the three pipelines: the code a reader follows one step through
READ_TOP_TO_BOTTOM = ("run", "online_training", "supervised_training", "offline_training")


def test_no_source_file_is_over_400_lines() -> None:
    long = {str(path.relative_to(ROOT)): lines for path in SOURCE.rglob("*.py")
            if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES}
    assert long == {}


def test_no_function_of_the_run_kernel_or_a_pipeline_is_over_60_lines() -> None:
    long = {}
    for package in READ_TOP_TO_BOTTOM:
        for path in (SOURCE / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                    if lines > MAX_FUNCTION_LINES:
                        long[f"{path.relative_to(ROOT)}:{node.name}"] = lines
    assert long == {}


def _files_to_touch() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    return text[text.index("## Adding things"):]


def _defines(module: Path, name: str) -> bool:
    """Whether the module file binds `name` at its top level (a class, function,
    assignment or import)."""
    for node in ast.parse(module.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
            return True
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(isinstance(target, ast.Name) and target.id == name for target in targets):
            return True
        if isinstance(node, ast.ImportFrom) and any(
                (alias.asname or alias.name) == name for alias in node.names):
            return True
    return False


def test_the_files_to_touch_name_files_and_definitions_that_exist() -> None:
    table = _files_to_touch()
    paths = {match for match in re.findall(r"`((?:src|tests|configs)/[^`<>*]+?)`", table)}
    missing = sorted(path for path in paths if not (ROOT / path.split(":")[0]).exists())
    dotted = set(re.findall(r"`(src(?:\.\w+)+)`", table))
    for name in sorted(dotted):
        parts = name.split(".")
        module = next((ROOT.joinpath(*parts[:cut]).with_suffix(".py")
                       for cut in range(len(parts), 1, -1)
                       if ROOT.joinpath(*parts[:cut]).with_suffix(".py").is_file()), None)
        package = ROOT.joinpath(*parts)
        if package.is_dir() or (module is not None and (
                module.with_suffix("") == ROOT.joinpath(*parts)
                or _defines(module, parts[len(module.relative_to(ROOT).with_suffix("").parts)]))):
            continue
        missing.append(name)
    assert paths and dotted
    assert missing == []
