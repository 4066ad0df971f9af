"""A full run of the rule-policy economy: yearly unemployment, inflation and GDP growth.

    python -m experiments.econ_policy.simulate --months 240 --out DIR

writes DIR/yearly.jsonl (one `YearRecord` a line) and DIR/macro_indicators.png.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from src.tasks.instance.econ.baseline_run import run_rule_economy  # noqa: E402
from src.tasks.instance.econ.simulation import YearRecord  # noqa: E402
from src.tasks.instance.econ.utility import UtilityParameters  # noqa: E402


def simulate_years(economy_seed: int, num_households: int, months: int,
                   params: UtilityParameters) -> list[YearRecord]:
    return [outcome.year for _, outcome in run_rule_economy(economy_seed, num_households,
                                                            months, params)
            if outcome.year is not None]


def write_yearly(records: Sequence[YearRecord], path: Path) -> None:
    path.write_text("".join(record.model_dump_json() + "\n" for record in records))


def plot_yearly(records: Sequence[YearRecord], path: Path) -> None:
    years = [record.year for record in records]
    panels = (
        ("unemployment rate (%)", [100 * r.unemployment for r in records]),
        ("inflation (%)", [100 * r.inflation for r in records]),
        ("nominal GDP growth (%)", [None if r.gdp_growth is None else 100 * r.gdp_growth
                                    for r in records]),
    )
    figure, axes = plt.subplots(len(panels), 1, figsize=(7, 8), sharex=True)
    for axis, (label, values) in zip(axes, panels, strict=True):
        points = [(year, value) for year, value in zip(years, values, strict=True)
                  if value is not None]
        axis.plot([p[0] for p in points], [p[1] for p in points], marker="o")
        axis.axhline(0.0, color="grey", linewidth=0.5)
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
    axes[-1].set_xlabel("year")
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0].set_title("EconAgent economy, every household on the rule policy")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--months", type=int, default=240)
    parser.add_argument("--households", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.months < 12:
        parser.error(f"--months {args.months}: a full year (12 months) is needed for a record")
    args.out.mkdir(parents=True, exist_ok=True)
    records = simulate_years(args.seed, args.households, args.months, UtilityParameters())
    write_yearly(records, args.out / "yearly.jsonl")
    plot_yearly(records, args.out / "macro_indicators.png")
    last = records[-1]
    print(f"{len(records)} years -> {args.out}/yearly.jsonl, macro_indicators.png; year "
          f"{last.year}: unemployment {last.unemployment:.1%}, inflation {last.inflation:.1%}, "
          f"interest {last.interest_rate:.2%}")


if __name__ == "__main__":
    main()
