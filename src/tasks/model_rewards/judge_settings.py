"""A judge's settings (src/tasks/model_rewards/judge.py says what each does): checked
when a config is read, so that a dry run finds their mistakes."""

from __future__ import annotations

import re

from pydantic import (
    BaseModel,
    ConfigDict,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from src.tasks.single_turn import format_fields

# the default verdict formats: "Score: 7" (also "**Score:** 7"), and a final \boxed{label}
SCORE_PATTERN = r"(?i)score\**\s*[:=]\s*\**\s*([-+]?\d+(?:\.\d+)?)"
LABEL_PATTERN = r"\\boxed\{\s*([^{}]*?)\s*\}"
# the end of a verdict that is searched: a server that ignores `max_tokens` cannot make
# the pattern scan megabytes (the final verdict is at the end)
VERDICT_READ_CHARS = 100_000
# the settings that only a judge by URL reads, and those that only a language model's reads
SERVER_SETTINGS = frozenset({"model", "api_key_variable", "request_timeout_s", "retries",
                             "backoff_s"})
MODEL_SETTINGS = frozenset({"batch_wait_s"})


class JudgeSettings(BaseModel):
    """A judge's settings (the `parameters` of a `RewardTerm` naming `Judge`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "judge"  # the reward function's name: metrics `<name>`, `<name>/error`
    # the judge: a language model of the run by its name in language_model_list ...
    language_model: str | None = None
    # ... or a server: its OpenAI API root (e.g. http://localhost:8000/v1) and the name
    # of the model it serves
    base_url: str | None = None
    model: str | None = None
    # (a server) the environment variable that holds the API key; None: it wants none
    api_key_variable: str | None = None
    # the user message: a format string over {reply}, {prompt}, {sample_id},
    # {transcript} (the episode's dialogue) and the sample's fields ({answer}, ...); the
    # task's reply and prompt win over sample fields of the same name
    template: str
    system: str | None = None  # a system message before it
    score_range: tuple[float, float] | None = None  # a score verdict: its [low, high]
    labels: dict[str, float] | None = None  # a label verdict: each label's value
    # a regular expression whose first group is the verdict (its last match counts);
    # None: `Score: N` for scores, a final \boxed{label} for labels
    pattern: str | None = None
    temperature: NonNegativeFloat = 0.0
    max_tokens: PositiveInt = 1024  # of the verdict
    request_timeout_s: PositiveFloat = 60.0  # (a server) one request
    total_timeout_s: PositiveFloat = 120.0  # one reply's waiting, tries and pauses together
    retries: NonNegativeInt = 3  # (a server) tries after the first, on transport failures
    backoff_s: NonNegativeFloat = 1.0  # (a server) the first pause before a try; doubled
    # requests answered in one generate call (a language model), or sent at once (a
    # server), of a group judged together
    batch_size: PositiveInt = 16
    # (a language model) how long the first of the replies judged one by one waits for
    # others to join its generate call
    batch_wait_s: NonNegativeFloat = 0.005
    max_field_chars: PositiveInt = 8000  # each field put in the template, cut to this
    stored_chars: NonNegativeInt = 4000  # the prompt and the verdict kept in the episode
    cache_size: NonNegativeInt = 4096  # requests whose verdicts are kept; 0: none

    @model_validator(mode="after")
    def check_verdict(self) -> JudgeSettings:
        if not self.name.isidentifier():
            raise ValueError(f"name {self.name!r} is not an identifier (a metric's name)")
        self.check_judge()
        if (self.score_range is None) == (self.labels is None):
            raise ValueError("give one of score_range (a score verdict) and labels (a label "
                             "verdict)")
        if self.score_range is not None and not self.score_range[0] < self.score_range[1]:
            raise ValueError(f"score_range {list(self.score_range)}: low must be below high")
        if self.labels is not None:
            folded = [label.strip().casefold() for label in self.labels]
            if not folded or len(set(folded)) != len(folded):
                raise ValueError(f"labels {sorted(self.labels)}: give distinct labels (they "
                                 "are compared without case)")
        try:
            if re.compile(self.verdict_pattern).groups < 1:
                raise ValueError(f"pattern {self.verdict_pattern!r} has no group to read")
        except re.error as error:
            raise ValueError(f"pattern {self.verdict_pattern!r}: {error}") from error
        if not {"reply", "transcript"} & format_fields(self.template):
            raise ValueError("template never reads {reply} or {transcript}: the judge "
                             "would not see the reply")
        return self

    def check_judge(self) -> None:
        """One judge, and no setting that only the other kind reads."""
        if (self.language_model is None) == (self.base_url is None):
            raise ValueError("give one of language_model (a language model of the run) and "
                             "base_url (a server)")
        if self.base_url is not None and self.model is None:
            raise ValueError("base_url needs model: the name of the model the server serves")
        other = (SERVER_SETTINGS if self.language_model is not None else MODEL_SETTINGS)
        given = sorted(other & self.model_fields_set)
        if given:
            kind = ("a language model" if self.language_model is not None else "a server")
            raise ValueError(f"{', '.join(given)}: not read by a judge that is {kind}")

    @property
    def verdict_pattern(self) -> str:
        if self.pattern is not None:
            return self.pattern
        return SCORE_PATTERN if self.score_range is not None else LABEL_PATTERN
