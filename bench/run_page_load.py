"""The run page's size and load time for a run of thousands of episodes.

python bench/run_page_load.py [--run OUTPUT_DIR [--against OTHER_DIR]] [--train_samples 1250]
    [--loads 3] [--screenshots FOLDER]

Without --run, makes a run without a model in a temporary folder: the DB-bench oracle
(configs/assignments/smoke_oracle_db_bench.yaml) on `train_samples` train samples rolled
out 4 times each, 100 held-out samples evaluated at the start and every 20 batches (1250:
5,000 training and 900 evaluation episodes, about 30 s on 2 cores). Writes the run's
page and prints the episodes it holds, the time to write it and its size; then, in
headless Chromium (the median of `loads` loads), the time from navigation to the load
event (the data parsed, the first 50 episodes listed, the comparison drawn), the time to
filter the list by split and outcome, and the time to open an episode. `--screenshots`
saves the overview, an opened episode and a problem of the comparison of the first and last
evaluation offered (with `--against`: the other run's first against this run's last; one
that went up if any) side by side, as PNGs there.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from src.report.run_end import end_lines  # noqa: E402
from src.report.run_page import write_run_page  # noqa: E402

CONFIG = """\
import: {base}
assignment_config:
  output_dir: {output}
  rollout: {{batch_size: 8, group_size: 4}}
  evaluation: {{at_start: true, every_n_batches: 20, at_end: true}}
  task:
    parameters: {{num_train: {train}, num_validation: 100}}
"""
# Timed in the page: a filter's change event, then a listed episode's click.
FILTER_AND_OPEN = """
const started = performance.now();
for (const [id, value] of [["filter-source", "train"], ["filter-outcome", "correct"]]) {
  const select = document.getElementById(id);
  select.value = value;
  select.dispatchEvent(new Event("change"));
}
const filtered = performance.now();
document.querySelector("#episode-table tbody tr.pick").click();
return [filtered - started, performance.now() - filtered,
        document.querySelectorAll("#episode-table tr.detail .message").length];
"""


def make_run(folder: Path, train_samples: int) -> Path:
    config = folder / "config.yaml"
    output = folder / "run"
    config.write_text(CONFIG.format(
        base=ROOT / "configs" / "assignments" / "smoke_oracle_db_bench.yaml", output=output,
        train=train_samples))
    result = subprocess.run([sys.executable, str(ROOT / "src" / "run_experiment.py"),
                             "--config_path", str(config), "--no_progress"], cwd=ROOT,
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"the run failed:\n{result.stderr[-3000:]}")
    return output


def browser() -> Any:  # a selenium Chrome driver (selenium is a dev extra)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--window-size=1400,1000"):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver") or "chromedriver"),
                            options=options)


def measure(page: Path, loads: int) -> dict[str, float]:
    driver = browser()
    try:
        load, filtering, opening = [], [], []
        for _ in range(loads):
            driver.get(page.resolve().as_uri())
            load.append(driver.execute_script(
                "const [entry] = performance.getEntriesByType('navigation');"
                "return entry.loadEventEnd - entry.startTime;"))
            filter_ms, open_ms, messages = driver.execute_script(FILTER_AND_OPEN)
            assert messages > 0, "the opened episode shows no chat"
            filtering.append(filter_ms)
            opening.append(open_ms)
        return {"load_ms": statistics.median(load), "filter_ms": statistics.median(filtering),
                "open_ms": statistics.median(opening)}
    finally:
        driver.quit()


def screenshots(page: Path, folder: Path) -> list[Path]:
    from selenium.webdriver.common.by import By

    folder.mkdir(parents=True, exist_ok=True)
    driver = browser()
    driver.set_window_size(1280, 800)
    try:
        driver.get(page.resolve().as_uri())
        shots = [folder / "run_page_overview.png"]
        driver.save_screenshot(str(shots[-1]))
        driver.find_element(By.CSS_SELECTOR, "nav button[data-tab=episodes]").click()
        driver.find_element(By.CSS_SELECTOR, "#episode-table tbody tr.pick").click()
        driver.execute_script("document.querySelector('#episode-table tr.open')"
                              ".scrollIntoView()")
        shots.append(folder / "run_page_episode.png")
        driver.save_screenshot(str(shots[-1]))
        driver.find_element(By.CSS_SELECTOR, "nav button[data-tab=compare]").click()
        went_up = driver.find_element(By.CSS_SELECTOR, "#compare-up")
        if went_up.get_attribute("data-count") != "0":
            went_up.click()
        driver.find_element(By.CSS_SELECTOR, "#compare-problems tbody tr.pick").click()
        driver.execute_script("document.querySelector('#compare-problems tr.open')"
                              ".scrollIntoView()")
        shots.append(folder / "run_page_compare.png")
        driver.save_screenshot(str(shots[-1]))
        return shots
    finally:
        driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, help="a run folder (default: make one)")
    parser.add_argument("--against", type=Path, action="append", default=[],
                        help="another run whose evaluations the page compares with")
    parser.add_argument("--screenshots", type=Path, metavar="FOLDER")
    parser.add_argument("--train_samples", type=int, default=1250)
    parser.add_argument("--loads", type=int, default=3)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        run = arguments.run or make_run(Path(temporary), arguments.train_samples)
        started = time.perf_counter()
        page = write_run_page(run, end_lines(run), arguments.against)
        written_s = time.perf_counter() - started
        data = json.loads(page.read_text(encoding="utf-8").split(
            '<script type="application/json" id="run-data">')[1].split("</script>")[0])
        figures = {"episodes": len(data["episodes"]),
                   "evaluations": len(data["evaluations"]),
                   "distinct_messages": len(data["strings"]),
                   "write_s": round(written_s, 2),
                   "size_mb": round(page.stat().st_size / 1e6, 2),
                   **{key: round(value) for key, value in
                      measure(page, arguments.loads).items()}}
        if arguments.screenshots:
            figures["screenshots"] = [str(path) for path in
                                      screenshots(page, arguments.screenshots)]
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
