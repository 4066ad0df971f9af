"""The registry: names registered where things are defined, found in the source without
importing every component, and config values checked against what is registered."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, ValidationError

from src.configuration import components, registry
from src.configuration.components import COMPONENTS
from src.configuration.registry import (
    SOURCE_ROOT,
    RegisteredName,
    Registry,
    UnknownName,
    registrations_in_source,
)
from tests.test_import_layers import LAYERS

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# every short name the shipped configs, tests and experiments use
SHIPPED = {"math_problems", "math_python_tool", "code_tests", "shell_tasks",
           "db_bench_single_skill", "econ_decision", "single_turn", "reasoning_gym",
           "textarena", "verifiers", "gymnasium_text", "oracle_agent", "lora_rl_agent",
           "openai_client_agent", "experience_replay_agent", "huggingface_lora",
           "rollout_pool", "vllm", "rl_training"}


def test_a_name_is_what_its_decorator_registered() -> None:
    shapes: Registry[type] = Registry("shape")

    @shapes.register("square")
    class Square:
        pass

    @shapes.register("circle")
    class Circle:
        pass

    assert shapes["square"] is Square
    assert shapes.get("triangle") is None
    assert shapes.names() == ("square", "circle")  # in the order they were registered
    assert "circle" in shapes and "triangle" not in shapes and 3 not in shapes
    with pytest.raises(UnknownName, match=r"'triangle' is not a registered shape "
                                          r"\(registered: square, circle\)"):
        shapes["triangle"]
    shapes.register("square")(Square)  # the same class again: one registration
    with pytest.raises(ValueError, match="shape 'square' is registered twice"):
        shapes.register("square")(Circle)
    shapes.unregister("circle")
    assert shapes.names() == ("square",)


def test_a_registered_name_setting_reads_as_the_literal_of_the_names() -> None:
    shapes: Registry[type] = Registry("shape")
    shapes.register("square")(int)
    shapes.register("circle")(float)

    class Registered(BaseModel):
        shape: Annotated[str, RegisteredName(shapes)] = "square"

    class Spelled(BaseModel):
        shape: Literal["square", "circle"] = "square"

    assert Registered.model_json_schema() == {**Spelled.model_json_schema(),
                                              "title": "Registered"}
    for wrong in ("triangle", 3, None):
        with pytest.raises(ValidationError) as registered:
            Registered(shape=wrong)
        with pytest.raises(ValidationError) as spelled:
            Spelled(shape=wrong)
        assert (registered.value.errors(include_url=False)
                == spelled.value.errors(include_url=False))
    assert Registered(shape="circle").shape == "circle"
    shapes.register("triangle")(complex)  # a name registered later is accepted from then on
    assert Registered(shape="triangle").shape == "triangle"
    assert Registered.model_json_schema()["properties"]["shape"]["enum"] == [
        "square", "circle", "triangle"]


def test_the_index_finds_every_shipped_short_name_in_its_module() -> None:
    index = registrations_in_source("COMPONENTS")
    assert set(index) >= SHIPPED
    assert index["math_problems"] == "src.tasks.instance.math_problems.task"
    assert index["rl_training"] == "src.online_training.trainer"
    assert set(COMPONENTS.names()) >= SHIPPED


def test_every_component_registration_is_a_decorator_the_index_reads() -> None:
    """The index reads `@COMPONENTS.register("<name>")` above a class; a registration
    written any other way (a call, a name computed at run time) would not be found until
    something imported its module."""
    found = []
    for path in sorted(SOURCE_ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        decorators = {id(decorator) for node in ast.walk(tree)
                      for decorator in getattr(node, "decorator_list", ())}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr == "register"
                    and isinstance(node.value, ast.Name) and node.value.id == "COMPONENTS"):
                found.append(path)
                calls = [call for call in ast.walk(tree) if isinstance(call, ast.Call)
                         and call.func is node]
                assert calls and id(calls[0]) in decorators, f"{path}: not a decorator"
    # one name read for each: none is computed at run time
    assert len(found) == len(registrations_in_source("COMPONENTS"))


def test_a_short_name_imports_its_own_module_only() -> None:
    """Resolving a name imports the module that registers it, not every component's."""
    code = ("import sys\n"
            "from src.configuration.components import COMPONENTS\n"
            "assert COMPONENTS['oracle_agent'].__name__ == 'OracleAgent'\n"
            "print(sorted(m for m in sys.modules if m.startswith(('src.tasks.instance', "
            "'src.tasks.adapters', 'src.online_training', 'src.language_models.instance'))))\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, check=True,
                            capture_output=True, text=True)
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("module", [registry, components])
def test_the_bottom_floor_registry_names_no_module_above_it(module) -> None:
    """The registry and COMPONENTS sit on the bottom floor: neither imports nor names a
    module of a higher floor (the components register themselves)."""
    text = Path(module.__file__).read_text(encoding="utf-8")
    named = {match.group(1) for match in re.finditer(r"\bsrc[./](\w+)", text)}
    assert {package for package in named if LAYERS[package] > 0} == set()
