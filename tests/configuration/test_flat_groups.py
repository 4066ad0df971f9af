"""A settings group a config writes flat: each key checked at its own line, gathered into
the group the constructor takes, the keys left out keeping the default group's values."""

from __future__ import annotations

from pathlib import Path

import pytest

from src.configuration.components import validate_parameters
from src.configuration.errors import ConfigError
from src.configuration.flat_groups import FlatGroup, flattened, gathered
from src.configuration.yaml_source import YamlSource
from src.tasks.splits import Count, Splits


class LongerSplits(Splits):
    num_train: Count = 1024


LONGER = LongerSplits()


class Family:
    def __init__(self, levels: int = 1, splits: LongerSplits = LONGER) -> None:
        self.levels, self.splits = levels, splits


def checked(tmp_path: Path, parameters: str) -> dict:
    path = tmp_path / "config.yaml"
    path.write_text(f"task:\n  parameters:\n{parameters}")
    source = YamlSource(path)
    return validate_parameters(Family, source.data["task"]["parameters"], ("task",), source,
                               references={})


def test_flat_keys_are_gathered_into_the_group(tmp_path: Path) -> None:
    arguments = checked(tmp_path, "    levels: 2\n    num_validation: 8\n    seed: 3\n")
    assert arguments == {"levels": 2, "splits": LongerSplits(num_validation=8, seed=3)}
    # the keys left out keep the family's default; only those given count as given
    assert arguments["splits"].num_train == 1024
    assert arguments["splits"].model_fields_set == {"num_validation", "seed"}
    assert checked(tmp_path, "    levels: 2\n")["splits"] is LONGER


@pytest.mark.parametrize(("parameters", "key", "line", "problem"), [
    ("    levels: 2\n    num_train: -1\n", "num_train", 4, "greater than or equal to 0"),
    ("    num_trian: 4\n", "num_trian", 3, "Extra inputs"),
    ("    splits: {num_train: 4}\n", "splits", 3, "Extra inputs"),  # one spelling: flat
])
def test_a_wrong_key_is_named_at_its_line(tmp_path: Path, parameters: str, key: str, line: int,
                                          problem: str) -> None:
    with pytest.raises(ConfigError) as error:
        checked(tmp_path, parameters)
    message = str(error.value)
    assert f"config.yaml:{line}" in message and f"task.parameters.{key}" in message
    assert problem in message


def test_a_key_of_both_the_group_and_the_constructor_is_refused() -> None:
    fields = {"seed": (int, 0), "splits": (Splits, Splits())}
    with pytest.raises(TypeError, match="'seed' is both a parameter and a key"):
        flattened(fields)


def test_a_group_needs_a_default_group() -> None:
    with pytest.raises(TypeError, match="needs a default Splits"):
        flattened({"splits": (Splits, ...)})


def test_a_default_group_keeps_its_own_settings() -> None:
    class Pair(FlatGroup):
        first: int = 0
        second: int = 0

    arguments = gathered({"pair": (Pair, Pair(first=5))}, {"second": 2})
    assert arguments["pair"] == Pair(first=5, second=2)
    assert arguments["pair"].model_fields_set == {"first", "second"}
