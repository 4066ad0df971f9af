"""The seed's table for an econ run, from its evaluation episodes (held-out states).

python -m src.tasks.instance.econ.decision_table OUTPUT_DIR [--every] [--against_rule]

For the first and the last evaluation (with --every, or when there is one, for each one)
(`evaluation/step-NNNNNN.jsonl`): JSON parse success, share of -1.0 rewards, std of the
work and of the consumption decisions (parsed replies), mean reward (format failures
included), mean reward of parsed replies and the rule policy's mean reward on the same
states (each parsed episode's reward less its `metric/reward_vs_rule`), which the parsed
replies' mean is to be read against.

A spread of decisions is not yet a policy that reads the state: one stray reply gives a
std of 0.16 among 31 identical ones. `--against_rule` rebuilds the task from the run's
`config.yaml` and adds how the replies follow the rule policy's decisions on the same
states: the share of work decisions on the rule's side of 0.5, and the correlation of
the consumption decisions with the rule's.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from src.tasks.instance.econ.headroom import task_from_config
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
    parsed = [e for e in episodes if e["info"].get("metric/json_parse_success") == 1.0]
    decisions = [d for e in parsed for d in e["info"].get("econ/decisions", [])]

    def spread(key: str) -> float:
        values = [d[key] for d in decisions]
        return statistics.stdev(values) if len(values) > 1 else 0.0

    rewards = [e["reward"] for e in episodes]
    rule_rewards = [e["reward"] - e["info"]["metric/reward_vs_rule"] for e in parsed]
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


def rule_agreement(episodes: list[dict], task: EconDecisionTask) -> dict[str, float]:
    """How the parsed replies' decisions follow the rule policy's on the same states."""
    pairs = []
    for episode in episodes:
        if episode["info"].get("metric/json_parse_success") != 1.0:
            continue
        state = task.sample_state(task.get_sample(episode["sample_id"]))
        rule = rule_decisions(state, task.utility)
        pairs += [(d["work"], d["consumption"], float(rule.work[d["household"]]),
                   float(rule.consumption[d["household"]]))
                  for d in episode["info"].get("econ/decisions", [])]
    if not pairs:
        return dict.fromkeys(RULE_COLUMNS, float("nan"))
    consumption, rule_consumption = [p[1] for p in pairs], [p[3] for p in pairs]
    # undefined where either side does not vary (a float mean makes "constant" inexact)
    varies = len(set(consumption)) > 1 and len(set(rule_consumption)) > 1
    correlation = (statistics.correlation(consumption, rule_consumption) if varies
                   else float("nan"))
    return {"work on the rule's side": statistics.fmean((w >= 0.5) == (rw >= 0.5)
                                                         for w, _, rw, _ in pairs),
            "corr. of consumption with the rule's": correlation,
            "consumption above the rule's": statistics.fmean(
                c > rc + HALF_GRID_STEP for _, c, _, rc in pairs),
            "consumption below the rule's": statistics.fmean(
                c < rc - HALF_GRID_STEP for _, c, _, rc in pairs)}


def decision_table(output_dir: Path, every: bool = False, against_rule: bool = False) -> str:
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
    for label, path in rows:
        episodes = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        stats = decision_statistics(episodes)
        if task is not None:
            stats |= rule_agreement(episodes, task)
        lines.append(f"| {label}{path.stem}, {len(episodes)} episodes | "
                     + " | ".join(f"{stats[c]:.3f}" for c in columns) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output_dir", type=Path)
    parser.add_argument("--every", action="store_true", help="a row for every evaluation")
    parser.add_argument("--against_rule", action="store_true",
                        help="add how the replies follow the rule policy (reads config.yaml)")
    arguments = parser.parse_args()
    print(decision_table(arguments.output_dir, arguments.every, arguments.against_rule),
          end="")


if __name__ == "__main__":
    main()
