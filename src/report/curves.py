"""A run's curves and table: PNG learning curves of the logged metrics and a markdown
table of every metric's first and last logged value (evaluation metrics, then the rest);
or several runs' curves side by side."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from src.storage.files import read_numbered_json_lines  # noqa: E402
from src.storage.run_layout import METRICS_LOG  # noqa: E402

CURVES = [
    ("reward", ["rollout/reward", "eval/reward"], "mean episode reward"),
    ("success", ["rollout/success_rate", "eval/success_rate"], "share of correct episodes"),
    ("kl", ["kl"], "KL to the reference"),
    ("entropy", ["entropy"], "mean token entropy (nats)"),
    ("length", ["completions/mean_length", "eval/completions/mean_length"],
     "completion tokens per episode"),
    ("zero_std", ["frac_reward_zero_std"], "share of groups with no reward spread"),
    ("margin", ["logp_margin/best_minus_worst"],
     "best - worst candidate, mean token log-prob"),
    ("mismatch", ["mismatch/k3", "mismatch/ess"], "sampler vs trainer: KL (k3), ESS share"),
    ("dynamic_sampling", ["dynamic_sampling/groups_dropped", "dynamic_sampling/groups_drawn"],
     "groups per batch"),
]


def load_metrics(output_dir: Path) -> list[dict[str, float]]:
    path = output_dir / METRICS_LOG
    if not path.is_file():
        raise FileNotFoundError(f"no {METRICS_LOG} in {output_dir}")
    return [row for _, row in read_numbered_json_lines(path)]


def _draw(path: Path, title: str, series: dict[str, list[tuple[float, float]]],
          step_label: str, value_label: str) -> None:
    """One PNG: a line of (step, value) points per label."""
    figure, axes = plt.subplots(figsize=(6, 4))
    for label, points in series.items():
        steps, values = zip(*points, strict=True)
        axes.plot(steps, values, marker="o", markersize=3, label=label)
    axes.set_xlabel(step_label)
    axes.set_ylabel(value_label)
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _points(rows: list[dict[str, float]], key: str) -> list[tuple[float, float]]:
    return [(row["step"], row[key]) for row in rows if key in row]


def step_axis_label(rows: list[dict[str, float]]) -> str:
    # offline group training logs one row per epoch; online runs one per batch
    offline = any("logp_margin/best_minus_worst" in row for row in rows)
    return "epoch (0 = before training)" if offline else "training step (batches)"


def plot(output_dir: Path) -> list[Path]:
    rows = load_metrics(output_dir)
    folder = output_dir / "report"
    folder.mkdir(exist_ok=True)
    written = []
    for name, keys, label in CURVES:
        series = {key: _points(rows, key) for key in keys}
        series = {key: points for key, points in series.items() if points}
        if series:
            written.append(folder / f"{name}.png")
            _draw(written[-1], f"{name}: {output_dir.name}", series, step_axis_label(rows), label)
    return written


def compare(output_dirs: list[Path], folder: Path) -> list[Path]:
    """One PNG per metric of CURVES, each run a line named after its folder."""
    runs = {output_dir.name: load_metrics(output_dir) for output_dir in output_dirs}
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for _, keys, label in CURVES:
        for key in keys:
            series = {name: _points(rows, key) for name, rows in runs.items()}
            series = {name: points for name, points in series.items() if points}
            if series:
                written.append(folder / f"{key.replace('/', '_')}.png")
                _draw(written[-1], key, series, "training step (batches)", label)
    return written


def summary_table(rows: list[dict[str, float]]) -> str:
    """Markdown: each metric's first and last logged value, with their steps."""
    first: dict[str, tuple[int, float]] = {}
    last: dict[str, tuple[int, float]] = {}
    for row in rows:
        for key, value in row.items():
            if key != "step":
                first.setdefault(key, (int(row["step"]), value))
                last[key] = (int(row["step"]), value)
    keys = sorted(first, key=lambda key: (not key.startswith("eval/"), key))
    lines = ["| metric | first (step) | last (step) |", "| --- | --- | --- |"]
    lines += [f"| {key} | {first[key][1]:.4g} ({first[key][0]}) | {last[key][1]:.4g} "
              f"({last[key][0]}) |" for key in keys]
    return "\n".join(lines) + "\n"


def write_report(output_dir: Path) -> list[Path]:
    written = plot(output_dir)
    summary = output_dir / "report" / "summary.md"
    summary.write_text(f"# {output_dir.name}\n\n{summary_table(load_metrics(output_dir))}")
    return [*written, summary]
