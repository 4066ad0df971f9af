"""What a reward function is: the arguments it may take (`REWARD_ARGUMENTS`, by keyword),
what it returns (a float, or a `DetailedReward`), the name it is reported by; and a reward
function with settings as a config gives it (`RewardTerm`). A rubric of them scores
replies (src/tasks/rubric.py, whose docstring says how).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, PrivateAttr, model_validator

from src.configuration.components import import_dotted

if TYPE_CHECKING:  # not imported: the scoring worker imports this module, and no torch
    from src.language_models.language_model import LanguageModel


REWARD_ARGUMENTS = ("reply", "answer", "sample", "sample_id", "prompt", "transcript")


TIMEOUT_METRIC = "scorer_timeout"  # 1: a function ran past its bound on the reply


# The loop's own per-episode figures (`eval/reward`, ...) and the rubric's: a function of
# the same name would overwrite them in the metrics.
RESERVED_NAMES = frozenset({"reward", "success_rate", "episodes", TIMEOUT_METRIC})


@dataclass(frozen=True)
class DetailedReward:
    """What a reward function may return instead of a float: the value, figures of its
    own, reported as `<name>/<key>` and never added into the score, and texts kept in the
    episode's info (see the module docstring)."""

    value: float
    details: Mapping[str, float] = field(default_factory=dict)
    texts: Mapping[str, str] = field(default_factory=dict)


RewardFunction = Callable[..., float | DetailedReward]


# what a function gave for one reply: its value, or the exception that is its failure
RewardOrError = float | DetailedReward | Exception


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
    then built with `language_models={name: model}` beside its parameters.

    Every task family takes a list of them as `reward_terms` among its parameters: the
    math family and SingleTurnTask place them in rewards of their own; any other family
    is given them (`Task.add_reward_terms`, src/tasks/reward_terms.py): each episode's
    last reply, in its dialogue (`{transcript}` in a judge's template), is scored where
    its group ends, and the weighted sum added to the family's reward of an episode that
    ended itself; the outcome stays the family's."""

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


def template_fields(reply: str, prompt: str, sample: Mapping[str, Any], sample_id: str,
                    transcript: str) -> dict[str, Any]:
    """What a model reward's format string reads (a judge's `template`, a reward model's
    `text`): the sample's fields, and the reply, the prompt, the sample's id and the
    transcript over any field of the same name."""
    return {**sample, "reply": reply, "prompt": prompt, "sample_id": sample_id,
            "transcript": transcript}


def transcript_of(messages: Iterable[tuple[str, str]]) -> str:
    """A dialogue as a reward function reads it (`transcript`): each message as
    `<role>: <content>` (`user` the task, `agent` the agent), a blank line between."""
    return "\n\n".join(f"{role}: {content}" for role, content in messages)


def name_of(function: Any) -> str:
    name = getattr(function, "__name__", None)
    if not callable(function) or not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"reward function {function!r:.80} has no name to report it by "
                         "(a lambda, a partial): write it as a def")
    if name in RESERVED_NAMES:
        raise ValueError(f"reward function '{name}': the loop reports its own '{name}' "
                         f"figure; rename the function (reserved: {sorted(RESERVED_NAMES)})")
    return name


def arguments_of(name: str, function: RewardFunction) -> frozenset[str]:
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
