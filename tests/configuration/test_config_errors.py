from __future__ import annotations

from pathlib import Path

import pytest

from src.configuration.errors import ConfigError
from src.configuration.yaml_source import YamlSource
from src.online_training.plan import load_online_config, plan_online_training

VALID = """\
assignment_config:
  output_dir: {output}
  rollout: {{batch_size: 2, group_size: 1}}
  task:
    name: math_problems
    parameters: {{num_train: 4, num_validation: 2}}
  agent:
    name: oracle_agent
  callback_dict: {{}}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "assignment.yaml"
    path.write_text(text)
    return path


def plan(path: Path):
    config, source = load_online_config(path)
    return plan_online_training(config, source)


def test_valid_assignment_plans(tmp_path: Path) -> None:
    result = plan(write(tmp_path, VALID.format(output=tmp_path / "out")))
    assert result.task.cls.__name__ == "MathProblemsTask"
    assert result.task.parameters["splits"].num_train == 4


def test_unknown_key_names_path_file_and_line(tmp_path: Path) -> None:
    text = VALID.format(output=tmp_path).replace("  rollout:", "  rollot: 3\n  rollout:")
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as error:
        plan(path)
    message = str(error.value)
    assert "assignment_config.rollot" in message and "Extra inputs" in message
    assert f"{path}:3" in message


def test_wrong_type_names_the_key(tmp_path: Path) -> None:
    text = VALID.format(output=tmp_path).replace("batch_size: 2", "batch_size: many")
    with pytest.raises(ConfigError, match=r"rollout\.batch_size"):
        plan(write(tmp_path, text))


def test_unknown_component_parameter_is_rejected(tmp_path: Path) -> None:
    text = VALID.format(output=tmp_path).replace("num_train: 4", "num_trian: 4")
    with pytest.raises(ConfigError, match=r"task\.parameters\.num_trian.*Extra inputs"):
        plan(write(tmp_path, text))


def test_wrong_parameter_type_is_rejected(tmp_path: Path) -> None:
    text = VALID.format(output=tmp_path).replace("num_train: 4", "num_train: lots")
    with pytest.raises(ConfigError, match=r"task\.parameters\.num_train"):
        plan(write(tmp_path, text))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        plan(tmp_path / "absent.yaml")


def test_bad_component_path(tmp_path: Path) -> None:
    text = VALID.format(output=tmp_path).replace(
        "    name: oracle_agent", "    name: oracle_agent\n    module: src.agents.nowhere.Agent")
    with pytest.raises(ConfigError, match=r"agent\.module.*cannot import 'src\.agents\.nowhere"):
        plan(write(tmp_path, text))


def test_component_of_the_wrong_kind(tmp_path: Path) -> None:
    text = VALID.format(output=tmp_path).replace(
        "    name: oracle_agent",
        "    name: oracle_agent\n    module: src.tasks.instance.math_problems.task.MathProblemsTask")
    with pytest.raises(ConfigError, match="is not a subclass of Agent"):
        plan(write(tmp_path, text))


def test_unregistered_name_without_module(tmp_path: Path) -> None:
    text = VALID.format(output=tmp_path).replace("name: oracle_agent", "name: orcale_agent")
    with pytest.raises(ConfigError, match="'orcale_agent' is not a registered component"):
        plan(write(tmp_path, text))


def test_language_model_reference_must_exist(tmp_path: Path) -> None:
    text = VALID.format(output=tmp_path).replace(
        "    name: oracle_agent", "    name: lora_rl_agent\n    parameters: {language_model: nope}")
    with pytest.raises(ConfigError, match="names language model 'nope'"):
        plan(write(tmp_path, text))


def test_scientific_notation_is_a_number(tmp_path: Path) -> None:
    from src.configuration.yaml_source import load_yaml_text

    assert load_yaml_text("a: 1e-5\nb: 2E3\nc: 1.5") == {"a": 1e-5, "b": 2000.0, "c": 1.5}


def test_invalid_yaml_reports_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"assignment\.yaml:2: invalid YAML"):
        plan(write(tmp_path, "assignment_config:\n  task: a: b\n"))


def test_every_shipped_assignment_is_valid(capsys: pytest.CaptureFixture[str]) -> None:
    from src.run_experiment import main

    root = Path(__file__).resolve().parents[2]
    files = sorted((root / "configs" / "assignments").glob("*.yaml"))
    assert files
    # the studies' configs too: the results record cites them as commands to run
    files += sorted((root / "experiments").glob("*/configs/*.yaml"))
    for path in files:  # assignments, supervised and offline training configs alike
        assert main(["--config_path", str(path), "--dry_run"]) == 0, capsys.readouterr().err
        assert "dry run: the" in capsys.readouterr().out


@pytest.mark.parametrize(("text", "problem"), [
    ("._", "must hold a mapping"),  # a string now, no longer a float that fails
    ("assignment_config: {output_dir: 2001-02-30}", "invalid YAML value: day is out of range"),
])
def test_scalars_that_resolve_badly_are_config_errors(tmp_path: Path, text: str,
                                                      problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        plan(write(tmp_path, text))


def test_a_key_written_twice_is_refused_with_both_lines(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"assignment\.yaml:4: key 'random_seed' is "
                                          r"written twice in one mapping \(first at line 3\)"):
        plan(write(tmp_path, "assignment_config:\n  output_dir: x\n  random_seed: 1\n"
                             "  random_seed: 2\n"))


def test_aliases_that_multiply_are_refused_before_they_are_expanded(tmp_path: Path) -> None:
    # six levels of ten: a 300-byte file standing for a million values
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 10)}]"
              for level in range(1, 6)]
    with pytest.raises(ConfigError, match="more than 100,000 values"):
        plan(write(tmp_path, "\n".join(lines) + "\n"))
    # an alias or two, as a recipe uses them, is fine
    assert YamlSource(write(tmp_path, "a: &m {x: 1}\nb: *m\nc: *m\n")).data["c"] == {"x": 1}


@pytest.mark.parametrize(("old", "new", "problem"), [
    ("batch_size: 2", "batch_size: true", "is a number, not true"),
    ("group_size: 1", "group_size: 1.5", "group_size"),
    ("num_train: 4", "num_train: 4, max_round: -3",
     "max_round: Input should be greater than or equal to 1"),
])
def test_numbers_are_strict_and_task_limits_checked_before_anything_runs(
        tmp_path: Path, old: str, new: str, problem: str) -> None:
    text = VALID.format(output=tmp_path / "run").replace(old, new)
    with pytest.raises(ConfigError, match=problem):
        plan(write(tmp_path, text))


@pytest.mark.parametrize("text", [
    "a: " + "[" * 900 + "]" * 900 + "\n",  # written nested, flow style
    "".join("  " * level + f"k{level}:\n" for level in range(900)) + "  " * 900 + "x: 1\n",
    # shallow as written, 1,000 levels deep once each alias stands for what it names
    "a0: &a0 " + "[" * 90 + "1" + "]" * 90 + "\n" + "".join(
        f"a{level}: &a{level} " + "[" * 90 + f"*a{level - 1}" + "]" * 90 + "\n"
        for level in range(1, 12)),
], ids=["flow", "block", "aliases"])
def test_nesting_past_the_depth_limit_is_a_config_error_naming_the_file(
        tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> None:
    from src.run_experiment import main

    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=rf"{path}.*nested deeper than 64 levels"):
        YamlSource(path)
    assert main(["--config_path", str(path), "--dry_run"]) == 2
    assert f"config error: {path}" in capsys.readouterr().err


def test_a_config_file_past_the_size_cap_is_refused_unread(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from src.configuration.yaml_source import MAX_FILE_BYTES
    from src.run_experiment import main

    path = write(tmp_path, "assignment_config:\n  output_dir: x\n")
    with path.open("a") as stream:  # a comment, so that only the size is wrong
        stream.write("#" + "x" * MAX_FILE_BYTES + "\n")
    with pytest.raises(ConfigError, match=rf"{path}: .*more than 4 MiB, the cap on a config file: refused"):
        YamlSource(path)
    assert main(["--config_path", str(path), "--dry_run"]) == 2
    assert "more than 4 MiB" in capsys.readouterr().err


def test_an_alias_inside_the_value_it_names_is_a_config_error_at_its_line(
        tmp_path: Path) -> None:
    path = write(tmp_path, "assignment_config:\n  output_dir: x\n  a: &a {b: [*a]}\n")
    with pytest.raises(ConfigError, match=rf"{path}:3: an alias inside the value it names"):
        YamlSource(path)
