"""The month's market outlook: the goods on sale, the goods the households plan to buy, and
the price move that imbalance implies.

The planner (`planner`) beats the rule policy by pricing in the month's imbalance: over the
800 train states of the compact prompt (seed 0) the planner's share minus the rule's correlates
0.66 with it. A household that sees only its own money and the price cannot know it; this
is the forecast a market report would print: the stock plus what the planned work makes,
against the planned purchases at the money each household expects
(`rule_policy.expected_cash_on_hand`: last month's redistribution repeating), and the price
move the market's law (`market.adjust_level`) makes of that imbalance with its draw at its
mean. It uses no draw of the month. It is the month's own move at the mean draw where the
money is as expected; the month's new redistribution shifts the real one a little.
"""

from __future__ import annotations

from dataclasses import dataclass

from src.tasks.instance.econ.market import adjust_level, imbalance
from src.tasks.instance.econ.rule_policy import expected_cash_on_hand
from src.tasks.instance.econ.simulation import (
    HOURS_PER_MONTH,
    PRICE_ADJUSTMENT,
    PRODUCTIVITY,
    Decisions,
    EconomyState,
)

_MEAN_DRAW = 0.5  # the mean of the uniform [0, 1) share of the largest price move


@dataclass(frozen=True)
class MarketOutlook:
    goods_on_sale: float  # the inventory plus what the planned hours make
    planned_purchases: float  # goods, at today's price and the money each expects
    expected_price_change: float  # relative, e.g. 0.012 for +1.2% by next month


def market_outlook(state: EconomyState, plans: Decisions) -> MarketOutlook:
    """The outlook when every household follows `plans` (work as expected hours)."""
    goods_on_sale = state.inventory + PRODUCTIVITY * HOURS_PER_MONTH * float(plans.work.sum())
    cash = expected_cash_on_hand(state, plans.work)
    planned_purchases = float((plans.consumption * cash).sum()) / state.price
    phi = imbalance(planned_purchases, goods_on_sale)
    change = float(adjust_level(1.0, _MEAN_DRAW, PRICE_ADJUSTMENT, phi)) - 1.0
    return MarketOutlook(goods_on_sale=goods_on_sale, planned_purchases=planned_purchases,
                         expected_price_change=change)
