"""Sources of math problems: a seeded procedural generator, GSM8K, any jsonl/parquet file
or Hugging Face dataset."""

from __future__ import annotations

import random
import zlib
from pathlib import Path
from typing import NamedTuple

from src.records.episode import Sample
from src.storage.files import read_numbered_json_lines
from src.tasks.task import split_sample_id

_NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Farah", "Goro", "Hana"]
_ITEMS = ["apples", "books", "marbles", "stickers", "pencils", "coins"]
# One arithmetic fact in about this many, chosen by a hash, is asked only in validation:
# level 1 has 100 distinct questions, so independent draws for the quickstart's 160 train
# and 64 validation problems had put 46 of the 64 validation questions into train too.
HELD_OUT_SHARE = 5
# The sum of the worked example that prompts show (task.WORKED_EXAMPLE): a train fact.
WORKED_EXAMPLE_OPERANDS = (3, 4)


class ProceduralProblem(NamedTuple):
    question: str
    answer: str
    fact: str  # the arithmetic asked, the same for swapped operands of + and *


def _fact(a: int, operator: str, b: int) -> str:
    if operator in "+*":
        a, b = sorted((a, b))
    return f"{a} {operator} {b}"


_WORKED_EXAMPLE_FACT = _fact(WORKED_EXAMPLE_OPERANDS[0], "+", WORKED_EXAMPLE_OPERANDS[1])


def procedural_problem(level: int, rng: random.Random) -> ProceduralProblem:
    """Level 1 is single-digit sums, higher levels are harder."""
    if level == 1:
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        return ProceduralProblem(f"What is {a} + {b}?", str(a + b), _fact(a, "+", b))
    if level == 2:
        a, b = rng.randint(10, 99), rng.randint(1, 9)
        if rng.random() < 0.5:
            return ProceduralProblem(f"What is {a} + {b}?", str(a + b), _fact(a, "+", b))
        return ProceduralProblem(f"What is {a} - {b}?", str(a - b), _fact(a, "-", b))
    if level == 3:
        a, b = rng.randint(2, 9), rng.randint(2, 9)
        return ProceduralProblem(f"What is {a} * {b}?", str(a * b), _fact(a, "*", b))
    if level == 4:
        name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
        have, more = rng.randint(2, 20), rng.randint(2, 20)
        return ProceduralProblem(f"{name} has {have} {item} and gets {more} more. "
                                 f"How many {item} does {name} have now?", str(have + more),
                                 _fact(have, "+", more))
    raise ValueError(f"procedural level must be 1-4, got {level}")


def is_held_out_fact(fact: str) -> bool:
    """Whether a procedural problem belongs to validation: a fixed partition of the
    arithmetic facts (a stable hash, not Python's salted one; 3 + 4 and 4 + 3 together,
    whatever the wording), the same for every seed and split size, so that no validation
    problem asks what a train problem or the worked example asks."""
    return fact != _WORKED_EXAMPLE_FACT and zlib.crc32(fact.encode()) % HELD_OUT_SHARE == 0


def procedural_sample(seed: int, split: str, index: int, levels: tuple[int, ...]) -> Sample:
    """Problem `index` of `split`, drawn again until its fact is on the split's side of
    the partition (`is_held_out_fact`)."""
    rng = random.Random(f"{seed}-{split}-{index}")
    level = levels[index % len(levels)]
    held_out = split != "train"
    problem = procedural_problem(level, rng)
    while is_held_out_fact(problem.fact) != held_out:
        problem = procedural_problem(level, rng)
    return Sample(sample_id=split_sample_id(split, index), category=f"level{level}",
                  data={"question": problem.question, "answer": problem.answer})


def _load_dataset(name: str, config: str | None, split: str) -> list[dict]:
    import datasets  # a dependency of the field's loaders; only for dataset sources

    try:
        return list(datasets.load_dataset(name, config, split=split))
    except Exception as error:  # noqa: BLE001 - the library raises many kinds; all mean "cannot"
        raise FileNotFoundError(
            f"math data '{name}' is not a file, and as a Hugging Face dataset (config "
            f"{config!r}, split {split!r}) it could not be loaded: "
            f"{type(error).__name__}: {error}") from error


def gsm8k_final_answer(answer: str) -> str:
    """GSM8K puts the final answer after `#### `; thousands separators are dropped."""
    if "####" not in answer:
        raise ValueError("GSM8K answer has no '#### ' final answer")
    return answer.split("####")[-1].strip().replace(",", "")


def load_rows(path: str, question_key: str, answer_key: str, gsm8k: bool,
              dataset_config: str | None = None, dataset_split: str = "train"
              ) -> tuple[tuple[str, str], ...]:
    """(question, answer) rows of a jsonl or parquet file, or of a Hugging Face dataset (a
    local dataset folder or a hub name, read with `datasets`); errors name the file and
    line, or the dataset and row."""
    file = Path(path)
    if file.is_file() and file.suffix == ".parquet":
        import pyarrow.parquet as parquet  # optional: only for parquet sources

        table = parquet.read_table(file).to_pylist()
        raw = [(index + 1, row) for index, row in enumerate(table)]
    elif file.is_file():
        raw = read_numbered_json_lines(file)
    else:
        raw = [(index + 1, row) for index, row in
               enumerate(_load_dataset(path, dataset_config, dataset_split))]
        file = Path(f"{path}[{dataset_split}] row")
    rows = []
    for number, row in raw:
        if question_key not in row or answer_key not in row:
            raise ValueError(f"{file}:{number}: row lacks '{question_key}' or '{answer_key}'")
        answer = str(row[answer_key])
        try:
            answer = gsm8k_final_answer(answer) if gsm8k else answer
        except ValueError as error:
            raise ValueError(f"{file}:{number}: {error}") from error
        rows.append((str(row[question_key]), answer))
    return tuple(rows)
