"""The language-model contracts: batched sampling of token ids with their log-probs.

Each is a class an implementation subclasses:
- `LanguageModel`: anything that samples (an in-process policy, an engine, a pool of
  engines); an agent is configured to sample from one by name, so vLLM or a rollout pool
  in place of the trained policy is a configuration choice;
- `VersionedPolicy`: a LanguageModel whose weights are a base model plus a LoRA adapter
  loaded by policy version, whose sequences can be scored (how a pool checks an engine
  against the trainer);
- `InferenceEngine`: a VersionedPolicy a pool can build from the trainer and keep in
  sync, in another process; a new engine is one such class;
- `TrainableLanguageModel`: a VersionedPolicy whose adapter is trained in process
  (scoring with gradients, sharding, saving). Being trained does not make a model an
  engine: the Hugging Face policy is both, by subclassing both.

How an in-process policy samples its own weights is its `Sampler`'s business
(src.language_models.huggingface.sampler).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import torch
from pydantic import Field

FinishReason = Literal["stop", "length"]
# A trainable model that can be built without its base weights takes this parameter:
# "load" them, or "meta" (the base model on the meta device, only the adapter real) in a
# process that neither samples nor scores with it (src.run.assembly chooses).
BASE_WEIGHTS = "base_weights"
BaseWeights = Literal["load", "meta"]
DEFAULT_ROLE_DICT: dict[str, str] = {"user": "user", "agent": "assistant"}


def role_dict_with_defaults(role_dict: dict[str, str] | None) -> dict[str, str]:
    """The chat-template role names of the "user" and "agent" turns (keys in any case)."""
    given = {key.lower(): value for key, value in (role_dict or {}).items()}
    return {role: given.get(role, default) for role, default in DEFAULT_ROLE_DICT.items()}


# A sampling setting as a constructor parameter: a config's value out of range is refused
# where the config is read (file, line and key named), not as an index error mid-run
Temperature = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]  # 0: greedy
TopP = Annotated[float, Field(gt=0.0, le=1.0)]  # the nucleus's share of the probability
NewTokens = Annotated[int, Field(ge=1)]


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    max_new_tokens: int = 256
    stop_token_ids: tuple[int, ...] = ()  # besides the tokenizer's end-of-turn tokens

    def __post_init__(self) -> None:
        if not (self.temperature >= 0.0 and math.isfinite(self.temperature)):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1 or self.n < 1:
            raise ValueError(f"max_new_tokens and n must be at least 1, got "
                             f"{self.max_new_tokens} and {self.n}")


@dataclass
class Generation:
    """One sampled completion.

    `logprobs[t]` is the log-prob of `token_ids[t]` under the distribution it was
    drawn from: logits / temperature, restricted to the top-p nucleus when top_p < 1.
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    policy_version: int = 0


@dataclass
class TokenBatch:
    """Right-padded token sequences for scoring; `loss_mask` marks positions to score."""

    input_ids: torch.Tensor  # [batch, length]
    attention_mask: torch.Tensor  # [batch, length]
    loss_mask: torch.Tensor  # [batch, length], 1 where token t is scored
    extras: dict[str, torch.Tensor] = field(default_factory=dict)

    @classmethod
    def from_sequences(cls, sequences: Sequence[Sequence[int]], masks: Sequence[Sequence[int]],
                       pad_id: int) -> TokenBatch:
        length = max(len(s) for s in sequences)
        ids = torch.full((len(sequences), length), pad_id, dtype=torch.long)
        attention = torch.zeros((len(sequences), length), dtype=torch.long)
        loss = torch.zeros((len(sequences), length), dtype=torch.float32)
        for row, (sequence, mask) in enumerate(zip(sequences, masks, strict=True)):
            ids[row, : len(sequence)] = torch.tensor(sequence, dtype=torch.long)
            attention[row, : len(sequence)] = 1
            loss[row, : len(mask)] = torch.tensor(mask, dtype=torch.float32)
        return cls(ids, attention, loss)


class NamesModels:
    """A configured component that names language models (by their parameters) and may
    use some of them only for their adapter, tokenizer and settings."""

    @classmethod
    def adapter_only_models(cls, parameters: Mapping[str, object]) -> frozenset[str]:
        """The parameters naming a language model that a component of these (configured)
        parameters uses only for its adapter, tokenizer and settings, never sampling or
        scoring with it in this process; none by default. A model used only so may be
        built without its base weights (src.run.assembly)."""
        return frozenset()

    @classmethod
    def frozen_models(cls, parameters: Mapping[str, object]) -> frozenset[str]:
        """The parameters naming a language model that a component of these parameters
        only scores with and never trains (a distillation teacher): not the run's trained
        model, whatever its kind; none by default."""
        return frozenset()


class LanguageModel(NamesModels, ABC):
    """Anything that samples: an in-process model, a vLLM engine, a pool of them."""

    # Whether it samples from its own copy of a trainer's policy (a pool's engines), so
    # that sampling can go on while the trainer's weights change.
    holds_policy_copy: ClassVar[bool] = False

    @property
    @abstractmethod
    def tokenizer(self):  # a transformers tokenizer with a chat template
        ...

    @property
    @abstractmethod
    def max_context_tokens(self) -> int: ...

    @property
    def pad_id(self) -> int:
        """The id that pads token batches (masked out): the tokenizer's pad, else its eos."""
        pad = self.tokenizer.pad_token_id
        return pad if pad is not None else self.tokenizer.eos_token_id

    @property
    def role_dict(self) -> dict[str, str]:
        """Chat-template role names of the "user" and "agent" turns."""
        return dict(DEFAULT_ROLE_DICT)

    @property
    def policy_version(self) -> int:
        """How many updates the weights that sample now have seen."""
        return 0

    @abstractmethod
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 seed: int | None = None) -> list[list[Generation]]:
        """For each prompt (token ids), `params.n` completions.

        With a `seed`, the same call on the same weights samples the same tokens; without
        one, the draws come from the process's random state (torch's global generator).
        """

    def end_of_turn_ids(self) -> tuple[int, ...]:
        tokenizer = self.tokenizer
        ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
        return tuple(sorted(ids))

    def serve_latest_policy(self) -> None:
        """Sample from the trainer's current weights from the next call on (a copy of the
        policy is brought up to date; a model that samples its own weights has nothing
        to do)."""
        return None

    def drain_metrics(self) -> dict[str, float]:
        """What the model measured since the last call (engine syncs, restarts), to log."""
        return {}

    def close(self) -> None:
        """Release processes or devices the model holds (none by default)."""
        return None

    def __enter__(self) -> LanguageModel:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class VersionedPolicy(LanguageModel):
    """A policy at a known version: a base model plus a LoRA adapter loaded by version,
    whose sequences can be scored token by token."""

    _policy_version: int = 0  # until the first adapter or update

    @property
    def policy_version(self) -> int:
        return self._policy_version

    def set_policy_version(self, version: int) -> None:
        """Label the weights now loaded as having seen `version` updates (on resume)."""
        self._policy_version = version

    @abstractmethod
    def load_adapter(self, directory: Path, version: int) -> None:
        """Use the PEFT adapter saved in `directory` from the next call on, its weights
        labelled with policy version `version`."""

    @abstractmethod
    def sequence_logprobs(self, sequences: Sequence[Sequence[int]],
                          temperature: float = 1.0) -> list[list[float]]:
        """Log-prob of each token given the ones before it (the first token gets 0.0)."""


@dataclass(frozen=True)
class EnginePlacement:
    """What a rollout pool gives each engine it starts."""

    gpus_per_engine: int = 0
    tensor_parallel_size: int = 1  # GPUs one engine shards its weights over


class InferenceEngine(VersionedPolicy):
    """One engine: samples under an adapter it loads by policy version, scores sequences.

    A rollout pool runs any subclass in its actors: it builds one from the trainer with
    `parameters_for_pool`, sends it adapters with `load_adapter`, samples with a seed
    (a replacement engine repeats a failed request exactly) and checks it against the
    trainer with `sequence_logprobs`.
    """

    # whether one engine can shard its weights over several GPUs (tensor_parallel_size > 1)
    supports_tensor_parallel: ClassVar[bool] = False

    @classmethod
    @abstractmethod
    def parameters_for_pool(cls, trainer: TrainableLanguageModel,
                            placement: EnginePlacement) -> dict[str, Any]:
        """Constructor parameters of an engine that serves `trainer`'s policy: the same
        base model, room for its adapter, the trainer's chat roles. Raises TypeError for a
        trainer this engine cannot serve."""


@dataclass
class ScoredTokens:
    """Per-token results of scoring a TokenBatch (zeros where the loss mask is 0)."""

    logprobs: torch.Tensor  # [batch, length]
    entropy: torch.Tensor | None  # [batch, length]


class TrainableLanguageModel(VersionedPolicy):
    """A policy whose adapter is trained in process: it scores token batches (with
    gradients in train mode), hands out its trainable parameters, saves and loads its
    adapter, and may be replicated into or sharded over trainer workers. It samples as any
    LanguageModel does; serving a rollout pool is the InferenceEngine contract's part."""

    @property
    def packs_shared_prefixes(self) -> bool:
        """Whether `score` runs rows sharing a prefix as one packed sequence (see
        src.language_models.shared_prefix): a micro-batch then costs its packed tokens."""
        return False

    @property
    @abstractmethod
    def device(self) -> torch.device:
        """Where the trained weights live (a pool keeps its engines off this GPU)."""

    def activation_bytes_per_token(self) -> int | None:
        """About how many bytes of activations a trained token keeps until the backward
        (micro-batches on a GPU are sized from it); None: unknown."""
        return None

    @abstractmethod
    def score(self, batch: TokenBatch, *, temperature: float = 1.0, with_adapter: bool = True,
              with_entropy: bool = False) -> ScoredTokens:
        """Log-probs of `input_ids[t]` given the tokens before it, at the scored positions.

        With gradients when the model is in train mode; `with_adapter=False` gives the
        reference policy (the base model) without a second copy of the weights.
        """

    @torch.no_grad()
    def sequence_logprobs(self, sequences: Sequence[Sequence[int]],
                          temperature: float = 1.0) -> list[list[float]]:
        batch = TokenBatch.from_sequences(
            sequences, [[0] + [1] * (len(s) - 1) for s in sequences], pad_id=self.pad_id)
        scored = self.score(batch, temperature=temperature).logprobs
        return [scored[row, : len(s)].tolist() for row, s in enumerate(sequences)]

    @abstractmethod
    def trainable_parameters(self) -> list[torch.nn.Parameter]: ...

    def replica_parameters(self, device: str) -> dict[str, Any]:
        """Constructor parameters that build this model again on `device` ("cpu",
        "cuda") in a trainer worker: the same weights, dtype and adapter shape (its
        adapter's values are sent apart)."""
        raise NotImplementedError(f"{type(self).__name__} cannot be replicated into trainer "
                                  "workers: train it with num_trainer_workers: 1")

    def shard_for_data_parallel(self) -> None:
        """Shard the weights over the default torch.distributed process group (FSDP), so
        that workers each hold a part between uses and sum their gradients."""
        raise NotImplementedError(f"{type(self).__name__} cannot shard its weights: train "
                                  "it with num_trainer_workers: 1")

    @abstractmethod
    def save_adapter(self, directory: Path) -> None: ...

    @abstractmethod
    def train_mode(self, dropout: bool = True) -> None:
        """Ready for a backward. `dropout` False: every dropout stays off (the PPO ratio
        of an on-policy update is 1), while what trains only in training mode, gradient
        checkpointing, still does."""

    @abstractmethod
    def eval_mode(self) -> None: ...

    def mark_updated(self) -> None:
        """Record that an optimiser step changed the weights (bumps policy_version)."""
        self.set_policy_version(self.policy_version + 1)
