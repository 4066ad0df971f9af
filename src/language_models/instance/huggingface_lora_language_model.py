"""A Hugging Face causal LM with a PEFT LoRA adapter: samples with log-probs, scores, trains.

This class owns the weights and the adapter; it is the policy the RL trainer trains
(`TrainableLanguageModel`) and an engine a rollout pool builds (`InferenceEngine`). Its
internals are in src/language_models/huggingface/: the parts it is built from
(policy_parts: attention, sampler, the PEFT model, whose LoRA layers run their products in
a bf16 base's dtype (lora_layers); meta_base for `base_weights: meta`),
its `Sampler` (chosen by `sampler`) run on a copy of the model whose LoRA layers run one
fused product per input (fused_lora_sampler), and scoring (token_scoring), where
training scores the rows of a group as one packed sequence with their shared prompt
laid out once (src.language_models.shared_prefix).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from peft import PeftModel, set_peft_model_state_dict
from peft.utils import load_peft_weights
from transformers import AutoConfig, AutoTokenizer

from src.configuration.components import COMPONENTS
from src.language_models.embedded_model import DEFAULT_MODEL, resolve_model_path
from src.language_models.huggingface.fused_lora_sampler import FusedLoRASampler
from src.language_models.huggingface.kv_cache_sampler import KVCacheSampler
from src.language_models.huggingface.lora_model_settings import (
    Dtype,
    LoRAComputeDtype,
    LoRASettings,
    choose_device,
    choose_dtype,
)
from src.language_models.huggingface.policy_parts import (
    SamplerName,
    attention_implementation,
    build_sampler,
    lora_model,
)
from src.language_models.huggingface.sampler import Sampler
from src.language_models.huggingface.token_scoring import score_tokens
from src.language_models.language_model import (
    BaseWeights,
    EnginePlacement,
    Generation,
    InferenceEngine,
    SamplingParams,
    ScoredTokens,
    TokenBatch,
    TrainableLanguageModel,
    role_dict_with_defaults,
)


def decoder_activation_bytes(config: Any, element_size: int,
                             gradient_checkpointing: bool) -> int | None:
    """Bytes a trained token keeps for the backward in a decoder of `config`'s shape. A
    decoder layer keeps about 20 x hidden + 8 x intermediate elements a token (its linear
    layers' and LoRA's inputs, attention's q/k/v/output, the MLP's gate, up and
    activation, the norms' inputs): 14.0 MB at the Qwen2.5-7B shape in bf16, against 15 MB
    measured there. With gradient checkpointing a layer keeps its input, and one layer at
    a time the rest. The head adds the logits, their float32 log-softmax and its
    gradient. None for a config that does not name those sizes (GPT-2's, say)."""
    config = config.get_text_config()  # a multimodal model's decoder
    sizes = [getattr(config, name, None) for name in
             ("hidden_size", "intermediate_size", "num_hidden_layers", "vocab_size")]
    if not all(isinstance(size, int) for size in sizes):
        return None
    hidden, intermediate, layers, vocab = sizes
    layer = (20 * hidden + 8 * intermediate) * element_size
    kept = layers * hidden * element_size + layer if gradient_checkpointing else layers * layer
    return kept + vocab * (element_size + 8)


@COMPONENTS.register("huggingface_lora")
class HuggingfaceLoRALanguageModel(TrainableLanguageModel, InferenceEngine):
    """The trained policy: a Hugging Face causal LM with a PEFT LoRA adapter, which samples
    (each token with its log-prob), scores and trains. The LoRA parameters, their gradients
    and the optimizer state are float32 whatever `dtype` is. A group's identical prompts,
    and the prefix all of a call's prompts share (system prompt, task instructions), are
    prefilled once (by the default sampler). `prefix_caching`, `fused_sampling` and
    `shared_prefix_training` only save time: none changes the results beyond rounding."""

    def __init__(
        self,
        # `embedded:smollm2-135m` (SmolLM2-135M, installed with the package) or any
        # Hugging Face hub name or model folder
        model_name_or_path: str = DEFAULT_MODEL,
        # the chat template's role names for the `user` and `agent` turns (default: user,
        # assistant)
        role_dict: dict[str, str] | None = None,
        lora_config: LoRASettings | None = None,
        # the base weights', in which sampling and the trainer's forward and backward run.
        # auto: fp32 on CPU, bf16 on CUDA; bfloat16_where_native: bf16 on CUDA and on CPUs
        # with bf16 matrix instructions (AMX, AVX512-BF16), else fp32. In bf16 sampler and
        # trainer log-probs differ by about 1e-2 a token: give the RL trainer `mismatch:
        # {old_logprobs: trainer, correction: tis}` (free when a batch is one step)
        dtype: Dtype = "auto",
        device: str = "auto",  # auto: cuda where torch sees a GPU, else cpu
        # default: the model's max_position_embeddings; an episode whose next prompt and
        # the agent's max_new_tokens would not fit ends as `agent_context_limit`
        max_context_tokens: int | None = None,
        # a PEFT adapter folder to start from (an SFT stage's best/lora_weights); with
        # `rollout.max_batches: 0` and `evaluation.at_start` a run only evaluates it
        adapter_path: str | None = None,
        gradient_checkpointing: bool = False,  # less activation memory, more compute
        # kv_cache: the decode loop of language_models/huggingface/kv_cache_sampler, for
        # speed on multi-turn batches; static_cache: that loop over a static cache, each
        # decode step a replayed CUDA graph on a GPU (huggingface/static_cache_sampler);
        # generate: transformers' own model.generate, for models or cache types those
        # loops do not cover and as a reference to check them against; auto: static_cache
        # on CUDA (unless the model has sliding-window attention), kv_cache elsewhere
        sampler: SamplerName = "auto",
        # (kv_cache, static_cache) a multi-turn episode's next turn reuses its previous
        # turn's keys and values and feeds only the new tokens; dropped whenever the
        # weights change
        prefix_caching: bool = True,
        # auto: grouped_sdpa on CPU (grouped key/value heads are not copied each step; a
        # decode step is two small products over the cache), transformers' sdpa on CUDA
        # for training (sampling decodes through grouped_sdpa there too); any
        # transformers name works (flash and flex attention read no 4-D masks: with
        # shared_prefix_training false and the kv_cache sampler)
        attn_implementation: str = "auto",
        # bfloat16: fp32 weights, only the trainer's forward and backward under autocast
        training_autocast: Literal["none", "bfloat16"] = "none",
        # base: where the base runs in bf16 (or fp16) the adapter's products run in it too,
        # on the fast units, its float32 weights cast per call and its gradients
        # accumulated in float32 (huggingface/lora_layers); float32: PEFT's own layers,
        # which cast every adapter input to float32 (the results of earlier versions)
        lora_compute_dtype: LoRAComputeDtype = "base",
        # decode from a copy whose LoRA layers that read one input (q/k/v, gate/up) run
        # base weights and adapter down-projections as one stacked product, refreshed when
        # the adapter changes (merging the adapter into bf16 weights would round it away)
        fused_sampling: bool = True,
        # rows that share a prefix (a group's prompt) are scored as one packed sequence
        # with the prefix once; log-probs and gradients match the plain path's to 1e-5
        shared_prefix_training: bool = True,
        # load: the base weights in this process. meta: the base model without them (on the
        # meta device), only the adapter real (huggingface/meta_base), for the driver
        # of a run whose rollouts come from a rollout pool and whose update runs in trainer
        # workers: it hands out and saves the adapter, and neither samples nor scores. Left
        # out of a run's config, the run chooses (src.run.assembly)
        base_weights: BaseWeights = "load",
    ) -> None:
        self.model_name_or_path = model_name_or_path
        self.training_autocast = training_autocast
        self.lora_compute_dtype = lora_compute_dtype
        self._gradient_checkpointing = gradient_checkpointing
        self._role_dict = role_dict_with_defaults(role_dict)
        self.lora_settings = lora_config or LoRASettings()
        self.base_weights = base_weights
        configured = choose_device(device)
        # Without base weights the adapter is all this process holds, in CPU memory; the
        # dtype stays the configured device's: the trainer workers' replicas take it.
        self._device = torch.device("cpu") if base_weights == "meta" else configured
        self.dtype = choose_dtype(dtype, configured)
        path = resolve_model_path(model_name_or_path)
        self._tokenizer = AutoTokenizer.from_pretrained(path)
        # the sampler is built before the weights: loading an adapter tells it they changed
        self._attn_implementation = attn_implementation  # as asked: a replica resolves "auto"
        attention = attention_implementation(attn_implementation, self.device,
                                             shared_prefix_training)
        self._sampler: Sampler = build_sampler(
            sampler, AutoConfig.from_pretrained(path), attention, self.device, self.pad_id,
            prefix_caching, model_name_or_path)
        self.model: PeftModel = lora_model(path, self.lora_settings, self.dtype, self.device,
                                           attention, gradient_checkpointing, base_weights,
                                           lora_compute_dtype)
        if adapter_path is not None:
            self.load_adapter(Path(adapter_path), 0)
        self._max_context = max_context_tokens or int(
            getattr(self.model.get_base_model().config, "max_position_embeddings", 4096))
        self.shared_prefix_training = shared_prefix_training
        self._fused = (FusedLoRASampler.of(self.model)
                       if fused_sampling and base_weights == "load" else None)
        self.eval_mode()

    @classmethod
    def parameters_for_pool(cls, trainer: TrainableLanguageModel,
                            placement: EnginePlacement) -> dict[str, Any]:
        if not isinstance(trainer, HuggingfaceLoRALanguageModel):
            raise TypeError(f"a {cls.__name__} engine copies the model and LoRA shape of a "
                            f"HuggingfaceLoRALanguageModel trainer, not {type(trainer).__name__}")
        return {"model_name_or_path": trainer.model_name_or_path,
                "role_dict": trainer.role_dict, "lora_config": trainer.lora_settings,
                "device": "cuda" if placement.gpus_per_engine else "cpu",
                "max_context_tokens": trainer.max_context_tokens,
                "lora_compute_dtype": trainer.lora_compute_dtype}

    # ---- LanguageModel -------------------------------------------------------------
    @property
    def tokenizer(self):
        return self._tokenizer

    @property
    def max_context_tokens(self) -> int:
        return self._max_context

    @property
    def role_dict(self) -> dict[str, str]:
        return self._role_dict

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def prefix_caching(self) -> bool:
        """Whether a turn's keys and values are kept for the next (the KV-cache sampler's)."""
        return isinstance(self._sampler, KVCacheSampler) and self._sampler.prefix_caching

    def set_policy_version(self, version: int) -> None:
        self._sampler.weights_changed()
        super().set_policy_version(version)

    def end_of_turn_ids(self) -> tuple[int, ...]:
        ids = set(super().end_of_turn_ids())
        configured = self.model.get_base_model().generation_config.eos_token_id
        if configured is not None:
            ids.update(configured if isinstance(configured, list) else [configured])
        return tuple(sorted(ids))

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 seed: int | None = None) -> list[list[Generation]]:
        self._check_base_weights("sample")
        rows = [list(prompt) for prompt in prompts for _ in range(params.n)]
        if not rows:
            return []
        if seed is not None:  # the sampler draws from torch's global generator
            torch.manual_seed(seed)
        was_training = self.model.training
        self.model.eval()  # LoRA dropout off while sampling
        try:
            generations = self._sampler.sample(self._sampling_model(), rows, params,
                                               self.end_of_turn_ids(), self.policy_version)
        finally:
            self.model.train(was_training)
        return [generations[start:start + params.n]
                for start in range(0, len(generations), params.n)]

    def _sampling_model(self) -> torch.nn.Module:
        """The model that decodes: the fused copy, refreshed if the adapter changed."""
        if self._fused is None:
            return self.model
        if self._fused.refresh():
            self._sampler.weights_changed()
        return self._fused.model

    def _check_base_weights(self, use: str) -> None:
        if self.base_weights == "meta":
            raise RuntimeError(
                f"{type(self).__name__} {self.model_name_or_path!r} cannot {use}: this "
                "process holds no base weights (base_weights: meta, for the driver of a run "
                "whose rollouts come from a rollout pool and whose update runs in trainer "
                "workers); sample from the pool, score through the trainer workers")

    # ---- TrainableLanguageModel ----------------------------------------------------
    def score(self, batch: TokenBatch, *, temperature: float = 1.0, with_adapter: bool = True,
              with_entropy: bool = False) -> ScoredTokens:
        self._check_base_weights("score")
        return score_tokens(self.model, batch, device=self.device, pad_id=self.pad_id,
                            temperature=temperature, with_adapter=with_adapter,
                            with_entropy=with_entropy,
                            bfloat16_autocast=self.training_autocast == "bfloat16",
                            pack_shared_prefixes=self.shared_prefix_training)

    @property
    def packs_shared_prefixes(self) -> bool:
        return self.shared_prefix_training

    def activation_bytes_per_token(self) -> int | None:
        element = 2 if self.training_autocast == "bfloat16" else self.dtype.itemsize
        return decoder_activation_bytes(self.model.get_base_model().config, element,
                                        self._gradient_checkpointing)

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [parameter for parameter in self.model.parameters() if parameter.requires_grad]

    def replica_parameters(self, device: str) -> dict[str, Any]:
        return {"model_name_or_path": self.model_name_or_path, "role_dict": self.role_dict,
                "lora_config": self.lora_settings,
                "dtype": str(self.dtype).removeprefix("torch."),
                "device": device, "max_context_tokens": self.max_context_tokens,
                "gradient_checkpointing": self._gradient_checkpointing,
                "prefix_caching": False, "attn_implementation": self._attn_implementation,
                "training_autocast": self.training_autocast,
                "lora_compute_dtype": self.lora_compute_dtype, "fused_sampling": False,
                "shared_prefix_training": self.shared_prefix_training,
                "base_weights": "load"}

    def shard_for_data_parallel(self) -> None:
        """Each decoder layer becomes one FSDP unit (its weights gathered for its forward
        and backward, then freed), under the decoder (embeddings and final norm) as the
        root; gradients are summed over workers, not averaged: each worker's loss is
        already a share of the whole mini-batch's. A head tied to the embeddings keeps
        its own whole copy (frozen)."""
        from torch.distributed.fsdp import fully_shard

        def shard(module: torch.nn.Module) -> None:
            sharded = fully_shard(module)
            sharded.set_gradient_divide_factor(1.0)
            sharded.set_force_sum_reduction_for_comms(True)  # gloo has no scaled sum

        decoder = self.model.get_base_model().get_decoder()
        for layer in decoder.layers:
            shard(layer)
        # The decoder as the root: FSDP reshards the layers after their forward only
        # under a root (a root keeps its weights gathered for the backward). Whole
        # layers left gathered would also hide the adapter from PEFT's
        # `disable_adapter`, which then cannot mark it trainable again (it skips
        # non-leaf tensors).
        shard(decoder)

    def save_adapter(self, directory: Path) -> None:
        self.model.save_pretrained(str(directory))

    def load_adapter(self, directory: Path, version: int) -> None:
        weights = load_peft_weights(str(directory), device=str(self.device))
        result = set_peft_model_state_dict(self.model, weights)
        if result.unexpected_keys:
            raise ValueError(f"adapter at {directory} does not fit this model: unexpected "
                             f"keys {result.unexpected_keys[:3]}")
        self.set_policy_version(version)

    def train_mode(self, dropout: bool = True) -> None:
        self._sampler.weights_changed()  # the weights are about to change
        if dropout:
            self.model.train()
            return
        # transformers checkpoints a layer only when the module that holds the switch is in
        # training mode, and drops out (LoRA's dropout, attention's) wherever a module is:
        # only those holders train, each alone, not their children
        self.model.eval()
        for module in self.model.modules():
            if getattr(module, "gradient_checkpointing", False) is True:
                module.training = True

    def eval_mode(self) -> None:
        self.model.eval()

    # LifelongAgentBench's method names.
    def save_lora(self, directory: str | Path) -> None:
        self.save_adapter(Path(directory))

    def _inference_with_logprobs(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                                 seed: int | None = None) -> list[list[Generation]]:
        return self.generate(prompts, params, seed)
