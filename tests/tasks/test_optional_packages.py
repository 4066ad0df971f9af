"""A config naming an adapter whose package is not installed stops with exit 2 and the pip
command that installs it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from src.configuration.components import COMPONENTS
from src.run_experiment import main
from src.tasks.optional_packages import import_optional
from tests.conftest import PROJECT_ROOT

ADAPTERS = [("reasoning_gym", "reasoning_gym_grpo.yaml", "reasoning_gym"),
            ("textarena", "textarena_guess_the_number.yaml", "textarena")]


@pytest.mark.parametrize(("package", "recipe", "extra"), ADAPTERS)
def test_a_recipe_without_its_package_names_the_pip_command(
        package: str, recipe: str, extra: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest) -> None:
    # the adapter as a fresh process finds it: not imported, not registered yet
    adapter = COMPONENTS.get(package)
    COMPONENTS.unregister(package)
    request.addfinalizer(lambda: COMPONENTS.register(package)(adapter))
    monkeypatch.delitem(sys.modules, f"src.tasks.adapters.{package}.task", raising=False)
    monkeypatch.setitem(sys.modules, package, None)  # import fails as if not installed
    config = PROJECT_ROOT / "configs" / "assignments" / recipe
    assert main(["--config_path", str(config), "--dry_run"]) == 2
    error = capsys.readouterr().err
    assert f"pip install -e '.[{extra}]'" in error and recipe in error


def test_a_package_missing_a_dependency_of_its_own_is_not_called_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "half_installed.py").write_text("import no_such_dependency_anywhere\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="no_such_dependency_anywhere") as error:
        import_optional("half_installed", "some_extra")
    assert "pip install" not in str(error.value)
