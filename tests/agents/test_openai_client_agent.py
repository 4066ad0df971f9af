"""An agent written against the `openai` client, trained through the endpoint: what the
endpoint sampled is what the trajectory holds, token for token, and the calls of all
episodes are batched together."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("openai", reason="the openai client is the `openai` extra")

from src.agents.instance.openai_client_agent import OpenAIClientAgent  # noqa: E402
from src.language_models.instance.huggingface_lora_language_model import (  # noqa: E402
    HuggingfaceLoRALanguageModel,
)
from src.records.episode import EpisodeStatus  # noqa: E402
from src.run.rollout import roll_out_lockstep  # noqa: E402
from src.tasks.instance.math_problems.task import MathProblemsTask  # noqa: E402
from src.tasks.splits import Splits

RESPONSES: list[dict] = []  # every response the test agents received
_LOCK = threading.Lock()


def _record(*responses) -> None:
    with _LOCK:
        RESPONSES.extend(response.model_dump() for response in responses)


def answering_agent(client, messages: list[dict[str, str]]) -> str:
    """One call a turn, the reply returned as it came: a multi-turn episode is one growing
    conversation."""
    completion = client.chat.completions.create(
        model="policy", messages=[{"role": "system", "content": "Be brief."}, *messages],
        logprobs=True)
    _record(completion)
    return completion.choices[0].message.content


def refining_agent(client, messages: list[dict[str, str]]) -> str:
    """Two calls in one turn: a draft, then (after a nudge) the reply it returns; the
    second call sends the first call's conversation and reply, as the contract asks."""
    first = [{"role": "system", "content": "Be brief."}, *messages]
    draft = client.chat.completions.create(model="policy", messages=first, logprobs=True)
    second = [*first, {"role": "assistant", "content": draft.choices[0].message.content},
              {"role": "user", "content": "Now answer."}]
    final = client.chat.completions.create(model="policy", messages=second, logprobs=True)
    _record(draft, final)
    return final.choices[0].message.content


def history_editing_agent(client, messages: list[dict[str, str]]) -> str:
    """Drops the earlier turns on its second turn: not the conversation it was fed."""
    return client.chat.completions.create(model="policy", messages=messages[-1:]
                                          ).choices[0].message.content


def tool_agent(client, messages: list[dict[str, str]]) -> str:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    return client.chat.completions.create(model="policy", messages=messages,
                                          tools=tools).choices[0].message.content


def null_content_agent(client, messages: list[dict[str, str]]) -> str:
    """Sends a user message without text, which the embedded model's template cannot
    join into its prompt."""
    return client.chat.completions.create(model="policy", messages=[
        {"role": "user", "content": None}]).choices[0].message.content


def text_parts_agent(client, messages: list[dict[str, str]]) -> str:
    parts = [{"type": "text", "text": message["content"]} for message in messages]
    return client.chat.completions.create(model="policy", messages=[
        {"role": "user", "content": parts}]).choices[0].message.content


def megabytes_agent(client, messages: list[dict[str, str]]) -> str:
    """Sends 7 MB of text: far more than the tiny model's 512 tokens can hold."""
    return client.chat.completions.create(model="policy", messages=[
        {"role": "user", "content": "2 + 2? " * 1_000_000}]).choices[0].message.content


SECOND_CALL_ANSWERED = threading.Event()  # set once the concurrent agent's calls ended
CONCURRENT: list[str] = []  # how each of its two concurrent calls ended


def concurrent_agent(client, messages: list[dict[str, str]]) -> str:
    """Sends two calls of its episode at once (from threads of its own), the episode of
    group 0; the other episode calls once the two have ended, so that the first of the
    two is held in the lockstep batch while the second arrives."""
    if "(waits)" in messages[0]["content"]:
        SECOND_CALL_ANSWERED.wait(30)
        return answering_agent(client, messages)

    def call() -> None:
        try:
            CONCURRENT.append(answering_agent(client, messages))
        except Exception as error:  # noqa: BLE001 - the test reads how each call ended
            CONCURRENT.append(f"{type(error).__name__}: {error}")
            SECOND_CALL_ANSWERED.set()

    threads = [threading.Thread(target=call) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return CONCURRENT[-1]


@pytest.fixture(scope="module")
def model(tiny_model_path: Path) -> HuggingfaceLoRALanguageModel:
    return HuggingfaceLoRALanguageModel(model_name_or_path=str(tiny_model_path))


def roll_out(model, function: str, episodes: int = 4, max_round: int = 2):
    agent = OpenAIClientAgent(model, f"{__name__}.{function}", max_new_tokens=12)
    task = MathProblemsTask(max_round=max_round, splits=Splits(num_train=8, num_validation=2))
    samples = [(task.get_sample(f"train-{i:06d}"), 0) for i in range(episodes)]
    try:
        return agent, roll_out_lockstep(samples, task, agent, 0, list(range(episodes)))
    finally:
        agent.endpoint.close()


@pytest.mark.parametrize(("function", "max_round"), [
    ("answering_agent", 2),  # 2 turns (a wrong answer gets a retry), a call each
    ("refining_agent", 1),  # 1 turn, 2 calls
])
def test_trajectories_are_token_identical_to_what_the_endpoint_sampled(
        model, function: str, max_round: int) -> None:
    RESPONSES.clear()
    calls = []
    generate = model.generate
    model.generate = lambda prompts, *a, **k: calls.append(len(prompts)) or generate(
        prompts, *a, **k)
    try:
        _, episodes = roll_out(model, function, max_round=max_round)
    finally:
        del model.generate
    assert calls == [4, 4]  # the 4 episodes' calls, batched by round
    for episode in episodes:
        # the tiny random model answers wrong, so it uses every round
        assert episode.status is EpisodeStatus.COMPLETED and episode.turns == max_round
        key = episode.info["endpoint_session"]
        mine = [r for r in RESPONSES if r["id"].startswith(f"chatcmpl-{key}-")]
        assert len(mine) == 2 and episode.metrics["prefix_broken"] == 0.0
        fed: list[int] = []
        for response in mine:  # each prompt extends the previous prompt and completion
            prompt, choice = response["prompt_token_ids"], response["choices"][0]
            assert prompt[:len(fed)] == fed and len(prompt) > len(fed)
            fed = prompt + choice["token_ids"]
        trajectory = episode.trajectory
        assert trajectory.token_ids == fed
        sampled = [i for i, m in enumerate(trajectory.loss_mask) if m]
        assert [trajectory.token_ids[i] for i in sampled] == [
            t for r in mine for t in r["choices"][0]["token_ids"]]
        logprobs = [c["logprob"] for r in mine for c in r["choices"][0]["logprobs"]["content"]]
        assert [trajectory.sampling_logprobs[i] for i in sampled] == logprobs
        rescored = model.sequence_logprobs([trajectory.token_ids])[0]
        assert max(abs(rescored[i] - trajectory.sampling_logprobs[i]) for i in sampled) < 1e-4


def test_a_call_that_rewrites_history_fails_its_episode_and_is_counted(model) -> None:
    _, episodes = roll_out(model, "history_editing_agent", episodes=2)
    for episode in episodes:
        assert episode.status is EpisodeStatus.AGENT_ERROR
        assert episode.metrics["prefix_broken"] == 1.0
        assert "prefix_broken" in episode.error
        assert "call 2 does not extend call 1" in episode.error
        assert episode.turns == 1  # the first turn was sampled and stands in its record
        assert sum(episode.trajectory.loss_mask) > 0


def test_unsupported_requests_are_refused_with_a_reason(model) -> None:
    _, episodes = roll_out(model, "tool_agent", episodes=1, max_round=1)
    assert episodes[0].status is EpisodeStatus.AGENT_ERROR
    assert "does not render tools" in episodes[0].error


def test_messages_the_template_cannot_render_are_a_bad_request_with_the_reason(model) -> None:
    _, episodes = roll_out(model, "null_content_agent", episodes=1, max_round=1)
    assert episodes[0].status is EpisodeStatus.AGENT_ERROR
    assert "invalid_request" in episodes[0].error and "cannot render" in episodes[0].error


def test_content_of_text_parts_is_answered(model) -> None:
    _, episodes = roll_out(model, "text_parts_agent", episodes=1, max_round=1)
    assert episodes[0].status is EpisodeStatus.COMPLETED


def test_a_prompt_too_long_to_fit_is_refused_before_it_is_tokenized(model) -> None:
    # tokenizing it took about 20 s and 2 GB here: a prompt longer than the context times
    # the longest token cannot fit, whatever its tokens
    started = time.monotonic()
    _, episodes = roll_out(model, "megabytes_agent", episodes=1, max_round=1)
    assert episodes[0].status is EpisodeStatus.AGENT_CONTEXT_LIMIT
    assert time.monotonic() - started < 5.0


def test_concurrent_calls_of_one_episode_are_refused_one_answered(model) -> None:
    CONCURRENT.clear()
    SECOND_CALL_ANSWERED.clear()
    agent = OpenAIClientAgent(model, f"{__name__}.concurrent_agent", max_new_tokens=12)
    task = MathProblemsTask(max_round=1, splits=Splits(num_train=8, num_validation=2))
    calling, waiting = task.get_sample("train-000000"), task.get_sample("train-000001")
    waiting = waiting.model_copy(update={"data": {**waiting.data, "question": "1 + 1 (waits)"}})
    try:
        episodes = roll_out_lockstep([(calling, 0), (waiting, 0)], task, agent, 0, [0, 1])
    finally:
        agent.endpoint.close()
    refused = [result for result in CONCURRENT if "call_in_flight" in result]
    assert len(CONCURRENT) == 2 and len(refused) == 1
    assert "another call of this episode is being answered" in refused[0]
    # one prompt and one reply in the trajectory: the refused call left no trace in it
    trajectory = episodes[0].trajectory
    assert len(trajectory.turn_spans) == 1
    assert episodes[0].status is EpisodeStatus.COMPLETED
