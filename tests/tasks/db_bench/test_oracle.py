"""The oracle solves what the task hands out, on every backend; a wrong agent solves nothing.

Run with `-s` to see the table of oracle success per backend. No AgentBench dev row is
excluded on PostgreSQL: reference SQL is translated (names re-quoted, bare mixed-case
column names quoted) so that all 60 run there too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from src.agents.agent import Agent, AgentReply
from src.agents.instance.oracle_agent import OracleAgent
from src.records.episode import Episode, EpisodeStatus, Outcome, Sample
from src.run.rollout import roll_out_lockstep
from src.tasks.instance.db_bench.problem import DBBenchProblem, ProblemKind
from src.tasks.instance.db_bench.skills import SKILLS
from src.tasks.instance.db_bench.task_single_skill import DBBenchSingleSkill, DBBenchSplits
from tests.tasks.db_bench.servers import BACKENDS

DEV_FILE = Path("agentbench-dbbench") / "dev.jsonl"
GENERATED_PER_SKILL = {"sqlite": 5, "mysql": 2, "postgresql": 2}  # servers are slower
CHUNK = 16  # episodes stepped together, each with its own sandbox
RESULTS: dict[tuple[str, str], tuple[int, int]] = {}  # (row, backend) -> (correct, total)


@pytest.fixture(scope="module", autouse=True)
def print_oracle_table() -> Iterator[None]:
    yield
    rows = list(dict.fromkeys(row for row, _ in RESULTS))
    if not rows:
        return
    width = max(len(row) for row in rows)
    lines = ["", "Oracle success per backend ('-': not applicable, or the server is down)",
             f"{'':{width}}  " + "  ".join(
        f"{backend:>18}" for backend in BACKENDS)]
    for row in rows:
        cells = []
        for backend in BACKENDS:
            correct, total = RESULTS.get((row, backend), (0, 0))
            cells.append(f"{correct:>4}/{total:<4} ({100 * correct / total:5.1f}%)" if total
                         else f"{'-':>18}")
        lines.append(f"{row:{width}}  " + "  ".join(cells))
    print("\n".join(lines))


class WrongAgent(Agent):
    """Answers a value that no table holds; on a modification task it empties the table."""

    def __init__(self, quote: Callable[[str], str]) -> None:
        self.quote = quote

    def _act(self, episodes: Sequence[Episode]) -> list[AgentReply]:
        replies = []
        for episode in episodes:
            problem = DBBenchProblem.model_validate(episode.sample.data)
            if problem.kind is ProblemKind.MODIFICATION and episode.turns == 0:
                replies.append(AgentReply(f"Action: Operation\n```sql\nDELETE FROM "
                                          f"{self.quote(problem.table.name)}\n```"))
            else:
                replies.append(AgentReply('Action: Answer\nFinal Answer: ["no such value"]'))
        return replies


def quote_for(backend: str) -> Callable[[str], str]:
    mark = "`" if backend == "mysql" else '"'
    return lambda name: mark + name.replace(mark, mark * 2) + mark


def roll(task: DBBenchSingleSkill, samples: Sequence[Sample], agent: Agent) -> list[Episode]:
    episodes: list[Episode] = []
    for start in range(0, len(samples), CHUNK):
        chunk = samples[start:start + CHUNK]
        episodes += roll_out_lockstep([(sample, 0) for sample in chunk], task, agent,
                                      batch_index=0, seeds=[0] * len(chunk))
    return episodes


def generated_samples(url: str, per_skill: int) -> list[Sample]:
    samples = []
    for skill in SKILLS:
        task = DBBenchSingleSkill(skills=[skill], splits=DBBenchSplits(num_train=per_skill),
                                  sandbox={"url": url})
        samples += [task.get_sample(sample_id) for sample_id in task.sample_ids("train")]
    return samples


def dev_task(url: str, data: Path) -> DBBenchSingleSkill:
    return DBBenchSingleSkill(source="agentbench", data_file_path=str(data / DEV_FILE),
                              sandbox={"url": url})


def record(row: str, backend: str, episodes: Sequence[Episode]) -> int:
    correct = sum(episode.outcome is Outcome.CORRECT for episode in episodes)
    RESULTS[(row, backend)] = (correct, len(episodes))
    return correct


def test_oracle_solves_every_generated_skill(backend: str, sandbox_url: str) -> None:
    samples = generated_samples(sandbox_url, GENERATED_PER_SKILL[backend])
    episodes = roll(DBBenchSingleSkill(sandbox={"url": sandbox_url}), samples, OracleAgent())
    failed = [(e.sample.sample_id, e.sample.category, e.status, e.error)
              for e in episodes if e.outcome is not Outcome.CORRECT]
    for skill in SKILLS:
        record(f"generated: {skill}", backend,
               [e for e in episodes if e.sample.category == skill])
    record("generated: all 22 skills", backend, episodes)
    assert not failed
    for episode in episodes:
        assert episode.metrics[f"skill/{episode.sample.category}"] == 1.0
        assert episode.reward == 1.0


def test_oracle_on_agentbench_dev_rows(backend: str, sandbox_url: str,
                                       shared_data: Path) -> None:
    task = dev_task(sandbox_url, shared_data)
    samples = [task.get_sample(sample_id) for sample_id in task.sample_ids("validation")]
    episodes = roll(task, samples, OracleAgent())
    assert len(episodes) == 60
    for kind in ("query", "modification"):
        record(f"AgentBench dev: {kind}", backend,
               [e for e in episodes if e.sample.data["kind"] == kind])
    correct = record("AgentBench dev: all rows", backend, episodes)
    assert correct / len(episodes) >= 0.98, [
        (e.sample.sample_id, e.status, e.error) for e in episodes
        if e.outcome is not Outcome.CORRECT]
    if backend == "mysql":  # AgentBench's own verdict: the table hash after the episode
        matches = [e.metrics["agentbench_md5_match"] for e in episodes
                   if "agentbench_md5_match" in e.metrics]
        RESULTS[("AgentBench dev: md5 = answer_md5", backend)] = (int(sum(matches)),
                                                                   len(matches))
        assert len(matches) == 40 and sum(matches) / len(matches) >= 0.98


def test_wrong_agent_scores_zero(backend: str, sandbox_url: str, shared_data: Path) -> None:
    agent = WrongAgent(quote_for(backend))
    generated = roll(DBBenchSingleSkill(sandbox={"url": sandbox_url}),
                     generated_samples(sandbox_url, 1), agent)
    task = dev_task(sandbox_url, shared_data)
    dev = [task.get_sample(sample_id) for sample_id in task.sample_ids("validation")]
    if backend != "sqlite":  # query rows grade the same everywhere; servers are slow
        dev = [sample for sample in dev if sample.data["kind"] == "modification"]
    episodes = generated + roll(task, dev, agent)
    assert all(e.status is EpisodeStatus.COMPLETED for e in episodes)
    assert [e.sample.sample_id for e in episodes if e.outcome is Outcome.CORRECT] == []
    assert all(e.reward == -0.1 for e in episodes)
