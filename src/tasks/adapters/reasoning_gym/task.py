"""reasoning-gym's procedural datasets as a task, scored by each dataset's own scorer.

`ReasoningGymTask` draws the samples of each split from reasoning-gym's generators (one
dataset, or a weighted mix through reasoning-gym's own composite dataset), each split
with its own seed so that train, validation and selection are separate draws, and a
resumed run asks the same problems. The prompt is the dataset's question and an
instruction on where to put the final answer; the answer is pulled out of the reply (the
last `\\boxed{}`, or the last `<answer>` tag, reasoning-gym's own format; stripped of the
whitespace around it, as a reader takes it: src/tasks/answers.py) and scored by that
dataset's `score_answer`, never re-implemented here. The scorer runs bounded in time
(`scorer_timeout_s`), in the scoring process of the rubric (src/tasks/rubric.py): a
reply that keeps it computing (countdown's sympy on `9**9**9**9`) scores 0, with the
metric `scorer_timeout`. A reply counts as correct when the score is 1. Each dataset is
a category of the per-category tables; the dataset's answer is the oracle's reply.

The held-out splits never ask a question drawn for training: validation skips any
question of the train split, selection any of train or validation (by question text),
drawing reasoning-gym's problems on until each holds as many as asked.

A curriculum: with `curriculum_levels`, the train split is cut into as many consecutive
blocks as levels, block k drawn at reasoning-gym's curriculum level `curriculum_levels[k]`
(every attribute of the dataset's curriculum at that level, the config's other parameters
kept), and the held-out splits at the last level; with `sample_order: default` (in
order) a run climbs the levels one block after the other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from src.configuration.components import COMPONENTS
from src.sandboxes.bounded_call import SCORER_TIMEOUT_S
from src.tasks.answers import MAX_ANSWER_CHARS, AnswerFormat, final_answer
from src.tasks.optional_packages import import_optional
from src.tasks.rubric import Rubric
from src.tasks.single_turn import SingleTurnTask
from src.tasks.splits import SplitsWithSelection
from src.tasks.task import TaskSettingError, derived_seed, unknown_name

reasoning_gym = import_optional("reasoning_gym", "reasoning_gym")

INSTRUCTIONS: dict[str, str] = {
    "boxed": "Put your final answer in \\boxed{}.",
    "answer_tag": "Put your final answer between <answer> and </answer>.",
}


@COMPONENTS.register("reasoning_gym")
class ReasoningGymTask(SingleTurnTask):
    """One reasoning-gym problem per episode, one reply, scored by the dataset's own
    `score_answer`. Metrics: `score` (the dataset's score of the extracted answer),
    `answered` (an answer was found in the reply: the format rate) and `scorer_timeout`
    (the dataset's scorer ran past its bound on the reply, which then scores 0). The reward
    is the score, plus `format_weight` for an answered reply; correct means a score of 1."""

    def __init__(
        self,
        # a dataset name (`chain_sum`), or a mix: name -> weight
        dataset: str | dict[str, float],
        # the dataset's own parameters (a mix: name -> that dataset's parameters)
        config: dict[str, Any] | None = None,
        # the held-out splits skip any question drawn for the train split (and selection
        # any drawn for validation), drawing on until they hold as many as asked
        splits: SplitsWithSelection = SplitsWithSelection(),
        answer_format: AnswerFormat = "boxed",
        # after the question; None: the answer format's instruction
        instruction: str | None = None,
        preamble: str = "",  # before the question (a worked example, say)
        # reasoning-gym curriculum levels of the train split's blocks (see the module)
        curriculum_levels: list[int] | None = None,
        # added to the reward for a reply whose answer could be extracted (0: the reward
        # is the dataset's score alone)
        format_weight: float = 0.0,
        # seconds the dataset's scorer may take on one answer; past it the answer scores 0
        scorer_timeout_s: float = SCORER_TIMEOUT_S,
    ) -> None:
        self.check_parameters({"dataset": dataset, "config": config})
        weights = {dataset: 1.0} if isinstance(dataset, str) else dict(dataset)
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
        draws: dict[str, list[_Draw]] = {}  # split -> the draw of each block
        rows: dict[str, list[dict[str, Any]]] = {}
        asked: set[str] = set()  # the questions of the splits drawn so far
        for split, count in splits.counts.items():
            if count <= 0:
                continue
            levels = (curriculum_levels or [None]) if split == "train" else (
                [curriculum_levels[-1]] if curriculum_levels else [None])
            blocks = _block_sizes(count, len(levels))
            draws[split] = []
            rows[split] = []
            for block, (level, size) in enumerate(zip(levels, blocks, strict=True)):
                seed_of_block = derived_seed("reasoning_gym", splits.seed, split, block)
                draw, indices = (
                    _Draw(weights, configs, level, size, seed_of_block), range(size)
                ) if split == "train" else _draw_skipping(
                    weights, configs, level, size, seed_of_block, asked, split)
                draws[split].append(draw)
                rows[split].extend(_row(draw.dataset[index], weights, (split, block, index))
                                   for index in indices)
            asked |= {row["question"] for row in rows[split]}
        self.scorer = DatasetScore(draws, answer_format)
        # a score above 0 needs an extracted answer, so the sum reaches 1 + format_weight
        # exactly when the dataset's score is 1: correct means the dataset's full marks
        super().__init__(rows, Rubric([self.scorer, Answered(answer_format)],
                                      weights=[1.0, format_weight], timeout_s=scorer_timeout_s),
                         prompt="{question}", oracle=self._oracle,
                         threshold=1.0 + format_weight)
        self.instruction = instruction if instruction is not None else INSTRUCTIONS[answer_format]
        self.preamble = preamble

    @classmethod
    def check_parameters(cls, parameters: Mapping[str, Any]) -> None:
        """The datasets named exist, and each config key is a field of its dataset's config
        (the seed and size excepted: the task sets them)."""
        dataset = parameters.get("dataset")
        config = parameters.get("config") or {}
        known = sorted(reasoning_gym.factory.DATASETS)
        if isinstance(dataset, str):
            names, single = {dataset: ("dataset",)}, True
        elif isinstance(dataset, Mapping) and dataset:
            names, single = {name: ("dataset", name) for name in dataset}, False
        else:
            raise TaskSettingError(("dataset",), "name a reasoning-gym dataset, or a mix: "
                                   "name -> weight")
        for name, key in names.items():
            if name not in reasoning_gym.factory.DATASETS:
                raise TaskSettingError(key, unknown_name("reasoning-gym dataset", name, known))
        if not isinstance(config, Mapping):
            raise TaskSettingError(("config",), "the dataset's parameters: a mapping")
        if single:
            by_dataset = {next(iter(names)): (("config",), config)}
        else:
            for name in config:
                if name not in names:
                    raise TaskSettingError(("config", name), f"'{name}' is not a dataset of the "
                                           f"mix {sorted(names)} (a mix's config maps each "
                                           "dataset to its own parameters)")
            by_dataset = {name: (("config", name), config[name] or {}) for name in config}
        for name, (key, parameters_of) in by_dataset.items():
            fields = [field.name for field in dataclasses.fields(
                reasoning_gym.factory.DATASETS[name][1])]
            for parameter in parameters_of:
                if parameter in ("seed", "size"):
                    raise TaskSettingError((*key, parameter), f"'{parameter}' is set by the "
                                           "task (seed, num_train, num_validation, "
                                           "num_selection)")
                if parameter not in fields:
                    raise TaskSettingError((*key, parameter), unknown_name(
                        f"parameter of reasoning-gym's '{name}'", str(parameter),
                        [field for field in fields if field not in ("seed", "size")]))

    def prompt(self, sample: Mapping[str, Any]) -> str:
        return f"{self.preamble}{sample['question']}\n{self.instruction}"

    def extract(self, reply: str) -> str | None:
        """The final answer of a reply in the task's format, or None."""
        return final_answer(reply, self.answer_format)

    def _oracle(self, sample: Mapping[str, Any]) -> str:
        if self.answer_format == "boxed":
            return f"The answer is \\boxed{{{sample['answer']}}}."
        return f"<answer>{sample['answer']}</answer>"


# ---- the rubric: the dataset's scorer on the extracted answer, in the scoring process --
class _Draw:
    """The problems of one block of a split: reasoning-gym's dataset of `size` problems
    drawn with `seed`, at a curriculum `level` where one is given. It crosses to the
    scoring process as these parameters, and draws the same dataset again there."""

    def __init__(self, weights: Mapping[str, float], configs: Mapping[str, dict[str, Any]],
                 level: int | None, size: int, seed: int) -> None:
        self.recipe = (dict(weights), {name: dict(value) for name, value in configs.items()},
                       level, size, seed)
        self.dataset = _dataset(*self.recipe)

    def __getstate__(self) -> tuple[Any, ...]:
        return self.recipe

    def __setstate__(self, recipe: tuple[Any, ...]) -> None:
        self.recipe = recipe
        self.dataset = _dataset(*recipe)


class DatasetScore:
    """The rubric's `score`: the dataset's own `score_answer` on the reply's final answer
    (0 where there is none, or it is longer than MAX_ANSWER_CHARS)."""

    def __init__(self, draws: Mapping[str, list[_Draw]], answer_format: AnswerFormat) -> None:
        self.draws = dict(draws)
        self.answer_format = answer_format
        self.__name__ = "score"

    def __call__(self, reply: str, sample: Mapping[str, Any]) -> float:
        answer = final_answer(reply, self.answer_format)
        if answer is None or len(answer) > MAX_ANSWER_CHARS:
            return 0.0
        split, block, index = sample["source"]
        dataset = self.draws[split][block].dataset
        return float(dataset.score_answer(answer, dataset[index]))


class Answered:
    """The rubric's `answered`: 1 where the reply holds an answer in the format."""

    def __init__(self, answer_format: AnswerFormat) -> None:
        self.answer_format = answer_format
        self.__name__ = "answered"

    def __call__(self, reply: str) -> float:
        answer = final_answer(reply, self.answer_format)
        return float(answer is not None and len(answer) <= MAX_ANSWER_CHARS)


def _configs_by_dataset(weights: Mapping[str, float], config: Mapping[str, Any],
                        single: bool) -> dict[str, dict[str, Any]]:
    """Each dataset's parameters (names checked by `check_parameters`)."""
    if single:
        configs = {next(iter(weights)): dict(config)}
    else:
        configs = {name: dict(config.get(name) or {}) for name in weights}
    for name, parameters in configs.items():
        # the dataset's own check of its values, before any sample is drawn
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


def _draw_skipping(weights: Mapping[str, float], configs: Mapping[str, dict[str, Any]],
                   level: int | None, size: int, seed: int, asked: set[str],
                   split: str) -> tuple[_Draw, list[int]]:
    """A held-out block of `size` problems none of whose questions is in `asked`: the
    dataset's problems in order, skipping those, drawn further where needed (the same
    problems as a plain draw where none is skipped). ValueError where the dataset has too
    few other questions."""
    limit = 4 * size + 256  # problems drawn at most before giving up
    draw, indices, index = _Draw(weights, configs, level, size, seed), [], 0
    while len(indices) < size and index < limit:
        if index >= draw.recipe[3]:  # reasoning-gym's own problems past this size
            draw = _Draw(weights, configs, level, min(2 * draw.recipe[3], limit), seed)
        if str(draw.dataset[index]["question"]) not in asked:
            indices.append(index)
        index += 1
    if len(indices) < size:
        raise ValueError(f"{split}: only {len(indices)} of {index} problems drawn were not "
                         f"in the train split (or validation), {size} asked: the dataset has "
                         "too few distinct questions; ask fewer or widen its config")
    return draw, indices


def _block_sizes(count: int, blocks: int) -> list[int]:
    base, extra = divmod(count, blocks)
    return [base + (block < extra) for block in range(blocks)]
