"""File and text tasks for a shell, drawn from a seed: the files, the question, and what
the host expects.

Eight kinds: questions answered in `\\boxed{}` (`count_lines` holding a word,
`count_words` of a file, `count_files` with an extension under a folder, `find_file`
holding a string), files to produce (`sort_file`, `uppercase_file`, `replace_in_file`
in place) and a script to repair (`fix_script`: it should print a figure of the numbers
in numbers.txt; the check runs the repaired script on other numbers, drawn with the
task, that the agent never sees, whose figure differs from the visible one). Every
expected value is computed here, on the host, from the seed; the oracle's shell command
solves the task in the sandbox.

Words come from `WORDS`, none inside another, so "a line holding the word" is what
`grep -c WORD` counts; names are lower-case ASCII, so `LC_ALL=C sort` and Python's
`sorted` agree.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Kind = Literal["count_lines", "count_words", "count_files", "find_file", "sort_file",
               "uppercase_file", "replace_in_file", "fix_script"]
KINDS: tuple[Kind, ...] = ("count_lines", "count_words", "count_files", "find_file",
                           "sort_file", "uppercase_file", "replace_in_file", "fix_script")
WORDS = ("apple", "river", "stone", "cloud", "tiger", "lemon", "chair", "piano", "grass",
         "honey", "metal", "ocean", "quiet", "robot", "sugar", "train", "violet", "wagon",
         "yellow", "zebra", "bread", "candle", "desert", "forest", "garden", "island",
         "jungle", "kettle", "ladder", "mirror")


@dataclass(frozen=True)
class ScriptCheck:
    """A script the agent repairs, run by the check on files the agent never saw."""

    path: str  # the script, relative to the working directory
    files: dict[str, str]  # the check's own input files, beside the script
    expected_stdout: str  # what the repaired script prints on them (stripped)


@dataclass(frozen=True)
class ShellProblem:
    kind: Kind
    files: dict[str, str]  # the working directory's seed files
    question: str
    oracle_command: str  # a bash script that does the task (and prints a question's answer)
    answer: str | None = None  # a question's answer, as the host computed it
    output_path: str | None = None  # the file the agent produces (or edits)
    expected_output: str | None = None  # its content (trailing newlines aside)
    script: ScriptCheck | None = None


def _line(rng: random.Random, length: tuple[int, int] = (3, 7)) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(*length)))


def _text(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def _count_lines(rng: random.Random) -> ShellProblem:
    lines = [_line(rng) for _ in range(rng.randint(8, 20))]
    word = rng.choice(sorted({word for line in lines for word in line.split()}))
    answer = sum(word in line.split() for line in lines)
    return ShellProblem("count_lines", {"notes.txt": _text(lines)},
                        f"How many lines of notes.txt contain the word '{word}'?",
                        f"grep -c -w '{word}' notes.txt", answer=str(answer))


def _count_words(rng: random.Random) -> ShellProblem:
    lines = [_line(rng, (1, 9)) for _ in range(rng.randint(3, 12))]
    answer = sum(len(line.split()) for line in lines)
    return ShellProblem("count_words", {"story.txt": _text(lines)},
                        "How many words are in story.txt?", "wc -w < story.txt",
                        answer=str(answer))


def _name(rng: random.Random) -> str:
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 8)))


def _tree(rng: random.Random, root: str, count: int, extensions: tuple[str, ...]
          ) -> list[str]:
    """`count` distinct file paths under `root`, in up to two levels of subfolders."""
    folders = [root] + [f"{root}/{_name(rng)}" for _ in range(rng.randint(1, 3))]
    folders += [f"{rng.choice(folders)}/{_name(rng)}" for _ in range(rng.randint(0, 2))]
    paths: set[str] = set()
    while len(paths) < count:
        paths.add(f"{rng.choice(folders)}/{_name(rng)}.{rng.choice(extensions)}")
    return sorted(paths)


def _count_files(rng: random.Random) -> ShellProblem:
    paths = _tree(rng, "logs", rng.randint(5, 14), ("log", "txt", "csv"))
    answer = sum(path.endswith(".log") for path in paths)
    return ShellProblem("count_files", {path: _line(rng) + "\n" for path in paths},
                        "How many files whose names end in .log are in the folder logs and "
                        "its subfolders?", "find logs -type f -name '*.log' | wc -l",
                        answer=str(answer))


def _find_file(rng: random.Random) -> ShellProblem:
    paths = _tree(rng, "docs", rng.randint(4, 10), ("txt", "md"))
    token = f"KEY-{rng.randint(1000, 9999)}"
    target = rng.choice(paths)
    files = {path: _text([_line(rng) for _ in range(rng.randint(2, 6))]) for path in paths}
    lines = files[target].splitlines()
    lines.insert(rng.randint(0, len(lines)), f"{_line(rng, (1, 3))} {token} {_line(rng, (1, 3))}")
    files[target] = _text(lines)
    return ShellProblem("find_file", files,
                        f"Which file in the folder docs (or its subfolders) contains the text "
                        f"'{token}'? Answer with its path, such as docs/notes/a.txt.",
                        f"grep -rl '{token}' docs", answer=target)


def _sort_file(rng: random.Random) -> ShellProblem:
    count, names = rng.randint(5, 12), set[str]()
    while len(names) < count:
        names.add(_name(rng))
    lines = sorted(names)
    rng.shuffle(lines)
    return ShellProblem("sort_file", {"names.txt": _text(lines)},
                        "Write the lines of names.txt, sorted alphabetically, to a new file "
                        "sorted.txt.", "LC_ALL=C sort names.txt > sorted.txt",
                        output_path="sorted.txt", expected_output=_text(sorted(lines)))


def _uppercase_file(rng: random.Random) -> ShellProblem:
    lines = [_line(rng, (1, 5)) for _ in range(rng.randint(3, 8))]
    return ShellProblem("uppercase_file", {"words.txt": _text(lines)},
                        "Write the content of words.txt in upper case to a new file "
                        "upper.txt.", "tr '[:lower:]' '[:upper:]' < words.txt > upper.txt",
                        output_path="upper.txt",
                        expected_output=_text([line.upper() for line in lines]))


def _replace_in_file(rng: random.Random) -> ShellProblem:
    old, new = rng.sample(WORDS, 2)
    lines = [f"{_name(rng)} = {_line(rng, (1, 3))}" for _ in range(rng.randint(4, 10))]
    for _ in range(rng.randint(1, 3)):  # `old` is there at least once
        index = rng.randrange(len(lines))
        lines[index] = f"{lines[index]} {old}"
    lines = [line.replace(new, old) for line in lines]  # and `new` is not
    return ShellProblem("replace_in_file", {"config.txt": _text(lines)},
                        f"In config.txt, replace every '{old}' with '{new}'. Edit the file "
                        f"in place.", f"sed -i 's/{old}/{new}/g' config.txt",
                        output_path="config.txt",
                        expected_output=_text([line.replace(old, new) for line in lines]))


# what the script prints of the numbers, its correct loop, and its variable's name
_FIGURES: dict[str, tuple[str, Callable[[list[int]], int]]] = {
    "sum": ("total += n", sum),
    "largest": ("total = max(total, n)", max),
    "count of the even numbers": ("total += n % 2 == 0",
                                  lambda numbers: sum(n % 2 == 0 for n in numbers)),
}
_SCRIPT = """numbers = []
with open("numbers.txt") as file:
    for line in file:
        numbers.append(int(line))
total = {start}
for n in numbers:
    {update}
print(total)
"""
# each breaks the script: (what is replaced, by what)
_BUGS = (("for n in numbers:", "for n in numbers"),  # a missing colon
         ("print(total)", "print(totl)"),  # a misspelt name
         ("numbers.append(int(line))", "numbers.append(int(line)"),  # a missing parenthesis
         ("    {update}", "{update}"))  # a lost indentation


def _numbers_text(rng: random.Random) -> tuple[str, list[int]]:
    numbers = [rng.randint(-50, 99) for _ in range(rng.randint(4, 10))]
    return _text([str(number) for number in numbers]), numbers


def _fix_script(rng: random.Random) -> ShellProblem:
    figure = rng.choice(sorted(_FIGURES))
    update, compute = _FIGURES[figure]
    start = "-10 ** 9" if figure == "largest" else "0"
    broken_from, broken_to = rng.choice(_BUGS)
    template = _SCRIPT.replace(broken_from, broken_to)
    correct = _SCRIPT.format(start=start, update=update)
    shown, shown_numbers = _numbers_text(rng)
    hidden, hidden_numbers = _numbers_text(rng)
    while compute(hidden_numbers) == compute(shown_numbers):  # the visible answer fails
        hidden, hidden_numbers = _numbers_text(rng)
    return ShellProblem(
        "fix_script",
        {"script.py": template.format(start=start, update=update), "numbers.txt": shown},
        f"The script script.py should print the {figure} of the numbers in numbers.txt "
        f"(one a line), but it fails. Fix script.py so that it works.",
        f"cat > script.py <<'EOF'\n{correct}EOF\npython3 script.py",
        output_path="script.py",
        script=ScriptCheck("script.py", {"numbers.txt": hidden},
                           str(compute(hidden_numbers))))


GENERATORS: dict[Kind, Callable[[random.Random], ShellProblem]] = {
    "count_lines": _count_lines, "count_words": _count_words, "count_files": _count_files,
    "find_file": _find_file, "sort_file": _sort_file, "uppercase_file": _uppercase_file,
    "replace_in_file": _replace_in_file, "fix_script": _fix_script,
}
