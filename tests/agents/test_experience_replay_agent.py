"""In-context experience replay: earlier training successes rendered before a new episode,
never collected from evaluation, saved and restored with the run."""

from __future__ import annotations

import json
from pathlib import Path

from src.agents.instance.experience_replay_agent import ExperienceReplayAgent
from src.records.episode import Outcome
from src.run.rollout import roll_out_lockstep
from src.run_experiment import main
from src.tasks.instance.math_problems.task import MathProblemsTask
from src.tasks.splits import Splits
from tests.agents.scripted_model import ScriptedLanguageModel


def replies(model: ScriptedLanguageModel, texts: list[str]) -> list[tuple[list[int], str]]:
    end_of_turn = model.tokenizer.convert_tokens_to_ids("<|im_end|>")
    return [(model.tokenizer(text, add_special_tokens=False)["input_ids"] + [end_of_turn],
             "stop") for text in texts]


def test_successes_are_replayed_in_later_episodes_and_survive_a_restore_with_scripted_model(
        tiny_model_path: Path, tmp_path: Path) -> None:
    task = MathProblemsTask(max_round=1, splits=Splits(num_train=4, num_validation=2))
    first, second, third = (task.get_sample(f"train-{index:06d}") for index in range(3))
    check = task.get_sample("validation-000000")
    right = f"The answer is \\boxed{{{first.data['answer']}}}."
    probe = ScriptedLanguageModel(tiny_model_path, [])
    model = ScriptedLanguageModel(tiny_model_path, replies(probe, [
        right, "no idea", "no idea", f"\\boxed{{{check.data['answer']}}}", "no idea"]))
    agent = ExperienceReplayAgent(model, system_prompt="Box it.", num_examples=2,
                                  same_category=False)

    batch = roll_out_lockstep([(first, 0), (second, 0)], task, agent, 0, [0, 1])
    assert [episode.outcome for episode in batch] == [Outcome.CORRECT, Outcome.INCORRECT]
    assert all(episode.metrics["replayed_examples"] == 0.0 for episode in batch)

    [later] = roll_out_lockstep([(third, 0)], task, agent, 1, [2])
    assert later.metrics["replayed_examples"] == 1.0  # the one success so far
    expected = probe.tokenizer.apply_chat_template(
        [{"role": "system", "content": "Box it."},
         {"role": "user", "content": batch[0].chat[0].content},
         {"role": "assistant", "content": right},
         {"role": "user", "content": later.chat[0].content}],
        tokenize=False, add_generation_prompt=True)
    assert probe.tokenizer.decode(model.prompts[-1]) == expected
    assert later.metrics["template_inconsistent"] == 0.0

    with agent.evaluating(0.0):  # a validation success is not remembered
        [evaluated] = roll_out_lockstep([(check, 0)], task, agent, 2, [3])
    assert evaluated.outcome is Outcome.CORRECT
    agent.save_state(tmp_path)
    memory = json.loads((tmp_path / "replay_memory.json").read_text())
    assert [row["chat"][1][1] for row in memory] == [right]

    restored = ExperienceReplayAgent(model, system_prompt="Box it.", same_category=False)
    restored.restore_state(tmp_path)
    assert restored.memory == agent.memory


CONFIG = """\
assignment_config:
  output_dir: {output}
  random_seed: 1
  rollout: {{batch_size: 2, group_size: 1, max_batches: 2}}
  task: {{name: math_problems, parameters: {{num_train: 4, num_validation: 2, max_round: 1}}}}
  language_model_list:
    - name: policy
      module: src.language_models.instance.huggingface_lora_language_model
      parameters: {{model_name_or_path: {model}}}
  agent:
    name: experience_replay_agent
    parameters: {{language_model: policy, max_new_tokens: 3}}
"""


def test_the_loop_commits_the_agents_memory_with_each_batch(tiny_model_path: Path,
                                                            tmp_path: Path) -> None:
    config = tmp_path / "replay.yaml"
    config.write_text(CONFIG.format(output=tmp_path / "out", model=tiny_model_path))
    assert main(["--config_path", str(config), "--no_progress"]) == 0
    state = tmp_path / "out" / "agent_state"
    assert sorted(path.name for path in state.iterdir()) == ["checkpoint-000001",
                                                            "checkpoint-000002"]
    assert json.loads((state / "checkpoint-000002" / "replay_memory.json").read_text()) == []
