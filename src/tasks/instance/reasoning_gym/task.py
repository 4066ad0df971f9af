"""reasoning-gym's procedural datasets as a task, scored by each dataset's own scorer.

`ReasoningGymTask` draws the samples of each split from reasoning-gym's generators (one
dataset, or a weighted mix through reasoning-gym's own composite dataset), each split
with its own seed so that train, validation and selection are separate draws, and a
resumed run asks the same problems. The prompt is the dataset's question and an
instruction on where to put the final answer; the answer is pulled out of the reply (the
last `\\boxed{}`, or the last `<answer>` tag, reasoning-gym's own format) and scored by
that dataset's `score_answer`, never re-implemented here. A reply counts as correct when
the score is 1. Each dataset is a category of the per-category tables; the dataset's
answer is the oracle's reply.

A curriculum: with `curriculum_levels`, the train split is cut into as many consecutive
blocks as levels, block k drawn at reasoning-gym's curriculum level `curriculum_levels[k]`
(every attribute of the dataset's curriculum at that level, the config's other parameters
kept), and the held-out splits at the last level; with `sample_order: default` (in
order) a run climbs the levels one block after the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from src.tasks.answers import (
    MAX_ANSWER_CHARS,
    answer_part,
    last_answer_tag,
    last_boxed_content,
)
from src.tasks.instance.optional_packages import import_optional
from src.tasks.rubric import Rubric
from src.tasks.single_turn import SingleTurnTask
from src.tasks.task import derived_seed

reasoning_gym = import_optional("reasoning_gym", "reasoning_gym")

AnswerFormat = Literal["boxed", "answer_tag"]
INSTRUCTIONS: dict[str, str] = {
    "boxed": "Put your final answer in \\boxed{}.",
    "answer_tag": "Put your final answer between <answer> and </answer>.",
}


class ReasoningGymTask(SingleTurnTask):
    """One reasoning-gym problem per episode, one reply, scored by the dataset's own
    `score_answer`. Metrics: `score` (the dataset's score of the extracted answer) and
    `answered` (an answer was found in the reply: the format rate). The reward is the
    score, plus `format_weight` for an answered reply; correct means a score of 1."""

    def __init__(
        self,
        # a dataset name (`chain_sum`), or a mix: name -> weight
        dataset: str | dict[str, float],
        # the dataset's own parameters (a mix: name -> that dataset's parameters)
        config: dict[str, Any] | None = None,
        num_train: int = 256,
        num_validation: int = 64,
        num_selection: int = 0,
        seed: int = 0,
        answer_format: AnswerFormat = "boxed",
        # after the question; None: the answer format's instruction
        instruction: str | None = None,
        preamble: str = "",  # before the question (a worked example, say)
        # reasoning-gym curriculum levels of the train split's blocks (see the module)
        curriculum_levels: list[int] | None = None,
        # added to the reward for a reply whose answer could be extracted (0: the reward
        # is the dataset's score alone)
        format_weight: float = 0.0,
    ) -> None:
        weights = {dataset: 1.0} if isinstance(dataset, str) else dict(dataset)
        if not weights:
            raise ValueError("dataset: name at least one reasoning-gym dataset")
        unknown = sorted(set(weights) - set(reasoning_gym.factory.DATASETS))
        if unknown:
            raise ValueError(f"dataset: unknown reasoning-gym datasets {unknown} (there are "
                             f"{len(reasoning_gym.factory.DATASETS)}, e.g. "
                             f"{', '.join(sorted(reasoning_gym.factory.DATASETS)[:5])})")
        if any(not weight > 0 for weight in weights.values()):
            raise ValueError(f"dataset: every weight of a mix must be positive, got {weights}")
        configs = _configs_by_dataset(weights, config or {}, single=isinstance(dataset, str))
        if curriculum_levels is not None:
            if not curriculum_levels or any(level < 0 for level in curriculum_levels):
                raise ValueError("curriculum_levels: give one level (>= 0) per block")
            without = [name for name in weights if not reasoning_gym.factory.has_curriculum(name)]
            if without:
                raise ValueError(f"curriculum_levels: reasoning-gym has no curriculum for "
                                 f"{without}")
        self.weights = weights
        self.answer_format = answer_format
        self.curriculum_levels = curriculum_levels
        counts = {"train": num_train, "validation": num_validation, "selection": num_selection}
        self._datasets: dict[str, list[Any]] = {}  # split -> a dataset per block
        rows: dict[str, list[dict[str, Any]]] = {}
        for split, count in counts.items():
            if count <= 0:
                continue
            levels = (curriculum_levels or [None]) if split == "train" else (
                [curriculum_levels[-1]] if curriculum_levels else [None])
            blocks = _block_sizes(count, len(levels))
            self._datasets[split] = []
            rows[split] = []
            for block, (level, size) in enumerate(zip(levels, blocks, strict=True)):
                generated = _dataset(weights, configs, level, size,
                                     derived_seed("reasoning_gym", seed, split, block))
                self._datasets[split].append(generated)
                rows[split].extend(_row(generated[index], weights, (split, block, index))
                                   for index in range(size))
        # a score above 0 needs an extracted answer, so the sum reaches 1 + format_weight
        # exactly when the dataset's score is 1: correct means the dataset's full marks
        super().__init__(rows, Rubric([self.score, self.answered], weights=[1.0, format_weight]),
                         prompt="{question}", oracle=self._oracle,
                         threshold=1.0 + format_weight)
        self.instruction = instruction if instruction is not None else INSTRUCTIONS[answer_format]
        self.preamble = preamble

    def prompt(self, sample: Mapping[str, Any]) -> str:
        return f"{self.preamble}{sample['question']}\n{self.instruction}"

    # ---- the rubric: the dataset's scorer on the extracted answer --------------------
    def extract(self, reply: str) -> str | None:
        """The final answer of a reply in the task's format, or None."""
        text = answer_part(reply)
        if self.answer_format == "boxed":
            return last_boxed_content(text)
        return last_answer_tag(text)

    def score(self, reply: str, sample: Mapping[str, Any]) -> float:
        """The dataset's own score of the reply's answer (0 where there is none)."""
        answer = self.extract(reply)
        if answer is None or len(answer) > MAX_ANSWER_CHARS:
            return 0.0
        split, block, index = sample["source"]
        dataset = self._datasets[split][block]
        return float(dataset.score_answer(answer, dataset[index]))

    def answered(self, reply: str) -> float:
        answer = self.extract(reply)
        return float(answer is not None and len(answer) <= MAX_ANSWER_CHARS)

    def _oracle(self, sample: Mapping[str, Any]) -> str:
        if self.answer_format == "boxed":
            return f"The answer is \\boxed{{{sample['answer']}}}."
        return f"<answer>{sample['answer']}</answer>"


def _configs_by_dataset(weights: Mapping[str, float], config: Mapping[str, Any],
                        single: bool) -> dict[str, dict[str, Any]]:
    if single:
        configs = {next(iter(weights)): dict(config)}
    else:
        unknown = sorted(set(config) - set(weights))
        if unknown:
            raise ValueError(f"config: {unknown} are not datasets of the mix {sorted(weights)} "
                             "(a mix's config maps each dataset to its own parameters)")
        configs = {name: dict(config.get(name) or {}) for name in weights}
    for name, parameters in configs.items():
        reserved = sorted({"seed", "size"} & set(parameters))
        if reserved:
            raise ValueError(f"config of '{name}': {reserved} are set by the task (seed, "
                             "num_train, num_validation, num_selection)")
        # the dataset's own check of its parameters, before any sample is drawn
        reasoning_gym.create_dataset(name, **parameters, seed=0, size=1)
    return configs


def _dataset(weights: Mapping[str, float], configs: Mapping[str, dict[str, Any]],
             level: int | None, size: int, seed: int) -> Any:
    """A reasoning-gym dataset of `size` problems drawn with `seed` (a mix through
    reasoning-gym's composite dataset), at a curriculum `level` where one is given."""
    def parameters(name: str) -> dict[str, Any]:
        if level is None:
            return dict(configs[name])
        curriculum = reasoning_gym.factory.create_curriculum(name)
        curriculum.set_global_level(level)
        generated = curriculum.generate_configuration(dict(configs[name]))
        return {key: value for key, value in vars(generated).items()
                if key not in ("seed", "size")}

    if len(weights) == 1:
        name = next(iter(weights))
        return reasoning_gym.create_dataset(name, **parameters(name), seed=seed, size=size)
    specs = [reasoning_gym.composite.DatasetSpec(name=name, weight=weight,
                                                 config=parameters(name))
             for name, weight in weights.items()]
    return reasoning_gym.create_dataset("composite", datasets=specs, seed=seed, size=size)


def _row(entry: Mapping[str, Any], weights: Mapping[str, float],
         source: tuple[str, int, int]) -> dict[str, Any]:
    """A sample's fields; `source` (split, block, index) finds the generated entry that
    the dataset's scorer reads."""
    metadata = entry.get("metadata") or {}
    category = (metadata.get("source_dataset") if len(weights) > 1 else None) or next(
        iter(weights))
    return {"question": str(entry["question"]), "answer": str(entry["answer"]),
            "category": str(category), "source": source}


def _block_sizes(count: int, blocks: int) -> list[int]:
    base, extra = divmod(count, blocks)
    return [base + (block < extra) for block in range(blocks)]
