"""The economy run forward with every household on the rule policy: where samples come from."""

from __future__ import annotations

from collections.abc import Iterator

from src.tasks.instance.econ.population import sample_population
from src.tasks.instance.econ.rule_policy import rule_decisions
from src.tasks.instance.econ.simulation import (
    EconomyState,
    MonthOutcome,
    initial_state,
    month_draws,
    realise_labour,
    step_month,
)
from src.tasks.instance.econ.utility import UtilityParameters


def run_rule_economy(economy_seed: int, num_households: int, months: int,
                     params: UtilityParameters) -> Iterator[tuple[EconomyState, MonthOutcome]]:
    """(state at the start of the month, the month's outcome) for months 0 .. months - 1."""
    state = initial_state(sample_population(economy_seed, num_households).skills)
    for month in range(months):
        draws = month_draws(economy_seed, month, num_households)
        decisions = rule_decisions(state, params)
        outcome = step_month(state, realise_labour(decisions.work, draws),
                             decisions.consumption, draws)
        yield state, outcome
        state = outcome.state


def rule_economy_states(economy_seed: int, num_households: int, months: int,
                        params: UtilityParameters) -> tuple[EconomyState, ...]:
    """The states at the start of months 0 .. months - 1."""
    return tuple(state for state, _ in run_rule_economy(economy_seed, num_households, months,
                                                        params))
