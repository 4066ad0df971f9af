"""Tool calls through the endpoint: parsed from Hermes blocks, sent back as `tool_calls` and
`tool` messages, and kept token-exact in the trajectory."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

pytest.importorskip("openai", reason="the openai client is the `openai` extra")

from src.agents.instance.openai_client_agent import OpenAIClientAgent  # noqa: E402
from src.language_models.chat_template import (  # noqa: E402
    probe_turn_boundary,
    render_continuation,
)
from src.language_models.tool_calls import (  # noqa: E402
    hermes_text,
    parse_hermes,
    template_message,
    template_renders_tools,
    tool_preamble,
    tool_response_text,
)
from src.records.episode import EpisodeStatus  # noqa: E402
from src.run.rollout import roll_out_lockstep  # noqa: E402
from src.tasks.instance.math_problems.task import MathProblemsTask  # noqa: E402
from src.tasks.splits import Splits
from tests.agents.scripted_model import ScriptedLanguageModel  # noqa: E402
from tests.tasks.test_reply_fuzz import HOSTILE_REPLIES  # noqa: E402

# A ChatML template that renders tools the Hermes way (as Qwen2.5's does), written for
# this test: the embedded model's own template has no tools.
TOOL_TEMPLATE = """
{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}Functions you may call:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>
Call one as <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{ '<|im_start|>user' }}{% endif %}
{{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{ '<|im_end|>\n' }}{% endif %}
{%- elif message.role == 'assistant' %}<|im_start|>assistant
{{ message.content or '' }}
{%- for call in message.tool_calls or [] %}
<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% elif message.role != 'system' %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

TOOLS = [{"type": "function", "function": {
    "name": "add", "description": "a + b",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"},
                                                    "b": {"type": "number"}}}}}]
RESPONSES: list[dict] = []
_LOCK = threading.Lock()


def test_hermes_blocks_become_tool_calls() -> None:
    reply = parse_hermes('Let me add.\n<tool_call>\n{"name": "add", "arguments": {"a": 2}}\n'
                         '</tool_call>\n<tool_call>{"name": "add", "arguments": "{\\"b\\": 1}"}'
                         '</tool_call>', "call_x")
    assert reply.content == "Let me add." and not reply.malformed
    assert [(c.id, c.name, json.loads(c.arguments)) for c in reply.tool_calls] == [
        ("call_x-0", "add", {"a": 2}), ("call_x-1", "add", {"b": 1})]


@pytest.mark.parametrize("text", [
    '<tool_call>{"name": "add", "arguments": {"a": 2}',  # cut off inside the block
    '<tool_call>{"arguments": {}}</tool_call>',  # no name
    '<tool_call>{"name": "add", "arguments": [1]}</tool_call>',  # arguments not an object
    '<tool_call>{"name": "add"}</tool_call><tool_call>not json</tool_call>',
    # nested past the JSON reader's recursion: malformed, not a RecursionError
    "<tool_call>" + "[" * 100_000 + "</tool_call>",
    '<tool_call>{"name": "add", "arguments": ' + "[" * 5_000 + "]" * 5_000 + "}</tool_call>",
    '<tool_call>{"name": "add", "arguments": "' + "[" * 5_000 + '"}</tool_call>',
    # escapes of lone surrogates: no text a client can send back
    '<tool_call>{"name": "\\ud800", "arguments": {}}</tool_call>',
    '<tool_call>{"name": "add", "arguments": {"\\udfff": 1}}</tool_call>',
    # not JSON that every client reads
    '<tool_call>{"name": "add", "arguments": {"a": NaN}}</tool_call>',
    '<tool_call>{"name": "add", "arguments": {"a": 1e309}}</tool_call>',
])
def test_a_malformed_block_leaves_the_reply_as_plain_content(text: str) -> None:
    reply = parse_hermes(text, "call_x")
    assert reply.content == text and reply.tool_calls == () and reply.malformed


@pytest.mark.parametrize(("text", "problem"), [
    ('<tool_call>{"arguments": {}}</tool_call>', 'tool call 1 of 1: not a JSON object with a "name"'),
    ('<tool_call>{"name": "add", "arguments": [1]}</tool_call>',
     'tool call 1 of 1: "arguments" is not a JSON object'),
    ('<tool_call>{"name": "add"}</tool_call><tool_call>not json</tool_call>',
     "tool call 2 of 2: not valid JSON (JSONDecodeError: Expecting value"),
    ("<tool_call>" + "[" * 100_000 + "</tool_call>", "tool call 1 of 1: nested too deeply"),
])
def test_a_malformed_reply_says_which_block_and_why(text: str, problem: str) -> None:
    reply = parse_hermes(text, "c")
    assert reply.malformed and reply.problem.startswith(problem)


def test_calls_written_as_hermes_text_read_back_as_the_same_calls() -> None:
    calls = [("python", {"code": "print('a</b>')\n"}), ("bash", '{"command": "ls"}')]
    text = hermes_text("Let me run it.", calls)
    reply = parse_hermes(text, "c")
    assert reply.content == "Let me run it." and not reply.malformed
    assert [(c.name, json.loads(c.arguments)) for c in reply.tool_calls] == [
        ("python", {"code": "print('a</b>')\n"}), ("bash", {"command": "ls"})]
    assert hermes_text(None, calls[:1]).startswith("<tool_call>\n")


def test_the_prompted_protocol_lists_each_tool_and_the_call_format() -> None:
    preamble = tool_preamble(TOOLS)
    assert json.dumps(TOOLS[0]["function"]) in preamble
    assert '<tool_call>{"name": NAME, "arguments": {...}}</tool_call>' in preamble
    assert tool_response_text(["5", "6"]) == (
        "<tool_response>\n5\n</tool_response>\n<tool_response>\n6\n</tool_response>")


def refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


@pytest.mark.parametrize("name", sorted(HOSTILE_REPLIES))
def test_hostile_replies_parse_to_calls_the_endpoint_can_send_and_take_back(name: str) -> None:
    reply = parse_hermes(HOSTILE_REPLIES[name], "call_x")
    assert reply.content is None or isinstance(reply.content, str)
    for call in reply.tool_calls:
        assert isinstance(json.loads(call.arguments, parse_constant=refuse_constant), dict)
        json.dumps(call.to_openai(), ensure_ascii=False).encode()  # Unicode text throughout


def test_text_parts_are_rendered_as_their_text() -> None:
    parts = [{"type": "text", "text": "2 + "}, {"type": "text", "text": "2?"}]
    assert template_message({"role": "user", "content": parts}) == {
        "role": "user", "content": "2 + 2?"}


def test_an_open_block_at_the_end_is_read_and_text_without_blocks_is_content() -> None:
    reply = parse_hermes('<tool_call>\n{"name": "add", "arguments": {}}\n', "c")
    assert reply.content is None and [c.name for c in reply.tool_calls] == ["add"]
    assert parse_hermes("just text", "c").content == "just text"


@pytest.fixture
def scripted(tiny_model_path: Path):
    def make(replies: list[str], template: str | None = TOOL_TEMPLATE) -> ScriptedLanguageModel:
        probe = ScriptedLanguageModel(tiny_model_path, [])
        end_of_turn = probe.tokenizer.convert_tokens_to_ids("<|im_end|>")
        encoded = [(probe.tokenizer(text, add_special_tokens=False)["input_ids"] + [end_of_turn],
                    "stop") for text in replies]
        return ScriptedLanguageModel(tiny_model_path, encoded, chat_template=template)
    return make


def test_only_templates_that_render_tools_are_sent_tools(scripted) -> None:
    assert template_renders_tools(scripted([], TOOL_TEMPLATE).tokenizer)
    assert not template_renders_tools(scripted([], None).tokenizer)  # the embedded model's


def test_a_user_turn_continues_as_the_built_in_agent_opens_it(scripted) -> None:
    for template in (None, TOOL_TEMPLATE):
        model = scripted([], template)
        opening = probe_turn_boundary(model, None).opening_text("4?")
        assert render_continuation(model.tokenizer, [{"role": "user", "content": "4?"}]) == opening


def calculator_agent(client, messages: list[dict[str, str]]) -> str:
    """Calls tools until the model answers without one, as OpenAI tool loops do."""
    conversation = [{"role": "system", "content": "Use the tools."}, *messages]
    while True:
        completion = client.chat.completions.create(model="policy", messages=conversation,
                                                    tools=TOOLS)
        with _LOCK:
            RESPONSES.append(completion.model_dump())
        message = completion.choices[0].message
        conversation.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content
        for call in message.tool_calls:
            arguments = json.loads(call.function.arguments)
            conversation.append({"role": "tool", "tool_call_id": call.id,
                                 "content": str(arguments["a"] + arguments["b"])})


def call_editing_agent(client, messages: list[dict[str, str]]) -> str:
    """Sends its tool call back with other arguments than the model wrote."""
    conversation = [*messages]
    message = client.chat.completions.create(model="policy", messages=conversation,
                                             tools=TOOLS).choices[0].message
    call = message.tool_calls[0].model_dump()
    call["function"]["arguments"] = '{"a": 2, "b": 4}'
    conversation += [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": call["id"], "content": "6"}]
    return client.chat.completions.create(model="policy", messages=conversation,
                                          tools=TOOLS).choices[0].message.content


def roll_out(model, function: str):
    agent = OpenAIClientAgent(model, f"{__name__}.{function}", max_new_tokens=64)
    task = MathProblemsTask(max_round=1, splits=Splits(num_train=4, num_validation=2))
    try:
        return roll_out_lockstep([(task.get_sample("train-000000"), 0)], task, agent, 0, [0])[0]
    finally:
        agent.endpoint.close()


CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'


def test_tool_calls_round_trip_token_exact_with_scripted_model(scripted) -> None:
    RESPONSES.clear()
    model = scripted([f"I will add.\n{CALL}", f"{CALL}\n{CALL}", "The answer is 5."])
    episode = roll_out(model, "calculator_agent")

    assert episode.status is EpisodeStatus.COMPLETED
    first, second, last = (response["choices"][0] for response in RESPONSES)
    assert first["finish_reason"] == "tool_calls" and second["finish_reason"] == "tool_calls"
    assert first["message"]["content"] == "I will add." and second["message"]["content"] is None
    assert [len(choice["message"]["tool_calls"]) for choice in (first, second)] == [1, 2]
    assert json.loads(first["message"]["tool_calls"][0]["function"]["arguments"]) == {
        "a": 2, "b": 3}
    assert last["finish_reason"] == "stop" and last["message"]["content"] == "The answer is 5."
    assert last["message"]["tool_calls"] is None
    assert episode.metrics["tool_calls"] == 3.0
    assert episode.metrics["malformed_tool_calls"] == 0.0

    # every prompt extends the previous prompt and completion; the trajectory is the last
    fed: list[int] = []
    for response in RESPONSES:
        prompt = response["prompt_token_ids"]
        assert prompt[:len(fed)] == fed
        fed = prompt + response["choices"][0]["token_ids"]
    trajectory = episode.trajectory
    assert trajectory.token_ids == fed
    assert [trajectory.token_ids[i] for i, m in enumerate(trajectory.loss_mask) if m] == [
        t for response in RESPONSES for t in response["choices"][0]["token_ids"]]
    # ...and is what the template renders for the whole conversation, tool results grouped
    # into one turn as the template groups them
    tokenizer = model.tokenizer
    text = tokenizer.decode(fed)
    assert text.count("<tool_response>\n5\n</tool_response>") == 3
    assert text.count("<|im_start|>user\n<tool_response>") == 2
    assert "Functions you may call" in text and '"name": "add"' in text


def test_a_tool_call_sent_back_changed_breaks_the_prefix_with_scripted_model(scripted) -> None:
    model = scripted([CALL, "6"])
    episode = roll_out(model, "call_editing_agent")
    assert episode.status is EpisodeStatus.AGENT_ERROR
    assert episode.metrics["prefix_broken"] == 1.0
    assert "call 2 does not extend call 1" in episode.error


def test_a_malformed_tool_call_is_content_and_counted_with_scripted_model(scripted) -> None:
    RESPONSES.clear()
    model = scripted(['<tool_call>{"name": "add", "arguments": {"a": </tool_call>'])
    episode = roll_out(model, "calculator_agent")
    assert episode.status is EpisodeStatus.COMPLETED  # the reply is the episode's answer
    assert RESPONSES[0]["choices"][0]["finish_reason"] == "stop"
    assert episode.metrics["malformed_tool_calls"] == 1.0
    assert episode.metrics["tool_calls"] == 0.0
