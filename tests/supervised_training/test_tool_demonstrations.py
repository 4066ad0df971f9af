"""A tool episode's oracle chat is trained on exactly as the LoRA agent feeds it: the tools
in the system message (the embedded model's prompted protocol) or rendered by the template
(a template with tools, results as `tool` messages), token for token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from src.agents.instance.token_exact_agent import TokenExactAgent
from src.records.episode import Outcome, ToolResult
from src.run.rollout import roll_out_lockstep
from src.supervised_training.config import OracleDemonstrations
from src.supervised_training.demonstrations import Demonstration, from_oracle
from src.supervised_training.run import demonstration_rows
from src.tasks.instance.math_python_tool.task import MathPythonToolTask
from src.tasks.splits import Splits
from tests.agents.scripted_model import ScriptedLanguageModel
from tests.agents.test_token_exact_agent_tools import TOOL_ROLE_TEMPLATE

SYSTEM_PROMPT = "Be exact."


@pytest.fixture(scope="module")
def task() -> Iterator[MathPythonToolTask]:
    family = MathPythonToolTask(splits=Splits(num_train=2, num_validation=2))
    yield family
    family.close()


@pytest.mark.parametrize("template", [None, TOOL_ROLE_TEMPLATE], ids=["prompted", "native"])
def test_an_oracle_tool_chat_is_the_agents_trajectory_token_for_token_with_scripted_model(
        tiny_model_path: Path, task: MathPythonToolTask, template: str | None) -> None:
    [demonstration] = from_oracle(OracleDemonstrations(num_samples=1), task)
    assert [role for role, _ in demonstration.chat] == ["user", "agent", "user", "agent"]
    assert demonstration.tools and set(demonstration.tool_results) == {2}
    # as a resumed run reads it back from its snapshot
    demonstration = Demonstration.model_validate_json(demonstration.model_dump_json())

    # the agent "samples" the oracle's replies (the scripted model: the real tokenizer)
    probe = ScriptedLanguageModel(tiny_model_path, [])
    end_of_turn = probe.tokenizer.convert_tokens_to_ids("<|im_end|>")
    replies = [(probe.tokenizer(text, add_special_tokens=False)["input_ids"] + [end_of_turn],
                "stop") for role, text in demonstration.chat if role == "agent"]
    model = ScriptedLanguageModel(tiny_model_path, replies, chat_template=template)
    agent = TokenExactAgent(model, system_prompt=SYSTEM_PROMPT, max_new_tokens=64)
    [episode] = roll_out_lockstep([(task.get_sample("train-000000"), 0)], task, agent, 0, [0])
    assert episode.outcome is Outcome.CORRECT and episode.info["template_consistent"]
    trajectory = episode.trajectory
    assert trajectory is not None

    rows = demonstration_rows([demonstration], model, SYSTEM_PROMPT)
    [ids] = rows.sequences()
    assert ids == trajectory.token_ids
    assert rows.batch.loss_mask[0, :len(ids)].tolist() == trajectory.loss_mask
    fed = model.tokenizer.decode(ids)
    if template is None:
        assert "You may call these tools" in fed
        assert "<|im_start|>user\n<tool_response>" in fed
    else:
        assert "Functions you may call" in fed and "<|im_start|>tool\n<tool_response>" in fed


@pytest.mark.parametrize(("tools", "index"), [(None, 2), ([{"name": "python"}], 1),
                                              ([{"name": "python"}], 0),
                                              ([{"name": "python"}], 9)])
def test_tool_results_not_on_a_later_user_turn_of_a_tool_demonstration_are_refused(
        tools: list | None, index: int) -> None:
    with pytest.raises(ValueError, match=rf"tool_results\[{index}\]: tool results belong"):
        Demonstration(source="row", chat=[("user", "q"), ("agent", "a"), ("user", "r"),
                                          ("agent", "b")],
                      tools=tools, tool_results={index: [ToolResult("call_0-0", "python", "3")]})
