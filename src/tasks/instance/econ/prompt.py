"""The household's monthly prompt, worded after EconAgent's."""

from __future__ import annotations

from collections.abc import Sequence

from src.tasks.instance.econ.memory import Experience
from src.tasks.instance.econ.outlook import MarketOutlook
from src.tasks.instance.econ.population import Population
from src.tasks.instance.econ.reply_parser import Decision
from src.tasks.instance.econ.rule_policy import expected_cash_on_hand
from src.tasks.instance.econ.simulation import HOURS_PER_MONTH, MONTHS_PER_YEAR, EconomyState
from src.tasks.instance.econ.tax import BRACKET_CUTOFFS, BRACKET_RATES

FIRST_YEAR = 2001
INSTRUCTION = (
    "With all these factors in play, and considering your living costs, your future and the "
    "broader economy, how willing are you to work this month? And what share of your savings "
    "and income will you spend on essential goods, given their price?\n"
    "Answer with a JSON object and nothing else, with two keys: \"work\" (between 0 and 1, in "
    "steps of 0.02: your propensity to work) and \"consumption\" (between 0 and 1, in steps "
    "of 0.02: the share of all your savings and income you spend on goods), for example\n"
    '{"work": 0.8, "consumption": 0.4}')
# The compact prompt's question: the same keys, grid and example, without the EconAgent preamble.
COMPACT_INSTRUCTION = (
    "How willing are you to work this month, and what share of that money will you spend on "
    "goods? Answer with a JSON object and nothing else: \"work\" (your propensity to work) "
    "and \"consumption\" (the share you spend), each between 0 and 1 in steps of 0.02, for "
    "example\n"
    '{"work": 0.8, "consumption": 0.4}')


def money(amount: float) -> str:
    return f"${amount:,.2f}"


def situation(state: EconomyState, household: int) -> str:
    """A short description of a household's situation, for the few-shot examples."""
    return (f"savings {money(state.savings[household])}, hourly wage "
            f"{money(state.wage[household])}, goods price {money(state.price)}")


def cash_on_hand(state: EconomyState, household: int) -> tuple[float, float]:
    """The household's money for the month as the rule expects it, working and not."""
    if_working, if_resting = (float(expected_cash_on_hand(state, works)[household])
                              for works in (1.0, 0.0))
    return if_working, if_resting


def cash_on_hand_line(state: EconomyState, household: int) -> str:
    """The money the month leaves to spend or keep, in dollars and in goods at today's price,
    for working and for not: the quantities the rule policy's consumption share follows."""
    if_working, if_resting = cash_on_hand(state, household)
    return (f"With your savings, last month's redistribution and, if you work, this month's "
            f"pay after tax, you will have {money(if_working)} to spend or keep if you work, "
            f"enough for {if_working / state.price:,.0f} goods, and {money(if_resting)} if you "
            f"do not, enough for {if_resting / state.price:,.0f} goods.")


def market_outlook_line(outlook: MarketOutlook) -> str:
    """The month's goods on sale against the planned purchases, and the price move expected."""
    change = outlook.expected_price_change
    move = (f"to rise by about {change:.1%}" if change >= 0.0005
            else f"to fall by about {-change:.1%}" if change <= -0.0005 else "to hold")
    return (f"This month the shops will have about {outlook.goods_on_sale:,.0f} goods and "
            f"households plan to buy about {outlook.planned_purchases:,.0f}, so the price is "
            f"expected {move} by next month.")


def examples_block(examples: Sequence[Experience]) -> str:
    shown = "\n".join(f"- {example.situation}: "
                      f"{Decision(example.work, example.consumption).to_json()}"
                      for example in examples)
    return f"Decisions that worked out well for households in situations like yours:\n{shown}"


def compact_household_prompt(population: Population, state: EconomyState, household: int,
                             examples: Sequence[Experience] = (),
                             outlook: MarketOutlook | None = None) -> str:
    """The price, the cash-on-hand line and a short question: a prompt a third as long as the
    EconAgent one that still holds the figures the rule policy decides from (and, given an
    outlook, the market outlook line)."""
    lines = [f"You are {population.names[household]}, a(n) {population.jobs[household]}. "
             f"Essential goods cost {money(state.price)} each.",
             cash_on_hand_line(state, household)]
    if outlook is not None:
        lines.append(market_outlook_line(outlook))
    if examples:
        lines.append(examples_block(examples))
    lines.append(COMPACT_INSTRUCTION)
    return "\n".join(lines)


def household_prompt(population: Population, state: EconomyState, household: int,
                     examples: Sequence[Experience] = (), show_cash_on_hand: bool = False,
                     outlook: MarketOutlook | None = None) -> str:
    year, month = divmod(state.month, MONTHS_PER_YEAR)
    age = int(population.ages[household]) + year
    wage = float(state.wage[household])
    expected = HOURS_PER_MONTH * wage
    if state.last_worked[household]:
        last_work = (f"In the previous month you worked as a(n) {population.jobs[household]} "
                     f"and earned {money(state.last_income[household])}.")
        change = expected - state.last_income[household]
        trend = "higher" if change > 0 else "lower" if change < 0 else "the same"
        income_outlook = (f"If you keep working, your income this month will be "
                          f"{money(expected)}, {trend} than last month as the labour market moved.")
    else:
        last_work = (f"In the previous month you did not work; your job is "
                     f"{population.jobs[household]}.")
        income_outlook = f"If you work this month, your income will be {money(expected)}."
    brackets = ", ".join(f"{rate:.0%} above {money(cutoff)}"
                         for cutoff, rate in zip(BRACKET_CUTOFFS, BRACKET_RATES, strict=True))
    lines = [
        f"You are {population.names[household]}, a {age}-year-old living in the United States. "
        "Part of your monthly income is taxed by the federal government in tiers: each "
        "bracket's rate applies to the income within it. After collection the government "
        "shares all the tax revenue equally among all citizens, whatever their earnings.",
        f"Now it is {FIRST_YEAR + year}.{month + 1:02d}. {last_work} {income_outlook}",
        f"Last month you spent {money(state.last_spending[household])} on goods and paid "
        f"{money(state.last_tax[household])} in tax, and the redistribution gave you "
        f"{money(state.last_redistribution)}.",
        f"The monthly tax brackets are: {brackets}.",
        f"Essential goods cost {money(state.price)} each. Your savings are "
        f"{money(state.savings[household])}, and the bank pays {state.interest_rate:.2%} a "
        "year on them.",
    ]
    if show_cash_on_hand:
        lines.append(cash_on_hand_line(state, household))
    if outlook is not None:
        lines.append(market_outlook_line(outlook))
    if examples:
        lines.append(examples_block(examples))
    lines.append(INSTRUCTION)
    return "\n".join(lines)
