"""DB-bench single-skill task (LifelongAgentBench, from AgentBench): answer a question about
one table by running SQL in a private sandbox.

An episode: the first user message gives AgentBench's rules, the question and "The name
of this table is X, and the headers of this table are A,B,C."; each reply is one round,
either `Action: Operation` with one statement in a ```sql block (run in the sandbox, its
result or "Error: ..." is the next message) or `Action: Answer` with `Final Answer: [...]`.

Samples: `sample_ids(split)` are `train-NNNNNN` / `validation-NNNNNN`; each id draws, from
`seed` and the id alone, a skill (uniformly over `skills`, default all available) and then
a problem of that skill: procedurally generated, or taken from LifelongAgentBench data
(an entry_dict.json, a skill_to_tasks file, or a `SingleSkillTaskGenerator` built from one).
`source: agentbench` serves the rows of an AgentBench jsonl file instead (ids
`<file stem>-<line>`, the same for both splits: it is an evaluation set).

Grading and rewards (`reward_correct` +1.0, `reward_incorrect` -0.1, `reward_timeout` -0.3):
- A query is correct when its final answer matches the expected values (see grading).
- A modification (INSERT/UPDATE/DELETE) ignores the answer text: the table after the
  episode must hold the same rows as a fresh copy after the reference SQL, on the same
  server. On MySQL/MariaDB AgentBench's md5 table hash is computed too (info
  `table_md5`; metric `agentbench_md5_match` where the data gives the benchmark's hash).
- A malformed reply (no action, no or an empty ```sql block, no `Final Answer:` line) ends
  the episode INCORRECT with `reward_incorrect` (AgentBench's rules: "judged as FAIL
  immediately"); the metric `format_error` counts them.
- A statement that leaves the sandbox's tables larger than its `max_storage_mb` ends the
  episode INCORRECT with `reward_incorrect` (metric `storage_limit`); other bounds of the
  sandbox (time, value length, rows read, observation length) end a statement as an
  error or a cut observation, and the grader reads a table replaced by a view, or with
  other columns, as wrong.
- At the round limit (`max_round` replies, none an answer) a query is INCORRECT with
  `reward_timeout`. A modification whose table is already right is, by default
  (`modification_correct_at_round_limit: correct`), CORRECT with `reward_correct`: the
  table is what is graded, as in LifelongAgentBench; with `timeout` it is INCORRECT with
  `reward_timeout` like any other episode cut off by the limit.
Each episode's last step reports the metrics `correct` and `skill/<skill>` (1 or 0), so
that their means are the success rates overall and per skill. The reward is one of the
three settings, picked by the episode's verdict (the answer against the server's result,
or the table after every round): not a weighted sum of terms of one reply, so no `Rubric`.

`DBBenchSingleSkill` is the family (the problem source, the settings); `DBBenchEpisode` is
one episode, owning its sandbox from reset until the episode ends or it is closed.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from src.configuration.components import COMPONENTS
from src.records.episode import Outcome, Sample
from src.tasks.instance.db_bench.data_loaders import load_agentbench_jsonl
from src.tasks.instance.db_bench.grading import (
    answers_match,
    format_final_answer,
    parse_final_answer,
    tables_match,
)
from src.tasks.instance.db_bench.problem import DBBenchProblem, ProblemKind, Value
from src.tasks.instance.db_bench.procedural_generator import ProceduralTaskGenerator
from src.tasks.instance.db_bench.reference_sql import translate_reference_sql
from src.tasks.instance.db_bench.reply_parser import Answer, FormatFailure, parse_reply
from src.tasks.instance.db_bench.sandbox import SandboxSettings, SqlSandbox
from src.tasks.instance.db_bench.single_skill_task_generator import SingleSkillTaskGenerator
from src.tasks.instance.db_bench.skills import check_skills
from src.tasks.splits import Count, SplitsWithSelection
from src.tasks.task import (
    EpisodeEnv,
    Rounds,
    StepOutcome,
    Task,
    parse_split_sample_id,
)

_DATABASE_NAMES = {"sqlite": "SQLite", "mysql": "MySQL", "postgresql": "PostgreSQL"}
# AgentBench's DB-bench prompt, with the server's name where it says MySQL.
RULES = """I will ask you a question, then you should help me operate a {database} database with SQL to answer the question.
You have to explain the problem and your solution to me and write down your thoughts.
After thinking and explaining thoroughly, every round you can choose to operate or to answer.
your operation should be like this:
Action: Operation
```sql
SELECT * FROM table WHERE condition;
```
You MUST put SQL in markdown format without any other comments. Your SQL should be in one line.
Every time you can only execute one SQL statement. I will only execute the statement in the first SQL code block. Every time you write a SQL, I will execute it for you and give you the output.
If you are done operating, and you want to commit your final answer, then write down:
Action: Answer
Final Answer: ["ANSWER1", "ANSWER2", ...]
DO NOT write this pattern unless you are sure about your answer. I expect an accurate and correct answer.
Your answer should be accurate. Your answer must be exactly the same as the correct answer.
If the question is about modifying the database, then after done operation, your answer field can be anything.
If your response cannot match any pattern I mentioned earlier, you will be judged as FAIL immediately.
Your input will be raw {database} response, you have to deal with it by yourself."""


class ProblemGenerator(Protocol):
    def get_available_skills(self, split: str = "train") -> list[str]: ...

    def generate(self, skill: str, split: str, rng: random.Random) -> DBBenchProblem: ...


class ReferenceSqlError(RuntimeError):
    """A problem's reference SQL fails on this server: the data or the server is at fault."""


@dataclass
class _EpisodeState:
    """What an episode holds from its reset until it ends (then the sandbox is dropped)."""

    problem: DBBenchProblem
    sandbox: SqlSandbox
    reference_sql: str | None  # in the sandbox's dialect
    expected: tuple[Value, ...] = ()  # a query's answer
    reference_rows: list[tuple[Value, ...]] | None = None  # a modification's table
    operations: int = 0
    sql_errors: int = 0


class DBBenchSplits(SplitsWithSelection):
    """DB-bench's splits, 1024 training problems by default."""

    num_train: Count = 1024  # the samples trained on


@COMPONENTS.register("db_bench_single_skill")
class DBBenchSingleSkill(Task["DBBenchEpisode"]):
    """DB-bench (LifelongAgentBench's single-skill SQL, from AgentBench): answer a question
    about one table by running SQL statements in a private sandbox, one a round. A query is
    correct when its final answer matches; a modification when its table matches the
    reference SQL's; a malformed reply fails at once with `reward_incorrect`, and the
    round limit scores `reward_timeout`. Metrics: `correct`, `format_error`,
    `round_limit`, `storage_limit`, `sql_errors`, `skill/<skill>`, and on MySQL/MariaDB
    `agentbench_md5_match`. The module docstring has the details."""

    def __init__(
        self,
        # procedural: seeded tables and questions for the 22 skills; lifelong_agent_bench:
        # LifelongAgentBench data (one of the next three); agentbench: the rows of an
        # AgentBench jsonl in `data_file_path`, the same for every split (an evaluation
        # set). Left out: lifelong_agent_bench where one of the next three is given
        source: Literal["procedural", "lifelong_agent_bench", "agentbench"] | None = None,
        data_file_path: str | None = None,  # entry_dict.json, or the AgentBench jsonl
        skill_to_tasks_path: str | None = None,  # LifelongAgentBench's skill_to_tasks file
        # LifelongAgentBench's nested component, built from one of its data files
        single_skill_task_generator: SingleSkillTaskGenerator | None = None,
        skills: list[str] | None = None,  # each sample draws one of them; default all
        # `seed` draws each sample's skill and problem; a selection split is the procedural
        # source's only (a data file's held-out rows are validation's)
        splits: DBBenchSplits = DBBenchSplits(),
        random_seed: int | None = None,  # LifelongAgentBench's name for `seed`
        # the database each episode runs in: a fresh database or schema, with a user that
        # can reach only it, dropped when the episode ends
        sandbox: SandboxSettings | None = None,
        max_round: Rounds = 3,  # replies an episode may take
        reward_correct: float = 1.0,
        reward_incorrect: float = -0.1,  # also a malformed reply
        reward_timeout: float = -0.3,  # the round limit hit without an answer
        # correct: a modification whose table is right when the round limit hits earns
        # `reward_correct` (the table is graded, as in LifelongAgentBench); timeout: it is
        # cut off like any other episode
        modification_correct_at_round_limit: Literal["correct", "timeout"] = "correct",
        # held-out problem i (validation and selection) takes the i-th skill in turn (88
        # problems: 4 of each of 22 skills), for per-skill figures with equal counts
        stratified_validation: bool = False,
    ) -> None:
        super().__init__(max_round=max_round)
        if random_seed is not None:
            if "seed" in splits.model_fields_set and splits.seed != random_seed:
                raise ValueError(f"seed {splits.seed} and random_seed {random_seed} differ: "
                                 "give one")
            splits = splits.model_copy(update={"seed": random_seed})
        # model_validate also takes the plain dicts of direct Python construction
        self.sandbox_settings = SandboxSettings.model_validate(sandbox or {})
        self.splits = splits
        self.reward_correct = reward_correct
        self.reward_incorrect = reward_incorrect
        self.reward_timeout = reward_timeout
        self.modification_correct_at_round_limit = modification_correct_at_round_limit
        self.stratified_validation = stratified_validation
        self._generator: ProblemGenerator | None = None
        self._fixed: dict[str, Sample] = {}
        self.skills: tuple[str, ...] = ()
        data_sources = [name for name, value in (
            ("data_file_path", data_file_path), ("skill_to_tasks_path", skill_to_tasks_path),
            ("single_skill_task_generator", single_skill_task_generator)) if value is not None]
        if source is None:
            source = "lifelong_agent_bench" if data_sources else "procedural"
        if splits.num_selection and source != "procedural":
            raise ValueError(f"num_selection: {splits.num_selection} selection problems asked of "
                             f"source '{source}', but only the procedural source draws a "
                             "selection split")
        if source == "agentbench":
            if data_sources != ["data_file_path"] or skills is not None:
                raise ValueError("source 'agentbench' needs data_file_path (an AgentBench jsonl) "
                                 "and takes no other data source nor skills")
            self._fixed = {s.sample_id: s for s in load_agentbench_jsonl(data_file_path)}
            if not self._fixed:
                raise ValueError(f"data_file_path: {data_file_path} holds no AgentBench rows")
            return
        if source == "procedural":
            if data_sources:
                raise ValueError(f"source 'procedural' reads no {', '.join(data_sources)}")
            self._generator = ProceduralTaskGenerator()
        elif len(data_sources) != 1:
            raise ValueError("source 'lifelong_agent_bench' needs exactly one of data_file_path "
                             "(entry_dict.json), skill_to_tasks_path and "
                             f"single_skill_task_generator (given: {data_sources or 'none'})")
        elif single_skill_task_generator is not None:
            self._generator = single_skill_task_generator
        elif data_file_path is not None:
            self._generator = SingleSkillTaskGenerator.load_from_existing_data(data_file_path)
        else:
            self._generator = SingleSkillTaskGenerator(skill_to_tasks_path=skill_to_tasks_path)
        available = self._generator.get_available_skills("train")
        if skills is not None:
            check_skills(skills, "skills")
            missing = [skill for skill in skills if skill not in available]
            if missing:
                raise ValueError(f"skills: no tasks for {missing} in this source "
                                 f"(available: {available})")
        self.skills = tuple(skills) if skills is not None else tuple(available)
        if not self.skills:
            raise ValueError(f"source '{source}' offers no single-skill tasks")

    # ---- samples -------------------------------------------------------------------
    def sample_ids(self, split: str = "train") -> Sequence[str]:
        if self._fixed:  # an evaluation set: the same rows for train and validation
            return [] if split == "selection" else list(self._fixed)
        return self.splits.sample_ids(split)

    def _get_sample(self, sample_id: str) -> Sample:
        if self._fixed:
            if sample_id not in self._fixed:
                raise KeyError(f"no AgentBench row '{sample_id}'")
            return self._fixed[sample_id]
        split, index = parse_split_sample_id(sample_id)
        assert self._generator is not None  # every source but agentbench has one
        rng = random.Random(f"{self.splits.seed}:{sample_id}")
        offered = set(self._generator.get_available_skills(split))
        choices = [skill for skill in self.skills if skill in offered]
        if not choices:
            raise KeyError(f"sample '{sample_id}': no {split} tasks for skills {list(self.skills)}")
        skill = rng.choice(choices)  # drawn either way: the problem's own draws stay the same
        if split != "train" and self.stratified_validation:
            skill = choices[index % len(choices)]
        problem = self._generator.generate(skill, split, rng)
        return Sample(sample_id=sample_id, category=skill, data=problem.model_dump(mode="json"))

    def new_episode(self) -> DBBenchEpisode:
        return DBBenchEpisode(self)


class DBBenchEpisode(EpisodeEnv[DBBenchSingleSkill]):
    def __init__(self, family: DBBenchSingleSkill) -> None:
        super().__init__(family)
        self._state: _EpisodeState | None = None
        self._limit_result = (Outcome.INCORRECT, family.reward_timeout)

    def _reset(self, sample: Sample) -> str:
        self._end_episode()
        problem = DBBenchProblem.model_validate(sample.data)
        sandbox = SqlSandbox(self.family.sandbox_settings, problem.table)
        try:
            self._state = self._prepare(sample.sample_id, problem, sandbox)
        except Exception:
            sandbox.close()
            raise
        self._limit_result = (Outcome.INCORRECT, self.family.reward_timeout)
        database = _DATABASE_NAMES[sandbox.dialect]
        return (f"{RULES.format(database=database)}\n\n{problem.question}\n"
                f"{problem.table.describe()}")

    def _prepare(self, sample_id: str, problem: DBBenchProblem,
                 sandbox: SqlSandbox) -> _EpisodeState:
        """Ground truth from the reference SQL, run on this server before the agent acts."""
        reference = None
        if problem.reference_sql is not None:
            reference = translate_reference_sql(problem.reference_sql, sandbox.dialect,
                                                sandbox.quote, problem.table)
        state = _EpisodeState(problem, sandbox, reference,
                              expected=problem.expected_answer or ())
        if problem.kind is ProblemKind.QUERY and problem.expected_answer is not None:
            return state
        assert reference is not None  # DBBenchProblem requires it here
        result = sandbox.execute(reference)
        if result.error is not None:
            raise ReferenceSqlError(f"sample '{sample_id}': the reference SQL fails on "
                                    f"{sandbox.dialect}: {result.error}\n  SQL: {reference}")
        if problem.kind is ProblemKind.QUERY:
            state.expected = result.flat_values()
        else:
            state.reference_rows = sandbox.table_rows()
            if state.reference_rows is None:
                raise ReferenceSqlError(f"sample '{sample_id}': the table after the reference "
                                        f"SQL cannot be read on {sandbox.dialect} within the "
                                        f"sandbox's bounds\n  SQL: {reference}")
            sandbox.restore_rows()  # the agent starts from a fresh copy
        return state

    def _step(self, action: str) -> StepOutcome:
        state = self._current()
        reply = parse_reply(action)
        if isinstance(reply, FormatFailure):
            return self._finish(False, format_error=True)
        if isinstance(reply, Answer):
            return self._finish(self._graded(reply.text))
        result = state.sandbox.execute(reply.sql)
        state.operations += 1
        state.sql_errors += result.error is not None
        if state.sandbox.storage_exceeded:
            return self._finish(False, storage_limit=True)
        observation = state.sandbox.observation(result)
        if self.round_index < self.family.max_round:
            return StepOutcome(observation=observation)
        # The round limit ends the episode after this reply: grade now, then drop the sandbox.
        correct = (state.problem.kind is ProblemKind.MODIFICATION
                   and self.family.modification_correct_at_round_limit == "correct"
                   and self._table_correct())
        self._limit_result = ((Outcome.CORRECT, self.family.reward_correct) if correct
                              else (Outcome.INCORRECT, self.family.reward_timeout))
        metrics, info = self._final_figures(correct, round_limit=True)
        self._end_episode()
        return StepOutcome(observation=observation, metrics=metrics, info=info)

    def _at_round_limit(self) -> tuple[Outcome, float]:
        return self._limit_result

    def _finish(self, correct: bool, format_error: bool = False,
                storage_limit: bool = False) -> StepOutcome:
        metrics, info = self._final_figures(correct, format_error=format_error,
                                            storage_limit=storage_limit)
        self._end_episode()
        family = self.family
        return StepOutcome(observation="", terminated=True,
                           reward=family.reward_correct if correct else family.reward_incorrect,
                           outcome=Outcome.CORRECT if correct else Outcome.INCORRECT,
                           metrics=metrics, info=info)

    def _graded(self, answer_text: str) -> bool:
        state = self._current()
        if state.problem.kind is ProblemKind.MODIFICATION:
            return self._table_correct()
        return answers_match(parse_final_answer(answer_text), state.expected,
                             state.problem.ordered)

    def _table_correct(self) -> bool:
        state = self._current()
        return tables_match(state.sandbox.table_rows(), state.reference_rows)

    def _final_figures(self, correct: bool, format_error: bool = False,
                       round_limit: bool = False,
                       storage_limit: bool = False) -> tuple[dict[str, float], dict[str, Any]]:
        """The metrics and info of the episode's last step."""
        state = self._current()
        metrics = {
            "correct": float(correct),
            "format_error": float(format_error),
            "round_limit": float(round_limit),
            "storage_limit": float(storage_limit),
            "sql_errors": float(state.sql_errors),
        }
        for skill in state.problem.skills:
            metrics[f"skill/{skill}"] = float(correct)
        info: dict[str, Any] = {}
        if state.problem.kind is ProblemKind.MODIFICATION and state.sandbox.dialect == "mysql":
            info["table_md5"] = state.sandbox.table_md5()
            if state.problem.answer_md5 is not None:
                metrics["agentbench_md5_match"] = float(
                    info["table_md5"] == state.problem.answer_md5)
        return metrics, info

    def _oracle_reply(self) -> str:
        """The expert: runs the reference SQL, then answers (a query with the values it
        returned), as a demonstration should read; where the round limit leaves no room
        for both, or a query has no reference SQL, a query is answered at once."""
        state = self._current()
        room_for_two = self.round_index + 1 < self.family.max_round
        if state.operations == 0 and state.reference_sql is not None and (
                state.problem.kind is ProblemKind.MODIFICATION or room_for_two):
            return f"Action: Operation\n```sql\n{state.reference_sql}\n```"
        if state.problem.kind is ProblemKind.QUERY:
            return f"Action: Answer\nFinal Answer: {format_final_answer(state.expected)}"
        return "Action: Answer\nFinal Answer: []"

    # ---- resources -----------------------------------------------------------------
    def _current(self) -> _EpisodeState:
        if self._state is None:
            raise RuntimeError("no DB-bench episode in progress (reset() first)")
        return self._state

    def _end_episode(self) -> None:
        if self._state is not None:
            self._state.sandbox.close()
            self._state = None

    def close(self) -> None:
        self._end_episode()

