"""A reward model's score of a reply as a reward: a Hugging Face sequence-classification
model (`AutoModelForSequenceClassification`) and its tokenizer.

`RewardModel(**settings)` is a rubric's reward function (`RewardModelSettings` lists the
settings). Its input is the task's prompt and the reply as the tokenizer's chat template
renders them (a user message, then the assistant's), or `text`, a format string over
{reply}, {prompt}, {sample_id}, {transcript} (the episode's whole dialogue: a multi-turn
task's) and the sample's fields. The reward is, times `scale`:

- without `label`, the model's one logit, or its sigmoid with `squash`;
- with `label` (a name of the model's `id2label`, or an index), that label's probability
  (the softmax of the logits).

The reward function runs in the calling process (`runs_in_caller`): it is trusted, and its
model too large to load again in the rubric's worker process. Where the model runs is
`placement`:

- `caller`: in the calling process, loaded once per process for each (model, device,
  dtype), on `device` (cpu by default); calls from several threads take turns.
- `ray_actor`: once in a Ray actor beside the rollout pool's engines, with the Ray
  resources of `actor` (reward_model_actor.py: how calls are batched, bounded in time and
  sent again to a fresh actor); the calling process loads only the tokenizer and the
  model's config.

Either way the model runs without gradients; `scores` takes several inputs at once, in
batches of `batch_size`, padded on the right (the padding is never attended to, and the
model reads its last token that is not padding). An input longer than `max_length` tokens
loses its start, so that the reply's end, where the score is read, stays. A rubric
scoring a group's replies together (`many`, src/tasks/rubric.py `score_group`) gives them
to `scores` at once: one forward batch per `batch_size` of them, in their order (in the
actor, one call of the group's alone), so that a run repeats bit for bit.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, PositiveInt, model_validator

from src.language_models.embedded_model import resolve_model_path
from src.tasks.model_rewards.reward_model_actor import ActorScorer, RayActorSettings
from src.tasks.reward_functions import template_fields
from src.tasks.single_turn import format_fields

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# a fast tokenizer refuses to be used from two threads at once ("Already borrowed"): the
# forward passes of this process's reward models take turns
_FORWARD_LOCK = threading.Lock()


class RewardModelSettings(BaseModel):
    """A reward model's settings (the `parameters` of a `RewardTerm` naming
    `RewardModel`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "reward_model"  # the reward function's name: metrics `<name>`, ...
    # a Hugging Face model name, a folder holding the model and tokenizer, or an embedded
    # model (`embedded:smollm2-135m`)
    model: str
    device: str = "cpu"  # in the process where the model runs (`placement`)
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    # None: the model's one logit is the score; a label's name or index: its probability
    label: str | int | None = None
    squash: bool = False  # the sigmoid of the logit (without `label`)
    scale: float = 1.0  # the reward is the score times this
    # the model's input: a format string over {reply}, {prompt}, {sample_id},
    # {transcript} and the sample's fields; None: the prompt and the reply in the
    # tokenizer's chat template
    text: str | None = None
    max_length: PositiveInt = 4096  # tokens of an input; a longer one loses its start
    batch_size: PositiveInt = 8  # inputs per forward pass
    # caller: the model runs in the scoring process; ray_actor: in a Ray actor (`actor`)
    placement: Literal["caller", "ray_actor"] = "caller"
    actor: RayActorSettings = RayActorSettings()  # placement ray_actor's actor

    @model_validator(mode="after")
    def check_score(self) -> RewardModelSettings:
        if not self.name.isidentifier():
            raise ValueError(f"name {self.name!r} is not an identifier (a metric's name)")
        if self.squash and self.label is not None:
            raise ValueError("squash applies to the logit: a label's probability is already "
                             "in [0, 1]")
        if self.text is not None and not {"reply", "transcript"} & format_fields(self.text):
            raise ValueError("text never reads {reply} or {transcript}: the model would "
                             "not see the reply")
        if self.placement == "caller" and "actor" in self.model_fields_set:
            raise ValueError("actor applies to placement: ray_actor; this model is placed "
                             "in the caller")
        if self.placement == "ray_actor":
            on_gpu = self.device.partition(":")[0] == "cuda"
            if on_gpu and self.actor.num_gpus == 0:
                raise ValueError(f"device {self.device} in a Ray actor needs actor.num_gpus "
                                 "above 0: Ray shows no GPU to an actor that asks for none")
            if not on_gpu and self.actor.num_gpus > 0:
                raise ValueError(f"actor.num_gpus {self.actor.num_gpus} reserves a GPU that "
                                 f"the model on device {self.device} never uses")
        return self


@functools.cache
def load_tokenizer(model: str) -> Any:
    """The model's tokenizer, padding on the right and cutting on the left: once per
    process."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(model))
    tokenizer.padding_side, tokenizer.truncation_side = "right", "left"
    if tokenizer.pad_token is None:  # a decoder's tokenizer often has none: its eos pads
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


@functools.cache
def load(model: str, device: str, dtype: str) -> tuple[Any, Any]:
    """The model, in evaluation mode on `device`, and its tokenizer: once per process."""
    from transformers import AutoModelForSequenceClassification

    tokenizer = load_tokenizer(model)
    # `embedded:` names as every model of the project
    classifier = AutoModelForSequenceClassification.from_pretrained(
        resolve_model_path(model), dtype=DTYPES[dtype])
    if classifier.config.pad_token_id is None:  # where the model finds each input's end
        classifier.config.pad_token_id = tokenizer.pad_token_id
    return classifier.to(device).eval(), tokenizer


class RewardModel:
    """A reward model's score as a reward function: see the module docstring. Close it
    (its task does) to stop its Ray actor."""

    runs_in_caller = True  # the rubric calls it in its own process (the model is there)
    settings_model = RewardModelSettings  # what a config's `RewardTerm` checks by

    def __init__(self, **settings: Any) -> None:
        self.settings = RewardModelSettings.model_validate(settings)
        self.__name__ = self.settings.name
        self.model: Any = None  # None: the model runs in `actor`
        self.actor: ActorScorer | None = None  # placement ray_actor: what scores there
        if self.settings.placement == "caller":
            self.model, self.tokenizer = load(self.settings.model, self.settings.device,
                                              self.settings.dtype)
            config = self.model.config
        else:
            from transformers import AutoConfig

            self.tokenizer = load_tokenizer(self.settings.model)
            config = AutoConfig.from_pretrained(resolve_model_path(self.settings.model))
        self.label_index = self._label_index(config)
        if self.settings.placement == "ray_actor":  # once the settings are known to work
            self.actor = ActorScorer(self.settings.name, self.settings.actor,
                                     self.settings.batch_size, functools.partial(
                                         RewardModel, **self.settings.model_dump(
                                             exclude={"placement", "actor"})))

    def _label_index(self, config: Any) -> int:
        """The index of the logit the score is read from; ValueError for a `label` that
        does not fit the model."""
        labels = config.num_labels
        label = self.settings.label
        if label is None:
            if labels != 1:
                raise ValueError(f"reward model {self.settings.model} has {labels} labels: "
                                 "name the one whose probability is the reward (label)")
            return 0
        if isinstance(label, int):
            if not 0 <= label < labels:
                raise ValueError(f"label {label}: the model has labels 0 to {labels - 1}")
            return label
        indices = {name: index for index, name in config.id2label.items()}
        if label not in indices:
            raise ValueError(f"label {label!r} is none of the model's {sorted(indices)}")
        return int(indices[label])

    def __call__(self, reply: str, prompt: str, sample: Mapping[str, Any],
                 sample_id: str, transcript: str = "") -> float:
        return self.scores([self.text_of(reply, prompt, sample, sample_id, transcript)])[0]

    def text_of(self, reply: str, prompt: str, sample: Mapping[str, Any],
                sample_id: str, transcript: str = "") -> str:
        """The model's input for a reply (special tokens included where the chat template
        writes them)."""
        if self.settings.text is not None:
            return self.settings.text.format_map(
                template_fields(reply, prompt, sample, sample_id, transcript))
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}, {"role": "assistant", "content": reply}],
            tokenize=False)

    def many(self, arguments: Sequence[Mapping[str, Any]]) -> list[float | Exception]:
        """The rewards of a group's replies (each the keyword arguments of a call: reply,
        prompt, sample, sample_id, transcript), scored together by one `scores` call; an input that
        cannot be written is its reply's failure, a failure of the model every reply's."""
        inputs: list[str | Exception] = []
        for given in arguments:
            try:
                inputs.append(self.text_of(**given))
            except Exception as error:  # a sample that lacks a field `text` reads
                inputs.append(error)
        texts = [text for text in inputs if isinstance(text, str)]
        try:
            scores: list[float | Exception] = (list(self.scores(texts, alone=True)) if texts
                                               else [])
        except Exception as error:
            scores = [error] * len(texts)
        scored = iter(scores)
        return [next(scored) if isinstance(text, str) else text for text in inputs]

    def scores(self, texts: Sequence[str], alone: bool = False) -> list[float]:
        """The rewards of several inputs (`text_of`), in batches of `batch_size`: here, or
        in the actor (together with other threads' inputs that arrive with them, unless
        `alone`: a call of their own)."""
        if self.actor is not None:
            return self.actor.scores(texts, alone)
        settings = self.settings
        rewards: list[float] = []
        for start in range(0, len(texts), settings.batch_size):
            with _FORWARD_LOCK:
                # the chat template writes its own special tokens; a plain text needs them
                batch = self.tokenizer(list(texts[start:start + settings.batch_size]),
                                       padding=True, truncation=True,
                                       max_length=settings.max_length, return_tensors="pt",
                                       add_special_tokens=settings.text is not None)
                with torch.inference_mode():
                    logits = self.model(**batch.to(self.model.device)).logits.float()
            if settings.label is not None:
                score = logits.softmax(dim=-1)[:, self.label_index]
            else:
                score = logits[:, 0].sigmoid() if settings.squash else logits[:, 0]
            rewards += (settings.scale * score).tolist()
        return rewards

    def close(self) -> None:
        """Stop the Ray actor, where the model runs in one (a model in the caller stays
        loaded for the process). Safe to call twice."""
        if self.actor is not None:
            self.actor.close()
