"""The run page's curves: inline SVG line charts drawn here, so that the page needs no
script or network to show them (a point's value shows as its tooltip)."""

from __future__ import annotations

import math
from html import escape

from src.report.curves import CURVES

WIDTH, PLOT_HEIGHT = 440, 190
LEFT, RIGHT, TITLE, BOTTOM = 56, 12, 26, 36  # margins around the plot area
LEGEND_LINE = 14
TICKS = 5  # an axis has about as many ticks
COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
POINTS_MARKED = 200  # a series with more points is drawn as a line alone
EVALUATION_PREFIX, SELECTION_PREFIX = "eval/", "selection/"

Series = dict[str, list[tuple[float, float]]]


def chart_series(rows: list[dict[str, float]]) -> list[tuple[str, str, Series]]:
    """(name, value label, {metric: points}) for each of CURVES that the run logged; each
    validation metric (`eval/...`) brings its selection split's (`selection/...`) along."""
    charts = []
    for name, keys, label in CURVES:
        keys = [*keys, *(SELECTION_PREFIX + key.removeprefix(EVALUATION_PREFIX)
                         for key in keys if key.startswith(EVALUATION_PREFIX))]
        series = {key: [(row["step"], row[key]) for row in rows
                        if key in row and math.isfinite(row[key])] for key in keys}
        series = {key: points for key, points in series.items() if points}
        if series:
            charts.append((name, label, series))
    return charts


def _ticks(values: list[float]) -> list[float]:
    """Round ticks (steps of 1, 2, 2.5 or 5 times a power of ten) that span the values."""
    low, high = min(values), max(values)
    if low == high:  # a flat line sits mid-height
        low, high = low - (abs(low) * 0.1 or 1.0), high + (abs(high) * 0.1 or 1.0)
    raw = (high - low) / (TICKS - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.floor(low / step + 1e-9)
    count = math.ceil(high / step - 1e-9) - first
    return [round((first + index) * step, 12) for index in range(count + 1)]


def svg_chart(title: str, value_label: str, step_label: str, series: Series) -> str:
    """One chart: a path (and its points' circles) per series, axes with round ticks."""
    steps = [step for points in series.values() for step, _ in points]
    values = [value for points in series.values() for _, value in points]
    x_ticks, y_ticks = _ticks(steps), _ticks(values)
    (x_low, x_high), (y_low, y_high) = (x_ticks[0], x_ticks[-1]), (y_ticks[0], y_ticks[-1])
    top = TITLE + LEGEND_LINE * len(series)  # the legend between the title and the plot
    height = top + PLOT_HEIGHT + BOTTOM
    plot_width = WIDTH - LEFT - RIGHT

    def x(step: float) -> float:
        return LEFT + (step - x_low) / (x_high - x_low) * plot_width

    def y(value: float) -> float:
        return top + (y_high - value) / (y_high - y_low) * PLOT_HEIGHT

    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" role="img" '
             f'aria-label="{escape(title)}"><title>{escape(title)}</title>',
             f'<text x="{LEFT}" y="16" class="chart-title">{escape(title)}</text>']
    for tick in y_ticks:
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(tick):.1f}" '
                     f'y2="{y(tick):.1f}" class="grid"/><text x="{LEFT - 4}" '
                     f'y="{y(tick) + 3:.1f}" class="tick" text-anchor="end">{tick:g}</text>')
    for tick in x_ticks:
        parts.append(f'<text x="{x(tick):.1f}" y="{height - BOTTOM + 14}" class="tick" '
                     f'text-anchor="middle">{tick:g}</text>')
    parts.append(f'<text x="{LEFT + plot_width / 2}" y="{height - 4}" class="axis" '
                 f'text-anchor="middle">{escape(step_label)}</text>')
    parts.append(f'<text transform="translate(11 {top + PLOT_HEIGHT / 2}) rotate(-90)" '
                 f'class="axis" text-anchor="middle">{escape(value_label)}</text>')
    for index, (key, points) in enumerate(series.items()):
        colour = COLOURS[index % len(COLOURS)]
        path = " ".join(f"{'M' if n == 0 else 'L'}{x(s):.1f},{y(v):.1f}"
                        for n, (s, v) in enumerate(points))
        parts.append(f'<path d="{path}" stroke="{colour}" data-series="{escape(key)}" '
                     f'data-points="{len(points)}"/>')
        if len(points) <= POINTS_MARKED:
            parts += [f'<circle cx="{x(s):.1f}" cy="{y(v):.1f}" r="2.5" fill="{colour}">'
                      f'<title>{escape(key)} at step {s:g}: {v:.4g}</title></circle>'
                      for s, v in points]
        legend = TITLE + LEGEND_LINE * index
        parts.append(f'<rect x="{LEFT}" y="{legend + 4}" width="10" height="3" '
                     f'fill="{colour}"/><text x="{LEFT + 14}" y="{legend + 9}" '
                     f'class="legend">{escape(key)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def charts_html(rows: list[dict[str, float]], run_name: str, step_label: str) -> str:
    charts = [svg_chart(f"{name}: {run_name}", label, step_label, series)
              for name, label, series in chart_series(rows)]
    return "".join(charts) or '<p class="note">No curves: metrics.jsonl holds none of them.</p>'
