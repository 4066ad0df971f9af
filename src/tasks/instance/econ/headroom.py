"""How much room the rule policy leaves: the best decision on the grid, in hindsight.

python -m src.tasks.instance.econ.headroom CONFIG_YAML [--split validation]

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
on average.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from src.maths.intervals import mean_with_interval
from src.records.episode import Sample
from src.tasks.instance.econ.reply_parser import GRID_STEPS
from src.tasks.instance.econ.reward import household_rewards
from src.tasks.instance.econ.rule_policy import PROPENSITY_GRID, rule_decisions
from src.tasks.instance.econ.simulation import month_draws
from src.tasks.instance.econ.task import EconDecisionTask
from src.tasks.task_config import task_parameters_from_config


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


def sample_headroom(task: EconDecisionTask, sample: Sample) -> SampleHeadroom:
    """The rule policy's reward and the best grid reply's, for a one-household sample."""
    households = sample.data["households"]
    if len(households) != 1:
        raise ValueError(f"sample {sample.sample_id}: headroom is computed for one household "
                         f"a sample, this one asks for {len(households)}")
    state = task.sample_state(sample)
    draws = month_draws(sample.data["economy_seed"], sample.data["month"], task.num_households)
    rule = rule_decisions(state, task.utility)
    rule_reward = float(household_rewards(state, draws, rule, households, task.utility)[0])
    rewards = np.array([[household_rewards(state, draws,
                                           rule.with_decision(households[0], work, share),
                                           households, task.utility)[0]
                         for share in PROPENSITY_GRID] for work in (0.0, 1.0)])
    work_index, share_index = np.unravel_index(int(np.argmax(rewards)), rewards.shape)
    rule_work_index = int(rule.work[households[0]])
    rule_share_index = int(round(rule.consumption[households[0]] * GRID_STEPS))
    return SampleHeadroom(sample_id=sample.sample_id,
                          rule_work=float(rule.work[households[0]]),
                          rule_consumption=float(rule.consumption[households[0]]),
                          rule_reward=rule_reward,
                          best_reward=float(rewards[work_index, share_index]),
                          best_work=float(work_index),
                          best_consumption=float(PROPENSITY_GRID[share_index]),
                          one_step_up_reward=float(
                              rewards[rule_work_index, min(rule_share_index + 1, GRID_STEPS)]))


def task_from_config(config_path: Path) -> EconDecisionTask:
    """The econ task of an assignment or supervised config (or a run's saved config.yaml)."""
    return EconDecisionTask(**task_parameters_from_config(config_path, "econ_decision"))


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


if __name__ == "__main__":
    main()
