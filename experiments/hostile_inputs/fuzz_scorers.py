"""Fuzzing the package code that scores what a model writes, and the games that read it:

- reasoning-gym datasets whose own `score_answer` parses numbers or expressions (sympy's
  `parse_expr`, `Decimal`, `int`, JSON), through `ReasoningGymTask`'s episode step: the
  scorer runs bounded in time in the worker process (src/sandboxes/bounded_call.py);
- a `SingleTurnTask` whose `Rubric` holds user functions that hang, spin, raise, end their
  process, return NaN, infinity, integers past floats, text, or allocate memory;
- a verifiers rollout (scripted replies through the project's endpoint and agent) whose
  reward blocks the event loop, raises, or returns something that is not a finite number;
- TextArena games of one player whose move checks read numbers and coordinates.

Each target gets the fixed hostile corpus (`STUDY_REPLIES` of fuzz_model_text.py),
expression bombs (`BOMBS`: power towers, huge factorials, deep brackets, huge numbers,
unicode digits, megabyte answers, Python that a scorer may run) and `--tries` seeded
mutations of a valid reply, bombs spliced in. Counted per target:

- crashes: an exception out of a step or a rollout;
- unscored: a step or episode whose status is a failure where a score was due, a reward
  or metric that is not a finite number; for the verifiers rewards (environment code
  that fails), an episode without the status `task_error` and its reason;
- bounds exceeded: a bounded call (a scorer's) whose wall time passed twice its bound
  (the worker's start and loading apart), a game step over `STEP_SECONDS`, the verifiers
  episode over its rollout bound plus grace, twice over; this process's resident memory
  grown by more than `RSS_GROWTH_MB`, the scorer worker's over `WORKER_RSS_MB`;
- code run: a reply whose text, executed as Python, touched a marker file.

    OMP_NUM_THREADS=1 python -m experiments.hostile_inputs.fuzz_scorers --seed 0 \\
        --tries 10 --output outputs/hostile_inputs/fuzz_scorers.json

Exit status 1 when anything was counted.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import math
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from experiments.hostile_inputs.fuzz_model_text import (
    STEP_SECONDS,
    STUDY_REPLIES,
    Finding,
    Tally,
    check_memory,
    mutate,
    play,
    progress,
    resident_mb,
)
from experiments.hostile_inputs.hostile_reward_functions import HOSTILE_FUNCTIONS, SLOW
from src.sandboxes import bounded_call
from src.tasks.rubric import Rubric
from src.tasks.single_turn import SingleTurnTask
from src.tasks.splits import SplitsWithSelection
from tests.tasks.test_reply_fuzz import MEGABYTE

# the study's bound on a scorer call (the tasks' default is 5 s): shorter, so that
# each overrun costs less of the run; an overrun is an overrun at any bound
SCORER_TIMEOUT_S = 1.0
WORKER_RSS_MB = 1_024.0  # the scorer worker's resident memory, sampled during calls
ROLLOUT_TIMEOUT_S = 2.0  # the verifiers rollout's deadline in the study
MARKER = "MARKER"  # in a bomb: the path of the file that code run from a reply touches
# Datasets whose scorer parses what the model wrote: sympy (countdown, puzzle24,
# polynomial_multiplication), Decimal and float (chain_sum, decimal_arithmetic,
# power_function, basic_arithmetic), complex numbers, lists of numbers, JSON
# (number_sorting), factor lists (prime_factorization).
# (products shares chain_sum's scorer; simple_integration parses as
# polynomial_multiplication does, each of its overruns costing a worker's restart)
DATASETS = ("countdown", "puzzle24", "basic_arithmetic", "chain_sum", "decimal_arithmetic",
            "power_function", "complex_arithmetic", "polynomial_multiplication",
            "polynomial_equations", "prime_factorization", "number_sorting")
# Expressions a scorer may parse (inside the answer format), each under the 2,000
# characters past which an answer is wrong unread, and a few over it.
BOMB_EXPRESSIONS: dict[str, str] = {
    "python_tower": "9**9**9**9",
    "python_tower_short": "9**9**9",
    "caret_tower": "10^10^10",
    "latex_tower": "9^{9^{9^{9}}}",
    "python_shift": "1 << 10**10",
    "factorial_call": "factorial(10**100)",
    "factorial_bang": "(10**6)!",
    "factorial_big": "100000!",
    "double_factorial": "factorial2(10**9)",
    "nested_parentheses": "(" * 900 + "1" + ")" * 900,
    "nested_brackets": "[" * 900 + "1" + "]" * 900,
    "nested_lists_json": "[" * 990 + "]" * 990,
    "nested_fractions": "\\frac{1}{" * 150 + "1" + "}" * 150,
    "digits_1999": "9" * 1_999,
    "digits_over_cut": "9" * 5_000,
    "decimal_exponent": "1e999999999",
    "decimal_exponent_huge": "1E+999999999999999999",
    "decimal_tiny": "1e-999999999",
    "sum_of_huge_exponents": "+".join(["1e999999999"] * 100),
    "float_specials": "nan",
    "infinity": "inf",
    "negative_nan": "-nan",
    "complex_nan": "nan+nanj",
    "sympy_nan": "nan + zoo*I",
    "fullwidth_digits": "\uff14\uff12",
    "arabic_digits": "\u0664\u0662",
    "superscripts": "2\u00b2\u2070",
    "minus_sign": "\u22125",
    "zero_width": "4\u200b2",
    "rtl_override": "\u202e24",
    "nbsp_thousands": "1\u00a0000",
    "sympy_symbols_power": "x**x**x**x**x**x**x**x",
    "expand_power": "expand((x+1)**100000)",
    "integrate": "integrate(exp(x**x), x)",
    "python_list_bomb": "len([0]*10**8)",
    "python_text_bomb": "len('x'*10**9)",
    "python_import": f"__import__('pathlib').Path(r'{MARKER}').touch() or 24",
    "python_lambda": "(lambda a, b, c, d: 24)(1, 2, 3, 4)",
    "python_open": f"len(open(r'{MARKER}', 'w').write('run') * 'x') or 1",
    "megabyte_sum": "1+" * (MEGABYTE // 2) + "1",
}
BOMBS: dict[str, str] = {
    **{f"boxed {name}": f"The answer is \\boxed{{{text}}}."
       for name, text in BOMB_EXPRESSIONS.items()},
    **{f"answer tag {name}": f"<answer>{text}</answer>" for name, text in
       BOMB_EXPRESSIONS.items() if name in ("python_tower", "python_import", "megabyte_sum")},
    "megabyte answer tag": "<answer>" + "7" * MEGABYTE + "</answer>",
    "boxed megabyte text": "\\boxed{" + "lorem ipsum " * (MEGABYTE // 12) + "}",
}


@dataclass
class ScorerTally(Tally):
    """A target's counts, with those of the bounded calls and the scorer worker."""

    code_runs: int = 0
    bounded_calls: int = 0
    scorer_timeouts: int = 0
    max_call_seconds: float = 0.0
    max_worker_setup_seconds: float = 0.0  # starting a worker and loading the functions
    worker_peak_mb: float = 0.0
    seconds: float = 0.0
    outcomes: dict[str, int] = field(default_factory=dict)

    def record(self, kind: str, what: str, example: object) -> None:
        if kind != "code run":
            super().record(kind, what, example)
            return
        self.code_runs += 1
        finding = self.findings.setdefault(f"{kind}: {what[:160]}", Finding(
            kind, what[:500], example=repr(example)[:300]))
        finding.count += 1

    def count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1


# ---- instrumentation of the bounded calls ---------------------------------------------
class CallWatch:
    """Times every bounded call apart from starting a worker and loading functions into it
    (`_Caller._ready`, which no call's bound covers), and samples the worker's resident
    memory while a call runs. Wraps the module's one caller for as long as it is open."""

    def __init__(self) -> None:
        self.tally: ScorerTally | None = None
        self._caller = bounded_call._CALLER
        self._call, self._ready = self._caller.call, self._caller._ready
        self._setup_s = 0.0
        self._running = threading.Event()
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> CallWatch:
        self._caller.call = self.call  # type: ignore[method-assign]
        self._caller._ready = self.ready  # type: ignore[method-assign]
        self._sampler.start()
        return self

    def __exit__(self, *_: object) -> None:
        del self._caller.call, self._caller._ready  # the class's methods again
        self._stop.set()
        self._running.set()
        self._sampler.join()

    def ready(self, function: Any) -> Any:
        started = time.monotonic()
        try:
            return self._ready(function)
        finally:
            self._setup_s += time.monotonic() - started

    def call(self, function: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
             timeout_s: float) -> Any:
        self._setup_s = 0.0
        started = time.monotonic()
        self._running.set()
        overran = False
        try:
            return self._call(function, args, kwargs, timeout_s)
        except bounded_call.BoundExceeded:
            overran = True
            raise
        finally:
            self._running.clear()
            seconds = time.monotonic() - started - self._setup_s
            if self.tally is not None:
                self._count(self.tally, function.name, seconds, timeout_s, overran, args)

    def _count(self, tally: ScorerTally, name: str, seconds: float, timeout_s: float,
               overran: bool, args: tuple[Any, ...]) -> None:
        tally.bounded_calls += 1
        tally.scorer_timeouts += overran
        if overran:
            tally.count(f"overran: {name}")
        tally.max_call_seconds = max(tally.max_call_seconds, seconds)
        tally.max_worker_setup_seconds = max(tally.max_worker_setup_seconds, self._setup_s)
        if seconds > 2 * timeout_s:
            tally.record("time", f"bounded call {name} took {seconds:.1f} s "
                         f"(bound {timeout_s:g} s)", args)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self._running.wait()
            pid = bounded_call.worker_pid()
            if pid is not None and self.tally is not None:
                # the worker may end between the two reads
                with contextlib.suppress(OSError, ValueError):
                    self.tally.worker_peak_mb = max(self.tally.worker_peak_mb,
                                                    _process_rss_mb(pid))
            time.sleep(0.05)

    def check_worker(self, tally: ScorerTally) -> None:
        if tally.worker_peak_mb > WORKER_RSS_MB:
            tally.record("memory", f"the scorer worker reached {tally.worker_peak_mb:.0f} MB "
                         f"resident (bound {WORKER_RSS_MB:.0f} MB)", "")


def _process_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise ValueError(f"no VmRSS line for process {pid}")


@contextlib.contextmanager
def watching(watch: CallWatch, tally: ScorerTally) -> Iterator[ScorerTally]:
    watch.tally = tally
    memory_before = resident_mb()
    started = time.monotonic()
    try:
        yield tally
    finally:
        tally.seconds = time.monotonic() - started
        watch.tally = None
        check_memory(tally, memory_before)
        watch.check_worker(tally)


# ---- replies ---------------------------------------------------------------------------
def with_marker(text: str, marker: Path) -> str:
    return text.replace(MARKER, str(marker))


def bombed(rng: random.Random, valid: str) -> str:
    """A valid reply with a bomb in its answer, beside the answer or for it, then now and
    then mutated further."""
    expression = rng.choice(list(BOMB_EXPRESSIONS.values()))
    for opening, closing in (("\\boxed{", "}"), ("<answer>", "</answer>")):
        start = valid.rfind(opening)
        end = valid.find(closing, start + len(opening)) if start >= 0 else -1
        if end >= 0:
            answer = valid[start + len(opening):end]
            answer = rng.choice([expression, f"{answer} + {expression}",
                                 f"{answer}*{expression}"])
            valid = valid[:start + len(opening)] + answer + valid[end:]
            break
    return mutate(rng, valid) if rng.random() < 0.3 else valid


def check_code_run(tally: ScorerTally, marker: Path, reply: str) -> None:
    if marker.exists():
        tally.record("code run", "code run from a reply: it touched the marker file", reply)
        marker.unlink()


def replies_of(rng: random.Random, marker: Path, valid: Callable[[Any], str]
               ) -> Callable[[Any], str]:
    def reply(environment: Any) -> str:
        draw = rng.random()
        if draw < 0.1:
            return with_marker(rng.choice(list(STUDY_REPLIES.values())), marker)
        if draw < 0.2:
            return valid(environment)
        if draw < 0.7:
            return with_marker(bombed(rng, valid(environment)), marker)
        return mutate(rng, valid(environment))
    return reply


def fixed_replies(marker: Path) -> list[str]:
    return [with_marker(text, marker) for text in (*STUDY_REPLIES.values(), *BOMBS.values())]


def step_all(tally: ScorerTally, family: Any, replies: list[str],
             reply: Callable[[Any], str], tries: int, bound_s: float, marker: Path) -> None:
    """Every fixed reply, then `tries` episodes of `reply`, each checked for code run."""
    samples = list(family.sample_ids("train"))

    def checked(source: Callable[[Any], str]) -> Callable[[Any], str]:
        def text(environment: Any) -> str:
            chosen = source(environment)
            # the previous step's code has run by now: count it against that reply
            check_code_run(tally, marker, last[0])
            last[0] = chosen
            return chosen
        return text

    last = [""]
    for index, text in enumerate(replies):
        play(tally, family, samples[index % len(samples)], checked(lambda _, t=text: t),
             bound_s)
    for index in range(tries):
        play(tally, family, samples[index % len(samples)], checked(reply), bound_s)
        progress(tally, index, tries)
    check_code_run(tally, marker, last[0])


# ---- A: reasoning-gym's scorers --------------------------------------------------------
def fuzz_reasoning_gym(dataset: str, tries: int, rng: random.Random, watch: CallWatch,
                       marker: Path, timeout_s: float) -> ScorerTally:
    from src.tasks.adapters.reasoning_gym.task import ReasoningGymTask

    family = ReasoningGymTask(dataset, splits=SplitsWithSelection(num_train=4, num_validation=1),
                              scorer_timeout_s=timeout_s)
    with watching(watch, ScorerTally(f"reasoning-gym {dataset}")) as tally:
        try:
            # a step's bound is its calls' (checked by the watch), not the step's own
            step_all(tally, family, fixed_replies(marker),
                     replies_of(rng, marker, lambda env: env.oracle_reply()), tries,
                     math.inf, marker)
        finally:
            family.close()
    return tally


# ---- B: rubric functions that misbehave ------------------------------------------------
def fuzz_rubric(tries: int, rng: random.Random, watch: CallWatch, marker: Path,
                timeout_s: float) -> ScorerTally:
    """The quick functions together on the corpus, the bombs and mutations; each slow one
    alone, then all together, on a few of those (one failure must not hide the next)."""
    with watching(watch, ScorerTally("rubric functions")) as tally:
        quick = [function for function in HOSTILE_FUNCTIONS if function.__name__ not in SLOW]
        texts = [*fixed_replies(marker), *(mutate(rng, "4") for _ in range(tries))]
        runs = [(Rubric(quick, timeout_s=timeout_s), texts)]
        runs += [(Rubric([function], timeout_s=timeout_s), rng.sample(texts, 2))
                 for function in HOSTILE_FUNCTIONS if function.__name__ in SLOW]
        runs.append((Rubric(list(HOSTILE_FUNCTIONS), timeout_s=timeout_s),
                     rng.sample(texts, 2)))
        samples = {"train": [{"question": "What is 2 + 2?", "answer": "4"}]}
        for rubric, chosen in runs:
            family = SingleTurnTask(samples, rubric, oracle=lambda _: "4")
            step_all(tally, family, chosen, lambda _: "4", 0, math.inf, marker)
            for name in rubric.names:
                tally.count(name)
    return tally


# ---- C: a verifiers rollout whose reward misbehaves ------------------------------------
def fuzz_verifiers(watch: CallWatch) -> ScorerTally:
    """One episode per reward behaviour, a fresh task each (a blocked loop stays blocked
    for its BLOCK_S); the scripted model answers "4"."""
    from experiments.hostile_inputs.hostile_verifiers_env import REWARDS
    from src.agents.instance.openai_client_agent import OpenAIClientAgent
    from src.language_models.embedded_model import DEFAULT_MODEL, resolve_model_path
    from src.records.episode import EpisodeStatus
    from src.run.rollout import roll_out_lockstep
    from src.tasks.adapters.verifiers.environments import DEADLINE_GRACE_S
    from src.tasks.adapters.verifiers.task import VerifiersTask
    from tests.agents.scripted_model import ScriptedLanguageModel

    path = resolve_model_path(DEFAULT_MODEL)
    tokenizer = ScriptedLanguageModel(path, []).tokenizer
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    reply = (tokenizer("4", add_special_tokens=False)["input_ids"] + [end_of_turn], "stop")
    bound_s = 2 * (ROLLOUT_TIMEOUT_S + DEADLINE_GRACE_S)
    with watching(watch, ScorerTally("verifiers rewards")) as tally:
        for reward in REWARDS:
            task = VerifiersTask("experiments.hostile_inputs.hostile_verifiers_env",
                                 {"reward": reward}, num_validation=1,
                                 rollout_timeout_s=ROLLOUT_TIMEOUT_S)
            agent = OpenAIClientAgent(ScriptedLanguageModel(path, [reply] * 4), None,
                                      max_new_tokens=8)
            started = time.monotonic()
            tally.tries += 1
            try:
                (episode,) = roll_out_lockstep([(task.get_sample("train-000000"), 0)], task,
                                               agent, 0, [0])
            except Exception as error:  # noqa: BLE001 - what the study counts
                tally.record("crash", f"{reward}: {type(error).__name__}: {error}", reward)
                continue
            finally:
                agent.endpoint.close()
                task.close()
            seconds = time.monotonic() - started
            tally.max_seconds = max(tally.max_seconds, seconds)
            tally.count(f"{reward}: {episode.status.value} reward {episode.reward}")
            if seconds > bound_s:
                tally.record("time", f"{reward}: the episode took {seconds:.1f} s", reward)
            expected = EpisodeStatus.COMPLETED if reward == "sound" else EpisodeStatus.TASK_ERROR
            if (episode.status is not expected or not math.isfinite(episode.reward)
                    or (expected is EpisodeStatus.TASK_ERROR and not episode.error)):
                tally.record("unscored", f"reward {reward}: status {episode.status.value}, "
                             f"reward {episode.reward}, error {episode.error!r:.200}", reward)
            if not all(map(math.isfinite, episode.metrics.values())):
                tally.record("not finite", f"reward {reward}: metrics {episode.metrics}",
                             reward)
    return tally


# ---- D: TextArena games' move checks ---------------------------------------------------
GAMES: dict[str, Callable[[random.Random], str]] = {
    "Countdown-v0": lambda rng: f"[{rng.randint(0, 5)} {rng.randint(0, 5)} "
                                f"{rng.choice('+-*/')}]",
    "Minesweeper-v0": lambda rng: f"[{rng.randint(0, 7)} {rng.randint(0, 7)}]",
    "LightsOut-v0": lambda rng: f"[{rng.randint(0, 4)} {rng.randint(0, 4)}]",
    "Cryptarithm-v0": lambda rng: f"[{rng.choice('SENDMORY')} {rng.randint(0, 9)}]",
    "Mastermind-v0": lambda rng: "[" + " ".join(str(rng.randint(1, 6)) for _ in range(4)) + "]",
    "TowerOfHanoi-v0": lambda rng: f"[{rng.choice('ABC')} {rng.choice('ABC')}]",
    "Sudoku-v0": lambda rng: f"[{rng.randint(1, 9)} {rng.randint(1, 9)} {rng.randint(1, 9)}]",
    "FrozenLake-v0": lambda rng: f"[{rng.choice(['up', 'down', 'left', 'right'])}]",
    "Blackjack-v0": lambda rng: f"[{rng.choice(['hit', 'stand'])}]",
    "Crosswords-v0": lambda rng: f"[{rng.randint(0, 5)} {rng.randint(0, 5)} "
                                 f"{rng.choice('ABCDE')}]",
}


def fuzz_game(game: str, tries: int, rng: random.Random, watch: CallWatch,
              marker: Path) -> ScorerTally:
    from src.tasks.adapters.textarena.task import TextArenaTask

    family = TextArenaTask(game, splits=SplitsWithSelection(num_train=4, num_validation=1),
                           max_turns=3)
    move = GAMES[game]
    moves = [with_marker(text, marker) for text in BOMB_EXPRESSIONS.values()]
    with watching(watch, ScorerTally(f"textarena {game}")) as tally:
        try:
            step_all(tally, family, [*fixed_replies(marker), *(f"[{m}]" for m in moves)],
                     replies_of(rng, marker, lambda _: move(rng)), tries, STEP_SECONDS,
                     marker)
        finally:
            family.close()
    return tally


# ---- the run ---------------------------------------------------------------------------
def summary_table(tallies: list[ScorerTally]) -> str:
    lines = ["| target | tries | crashes | unscored | bounds exceeded | code run | bounded "
             "calls | scorer timeouts | max call s | max worker setup s | max step s | "
             "RSS growth MB | worker peak MB | seconds |", "| --- |" + " ---: |" * 13]
    totals = [0, 0, 0, 0, 0, 0, 0]
    for t in tallies:
        figures = [t.tries, t.crashes, t.unscored, t.bounds_exceeded, t.code_runs,
                   t.bounded_calls, t.scorer_timeouts]
        totals = [total + figure for total, figure in zip(totals, figures, strict=True)]
        lines.append(f"| {t.target} | " + " | ".join(map(str, figures))
                     + f" | {t.max_call_seconds:.2f} | {t.max_worker_setup_seconds:.2f} | "
                       f"{t.max_seconds:.2f} | {t.rss_growth_mb:.0f} | "
                       f"{t.worker_peak_mb:.0f} | {t.seconds:.0f} |")
    lines.append("| all | " + " | ".join(map(str, totals)) + " | | | | | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tries", type=int, default=40,
                        help="mutated replies per target, beside the fixed ones")
    parser.add_argument("--targets", default="reasoning_gym,rubric,verifiers,textarena",
                        help="a comma-separated subset of reasoning_gym, rubric, verifiers, "
                             "textarena")
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--games", default=",".join(GAMES))
    parser.add_argument("--scorer_timeout_s", type=float, default=SCORER_TIMEOUT_S)
    parser.add_argument("--output", type=Path, help="the counts and findings as JSON")
    arguments = parser.parse_args(argv)
    targets = set(arguments.targets.split(","))
    rng = random.Random(arguments.seed)
    # each overrun and failing function is logged; the study counts them instead
    for name in ("src.tasks.rubric", "src.tasks.adapters.textarena.task"):
        logging.getLogger(name).setLevel(logging.ERROR)
    tallies: list[ScorerTally] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as folder, CallWatch() as watch:
        marker = Path(folder) / "code_ran"
        runs: list[tuple[str, Callable[[], ScorerTally]]] = []
        if "reasoning_gym" in targets:
            runs += [(f"reasoning-gym {dataset}", functools.partial(
                fuzz_reasoning_gym, dataset, arguments.tries, rng, watch, marker,
                arguments.scorer_timeout_s)) for dataset in arguments.datasets.split(",")]
        if "rubric" in targets:
            runs.append(("rubric functions", functools.partial(
                fuzz_rubric, arguments.tries, rng, watch, marker, arguments.scorer_timeout_s)))
        if "verifiers" in targets:
            runs.append(("verifiers rewards", functools.partial(fuzz_verifiers, watch)))
        if "textarena" in targets:
            runs += [(f"textarena {game}", functools.partial(
                fuzz_game, game, arguments.tries, rng, watch, marker))
                for game in arguments.games.split(",")]
        for name, run in runs:
            print(name, flush=True)
            try:
                tallies.append(run())
            except Exception as error:  # noqa: BLE001 - the target's set-up, not a try
                tally = ScorerTally(name)
                tally.record("crash", f"the target could not be set up: "
                             f"{type(error).__name__}: {error}", name)
                tallies.append(tally)
            print(summary_table(tallies[-1:]).splitlines()[2], flush=True)
    seconds = time.monotonic() - started
    print(summary_table(tallies))
    for tally in tallies:
        if tally.outcomes:
            print(f"- {tally.target}: {dict(sorted(tally.outcomes.items()))}")
        for finding in tally.findings.values():
            print(f"- {tally.target}: {finding.count} x {finding.kind}: {finding.what[:200]}\n"
                  f"    e.g. {finding.example[:200]}")
    print(f"{sum(t.tries for t in tallies)} tries in {seconds:.0f} s")
    if arguments.output is not None:
        arguments.output.parent.mkdir(parents=True, exist_ok=True)
        arguments.output.write_text(json.dumps({
            "command": " ".join(["python -m experiments.hostile_inputs.fuzz_scorers",
                                 *(argv if argv is not None else sys.argv[1:])]),
            "seconds": seconds,
            "bounds": {"scorer_timeout_s": arguments.scorer_timeout_s,
                       "step_s": STEP_SECONDS, "worker_rss_mb": WORKER_RSS_MB,
                       "rollout_timeout_s": ROLLOUT_TIMEOUT_S},
            "targets": [{**asdict(t), "findings": list(map(asdict, t.findings.values()))}
                        for t in tallies]}, indent=1))
    return 1 if any(t.crashes or t.unscored or t.bounds_exceeded or t.code_runs
                    for t in tallies) else 0


if __name__ == "__main__":
    sys.exit(main())
