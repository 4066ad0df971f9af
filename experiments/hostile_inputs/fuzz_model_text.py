"""Fuzzing what a model writes through the project's own code paths, SQL aside:

- every task's episode step (math, econ, DB-bench's answers, reasoning-gym in both answer
  formats, TextArena's GuessTheNumber-v0, the Gymnasium number guess), multi-turn where the
  task is, stepped until the episode ends;
- the Hermes tool-call parser and the helpers the endpoint reads tool calls with;
- the OpenAI-compatible endpoint in front of the tiny test model, with its chat template and
  with a template that renders tools: hostile HTTP requests, then a valid one.

Each target gets the fixed hostile corpus (`STUDY_REPLIES`: `HOSTILE_REPLIES` of
tests/tasks/test_reply_fuzz.py and one more) and `--tries` seeded mutations of a valid
input (the task's oracle reply or a well-formed move, a tool call, a request body, of a
first or a later call); a task's episode is stepped until it ends. Counted per target:

- crashes: an exception out of a step, the parser or the endpoint (a step's exception ends
  its episode as `task_error` in a run), an endpoint answer of 5xx or none at all;
- unscored: steps whose status is a failure (`EpisodeStatus.failed`); for the parser,
  tool calls the endpoint could not send back (arguments that are not strict JSON, text
  that is not Unicode);
- bounds exceeded: a step slower than `STEP_SECONDS` (math: `MATH_STEP_SECONDS`), a request
  slower than `REQUEST_SECONDS`, an observation over `OBSERVATION_CHARS`, a step's info
  over `INFO_CHARS` as JSON, a reward or metric that is not finite, the process's resident
  memory grown by more than `RSS_GROWTH_MB` over the target (after garbage collection).

    python -m experiments.hostile_inputs.fuzz_model_text --seed 0 --tries 1000 \\
        --output outputs/hostile_inputs/fuzz_model_text.json

Exit status 1 when anything was counted.

SQL on the three backends is fuzzed by fuzz_sql.py beside this file.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import math
import random
import re
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from src.tasks.instance.db_bench.sandbox import SandboxSettings
from src.tasks.instance.math_problems.verification import VERIFY_TIMEOUT_S
from src.tasks.task import Task
from tests.tasks.test_reply_fuzz import FRAGMENTS, HOSTILE_REPLIES, MEGABYTE, build_families

STEP_SECONDS = 2.0
# a math answer may use math-verify's whole bound, and the worker it overran restarts
MATH_STEP_SECONDS = VERIFY_TIMEOUT_S + 5.0
REQUEST_SECONDS = 10.0  # an endpoint answer, a generation of the tiny model included
ENDPOINT_READ_TIMEOUT_S = 1.0  # the endpoint's, short so that stalled bodies end quickly
# a prompt or a result table, never the reply echoed: DB-bench's cut of what the sandbox
# answers (and the note that says so) is the longest the tasks allow
OBSERVATION_CHARS = SandboxSettings().max_observation_chars + 100
INFO_CHARS = 4_000
RSS_GROWTH_MB = 200.0
MAX_STEPS = 4  # per episode; the episode's own end comes first where it is sooner
MAX_MUTATED_CHARS = 2 * MEGABYTE
# The corpus, and a reply that DB-bench's grading raises on (float() of a 401-digit
# integer in grading._normal), kept out of the tests' corpus until the grading is fixed.
STUDY_REPLIES = {**HOSTILE_REPLIES,
                 "final_answer_long_integer": "Action: Answer\nFinal Answer: [1" + "0" * 400 + "]"}


@dataclass
class Finding:
    kind: str  # crash, unscored, or the bound exceeded
    what: str  # the exception or the measure
    count: int = 0
    example: str = ""  # the input, cut


@dataclass
class Tally:
    target: str
    tries: int = 0
    crashes: int = 0
    unscored: int = 0
    bounds_exceeded: int = 0
    max_seconds: float = 0.0
    max_observation_chars: int = 0
    rss_growth_mb: float = 0.0
    statuses: dict[str, int] = field(default_factory=dict)  # the endpoint's, mutated bodies
    findings: dict[str, Finding] = field(default_factory=dict)

    def record(self, kind: str, what: str, example: object) -> None:
        """A finding; `noted` ones (another 4xx than the one expected) are not counted."""
        if kind == "crash":
            self.crashes += 1
        elif kind == "unscored":
            self.unscored += 1
        elif kind != "noted":
            self.bounds_exceeded += 1
        key = f"{kind}: {what[:160]}"
        finding = self.findings.setdefault(key, Finding(kind, what[:500],
                                                        example=repr(example)[:300]))
        finding.count += 1


def resident_mb() -> float:
    """This process's resident memory, garbage collected first."""
    gc.collect()
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS line in /proc/self/status")


# ---- mutations -------------------------------------------------------------------------
def random_character(rng: random.Random) -> str:
    """Mostly ordinary, sometimes a control character, a surrogate or an astral one."""
    ranges = ((0x20, 0x7F), (0x0, 0x20), (0xD800, 0xE000), (0xA0, 0x3000), (0x10000, 0x110000))
    return chr(rng.randrange(*rng.choice(ranges)))


def mutate(rng: random.Random, text: str) -> str:
    """1-4 edits of `text`: fragments of reply formats and hostile text spliced in (now and
    then thousands of times over), slices cut or doubled, characters replaced, the whole
    repeated; cut to MAX_MUTATED_CHARS after each edit (repeats of repeats would take
    gigabytes)."""
    for _ in range(rng.randint(1, 4)):
        text = text[:MAX_MUTATED_CHARS]
        position = rng.randint(0, len(text))
        end = rng.randint(position, len(text))
        edit = rng.randrange(7)
        if edit == 0:
            text = text[:position] + rng.choice(FRAGMENTS) + text[position:]
        elif edit == 1:
            fragment = rng.choice(FRAGMENTS)
            repeats = min(rng.choice((2, 10, 1_000, 20_000)), MAX_MUTATED_CHARS // len(fragment))
            text = text[:position] + fragment * repeats + text[position:]
        elif edit == 2:
            text = text[:position] + text[end:]
        elif edit == 3:
            text = text[:end] + text[position:end] + text[end:]
        elif edit == 4:
            text = text[:position] + random_character(rng) + text[position + 1:]
        elif edit == 5:
            text = text[:position]
        else:
            text = text * min(rng.choice((2, 3, 100)), MAX_MUTATED_CHARS // max(1, len(text)) + 1)
    return text[:MAX_MUTATED_CHARS]


# ---- A: task steps ---------------------------------------------------------------------
def valid_reply(name: str, environment: Any, rng: random.Random) -> str:
    """What a competent model writes now: the oracle's reply, or a well-formed move for the
    games, which have no oracle."""
    if name == "textarena":
        return f"My guess is [{rng.randint(1, 20)}]."
    if name == "gymnasium_text":
        return str(rng.randint(1, 10))
    return environment.oracle_reply()


def check_step(tally: Tally, result: tuple[Any, ...], seconds: float, bound_s: float,
               reply: str) -> None:
    observation, reward, _, _, info = result
    tally.max_seconds = max(tally.max_seconds, seconds)
    tally.max_observation_chars = max(tally.max_observation_chars, len(observation))
    if info["status"].failed:
        tally.record("unscored", str(info["status"]), reply)
    if seconds > bound_s:
        tally.record("time", f"a step took {seconds:.1f} s (bound {bound_s:.0f} s)", reply)
    if len(observation) > OBSERVATION_CHARS:
        tally.record("observation", f"{len(observation)} characters", reply)
    if not math.isfinite(reward) or not all(map(math.isfinite, info["metrics"].values())):
        tally.record("not finite", f"reward {reward}, metrics {info['metrics']}", reply)
    info_chars = len(json.dumps(info["extras"], default=str))
    if info_chars > INFO_CHARS:
        tally.record("info", f"info of {info_chars} characters: "
                     f"{json.dumps(info['extras'], default=str)[:120]}", reply)


def play(tally: Tally, family: Task[Any], sample_id: str,
         replies: Callable[[Any], str], bound_s: float) -> None:
    """One episode stepped with `replies(environment)` until it ends or MAX_STEPS."""
    environment = family.new_episode()
    try:
        environment.reset(options={"sample_id": sample_id})
        for _ in range(MAX_STEPS):
            reply = replies(environment)
            tally.tries += 1
            started = time.monotonic()
            try:
                result = environment.step(reply)
            except Exception as error:  # noqa: BLE001 - what the study counts
                tally.record("crash", f"{type(error).__name__}: {error}", reply)
                return
            check_step(tally, result, time.monotonic() - started, bound_s, reply)
            if result[2] or result[3]:
                return
    finally:
        environment.close()


def fuzz_task(name: str, family: Task[Any], tries: int, rng: random.Random) -> Tally:
    tally = Tally(f"task {name}")
    bound_s = MATH_STEP_SECONDS if name == "math" else STEP_SECONDS
    samples = list(family.sample_ids("train"))
    memory_before = resident_mb()
    for index, text in enumerate(STUDY_REPLIES.values()):
        play(tally, family, samples[index % len(samples)], lambda _, text=text: text, bound_s)

    def replies(environment: Any) -> str:
        if rng.random() < 0.15:
            return rng.choice(list(STUDY_REPLIES.values()))
        valid = valid_reply(name, environment, rng)
        return valid if rng.random() < 0.1 else mutate(rng, valid)

    for index in range(tries):
        play(tally, family, samples[index % len(samples)], replies, bound_s)
        progress(tally, index, tries)
    check_memory(tally, memory_before)
    return tally


def check_memory(tally: Tally, before_mb: float) -> None:
    tally.rss_growth_mb = resident_mb() - before_mb
    if tally.rss_growth_mb > RSS_GROWTH_MB:
        tally.record("memory", f"resident memory grew {tally.rss_growth_mb:.0f} MB", "")


def progress(tally: Tally, index: int, tries: int) -> None:
    if (index + 1) % max(1, tries // 4) == 0:
        print(f"  {tally.target}: {index + 1}/{tries} mutated, {tally.crashes} crashes, "
              f"{tally.unscored} unscored, {tally.bounds_exceeded} over bounds", flush=True)


# ---- B: the tool-call parser -----------------------------------------------------------
VALID_CALL = ('I will add.\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n'
              '</tool_call>')


def check_parsed(tally: Tally, text: str) -> None:
    """parse_hermes's reply must be what the endpoint can send and take back: each call a
    name and arguments of strict JSON (an object), all of it Unicode text."""
    from src.language_models.tool_calls import parse_hermes

    started = time.monotonic()
    try:
        parsed = parse_hermes(text, "call_fuzz")
    except Exception as error:  # noqa: BLE001 - what the study counts
        tally.record("crash", f"parse_hermes: {type(error).__name__}: {error}", text)
        return
    seconds = time.monotonic() - started
    tally.max_seconds = max(tally.max_seconds, seconds)
    if seconds > STEP_SECONDS:
        tally.record("time", f"parse_hermes took {seconds:.1f} s", text)
    for call in parsed.tool_calls:
        try:
            arguments = json.loads(call.arguments, parse_constant=_refuse_constant)
            json.dumps(call.to_openai(), ensure_ascii=False).encode()
        except ValueError as error:
            tally.record("unscored", f"a tool call the endpoint cannot send back: "
                         f"{type(error).__name__}: {error}", text)
            continue
        if not isinstance(arguments, dict):
            tally.record("unscored", "tool-call arguments that are not an object", text)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def hostile_messages(rng: random.Random) -> dict[str, Any]:
    """A chat message of odd shape: wrong types, odd roles, odd tool calls."""
    values: list[Any] = [None, True, 0, -1, 1e308, "", "x", "\ud800", "\x00", [], {}, [1],
                         {"a": 1}, [{"type": "text", "text": "hi"}], [{"text": 5}], "[" * 500,
                         [{"function": "f"}], [{"id": 1, "function": {"name": 2}}],
                         [{"function": {"name": "f", "arguments": "[" * 5_000}}],
                         [{"function": {"name": "f", "arguments": {"a": [1]}}}]]
    message: dict[str, Any] = {"role": rng.choice(["user", "assistant", "tool", "system",
                                                   "hacker", "", 5, None]),
                               "content": rng.choice(values)}
    for key in ("tool_calls", "tool_call_id", "name", "function"):
        if rng.random() < 0.4:
            message[key] = rng.choice(values)
    return message


def fuzz_tool_calls(tries: int, rng: random.Random) -> Tally:
    from pydantic import ValidationError

    from src.agents.openai_endpoint.server import ChatCompletionRequest
    from src.language_models.tool_calls import arguments_value, template_message

    tally = Tally("tool-call parser")
    memory_before = resident_mb()
    for text in STUDY_REPLIES.values():
        tally.tries += 1
        check_parsed(tally, text)
    for index in range(tries):
        tally.tries += 1
        text = mutate(rng, VALID_CALL)
        check_parsed(tally, text)
        try:
            arguments_value(text)
        except Exception as error:  # noqa: BLE001 - what the study counts
            tally.record("crash", f"arguments_value: {type(error).__name__}: {error}", text)
        # the messages the endpoint accepts reach template_message
        message = hostile_messages(rng)
        try:
            ChatCompletionRequest.model_validate({"model": "m", "messages": [message]})
        except ValidationError:
            continue
        try:
            template_message(message)
        except Exception as error:  # noqa: BLE001 - what the study counts
            tally.record("crash", f"template_message: {type(error).__name__}: {error}", message)
        progress(tally, index, tries)
    check_memory(tally, memory_before)
    return tally


# ---- C: the endpoint -------------------------------------------------------------------
@dataclass(frozen=True)
class Answer:
    status: int | None  # None: the connection closed without an answer
    seconds: float
    body: bytes = b""


def exchange(port: int, data: bytes, hold: bool = False) -> Answer:
    """Send `data` and read the answer until the endpoint closes the connection; unless
    `hold`, the sending side is closed first (a stalled client keeps it open)."""
    started = time.monotonic()
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=REQUEST_SECONDS) as sock:
        try:
            sock.sendall(data)
            if not hold:
                sock.shutdown(socket.SHUT_WR)
            while chunk := sock.recv(65536):
                received += chunk
        except OSError:  # reset, broken pipe, timed out: what arrived before counts
            pass
    seconds = time.monotonic() - started
    if received.startswith(b"HTTP/"):
        return Answer(int(received.split(b" ", 2)[1]), seconds,
                      received.partition(b"\r\n\r\n")[2])
    # a request line it cannot read is answered the HTTP/0.9 way: a page, no status line
    page = re.search(rb"Error code: (\d+)", received)
    return Answer(int(page.group(1)) if page else None, seconds)


def http_request(path: str, body: bytes, headers: dict[str, str] | None = None,
                 method: str = "POST") -> bytes:
    fields = {"Host": "fuzz", "Content-Length": str(len(body)), **(headers or {})}
    head = "".join(f"{name}: {value}\r\n" for name, value in fields.items())
    return f"{method} {path} HTTP/1.1\r\n{head}\r\n".encode() + body


def valid_body(tools: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "policy", "logprobs": True, "messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 + 2?"}]}
    if tools:
        body["tools"] = [{"type": "function", "function": {
            "name": "add", "parameters": {"type": "object", "properties": {
                "a": {"type": "number"}, "b": {"type": "number"}}}}}]
    return body


HOSTILE_VALUES: tuple[Any, ...] = (
    None, True, 0, -1, 2**70, float("inf"), float("nan"), "", "\ud800", "\x00" * 10,
    "x" * 100_000, [], {}, [1, 2], {"a": 1}, [[[[[[[[[[[]]]]]]]]]]], "user", "assistant",
    "tool", "hacker", [{"type": "text", "text": "hi"}], [{"type": "image_url"}],
    [{"id": "c", "type": "function", "function": {"name": "add", "arguments": "{}"}}],
    [{"function": {"name": 1, "arguments": {"a": float("nan")}}}], "abc")


def mutate_body(rng: random.Random, body: dict[str, Any]) -> bytes:
    """A request body with 1-3 fields replaced, removed or added (a message's too), then
    now and then its bytes cut or spoilt."""
    body = json.loads(json.dumps(body))
    for _ in range(rng.randint(1, 3)):
        messages = body.get("messages")
        target = (rng.choice(messages) if isinstance(messages, list) and messages
                  and isinstance(messages[0], dict) and rng.random() < 0.6 else body)
        if not isinstance(target, dict):
            target = body
        key = rng.choice([*target, "tool_calls", "tool_call_id", "n", "stream", "stop",
                          "tool_choice", "tools", "unknown"]) if target else "messages"
        edit = rng.randrange(4)
        # copies: an edit must change neither the pool nor another part of the body
        if edit == 0 and key in target:
            del target[key]
        elif edit == 1 and isinstance(messages, list):
            messages.append(copy.deepcopy(rng.choice(messages)) if messages else {})
        else:
            target[key] = copy.deepcopy(rng.choice(HOSTILE_VALUES))
    data = json.dumps(body).encode("utf-8", "surrogatepass")
    if rng.random() < 0.2:
        position = rng.randrange(len(data) + 1)
        data = rng.choice([data[:position], data[:position] + b"\xff" + data[position:],
                           data[:position] + b"\xed\xa0\x80" + data[position:]])
    return data


def build_agents(folder: Path) -> dict[str, Any]:
    """The agent that serves the endpoint, on the tiny test model: with the embedded
    model's chat template (no tools) and with one that renders tools."""
    from src.agents.instance.openai_client_agent import OpenAIClientAgent
    from src.language_models.instance.huggingface_lora_language_model import (
        HuggingfaceLoRALanguageModel,
    )
    from tests.agents.openai_endpoint.test_tool_calls import TOOL_TEMPLATE
    from tests.conftest import _tiny_llama

    path = _tiny_llama(folder, hidden_size=32, heads=4, kv_heads=2)
    agents = {}
    for name, template in (("plain template", None), ("tool template", TOOL_TEMPLATE)):
        model = HuggingfaceLoRALanguageModel(model_name_or_path=str(path))
        if template is not None:
            model.tokenizer.chat_template = template
        agents[name] = OpenAIClientAgent(model, max_new_tokens=8)
        agents[name].endpoint.close()  # the study serves it on an endpoint of its own
    return agents


def fuzz_endpoint(name: str, agent: Any, tries: int, rng: random.Random) -> Tally:
    from src.agents.openai_endpoint.episode_calls import EpisodeCalls
    from src.agents.openai_endpoint.server import (
        MAX_BODY_BYTES,
        ChatCompletionsEndpoint,
        EpisodeSession,
    )
    from src.records.trajectory import Trajectory

    tally = Tally(f"endpoint, {name}")
    endpoint = ChatCompletionsEndpoint(agent._answer, read_timeout_s=ENDPOINT_READ_TIMEOUT_S)
    port = int(endpoint.base_url("k").split("/")[2].split(":")[1])
    auth = {"Authorization": f"Bearer {endpoint.secret}"}
    keys = iter(range(10**9))

    def session() -> str:
        key = f"fuzz{next(keys)}"
        endpoint.sessions[key] = EpisodeSession(key, EpisodeCalls(Trajectory(), agent._boundary))
        return f"/episodes/{key}/v1/chat/completions"

    tools = name == "tool template"
    valid = json.dumps(valid_body(tools)).encode()

    def dumped(**changes: Any) -> bytes:
        return json.dumps({**valid_body(tools), **changes}).encode("utf-8", "surrogatepass")

    def user(content: Any, **more: Any) -> bytes:
        return dumped(messages=[{"role": "user", "content": content, **more}])

    deep = b'{"model": "m", "messages": ' + b"[" * 100_000 + b"}"
    storm: list[tuple[str, bytes, bool, set[int | None]]] = [
        # (name, request, whether the client stalls, the answers expected)
        ("no secret", http_request(session(), valid), False, {401}),
        ("wrong secret", http_request(session(), valid, {"Authorization": "Bearer x"}), False,
         {401}),
        ("unknown route", http_request("/v1/chat/completions", valid, auth), False, {404}),
        ("unknown episode", http_request("/episodes/none/v1/chat/completions", valid, auth),
         False, {404}),
        ("body over the cap", http_request(session(), b"{", {
            **auth, "Content-Length": str(MAX_BODY_BYTES + 1)}), False, {413}),
        ("Content-Length not a number", http_request(session(), valid, {
            **auth, "Content-Length": "ten"}), False, {400}),
        ("negative Content-Length", http_request(session(), valid, {
            **auth, "Content-Length": "-1"}), False, {400}),
        ("body cut short", http_request(session(), valid[:20], {
            **auth, "Content-Length": str(len(valid))}), False, {400}),
        ("stalled body", http_request(session(), valid[:20], {
            **auth, "Content-Length": str(len(valid))}), True, {408}),
        ("stalled headers", b"POST / HTTP/1.1\r\nHost: fuzz\r\n", True, {None}),
        ("not UTF-8", http_request(session(), user("\xff").replace(b"\\u00ff", b"\xff"),
                                   auth), False, {400}),
        ("UTF-8 of a surrogate", http_request(session(), user("\ud800").replace(
            b"\\ud800", b"\xed\xa0\x80"), auth), False, {400}),
        ("escaped lone surrogate", http_request(session(), user("\ud800"), auth), False, {400}),
        ("deep JSON", http_request(session(), deep, auth), False, {400}),
        ("huge integer", http_request(session(), dumped().replace(
            b'"logprobs": true', b'"n": ' + b"9" * 100_000), auth), False, {400}),
        ("n is Infinity", http_request(session(), dumped(n=float("inf")), auth), False, {400}),
        ("n is NaN", http_request(session(), dumped(n=float("nan")), auth), False, {400}),
        ("model not text", http_request(session(), dumped(model=1), auth), False, {400}),
        ("messages not a list", http_request(session(), dumped(messages="hi"), auth), False, {400}),
        ("no messages", http_request(session(), dumped(messages=[]), auth), False, {400}),
        ("a message not an object", http_request(session(), dumped(messages=[1]), auth), False,
         {400}),
        ("odd role last", http_request(session(), dumped(messages=[
            {"role": "hacker", "content": "hi"}]), auth), False, {400}),
        ("content an object", http_request(session(), user({"a": 1}), auth), False, {400}),
        # the embedded model's template cannot join None; the tool template writes "None"
        ("content null", http_request(session(), user(None), auth), False, {400, 200}),
        ("content numbers", http_request(session(), user([1, 2]), auth), False, {400}),
        ("content text parts", http_request(session(), user(
            [{"type": "text", "text": "2 + 2?"}]), auth), False, {200}),
        ("content without role", http_request(session(), dumped(messages=[
            {"content": "hi"}]), auth), False, {400}),
        ("tool_calls text", http_request(session(), dumped(messages=[
            {"role": "assistant", "content": "x", "tool_calls": "abc"},
            {"role": "user", "content": "hi"}]), auth), False, {400}),
        ("tool_calls function a number", http_request(session(), dumped(messages=[
            {"role": "assistant", "content": "x", "tool_calls": [{"function": 5}]},
            {"role": "user", "content": "hi"}]), auth), False, {400}),
        ("tools garbage", http_request(session(), dumped(tools=[1, "x"]), auth), False,
         {400} if not tools else {400, 200}),
        ("tool_choice forced", http_request(session(), dumped(tool_choice={
            "type": "function", "function": {"name": "add"}}), auth), False, {400}),
        ("n of 2", http_request(session(), dumped(n=2), auth), False, {400}),
        ("stream", http_request(session(), dumped(stream=True), auth), False, {400}),
        ("unknown fields", http_request(session(), dumped(temperature=float("nan"),
                                                          unknown={"a": [1]}), auth), False, {200}),
        ("content of 15 MiB", http_request(session(), user("2 + 2? " * (15 * MEGABYTE // 7)),
                                           auth), False, {400}),
        ("GET", http_request(session(), b"", auth, method="GET"), False, {405, 501}),
        ("garbage request line", b"GARBAGE\r\n\r\n", False, {400}),
        ("header line too long", http_request(session(), valid, {
            **auth, "X-Long": "x" * 70_000}), False, {431}),
    ]
    memory_before = resident_mb()
    for case, data, hold, expected in storm:
        answer = exchange(port, data, hold)
        tally.tries += 1
        tally.max_seconds = max(tally.max_seconds, answer.seconds)
        print(f"  {tally.target}: {case}: {answer.status} in {answer.seconds:.2f} s",
              flush=True)
        if answer.status not in expected:
            kind = ("crash" if answer.status is None or answer.status >= 500
                    else "noted")
            tally.record(kind, f"{case}: answered {answer.status}, expected "
                         f"{sorted(expected, key=str)}", data[:300])
        if answer.seconds > REQUEST_SECONDS:
            tally.record("time", f"{case}: {answer.seconds:.1f} s", data[:300])
    for index in range(tries):
        path, base = session(), valid_body(tools)
        if index % 3 == 2:  # a later call of an episode: the first call's reply, then more
            first = exchange(port, http_request(path, json.dumps(base).encode(), auth))
            if first.status == 200:
                reply = json.loads(first.body)["choices"][0]["message"]
                base["messages"] += [reply, {"role": "user", "content": "And 3 + 3?"}]
        body = mutate_body(rng, base)
        answer = exchange(port, http_request(path, body, auth))
        tally.tries += 1
        tally.statuses[str(answer.status)] = tally.statuses.get(str(answer.status), 0) + 1
        tally.max_seconds = max(tally.max_seconds, answer.seconds)
        if answer.status is None or answer.status >= 500 or not (
                answer.status == 200 or 400 <= answer.status < 500):
            tally.record("crash", f"a mutated body: answered {answer.status}", body)
        if answer.seconds > REQUEST_SECONDS:
            tally.record("time", f"a mutated body: {answer.seconds:.1f} s", body)
        progress(tally, index, tries)
    after = exchange(port, http_request(session(), valid, auth))
    tally.tries += 1
    if after.status != 200 or not endpoint._thread.is_alive():
        tally.record("crash", f"a valid request after the storm: {after.status}", valid)
    endpoint.close()
    check_memory(tally, memory_before)
    return tally


# ---- the run ---------------------------------------------------------------------------
def summary_table(tallies: Iterable[Tally]) -> str:
    lines = ["| target | tries | crashes | unscored | bounds exceeded | max s | max obs. chars "
             "| RSS growth MB |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    totals = [0, 0, 0, 0]
    for tally in tallies:
        figures = [tally.tries, tally.crashes, tally.unscored, tally.bounds_exceeded]
        totals = [total + figure for total, figure in zip(totals, figures, strict=True)]
        lines.append(f"| {tally.target} | " + " | ".join(map(str, figures))
                     + f" | {tally.max_seconds:.2f} | {tally.max_observation_chars} | "
                       f"{tally.rss_growth_mb:.0f} |")
    lines.append("| all | " + " | ".join(map(str, totals)) + " | | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tries", type=int, default=300,
                        help="mutated inputs per target, beside the fixed corpus")
    parser.add_argument("--output", type=Path, help="the counts and findings as JSON")
    parser.add_argument("--targets", default="tasks,tool_calls,endpoint",
                        help="a comma-separated subset of tasks, tool_calls, endpoint")
    arguments = parser.parse_args(argv)
    targets = set(arguments.targets.split(","))
    rng = random.Random(arguments.seed)
    tallies: list[Tally] = []
    started = time.monotonic()
    if "tasks" in targets:
        families = build_families()
        try:
            for name, family in families.items():
                print(f"task {name}", flush=True)
                tallies.append(fuzz_task(name, family, arguments.tries, rng))
        finally:
            for family in families.values():
                family.close()
    if "tool_calls" in targets:
        print("tool-call parser", flush=True)
        tallies.append(fuzz_tool_calls(arguments.tries, rng))
    if "endpoint" in targets:
        with tempfile.TemporaryDirectory() as folder:
            for name, agent in build_agents(Path(folder)).items():
                print(f"endpoint, {name}", flush=True)
                tallies.append(fuzz_endpoint(name, agent, arguments.tries, rng))
    seconds = time.monotonic() - started
    print(summary_table(tallies))
    for tally in tallies:
        if tally.statuses:
            print(f"- {tally.target}: mutated bodies answered "
                  f"{dict(sorted(tally.statuses.items()))}")
        for finding in tally.findings.values():
            print(f"- {tally.target}: {finding.count} x {finding.kind}: {finding.what[:200]}\n"
                  f"    e.g. {finding.example[:200]}")
    print(f"{sum(tally.tries for tally in tallies)} tries in {seconds:.0f} s")
    if arguments.output is not None:
        arguments.output.parent.mkdir(parents=True, exist_ok=True)
        arguments.output.write_text(json.dumps({
            "command": " ".join(["python -m experiments.hostile_inputs.fuzz_model_text",
                                 *(argv if argv is not None else sys.argv[1:])]),
            "seconds": seconds,
            "bounds": {"step_s": STEP_SECONDS, "math_step_s": MATH_STEP_SECONDS,
                       "request_s": REQUEST_SECONDS, "observation_chars": OBSERVATION_CHARS,
                       "info_chars": INFO_CHARS, "rss_growth_mb": RSS_GROWTH_MB},
            "targets": [{**asdict(tally), "findings": list(map(asdict,
                                                                tally.findings.values()))}
                        for tally in tallies]}, indent=1))
    return 1 if any(tally.crashes or tally.unscored or tally.bounds_exceeded
                    for tally in tallies) else 0


if __name__ == "__main__":
    sys.exit(main())
