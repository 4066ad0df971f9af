"""Faulty environments and models: each failure ends its own episode with a status and a
reason; a batch with too many is tried again, then skipped; a run of skips stops the run."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from src.agents.agent import AgentReply
from src.agents.instance.oracle_agent import OracleAgent
from src.configuration.models import FaultPolicy
from src.records.episode import Episode, EpisodeStatus
from src.run.rollout import hung_calls, roll_out_lockstep
from src.tasks.splits import Splits
from src.tasks.task import EpisodeScore
from tests.conftest import PROJECT_ROOT
from tests.run.flaky_math_task import FlakyMathTask
from tests.run_folders import process_command


def roll_out(task: FlakyMathTask, agent: OracleAgent, faults: FaultPolicy) -> list[Episode]:
    samples = [(task.get_sample(sample_id), group) for sample_id in task.sample_ids()[:4]
               for group in range(2)]
    return roll_out_lockstep(samples, task, agent, 0, list(range(len(samples))),
                             faults=faults)


def test_a_hanging_step_ends_its_episode_at_the_timeout() -> None:
    task = FlakyMathTask(step_hang_rate=1.0, hang_s=60.0,
                         splits=Splits(num_train=4, num_validation=1))
    start = time.monotonic()
    episodes = roll_out(task, OracleAgent(), FaultPolicy(step_timeout_s=0.2))
    assert time.monotonic() - start < 20  # 8 steps of 0.2 s, not 8 minutes
    assert {e.status for e in episodes} == {EpisodeStatus.TASK_ERROR}
    assert all("step_timeout_s=0.2" in e.error for e in episodes)


def test_an_environments_own_timeout_error_is_its_failure_not_a_hung_call() -> None:
    # TimeoutError is also what a bounded wait raises: the step's own one must not be
    # mistaken for the step running past its bound (and counted as a hung call)
    task = FlakyMathTask(step_error_rate=1.0, step_error=TimeoutError,
                         splits=Splits(num_train=4, num_validation=1))
    hung_before = hung_calls()
    episodes = roll_out(task, OracleAgent(), FaultPolicy(step_timeout_s=30.0))
    assert {e.status for e in episodes} == {EpisodeStatus.TASK_ERROR}
    assert all("injected step failure" in e.error for e in episodes)
    assert not any("step_timeout_s" in e.error for e in episodes)
    assert hung_calls() == hung_before


def test_garbage_or_an_exception_from_a_step_is_a_task_error() -> None:
    for rates, reason in (({"step_garbage_rate": 1.0}, "not a StepOutcome"),
                          ({"step_error_rate": 1.0}, "injected step failure")):
        task = FlakyMathTask(splits=Splits(num_train=4, num_validation=1), **rates)
        episodes = roll_out(task, OracleAgent(), FaultPolicy())
        assert {e.status for e in episodes} == {EpisodeStatus.TASK_ERROR}
        assert all(reason in e.error for e in episodes)


class GroupScoringFails(FlakyMathTask):
    """Its group scoring (where a judge asks its model) fails for the sample `failing`."""

    def __init__(self, failing: str) -> None:
        super().__init__(splits=Splits(num_train=4, num_validation=1))
        self.failing = failing

    def _score_group(self, episodes: Sequence[Episode]) -> list[EpisodeScore]:
        if episodes[0].sample.sample_id == self.failing:
            raise ConnectionError("the judge's host is unreachable")
        return super()._score_group(episodes)


def test_a_group_whose_scoring_raises_fails_and_the_others_are_scored() -> None:
    task = GroupScoringFails(failing="train-000001")
    episodes = roll_out(task, OracleAgent(), FaultPolicy())
    failed = [e for e in episodes if e.sample.sample_id == "train-000001"]
    assert len(failed) == 2 and all(e.status is EpisodeStatus.TASK_ERROR for e in failed)
    assert all("score_group" in e.error and "unreachable" in e.error for e in failed)
    others = [e for e in episodes if e.sample.sample_id != "train-000001"]
    assert all(e.status is EpisodeStatus.COMPLETED and e.reward == 1.0 for e in others)


class FailingAgent(OracleAgent):
    """The oracle, whose first `failures` model calls raise."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def _act(self, episodes: Sequence[Episode]) -> list[AgentReply]:
        self.calls += 1
        if self.calls <= self.failures:
            raise ConnectionError("engine unreachable")
        return super()._act(episodes)


def test_a_failing_model_call_is_retried_then_recorded() -> None:
    task = FlakyMathTask(splits=Splits(num_train=4, num_validation=1))
    agent = FailingAgent(failures=2)
    episodes = roll_out(task, agent, FaultPolicy(model_retries=2))
    assert agent.calls == 3
    assert {e.status for e in episodes} == {EpisodeStatus.COMPLETED}
    agent = FailingAgent(failures=3)
    episodes = roll_out(task, agent, FaultPolicy(model_retries=2))
    assert {e.status for e in episodes} == {EpisodeStatus.AGENT_ERROR}
    assert all("engine unreachable" in e.error for e in episodes)


ASSIGNMENT = """\
assignment_config:
  output_dir: {output}
  rollout: {{batch_size: 4, group_size: 2, max_batches: 4}}
  task:
    name: flaky_math
    module: tests.run.flaky_math_task.FlakyMathTask
    parameters: {{num_train: 16, num_validation: 2, step_error_rate: {rate}}}
  agent:
    name: oracle_agent
"""


def run(tmp_path: Path, rate: float) -> tuple[subprocess.CompletedProcess[str], Path]:
    output = tmp_path / f"rate-{rate}"
    config = tmp_path / f"rate-{rate}.yaml"
    config.write_text(ASSIGNMENT.format(output=output, rate=rate))
    result = subprocess.run(process_command(config), cwd=PROJECT_ROOT, capture_output=True,
                            text=True, timeout=300)
    return result, output


def test_failed_episodes_are_logged_and_counted_and_the_run_goes_on(tmp_path: Path) -> None:
    result, output = run(tmp_path, 0.25)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in (output / "runs.jsonl").read_text().split("\n") if line.strip()]
    failed = [r for r in records if r["status"] == "task_error"]
    assert len(records) == 32 and 0 < len(failed) < 32
    assert all("injected step failure" in r["error"] for r in failed)
    rows = [json.loads(line) for line in (output / "metrics.jsonl").read_text().split("\n") if line.strip()]
    assert sum(row["rollout/status/task_error"] * 8 for row in rows) == len(failed)


def test_a_batch_that_keeps_failing_is_skipped_and_a_run_of_skips_stops(tmp_path: Path) -> None:
    result, output = run(tmp_path, 1.0)
    assert result.returncode != 0
    assert "rollout.faults.max_skipped_in_a_row" in result.stderr
    rows = [json.loads(line) for line in (output / "metrics.jsonl").read_text().split("\n") if line.strip()]
    # the first two batches were tried twice each and skipped, and stay logged
    assert [(row["batch/tries"], row["batch/skipped"]) for row in rows] == [(2.0, 1.0)] * 2
