"""A rubric: named reward functions with weights, scoring one reply.

A reward function is a plain function that returns a float. It declares what it needs by
naming parameters among `REWARD_ARGUMENTS`, and receives only those, by keyword:

- `reply`: the agent's reply, as written (no stripping: the function decides);
- `answer`: the sample's `answer` field (None where it has none; `SingleTurnTask` refuses
  such samples when a function asks for it);
- `sample`: all the sample's fields, the mapping it was written as (read-only);
- `sample_id`: the sample's id (verl's `compute_score` is given it in `extra_info`);
- `prompt`: the text the task asked.

A function taking `**kwargs` receives all five. Asking for any other parameter without a
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

A `DetailedReward` may also carry `texts`, short strings kept in the episode's info under
`reward_function_texts` -> `<name>` (a judge's prompt and verdict), which the run page
shows with the episode; the function keeps them short.

A config names a function with settings as a `RewardTerm`: a dotted path, the settings
it is built with, and its weight.
"""

from __future__ import annotations

import inspect
import logging
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, PrivateAttr, model_validator

from src.configuration.components import import_dotted
from src.records.episode import Sample
from src.sandboxes.bounded_call import (
    SCORER_TIMEOUT_S,
    BoundedFunction,
    BoundExceeded,
    ScorerUnavailable,
)

if TYPE_CHECKING:  # not imported: the scoring worker imports this module, and no torch
    from src.language_models.language_model import LanguageModel

logger = logging.getLogger(__name__)

REWARD_ARGUMENTS = ("reply", "answer", "sample", "sample_id", "prompt")
TIMEOUT_METRIC = "scorer_timeout"  # 1: a function ran past its bound on the reply
# The loop's own per-episode figures (`eval/reward`, ...) and the rubric's: a function of
# the same name would overwrite them in the metrics.
RESERVED_NAMES = frozenset({"reward", "success_rate", "episodes", TIMEOUT_METRIC})
ERRORS_KEY = "reward_function_errors"
TEXTS_KEY = "reward_function_texts"
SCORER_TIMEOUTS_KEY = "scorer_timeouts"
_MESSAGE_LIMIT = 500  # characters of a failure's message kept in the episode's info


@dataclass(frozen=True)
class DetailedReward:
    """What a reward function may return instead of a float: the value, figures of its
    own, reported as `<name>/<key>` and never added into the score, and texts kept in the
    episode's info (see the module docstring)."""

    value: float
    details: Mapping[str, float] = field(default_factory=dict)
    texts: Mapping[str, str] = field(default_factory=dict)


RewardFunction = Callable[..., float | DetailedReward]


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


class _Call:
    """A reward function as the worker process calls it: the sample, which crosses as a
    plain dict, is made read-only again there."""

    def __init__(self, function: RewardFunction, name: str) -> None:
        self.function = function
        self.__name__ = name

    def __call__(self, given: dict[str, Any]) -> float | DetailedReward:
        if "sample" in given:
            given = given | {"sample": MappingProxyType(given["sample"])}
        return self.function(**given)


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
            name = _name_of(function)
            if any(entry.name == name for entry in entries):
                raise ValueError(f"two reward functions are named '{name}': metrics are "
                                 "reported by name, so each needs its own")
            if not math.isfinite(weight):
                raise ValueError(f"reward function '{name}': weight {weight} is not finite")
            arguments = _arguments_of(name, function)
            call = _Call(function, name)
            bounded = None
            if getattr(function, "runs_in_caller", False) is not True:
                try:
                    bounded = BoundedFunction(
                        call, read_paths=getattr(function, "read_paths", ()))
                except ValueError as error:
                    raise ValueError(f"reward function {error}") from error
            entries.append(_Entry(name, call, bounded, float(weight), arguments))
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
        given = {"reply": reply, "answer": sample.data.get("answer"),
                 "sample": dict(sample.data), "sample_id": sample.sample_id,
                 "prompt": prompt}
        values: dict[str, float] = {}
        errors: dict[str, str] = {}
        details: dict[str, float] = {}
        timeouts: list[str] = []
        texts: dict[str, dict[str, str]] = {}
        for entry in self._entries:
            arguments = {key: given[key] for key in entry.arguments}
            try:
                result = (entry.call(arguments) if entry.bounded is None
                          else entry.bounded(arguments, timeout_s=self.timeout_s))
                values[entry.name], own = self._checked(result)
            except ScorerUnavailable:  # the host's failure, not the reply's
                raise
            except Exception as error:  # untrusted replies: see the module docstring
                overran = isinstance(error, BoundExceeded)
                if overran:
                    timeouts.append(entry.name)
                    logger.warning("reward function '%s': %s; scored 0", entry.name, error)
                elif not self.catch_errors:
                    raise
                values[entry.name] = 0.0
                if not self.catch_errors:
                    continue
                errors[entry.name] = f"{type(error).__name__}: {error}"[:_MESSAGE_LIMIT]
                if not overran and entry.name not in self._failed:
                    self._failed.add(entry.name)
                    logger.warning("reward function '%s' failed (scored 0; later failures "
                                   "only counted in metric %s/error)", entry.name,
                                   entry.name, exc_info=True)
                continue
            details.update((f"{entry.name}/{key}", value) for key, value in own.items())
            if isinstance(result, DetailedReward) and result.texts:
                texts[entry.name] = dict(result.texts)
        score = sum(entry.weight * values[entry.name] for entry in self._entries)
        return RubricScore(score=score, values=values, errors=errors, details=details,
                           counts_errors=self.catch_errors, timeouts=tuple(timeouts),
                           texts=texts)

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


class RewardTerm(BaseModel):
    """A reward function as a config gives it with settings: `function` by dotted path,
    called with `parameters` where they are given (a class, such as a judge, that builds
    the reward function), and its weight in the rubric. The path is imported, and the
    parameters checked against the class's `settings_model` (a pydantic model) where it
    has one, when the term is read: a config's dry run finds their mistakes.

    Settings may name language models of the run (a judge's `language_model`): the class
    says which by a classmethod `language_model_names(parameters)` (the setting naming
    each -> its name). A run checks the names against its `language_model_list` and gives
    the term the live models (`with_language_models`, src/run/assembly.py); the class is
    then built with `language_models={name: model}` beside its parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    function: str  # a dotted path: a reward function, or what builds one from `parameters`
    weight: float = 1.0
    parameters: dict[str, Any] | None = None  # None: `function` is the reward function
    # the live language models its settings name, by name (`with_language_models`)
    _language_models: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def check_function(self) -> RewardTerm:
        try:
            target = import_dotted(self.function)
        except ImportError as error:
            raise ValueError(f"function '{self.function}': {error}") from error
        settings_model = getattr(target, "settings_model", None)
        if self.parameters is not None and settings_model is not None:
            settings_model.model_validate(self.parameters)
        return self

    def language_model_names(self) -> dict[str, str]:
        """The run's language models that the settings name, by the setting naming each."""
        names = getattr(import_dotted(self.function), "language_model_names", None)
        return {} if names is None or self.parameters is None else dict(names(self.parameters))

    def with_language_models(self, models: Mapping[str, LanguageModel]) -> RewardTerm:
        """This term, to be built with `models` (the run's, by name)."""
        term = self.model_copy()
        term._language_models = dict(models)
        return term

    def build(self) -> RewardFunction:
        target = import_dotted(self.function)
        if self.parameters is None:
            return target
        named = set(self.language_model_names().values())
        if not named:
            return target(**self.parameters)
        missing = sorted(named - set(self._language_models))
        if missing:
            raise ValueError(f"reward function {self.function} names language models "
                             f"{missing}, which it was not given (a run gives those of its "
                             "language_model_list; in Python, `with_language_models`)")
        return target(**self.parameters,
                      language_models={name: self._language_models[name] for name in named})


def _name_of(function: Any) -> str:
    name = getattr(function, "__name__", None)
    if not callable(function) or not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"reward function {function!r:.80} has no name to report it by "
                         "(a lambda, a partial): write it as a def")
    if name in RESERVED_NAMES:
        raise ValueError(f"reward function '{name}': the loop reports its own '{name}' "
                         f"figure; rename the function (reserved: {sorted(RESERVED_NAMES)})")
    return name


def _arguments_of(name: str, function: RewardFunction) -> frozenset[str]:
    """The names among REWARD_ARGUMENTS that `function` takes; ValueError for a parameter
    the rubric cannot fill."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError) as error:
        raise ValueError(f"reward function '{name}': no signature to read ({error})") from error
    takes_all = any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters)
    taken: set[str] = set(REWARD_ARGUMENTS) if takes_all else set()
    for parameter in parameters:  # with **kwargs too: a named parameter must be fillable
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if parameter.name in REWARD_ARGUMENTS and parameter.kind is not parameter.POSITIONAL_ONLY:
            taken.add(parameter.name)
        elif parameter.default is parameter.empty:
            raise ValueError(f"reward function '{name}' takes '{parameter.name}', which a "
                             f"rubric cannot give (it gives by keyword: "
                             f"{', '.join(REWARD_ARGUMENTS)})")
    return frozenset(taken)
