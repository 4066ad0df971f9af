"""The run page in a real headless Chromium: the page of a short real run (the quickstart
cut to 2 batches) draws its charts, opens an episode as its chat, narrows the list with the
filters and compares two checkpoints problem by problem; what a model wrote shows as text
and runs nothing. scripts/install.sh --dev installs Debian's chromium and chromium-driver."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from src.records.chat import ChatMessage
from src.records.episode import EpisodeRecord
from src.report import run_page_episodes
from src.report.curves import load_metrics
from src.report.paired_comparison import paired_comparison
from src.tasks.rubric import TEXTS_KEY
from tests.conftest import PROJECT_ROOT, requires_embedded_model
from tests.run_folders import run_command

QUICKSTART = PROJECT_ROOT / "configs" / "assignments" / "math_grpo_quickstart.yaml"
SHORT_RUN = """\
import: {quickstart}
assignment_config:
  output_dir: {output}
  rollout: {{max_batches: 2}}
  evaluation: {{max_samples: 8, every_n_batches: 1}}
"""
# Each would run script if the page parsed it as markup: at load (out of the data block),
# or when the episode is shown (an element's handler).
PAYLOADS = ["<script>alert(1)</script>", "</script><script>alert(2)</script>",
            "<img src=x onerror=alert(3)>"]
# window.alert recorded instead of shown, in every document before its own scripts run
RECORD_ALERTS = "window.alerts = []; window.alert = message => window.alerts.push(message);"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    webdriver = pytest.importorskip(
        "selenium.webdriver", reason="selenium is not installed: pip install -e '.[dev]'")
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        pytest.skip("no chromium / chromedriver on PATH: scripts/install.sh --dev installs "
                    "Debian's chromium and chromium-driver (with apt-get, as root)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--window-size=1400,1000"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORD_ALERTS})
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def short_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("quickstart")
    config = folder / "config.yaml"
    config.write_text(SHORT_RUN.format(quickstart=QUICKSTART, output=folder / "run"))
    assert run_command(config) == 0
    return folder / "run"


def by_css(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def text_of(element: Any) -> str:
    """The element's text exactly (selenium's `.text` trims and folds white space)."""
    return element.get_property("textContent")


def choose(driver: Any, select_id: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(by_css(driver, f"#{select_id}")[0]).select_by_value(value)


def open_page(driver: Any, page: Path) -> None:
    driver.get(page.resolve().as_uri())
    assert driver.execute_script("return window.alerts") == []


def records(path: Path) -> list[EpisodeRecord]:
    # split at newlines only: a reply may hold U+2028, where str.splitlines splits too
    return [EpisodeRecord.model_validate_json(line)
            for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


def shown_chat(row_detail: Any) -> list[str]:
    return [text_of(pre) for pre in row_detail.find_elements("css selector", ".message pre")]


@pytest.mark.slow
@requires_embedded_model
def test_the_page_of_a_short_run_draws_opens_filters_and_compares(short_run: Path,
                                                                  browser: Any) -> None:
    page = short_run / "report" / "run.html"
    assert page.is_file(), "the end of the run writes the page"
    open_page(browser, page)
    assert text_of(by_css(browser, "#end-lines")[0]).startswith(
        "evaluation (validation split, success, 95% Wilson interval): ")

    # The charts: a path per logged series, through each of its points, drawn with a size.
    rows = load_metrics(short_run)
    paths = {path.get_attribute("data-series"): path
             for path in by_css(browser, "svg.chart path")}
    for key in ("rollout/reward", "eval/success_rate", "eval/reward"):
        points = sum(key in row for row in rows)
        assert len(re.findall(r"[ML][\d.]+,[\d.]+", paths[key].get_attribute("d"))) == points
        assert points >= 2 and paths[key].size["width"] > 100

    # An episode opens as its chat.
    by_css(browser, "nav button[data-tab=episodes]")[0].click()
    assert text_of(by_css(browser, "#episode-count")[0]).startswith("88 of 88 episodes")
    assert len(by_css(browser, "#episode-table tbody tr.pick")) == 50  # a page
    by_css(browser, "#episode-pager .page-next")[0].click()
    assert len(by_css(browser, "#episode-table tbody tr.pick")) == 38
    evaluated = {step: records(short_run / "evaluation" / f"step-{step:06d}.jsonl")
                 for step in (0, 1, 2)}
    choose(browser, "filter-source", "validation")
    choose(browser, "filter-step", "2")
    assert text_of(by_css(browser, "#episode-count")[0]).startswith("8 of 88")
    by_css(browser, "#episode-table tbody tr.pick")[3].click()
    detail = by_css(browser, "#episode-table tr.detail")[0]
    assert shown_chat(detail) == [message.content for message in evaluated[2][3].chat]
    assert [text_of(role) for role in detail.find_elements("css selector", ".role")] == [
        "task (user)", "agent (assistant)"]

    # The filters narrow the list to what the evaluation file holds.
    for outcome in ("correct", "incorrect"):
        choose(browser, "filter-outcome", outcome)
        expected = sorted(r.sample_id for r in evaluated[2] if r.outcome.value == outcome)
        assert sorted(text_of(row.find_elements("css selector", "td")[0]) for row in
                      by_css(browser, "#episode-table tbody tr.pick")) == expected
    choose(browser, "filter-outcome", "")
    choose(browser, "filter-source", "train")
    choose(browser, "filter-step", "1")
    choose(browser, "filter-status", "completed")
    completed = sum(record.batch_index == 0 and record.status.value == "completed"
                    for record in records(short_run / "runs.jsonl"))
    assert text_of(by_css(browser, "#episode-count")[0]).startswith(f"{completed} of 88")

    # Two checkpoints compared: the counts are paired_comparison's, both replies side by side.
    by_css(browser, "nav button[data-tab=compare]")[0].click()
    for side, label in (("before", "validation step 0"), ("after", "validation step 2")):
        values = {text_of(option): option.get_attribute("value")
                  for option in by_css(browser, f"#compare-{side} option")}
        choose(browser, f"compare-{side}", values[label])
    expected = paired_comparison(short_run / "evaluation" / "step-000000.jsonl",
                                 short_run / "evaluation" / "step-000002.jsonl")
    counts = re.search(r"up (\d+), down (\d+), same (\d+)", expected)
    assert counts is not None and counts.group(0) in text_of(by_css(browser,
                                                                     "#compare-success")[0])
    before = {r.sample_id: r for r in evaluated[0]}
    after = {r.sample_id: r for r in evaluated[2]}
    for change, count in zip(("up", "down", "same"), counts.groups(), strict=True):
        by_css(browser, f"#compare-{change}")[0].click()
        shown = by_css(browser, "#compare-problems tbody tr.pick")
        assert len(shown) == int(count)
        if shown:
            sample_id = text_of(shown[0].find_elements("css selector", "td")[0])
            shown[0].click()
            sides = by_css(browser, "#compare-problems tr.detail .episode")
            assert [shown_chat(side)[-1] for side in sides] == [
                before[sample_id].chat[-1].content, after[sample_id].chat[-1].content]
    by_css(browser, "nav button[data-tab=config]")[0].click()
    assert "math_problems" in by_css(browser, "#config-text")[0].text
    assert browser.execute_script("return window.alerts") == []


def write_evaluation(path: Path, replies: list[str], outcomes: list[str]) -> None:
    rows = [EpisodeRecord(
        sample_id=f"validation-{index:06d}", group_index=0, batch_index=0,
        category="<b>bold</b>", status="completed", outcome=outcome,
        reward=float(outcome == "correct"), turns=1, prompt_tokens=10, completion_tokens=5,
        chat=[ChatMessage(role="user", content="What is 1 + 1? <i>&amp;</i>"),
              ChatMessage(role="agent", content=reply)],
        metrics={"correct": float(outcome == "correct")},
        info={"note": "</script><b>", TEXTS_KEY: {"graded": {
            "prompt": f"Reply: {reply}", "verdict": "Score: 7 <b>bold</b>"}}})
        for index, (reply, outcome) in enumerate(zip(replies, outcomes, strict=True))]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(row.model_dump_json() + "\n" for row in rows))


def test_what_a_model_wrote_shows_as_text_and_runs_nothing(tmp_path: Path,
                                                          browser: Any) -> None:
    run, other = tmp_path / "run", tmp_path / "sft_start"
    for folder in (run, other):
        folder.mkdir()
        (folder / "metrics.jsonl").write_text(json.dumps(
            {"step": 0, "eval/success_rate": 0.5, "eval/episodes": 4.0}) + "\n")
    write_evaluation(other / "evaluation" / "step-000000.jsonl", ["3", "2", "2", "3"],
                     ["incorrect", "correct", "correct", "incorrect"])
    write_evaluation(run / "evaluation" / "step-000000.jsonl", [*PAYLOADS, "2"],
                     ["incorrect", "incorrect", "correct", "correct"])
    # python -m src.report, with another run's evaluation to compare against
    subprocess.run([sys.executable, "-m", "src.report", str(run), "--against", str(other)],
                   cwd=PROJECT_ROOT, check=True, capture_output=True)
    page = run / "report" / "run.html"
    html = page.read_text()
    data = re.search(r'<script type="application/json" id="run-data">(.*?)</script>', html,
                     re.DOTALL)
    assert data is not None and not re.search("[<>&]", data.group(1))
    assert "\\u003cscript\\u003ealert(1)\\u003c/script\\u003e" in data.group(1)
    assert html.count("<script") == 2 and "alert(" not in html.replace(data.group(1), "")

    open_page(browser, page)
    by_css(browser, "nav button[data-tab=episodes]")[0].click()
    choose(browser, "filter-source", "validation")
    for index, payload in enumerate(PAYLOADS):
        by_css(browser, "#episode-table tbody tr.pick")[index].click()
        detail = by_css(browser, "#episode-table tr.detail")[0]
        assert shown_chat(detail) == ["What is 1 + 1? <i>&amp;</i>", payload]
        assert "category: <b>bold</b>" in text_of(detail)
        info_table = text_of(detail.find_elements("css selector", "table.info")[0])
        assert "</script><b>" in info_table and TEXTS_KEY not in info_table
        # a judge's prompt and verdict, each whole as text, under its function's name
        assert [(text_of(text.find_elements("css selector", ".role")[0]),
                 text_of(text.find_elements("css selector", "pre")[0]))
                for text in detail.find_elements("css selector", ".reward-text")] == [
            ("graded · prompt", f"Reply: {payload}"),
            ("graded · verdict", "Score: 7 <b>bold</b>")]
    # no element made of what the data wrote (the page's own <b>s are labels)
    assert by_css(browser, "img, i") == []
    assert "bold" not in [text_of(bold) for bold in by_css(browser, "b")]

    # The other run's start against this run, problem by problem.
    by_css(browser, "nav button[data-tab=compare]")[0].click()
    assert text_of(by_css(browser, "#compare-before option")[0]) == "sft_start · validation step 0"
    by_css(browser, "#compare-down")[0].click()
    shown = by_css(browser, "#compare-problems tbody tr.pick")
    assert len(shown) == 1  # validation-000001: correct before, not after
    shown[0].click()
    assert [shown_chat(side)[-1] for side in by_css(
        browser, "#compare-problems tr.detail .episode")] == ["2", PAYLOADS[1]]
    assert browser.execute_script("return window.alerts") == []


def test_a_long_run_shows_whole_training_batches_evenly_the_last_among_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_page_episodes, "MAX_TRAIN_EPISODES", 10)
    runs = tmp_path / "runs.jsonl"
    runs.write_text("".join(EpisodeRecord(
        sample_id=f"train-{batch}-{group}", group_index=group, batch_index=batch,
        category="c", status="completed", outcome="correct", reward=1.0, turns=1,
        prompt_tokens=1, completion_tokens=1,
        chat=[ChatMessage(role="user", content="q")]).model_dump_json() + "\n"
        for batch in range(7) for group in range(4)))  # 28 episodes: one batch in 3
    table = run_page_episodes.EpisodeTable()
    note = run_page_episodes.add_training_episodes(table, runs)
    assert note == "train: 12 of the 28 episodes of runs.jsonl (one batch in 3)"
    assert sorted({row[1] for row in table.rows}) == [1, 4, 7]  # batches 0, 3, 6
    assert len(table.strings) == 1  # the one prompt, kept once
