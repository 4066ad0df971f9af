"""The seed's table for an econ run, from its evaluation episodes (held-out states).

python -m src.tasks.instance.econ.decision_table OUTPUT_DIR

For the first and the last evaluation (`evaluation/step-NNNNNN.jsonl`): JSON parse
success, share of -1.0 rewards, std of the work and of the consumption decisions (parsed
replies), mean reward (format failures included), mean reward of parsed replies and the
rule policy's mean reward on the same states (each parsed episode's reward less its
`metric/reward_vs_rule`), which the parsed replies' mean is to be read against.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from src.tasks.instance.econ.task import FORMAT_FAILURE_REWARD

COLUMNS = ("JSON parse success", "share of reward -1.0", "std of work", "std of consumption",
           "mean reward", "mean reward (parsed)", "rule policy (same states)")


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


def decision_table(output_dir: Path) -> str:
    files = sorted((output_dir / "evaluation").glob("step-*.jsonl"))
    if len(files) < 2:
        raise FileNotFoundError(f"{output_dir / 'evaluation'} needs at least two evaluations "
                                f"(at_start and at_end), found {len(files)}")
    lines = [f"| | {' | '.join(COLUMNS)} |", "|---" * (len(COLUMNS) + 1) + "|"]
    for label, path in (("first", files[0]), ("last", files[-1])):
        episodes = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        stats = decision_statistics(episodes)
        lines.append(f"| {label}: {path.stem}, {len(episodes)} episodes | "
                     + " | ".join(f"{stats[c]:.3f}" for c in COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output_dir", type=Path)
    print(decision_table(parser.parse_args().output_dir), end="")


if __name__ == "__main__":
    main()
