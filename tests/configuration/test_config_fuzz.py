"""Fuzzing the config loader: random YAML and random changes to every shipped assignment
give a valid plan or a named config error (exit status 2), never a traceback."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from src.configuration.yaml_source import YamlSource
from src.run_experiment import main
from tests.conftest import PROJECT_ROOT

SHIPPED = sorted((PROJECT_ROOT / "configs" / "assignments").glob("*.yaml"))
SCALARS = (st.none() | st.booleans() | st.integers(-10**12, 10**12)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=40))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=8)


def dry_run(text: str, folder: Path) -> int:
    """The exit status of `run_experiment.py --dry_run` on `text`; raises on a crash."""
    path = folder / "fuzzed.yaml"
    path.write_text(text, encoding="utf-8")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(["--config_path", str(path), "--dry_run"])


def key_paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    paths = [path]
    if isinstance(node, dict):
        for key, value in node.items():
            paths += key_paths(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            paths += key_paths(value, (*path, index))
    return paths


@st.composite
def changed_assignment(draw: st.DrawFn) -> str:
    """A shipped assignment (its imports resolved) with one value replaced, one key removed
    or one key added."""
    document = YamlSource(draw(st.sampled_from(SHIPPED))).data
    path = draw(st.sampled_from(key_paths(document)[1:]))
    parent = document
    for part in path[:-1]:
        parent = parent[part]
    change = draw(st.sampled_from(["replace", "remove", "add"]))
    if change == "replace":
        parent[path[-1]] = draw(VALUES)
    elif change == "remove":
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[draw(st.text(min_size=1, max_size=12))] = draw(VALUES)
    else:
        parent.append(draw(VALUES))
    return yaml.safe_dump(document, allow_unicode=True)


@given(text=changed_assignment())
def test_fuzz_changed_shipped_assignments_give_a_plan_or_a_config_error(
        text: str, tmp_path_factory: Any) -> None:
    assert dry_run(text, tmp_path_factory.mktemp("config")) in (0, 2)


@given(text=st.text(max_size=300) | VALUES.map(yaml.safe_dump))
def test_fuzz_random_yaml_gives_a_config_error(text: str, tmp_path_factory: Any) -> None:
    assert dry_run(text, tmp_path_factory.mktemp("config")) in (0, 2)
