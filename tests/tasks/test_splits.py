"""The splits group: the ids of each split it holds, none of a split it does not draw."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from src.tasks.splits import Splits, SplitsWithSelection


def test_each_split_holds_its_count() -> None:
    splits = Splits(num_train=2, num_validation=1)
    assert splits.counts == {"train": 2, "validation": 1}
    assert splits.sample_ids("train") == ["train-000000", "train-000001"]
    assert splits.sample_ids("validation") == ["validation-000000"]
    assert splits.sample_ids("selection") == []  # a split it does not draw


def test_the_selection_split_is_drawn_where_the_group_has_one() -> None:
    splits = SplitsWithSelection(num_train=1, num_validation=1, num_selection=2)
    assert splits.counts == {"train": 1, "validation": 1, "selection": 2}
    assert splits.sample_ids("selection") == ["selection-000000", "selection-000001"]


def test_counts_are_not_negative_and_the_group_is_frozen() -> None:
    with pytest.raises(ValidationError, match="num_validation"):
        Splits(num_validation=-1)
    with pytest.raises(ValidationError):
        Splits().seed = 3  # type: ignore[misc]  # a default group is shared


def test_an_unknown_split_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown split 'test'"):
        Splits().sample_ids("test")
