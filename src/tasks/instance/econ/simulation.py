"""One month of the EconAgent economy, on numpy arrays.

Each month every household i chooses a work propensity p_w and a consumption propensity p_c:
- labour: it works (l = 1) when its draw u_i < p_w, and earns z = 168 * l * w_i;
- tax: the 2018 brackets / 12 on z; all tax is shared equally (redistribution R);
- goods: the 168 * l hours worked make goods (productivity 1) that join the inventory;
  cash m = savings + z - tax + R, demand p_c * m / P goods, rationed when short;
  savings = m - spent;
- prices: phi = (demand - inventory) / max(demand, inventory) moves every wage by a draw in
  [0, 0.05 |phi|] and the price by one in [0, 0.10 |phi|], signed by phi;
- at each year's end: interest on savings at the year's rate, and the Taylor rule sets the
  rate of the next year (so from year 2; year 1 runs at 3%, its inflation measured against
  the initial price, which is the mean wage).

States are immutable (arrays read-only), so a cached state can be stepped many times, and
every random draw of a month comes from (economy seed, month): the same state and the same
decisions give the same month.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict

from src.tasks.instance.econ.market import adjust_level, clear_goods_market
from src.tasks.instance.econ.monetary import INITIAL_INTEREST_RATE, pay_interest, taylor_rate
from src.tasks.instance.econ.tax import income_tax, redistribute

HOURS_PER_MONTH = 168.0
PRODUCTIVITY = 1.0  # goods per hour worked
WAGE_ADJUSTMENT = 0.05
PRICE_ADJUSTMENT = 0.10
MONTHS_PER_YEAR = 12
_DRAW_STREAM = 1  # keeps the monthly draws apart from the population's
_PLANNING_STREAM = 2  # other draws of a month, never its own: what a planner averages over


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


@dataclass(frozen=True)
class MonthDraws:
    """A month's randomness: each is a uniform [0, 1) draw."""

    work: np.ndarray  # per household: it works when its draw is below its work propensity
    wage: np.ndarray  # per household: the share of the largest wage move it gets
    price: float  # the share of the largest price move


def _draws(rng: np.random.Generator, num_households: int) -> MonthDraws:
    return MonthDraws(work=_frozen(rng.random(num_households)),
                      wage=_frozen(rng.random(num_households)), price=float(rng.random()))


def month_draws(economy_seed: int, month: int, num_households: int) -> MonthDraws:
    return _draws(np.random.default_rng([economy_seed, _DRAW_STREAM, month]), num_households)


def planning_draws(economy_seed: int, month: int, num_households: int,
                   count: int) -> tuple[MonthDraws, ...]:
    """`count` other draws of the month: the luck a household that knows the economy's state
    and laws, but not the month's own draws, can average over."""
    return tuple(_draws(np.random.default_rng([economy_seed, _PLANNING_STREAM, month, index]),
                        num_households) for index in range(count))


@dataclass(frozen=True)
class Decisions:
    """Every household's propensities for one month, each in [0, 1]."""

    work: np.ndarray
    consumption: np.ndarray

    def with_decision(self, household: int, work: float, consumption: float) -> Decisions:
        new_work, new_consumption = self.work.copy(), self.consumption.copy()
        new_work[household], new_consumption[household] = work, consumption
        return Decisions(_frozen(new_work), _frozen(new_consumption))


def realise_labour(work_propensity: np.ndarray, draws: MonthDraws) -> np.ndarray:
    return draws.work < work_propensity


@dataclass(frozen=True)
class YearToDate:
    """Monthly figures of the year so far, for the yearly indicators."""

    prices: tuple[float, ...] = ()
    employment: tuple[float, ...] = ()  # share of households that worked
    nominal_output: tuple[float, ...] = ()  # goods made times the price


class YearRecord(BaseModel):
    """The macro indicators of one simulated year."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    year: int  # 1 for months 1-12
    unemployment: float  # share of household-months without work
    inflation: float  # mean price over the previous year's (the initial price for year 1)
    gdp: float  # nominal: goods made times their price, summed over the months
    gdp_growth: float | None  # None in year 1
    interest_rate: float  # the rate paid on savings at the end of this year
    next_interest_rate: float  # set by the Taylor rule for the next year
    mean_price: float
    mean_wage: float  # at the year's end


@dataclass(frozen=True)
class EconomyState:
    """The economy at the start of month `month` (0-based), after the previous month."""

    month: int
    wage: np.ndarray  # hourly wage each household earns if it works ($/h)
    savings: np.ndarray  # $
    price: float  # $ per good
    inventory: float  # goods
    interest_rate: float  # yearly, paid on savings at the year's end
    last_worked: np.ndarray
    last_income: np.ndarray
    last_tax: np.ndarray
    last_spending: np.ndarray
    last_redistribution: float  # what each household received last month
    year_to_date: YearToDate
    reference_price: float  # mean price of the previous year
    reference_gdp: float | None  # nominal GDP of the previous year

    @property
    def num_households(self) -> int:
        return self.wage.size


@dataclass(frozen=True)
class MonthOutcome:
    state: EconomyState  # the economy at the start of the next month
    goods: np.ndarray  # goods each household consumed
    year: YearRecord | None  # when the month closed a year


def initial_state(skills: np.ndarray) -> EconomyState:
    zeros = np.zeros(skills.size)
    price = float(skills.mean())
    return EconomyState(
        month=0, wage=_frozen(skills.astype(float)), savings=_frozen(zeros.copy()), price=price,
        inventory=0.0, interest_rate=INITIAL_INTEREST_RATE,
        last_worked=_frozen(np.zeros(skills.size, dtype=bool)),
        last_income=_frozen(zeros.copy()), last_tax=_frozen(zeros.copy()),
        last_spending=_frozen(zeros.copy()), last_redistribution=0.0,
        year_to_date=YearToDate(), reference_price=price, reference_gdp=None)


def step_month(state: EconomyState, worked: np.ndarray, consumption: np.ndarray,
               draws: MonthDraws) -> MonthOutcome:
    """The month given who works and every household's consumption propensity."""
    hours = HOURS_PER_MONTH * worked.astype(float)
    income = hours * state.wage
    tax = income_tax(income)
    transfers = redistribute(tax)
    made = PRODUCTIVITY * float(hours.sum())
    inventory = state.inventory + made
    cash = state.savings + income - tax + transfers
    market = clear_goods_market(consumption * cash / state.price, inventory)
    spending = market.bought * state.price
    savings = cash - spending
    year_to_date = YearToDate(
        prices=(*state.year_to_date.prices, state.price),
        employment=(*state.year_to_date.employment, float(worked.mean())),
        nominal_output=(*state.year_to_date.nominal_output, made * state.price))
    wage = adjust_level(state.wage, draws.wage, WAGE_ADJUSTMENT, market.imbalance)
    price = float(adjust_level(state.price, draws.price, PRICE_ADJUSTMENT, market.imbalance))
    month = state.month + 1
    year = None
    interest_rate, reference_price, reference_gdp = (
        state.interest_rate, state.reference_price, state.reference_gdp)
    if month % MONTHS_PER_YEAR == 0:
        savings = pay_interest(savings, state.interest_rate)
        year = close_year(month // MONTHS_PER_YEAR, year_to_date, state, wage)
        interest_rate, reference_price, reference_gdp = (
            year.next_interest_rate, year.mean_price, year.gdp)
        year_to_date = YearToDate()
    next_state = EconomyState(
        month=month, wage=_frozen(wage), savings=_frozen(savings), price=price,
        # rationing sells the whole inventory: max() drops the rounding error below zero
        inventory=max(inventory - float(market.bought.sum()), 0.0), interest_rate=interest_rate,
        last_worked=_frozen(worked.astype(bool)), last_income=_frozen(income),
        last_tax=_frozen(tax), last_spending=_frozen(spending),
        last_redistribution=float(transfers[0]), year_to_date=year_to_date,
        reference_price=reference_price, reference_gdp=reference_gdp)
    return MonthOutcome(state=next_state, goods=_frozen(market.bought), year=year)


def close_year(year: int, months: YearToDate, state: EconomyState,
               wage: np.ndarray) -> YearRecord:
    mean_price = float(np.mean(months.prices))
    inflation = mean_price / state.reference_price - 1.0
    unemployment = 1.0 - float(np.mean(months.employment))
    gdp = float(sum(months.nominal_output))
    growth = (None if state.reference_gdp is None or state.reference_gdp <= 0.0
              else gdp / state.reference_gdp - 1.0)
    return YearRecord(year=year, unemployment=unemployment, inflation=inflation, gdp=gdp,
                      gdp_growth=growth, interest_rate=state.interest_rate,
                      next_interest_rate=taylor_rate(inflation, unemployment),
                      mean_price=mean_price, mean_wage=float(wage.mean()))
