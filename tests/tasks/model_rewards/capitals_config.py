"""The config of a SingleTurnTask of capitals judged by a `Judge` that the judge tests run
through src/run_experiment.py: the judge's parameters and the run's language models are
put in."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

CAPITALS = """\
assignment_config:
  output_dir: {output}
  rollout: {{batch_size: {batch_size}, group_size: 2, num_epochs: 1}}
  evaluation: {{at_end: true}}
  task:
    name: judged_capitals
    module: src.tasks.single_turn.SingleTurnTask
    parameters:
      samples:
        train: [{train}]
        validation: [{{question: Peru, answer: Lima}}]
      prompt: "What is the capital of {{question}}?"
      threshold: 1.5
      oracle: tests.tasks.test_single_turn.answer_of
      rubric:
        - {{function: tests.tasks.test_single_turn.exact, weight: 1.0}}
        - function: src.tasks.model_rewards.judge.Judge
          weight: 0.5
          parameters:
            name: helpful
{judge}{language_models}  agent: {{name: oracle_agent}}
"""
# Chad's reply is the one a test's judge answers unreadably
TRAIN = ("{question: France, answer: Paris}", "{question: Japan, answer: Tokyo}",
         "{question: Chad, answer: NDjamena}", "{question: Peru, answer: Lima}")


def capitals_config(output: Path, train: int, batch_size: int, judge: Mapping[str, str],
                    language_models: str = "") -> str:
    """The config's text: the first `train` capitals trained on in batches of
    `batch_size`, the judge's parameters (YAML values by key), and `language_models` (the
    YAML of a `language_model_list`, indented as under `assignment_config`)."""
    return CAPITALS.format(
        output=output, batch_size=batch_size, train=", ".join(TRAIN[:train]),
        judge="".join(f"            {key}: {value}\n" for key, value in judge.items()),
        language_models=language_models)
