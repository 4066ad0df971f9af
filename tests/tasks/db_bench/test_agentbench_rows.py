"""AgentBench DB-bench rows whose reset failed on a server: the sandbox is built from the
row's table and the reference SQL runs there, then the oracle solves the row and an agent
that changes nothing does not.

The rows are minimal ones in AgentBench's jsonl shape, built after the failing rows the
issue names (the shipped dev split holds no row with any of these traits): each keeps the
trait that failed (a table name that starts with digits, a TEXT column compared with a
number in an UPDATE, whether it holds other text or numbers only, a column name with `%`)
and the reference SQL's way of writing it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from src.agents.instance.oracle_agent import OracleAgent
from src.records.episode import EpisodeStatus, Outcome, StepInfo
from src.run.rollout import roll_out_lockstep
from src.tasks.instance.db_bench.task_single_skill import DBBenchSingleSkill


def agentbench_row(table: str, columns: list[str], rows: list[list[str]], kind: str,
                   reference_sql: str) -> dict[str, Any]:
    return {"description": "Change the table as asked.", "label": [reference_sql],
            "type": [kind], "answer_md5": "",
            "table": {"table_name": table,
                      "table_info": {"columns": [{"name": name, "type": "TEXT"}
                                                 for name in columns],
                                     "rows": rows}}}


# SQLite and PostgreSQL read a bare name that starts with digits as a number.
DIGIT_TABLE_INSERT = agentbench_row(
    "1952_British_Grand_Prix_0", ["Pos", "Driver", "Constructor", "Laps"],
    [["1", "Alberto Ascari", "Ferrari", "85"], ["2", "Piero Taruffi", "Ferrari", "84"]],
    "INSERT", "INSERT INTO 1952_British_Grand_Prix_0 (Pos, Driver, Constructor, Laps) "
              "VALUES ('3', 'Mike Hawthorn', 'Cooper-Bristol', '83')")
# MariaDB's strict mode: "Truncated incorrect DECIMAL value: '2010–11'".
TEXT_YEAR_UPDATE = agentbench_row(
    "Soccer Team Performance Table", ["Year", "Division", "League"],
    [["2010", "4", "NPSL"], ["2010–11", "5", "CSL I"], ["2015", "4", "NPSL"]],
    "UPDATE", "UPDATE `Soccer Team Performance Table` SET League = 'CSL II' WHERE Year = 2015")
# PostgreSQL was sent `"Win %%"`; MySQL's table hash failed the same way.
PERCENT_COLUMN_UPDATE = agentbench_row(
    "Tournament Results", ["Tournament", "2012", "Win %"],
    [["Davis Cup", "F", "76.19"], ["Olympic Games", "SF", "80.00"]],
    "UPDATE", "UPDATE `Tournament Results` SET `Win %` = '81.25' WHERE `Tournament` = 'Davis Cup'")

# PostgreSQL has no text = integer operator: `WHERE "Game"=39` needs a numeric column there.
NUMBER_COLUMN_UPDATE = agentbench_row(
    "game_results", ["Game", "January", "Opponent", "Score", "Record"],
    [["38", "2", "Buffalo Sabres", "4 - 3", "27-9-2"],
     ["39", "4", "Winnipeg Jets", "5 - 2", "28-9-2"],
     ["40", "6", "Ottawa Senators", "3 - 3", "28-9-3"]],
    "UPDATE", "UPDATE game_results SET Score='5 - 3' WHERE Game=39")


def solve(row: dict[str, Any], url: str, folder: Path) -> StepInfo:
    """The final info of the oracle's episode, after checking that doing nothing fails."""
    path = folder / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    task = DBBenchSingleSkill(source="agentbench", data_file_path=str(path),
                              sandbox={"url": url})
    environment = task.new_episode()
    environment.reset(options={"sample_id": "rows-0001"})  # runs the reference SQL
    *_, info = environment.step("Action: Answer\nFinal Answer: []")
    assert info["outcome"] is Outcome.INCORRECT  # the reference did change the table
    environment.reset(options={"sample_id": "rows-0001"})
    environment.step(environment.oracle_reply())
    *_, info = environment.step(environment.oracle_reply())
    environment.close()
    assert info["outcome"] is Outcome.CORRECT
    return info


def test_insert_into_a_table_named_with_leading_digits(sandbox_url: str,
                                                       tmp_path: Path) -> None:
    solve(DIGIT_TABLE_INSERT, sandbox_url, tmp_path)


@pytest.mark.parametrize("backend", ["sqlite", "mysql"])
def test_update_comparing_a_text_column_with_a_number(sandbox_url: str, tmp_path: Path) -> None:
    """As on AgentBench's MySQL: '2015' = 2015 holds and '2010–11' is only a warning.
    (PostgreSQL has no text = integer operator at all: not this row's server.)"""
    solve(TEXT_YEAR_UPDATE, sandbox_url, tmp_path)


def test_column_named_with_a_percent_sign(backend: str, sandbox_url: str,
                                          tmp_path: Path) -> None:
    info = solve(PERCENT_COLUMN_UPDATE, sandbox_url, tmp_path)
    if backend == "mysql":
        assert re.fullmatch(r"[0-9a-f]{32}", info["extras"]["table_md5"] or "")


def test_update_comparing_a_column_of_numbers_with_a_number(sandbox_url: str,
                                                           tmp_path: Path) -> None:
    solve(NUMBER_COLUMN_UPDATE, sandbox_url, tmp_path)


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_row_whose_reference_sql_still_fails_is_one_failed_episode(
        sandbox_url: str, tmp_path: Path) -> None:
    """On PostgreSQL the text = integer UPDATE cannot run: that row's episodes end as task
    errors naming the sample, and the other row of the batch is solved."""
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n"
                            for row in (TEXT_YEAR_UPDATE, PERCENT_COLUMN_UPDATE)),
                    encoding="utf-8")
    task = DBBenchSingleSkill(source="agentbench", data_file_path=str(path),
                              sandbox={"url": sandbox_url})
    samples = [(task.get_sample(sample_id), group) for sample_id in ("rows-0001", "rows-0002")
               for group in range(2)]
    episodes = roll_out_lockstep(samples, task, OracleAgent(), batch_index=0, seeds=[0, 1, 2, 3])
    assert [e.status for e in episodes] == [EpisodeStatus.TASK_ERROR] * 2 + [
        EpisodeStatus.COMPLETED] * 2
    assert all("rows-0001" in e.error for e in episodes[:2])
    assert [e.outcome for e in episodes[2:]] == [Outcome.CORRECT] * 2
