"""A judge model's verdict on a reply as a reward: a language model of the run, or one
asked through an OpenAI-compatible server.

`Judge(**settings)` is a rubric's reward function (`JudgeSettings` lists the settings):
it fills `template` with the reply, the task's prompt, the sample's id and fields, asks
it (after an optional system message) of the judge, and reads the verdict's last match of
`pattern`:

- a score (`score_range: [low, high]`; by default the format `Score: N`), normalised to
  [0, 1] as (N - low) / (high - low); a score outside the range is unreadable;
- or a label (`labels: {label: value}`; by default the final `\\boxed{label}`, compared
  without case), worth its value.

The judge is one of:

- a language model of the run, by its name in `language_model_list` (`language_model`):
  a frozen copy of the base, a bigger model, a trained adapter (a
  HuggingfaceLoRALanguageModel with `adapter_path`). The run gives the judge the live
  model (src/run/assembly.py, through the `RewardTerm`; in Python, pass
  `language_models={name: model}`). The model is the judge's alone: a run refuses a judge
  of a model that anything else names (the policy the agent samples from and the trainer
  changes, a teacher, a pool's trainer), since the judge calls it from the episode steps'
  threads; to judge with the policy's base as it was, list a second copy of it. The
  message goes through the model's chat template and is answered at `temperature` (0,
  the default: greedy) with at most `max_tokens` new tokens, through the model's
  `GenerationQueue` (generation_queue.py): one generate call at a time, judges' requests
  that arrive together (within `batch_wait_s` of the first, up to `batch_size`)
  answered in one call. A prompt that with `max_tokens` passes the model's context is a
  judge error;
- or a server by URL (`base_url`'s chat completions, `model` the name it serves: a vLLM
  server, say). The API key, where the server wants one, is read from the environment
  variable that `api_key_variable` names: a config never holds the key itself. Each
  request is bounded by `request_timeout_s` and tried again only where the transport
  failed (connection refused or reset, a request past its timeout, HTTP 5xx or 429), at
  most `retries` times after pauses of `backoff_s`, doubling; an answer that holds no
  readable verdict, or another refusal (HTTP 4xx), is not asked again. Requests go
  through one client (an HTTP connection pool, safe across threads).

The judge runs in the calling process (`runs_in_caller`): the rubric's bounded worker has
no network and no model, and a judge is trusted code that evaluates nothing of the reply.
It bounds itself instead: all of a reply's waiting (queue, tries and pauses) by
`total_timeout_s` (keep it under the rollout's `faults.step_timeout_s`, which bounds the
whole step); each sample field (the reply among them) is cut to `max_field_chars` before
it is put in the template, and the verdict is read from its last `VERDICT_READ_CHARS`.
Verdicts are kept in an in-memory LRU of `cache_size` requests keyed by the whole request
(a group's identical replies are judged once).

A judge that fails, runs past its bound or answers unreadably raises `JudgeError`: the
rubric scores that reply 0 for this function, reports `<name>/error` 1 and keeps the
message (the verdict's end, for an unreadable one) in the episode's info under
`reward_function_errors`; the run goes on. A judge that is down therefore scores every
reply 0: watch `rollout/<name>/error`. A reply it judged keeps the judge's prompt and
verdict, each cut to `stored_chars`, in the episode's info under `reward_function_texts`
-> `<name>` (`prompt`, `verdict`), shown with the episode on the run page.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from src.language_models.language_model import LanguageModel, SamplingParams
from src.tasks.instance.optional_packages import import_optional
from src.tasks.model_rewards.generation_queue import Chat, generation_queue
from src.tasks.rubric import DetailedReward
from src.tasks.single_turn import format_fields

# the default verdict formats: "Score: 7" (also "**Score:** 7"), and a final \boxed{label}
SCORE_PATTERN = r"(?i)score\**\s*[:=]\s*\**\s*([-+]?\d+(?:\.\d+)?)"
LABEL_PATTERN = r"\\boxed\{\s*([^{}]*?)\s*\}"
# the end of a verdict that is searched: a server that ignores `max_tokens` cannot make
# the pattern scan megabytes (the final verdict is at the end)
VERDICT_READ_CHARS = 100_000
TEMPLATE_FIELDS = ("reply", "prompt", "sample_id")  # beside the sample's own fields
# the settings that only a judge by URL reads, and those that only a language model's reads
SERVER_SETTINGS = frozenset({"model", "api_key_variable", "request_timeout_s", "retries",
                             "backoff_s"})
MODEL_SETTINGS = frozenset({"batch_size", "batch_wait_s"})


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
    # the user message: a format string over {reply}, {prompt}, {sample_id} and the
    # sample's fields ({answer}, ...); the task's reply and prompt win over sample fields
    # of the same name
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
    # (a language model) requests answered in one generate call, and how long the first
    # of them waits for others to join
    batch_size: PositiveInt = 16
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
        if "reply" not in format_fields(self.template):
            raise ValueError("template never reads {reply}: the judge would not see the reply")
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


class JudgeError(RuntimeError):
    """The judge gave no verdict to score: unreachable, past its bound, refusing, or
    unreadable."""


# the transport's failures, tried again: no connection, a request past its timeout,
# HTTP 5xx and 429 (the names of the `openai` package's exceptions)
_TRANSIENT = ("APIConnectionError", "InternalServerError", "RateLimitError")


class Judge:
    """A judge model's verdict as a reward function: see the module docstring."""

    runs_in_caller = True  # the rubric calls it in its own process (network, model)
    settings_model = JudgeSettings  # what a config's `RewardTerm` checks its parameters by

    def __init__(self, language_models: Mapping[str, LanguageModel] | None = None,
                 **settings: Any) -> None:
        self.settings = JudgeSettings.model_validate(settings)
        self.__name__ = self.settings.name
        if self.settings.language_model is not None:
            self._queue = generation_queue(self._model_of(language_models or {}))
            ask: Callable[[str], str] = self._ask_model
        else:
            self._client = self._server_client()
            ask = self._ask_server
        # only answers are kept: a failure raises through the cache
        self._verdict_of = functools.lru_cache(maxsize=self.settings.cache_size)(ask)
        self._pattern = re.compile(self.settings.verdict_pattern)

    @classmethod
    def language_model_names(cls, parameters: Mapping[str, Any]) -> dict[str, str]:
        """The run's language model that a judge of these settings asks, by the setting
        that names it (none for a judge by URL): what a run gives it (`RewardTerm`)."""
        named = JudgeSettings.model_validate(parameters).language_model
        return {} if named is None else {"language_model": named}

    def _model_of(self, language_models: Mapping[str, LanguageModel]) -> LanguageModel:
        name = self.settings.language_model
        assert name is not None
        if name not in language_models:
            given = ", ".join(sorted(language_models)) or "none"
            raise ValueError(f"judge '{self.__name__}' asks language model '{name}', which it "
                             f"was not given (given: {given})")
        return language_models[name]

    def _server_client(self) -> Any:
        """The OpenAI client of `base_url`, with the key from `api_key_variable`."""
        openai = import_optional("openai", "openai")
        for name in ("httpx", "httpx2"):  # its HTTP client logs every request at INFO
            logging.getLogger(name).setLevel(logging.WARNING)
        self._transient = tuple(getattr(openai, name) for name in _TRANSIENT)
        self._api_error = openai.APIError
        variable = self.settings.api_key_variable
        if variable is not None and not os.environ.get(variable):
            raise ValueError(f"judge '{self.__name__}': the environment variable "
                             f"{variable} (api_key_variable) holds no API key")
        # vLLM without --api-key takes any key; the client wants one
        key = os.environ[variable] if variable is not None else "none"
        return openai.OpenAI(base_url=self.settings.base_url, api_key=key, max_retries=0,
                             timeout=self.settings.request_timeout_s)

    def __call__(self, reply: str, prompt: str, sample: Mapping[str, Any],
                 sample_id: str) -> DetailedReward:
        message = self.message(reply, prompt, sample, sample_id)
        settings = self.settings
        messages = ([{"role": "system", "content": settings.system}] if settings.system
                    else []) + [{"role": "user", "content": message}]
        judge = ({"language_model": settings.language_model} if settings.base_url is None
                 else {"model": settings.model})
        request = json.dumps({**judge, "messages": messages,
                              "temperature": settings.temperature,
                              "max_tokens": settings.max_tokens}, sort_keys=True)
        verdict = self._verdict_of(request)
        return DetailedReward(self.read(verdict), texts={
            "prompt": _cut(message, settings.stored_chars),
            "verdict": _cut(verdict, settings.stored_chars)})

    def message(self, reply: str, prompt: str, sample: Mapping[str, Any],
                sample_id: str) -> str:
        """The template filled with the reply, the prompt, the sample's id and fields (each
        text cut to `max_field_chars`)."""
        fields = {**sample, "reply": reply, "prompt": prompt, "sample_id": sample_id}
        limit = self.settings.max_field_chars
        fields = {key: _cut(value, limit) if isinstance(value, str) else value
                  for key, value in fields.items()}
        try:
            return self.settings.template.format_map(fields)
        except (KeyError, IndexError, AttributeError) as error:
            raise ValueError(f"template reads {error}, which sample {sample_id} lacks "
                             f"(it has {', '.join(sorted(fields))})") from error

    def read(self, verdict: str) -> float:
        """The reward a verdict gives; JudgeError where it holds none."""
        matches = list(self._pattern.finditer(verdict[-VERDICT_READ_CHARS:]))
        if not matches:
            raise JudgeError(f"unreadable verdict (no match of {self._pattern.pattern!r}): "
                             f"...{verdict[-200:]!r}")
        found = (matches[-1].group(1) or "").strip()
        if self.settings.labels is not None:
            values = {label.strip().casefold(): value
                      for label, value in self.settings.labels.items()}
            if found.casefold() not in values:
                raise JudgeError(f"unreadable verdict: label {found[:80]!r} is none of "
                                 f"{sorted(self.settings.labels)}")
            return values[found.casefold()]
        assert self.settings.score_range is not None
        low, high = self.settings.score_range
        try:
            score = float(found)
        except ValueError:
            raise JudgeError(f"unreadable verdict: score {found[:80]!r} is no number") from None
        if not low <= score <= high:
            raise JudgeError(f"unreadable verdict: score {score:g} outside [{low:g}, {high:g}]")
        return (score - low) / (high - low)

    def _ask_model(self, request: str) -> str:
        """The language model's verdict for a request (the JSON of its chat); JudgeError
        where none came within `total_timeout_s`."""
        settings = self.settings
        body = json.loads(request)
        system = next((message["content"] for message in body["messages"]
                       if message["role"] == "system"), None)
        reply = self._queue.submit(Chat(
            system, body["messages"][-1]["content"],
            SamplingParams(temperature=settings.temperature,
                           max_new_tokens=settings.max_tokens),
            settings.batch_wait_s, settings.batch_size))
        try:
            return reply.result(timeout=settings.total_timeout_s)
        except FutureTimeout:
            reply.cancel()  # not asked at all where its call has not begun
            raise JudgeError(f"no verdict within total_timeout_s={settings.total_timeout_s:g}"
                             " (the judge's model is busy or slow)") from None
        except Exception as error:  # the model failed, or the prompt does not fit
            raise JudgeError(f"the judge's model gave no verdict: "
                             f"{type(error).__name__}: {error}") from error

    def _ask_server(self, request: str) -> str:
        """The server's verdict for a request (the JSON of its body); JudgeError where no
        answer came within the bounds."""
        settings = self.settings
        deadline = time.monotonic() + settings.total_timeout_s
        body = json.loads(request)
        tries = 0
        while True:
            tries += 1
            remaining = deadline - time.monotonic()
            try:
                response = self._client.chat.completions.create(
                    **body, timeout=min(settings.request_timeout_s, remaining))
                break
            except self._transient as error:
                failure = f"{type(error).__name__}: {error}"
                if tries > settings.retries:
                    raise JudgeError(f"no answer after {tries} tries: {failure}") from error
                pause = settings.backoff_s * 2 ** (tries - 1)
                if time.monotonic() + pause >= deadline:
                    raise JudgeError(f"no answer within total_timeout_s="
                                     f"{settings.total_timeout_s:g} ({tries} tries): "
                                     f"{failure}") from error
                time.sleep(pause)
            except self._api_error as error:  # a refusal (4xx) or an answer of no shape
                raise JudgeError(f"the judge refused or garbled the request: "
                                 f"{type(error).__name__}: {error}") from error
        try:
            content = response.choices[0].message.content
        except (AttributeError, IndexError, TypeError) as error:
            raise JudgeError(f"an answer without a message: {response!r:.200}") from error
        if not isinstance(content, str):
            raise JudgeError(f"an answer whose message has no text: {content!r:.200}")
        return content


def _cut(text: str, limit: int) -> str:
    """`text`, its end past `limit` characters replaced by a note of how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}[... {len(text) - limit} characters cut]"
