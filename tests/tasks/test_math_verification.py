"""The bounded math checker called from wherever a user's reward code runs: a forked
child, a multiprocessing fork pool, a script without a `__main__` guard.

Each case is a script run in its own interpreter, as a user would run it. A worker
process left running would hold the script's stderr open, so `subprocess.run` would not
return: leftovers fail the test through its timeout.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
SCORE = ("from src.tasks.instance.math_problems.rewards import accuracy\n"
         "def scores(pairs):\n"
         "    return [accuracy(f'so \\\\boxed{{{answer}}}', gold) for answer, gold in pairs]\n")


def run_script(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "score_answers.py"
    script.write_text(SCORE + body, encoding="utf-8")
    environment = {**os.environ,
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                               os.environ.get("PYTHONPATH")]))}
    try:
        return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=180, cwd=ROOT, env=environment)
    except subprocess.TimeoutExpired:
        pytest.fail("the script, or a worker process it left behind, still running after 180 s")


def guarded(*lines: str) -> str:
    """A script's body under a `__main__` guard, as multiprocessing's docs ask."""
    return "if __name__ == '__main__':\n" + "".join(f"    {line}\n" for line in lines)


def test_scores_in_a_forked_child_and_in_its_parent_after_it(tmp_path: Path) -> None:
    """The child inherits a started worker: it starts its own, and exiting (atexit
    included) ends only its own, so the parent goes on with the one it has."""
    result = run_script(tmp_path, guarded(
        "import os, sys",
        "print('parent', scores([('72', '72'), ('9', '10')]), flush=True)",
        "pid = os.fork()",
        "if pid == 0:",
        "    print('child', scores([('5', '5'), ('\\\\frac{1}{2}', '0.5'), ('4', '3')]),"
        " flush=True)",
        "    sys.exit(0)",
        "assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0",
        "print('parent', scores([('18', '18')]), flush=True)"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["parent [1.0, 0.0]", "child [1.0, 1.0, 0.0]",
                                          "parent [1.0]"]


def test_scores_in_a_multiprocessing_fork_pool(tmp_path: Path) -> None:
    result = run_script(tmp_path, (
        "import multiprocessing\n"
        "def score(pair):\n"
        "    return scores([pair])[0]\n"
        "if __name__ == '__main__':\n"
        "    print(scores([('3', '3')]))\n"
        "    with multiprocessing.get_context('fork').Pool(2) as pool:\n"
        "        print(pool.map(score, [('72', '72'), ('10', '12'), ('0.5', '1/2')]))\n"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[1.0]", "[1.0, 0.0, 1.0]"]


def test_scores_from_a_script_without_a_main_guard(tmp_path: Path) -> None:
    """The worker does not run the caller's script again: it scores once, quietly."""
    result = run_script(tmp_path, "print(scores([('72', '72'), ('10', '10'), ('5', '6')]))\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[1.0, 1.0, 0.0]"]
    assert "Traceback" not in result.stderr


def test_an_overrun_in_a_forked_child_is_wrong_and_leaves_the_parent_checking(
        tmp_path: Path) -> None:
    """The time bound holds in a child; the worker it kills is its own."""
    result = run_script(tmp_path, guarded(
        "import os, time",
        "print(scores([('1', '1')]), flush=True)",
        "pid = os.fork()",
        "if pid == 0:",
        "    started = time.monotonic()",
        "    print(scores([('9^{9^{9}}', '7'), ('7', '7')]), time.monotonic() - started < 60,"
        " flush=True)",
        "    os._exit(0)",
        "os.waitpid(pid, 0)",
        "print(scores([('2', '2')]), flush=True)"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[1.0]", "[0.0, 1.0] True", "[1.0]"]
