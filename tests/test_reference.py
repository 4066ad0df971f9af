"""docs/reference.md is what scripts/generate_reference.py makes of the code now."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.conftest import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "scripts" / "generate_reference.py"


def load_generator():
    spec = importlib.util.spec_from_file_location("generate_reference", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_reference_is_up_to_date() -> None:
    generator = load_generator()
    assert generator.REFERENCE.read_text(encoding="utf-8") == generator.render(), (
        "docs/reference.md is stale: run python3 scripts/generate_reference.py")


def test_a_new_setting_makes_the_reference_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import create_model

    from src.online_training.config import RolloutConfig

    generator = load_generator()
    before = generator.render()
    grown = create_model("RolloutConfig", __base__=RolloutConfig, new_setting=(int, 3))
    monkeypatch.setattr(RolloutConfig, "model_fields",
                        {**RolloutConfig.model_fields, **{"new_setting":
                                                          grown.model_fields["new_setting"]}})
    after = generator.render()
    assert after != before and "| `new_setting` | int | `3` |" in after


def test_check_mode_exits_1_on_a_stale_file(tmp_path) -> None:
    generator = load_generator()
    stale = tmp_path / "reference.md"
    stale.write_text(generator.render() + "\nan edit by hand\n", encoding="utf-8")
    code = ("import runpy, sys, pathlib; sys.argv = ['generate_reference.py', '--check']; "
            f"g = runpy.run_path({str(SCRIPT)!r}, run_name='reference'); "
            f"g['REFERENCE'] = pathlib.Path({str(stale)!r}); "
            "g['main'].__globals__['REFERENCE'] = g['REFERENCE']; "
            "sys.exit(g['main'](['--check']))")
    result = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 1, result.stderr
    assert "is stale" in result.stderr
