"""Held-out DB-bench problems that repeat a train problem's query, and the success on each side.

python -m experiments.db_bench_learning.train_overlap CONFIG_YAML LABEL=EVALUATION_JSONL [...]

The procedural generator draws both splits from the same query templates, table names
and columns, so a validation problem can ask the very query of a train problem over
other rows, or over a table of another name. Here two problems ask the same query when
their reference SQL is the same once the table's name is replaced by a placeholder: on
the 88 stratified validation problems of the DB-bench configs, 44 ask the query of one
of the 400 train problems. To a policy trained on the train split such a problem is not
wholly new. For each evaluation file (OUTPUT_DIR/evaluation/step-N.jsonl) this prints
the success, with its 95% Wilson interval, on the validation problems whose query is
also that of one of the config's `num_train` train problems, and on the others. A run
may have drawn only some of those train problems, so the first group is the most it can
have seen.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from experiments.task_config import task_built_from_config
from src.records.episode import EpisodeRecord, Sample
from src.report.evaluation_table import labelled_files, read_runs, success_table
from src.tasks.instance.db_bench.task_single_skill import DBBenchSingleSkill


def query(sample: Sample) -> str:
    """The reference SQL with the table's quoted name as a placeholder."""
    name = sample.data["table"]["name"]
    sql = sample.data["reference_sql"]
    for quote in ("`", '"'):
        sql = sql.replace(f"{quote}{name}{quote}", "<table>")
    return sql


def validation_ids_with_a_train_query(task: DBBenchSingleSkill) -> set[str]:
    """The validation sample ids whose query (`query`) is also a train sample's."""
    train_queries = {query(task.get_sample(sample_id)) for sample_id in task.sample_ids("train")}
    return {sample_id for sample_id in task.sample_ids("validation")
            if query(task.get_sample(sample_id)) in train_queries}


def overlap_table(task: DBBenchSingleSkill, files: dict[str, Path]) -> str:
    runs = read_runs(files)
    validation = set(task.sample_ids("validation"))
    for label, records in runs.items():
        strangers = [record.sample_id for record in records if record.sample_id not in validation]
        if strangers:
            raise ValueError(f"{files[label]}: {strangers[0]} is not among the config's "
                             f"{len(validation)} validation samples: another config's run?")
    repeated = validation_ids_with_a_train_query(task)
    rows: dict[str, Callable[[EpisodeRecord], bool]] = {
        "query also a train problem's": lambda record: record.sample_id in repeated,
        "query of no train problem": lambda record: record.sample_id not in repeated,
        "**all**": lambda record: True}
    return "\n".join(success_table(runs, rows, "validation problems"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config_path", type=Path)
    parser.add_argument("files", nargs="+", metavar="LABEL=EVALUATION_JSONL")
    arguments = parser.parse_args()
    task = task_built_from_config(arguments.config_path, "db_bench_single_skill",
                                  DBBenchSingleSkill)
    print(overlap_table(task, labelled_files(parser, arguments.files)))


if __name__ == "__main__":
    main()
