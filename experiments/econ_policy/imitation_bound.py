"""How much of the planner's gain the prompt's figures can carry: a nearest-neighbour student.

python -m experiments.econ_policy.imitation_bound CONFIG_YAML [--neighbours 10]

A model trained on the planner's decisions (`oracle_policy: planner`) sees only its prompt.
This fits the simplest student of the same demonstrations: for each validation state, the k
train states nearest in the prompt's figures (the log price and the log goods the money
buys working and not; with the market outlook also its expected price move), each figure
standardised over the train split; it works when most of them work under the planner and
spends their median planned share. Its reward against the rule's, with the month's own
draws, is printed for the compact prompt's figures and for those with the outlook, beside
the planner's own gain, and the outlook's own gain for the student (paired, the same
states). The student reads the figures unrounded; with an even k a median between two grid
values goes to the even one. Where the first student is near zero and the second near the
planner, the prompt's figures, not the student's fitting, set the first's limit.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from experiments.econ_policy.headroom import month_reward_grid, sample_household, task_from_config
from src.maths.intervals import mean_with_interval
from src.records.episode import Sample
from src.tasks.instance.econ.outlook import market_outlook
from src.tasks.instance.econ.planner import reward_on_grid
from src.tasks.instance.econ.prompt import cash_on_hand
from src.tasks.instance.econ.reply_parser import snap_to_grid
from src.tasks.instance.econ.rule_policy import rule_decisions
from src.tasks.instance.econ.task import EconDecisionTask


@dataclass(frozen=True)
class StateRecord:
    """A one-household state: what its prompt shows, and the planner's and rule's replies."""

    figures: np.ndarray  # log price, log goods working, log goods resting (unrounded)
    expected_price_change: float  # the outlook line's figure, unrounded
    planned_work: float
    planned_consumption: float
    rule_work: float
    rule_consumption: float


def state_record(task: EconDecisionTask, sample: Sample) -> StateRecord:
    """What a one-household sample's prompt shows, and the planner's and the rule's replies."""
    household = sample_household(sample)
    state = task.sample_state(sample)
    rule = rule_decisions(state, task.utility)
    goods = [cash / state.price for cash in cash_on_hand(state, household)]
    planned_work, planned_consumption = task.planned_decision(sample, rule, household)
    return StateRecord(
        # at least one good: a penniless household's zero has no log
        figures=np.log([state.price, *(max(g, 1.0) for g in goods)]),
        expected_price_change=market_outlook(state, rule).expected_price_change,
        planned_work=planned_work, planned_consumption=planned_consumption,
        rule_work=float(rule.work[household]),
        rule_consumption=float(rule.consumption[household]))


def features(record: StateRecord, with_outlook: bool) -> np.ndarray:
    if with_outlook:
        return np.append(record.figures, record.expected_price_change)
    return record.figures


def nearest_neighbour_replies(train: list[StateRecord], targets: list[StateRecord],
                              neighbours: int, with_outlook: bool) -> list[tuple[float, float]]:
    """The student's (work, share) for each target: the planner's majority work and median
    share over the `neighbours` nearest train states, in standardised features."""
    train_features = np.array([features(record, with_outlook) for record in train])
    centre, scale = train_features.mean(axis=0), train_features.std(axis=0)
    scale[scale == 0.0] = 1.0
    train_features = (train_features - centre) / scale
    planned_work = np.array([record.planned_work for record in train])
    planned_share = np.array([record.planned_consumption for record in train])
    replies = []
    for record in targets:
        distance = (((train_features - (features(record, with_outlook) - centre) / scale) ** 2)
                    .sum(axis=1))
        nearest = np.argsort(distance, kind="stable")[:neighbours]
        work = float(planned_work[nearest].mean() > 0.5)
        share = snap_to_grid(float(np.median(planned_share[nearest])))
        replies.append((work, share))
    return replies


def gains_over_rule(records: list[StateRecord], rewards: list[np.ndarray],
                    replies: list[tuple[float, float]]) -> list[float]:
    """Each reply's reward minus the rule's, on its state's grid."""
    return [reward_on_grid(grid, *reply)
            - reward_on_grid(grid, record.rule_work, record.rule_consumption)
            for record, grid, reply in zip(records, rewards, replies, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config_path", type=Path)
    parser.add_argument("--neighbours", type=int, default=10)
    arguments = parser.parse_args()
    if arguments.neighbours < 1:
        parser.error(f"--neighbours must be at least 1, got {arguments.neighbours}")
    task = task_from_config(arguments.config_path)
    train = [state_record(task, task.get_sample(i)) for i in task.sample_ids("train")]
    samples = [task.get_sample(i) for i in task.sample_ids("validation")]
    held_out = [state_record(task, sample) for sample in samples]
    rewards = [month_reward_grid(task, sample,
                                 rule_decisions(task.sample_state(sample), task.utility))
               for sample in samples]
    planned = [(record.planned_work, record.planned_consumption) for record in held_out]
    print(f"{len(held_out)} validation states, students of {len(train)} train states' planned "
          f"replies, {arguments.neighbours} neighbours; reward against the rule (95% bootstrap):")
    print(f"  the planner itself: {mean_with_interval(gains_over_rule(held_out, rewards, planned))}")
    gains = {}
    for with_outlook, label in ((False, "the compact prompt's figures"),
                                (True, "those and the market outlook")):
        replies = nearest_neighbour_replies(train, held_out, arguments.neighbours, with_outlook)
        gains[with_outlook] = gains_over_rule(held_out, rewards, replies)
        print(f"  a student of {label}: {mean_with_interval(gains[with_outlook])}")
    outlook_gain = [with_it - without for with_it, without in zip(gains[True], gains[False],
                                                                  strict=True)]
    print(f"  the outlook's gain for the student (paired): {mean_with_interval(outlook_gain)}")


if __name__ == "__main__":
    main()
