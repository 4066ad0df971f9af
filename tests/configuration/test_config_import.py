"""A config written as another with a few keys changed (`import:`): what merges, what
replaces, and where errors point."""

from __future__ import annotations

from pathlib import Path

import pytest

from src.configuration.errors import ConfigError
from src.configuration.yaml_source import YamlSource
from src.experiment.assembly import load_experiment_config, plan_experiment
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
    plan = plan_experiment(*load_experiment_config(child))
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
        plan_experiment(*load_experiment_config(child))
    assert error.value.file == str(base) and error.value.line == 6
    assert "task.parameters.num_train" in str(error.value)


def test_an_error_in_an_own_key_names_the_importing_file(tmp_path: Path) -> None:
    write(tmp_path, "base.yaml", BASE.format(output=tmp_path))
    child = write(tmp_path, "child.yaml", "import: base.yaml\nassignment_config:\n"
                                          "  rollout: {group_size: many}\n")
    with pytest.raises(ConfigError) as error:
        plan_experiment(*load_experiment_config(child))
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


def test_a_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("x: caf\u00e9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1\.yaml: not UTF-8 text"):
        YamlSource(path)


def test_the_shipped_40_batch_config_is_its_base_with_two_keys_changed() -> None:
    folder = PROJECT_ROOT / "configs" / "assignments"
    base = YamlSource(folder / "db_bench_rl_from_300_chats.yaml").data
    variant = YamlSource(folder / "db_bench_rl_from_300_chats_40_batches.yaml").data
    base["assignment_config"]["output_dir"] = "outputs/db_bench_rl_from_300_chats_40_batches"
    base["assignment_config"]["rollout"]["max_batches"] = 40
    assert variant == base
