"""Fuzzing the SQL that a model writes, through the DB-bench episode on SQLite, MariaDB (or
MySQL) and PostgreSQL: `Action: Operation` replies stepped as a run steps them, episodes
ending in an answer or at the round limit, so that the grader reads the table too.

Each backend gets the fixed hostile corpus (`corpus`: a table renamed away and an endless
view in its place, the time limit switched off with quoted and U&-escaped set_config or
SET, huge values, value-building calls (printf/format widths, padding, repetition,
fills, joins, aggregation), sorts and de-duplications over endless rows, table options
that name a place on disk, other engines, temporary tables and row-level security, many
and wide rows, storage growth, deep nesting, long and non-text strings, stacked
statements, file and namespace escapes) and `--tries` replies built from
seeded mutations and combinations of those statements, the oracle's SQL and `FRAGMENTS`.
Counted per backend (tries: replies stepped):

- crashes: an exception out of reset, step or close (a run ends such an episode as
  `task_error`);
- unscored: steps whose status is a failure (`EpisodeStatus.failed`);
- bounds exceeded: a step slower than its bound (the bounded reads it may make, the
  model's statement, the storage check and at the end the grader's, each at most the time
  limit plus the client's grace, plus `SLACK_S`), an observation longer than
  `max_observation_chars` and its note, a reward or metric that is not finite, the
  process's peak memory during a step grown by more than `PEAK_GROWTH_MB` over what it
  held before, its resident memory grown by more than `RSS_GROWTH_MB` over the backend,
  and sandboxes (databases, schemas, users) left on a server.

    python -m experiments.hostile_inputs.fuzz_sql --seed 0 --tries 400 \\
        --output outputs/hostile_inputs/fuzz_sql.json

A server that does not answer is reported and skipped (DBBENCH_MYSQL_URL and
DBBENCH_POSTGRES_URL point elsewhere, as for the tests).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

from sqlalchemy import create_engine

from experiments.hostile_inputs.fuzz_model_text import (
    RSS_GROWTH_MB,
    Tally,
    check_memory,
    progress,
    random_character,
    resident_mb,
    summary_table,
)
from src.records.episode import Outcome
from src.tasks.instance.db_bench.problem import DBBenchProblem
from src.tasks.instance.db_bench.sandbox_backends.base import CANCEL_GRACE_S
from src.tasks.instance.db_bench.sandbox_backends.postgresql_databases import drop_kept_databases
from src.tasks.instance.db_bench.task_single_skill import (
    DBBenchEpisode,
    DBBenchSingleSkill,
    DBBenchSplits,
)
from tests.tasks.db_bench.servers import MYSQL_URL, POSTGRES_URL, unreachable_reason

TIMEOUT_S = 0.5  # the sandbox's statement limit here: short, so that many tries fit
SLACK_S = 1.0
PEAK_GROWTH_MB = 200.0
MAX_ROUND = 4
MAX_SQL_CHARS = 2 * 2**20
NOTE_CHARS = 80  # the note after a cut observation
URLS = {"sqlite": "sqlite://", "mysql": MYSQL_URL, "postgresql": POSTGRES_URL}
ENDLESS = "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT count(*) FROM c"
# Pieces that hostile SQL is made of: syntax, quoting and comment openers left open,
# escapes, functions that sleep, grow or reach out, and text that is no text.
FRAGMENTS: tuple[str, ...] = (
    "SELECT ", " FROM {t}", " WHERE 1 = 1", " UNION ALL SELECT * FROM {t}", " ORDER BY 1",
    " LIMIT 5", " GROUP BY 1", "(", ")", ";", ",", "'", '"', "`", "[", "]", "/*", "*/", "-- ",
    "#", "/*!", "/*M!", "$$", "$x$", 'U&"', "U&'", " UESCAPE '!'", "\\", "\\0073", "!0073",
    "set_config", '"set_config"', 'U&"\\0073et_config"', "pg_settings", "query_to_xml",
    "SET ", "RESET ", "max_statement_time = 0", "statement_timeout = 0",
    "SET STATEMENT max_statement_time = 0 FOR ", "pg_sleep(3)", "SLEEP(3)",
    "randomblob(300000000)", "zeroblob(300000000)", "repeat('a', 300000000)",
    "lpad('a', 16000000, 'b')", "generate_series(1, 100000000)", "seq_1_to_100000000",
    ENDLESS, "ALTER TABLE {t} RENAME TO old_t", "CREATE VIEW {t} AS ", "DROP TABLE {t}",
    "CREATE TABLE big AS ", "INSERT INTO {t} SELECT * FROM {t}", "load_extension('x')",
    "LOAD_FILE('/etc/passwd')", "pg_read_file('/etc/passwd')", "ATTACH DATABASE 'x' AS y",
    "PRAGMA max_page_count = 1000000", "\x00", "\udc80", "\ufeff", "é", "😀", "NULL",
    "1e308", "-9223372036854775808", "0x41", "X'41'", "E'\\x41'",
    # value builders: widths, padding, repetition, joins, aggregation
    "printf('%.*c', 2147483647, 'x')", "format('%.2147483647c', 'x')",
    "format('%300000000s', 'x')", "format('%*s', 300000000, 'x')", "rpad('a', 300000000)",
    "array_fill(1, ARRAY[100000000])", "space(1000000000)", "VARIADIC ",
    "array_to_string(array_fill(''::text, ARRAY[10000]), repeat('a', 100000))",
    "replace(repeat('a', 100000), 'a', repeat('b', 100000))", "'a'::char(10000000)",
    "string_agg(repeat('a', 100000), '')", "group_concat(randomblob(60000))",
    # sorts and de-duplications over endless rows
    " ORDER BY randomblob(60000)", " ORDER BY repeat(n::text, 60000)", " UNION ", " DISTINCT ",
    # table options that name a place on disk, engines, temporary tables
    " DATA DIRECTORY='/tmp'", " INDEX DIRECTORY='/tmp'", " ENGINE=MyISAM", " ENGINE=Aria",
    " ENGINE=CSV", "CREATE TEMPORARY TABLE ", " ENABLE ROW LEVEL SECURITY",
)


def corpus(backend: str) -> list[list[str]]:
    """Hostile statement sequences (one reply each), `{t}` standing for the table."""
    sleep = {"sqlite": ENDLESS, "mysql": "SELECT SLEEP(4)", "postgresql": "SELECT pg_sleep(4)"}
    endless_view = {"sqlite": ENDLESS, "postgresql": ENDLESS,
                    "mysql": "SELECT SLEEP(100) AS x"}[backend]
    sequences = [
        ["ALTER TABLE {t} RENAME TO old_t", f"CREATE VIEW {{t}} AS {endless_view}"],
        ["ALTER TABLE {t} RENAME TO old_t", "CREATE VIEW {t} AS SELECT * FROM old_t"],
        ["ALTER TABLE {t} ADD COLUMN extra INT"],
        ["SELECT 1; " * 10_000],
        ["SELECT " + "(" * 5_000 + "1" + ")" * 5_000],
        ["SELECT '" + "a" * MAX_SQL_CHARS + "'"],
        ["SELECT '\udc80\x00'"], ["SELECT 'é😀\ufeff'"],
        ["SELECT * FROM {t} a, {t} b, {t} c, {t} d, {t} e"],
    ]
    if backend == "sqlite":
        endless_blobs = ("WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) "
                         "SELECT randomblob(60000) AS b FROM c")
        sequences += [["SELECT printf('%.*c', 2147483647, 'x'), printf('%.*c', 2147483647, "
                       "'x'), printf('%.*c', 2147483647, 'x')"],
                      ["SELECT format('%!.*c', -2147483647, 'x')",
                       "SELECT printf('%.99999c%.99999c', 'x', 'y')"],
                      [f"SELECT b FROM ({endless_blobs}) ORDER BY b",
                       f"{endless_blobs} UNION {endless_blobs}",
                       f"SELECT count(DISTINCT b) FROM ({endless_blobs})"],
                      ["SELECT randomblob(300000000)"], ["SELECT zeroblob(300000000)"],
                      ["CREATE TABLE big AS SELECT randomblob(300000000) AS b"],
                      ["SELECT " + ", ".join(["zeroblob(90000)"] * 300)],
                      ["CREATE TABLE big AS WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL "
                       "SELECT n + 1 FROM c WHERE n < 300) SELECT randomblob(90000) AS b FROM c"],
                      ["WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) "
                       "SELECT n FROM c"],
                      ["SELECT [load_extension]('x')", 'SELECT "readfile"(\'/etc/passwd\')']]
    elif backend == "mysql":
        sequences += [["SET SESSION max_statement_time = 0", sleep["mysql"]],
                      ["SET STATEMENT max_statement_time = 0 FOR SELECT SLEEP(4)"],
                      ["/*!SET max_statement_time = 0 */ SELECT SLEEP(4)"],
                      ["SELECT repeat('a', 16000000)", "SELECT lpad('a', 3000000, 'b')"],
                      ["SELECT " + ", ".join(["repeat('a', 16000000)"] * 20)],
                      ["SELECT a.seq FROM seq_1_to_5000 a, seq_1_to_5000 b"],
                      ["CREATE TABLE big (b MEDIUMTEXT)",
                       "INSERT INTO big SELECT repeat('a', 90000) FROM seq_1_to_300",
                       "INSERT INTO big SELECT * FROM big"],
                      ["CREATE TABLE m (b VARCHAR(1000)) ENGINE=MEMORY",
                       "INSERT INTO m SELECT repeat('a', 1000) FROM seq_1_to_100000"],
                      ["SELECT `load_file`('/etc/passwd')", "SELECT BENCHMARK(1e12, MD5('a'))"],
                      ["SELECT space(1000000000), rpad('a', 1000000000, 'b')"],
                      ["CREATE TABLE d1 (v TEXT) ENGINE=MyISAM DATA DIRECTORY='/tmp' "
                       "INDEX DIRECTORY='/tmp'", "CREATE TABLE d2 (v TEXT) ENGINE=Aria "
                       "DATA /* x */ DIRECTORY \"/tmp\"", "CREATE TABLE d3 (v INT) "
                       "PARTITION BY HASH(v) (PARTITION p0 DATA DIRECTORY='/tmp')"],
                      ["CREATE TABLE e (v INT NOT NULL) ENGINE=CSV",
                       "CREATE TEMPORARY TABLE {t} AS SELECT * FROM {t} WHERE 0"],
                      ["CREATE TEMPORARY TABLE big (b MEDIUMTEXT)",
                       "INSERT INTO big SELECT repeat('a', 90000) FROM seq_1_to_300"],
                      ["SELECT DISTINCT repeat(seq, 1000) FROM seq_1_to_100000000",
                       "SELECT seq FROM seq_1_to_100000000 ORDER BY repeat(seq, 1000)"]]
    else:
        sequences += [["SELECT \"set_config\"('statement_timeout', '0', false)",
                       sleep["postgresql"]],
                      ["SELECT U&\"\\0073et_config\"('statement_timeout', '0', false)"],
                      ["SELECT U&\"!0073et_config\" UESCAPE '!'('statement_timeout', '0', false)"],
                      ["UPDATE pg_settings SET setting = '0' WHERE name = 'statement_timeout'"],
                      ["SELECT query_to_xml('SELECT set_config(''statement_timeout'', ''0'', "
                       "false)', true, true, '')", sleep["postgresql"]],
                      ["SELECT repeat('a', 300000000)", "SELECT lpad('a', 300000000, 'b')"],
                      ["SELECT " + ", ".join(["repeat('a', 90000)"] * 50)],
                      ["SELECT a.n FROM generate_series(1, 5000) a(n), "
                       "generate_series(1, 5000) b(n)"],
                      ["SELECT FROM generate_series(1, 5000) a, generate_series(1, 5000) b"],
                      ["CREATE TABLE big (b text)", "ALTER TABLE big ALTER COLUMN b SET STORAGE "
                       "EXTERNAL", "INSERT INTO big SELECT repeat('a', 90000) FROM "
                       "generate_series(1, 300)"],
                      ["WITH d AS (DELETE FROM {t} RETURNING *) SELECT repeat('a', 300000000) "
                       "FROM d"],
                      ["SELECT lo_from_bytea(0, 'x')",
                       "SELECT count(*) FROM generate_series(1, 1e12)"],
                      ["SELECT format('%300000000s', 'x'), format('%300000000s', 'x'), "
                       "format('%300000000s', 'x')", "SELECT lpad('a', 300000000), "
                       "rpad('a', 300000000, 'b')"],
                      ["SELECT array_fill(1, ARRAY[100000000])",
                       "SELECT concat_ws(repeat('a', 100000), VARIADIC array_fill(''::text, "
                       "ARRAY[10000]))"],
                      ["SELECT array_to_string(array_fill(''::text, ARRAY[10000]), "
                       "repeat('a', 100000))", "SELECT regexp_replace(repeat('a', 100000), "
                       "'a', repeat('b', 1000), 'g')"],
                      ["SELECT " + ", ".join(["'a'::char(10000000)"] * 30),
                       "SELECT bpchar('a', 10000004, true), \"bit\"(1, 80000000)"],
                      ["SELECT length(string_agg(repeat('a', 100000), '')) FROM "
                       "generate_series(1, 9000)",
                       "SELECT g FROM generate_series(1, 100000000) g ORDER BY repeat(g::text, 100)"],
                      ["ALTER TABLE {t} ENABLE ROW LEVEL SECURITY",
                       "ALTER TABLE {t} FORCE ROW LEVEL SECURITY"]]
    return sequences


def mutate_sql(rng: random.Random, sql: str, others: list[str]) -> str:
    """1-4 edits of `sql`: fragments spliced in (now and then thousands of times over), a
    slice cut or doubled, a character replaced, another statement joined on, parentheses
    nested deep; cut to MAX_SQL_CHARS."""
    for _ in range(rng.randint(1, 4)):
        position = rng.randint(0, len(sql))
        end = rng.randint(position, len(sql))
        edit = rng.randrange(7)
        if edit == 0:
            sql = sql[:position] + rng.choice(FRAGMENTS) + sql[position:]
        elif edit == 1:
            repeats = rng.choice((2, 10, 1_000))
            sql = sql[:position] + rng.choice(FRAGMENTS) * repeats + sql[position:]
        elif edit == 2:
            sql = sql[:position] + sql[end:]
        elif edit == 3:
            sql = sql[:end] + sql[position:end] + sql[end:]
        elif edit == 4:
            sql = sql[:position] + random_character(rng) + sql[position + 1:]
        elif edit == 5:
            sql = f"{sql}{rng.choice((';', ' UNION ALL ', ' ', ', '))}{rng.choice(others)}"
        else:
            depth = rng.choice((1, 10, 3_000))
            sql = "SELECT " + "(" * depth + f"SELECT {sql}" + ")" * depth
    return sql[:MAX_SQL_CHARS]


def assembled(rng: random.Random) -> str:
    """A statement of 3-30 fragments in any order."""
    return "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(3, 30)))


def operation(sql: str) -> str:
    return f"Action: Operation\n```sql\n{sql}\n```"


class Fuzzer:
    def __init__(self, backend: str, family: DBBenchSingleSkill, rng: random.Random) -> None:
        self.backend = backend
        self.family = family
        self.rng = rng
        self.tally = Tally(backend)
        self.samples = list(family.sample_ids("train"))
        self.statements = [sql for sequence in corpus(backend) for sql in sequence]
        settings = family.sandbox_settings
        self.max_chars = settings.max_observation_chars + NOTE_CHARS
        self.read_s = settings.statement_timeout_s + CANCEL_GRACE_S
        # the grader's reads at the end: the table's shape and rows, and MySQL's md5 with
        # the shape again
        self.grader_reads = 4 if backend == "mysql" else 2
        self.episode_bound_s = 2 * MAX_ROUND * (self.read_s * (2 + self.grader_reads) + SLACK_S)
        self.max_peak_growth_mb = 0.0

    def episode(self, replies: Iterator[str]) -> None:
        """One episode on the next sample, stepped with `replies` until it ends, on a
        thread of its own as in a rollout: one still running long past its bounds is
        counted and left behind."""
        worker = threading.Thread(target=self._play, args=(replies,), daemon=True)
        worker.start()
        worker.join(self.episode_bound_s)
        if worker.is_alive():
            self.tally.record("time", f"an episode still ran after {self.episode_bound_s:.0f} s "
                                      f"(left running)", "")

    def _play(self, replies: Iterator[str]) -> None:
        sample_id = self.samples[self.tally.tries % len(self.samples)]
        environment = self.family.new_episode()
        try:
            try:
                environment.reset(options={"sample_id": sample_id})
            except Exception as error:  # noqa: BLE001 - what the study counts
                self.tally.record("crash", f"reset: {type(error).__name__}: {error}", sample_id)
                return
            table = DBBenchProblem.model_validate(
                self.family.get_sample(sample_id).data).table.name
            quoted = f"`{table}`" if self.backend == "mysql" else f'"{table}"'
            for _ in range(MAX_ROUND):
                reply = next(replies).replace("{t}", quoted)
                if not self.step(environment, reply):
                    return
        finally:
            try:
                environment.close()
            except Exception as error:  # noqa: BLE001 - what the study counts
                self.tally.record("crash", f"close: {type(error).__name__}: {error}", "")

    def step(self, environment: DBBenchEpisode, reply: str) -> bool:
        """Steps `reply`, checks the step's bounds; False once the episode is over."""
        tally = self.tally
        tally.tries += 1
        last = reply.startswith("Action: Answer") or environment.round_index + 1 >= MAX_ROUND
        bound_s = self.read_s * (2 + (self.grader_reads if last else 0)) + SLACK_S
        before_mb = status_mb("VmRSS")  # not resident_mb: its garbage collection is slow
        reset_peak()
        started = time.monotonic()
        try:
            observation, reward, terminated, truncated, info = environment.step(reply)
        except Exception as error:  # noqa: BLE001 - what the study counts
            tally.record("crash", f"{type(error).__name__}: {error}", reply)
            return False
        seconds = time.monotonic() - started
        peak_growth = status_mb("VmHWM") - before_mb
        self.max_peak_growth_mb = max(self.max_peak_growth_mb, peak_growth)
        tally.max_seconds = max(tally.max_seconds, seconds)
        tally.max_observation_chars = max(tally.max_observation_chars, len(observation))
        if info["status"].failed:
            tally.record("unscored", str(info["status"]), reply)
        if seconds > bound_s:
            tally.record("time", f"a step took {seconds:.1f} s (bound {bound_s:.1f} s)", reply)
        if len(observation) > self.max_chars:
            tally.record("observation", f"{len(observation)} characters", reply)
        if peak_growth > PEAK_GROWTH_MB:
            tally.record("peak memory", f"grew {peak_growth:.0f} MB in a step", reply)
        if not math.isfinite(reward) or not all(map(math.isfinite, info["metrics"].values())):
            tally.record("not finite", f"reward {reward}, metrics {info['metrics']}", reply)
        if (terminated or truncated) and info["outcome"] is Outcome.UNKNOWN:
            tally.record("unscored", "an ended episode without an outcome", reply)
        return not (terminated or truncated)

    def run(self, tries: int) -> Tally:
        """The corpus, then `tries` random replies; the tally, its peak memory growth set
        in `max_peak_growth_mb`."""
        memory_before = resident_mb()
        for sequence in corpus(self.backend):
            self.episode(iter([*map(operation, sequence),
                               *["Action: Answer\nFinal Answer: []"] * MAX_ROUND]))
        started = self.tally.tries
        while self.tally.tries - started < tries:
            self.episode(self.random_replies())
            progress(self.tally, self.tally.tries - started - 1, tries)
        check_memory(self.tally, memory_before)
        return self.tally

    def random_replies(self) -> Iterator[str]:
        rng = self.rng
        while True:
            draw = rng.random()
            if draw < 0.1:
                yield f"Action: Answer\nFinal Answer: [{rng.choice(FRAGMENTS)!r}]"
                continue
            base = rng.choice(self.statements) if draw < 0.6 else assembled(rng)
            sql = mutate_sql(rng, base, self.statements)
            yield operation(sql) if draw < 0.95 else operation(sql)[:rng.randint(0, 40)] + sql


def reset_peak() -> None:
    """Start the process's peak resident memory (VmHWM) afresh (Linux 4.0+)."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def status_mb(field: str) -> float:
    """A memory figure of this process (VmRSS: resident now, VmHWM: its peak)."""
    with open("/proc/self/status") as status:
        found = re.search(rf"^{field}:\s+(\d+)", status.read(), re.MULTILINE)
    if found is None:
        raise RuntimeError(f"no {field} line in /proc/self/status")
    return int(found.group(1)) / 1024


def sandboxes_left(url: str) -> int:
    """The databases, schemas and users of sandboxes still on the server."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            if url.startswith("mysql"):
                return int(connection.exec_driver_sql(
                    "SELECT (SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name "
                    "LIKE 'dbbench\\_%%') + (SELECT COUNT(*) FROM mysql.user WHERE user LIKE "
                    "'dbbench\\_%%')").scalar_one())
            return int(connection.exec_driver_sql(
                "SELECT (SELECT COUNT(*) FROM pg_namespace WHERE nspname LIKE 'dbbench\\_%%') + "
                "(SELECT COUNT(*) FROM pg_roles WHERE rolname LIKE 'dbbench\\_%%') + "
                "(SELECT COUNT(*) FROM pg_database WHERE datname LIKE 'dbbench\\_%%')"
            ).scalar_one())
    finally:
        engine.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tries", type=int, default=400,
                        help="mutated replies per backend, beside the fixed corpus")
    parser.add_argument("--backends", default="sqlite,mysql,postgresql")
    parser.add_argument("--output", type=Path, help="the counts and findings as JSON")
    arguments = parser.parse_args(argv)
    rng = random.Random(arguments.seed)
    tallies: list[Tally] = []
    peak_growth_mb: dict[str, float] = {}
    started = time.monotonic()
    for backend in arguments.backends.split(","):
        url = URLS[backend]
        reason = None if backend == "sqlite" else unreachable_reason(url)
        if reason is not None:
            print(f"{backend}: skipped, unreachable at {url} ({reason})", flush=True)
            continue
        left_before = 0 if backend == "sqlite" else sandboxes_left(url)
        family = DBBenchSingleSkill(splits=DBBenchSplits(num_train=64, seed=arguments.seed),
                                    max_round=MAX_ROUND,
                                    sandbox={"url": url, "statement_timeout_s": TIMEOUT_S})
        print(backend, flush=True)
        fuzzer = Fuzzer(backend, family, rng)
        try:
            tally = fuzzer.run(arguments.tries)
        finally:
            family.close()
            drop_kept_databases()  # kept for the next sandboxes, they would count as left
        peak_growth_mb[backend] = fuzzer.max_peak_growth_mb
        if backend != "sqlite" and (left := sandboxes_left(url) - left_before) > 0:
            tally.record("left behind", f"{left} sandbox databases, schemas or users", "")
        tallies.append(tally)
    seconds = time.monotonic() - started
    print(summary_table(tallies))
    for tally in tallies:
        for finding in tally.findings.values():
            print(f"- {tally.target}: {finding.count} x {finding.kind}: {finding.what[:200]}\n"
                  f"    e.g. {finding.example[:200]}")
    print("largest growth of peak memory in a step: " + ", ".join(
        f"{backend} {growth:.0f} MB" for backend, growth in peak_growth_mb.items()))
    print(f"{sum(tally.tries for tally in tallies)} tries in {seconds:.0f} s")
    if arguments.output is not None:
        arguments.output.parent.mkdir(parents=True, exist_ok=True)
        arguments.output.write_text(json.dumps({
            "command": " ".join(["python -m experiments.hostile_inputs.fuzz_sql",
                                 *(argv if argv is not None else sys.argv[1:])]),
            "seconds": seconds,
            "bounds": {"statement_timeout_s": TIMEOUT_S, "cancel_grace_s": CANCEL_GRACE_S,
                       "slack_s": SLACK_S, "peak_growth_mb": PEAK_GROWTH_MB,
                       "rss_growth_mb": RSS_GROWTH_MB},
            "backends": [{**asdict(tally), "max_step_peak_growth_mb": peak_growth_mb[tally.target],
                          "findings": list(map(asdict, tally.findings.values()))}
                         for tally in tallies]}, indent=1))
    return 1 if any(tally.crashes or tally.unscored or tally.bounds_exceeded
                    for tally in tallies) else 0


if __name__ == "__main__":
    sys.exit(main())
