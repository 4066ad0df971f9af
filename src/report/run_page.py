"""A run's page: OUTPUT_DIR/report/run.html, one file that opens offline in any browser.

It shows the curves (inline SVG), the end-of-run lines, the wall time and the config; an
episode browser over the evaluation files and runs.jsonl (filters, 50 episodes a page, a
chat drawn when opened); and checkpoint comparison: two evaluations of a split, problem by
problem, with the paired intervals computed in `run_page_episodes`.

Everything a model or a task wrote is untrusted: the page's data sits in a
`<script type="application/json">` block with `<`, `>` and `&` escaped, and its script
shows text through text nodes only. A Content-Security-Policy forbids any network access.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Sequence
from html import escape
from importlib.resources import files
from pathlib import Path
from typing import Any

from src.report.curves import load_metrics, step_axis_label
from src.report.run_page_charts import charts_html
from src.report.run_page_episodes import episode_data
from src.storage.run_layout import CONFIG_FILE, METRICS_LOG, RUNS_LOG, STATE_FILE

PAGE = "run.html"
LAST_WRITES = (METRICS_LOG, STATE_FILE, RUNS_LOG)
TIMED = {"time/rollout_seconds": "rolling out", "time/update_seconds": "updating"}
PLACEHOLDER = re.compile(r"__RUN_PAGE_(TITLE|CHARTS|DATA|SCRIPT)__")
# JSON inside <script>: none of these may close the element or start markup
SCRIPT_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"}


def _duration(seconds: float) -> str:
    minutes, second = divmod(round(seconds), 60)
    hours, minute = divmod(minutes, 60)
    if hours:
        return f"{hours} h {minute:02d} min"
    return f"{minute} min {second:02d} s" if minute else f"{second} s"


def wall_time(output_dir: Path, rows: list[dict[str, float]]) -> str:
    """From the config written at the start to the last write of the run's logs (a pause
    between a kill and its resumption included), and the logged time of the batches."""
    config = output_dir / CONFIG_FILE
    ends = [path.stat().st_mtime for path in map(output_dir.joinpath, LAST_WRITES)
            if path.is_file()]
    parts = []
    if config.is_file() and ends:
        parts.append(f"{_duration(max(ends) - config.stat().st_mtime)} from the config written "
                     "to the last log written (by the files' times)")
    for key, doing in TIMED.items():
        seconds = [row[key] for row in rows if key in row]
        if seconds:
            parts.append(f"{_duration(sum(seconds))} {doing} in {len(seconds)} batches")
    return "; ".join(parts) or "unknown: no config.yaml and no batch times logged"


def script_json(value: Any) -> str:
    """JSON that is safe inside a <script> element: `<`, `>`, `&` only occur in strings,
    where their \\u escapes mean the same."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return re.sub("[<>&]", lambda match: SCRIPT_ESCAPES[match.group()], text)


def page_html(data: dict[str, Any], charts: str) -> str:
    resources = files("src.report")
    template = resources.joinpath("run_page.html").read_text(encoding="utf-8")
    values = {"TITLE": escape(data["run"]), "CHARTS": charts, "DATA": script_json(data),
              "SCRIPT": resources.joinpath("run_page.js").read_text(encoding="utf-8")}
    # one pass: a value that holds a placeholder's name is not substituted again
    return PLACEHOLDER.sub(lambda match: values[match.group(1)], template)


def write_run_page(output_dir: Path, end_lines: Sequence[str],
                   against: Sequence[Path] = ()) -> Path:
    """Write OUTPUT_DIR/report/run.html; `against`: other runs' folders whose evaluations
    the page compares with this run's (an SFT start against an RL run's checkpoints)."""
    rows = load_metrics(output_dir)
    config = output_dir / CONFIG_FILE
    data = {
        "run": output_dir.name, "folder": str(output_dir.resolve()),
        "written": datetime.datetime.now().isoformat(timespec="seconds"),
        "end_lines": list(end_lines), "wall_time": wall_time(output_dir, rows),
        "config": config.read_text(encoding="utf-8") if config.is_file() else "",
        **episode_data(output_dir, against)}
    page = output_dir / "report" / PAGE
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(page_html(data, charts_html(rows, output_dir.name, step_axis_label(rows))),
                    encoding="utf-8")
    return page
