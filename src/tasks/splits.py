"""The splits of a task family's samples: one settings group the families share.

`Splits` says how many samples the train and validation splits hold and the seed they
are drawn from; `SplitsWithSelection` adds the selection split, for the families that
draw one (src/tasks/task.py says what each split is for). A family takes it as its
constructor's `splits` parameter, and a family whose defaults differ declares a subclass
with its own. A config writes the keys flat among the task's parameters
(`parameters: {num_train: 40, num_validation: 16, seed: 42}`), checked one by one where
the config is read (src/configuration/flat_groups.py).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from src.configuration.flat_groups import FlatGroup
from src.tasks.task import split_sample_ids

Count = Annotated[int, Field(ge=0)]


class Splits(FlatGroup):
    """The train and validation splits: how many samples each holds, and the seed of
    their draws."""

    num_train: Count = 256  # the samples trained on
    num_validation: Count = 64  # the held-out samples whose figures a run reports
    seed: int = 0  # the samples' draws: the same seed gives the same samples

    @property
    def counts(self) -> dict[str, int]:
        """How many samples each split holds, by split."""
        return {"train": self.num_train, "validation": self.num_validation}

    def sample_ids(self, split: str) -> list[str]:
        """The ids of a split's samples, numbered from 0 (none for a split not drawn)."""
        return split_sample_ids(split, self.counts.get(split, 0))


class SplitsWithSelection(Splits):
    """The train, validation and selection splits (see `Splits`)."""

    # a second held-out draw, for choosing the stopping step apart from the validation
    # samples
    num_selection: Count = 0

    @property
    def counts(self) -> dict[str, int]:
        return {**super().counts, "selection": self.num_selection}
