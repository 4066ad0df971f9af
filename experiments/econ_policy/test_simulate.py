"""The full simulation: the script's outputs and the rule economy's determinism."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from experiments.econ_policy.simulate import main as simulate_main
from src.tasks.instance.econ.baseline_run import rule_economy_states
from src.tasks.instance.econ.population import sample_population
from src.tasks.instance.econ.simulation import month_draws
from src.tasks.instance.econ.utility import UtilityParameters


def test_skills_are_heavy_tailed_around_a_median_of_87() -> None:
    skills = sample_population(0, 20_000).skills
    assert 80 < np.median(skills) < 95
    assert skills.min() >= 2.0 and skills.max() <= 800.0
    assert skills.mean() > np.median(skills)  # a long right tail


def test_draws_and_runs_are_deterministic() -> None:
    assert np.array_equal(month_draws(5, 7, 10).work, month_draws(5, 7, 10).work)
    assert not np.array_equal(month_draws(5, 7, 10).work, month_draws(5, 8, 10).work)
    first = rule_economy_states(5, 20, 30, UtilityParameters())[-1]
    second = rule_economy_states(5, 20, 30, UtilityParameters())[-1]
    assert np.array_equal(first.savings, second.savings) and first.price == second.price


def test_simulation_script_writes_yearly_indicators_and_a_plot(tmp_path: Path) -> None:
    simulate_main(["--months", "36", "--households", "20", "--out", str(tmp_path)])
    rows = [json.loads(line) for line in (tmp_path / "yearly.jsonl").read_text().splitlines()]
    assert [row["year"] for row in rows] == [1, 2, 3]
    assert rows[0]["gdp_growth"] is None and rows[1]["gdp_growth"] is not None
    assert {"unemployment", "inflation", "interest_rate"} <= set(rows[0])
    assert (tmp_path / "macro_indicators.png").stat().st_size > 0
