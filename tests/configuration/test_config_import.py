"""A config written as another with a few keys changed (`import:`): what merges, what
replaces, and where errors point."""

from __future__ import annotations

from pathlib import Path

import pytest

from src.configuration.errors import ConfigError
from src.configuration.yaml_source import YamlSource
from src.online_training.plan import load_online_config, plan_online_training
from tests.configuration.test_config_errors import VALID
from tests.conftest import PROJECT_ROOT

BASE = VALID.replace("num_validation: 2}}", "num_validation: 2, levels: [1, 2]}}")


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_mappings_merge_and_other_values_replace(tmp_path: Path) -> None:
    write(tmp_path, "base.yaml", BASE.format(output=tmp_path / "base"))
    child = write(tmp_path, "child.yaml", (
        "import: base.yaml\n"
        "assignment_config:\n"
        "  rollout: {group_size: 4}\n"
        "  task: {parameters: {levels: [3]}}\n"))
    data = YamlSource(child).data
    assert "import" not in data
    config = data["assignment_config"]
    assert config["rollout"] == {"batch_size": 2, "group_size": 4}
    assert config["task"]["parameters"] == {"num_train": 4, "num_validation": 2, "levels": [3]}
    assert config["agent"] == {"name": "oracle_agent"}
    plan = plan_online_training(*load_online_config(child))
    assert plan.task.parameters["levels"] == [3]


def test_later_imports_and_own_keys_win(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", "x: {p: 1, q: 1, r: 1}\n")
    write(tmp_path, "sub/b.yaml", "x: {q: 2, r: 2}\n")
    child = write(tmp_path, "child.yaml", "import: [a.yaml, sub/b.yaml]\nx: {r: 3}\n")
    assert YamlSource(child).data == {"x": {"p": 1, "q": 2, "r": 3}}


def test_imports_are_relative_to_the_importing_file(tmp_path: Path) -> None:
    write(tmp_path, "configs/base.yaml", "x: 1\ny: 1\n")
    write(tmp_path, "configs/variants/middle.yaml", "import: ../base.yaml\ny: 2\n")
    child = write(tmp_path, "elsewhere/child.yaml", "import: ../configs/variants/middle.yaml\n")
    assert YamlSource(child).data == {"x": 1, "y": 2}


def test_an_error_in_an_imported_key_names_the_imported_file_and_line(tmp_path: Path) -> None:
    base = write(tmp_path, "base.yaml",
                 BASE.format(output=tmp_path).replace("num_train: 4", "num_train: lots"))
    child = write(tmp_path, "child.yaml", "import: base.yaml\n"
                                          "assignment_config: {rollout: {group_size: 4}}\n")
    with pytest.raises(ConfigError) as error:
        plan_online_training(*load_online_config(child))
    assert error.value.file == str(base) and error.value.line == 6
    assert "task.parameters.num_train" in str(error.value)


def test_an_error_in_an_own_key_names_the_importing_file(tmp_path: Path) -> None:
    write(tmp_path, "base.yaml", BASE.format(output=tmp_path))
    child = write(tmp_path, "child.yaml", "import: base.yaml\nassignment_config:\n"
                                          "  rollout: {group_size: many}\n")
    with pytest.raises(ConfigError) as error:
        plan_online_training(*load_online_config(child))
    assert (error.value.file, error.value.line) == (str(child), 3)
    assert "rollout.group_size" in str(error.value)


@pytest.mark.parametrize(("files", "problem", "place"), [
    ({"loop_a.yaml": "import: loop_b.yaml\n", "loop_b.yaml": "import: loop_a.yaml\n"},
     "import cycle", "loop_b.yaml:1"),
    ({"loop_a.yaml": "x: 1\nimport: [loop_a.yaml]\n"}, "import cycle", "loop_a.yaml:2"),
    ({"loop_a.yaml": "import: [absent.yaml]\n"}, "imported config file not found", "loop_a.yaml:1"),
    ({"loop_a.yaml": "import: list.yaml\n", "list.yaml": "- 1\n- 2\n"},
     "does not hold a mapping", "loop_a.yaml:1"),
    ({"loop_a.yaml": "import: 5\n"}, "an import names a file", "loop_a.yaml:1"),
    ({"loop_a.yaml": "import:\n  - ok.yaml\n  - {x: 1}\n", "ok.yaml": "x: 1\n"},
     "an import names a file", "loop_a.yaml:3"),
])
def test_bad_imports_are_config_errors_at_the_import_line(
        tmp_path: Path, files: dict[str, str], problem: str, place: str) -> None:
    for name, text in files.items():
        write(tmp_path, name, text)
    with pytest.raises(ConfigError) as error:
        YamlSource(tmp_path / "loop_a.yaml")
    assert problem in str(error.value)
    assert f"{tmp_path / place}" in str(error.value)


def test_a_mapping_tagged_replace_takes_the_imported_ones_place(tmp_path: Path) -> None:
    """The base's task parameters (levels, num_train) do not leak into the new task."""
    write(tmp_path, "base.yaml", BASE.format(output=tmp_path / "base"))
    child = write(tmp_path, "child.yaml", (
        "import: base.yaml\n"
        "assignment_config:\n"
        "  rollout: {group_size: 4}\n"
        "  task: !replace\n"
        "    name: math_problems\n"
        "    parameters: {num_validation: 3}\n"))
    config = YamlSource(child).data["assignment_config"]
    assert config["task"] == {"name": "math_problems", "parameters": {"num_validation": 3}}
    assert type(config["task"]) is dict  # the mark is gone once merged
    assert config["rollout"] == {"batch_size": 2, "group_size": 4}  # untagged: merged
    plan = plan_online_training(*load_online_config(child))
    parameters = plan.task.parameters
    splits = parameters["splits"]
    assert (splits.num_validation, splits.num_train, parameters["levels"]) == (
        3, 256, None)  # the task's defaults, not the base's 4 and [1, 2]


def test_replace_acts_in_the_file_that_writes_it(tmp_path: Path) -> None:
    """A middle file's replaced mapping is what a file importing it merges into; where
    nothing is imported under the key, a tagged mapping is an ordinary one."""
    write(tmp_path, "base.yaml", "x: {p: 1, q: {r: 1, s: 1}}\ny: {a: 1}\n")
    middle = write(tmp_path, "middle.yaml", (
        "import: base.yaml\nx: {q: !replace {r: 2}}\nz: !replace {b: 1}\n"))
    child = write(tmp_path, "child.yaml", "import: middle.yaml\nx: {q: {t: 3}}\n")
    assert YamlSource(middle).data == {"x": {"p": 1, "q": {"r": 2}}, "y": {"a": 1},
                                       "z": {"b": 1}}
    assert YamlSource(child).data == {"x": {"p": 1, "q": {"r": 2, "t": 3}}, "y": {"a": 1},
                                      "z": {"b": 1}}
    alone = write(tmp_path, "alone.yaml", "x: !replace {p: 1}\n")
    assert YamlSource(alone).data == {"x": {"p": 1}}


def test_an_error_inside_a_replaced_mapping_names_its_line(tmp_path: Path) -> None:
    write(tmp_path, "base.yaml", BASE.format(output=tmp_path))
    child = write(tmp_path, "child.yaml", (
        "import: base.yaml\n"
        "assignment_config:\n"
        "  task: !replace\n"
        "    name: math_problems\n"
        "    parameters:\n"
        "      num_validation: 2\n"
        "      num_train: lots\n"))
    with pytest.raises(ConfigError) as error:
        plan_online_training(*load_online_config(child))
    assert (error.value.file, error.value.line) == (str(child), 7)
    assert "task.parameters.num_train" in str(error.value)


@pytest.mark.parametrize(("text", "line"), [
    ("import: base.yaml\nx: !replace [1, 2]\n", 2),
    ("import: base.yaml\nx:\n  p: !replace 5\n", 3),
    ("import: base.yaml\nx: !replace\ny: 1\n", 2),
])
def test_replace_on_anything_but_a_mapping_is_a_config_error_at_its_line(
        tmp_path: Path, text: str, line: int) -> None:
    write(tmp_path, "base.yaml", "x: {p: 1}\n")
    child = write(tmp_path, "child.yaml", text)
    with pytest.raises(ConfigError, match="!replace marks a mapping") as error:
        YamlSource(child)
    assert (error.value.file, error.value.line) == (str(child), line)
    assert f"{child}:{line}: " in str(error.value)


def test_replace_on_the_whole_file_is_a_config_error(tmp_path: Path) -> None:
    write(tmp_path, "base.yaml", "x: {p: 1}\n")
    child = write(tmp_path, "child.yaml", "--- !replace\nimport: base.yaml\nx: {q: 1}\n")
    with pytest.raises(ConfigError, match="top level always merges") as error:
        YamlSource(child)
    assert (error.value.file, error.value.line) == (str(child), 1)


def test_a_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("x: caf\u00e9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1\.yaml: not UTF-8 text"):
        YamlSource(path)


def test_a_recipe_imported_with_two_keys_changed_is_the_recipe_but_those(tmp_path: Path) -> None:
    recipe = PROJECT_ROOT / "configs" / "assignments" / "db_bench_grpo.yaml"
    variant_file = tmp_path / "longer.yaml"
    variant_file.write_text(f"import: {recipe}\nassignment_config:\n"
                            "  output_dir: outputs/longer\n  rollout: {max_batches: 80}\n")
    base = YamlSource(recipe).data
    base["assignment_config"]["output_dir"] = "outputs/longer"
    base["assignment_config"]["rollout"]["max_batches"] = 80
    assert YamlSource(variant_file).data == base
