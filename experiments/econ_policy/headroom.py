"""How much room the rule policy leaves: the best decision on the grid, in hindsight.

python -m experiments.econ_policy.headroom CONFIG_YAML [--split validation]

The rule policy (`rule_policy`) expects this month's price to hold, goods not to run short
and the redistribution to repeat; the reward steps the month as simulated. For each sample
of a split this evaluates the reward of every reply the parser can produce (work 0 or 1,
since the reward is linear in the work propensity, and each of the 51 consumption shares),
with the month's own draws, and prints the means of the rule policy's reward, of the best
reply in hindsight and of their gap, and the spread of the rule's own decisions (the
yardstick for a trained policy's std of work and consumption). The gap is an upper bound on
what any policy can gain over the rule on those states; a run's "mean parsed reward above
the rule" must be read against it. It also prints what the rule's own decision with its
share one grid step (0.02) higher would change, with a 95% bootstrap interval: a policy
that knows no more than the rule can still beat it where the rule's expectations are off
on average. And it prints the planner's gain (`planner`: the best reply in expectation over
other draws of the month, the task's `oracle_policy: planner`), the bar for a policy that
learns from the planner's decisions.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from experiments.task_config import task_built_from_config
from src.maths.intervals import mean_with_interval
from src.records.episode import Sample
from src.tasks.instance.econ.planner import best_grid_reply, grid_rewards, reward_on_grid
from src.tasks.instance.econ.reply_parser import GRID_STEPS
from src.tasks.instance.econ.rule_policy import rule_decisions
from src.tasks.instance.econ.simulation import Decisions, month_draws
from src.tasks.instance.econ.task import EconDecisionTask


@dataclass(frozen=True)
class SampleHeadroom:
    sample_id: str
    rule_work: float
    rule_consumption: float
    rule_reward: float
    best_reward: float
    best_work: float
    best_consumption: float
    one_step_up_reward: float  # the rule's work, its share + 0.02 (1.0 stays 1.0)
    planned_work: float  # the planner's reply (`planner`), with the task's planning draws
    planned_consumption: float
    planned_reward: float


def sample_household(sample: Sample) -> int:
    """The household of a one-household sample: the tools here score one reply a sample."""
    households = sample.data["households"]
    if len(households) != 1:
        raise ValueError(f"sample {sample.sample_id}: headroom is computed for one household "
                         f"a sample, this one asks for {len(households)}")
    return households[0]


def month_reward_grid(task: EconDecisionTask, sample: Sample, rule: Decisions) -> np.ndarray:
    """The reward of every grid reply with the month's own draws (the episode's reward), the
    other households on `rule`."""
    draws = month_draws(sample.data["economy_seed"], sample.data["month"], task.num_households)
    return grid_rewards(task.sample_state(sample), draws, rule, sample_household(sample),
                        task.utility)


def sample_headroom(task: EconDecisionTask, sample: Sample) -> SampleHeadroom:
    """The rule policy's reward, the best grid reply's and the planner's, for a one-household
    sample."""
    household = sample_household(sample)
    rule = rule_decisions(task.sample_state(sample), task.utility)
    rewards = month_reward_grid(task, sample, rule)
    best_work, best_consumption = best_grid_reply(rewards)
    planned_work, planned_consumption = task.planned_decision(sample, rule, household)
    rule_work = float(rule.work[household])
    rule_consumption = float(rule.consumption[household])
    return SampleHeadroom(sample_id=sample.sample_id,
                          rule_work=rule_work,
                          rule_consumption=rule_consumption,
                          rule_reward=reward_on_grid(rewards, rule_work, rule_consumption),
                          best_reward=float(rewards.max()),
                          best_work=best_work,
                          best_consumption=best_consumption,
                          one_step_up_reward=reward_on_grid(
                              rewards, rule_work, min(rule_consumption + 1 / GRID_STEPS, 1.0)),
                          planned_work=planned_work,
                          planned_consumption=planned_consumption,
                          planned_reward=reward_on_grid(rewards, planned_work,
                                                        planned_consumption))


def task_from_config(config_path: Path) -> EconDecisionTask:
    """The econ task of an assignment or supervised config (or a run's saved config.yaml)."""
    return task_built_from_config(config_path, "econ_decision", EconDecisionTask)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config_path", type=Path)
    parser.add_argument("--split", default="validation", choices=("train", "validation"))
    arguments = parser.parse_args()
    task = task_from_config(arguments.config_path)
    rows = [sample_headroom(task, task.get_sample(sample_id))
            for sample_id in task.sample_ids(arguments.split)]
    gaps = [row.best_reward - row.rule_reward for row in rows]
    print(f"{len(rows)} {arguments.split} states: rule policy "
          f"{statistics.fmean(r.rule_reward for r in rows):.4f}, best reply in hindsight "
          f"{statistics.fmean(r.best_reward for r in rows):.4f}; gap mean {statistics.fmean(gaps):.4f}, "
          f"max {max(gaps):.4f}; the rule is the best reply on "
          f"{sum(g <= 1e-12 for g in gaps)} of {len(rows)}; the rule's std of work "
          f"{statistics.stdev(r.rule_work for r in rows):.3f}, of consumption "
          f"{statistics.stdev(r.rule_consumption for r in rows):.3f}")
    changes = [row.one_step_up_reward - row.rule_reward for row in rows]
    print(f"the rule's decision with its share 0.02 higher: {mean_with_interval(changes)} "
          f"(95% bootstrap), higher on {sum(c > 0 for c in changes)} of {len(rows)}, lower on "
          f"{sum(c < 0 for c in changes)}")
    planned = [row.planned_reward - row.rule_reward for row in rows]
    print(f"the planner ({task.planning_draws} other draws of each month): "
          f"{mean_with_interval(planned)} (95% bootstrap); its share above the rule's on "
          f"{sum(r.planned_consumption > r.rule_consumption for r in rows)}, below on "
          f"{sum(r.planned_consumption < r.rule_consumption for r in rows)}, its work differs "
          f"on {sum(r.planned_work != r.rule_work for r in rows)} of {len(rows)}")


if __name__ == "__main__":
    main()
