"""A judge model's verdict on a reply as a reward: a language model of the run, or one
asked through an OpenAI-compatible server.

`Judge(**settings)` is a rubric's reward function (`JudgeSettings` lists the settings):
it fills `template` with the reply, the task's prompt, the sample's id and fields, and
the episode's transcript (the whole dialogue, for a multi-turn task's judge), asks
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
  `GenerationQueue` (generation_queue.py): one generate call at a time. A group's
  replies judged together (`many`) are one call, cut every `batch_size` chats, in their
  order and joined by no other request, so that a run repeats bit for bit; replies
  judged one by one (a call of the judge) from several threads are answered together
  where they arrive within `batch_wait_s` of the first (up to `batch_size`). A prompt
  that with `max_tokens` passes the model's context is a judge error;
- or a server by URL (`base_url`'s chat completions, `model` the name it serves: a vLLM
  server, say). The API key, where the server wants one, is read from the environment
  variable that `api_key_variable` names: a config never holds the key itself. Each
  request is bounded by `request_timeout_s` and tried again only where the transport
  failed (connection refused or reset, a request past its timeout, HTTP 5xx or 429), at
  most `retries` times after pauses of `backoff_s`, doubling; an answer that holds no
  readable verdict, or another refusal (HTTP 4xx), is not asked again. Requests go
  through one client (an HTTP connection pool, safe across threads); a group's replies
  judged together (`many`) are sent at once, `batch_size` at a time.

The judge runs in the calling process (`runs_in_caller`): the rubric's bounded worker has
no network and no model, and a judge is trusted code that evaluates nothing of the reply.
It bounds itself instead: all of a reply's waiting (queue, tries and pauses) by
`total_timeout_s`, counted for a group judged together from when the group was asked
(keep it under the rollout's `faults.step_timeout_s`, which bounds a step that judges a
reply); each sample field (the reply among them) is cut to `max_field_chars` before
it is put in the template, and the verdict is read from its last `VERDICT_READ_CHARS`.
Verdicts are kept in an in-memory LRU of `cache_size` requests keyed by the whole request,
and a group's identical replies are asked once (a group judged together asks each
distinct request once, in the order of their first reply).

A judge that fails, runs past its bound or answers unreadably raises `JudgeError`: the
rubric scores that reply 0 for this function, reports `<name>/error` 1 and keeps the
message (the verdict's end, for an unreadable one) in the episode's info under
`reward_function_errors`; the run goes on. A judge that is down therefore scores every
reply 0: watch `rollout/<name>/error`. A reply it judged keeps the judge's prompt and
verdict, each cut to `stored_chars`, in the episode's info under `reward_function_texts`
-> `<name>` (`prompt`, `verdict`), shown with the episode on the run page.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from src.language_models.language_model import LanguageModel, SamplingParams
from src.tasks.model_rewards.generation_queue import Chat, generation_queue
from src.tasks.model_rewards.judge_settings import VERDICT_READ_CHARS, JudgeSettings
from src.tasks.optional_packages import import_optional
from src.tasks.reward_functions import DetailedReward, template_fields


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
        self._ask: Callable[[str], str]
        self._ask_many: Callable[[list[str]], list[str | Exception]]
        if self.settings.language_model is not None:
            self._queue = generation_queue(self._model_of(language_models or {}))
            self._ask, self._ask_many = self._ask_model, self._ask_model_many
        else:
            self._client = self._server_client()
            self._ask, self._ask_many = self._ask_server, self._ask_server_many
        self._verdicts = _Verdicts(self.settings.cache_size)
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
                 sample_id: str, transcript: str = "") -> DetailedReward:
        message, request = self._request(reply, prompt, sample, sample_id, transcript)
        verdict = self._verdicts.get(request)
        if verdict is None:
            verdict = self._ask(request)
            self._verdicts.put(request, verdict)  # kept before it is read: read again alike
        return self._reward(message, verdict)

    def many(self, arguments: Sequence[Mapping[str, Any]]
             ) -> list[DetailedReward | Exception]:
        """The rewards of a group's replies (each the keyword arguments of a call: reply,
        prompt, sample, sample_id, transcript), their distinct requests not in the cache asked
        together (see the module docstring); each reply's failure (JudgeError) is its own
        entry, in the place of its reward."""
        results: list[DetailedReward | Exception | None] = [None] * len(arguments)
        messages: dict[int, str] = {}
        asked: dict[str, list[int]] = {}  # each request not in the cache -> its replies
        for index, given in enumerate(arguments):
            try:
                messages[index], request = self._request(**given)
            except Exception as error:  # a sample that lacks a field the template reads
                results[index] = error
                continue
            verdict = self._verdicts.get(request)
            if verdict is None:
                asked.setdefault(request, []).append(index)
            else:
                results[index] = self._reward_or_error(messages[index], verdict)
        verdicts = self._ask_many(list(asked)) if asked else []
        for (request, indices), verdict in zip(asked.items(), verdicts, strict=True):
            if not isinstance(verdict, Exception):
                self._verdicts.put(request, verdict)
            for index in indices:
                results[index] = (verdict if isinstance(verdict, Exception)
                                  else self._reward_or_error(messages[index], verdict))
        answered = [result for result in results if result is not None]
        assert len(answered) == len(results)  # every reply is scored, cached or asked
        return answered

    def _request(self, reply: str, prompt: str, sample: Mapping[str, Any],
                 sample_id: str, transcript: str = "") -> tuple[str, str]:
        """The filled template, and the request that asks it: the JSON of its chat and
        settings (the cache's key)."""
        message = self.message(reply, prompt, sample, sample_id, transcript)
        settings = self.settings
        messages = ([{"role": "system", "content": settings.system}] if settings.system
                    else []) + [{"role": "user", "content": message}]
        judge = ({"language_model": settings.language_model} if settings.base_url is None
                 else {"model": settings.model})
        return message, json.dumps({**judge, "messages": messages,
                                    "temperature": settings.temperature,
                                    "max_tokens": settings.max_tokens}, sort_keys=True)

    def _reward(self, message: str, verdict: str) -> DetailedReward:
        """The verdict's reward, with the message and the verdict kept beside it;
        JudgeError where the verdict holds none."""
        stored = self.settings.stored_chars
        return DetailedReward(self.read(verdict), texts={
            "prompt": _cut(message, stored), "verdict": _cut(verdict, stored)})

    def _reward_or_error(self, message: str, verdict: str) -> DetailedReward | Exception:
        try:
            return self._reward(message, verdict)
        except JudgeError as error:
            return error

    def message(self, reply: str, prompt: str, sample: Mapping[str, Any],
                sample_id: str, transcript: str = "") -> str:
        """The template filled with the reply, the prompt, the sample's id, the episode's
        transcript and the sample's fields (each text cut to `max_field_chars`)."""
        limit = self.settings.max_field_chars
        fields = {key: _cut(value, limit) if isinstance(value, str) else value
                  for key, value in template_fields(reply, prompt, sample, sample_id,
                                                    transcript).items()}
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
        deadline = time.monotonic() + self.settings.total_timeout_s
        return self._awaited(self._queue.submit(self._chat(request)), deadline)

    def _ask_model_many(self, requests: list[str]) -> list[str | Exception]:
        """The language model's verdicts for a group's requests, submitted together; each
        a JudgeError where none came within `total_timeout_s` of the group's asking."""
        settings = self.settings
        deadline = time.monotonic() + settings.total_timeout_s
        replies = self._queue.submit_many([self._chat(request) for request in requests],
                                          settings.batch_size)
        verdicts: list[str | Exception] = []
        for reply in replies:
            try:
                verdicts.append(self._awaited(reply, deadline))
            except JudgeError as error:
                verdicts.append(error)
        return verdicts

    def _chat(self, request: str) -> Chat:
        """The model's chat of a request (the JSON of its chat and settings)."""
        settings = self.settings
        body = json.loads(request)
        system = next((message["content"] for message in body["messages"]
                       if message["role"] == "system"), None)
        return Chat(system, body["messages"][-1]["content"],
                    SamplingParams(temperature=settings.temperature,
                                   max_new_tokens=settings.max_tokens),
                    settings.batch_wait_s, settings.batch_size)

    def _awaited(self, reply: Future[str], deadline: float) -> str:
        """The verdict a queued chat gets by `deadline` (a `time.monotonic` time);
        JudgeError where none came, or the model failed."""
        settings = self.settings
        try:
            return reply.result(timeout=max(0.0, deadline - time.monotonic()))
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
        return self._ask_server_by(request, time.monotonic() + self.settings.total_timeout_s)

    def _ask_server_many(self, requests: list[str]) -> list[str | Exception]:
        """The server's verdicts for a group's requests, `batch_size` sent at once; each
        a JudgeError where no answer came within `total_timeout_s` of the group's
        asking."""
        deadline = time.monotonic() + self.settings.total_timeout_s
        with ThreadPoolExecutor(min(self.settings.batch_size, len(requests)),
                                thread_name_prefix=f"judge-{self.__name__}") as pool:
            asked = [pool.submit(self._ask_server_by, request, deadline)
                     for request in requests]
        verdicts: list[str | Exception] = []
        for reply in asked:
            try:
                verdicts.append(reply.result())
            except Exception as error:  # JudgeError; anything else is the judge's bug
                verdicts.append(error)
        return verdicts

    def _ask_server_by(self, request: str, deadline: float) -> str:
        """The server's verdict for a request (the JSON of its body) by `deadline` (a
        `time.monotonic` time); JudgeError where no answer came within the bounds."""
        settings = self.settings
        body = json.loads(request)
        tries = 0
        while True:
            tries += 1
            remaining = deadline - time.monotonic()
            if remaining <= 0:  # a group's request that waited for the others' answers
                raise JudgeError(f"no answer within total_timeout_s="
                                 f"{settings.total_timeout_s:g}: not asked, the group's "
                                 "other requests took the time")
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


class _Verdicts:
    """The verdicts of the last `size` requests asked (none where `size` is 0), by
    request; safe across threads."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._kept: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, request: str) -> str | None:
        with self._lock:
            verdict = self._kept.get(request)
            if verdict is not None:
                self._kept.move_to_end(request)
            return verdict

    def put(self, request: str, verdict: str) -> None:
        if self._size == 0:
            return
        with self._lock:
            self._kept[request] = verdict
            self._kept.move_to_end(request)
            if len(self._kept) > self._size:
                self._kept.popitem(last=False)


def _cut(text: str, limit: int) -> str:
    """`text`, its end past `limit` characters replaced by a note of how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}[... {len(text) - limit} characters cut]"
