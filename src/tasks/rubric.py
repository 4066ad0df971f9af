"""A rubric: named reward functions with weights, scoring one reply or a group's replies.

A reward function is a plain function that returns a float. It declares what it needs by
naming parameters among `REWARD_ARGUMENTS`, and receives only those, by keyword:

- `reply`: the agent's reply, as written (no stripping: the function decides);
- `answer`: the sample's `answer` field (None where it has none; `SingleTurnTask` refuses
  such samples when a function asks for it);
- `sample`: all the sample's fields, the mapping it was written as (read-only);
- `sample_id`: the sample's id (verl's `compute_score` is given it in `extra_info`);
- `prompt`: the text the task asked;
- `transcript`: the episode's chat as text (`transcript_of`), for a function that judges
  a whole dialogue; a reply scored alone has its prompt and itself as its transcript.

A function taking `**kwargs` receives all six. Asking for any other parameter without a
default is an error when the rubric is built, not when the first reply comes. A function
may return a `DetailedReward` instead of a float: its value, and figures of its own that
are reported as `<name>/<key>` (verl's dict of a `score` and other numbers).

The score is the weighted sum of the values, added in the order of the functions. Each
function's value is reported as the episode metric `<name>` (so the loop logs
`rollout/<name>` and `eval/<name>`) with `<name>/error` beside it: replies are untrusted
text, and a function that raises on one (or returns something other than a finite number)
gets 0 for that reply and error 1, its message goes in the episode's info under
`reward_function_errors`, and the run goes on. The first failure of each function is also
logged with its traceback, so that a bug in the function itself (every reply scoring 0)
does not pass silently.

A task's own reward terms (the math family's) are built with `catch_errors=False`: their
failure is a bug in the task, not something a reply may do, so it raises, and the episode
ends as `task_error` like any failure of its environment; nothing is caught, so no
`<name>/error` metric is reported.

Every function runs bounded in time (`timeout_s` a call, src/sandboxes/bounded_call.py): in
a worker process that is killed when a reply keeps it computing (sympy on
`9**9**9**9`, a loop), so a function must be importable there: a module-level def, or an
object of a module-level class. The worker is isolated (it sees only the module search
path read-only): a function that reads another host file (one it loads by path) names it
in a `read_paths` attribute. An overrun is something a reply did, whichever the
rubric: the function scores 0 and is listed in the episode's info under
`scorer_timeouts`; where errors are counted it is also an error (`<name>/error` 1, its
message in `reward_function_errors`) and the episode metric `scorer_timeout` is 1.

A function that says `runs_in_caller = True` (an attribute of its class, or of the def)
is called in the calling process instead, outside the worker and its bound: trusted code
that needs what the worker lacks (the network, a model too large to load twice), such as
a judge model behind an HTTP server or a reward model (src/tasks/model_rewards/). It
bounds its own time, and never evaluates the reply. Its failures are scored as above.
One that holds something to release (a reward model's Ray actor) has a `close()`, which
the rubric's `close` calls; the task that built the rubric closes it with itself.

`score_group` scores a group's replies at once, each as `score` would. A function that runs
in the caller and can score many replies at once (a judge model, a reward model) has a
method `many(arguments)`: the keyword arguments of each reply's call in, in order, and
each reply's value (a float or a `DetailedReward`) or the exception that is its failure
out. `score_group` asks it once for the whole group, so that the group's replies reach
its model together (one generate call, one forward batch); it calls every other function
reply by reply. `scores_together` says whether a rubric has such a function: a task
whose reward has one scores its replies where a group has ended (src/tasks/task.py
`_score_group`), each episode's last reply (src/tasks/reward_terms.py).

A `DetailedReward` may also carry `texts`, short strings kept in the episode's info under
`reward_function_texts` -> `<name>` (a judge's prompt and verdict), which the run page
shows with the episode; the function keeps them short.

What a reward function takes and returns, and a function with settings as a config gives
it (a `RewardTerm`), are src/tasks/reward_functions.py's.
"""

from __future__ import annotations

import logging
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from src.configuration.components import import_dotted
from src.records.episode import Sample
from src.sandboxes.bounded_call import (
    SCORER_TIMEOUT_S,
    BoundedFunction,
    BoundExceeded,
    ScorerUnavailable,
)
from src.tasks.reward_functions import (
    TIMEOUT_METRIC,
    DetailedReward,
    RewardFunction,
    RewardOrError,
    arguments_of,
    name_of,
    transcript_of,
)

logger = logging.getLogger(__name__)

ERRORS_KEY = "reward_function_errors"
TEXTS_KEY = "reward_function_texts"
SCORER_TIMEOUTS_KEY = "scorer_timeouts"
_MESSAGE_LIMIT = 500  # characters of a failure's message kept in the episode's info


@dataclass(frozen=True)
class RubricScore:
    """One reply's scoring: the weighted sum, each function's value, the messages of the
    functions that failed on it, the functions' details as `<name>/<key>` metrics, the
    functions that ran past their bound, and the functions' texts by name."""

    score: float
    values: dict[str, float]
    errors: dict[str, str]
    details: dict[str, float] = field(default_factory=dict)
    counts_errors: bool = True  # False: a rubric that lets failures raise
    timeouts: tuple[str, ...] = ()
    texts: dict[str, dict[str, str]] = field(default_factory=dict)

    def metrics(self) -> dict[str, float]:
        """The episode metrics: `<name>` (and `<name>/error` where errors are counted) for
        every function, `scorer_timeout` where errors are counted, then the details."""
        metrics: dict[str, float] = {}
        for name, value in self.values.items():
            metrics[name] = value
            if self.counts_errors:
                metrics[f"{name}/error"] = float(name in self.errors)
        if self.counts_errors:
            metrics[TIMEOUT_METRIC] = float(bool(self.timeouts))
        return metrics | self.details

    def info(self) -> dict[str, Any]:
        """The episode info entries: the failures' messages, the functions that ran past
        their bound and the functions' texts, where there were any."""
        info: dict[str, Any] = {ERRORS_KEY: dict(self.errors)} if self.errors else {}
        if self.timeouts:
            info[SCORER_TIMEOUTS_KEY] = list(self.timeouts)
        if self.texts:
            info[TEXTS_KEY] = {name: dict(texts) for name, texts in self.texts.items()}
        return info


@dataclass(frozen=True)
class _Entry:
    name: str
    call: _Call
    bounded: BoundedFunction | None  # `call` in the worker; None: it runs in the caller
    weight: float
    arguments: frozenset[str]  # what the function is given, by keyword
    together: bool  # it runs in the caller and scores many replies at once (`many`)


class _Call:
    """A reward function as the worker process calls it: the sample, which crosses as a
    plain dict, is made read-only again there."""

    def __init__(self, function: RewardFunction, name: str) -> None:
        self.function = function
        self.__name__ = name

    def __call__(self, given: dict[str, Any]) -> float | DetailedReward:
        return self.function(**self._read_only(given))

    @property
    def scores_many(self) -> bool:
        """Whether the function scores many replies at once (`many`): see the module
        docstring."""
        return callable(getattr(self.function, "many", None))

    def many(self, given: Sequence[dict[str, Any]]) -> list[RewardOrError]:
        return self.function.many([self._read_only(arguments) for arguments in given])

    @staticmethod
    def _read_only(given: dict[str, Any]) -> dict[str, Any]:
        if "sample" in given:
            return given | {"sample": MappingProxyType(given["sample"])}
        return given


class Rubric:
    """Reward functions (callables, or dotted paths `package.module.function` as a config
    names them) with their weights, 1 each unless given; a function's name is its
    `__name__`, so each must be a distinct `def`. `catch_errors` and `timeout_s` (each
    call's bound): see the module docstring."""

    def __init__(self, funcs: Sequence[RewardFunction | str],
                 weights: Sequence[float] | None = None, *, catch_errors: bool = True,
                 timeout_s: float = SCORER_TIMEOUT_S) -> None:
        if not funcs:
            raise ValueError("a rubric needs at least one reward function")
        weights = [1.0] * len(funcs) if weights is None else list(weights)
        if len(weights) != len(funcs):
            raise ValueError(f"{len(funcs)} reward functions but {len(weights)} weights")
        entries: list[_Entry] = []
        for func, weight in zip(funcs, weights, strict=True):
            function = import_dotted(func) if isinstance(func, str) else func
            name = name_of(function)
            if any(entry.name == name for entry in entries):
                raise ValueError(f"two reward functions are named '{name}': metrics are "
                                 "reported by name, so each needs its own")
            if not math.isfinite(weight):
                raise ValueError(f"reward function '{name}': weight {weight} is not finite")
            arguments = arguments_of(name, function)
            call = _Call(function, name)
            bounded = None
            if getattr(function, "runs_in_caller", False) is not True:
                try:
                    bounded = BoundedFunction(
                        call, read_paths=getattr(function, "read_paths", ()))
                except ValueError as error:
                    raise ValueError(f"reward function {error}") from error
            entries.append(_Entry(name, call, bounded, float(weight), arguments,
                                  bounded is None and call.scores_many))
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self._entries = tuple(entries)
        self.catch_errors = catch_errors
        self.timeout_s = timeout_s
        self._failed: set[str] = set()  # functions whose first failure was logged

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(entry.name for entry in self._entries)

    @property
    def scores_together(self) -> bool:
        """Whether a function scores a group's replies at once (`score_group` asks it
        once): a judge model, a reward model."""
        return any(entry.together for entry in self._entries)

    @property
    def arguments(self) -> frozenset[str]:
        """The arguments that some function asks for (a task checks its samples hold an
        `answer` where one is asked for)."""
        return frozenset().union(*(entry.arguments for entry in self._entries))

    def close(self) -> None:
        """Release what the functions hold: each one's `close()`, where it has one."""
        for entry in self._entries:
            close = getattr(entry.call.function, "close", None)
            if callable(close):
                close()

    def score(self, reply: str, sample: Sample, prompt: str) -> RubricScore:
        """Every function on `reply` to `sample`, asked as `prompt`. Raises for what a
        function does only without `catch_errors`: see the module docstring."""
        return self._scores([_given(reply, sample, prompt, None, self.arguments)],
                            together=False)[0]

    def score_group(self, replies: Sequence[str], samples: Sequence[Sample],
                    prompts: Sequence[str], transcripts: Sequence[str] | None = None
                    ) -> list[RubricScore]:
        """`score` of each reply to its sample, asked as its prompt (in the dialogue its
        transcript writes, where given), with each function that scores many at once
        asked once for them all: see the module docstring."""
        given = list(transcripts) if transcripts is not None else [None] * len(replies)
        if not len(replies) == len(samples) == len(prompts) == len(given):
            raise ValueError(f"{len(replies)} replies, {len(samples)} samples, "
                             f"{len(prompts)} prompts and {len(given)} transcripts: give "
                             "one of each per reply")
        return self._scores([_given(*arguments, self.arguments) for arguments
                             in zip(replies, samples, prompts, given, strict=True)],
                            together=True)

    def _scores(self, given: list[dict[str, Any]], together: bool) -> list[RubricScore]:
        """The scores of the replies that `given` holds the arguments of, each function
        asked for them all at once where `together` and it can."""
        tallies = [_Tally() for _ in given]
        for entry in self._entries:
            asked = [{key: arguments[key] for key in entry.arguments} for arguments in given]
            if together and entry.together:
                outcomes = self._many(entry, asked)
            else:
                outcomes = [self._outcome(entry, arguments) for arguments in asked]
            for tally, outcome in zip(tallies, outcomes, strict=True):
                self._add(entry, outcome, tally)
        return [RubricScore(
            score=sum(entry.weight * tally.values[entry.name] for entry in self._entries),
            values=tally.values, errors=tally.errors, details=tally.details,
            counts_errors=self.catch_errors, timeouts=tuple(tally.timeouts),
            texts=tally.texts) for tally in tallies]

    def _outcome(self, entry: _Entry, arguments: dict[str, Any]) -> RewardOrError:
        """What the function gave for one reply, or the exception it raised."""
        try:
            return (entry.call(arguments) if entry.bounded is None
                    else entry.bounded(arguments, timeout_s=self.timeout_s))
        except ScorerUnavailable:  # the host's failure, not the reply's
            raise
        except Exception as error:  # untrusted replies: see the module docstring
            return error

    @staticmethod
    def _many(entry: _Entry, asked: list[dict[str, Any]]) -> list[RewardOrError]:
        """What the function gave for each reply, asked once for them all; its failure
        as a whole is each reply's."""
        try:
            outcomes = entry.call.many(asked)
            if len(outcomes) != len(asked):
                raise RuntimeError(f"many() gave {len(outcomes)} outcomes for {len(asked)} "
                                   "replies")
        except Exception as error:
            return [error] * len(asked)
        return outcomes

    def _add(self, entry: _Entry, outcome: RewardOrError, tally: _Tally) -> None:
        """A function's outcome on one reply into the reply's tally: its value and what
        it reports, or 0 and its failure (raised without `catch_errors`)."""
        if not isinstance(outcome, Exception):
            try:
                tally.values[entry.name], own = self._checked(outcome)
            except Exception as error:
                outcome = error
            else:
                tally.details.update((f"{entry.name}/{key}", value)
                                     for key, value in own.items())
                if isinstance(outcome, DetailedReward) and outcome.texts:
                    tally.texts[entry.name] = dict(outcome.texts)
                return
        overran = isinstance(outcome, BoundExceeded)
        if overran:
            tally.timeouts.append(entry.name)
            logger.warning("reward function '%s': %s; scored 0", entry.name, outcome)
        elif not self.catch_errors:
            raise outcome
        tally.values[entry.name] = 0.0
        if not self.catch_errors:
            return
        tally.errors[entry.name] = f"{type(outcome).__name__}: {outcome}"[:_MESSAGE_LIMIT]
        if not overran and entry.name not in self._failed:
            self._failed.add(entry.name)
            logger.warning("reward function '%s' failed (scored 0; later failures only "
                           "counted in metric %s/error)", entry.name, entry.name,
                           exc_info=outcome)

    def _checked(self, result: Any) -> tuple[float, dict[str, float]]:
        """The value and the details of what a function returned; TypeError or ValueError
        for anything but a finite number (or a `DetailedReward` of one)."""
        value, details = ((result.value, result.details) if isinstance(result, DetailedReward)
                          else (result, {}))
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"returned {value!r:.80} ({type(value).__name__}), not a float")
        if not math.isfinite(value):
            raise ValueError(f"returned {value}, not a finite number")
        if any(not isinstance(figure, numbers.Real) or not math.isfinite(figure)
               for figure in details.values()):
            raise TypeError(f"returned details {dict(details)!r:.80} that are not all "
                            "finite numbers")
        if isinstance(result, DetailedReward) and not all(
                isinstance(text, str) for text in result.texts.values()):
            raise TypeError(f"returned texts {dict(result.texts)!r:.80} that are not all "
                            "strings")
        if self.catch_errors and "error" in details:
            raise ValueError("returned a detail 'error', which would overwrite the metric "
                             "<name>/error")
        return float(value), {key: float(figure) for key, figure in details.items()}


@dataclass
class _Tally:
    """One reply's scoring as the functions are asked: see `RubricScore`."""

    values: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    details: dict[str, float] = field(default_factory=dict)
    timeouts: list[str] = field(default_factory=list)
    texts: dict[str, dict[str, str]] = field(default_factory=dict)


def _given(reply: str, sample: Sample, prompt: str, transcript: str | None,
           asked: frozenset[str]) -> dict[str, Any]:
    """Every argument a function may take, for one reply (see REWARD_ARGUMENTS); the
    transcript only where a function of the rubric (`asked`) takes it."""
    given = {"reply": reply, "answer": sample.data.get("answer"), "sample": dict(sample.data),
             "sample_id": sample.sample_id, "prompt": prompt}
    if "transcript" in asked:
        given["transcript"] = (transcript_of([("user", prompt), ("agent", reply)])
                               if transcript is None else transcript)
    return given
