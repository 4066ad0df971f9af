"""Tool episodes in the real sandbox: calls run in the episode's persistent session and
their output is the next observation; malformed calls, failing code and a dead sandbox
are outcomes with figures, never crashes; every sandbox is closed on every path."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import psutil
import pytest

from src.agents.agent import Agent, AgentReply
from src.language_models.tool_calls import hermes_text
from src.records.episode import Episode, EpisodeStatus, Outcome, ToolEnvironment
from src.run.rollout import roll_out_lockstep
from src.tasks.instance.math_python_tool.task import MathPythonToolTask
from src.tasks.splits import Splits
from src.tasks.task import TaskSettingError
from src.tasks.tool_episode import ToolEpisode
from tests.sandboxes.processes import note_present_processes, sandbox_processes

Reply = str | Callable[[Episode], str]


def python(code: str) -> str:
    return hermes_text(None, [("python", {"code": code})])


class ScriptedAgent(Agent):
    """Replies with the texts a test writes, in order (a callable is called with the
    episode first: it may act on the environment, as a killed sandbox needs)."""

    def __init__(self, replies: Sequence[Reply]) -> None:
        self.replies = list(replies)

    def _act(self, episodes: Sequence[Episode]) -> list[AgentReply]:
        replies = []
        for episode in episodes:
            reply = self.replies.pop(0)
            replies.append(AgentReply(reply(episode) if callable(reply) else reply))
        return replies


@pytest.fixture
def task() -> Iterator[MathPythonToolTask]:
    note_present_processes()
    family = MathPythonToolTask(splits=Splits(num_train=4, num_validation=2), max_round=4,
                                tools=["python", "bash"], max_tool_output_chars=200,
                                max_calls_per_reply=3,
                                sandbox={"limits": {"wall_timeout_s": 2, "cpu_time_s": 2}})
    yield family
    family.close()
    psutil.wait_procs(sandbox_processes(), timeout=5)
    assert sandbox_processes() == []


def run(task: MathPythonToolTask, replies: Sequence[Reply]) -> Episode:
    [episode] = roll_out_lockstep([(task.get_sample("train-000000"), 0)], task,
                                  ScriptedAgent(replies), 0, [0])
    # the rollout closed the episode's environment: its sandbox is gone already
    psutil.wait_procs(sandbox_processes(), timeout=5)
    assert sandbox_processes() == []
    return episode


def answer(task: MathPythonToolTask) -> str:
    return f"\\boxed{{{task.get_sample('train-000000').data['answer']}}}"


def test_python_state_is_carried_from_call_to_call(task: MathPythonToolTask) -> None:
    episode = run(task, [python("x = 3"), python("print(x)"), answer(task)])
    assert episode.status is EpisodeStatus.COMPLETED and episode.outcome is Outcome.CORRECT
    assert episode.reward == 1.0 and episode.turns == 3
    observations = [message.content for message in episode.chat[2::2]]
    assert observations == ["<tool_response>\n[no output]\n</tool_response>",
                            "<tool_response>\n3\n</tool_response>"]
    metrics = episode.metrics
    assert (metrics["tool_calls"], metrics["used_tool"], metrics["tool_errors"]) == (2, 1, 0)
    assert metrics["sandbox/ok"] == 2 and metrics["malformed_tool_calls"] == 0


def test_the_environment_offers_its_tools_and_each_result_with_its_call(
        task: MathPythonToolTask) -> None:
    environment = task.new_episode()
    try:
        environment.reset(options={"sample_id": "train-000001"})
        assert isinstance(environment, ToolEnvironment)
        assert [tool["function"]["name"] for tool in environment.tool_schemas()] == [
            "python", "bash"]
        assert environment.tool_results() is None
        reply = hermes_text("Both:", [("bash", {"command": "echo $((6 * 7))"}),
                                      ("python", {"code": "print('a' * 500)"})])
        observation, *_ = environment.step(reply)
        first, second = environment.tool_results()
        assert (first.call_id, first.name, first.content) == ("call_1-0", "bash", "42")
        assert second.name == "python" and "characters cut" in second.content
        assert len(second.content) < 300  # cut to max_tool_output_chars, with its note
        assert observation == (f"<tool_response>\n42\n</tool_response>\n"
                               f"<tool_response>\n{second.content}\n</tool_response>")
    finally:
        environment.close()


def test_a_malformed_call_is_answered_with_the_problem_and_counted(
        task: MathPythonToolTask) -> None:
    episode = run(task, ['<tool_call>{"name": "python", "arguments": {"code": </tool_call>',
                         answer(task)])
    assert episode.status is EpisodeStatus.COMPLETED and episode.outcome is Outcome.CORRECT
    error = episode.chat[2].content
    assert error.startswith("[tool call error] tool call 1 of 1: not valid JSON")
    assert "<tool_call>" in error  # the format, shown again
    assert episode.metrics["malformed_tool_calls"] == 1
    assert episode.metrics["tool_calls"] == 0 and episode.metrics["used_tool"] == 0


def test_failing_code_wrong_arguments_and_unknown_tools_are_tool_errors(
        task: MathPythonToolTask) -> None:
    calls = hermes_text(None, [("python", {"code": "1 / 0"}), ("python", {"cmd": "1"}),
                               ("ruby", {"code": "1"})])
    episode = run(task, [calls, python("import time; time.sleep(100)"), "no idea"])
    assert episode.status is EpisodeStatus.COMPLETED and episode.outcome is Outcome.INCORRECT
    results = episode.chat[2].content
    assert "ZeroDivisionError" in results and "[status: error_exit] exit code 1" in results
    assert "[invalid arguments] the python tool takes exactly one string argument 'code'" \
        in results
    assert "[unknown tool] 'ruby'; the tools are python, bash" in results
    assert "[not run]" not in results and "[status: timeout]" in episode.chat[4].content
    metrics = episode.metrics
    assert (metrics["tool_calls"], metrics["tool_errors"]) == (4, 4)
    assert metrics["sandbox/error_exit"] == 1 and metrics["sandbox/timeout"] == 1
    assert episode.reward == 0.0  # no boxed number


def test_calls_past_the_reply_limit_are_not_run(task: MathPythonToolTask) -> None:
    calls = hermes_text(None, [("python", {"code": f"print({n})"}) for n in range(5)])
    episode = run(task, [calls, answer(task)])
    assert episode.chat[2].content.count("[not run] at most 3 tool calls run per reply") == 2
    assert episode.metrics["sandbox/ok"] == 3 and episode.metrics["tool_errors"] == 2


def kill_sandbox_then_call(episode: Episode) -> str:
    environment = episode.environment
    assert isinstance(environment, ToolEpisode)
    bubblewrap = psutil.Process(environment._sandbox.process.pid)
    for process in bubblewrap.children(recursive=True):
        # the supervisor and the session: the sandbox is dead (one may have gone with its
        # parent, killed just before)
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    return python("print(x)")


def test_a_sandbox_that_dies_ends_the_episode_scored_with_its_status(
        task: MathPythonToolTask) -> None:
    episode = run(task, [python("x = 3"), kill_sandbox_then_call])
    assert episode.status is EpisodeStatus.COMPLETED  # scored, not an environment failure
    assert episode.outcome is Outcome.INCORRECT and episode.reward == 0.0
    assert episode.info["sandbox_status"] == "sandbox_died" and episode.info["sandbox_detail"]
    assert episode.metrics["sandbox_died"] == 1 and episode.metrics["sandbox/sandbox_died"] == 1
    assert episode.turns == 2


def test_the_round_limit_ends_an_episode_that_only_calls_tools(
        task: MathPythonToolTask) -> None:
    episode = run(task, [python("print(1)")] * 4)
    assert episode.status is EpisodeStatus.TASK_LIMIT_REACHED and episode.reward == 0.0
    assert episode.metrics["tool_calls"] == 4


def test_closing_the_family_closes_the_sandboxes_of_episodes_left_open(
        task: MathPythonToolTask) -> None:
    environments = [task.new_episode() for _ in range(2)]
    for environment in environments:
        environment.reset(options={"sample_id": "train-000000"})
    assert len(sandbox_processes()) >= 2
    task.close()  # as the run's end does, while the environments are still held
    psutil.wait_procs(sandbox_processes(), timeout=5)
    assert sandbox_processes() == []
    assert environments[0].step(python("print(1)"))[2]  # a closed sandbox: the episode ends


def test_a_host_that_cannot_make_the_sandbox_is_a_setting_error() -> None:
    MathPythonToolTask.check_parameters({})  # this host can
    with pytest.raises(TaskSettingError) as refused:
        MathPythonToolTask.check_parameters({"sandbox": {"bwrap_path": "/no/such/bwrap"}})
    assert refused.value.key == ("sandbox",) and "bwrap_path" in refused.value.message
