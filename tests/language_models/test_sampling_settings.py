"""Sampling settings out of range are refused: in a config before anything runs (exit 2,
the key named), and by SamplingParams itself as the last guard."""

from __future__ import annotations

from pathlib import Path

import pytest

from src.language_models.language_model import SamplingParams
from src.run_experiment import main
from tests.conftest import PROJECT_ROOT


@pytest.mark.parametrize("settings", [{"temperature": -0.5}, {"top_p": 0.0}, {"top_p": -1.0},
                                      {"top_p": 1.5}, {"max_new_tokens": 0},
                                      {"temperature": float("nan")}])
def test_sampling_params_refuse_values_out_of_range(settings: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        SamplingParams(**settings)


@pytest.mark.parametrize(("key", "value"), [("temperature", "-1.0"), ("top_p", "0.0"),
                                            ("max_new_tokens", "0")])
def test_a_config_with_one_is_a_config_error(tmp_path: Path, key: str, value: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"import: {PROJECT_ROOT / 'configs/assignments/math_grpo_quickstart.yaml'}\n"
                      f"assignment_config:\n  agent: {{parameters: {{{key}: {value}}}}}\n")
    assert main(["--config_path", str(config), "--dry_run"]) == 2
    assert f"assignment_config.agent.parameters.{key}" in capsys.readouterr().err
