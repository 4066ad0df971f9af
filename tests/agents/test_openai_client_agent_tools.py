"""An agent written against the OpenAI client in a tool episode: it gets the episode's tools
and conversation, its tool calls run in the episode's sandbox and come back as `tool`
messages (or, for a template without tools, as the prompted protocol's user turns), and
the trajectory is what the endpoint sampled, token for token."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("openai", reason="the openai client is the `openai` extra")

from src.agents.instance.openai_client_agent import OpenAIClientAgent  # noqa: E402
from src.language_models.tool_calls import hermes_text  # noqa: E402
from src.records.episode import Episode, EpisodeStatus, Outcome  # noqa: E402
from src.run.rollout import roll_out_lockstep  # noqa: E402
from src.tasks.instance.math_python_tool.task import MathPythonToolTask  # noqa: E402
from src.tasks.splits import Splits
from tests.agents.openai_endpoint.test_tool_calls import TOOL_TEMPLATE  # noqa: E402
from tests.agents.scripted_model import ScriptedLanguageModel  # noqa: E402

CALLS: list[tuple[list[dict], list[dict] | None, dict]] = []  # (messages, tools, response)
_LOCK = threading.Lock()


def tool_agent(client, messages: list[dict], tools: list[dict] | None):
    """One call a turn with the episode's tools; the reply's message returned as it came."""
    completion = client.chat.completions.create(
        model="policy", messages=messages, **({"tools": tools} if tools else {}))
    with _LOCK:
        CALLS.append((messages, tools, completion.model_dump()))
    return completion.choices[0].message


def toolless_agent(client, messages: list[dict]) -> str:
    return client.chat.completions.create(model="policy", messages=messages
                                          ).choices[0].message.content


def python(code: str) -> str:
    return hermes_text(None, [("python", {"code": code})])


@pytest.fixture(scope="module")
def task() -> Iterator[MathPythonToolTask]:
    family = MathPythonToolTask(splits=Splits(num_train=2, num_validation=2), max_round=4)
    yield family
    family.close()


def roll_out(tiny_model_path: Path, task: MathPythonToolTask, template: str | None,
             function: str, replies: list[str]) -> Episode:
    probe = ScriptedLanguageModel(tiny_model_path, [])
    end_of_turn = probe.tokenizer.convert_tokens_to_ids("<|im_end|>")
    encoded = [(probe.tokenizer(text, add_special_tokens=False)["input_ids"] + [end_of_turn],
                "stop") for text in replies]
    model = ScriptedLanguageModel(tiny_model_path, encoded, chat_template=template)
    agent = OpenAIClientAgent(model, f"{__name__}.{function}", max_new_tokens=64)
    try:
        [episode] = roll_out_lockstep([(task.get_sample("train-000000"), 0)], task, agent, 0,
                                      [0])
    finally:
        agent.endpoint.close()
    return episode


def check_token_exact(episode: Episode) -> None:
    fed: list[int] = []
    for _, _, response in CALLS:
        prompt = response["prompt_token_ids"]
        assert prompt[:len(fed)] == fed and len(prompt) > len(fed)
        fed = prompt + response["choices"][0]["token_ids"]
    trajectory = episode.trajectory
    assert trajectory is not None and trajectory.token_ids == fed
    assert [trajectory.token_ids[i] for i, m in enumerate(trajectory.loss_mask) if m] == [
        t for _, _, response in CALLS for t in response["choices"][0]["token_ids"]]
    assert episode.metrics["prefix_broken"] == 0.0


def test_the_tools_reach_the_function_and_its_calls_run_in_the_sandbox(
        tiny_model_path: Path, task: MathPythonToolTask) -> None:
    CALLS.clear()
    answer = task.get_sample("train-000000").data["answer"]
    episode = roll_out(tiny_model_path, task, TOOL_TEMPLATE, "tool_agent",
                       [python("x = 3"), python("print(x)"), f"\\boxed{{{answer}}}"])
    assert episode.status is EpisodeStatus.COMPLETED and episode.outcome is Outcome.CORRECT
    assert episode.turns == 3 and len(CALLS) == 3
    assert [tool["function"]["name"] for tool in CALLS[0][1]] == ["python"]
    first, second, _ = (response["choices"][0] for _, _, response in CALLS)
    assert first["finish_reason"] == "tool_calls"
    assert json.loads(first["message"]["tool_calls"][0]["function"]["arguments"]) == {
        "code": "x = 3"}
    # the result of `print(x)` came back as a tool message answering the call
    messages = CALLS[2][0]
    assert messages[-2]["tool_calls"][0]["id"] == second["message"]["tool_calls"][0]["id"]
    assert messages[-1] == {"role": "tool", "content": "3",
                            "tool_call_id": second["message"]["tool_calls"][0]["id"]}
    assert episode.metrics["tool_calls"] == 2 and episode.metrics["sandbox/ok"] == 2
    check_token_exact(episode)


def test_a_template_without_tools_gets_the_prompted_protocol_through_the_endpoint(
        tiny_model_path: Path, task: MathPythonToolTask) -> None:
    CALLS.clear()
    answer = task.get_sample("train-000000").data["answer"]
    episode = roll_out(tiny_model_path, task, None, "tool_agent",
                       [python("x = 3"), python("print(x)"), f"\\boxed{{{answer}}}"])
    assert episode.status is EpisodeStatus.COMPLETED and episode.outcome is Outcome.CORRECT
    assert all(tools is None for _, tools, _ in CALLS)
    messages = CALLS[2][0]
    assert messages[0]["role"] == "system" and "You may call these tools" in messages[0]["content"]
    assert messages[-1] == {"role": "user", "content": "<tool_response>\n3\n</tool_response>"}
    assert episode.metrics["tool_calls"] == 2
    check_token_exact(episode)


def test_a_function_that_takes_no_tools_is_refused_before_any_call(
        tiny_model_path: Path, task: MathPythonToolTask) -> None:
    with pytest.raises(TypeError, match="must take them: def agent"):
        roll_out(tiny_model_path, task, TOOL_TEMPLATE, "toolless_agent", [])
