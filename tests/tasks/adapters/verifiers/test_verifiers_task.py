"""verifiers environments as a task: samples and splits from the tasksets, rollouts driven
by the environment through the real endpoint and agent, the environment's own rewards,
token-exact multi-turn tool episodes, group terms from `Env.finalize`, and clear errors."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verifiers", reason="the verifiers adapter's package (the `verifiers` extra)")
pytest.importorskip("openai", reason="the openai client is the `openai` extra")

from src.agents.instance.openai_client_agent import OpenAIClientAgent  # noqa: E402
from src.records.episode import Episode, EpisodeStatus, Outcome  # noqa: E402
from src.run.rollout import roll_out_lockstep  # noqa: E402
from src.tasks.adapters.verifiers.task import VerifiersTask  # noqa: E402
from src.tasks.instance.math_problems.task import MathProblemsTask  # noqa: E402
from src.tasks.splits import Splits
from src.tasks.task import TaskSettingError  # noqa: E402
from tests.agents.openai_endpoint.test_tool_calls import TOOL_TEMPLATE  # noqa: E402
from tests.agents.scripted_model import ScriptedLanguageModel  # noqa: E402
from tests.tasks.adapters.verifiers.judged_env import BLOCK_S  # noqa: E402

ARITHMETIC = "examples.verifiers_envs.arithmetic"
CALCULATOR = "examples.verifiers_envs.calculator"
CALL = ('<tool_call>\n{"name": "calc_calculate", "arguments": {"expression": "12 * 13"}}'
        '\n</tool_call>')


class RecordingAgent(OpenAIClientAgent):
    """The agent, keeping every response its endpoint sent (what was sampled)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.responses: list[dict[str, Any]] = []
        super().__init__(*args, **kwargs)

    def _answer(self, session: Any, request: Any) -> dict[str, Any]:
        response = super()._answer(session, request)
        self.responses.append(response)
        return response


@pytest.fixture
def scripted(tiny_model_path: Path):
    """A model that replies with these texts in turn (each closed by its end-of-turn)."""
    def make(replies: list[str], template: str | None = None) -> ScriptedLanguageModel:
        tokenizer = ScriptedLanguageModel(tiny_model_path, []).tokenizer
        end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
        encoded = [(tokenizer(text, add_special_tokens=False)["input_ids"] + [end_of_turn],
                    "stop") for text in replies]
        return ScriptedLanguageModel(tiny_model_path, encoded, chat_template=template)
    return make


@pytest.fixture(scope="module")
def arithmetic():
    task = VerifiersTask(ARITHMETIC, validation_arguments={"split": "validation"})
    yield task
    task.close()


@pytest.fixture(scope="module")
def calculator():
    task = VerifiersTask(CALCULATOR, validation_arguments={"split": "validation"},
                         max_turns=3)
    yield task
    task.close()


def roll_out(model, task, sample_id: str = "train-000000", group: int = 1,
             max_new_tokens: int = 64) -> tuple[RecordingAgent, list[Episode]]:
    agent = RecordingAgent(model, None, max_new_tokens=max_new_tokens)
    try:
        samples = [(task.get_sample(sample_id), index) for index in range(group)]
        return agent, roll_out_lockstep(samples, task, agent, 0, list(range(group)))
    finally:
        agent.endpoint.close()


def test_samples_are_the_tasksets_tasks_with_their_prompts_and_answers(arithmetic) -> None:
    assert len(arithmetic.sample_ids("train")) == 80
    assert len(arithmetic.sample_ids("validation")) == 20  # the held-out taskset's all
    assert arithmetic.sample_ids("selection") == []
    sample = arithmetic.get_sample("validation-000000")
    assert sample.data == {"prompt": "What is 0 + 4?", "answer": "4", "task_id": "sum-0-4"}
    assert sample.category == ARITHMETIC
    prompts = {arithmetic.get_sample(i).data["prompt"] for i in arithmetic.sample_ids()}
    assert "What is 0 + 4?" not in prompts and len(prompts) == 80
    with pytest.raises(KeyError, match="split 'validation' has 20"):
        arithmetic.get_sample("validation-000020")


def test_without_a_validation_taskset_the_last_tasks_are_held_out() -> None:
    task = VerifiersTask(ARITHMETIC, num_train=10, num_validation=5)
    try:
        assert len(task.sample_ids("train")) == 10
        assert [task.get_sample(i).data["task_id"] for i in task.sample_ids("validation")] == [
            "sum-9-3", "sum-9-5", "sum-9-6", "sum-9-7", "sum-9-8"]
    finally:
        task.close()


SETTING_MISTAKES = [  # (parameters, the key named, what the message says)
    ({"environment": "no_such_environment_here"}, ("environment",),
     "unknown verifiers environment 'no_such_environment_here'"),
    ({"environment": "textaren"}, ("environment",), "did you mean 'textarena'"),
    ({"environment": "examples.verifiers_envs.arithmtic"}, ("environment",),
     f"did you mean '{ARITHMETIC}'"),
    ({"environment": "examples.verifier_envs.calculator"}, ("environment",),
     "did you mean 'examples.verifiers_envs'"),
    ({"environment": ARITHMETIC, "arguments": {"splt": "validation"}}, ("arguments", "splt"),
     "unknown argument 'splt'; did you mean 'split'"),
    ({"environment": CALCULATOR, "arguments": {"tools": {"urll": "x"}}},
     ("arguments", "tools", "urll"), "did you mean 'url'"),
    ({"environment": ARITHMETIC, "validation_arguments": {"split": "test"}},
     ("validation_arguments", "split"), "'train' or 'validation'"),
    ({"environment": ARITHMETIC, "env_arguments": {"retries": {"max_retrie": 1}}},
     ("env_arguments", "retries", "max_retrie"), "did you mean 'max_retries'"),
]


@pytest.mark.parametrize(("parameters", "key", "message"), SETTING_MISTAKES)
def test_a_dry_run_names_what_the_environment_does_not_have(parameters: dict, key: tuple,
                                                            message: str) -> None:
    with pytest.raises(TaskSettingError, match=message) as raised:
        VerifiersTask.check_parameters(parameters)
    assert raised.value.key == key
    with pytest.raises(TaskSettingError, match=message):  # building it says the same
        VerifiersTask(**parameters)


def test_a_dry_run_passes_what_the_environment_takes() -> None:
    VerifiersTask.check_parameters({"environment": CALCULATOR, "max_turns": 3,
                                    "arguments": {"tools": {"url": None}},
                                    "validation_arguments": {"split": "validation"}})


@pytest.mark.parametrize(("parameters", "message"), [
    ({"environment": ARITHMETIC, "num_validation": 100}, "leaves none to train on"),
    ({"environment": ARITHMETIC, "num_train": 100}, "has 16 train tasks"),
])
def test_config_mistakes_are_clear_errors(parameters: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        VerifiersTask(**parameters)


def test_a_single_turn_episode_is_scored_by_the_environments_reward(scripted,
                                                                    arithmetic) -> None:
    # train-000001 asks 0 + 1: the environment's reward reads the reply's last number
    agent, episodes = roll_out(scripted(["The sum is 1.", "It is 2"]), arithmetic,
                               "train-000001", group=2)
    right, wrong = episodes
    assert right.status is EpisodeStatus.COMPLETED and right.outcome is Outcome.CORRECT
    assert right.reward == 1.0 and right.metrics["correct"] == 1.0
    assert right.metrics["reply_chars"] == len("The sum is 1.")
    assert wrong.reward == 0.0 and wrong.outcome is Outcome.INCORRECT
    assert right.metrics["model_calls"] == 1.0 and right.metrics["truncated"] == 0.0
    assert [message["role"] for message in right.info["verifiers_transcript"]] == [
        "system", "user", "assistant"]
    assert right.chat[0].content == "What is 0 + 1?" and right.chat[1].content == "The sum is 1."
    assert len(agent.responses) == 2


@pytest.mark.parametrize("tool_protocol", ["native", "prompted"])
def test_a_tool_episode_is_trained_on_exactly_what_was_sampled(scripted, calculator,
                                                               tool_protocol: str) -> None:
    if tool_protocol == "native":  # a template that renders tools: OpenAI tool calls
        task, model = calculator, scripted([f"Let me compute.\n{CALL}", "It is 156."],
                                           TOOL_TEMPLATE)
    else:  # the embedded model's template: tools listed in the prompt, calls in the text
        task = VerifiersTask(CALCULATOR, num_validation=2, tool_protocol="prompted")
        model = scripted([f"Let me compute.\n{CALL}", "It is 156."])
    try:
        agent, (episode,) = roll_out(model, task)
    finally:
        if task is not calculator:
            task.close()
    assert episode.status is EpisodeStatus.COMPLETED and episode.reward == 1.0
    assert episode.metrics["model_calls"] == 2.0
    # the chat holds both calls and the tool's answer between them, a turn a call
    assert [(message.role.value, message.content) for message in episode.chat] == [
        ("user", "What is 12 * 13?"), ("agent", f"Let me compute.\n{CALL}"),
        ("user", "<tool_response>\n156\n</tool_response>"), ("agent", "It is 156.")]
    assert episode.turns == 2 and episode.metrics["tool_calls"] == 1.0
    assert episode.metrics["malformed_tool_calls"] == 0.0
    transcript = episode.info["verifiers_transcript"]
    if tool_protocol == "native":
        assert episode.metrics["tool_calls"] == 1.0 and episode.metrics["tool_results"] == 1.0
        assert transcript[3] == {"role": "tool", "content": "156"}
    else:
        assert transcript[3]["content"] == "<tool_response>\n156\n</tool_response>"

    # each call's prompt extends the previous prompt and reply; the trajectory the trainer
    # scores (token_ids, loss_mask) is the last of them, its masked ids the sampled ones
    fed: list[int] = []
    for response in agent.responses:
        prompt = response["prompt_token_ids"]
        assert prompt[:len(fed)] == fed and len(prompt) > len(fed)
        fed = prompt + response["choices"][0]["token_ids"]
    trajectory = episode.trajectory
    assert trajectory.token_ids == fed
    assert [trajectory.token_ids[i] for i, m in enumerate(trajectory.loss_mask) if m] == [
        token for response in agent.responses for token in response["choices"][0]["token_ids"]]
    assert model.tokenizer.decode(fed).count("<tool_response>\n156\n</tool_response>") == 1


def test_a_prompted_call_nested_past_the_json_reader_is_answered_as_an_error(scripted) -> None:
    # the model's text: a call nested deeper than the JSON reader goes is answered as any
    # unreadable call is, never a failure of the environment
    task = VerifiersTask(CALCULATOR, num_validation=2, tool_protocol="prompted")
    try:
        _, (episode,) = roll_out(scripted(["<tool_call>" + "[" * 3_000, "It is 156."]), task)
    finally:
        task.close()
    assert episode.status is EpisodeStatus.COMPLETED and episode.error is None
    assert episode.info["verifiers_transcript"][3]["content"].startswith(
        "<tool_response>\nerror: nested too deeply to read")
    # the unreadable call is counted, and its error answer is in the chat
    assert episode.metrics["malformed_tool_calls"] == 1.0
    assert episode.metrics["tool_calls"] == 0.0
    assert episode.turns == 2 and [m.role.value for m in episode.chat] == [
        "user", "agent", "user", "agent"]
    assert episode.chat[2].content.startswith("<tool_response>\nerror: nested too deeply")


def test_a_prompted_reply_runs_its_readable_calls_and_answers_each_unreadable_one(
        scripted) -> None:
    task = VerifiersTask(CALCULATOR, num_validation=2, tool_protocol="prompted")
    try:
        _, (episode,) = roll_out(scripted([f'{CALL}\n<tool_call>{{"nam": 1}}</tool_call>',
                                           "It is 156."]), task)
    finally:
        task.close()
    assert episode.status is EpisodeStatus.COMPLETED and episode.reward == 1.0
    assert episode.chat[2].content == (
        '<tool_response>\n156\n</tool_response>\n<tool_response>\nerror: not a JSON object '
        'with a "name"\n</tool_response>')
    assert episode.metrics["tool_calls"] == 1.0
    assert episode.metrics["malformed_tool_calls"] == 1.0


def test_the_turn_limit_ends_a_rollout_as_truncated(scripted, calculator) -> None:
    _, (episode,) = roll_out(scripted([CALL] * 3, TOOL_TEMPLATE), calculator)
    assert episode.status is EpisodeStatus.COMPLETED and episode.reward == 0.0
    assert episode.metrics["model_calls"] == 3.0 and episode.metrics["truncated"] == 1.0
    assert episode.info["verifiers_stop"] == "max_turns"


def test_refused_calls_end_the_episode_through_the_agent(scripted, calculator,
                                                         arithmetic) -> None:
    # the embedded model's template renders no tools: the endpoint refuses them
    _, (episode,) = roll_out(scripted([]), calculator)
    assert episode.status is EpisodeStatus.AGENT_ERROR
    assert "does not render tools" in episode.error
    # a prompt and max_new_tokens that exceed the model's 2048 tokens
    _, (episode,) = roll_out(scripted([]), arithmetic, max_new_tokens=4096)
    assert episode.status is EpisodeStatus.AGENT_CONTEXT_LIMIT


def test_a_failing_reward_is_a_task_error(scripted) -> None:
    task = VerifiersTask("tests.tasks.adapters.verifiers.judged_env", {"failing": True},
                         num_validation=1)
    try:
        _, (episode,) = roll_out(scripted(["0"]), task)
    finally:
        task.close()
    assert episode.status is EpisodeStatus.TASK_ERROR
    assert "the reward function has a bug" in episode.error


def test_finalize_judges_the_whole_group(scripted) -> None:
    task = VerifiersTask("tests.tasks.adapters.verifiers.judged_env", num_validation=1,
                         success_threshold=0.5)
    try:
        _, episodes = roll_out(scripted(["0", "000", "no"]), task, group=3)
    finally:
        task.close()
    # correct (weight 1) from each trace, then longest (weight 0.5) over the group of 3
    assert [episode.reward for episode in episodes] == [1.0, 0.5, 0.0]
    assert [episode.metrics["longest"] for episode in episodes] == [0.0, 1.0, 0.0]
    assert all(episode.metrics["group_size"] == 3.0 for episode in episodes)
    # "000" was wrong (0.0) until the group's bonus reached the threshold: correct now
    assert [episode.outcome for episode in episodes] == [
        Outcome.CORRECT, Outcome.CORRECT, Outcome.INCORRECT]


def test_a_reward_that_blocks_the_loop_ends_its_episode_as_an_environment_error(
        scripted) -> None:
    # the reward blocks for BLOCK_S: the rollout's own deadline cannot fire meanwhile
    task = VerifiersTask("tests.tasks.adapters.verifiers.judged_env", {"blocking": True},
                         num_validation=1, rollout_timeout_s=10.0)
    started = time.monotonic()
    try:
        _, (episode,) = roll_out(scripted(["0"]), task)
    finally:
        task.close()  # bounded too, though the loop is still blocked
    assert episode.status is EpisodeStatus.TASK_ERROR
    assert "blocked the event loop" in episode.error
    assert time.monotonic() - started < BLOCK_S - 10


def test_the_endpoint_key_goes_to_the_rollout_client_alone(scripted, calculator) -> None:
    before = dict(os.environ)
    agent, (episode,) = roll_out(scripted([CALL, "It is 156."], TOOL_TEMPLATE), calculator)
    assert episode.status is EpisodeStatus.COMPLETED and episode.reward == 1.0
    assert agent.endpoint.secret not in os.environ.values()
    assert dict(os.environ) == before  # nothing for tool servers started later to inherit


def test_the_agent_needs_a_function_or_self_driven_episodes(scripted) -> None:
    task = MathProblemsTask(splits=Splits(num_train=2, num_validation=1))
    with pytest.raises(TypeError, match="give the agent an agent_function"):
        roll_out(scripted([]), task)
