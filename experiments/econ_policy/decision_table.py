"""The decision table for an econ run, from its evaluation episodes (held-out states).

python -m experiments.econ_policy.decision_table OUTPUT_DIR [--every] [--against_rule [--by_work]]

For the first and the last evaluation (with --every, or when there is one, for each one)
(`evaluation/step-NNNNNN.jsonl`): JSON parse success, share of -1.0 rewards, std of the
work and of the consumption decisions (parsed replies), mean reward (format failures
included), mean reward of parsed replies and the rule policy's mean reward on the same
states (each parsed episode's reward less its metric `reward_vs_rule`), which the parsed
replies' mean is to be read against.

A spread of decisions is not yet a policy that reads the state: one stray reply gives a
std of 0.16 among 31 identical ones. `--against_rule` rebuilds the task from the run's
`config.yaml` and adds how the replies follow the rule policy's decisions on the same
states: the share of work decisions on the rule's side of 0.5, and the correlation of
the consumption decisions with the rule's. `--by_work` (with `--against_rule`) adds, for
each row, the mean reward against the rule where the reply and the rule choose to work or
rest (their side of 0.5), with 95% bootstrap intervals and each group's part of the overall
mean: a reply can gain on the shares where it works as the rule and lose it all on a few
states where it works and the rule rests.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from experiments.econ_policy.headroom import task_from_config
from src.maths.intervals import mean_with_interval
from src.tasks.instance.econ.rule_policy import rule_decisions
from src.tasks.instance.econ.task import FORMAT_FAILURE_REWARD, EconDecisionTask

COLUMNS = ("JSON parse success", "share of reward -1.0", "std of work", "std of consumption",
           "mean reward", "mean reward (parsed)", "rule policy (same states)")
RULE_COLUMNS = ("work on the rule's side", "corr. of consumption with the rule's",
                "consumption above the rule's", "consumption below the rule's")
HALF_GRID_STEP = 0.01  # shares closer than this to the rule's are the rule's


def decision_statistics(episodes: list[dict]) -> dict[str, float]:
    if not episodes:
        raise ValueError("no evaluation episodes")
    parsed = [e for e in episodes if e["metrics"].get("json_parse_success") == 1.0]
    decisions = [d for e in parsed for d in e["info"].get("econ/decisions", [])]

    def spread(key: str) -> float:
        values = [d[key] for d in decisions]
        return statistics.stdev(values) if len(values) > 1 else 0.0

    rewards = [e["reward"] for e in episodes]
    rule_rewards = [e["reward"] - e["metrics"]["reward_vs_rule"] for e in parsed]
    return {
        "JSON parse success": len(parsed) / len(episodes),
        "share of reward -1.0": sum(r == FORMAT_FAILURE_REWARD for r in rewards) / len(rewards),
        "std of work": spread("work"),
        "std of consumption": spread("consumption"),
        "mean reward": statistics.fmean(rewards),
        "mean reward (parsed)": (statistics.fmean(e["reward"] for e in parsed)
                                 if parsed else float("nan")),
        "rule policy (same states)": (statistics.fmean(rule_rewards) if parsed
                                      else float("nan")),
    }


def works(share: float) -> bool:
    return share >= 0.5


@dataclass(frozen=True)
class DecisionBesideRule:
    """A parsed reply's decision for one household, the rule policy's on the same state, and
    the episode's reward less the rule's."""
    sample_id: str
    work: float
    consumption: float
    rule_work: float
    rule_consumption: float
    reward_vs_rule: float


def decisions_beside_rule(episodes: list[dict], task: EconDecisionTask
                          ) -> list[DecisionBesideRule]:
    pairs = []
    for episode in episodes:
        if episode["metrics"].get("json_parse_success") != 1.0:
            continue
        state = task.sample_state(task.get_sample(episode["sample_id"]))
        rule = rule_decisions(state, task.utility)
        pairs += [DecisionBesideRule(episode["sample_id"], d["work"], d["consumption"],
                                     float(rule.work[d["household"]]),
                                     float(rule.consumption[d["household"]]),
                                     episode["metrics"]["reward_vs_rule"])
                  for d in episode["info"].get("econ/decisions", [])]
    return pairs


def rule_agreement(pairs: list[DecisionBesideRule]) -> dict[str, float]:
    """How the parsed replies' decisions follow the rule policy's on the same states."""
    if not pairs:
        return dict.fromkeys(RULE_COLUMNS, float("nan"))
    consumption = [p.consumption for p in pairs]
    rule_consumption = [p.rule_consumption for p in pairs]
    # undefined where either side does not vary (a float mean makes "constant" inexact)
    varies = len(set(consumption)) > 1 and len(set(rule_consumption)) > 1
    correlation = (statistics.correlation(consumption, rule_consumption) if varies
                   else float("nan"))
    return {"work on the rule's side": statistics.fmean(works(p.work) == works(p.rule_work)
                                                         for p in pairs),
            "corr. of consumption with the rule's": correlation,
            "consumption above the rule's": statistics.fmean(
                p.consumption > p.rule_consumption + HALF_GRID_STEP for p in pairs),
            "consumption below the rule's": statistics.fmean(
                p.consumption < p.rule_consumption - HALF_GRID_STEP for p in pairs)}


def work_choice_split(pairs: list[DecisionBesideRule]) -> str:
    """The reward against the rule by the reply's and the rule's choice to work or rest (the
    reward against the rule is the episode's, so one household an episode)."""
    if not pairs:
        return "no parsed replies\n"
    if len({p.sample_id for p in pairs}) != len(pairs):
        raise ValueError("the split by work choice needs one household an episode "
                         "(households_per_sample: 1)")
    lines = ["| rule | reply | states | mean reward vs rule (95% bootstrap) | part of the "
             "overall mean |", "|---|---|---|---|---|"]
    for rule_works, reply_works in ((True, True), (False, False), (False, True), (True, False)):
        group = [p.reward_vs_rule for p in pairs
                 if works(p.rule_work) == rule_works and works(p.work) == reply_works]
        mean = (str(mean_with_interval(group)) if len(group) > 1
                else f"{group[0]:+.4g}" if group else "")
        lines.append(f"| {'works' if rule_works else 'rests'} | "
                     f"{'works' if reply_works else 'rests'} | {len(group)} | {mean} | "
                     f"{sum(group) / len(pairs):+.5f} |")
    return "\n".join(lines) + "\n"


def decision_table(output_dir: Path, every: bool = False, against_rule: bool = False,
                   by_work: bool = False) -> str:
    if by_work and not against_rule:
        raise ValueError("--by_work needs --against_rule (it compares with the rule's decisions)")
    files = sorted((output_dir / "evaluation").glob("step-*.jsonl"))
    if not files:
        raise FileNotFoundError(f"{output_dir / 'evaluation'} holds no evaluation "
                                "(step-N.jsonl)")
    # one evaluation (an evaluation-only run) is its own first and last row
    rows = ([("", path) for path in files] if every or len(files) == 1
            else [("first: ", files[0]), ("last: ", files[-1])])
    columns = COLUMNS + RULE_COLUMNS if against_rule else COLUMNS
    task = task_from_config(output_dir / "config.yaml") if against_rule else None
    lines = [f"| | {' | '.join(columns)} |", "|---" * (len(columns) + 1) + "|"]
    splits: list[str] = []
    for label, path in rows:
        episodes = [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]
        stats = decision_statistics(episodes)
        if task is not None:
            pairs = decisions_beside_rule(episodes, task)
            stats |= rule_agreement(pairs)
        lines.append(f"| {label}{path.stem}, {len(episodes)} episodes | "
                     + " | ".join(f"{stats[c]:.3f}" for c in columns) + " |")
        if task is not None and by_work:
            splits.append(f"\nBy work choice, {label}{path.stem}:\n\n"
                          + work_choice_split(pairs))
    return "\n".join(lines) + "\n" + "".join(splits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output_dir", type=Path)
    parser.add_argument("--every", action="store_true", help="a row for every evaluation")
    parser.add_argument("--against_rule", action="store_true",
                        help="add how the replies follow the rule policy (reads config.yaml)")
    parser.add_argument("--by_work", action="store_true",
                        help="with --against_rule: the reward against the rule by work choice")
    arguments = parser.parse_args()
    print(decision_table(arguments.output_dir, arguments.every, arguments.against_rule,
                         arguments.by_work), end="")


if __name__ == "__main__":
    main()
