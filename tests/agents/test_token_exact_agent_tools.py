"""The LoRA agent in a tool episode: tools rendered by a template that renders them
(results as `tool` messages) or described in the system message for one that does not (the
embedded model's: results as user turns), the trajectory token-exact either way."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from src.agents.instance.token_exact_agent import TokenExactAgent
from src.language_models.tool_calls import hermes_text, template_renders_tools
from src.records.episode import Episode, EpisodeStatus, Outcome
from src.run.rollout import roll_out_lockstep
from src.tasks.instance.math_problems.task import MathProblemsTask
from src.tasks.instance.math_python_tool.task import MathPythonToolTask
from src.tasks.splits import Splits
from tests.agents.openai_endpoint.test_tool_calls import TOOL_TEMPLATE
from tests.agents.scripted_model import ScriptedLanguageModel

# the test's tool-rendering template, its tool role a turn of its own: a tool message
# rendered by the template reads differently from a user turn of the same text
TOOL_ROLE_TEMPLATE = TOOL_TEMPLATE.replace("{{ '<|im_start|>user' }}", "{{ '<|im_start|>tool' }}")


def python(code: str) -> str:
    return hermes_text(None, [("python", {"code": code})])


@pytest.fixture(scope="module")
def task() -> Iterator[MathPythonToolTask]:
    family = MathPythonToolTask(splits=Splits(num_train=2, num_validation=2), max_round=4)
    yield family
    family.close()


def run(tiny_model_path: Path, task: MathPythonToolTask, template: str | None,
        replies: list[str]) -> tuple[ScriptedLanguageModel, Episode]:
    probe = ScriptedLanguageModel(tiny_model_path, [])
    end_of_turn = probe.tokenizer.convert_tokens_to_ids("<|im_end|>")
    encoded = [(probe.tokenizer(text, add_special_tokens=False)["input_ids"] + [end_of_turn],
                "stop") for text in replies]
    model = ScriptedLanguageModel(tiny_model_path, encoded, chat_template=template)
    agent = TokenExactAgent(model, system_prompt="Be exact.", max_new_tokens=64)
    [episode] = roll_out_lockstep([(task.get_sample("train-000000"), 0)], task, agent, 0, [0])
    return model, episode


def check_token_exact(model: ScriptedLanguageModel, episode: Episode) -> str:
    """Each prompt extends the one before and its reply; the trajectory is the last prompt
    and its reply; the fed ids decode to the template's rendering. The fed text."""
    trajectory = episode.trajectory
    assert trajectory is not None
    sampled_turns = [trajectory.token_ids[start:end] for start, end in trajectory.turn_spans]
    for prompt, next_prompt, sampled in zip(model.prompts, model.prompts[1:], sampled_turns,
                                            strict=False):
        assert next_prompt[:len(prompt) + len(sampled)] == prompt + sampled
    assert trajectory.token_ids == model.prompts[-1] + sampled_turns[-1]
    assert episode.info["template_consistent"] is True
    assert episode.metrics["template_inconsistent"] == 0.0
    return model.tokenizer.decode(trajectory.token_ids)


def test_a_template_with_tools_gets_them_and_tool_results_as_tool_messages(
        tiny_model_path: Path, task: MathPythonToolTask) -> None:
    answer = task.get_sample("train-000000").data["answer"]
    model, episode = run(tiny_model_path, task, TOOL_ROLE_TEMPLATE,
                         [python("x = 3"), python("print(x)"), f"\\boxed{{{answer}}}"])
    assert template_renders_tools(model.tokenizer)
    assert episode.status is EpisodeStatus.COMPLETED and episode.outcome is Outcome.CORRECT
    assert episode.metrics["tool_calls"] == 2
    fed = check_token_exact(model, episode)
    assert fed.startswith("<|im_start|>system\nBe exact.\n\nFunctions you may call:\n<tools>\n")
    assert '"name": "python"' in fed and "You may call these tools" not in fed
    # the results as the template renders tool messages, not as user turns
    assert "<|im_start|>tool\n<tool_response>\n3\n</tool_response><|im_end|>" in fed
    assert "<|im_start|>user\n<tool_response>" not in fed


def test_a_template_without_tools_gets_the_prompted_protocol(
        tiny_model_path: Path, task: MathPythonToolTask) -> None:
    answer = task.get_sample("train-000000").data["answer"]
    model, episode = run(tiny_model_path, task, None,  # the embedded model's template
                         [python("x = 3"), python("print(x)"), f"\\boxed{{{answer}}}"])
    assert not template_renders_tools(model.tokenizer)
    assert episode.status is EpisodeStatus.COMPLETED and episode.outcome is Outcome.CORRECT
    fed = check_token_exact(model, episode)
    assert fed.startswith("<|im_start|>system\nBe exact.\n\nYou may call these tools:\n<tools>\n"
                          '{"name": "python", ')
    assert "<|im_start|>user\n<tool_response>\n3\n</tool_response><|im_end|>" in fed
    assert "<|im_start|>tool" not in fed


def test_a_malformed_call_is_answered_as_a_user_turn(tiny_model_path: Path,
                                                     task: MathPythonToolTask) -> None:
    model, episode = run(tiny_model_path, task, TOOL_ROLE_TEMPLATE,
                         ['<tool_call>{"name": "python"', "\\boxed{1}"])
    assert episode.status is EpisodeStatus.COMPLETED and episode.outcome is Outcome.INCORRECT
    assert episode.metrics["malformed_tool_calls"] == 1 and episode.reward == pytest.approx(0.1)
    fed = check_token_exact(model, episode)
    assert "<|im_start|>user\n[tool call error] tool call 1 of 1: not valid JSON" in fed


def test_an_episode_without_tools_is_rendered_as_before(tiny_model_path: Path) -> None:
    model = ScriptedLanguageModel(tiny_model_path, [([2], "stop")], TOOL_ROLE_TEMPLATE)
    agent = TokenExactAgent(model, max_new_tokens=8)
    plain = MathProblemsTask(splits=Splits(num_train=2, num_validation=2))
    roll_out_lockstep([(plain.get_sample("train-000000"), 0)], plain, agent, 0, [0])
    assert "Functions you may call" not in model.tokenizer.decode(model.prompts[0])
