"""The in-process sampling contract: how a policy that holds its weights in this process
samples from them.

The Hugging Face policy (src/language_models/instance/huggingface_lora_language_model.py)
holds one `Sampler`, chosen by its `sampler` setting:
- `kv_cache` (kv_cache_sampler.py, the default): a decode loop of its own, for speed on
  multi-turn batches (finished rows leave the batch, shared prompts prefilled once, a
  turn's keys and values reused by the next);
- `generate` (generate_sampler.py): transformers' own `model.generate`, for architectures
  or cache types the decode loop does not cover, and as a reference to check it against.

Sampling in other processes is not a Sampler: a vLLM engine and a rollout pool of
engines are LanguageModels of their own, which the agent is configured to sample from
by name (src.language_models.language_model).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import torch

from src.language_models.language_model import Generation, SamplingParams


class Sampler(ABC):
    """Samples completions of token rows with a model its policy hands it."""

    @abstractmethod
    def sample(self, model: torch.nn.Module, rows: list[list[int]], params: SamplingParams,
               end_of_turn_ids: Sequence[int], policy_version: int) -> list[Generation]:
        """One generation per row, sampled with `model` and ended by an end-of-turn id or
        `params.stop_token_ids` ("stop", the stop token kept) or after
        `params.max_new_tokens` ("length"), each labelled with `policy_version`. The
        caller turns gradients off, sets eval mode and seeds torch's global generator,
        from which every draw comes."""

    def weights_changed(self) -> None:
        """The model's weights changed (an update, a loaded adapter): drop anything
        computed from the old ones (none by default)."""
        return None


def stop_ids(end_of_turn_ids: Sequence[int], params: SamplingParams) -> list[int]:
    """The ids that end a row: the model's end-of-turn ids and the call's stop ids."""
    return sorted(set(end_of_turn_ids) | set(params.stop_token_ids))
