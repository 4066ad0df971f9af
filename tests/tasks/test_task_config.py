"""A saved config's task parameters, for tools that rebuild a run's task family."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from src.tasks.task_config import task_parameters_from_config


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
