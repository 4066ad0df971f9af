"""A saved config's task parameters, for tools that rebuild a run's task family."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from experiments.task_config import task_parameters_from_config
from tests.conftest import PROJECT_ROOT


def test_task_parameters_come_from_the_one_task_section(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"assignment_config": {
        "output_dir": "x", "task": {"name": "db_bench_single_skill",
                                    "parameters": {"num_train": 3}}}}))
    assert task_parameters_from_config(config, "db_bench_single_skill") == {"num_train": 3}


def test_another_task_is_named_in_the_error(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"assignment_config": {
        "output_dir": "x", "task": {"name": "math_problems"}}}))
    with pytest.raises(ValueError, match=r"config\.yaml: expected one config section whose "
                                         r"task is db_bench_single_skill"):
        task_parameters_from_config(config, "db_bench_single_skill")


def test_an_importing_config_gives_its_base_task_parameters(tmp_path: Path) -> None:
    recipe = PROJECT_ROOT / "configs" / "assignments" / "db_bench_grpo.yaml"
    base = task_parameters_from_config(recipe, "db_bench_single_skill")
    assert base["num_validation"] == 176
    longer = tmp_path / "longer.yaml"
    longer.write_text(f"import: {recipe}\nassignment_config:\n  rollout: {{max_batches: 80}}\n")
    assert task_parameters_from_config(longer, "db_bench_single_skill") == base


def test_a_file_without_a_mapping_is_named_in_the_error(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match=r"config\.yaml: expected one config section"):
        task_parameters_from_config(config, "db_bench_single_skill")
