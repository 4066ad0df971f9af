"""A language model's judge calls, one generate call at a time, batched as they arrive.

Judges may ask one model from several threads together (src/tasks/model_rewards/batching:
when requests arrive together), while a model is not made to generate in two threads at
once. The model's `GenerationQueue` (`generation_queue(model)`: one per model, shared by
every judge of it) owns all that its judges do with it: callers submit a chat (a system
prompt and a user message), or a group's chats together (`submit_many`: answered alone,
in calls of `max_batch` in their order), and wait for the reply's text; its
`CallBatcher`'s one worker thread renders, tokenises and answers a batch of chats in one
`generate` call (those of equal sampling settings together), so the tokenizer is used in
that thread only too. A
chat whose prompt and `max_new_tokens` would pass the model's context, and every chat of a
generate call that raised, gets the error as its result.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from src.language_models.chat_template import render_chat
from src.language_models.language_model import LanguageModel, SamplingParams
from src.tasks.model_rewards.batching import CallBatcher


class PromptTooLong(ValueError):
    """A chat whose prompt and reply would not fit the model's context."""


@dataclass(frozen=True)
class Chat:
    """One judge request: what is asked, how it is answered, and how long the first of a
    batch waits for others."""

    system: str | None
    message: str
    params: SamplingParams
    window_s: float
    max_batch: int


class GenerationQueue:
    """One model's judge calls: see the module docstring."""

    def __init__(self, model: LanguageModel) -> None:
        # weak: a queue kept for a model (`generation_queue`) must not keep it alive
        self._model = weakref.ref(model)
        self._batcher: CallBatcher[Chat, str] = CallBatcher(self._answer, "judge-generation")

    def submit(self, chat: Chat) -> Future[str]:
        """Queue `chat`; its future holds the reply's text (or the error)."""
        return self._batcher.submit(chat, chat.window_s, chat.max_batch)

    def submit_many(self, chats: Sequence[Chat], max_batch: int) -> list[Future[str]]:
        """Queue a group's `chats`, answered alone in calls of at most `max_batch` in their
        order (src/tasks/model_rewards/batching); each future holds its chat's reply's
        text (or the error)."""
        return self._batcher.submit_many(chats, max_batch)

    def _answer(self, batch: list[Chat]) -> list[str | BaseException]:
        """The replies of `batch`, one generate call for each set of sampling settings."""
        model = self._model()
        results: list[str | BaseException] = [
            RuntimeError("the judge's language model was released")] * len(batch)
        if model is None:
            return results
        by_params: dict[SamplingParams, list[tuple[int, list[int]]]] = {}
        for index, chat in enumerate(batch):
            try:
                prompt = self._prompt(model, chat)
            except Exception as error:
                results[index] = error
                continue
            by_params.setdefault(chat.params, []).append((index, prompt))
        for params, asked in by_params.items():
            try:
                generated = model.generate([prompt for _, prompt in asked], params)
                if len(generated) != len(asked):
                    raise RuntimeError(f"generate answered {len(generated)} of {len(asked)} "
                                       "prompts")
                for (index, _), generations in zip(asked, generated, strict=True):
                    results[index] = model.tokenizer.decode(generations[0].token_ids,
                                                            skip_special_tokens=True)
            except Exception as error:  # the model failed: each caller's judge error
                for index, _ in asked:
                    results[index] = error
        return results

    @staticmethod
    def _prompt(model: LanguageModel, chat: Chat) -> list[int]:
        """The chat's prompt ids in the model's chat template; PromptTooLong where it and
        the reply would pass the model's context."""
        text = render_chat(model, chat.system, [("user", chat.message)], True)
        prompt = model.tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(prompt) + chat.params.max_new_tokens > model.max_context_tokens:
            raise PromptTooLong(
                f"the judge's prompt is {len(prompt)} tokens: with max_tokens="
                f"{chat.params.max_new_tokens} it passes the model's context of "
                f"{model.max_context_tokens} (lower max_field_chars, or shorten the "
                "template)")
        return prompt


_queues: weakref.WeakKeyDictionary[LanguageModel, GenerationQueue] = (
    weakref.WeakKeyDictionary())
_queues_lock = threading.Lock()


def generation_queue(model: LanguageModel) -> GenerationQueue:
    """The queue of `model`'s judge calls, the same for every judge of that model."""
    with _queues_lock:
        queue = _queues.get(model)
        if queue is None:
            queue = _queues[model] = GenerationQueue(model)
        return queue
