"""A Hugging Face causal LM with a PEFT LoRA adapter: samples with log-probs, scores, trains.

Sampling is a plain decode loop over the KV cache rather than `generate`, so that each
sampled token's log-prob comes from exactly the distribution it was drawn from, and so
that finished rows leave the batch (multi-turn batches finish unevenly). It decodes with
a copy of the model whose LoRA layers run one fused product per input
(src.language_models.fused_lora_sampler), prefills a group's identical prompts once and
the prefix that all of a call's prompts share once.
Training scores the rows of a group as one packed sequence with their shared prompt laid
out once (src.language_models.shared_prefix).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Literal

import torch
from peft import LoraConfig, PeftModel, get_peft_model, set_peft_model_state_dict
from peft.utils import load_peft_weights
from pydantic import BaseModel, ConfigDict
from torch.utils.checkpoint import checkpoint
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

from src.language_models.embedded_model import DEFAULT_MODEL, resolve_model_path
from src.language_models.fused_lora_sampler import FusedLoRASampler
from src.language_models.grouped_attention import GROUPED_SDPA
from src.language_models.kv_cache import growing_cache
from src.language_models.language_model import (
    EnginePlacement,
    Generation,
    SamplingParams,
    ScoredTokens,
    TokenBatch,
    TrainableLanguageModel,
    role_dict_with_defaults,
)
from src.language_models.prefix_cache import CachedPrefix, PrefixCache
from src.language_models.shared_prefix import PackedBatch, pack_rows, plan_packs

LOGIT_CHUNK = 256  # scored positions per lm_head chunk: bounds the [chunk, vocab] logits
COMPACT_BELOW = 0.75  # drop finished rows from the decode batch once fewer than this run
# a prefix shorter than this, shared by a call's prompts, is left to the batched prefill:
# its own forward would cost more than it saves
SHARED_PROMPT_MIN_TOKENS = 16
SAMPLING_BLOCK = 256  # vocabulary entries per block of the two-level token draw


class LoRASettings(BaseModel):
    """The `lora_config` block as LifelongAgentBench's configs write it (PEFT LoraConfig
    fields). The adapter starts at zero, so the policy starts as the base model."""

    model_config = ConfigDict(extra="forbid")

    r: int = 16  # the adapter's rank
    lora_alpha: int = 32  # the adapter's output is scaled by lora_alpha / r
    # `all-linear` (every linear layer but the output head) or a list of module names
    target_modules: list[str] | str = "all-linear"
    # only the cross-entropy losses (supervised stage, offline RCE warm-up) use it:
    # sampling and the RL update run without it, so that the PPO ratio is 1 on policy
    lora_dropout: float = 0.0
    bias: Literal["none", "all", "lora_only"] = "none"  # which biases train as well
    task_type: Literal["CAUSAL_LM"] = "CAUSAL_LM"


def _choose_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


Dtype = Literal["auto", "bfloat16_where_native", "float32", "bfloat16", "float16"]


def multiplies_bfloat16_natively(device: torch.device) -> bool:
    """A GPU, or a CPU with bf16 matrix instructions (AMX tiles or AVX512-BF16): there
    bf16 matrix products run 2-8x faster than fp32 (docs/results.md, "Performance")."""
    if device.type == "cuda":
        return True
    return device.type == "cpu" and (torch.cpu._is_amx_tile_supported()
                                     or torch.cpu._is_avx512_bf16_supported())


def _choose_dtype(dtype: Dtype, device: torch.device) -> torch.dtype:
    if dtype == "auto":  # exact fp32 on CPU; bf16 where the GPU makes it the norm
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype == "bfloat16_where_native":
        return torch.bfloat16 if multiplies_bfloat16_natively(device) else torch.float32
    return getattr(torch, dtype)


def _cached_row(cache: DynamicCache, attention: torch.Tensor, position: int,
                token_ids: tuple[int, ...]) -> CachedPrefix:
    """One batch row's keys and values at its unmasked positions."""
    valid = attention[position].bool()
    layers = [(layer.keys[position][:, valid].clone(), layer.values[position][:, valid].clone())
              for layer in cache.layers]
    if layers[0][0].shape[1] != len(token_ids):
        raise RuntimeError(f"cache holds {layers[0][0].shape[1]} positions for "
                           f"{len(token_ids)} fed tokens")
    return CachedPrefix(token_ids, layers)


def _next_token_logits(model: torch.nn.Module, input_ids: torch.Tensor,
                       attention: torch.Tensor, positions: torch.Tensor,
                       cache: DynamicCache) -> torch.Tensor:
    """Logits after each row's last position [rows, vocab], the cache extended in place.

    The head is applied here to a contiguous [rows, hidden] slice: given the strided
    [rows, 1, hidden] slice of a prefill (`logits_to_keep=1`), torch's linear takes a
    batched path that copies the [hidden, vocab] weight once per row (0.4 s of a 0.9 s
    prefill of 8 rows in bf16, measured)."""
    hidden = model.get_decoder()(input_ids=input_ids, attention_mask=attention,
                                 position_ids=positions, past_key_values=cache,
                                 use_cache=True).last_hidden_state
    return model.get_output_embeddings()(hidden[:, -1, :].contiguous())


def _sample_from_logits(logits: torch.Tensor, temperature: float,
                        top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row; return it with its log-prob under the sampling distribution.

    Each [rows, vocab] float32 tensor made here is a fresh 6 MB allocation at batch 32,
    whose pages are faulted in and zeroed again at every step: hence one softmax, straight
    from the head's dtype, and the log of the drawn tokens' probabilities rather than a
    log_softmax over the vocabulary. On bf16 logits of 32 rows x 49,152 a draw took 1.0-1.4
    ms, against 17-25 ms for the single-level draw it replaced (five such tensors, one a
    float64 running sum over the vocabulary), measured in isolation."""
    if temperature == 0.0:
        tokens = logits.argmax(dim=-1)
        log_probs = torch.log_softmax(logits, dim=-1, dtype=torch.float32)
        return tokens, log_probs.gather(-1, tokens[:, None]).squeeze(-1)
    if temperature != 1.0:
        logits = logits.to(torch.float32, copy=True).div_(temperature)  # the caller's stays
    if top_p < 1.0:
        sorted_logits, order = logits.float().sort(dim=-1, descending=True)
        sorted_probs = sorted_logits.softmax(dim=-1)
        # drop a token when the mass before it already reaches top_p (the first always stays)
        outside = (sorted_probs.cumsum(dim=-1) - sorted_probs) >= top_p
        sorted_logits = sorted_logits.masked_fill(outside, float("-inf"))
        logits = torch.full_like(sorted_logits, float("-inf")).scatter(-1, order, sorted_logits)
    probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
    tokens = _inverse_cdf_draw(probs)
    return tokens, probs.gather(-1, tokens[:, None]).squeeze(-1).log()


def _inverse_cdf_draw(probs: torch.Tensor) -> torch.Tensor:
    """One token per row of `probs` [rows, vocab] (>= 0, not all 0): the same distribution
    as torch.multinomial, which takes ~14 ms for 16 rows x 49k tokens on CPU.

    Two levels of inverse CDF: a block of SAMPLING_BLOCK tokens by the blocks' masses, then
    a token within it, so that the float64 running sums cover 192 + 256 entries instead of
    the whole vocabulary. Each level takes the first entry whose running sum exceeds the
    draw, with the draw kept below the level's total, so an entry of zero mass (outside
    the nucleus) is never drawn."""
    rows, vocab = probs.shape
    if vocab % SAMPLING_BLOCK:
        probs = torch.nn.functional.pad(probs, (0, -vocab % SAMPLING_BLOCK))
    blocks = probs.view(rows, -1, SAMPLING_BLOCK)
    block_cdf = blocks.sum(dim=-1).double().cumsum(dim=-1)
    uniform = torch.rand((rows, 1), dtype=torch.float64, device=probs.device)
    draw = _below(uniform * block_cdf[:, -1:], block_cdf[:, -1:])
    block = torch.searchsorted(block_cdf, draw, right=True)
    mass_before = torch.where(block > 0, block_cdf.gather(-1, (block - 1).clamp(min=0)), 0.0)
    within_cdf = blocks.gather(1, block[:, :, None].expand(-1, -1, SAMPLING_BLOCK)
                               ).squeeze(1).double().cumsum(dim=-1)
    # the block's own running sum can end a rounding error below its mass in block_cdf
    within = torch.searchsorted(within_cdf, _below(draw - mass_before, within_cdf[:, -1:]),
                                right=True)
    return (block * SAMPLING_BLOCK + within).squeeze(-1)


def _below(values: torch.Tensor, limit: torch.Tensor) -> torch.Tensor:
    """`values`, each at most the largest float below its row's `limit`."""
    return torch.minimum(values, torch.nextafter(limit, torch.zeros_like(limit)))


class HuggingfaceLoRALanguageModel(TrainableLanguageModel):
    """The trained policy: a Hugging Face causal LM with a PEFT LoRA adapter, which samples
    (each token with its log-prob), scores and trains. The LoRA parameters, their gradients
    and the optimizer state are float32 whatever `dtype` is. A group's identical prompts,
    and the prefix all of a call's prompts share (system prompt, task instructions), are
    prefilled once. `prefix_caching`, `fused_sampling` and `shared_prefix_training` only
    save time: none changes the results beyond rounding."""

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
        # trainer log-probs differ by about 1e-2 a token: give the RL callback `mismatch:
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
        # a multi-turn episode's next turn reuses its previous turn's keys and values and
        # feeds only the new tokens; dropped whenever the weights change
        prefix_caching: bool = True,
        # auto: grouped_sdpa on CPU (grouped key/value heads are not copied each step; a
        # decode step is two small products over the cache), transformers' sdpa on CUDA;
        # any transformers name works
        attn_implementation: str = "auto",
        # bfloat16: fp32 weights, only the trainer's forward and backward under autocast
        training_autocast: Literal["none", "bfloat16"] = "none",
        # decode from a copy whose LoRA layers that read one input (q/k/v, gate/up) run
        # base weights and adapter down-projections as one stacked product, refreshed when
        # the adapter changes (merging the adapter into bf16 weights would round it away)
        fused_sampling: bool = True,
        # rows that share a prefix (a group's prompt) are scored as one packed sequence
        # with the prefix once; log-probs and gradients match the plain path's to 1e-5
        shared_prefix_training: bool = True,
    ) -> None:
        self.model_name_or_path = model_name_or_path
        self.training_autocast = training_autocast
        self._gradient_checkpointing = gradient_checkpointing
        self._role_dict = role_dict_with_defaults(role_dict)
        self.lora_settings = lora_config or LoRASettings()
        self.prefix_caching = prefix_caching
        self._prefix_cache = PrefixCache()
        self._device = _choose_device(device)
        self.dtype = _choose_dtype(dtype, self.device)
        path = resolve_model_path(model_name_or_path)
        self._tokenizer = AutoTokenizer.from_pretrained(path)
        self._attn_implementation = attn_implementation  # as asked: a replica resolves "auto"
        if attn_implementation == "auto":  # see grouped_attention; CUDA kernels prefer sdpa
            attn_implementation = "sdpa" if self.device.type == "cuda" else GROUPED_SDPA
        base = AutoModelForCausalLM.from_pretrained(
            path, dtype=self.dtype, attn_implementation=attn_implementation).to(self.device)
        if gradient_checkpointing:
            base.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False})
        settings = self.lora_settings
        self.model: PeftModel = get_peft_model(base, LoraConfig(
            r=settings.r, lora_alpha=settings.lora_alpha, target_modules=settings.target_modules,
            lora_dropout=settings.lora_dropout, bias=settings.bias, task_type=settings.task_type,
            init_lora_weights=True))  # B = 0: the policy starts exactly at the base model
        if adapter_path is not None:
            self.load_adapter(Path(adapter_path), 0)
        self._max_context = max_context_tokens or int(
            getattr(base.config, "max_position_embeddings", 4096))
        self.shared_prefix_training = shared_prefix_training
        self._fused = FusedLoRASampler.of(self.model) if fused_sampling else None
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
                "max_context_tokens": trainer.max_context_tokens}

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

    def mark_updated(self) -> None:
        self.set_policy_version(self.policy_version + 1)

    def set_policy_version(self, version: int) -> None:
        self._prefix_cache.clear()  # cached keys and values are of the old weights
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
        rows = [list(prompt) for prompt in prompts for _ in range(params.n)]
        if not rows:
            return []
        if seed is not None:  # the sampler draws from torch's global generator
            torch.manual_seed(seed)
        was_training = self.model.training
        self.model.eval()  # LoRA dropout off while sampling
        try:
            generations = self._sample(rows, params)
        finally:
            self.model.train(was_training)
        return [generations[start:start + params.n]
                for start in range(0, len(generations), params.n)]

    def _sampling_model(self) -> torch.nn.Module:
        """The model that decodes: the fused copy, refreshed if the adapter changed."""
        if self._fused is None:
            return self.model
        if self._fused.refresh():
            self._prefix_cache.clear()  # cached keys and values are of the old weights
        return self._fused.model

    def _sample(self, rows: list[list[int]], params: SamplingParams) -> list[Generation]:
        model = self._sampling_model()
        stop_ids = torch.tensor(sorted(set(self.end_of_turn_ids()) | set(params.stop_token_ids)),
                                device=self.device)
        # Identical rows (a group's G copies of one prompt) are prefilled once, then
        # their cache rows are repeated.
        first_of: dict[tuple[int, ...], int] = {}
        source = [first_of.setdefault(tuple(row), len(first_of)) for row in rows]
        distinct = [list(row) for row in first_of]
        prefixes = [self._prefix_cache.longest_prefix(row) if self.prefix_caching else None
                    for row in distinct]
        prefixes = self._with_shared_prompt_prefix(model, distinct, prefixes)
        cache, input_ids, attention, positions = self._prefill_inputs(
            distinct, prefixes, reserve=params.max_new_tokens)
        logits = _next_token_logits(model, input_ids, attention, positions, cache)
        if len(distinct) < len(rows):
            repeat = torch.tensor(source, device=self.device)
            cache.batch_select_indices(repeat)
            attention, positions, logits = attention[repeat], positions[repeat], logits[repeat]
        next_position = positions[:, -1:] + 1

        sampled: list[list[int]] = [[] for _ in rows]
        logprobs: list[list[float]] = [[] for _ in rows]
        finish: list[str] = ["length"] * len(rows)
        ends: list[CachedPrefix] = []  # each row's keys/values when it finished
        alive = torch.arange(len(rows), device=self.device)  # original row of each batch row
        # Finished rows stay in the batch (their tokens ignored) until a quarter of it has
        # finished: dropping them copies every layer's cache, which costs more than
        # decoding a few extra rows.
        running = torch.ones(len(rows), dtype=torch.bool, device=self.device)
        for step in range(params.max_new_tokens):
            tokens, token_logprobs = _sample_from_logits(logits, params.temperature,
                                                         params.top_p)
            stopped = torch.isin(tokens, stop_ids) & running
            token_list, logprob_list = tokens.tolist(), token_logprobs.tolist()
            stop_list, row_list = stopped.tolist(), alive.tolist()
            for position in running.nonzero().squeeze(-1).tolist():
                row = row_list[position]
                sampled[row].append(token_list[position])
                logprobs[row].append(logprob_list[position])
                if stop_list[position]:
                    finish[row] = "stop"
            last_step = step == params.max_new_tokens - 1
            if self.prefix_caching:
                done = running if last_step else stopped
                for position in done.nonzero().squeeze(-1).tolist():
                    row = row_list[position]
                    # the cache holds what was fed: the prompt and all but the newest token
                    ends.append(_cached_row(cache, attention, position,
                                            (*rows[row], *sampled[row][:-1])))
            running = running & ~stopped
            if last_step or not bool(running.any()):
                break
            if int(running.sum()) <= COMPACT_BELOW * len(running):
                keep = running.nonzero().squeeze(-1)
                cache.batch_select_indices(keep)
                alive, tokens, running = alive[keep], tokens[keep], running[keep]
                attention, next_position = attention[keep], next_position[keep]
            attention = torch.cat([attention, attention.new_ones((len(alive), 1))], dim=-1)
            logits = _next_token_logits(model, tokens[:, None], attention, next_position,
                                        cache)
            next_position = next_position + 1
        if self.prefix_caching:
            self._prefix_cache.replace(ends)
        version = self.policy_version
        return [Generation(sampled[i], logprobs[i], finish[i], version)  # type: ignore[arg-type]
                for i in range(len(rows))]

    def _with_shared_prompt_prefix(self, model: torch.nn.Module, rows: list[list[int]],
                                   prefixes: list[CachedPrefix | None]
                                   ) -> list[CachedPrefix | None]:
        """`prefixes`, with the longest prefix that the call's distinct prompts share (the
        system prompt and the task's instructions) prefilled once, as one row, and given to
        each row that has no longer one cached: the quickstart's 8 prompts of 87 tokens
        share 65, a DB-bench batch's first prompts most of their 380."""
        length = min(len(os.path.commonprefix(rows)), *(len(row) - 1 for row in rows))
        users = sum(prefix is None or len(prefix.token_ids) < length for prefix in prefixes)
        if length < SHARED_PROMPT_MIN_TOKENS or users < 2:
            return prefixes
        token_ids = torch.tensor([rows[0][:length]], device=self.device)
        attention = torch.ones_like(token_ids)
        cache = growing_cache()
        _next_token_logits(model, token_ids, attention,  # the one head row costs ~0.1 ms
                           torch.arange(length, device=self.device)[None], cache)
        shared = _cached_row(cache, attention, 0, tuple(rows[0][:length]))
        return [prefix if prefix is not None and len(prefix.token_ids) >= length else shared
                for prefix in prefixes]

    def _prefill_inputs(self, rows: list[list[int]], prefixes: list[CachedPrefix | None],
                        reserve: int = 0
                        ) -> tuple[DynamicCache, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Cache, ids, attention mask and positions for the first forward of a call; the
        cache has room for `reserve` more positions.

        Row layout: [padding][cached prefix][gap][new tokens], each part right-aligned, so
        that every row's newest token sits in the last column; padding and gap are masked.
        Positions continue from the cached length (the cached keys carry their rotary
        positions already).
        """
        cached = [len(prefix.token_ids) if prefix else 0 for prefix in prefixes]
        news = [row[length:] for row, length in zip(rows, cached, strict=True)]
        cache_width, new_width = max(cached), max(len(new) for new in news)
        input_ids = torch.full((len(rows), new_width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(rows), cache_width + new_width), dtype=torch.long)
        positions = torch.zeros((len(rows), new_width), dtype=torch.long)
        for index, (new, length) in enumerate(zip(news, cached, strict=True)):
            input_ids[index, new_width - len(new):] = torch.tensor(new)
            attention[index, cache_width - length:cache_width] = 1
            attention[index, cache_width + new_width - len(new):] = 1
            positions[index, new_width - len(new):] = torch.arange(length, length + len(new))
        layers = []
        if cache_width:
            template = next(prefix for prefix in prefixes if prefix is not None).layers
            for layer, (keys, values) in enumerate(template):
                batch_keys = keys.new_zeros((len(rows), keys.shape[0], cache_width,
                                             keys.shape[2]))
                batch_values = values.new_zeros((len(rows), values.shape[0], cache_width,
                                                 values.shape[2]))
                for index, prefix in enumerate(prefixes):
                    if prefix is not None:
                        length = cached[index]
                        batch_keys[index, :, cache_width - length:] = prefix.layers[layer][0]
                        batch_values[index, :, cache_width - length:] = prefix.layers[layer][1]
                layers.append((batch_keys, batch_values))
        cache = growing_cache(layers, reserve=cache_width + new_width + reserve)
        return (cache, input_ids.to(self.device), attention.to(self.device),
                positions.to(self.device))

    # ---- TrainableLanguageModel ----------------------------------------------------
    def score(self, batch: TokenBatch, *, temperature: float = 1.0, with_adapter: bool = True,
              with_entropy: bool = False) -> ScoredTokens:
        input_ids = batch.input_ids.to(self.device)
        target_mask = batch.loss_mask.to(self.device)[:, 1:] > 0
        base = self.model.get_base_model()
        adapter = nullcontext() if with_adapter else self.model.disable_adapter()
        autocast = torch.autocast(self.device.type, dtype=torch.bfloat16,
                                  enabled=self.training_autocast == "bfloat16")
        packed = self._packed(batch) if self.shared_prefix_training else None
        with adapter, autocast:
            if packed is None:
                hidden = base.get_decoder()(
                    input_ids=input_ids,
                    attention_mask=batch.attention_mask.to(self.device)).last_hidden_state
                # hidden state t predicts token t + 1: score only positions the loss needs
                selected = hidden[:, :-1][target_mask]
            else:
                hidden = base.get_decoder()(
                    input_ids=packed.input_ids.to(self.device),
                    attention_mask=packed.attention.to(self.device),
                    position_ids=packed.position_ids.to(self.device)).last_hidden_state
                rows, positions = target_mask.nonzero(as_tuple=True)
                pack_index, columns = packed.locate(rows.cpu(), positions.cpu())
                selected = hidden[pack_index.to(self.device), columns.to(self.device)]
        targets = input_ids[:, 1:][target_mask]
        head = base.get_output_embeddings()
        scale = 1.0 / (temperature if temperature > 0 else 1.0)

        def chunk_scores(h: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            with torch.autocast(self.device.type, dtype=torch.bfloat16,
                                enabled=self.training_autocast == "bfloat16"):
                logits = head(h)
            log_probs = torch.log_softmax(logits.float() * scale, dim=-1)
            token_logprobs = log_probs.gather(-1, t[:, None]).squeeze(-1)
            entropy = -(log_probs.exp() * log_probs).sum(-1) if with_entropy else token_logprobs
            return token_logprobs, entropy

        pieces = []
        for start in range(0, selected.shape[0], LOGIT_CHUNK):
            h, t = selected[start:start + LOGIT_CHUNK], targets[start:start + LOGIT_CHUNK]
            # recomputing the chunk in backward keeps only hidden states, not vocab-wide logits
            pieces.append(checkpoint(chunk_scores, h, t, use_reentrant=False)
                          if torch.is_grad_enabled() else chunk_scores(h, t))
        flat_logprobs = torch.cat([p[0] for p in pieces]) if pieces else selected.new_zeros(0)
        logprobs = torch.zeros(input_ids.shape, dtype=torch.float32, device=self.device)
        logprobs[:, 1:][target_mask] = flat_logprobs.float()
        entropy = None
        if with_entropy:
            entropy = torch.zeros_like(logprobs)
            entropy[:, 1:][target_mask] = torch.cat([p[1] for p in pieces]).float()
        return ScoredTokens(logprobs=logprobs, entropy=entropy)

    @property
    def packs_shared_prefixes(self) -> bool:
        return self.shared_prefix_training

    def _packed(self, batch: TokenBatch) -> PackedBatch | None:
        """The rows packed by shared prefix, or None where nothing is shared (or the rows
        are not right-padded, which packing assumes)."""
        attention = batch.attention_mask
        lengths = attention.sum(-1).tolist()
        if not all(bool(attention[row, :length].all()) for row, length in enumerate(lengths)):
            return None
        sequences = [batch.input_ids[row, :length].tolist()
                     for row, length in enumerate(lengths)]
        packs = plan_packs(sequences)
        if all(len(pack.rows) == 1 for pack in packs):
            return None
        return pack_rows(batch.input_ids, lengths, packs, self.pad_id)

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [parameter for parameter in self.model.parameters() if parameter.requires_grad]

    def replica_parameters(self, device: str) -> dict[str, Any]:
        return {"model_name_or_path": self.model_name_or_path, "role_dict": self.role_dict,
                "lora_config": self.lora_settings,
                "dtype": str(self.dtype).removeprefix("torch."),
                "device": device, "max_context_tokens": self.max_context_tokens,
                "gradient_checkpointing": self._gradient_checkpointing,
                "prefix_caching": False, "attn_implementation": self._attn_implementation,
                "training_autocast": self.training_autocast, "fused_sampling": False,
                "shared_prefix_training": self.shared_prefix_training}

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

    def train_mode(self) -> None:
        self._prefix_cache.clear()  # the weights are about to change
        self.model.train()

    def eval_mode(self) -> None:
        self.model.eval()

    # LifelongAgentBench's method names.
    def save_lora(self, directory: str | Path) -> None:
        self.save_adapter(Path(directory))

    def _inference_with_logprobs(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                                 seed: int | None = None) -> list[list[Generation]]:
        return self.generate(prompts, params, seed)
