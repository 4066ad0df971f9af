"""How far a measured figure is from this machine's limits, as a printed line.

`measure_peaks` times what the hardware can do here: a large fp32 and bf16 matrix
product (FLOP/s) and a streaming read of a 1 GiB tensor (bytes/s). `decode_work` and
`training_work` count the FLOPs and bytes a decoder's work needs at the least (every
weight read once per decode step, each token's matrix products), from the model's
config; `roofline_line` prints achieved FLOP/s and bytes/s against the peaks.

python bench/roofline.py   prints the peaks of this machine
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class Peaks:
    fp32_flops: float
    bf16_flops: float
    read_bytes_per_s: float

    def flops(self, dtype: torch.dtype) -> float:
        return self.bf16_flops if dtype in (torch.bfloat16, torch.float16) else self.fp32_flops


def _matmul_flops(dtype: torch.dtype, size: int = 2048, repeats: int = 8) -> float:
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    for _ in range(2):
        a @ b
    started = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * size**3 * repeats / (time.perf_counter() - started)


def _read_bytes_per_s(megabytes: int = 1024, repeats: int = 4) -> float:
    data = torch.ones(megabytes * 2**20 // 4, dtype=torch.float32)
    data.sum()
    started = time.perf_counter()
    for _ in range(repeats):
        data.sum()
    return data.numel() * 4 * repeats / (time.perf_counter() - started)


def measure_peaks() -> Peaks:
    return Peaks(_matmul_flops(torch.float32), _matmul_flops(torch.bfloat16),
                 _read_bytes_per_s())


@dataclass(frozen=True)
class DecoderShape:
    linear_parameters: int  # the decoder layers' matrices (what every token multiplies)
    hidden: int
    vocab: int
    layers: int
    kv_width: int  # key/value heads x head size
    query_width: int  # attention heads x head size

    @classmethod
    def of(cls, model: torch.nn.Module) -> DecoderShape:
        config = model.config
        head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        linear = sum(module.weight.numel() for name, module in model.named_modules()
                     if isinstance(module, torch.nn.Linear) and ".layers." in name
                     and "lora_" not in name)
        return cls(linear, config.hidden_size, config.vocab_size, config.num_hidden_layers,
                   config.num_key_value_heads * head, config.num_attention_heads * head)


@dataclass(frozen=True)
class Work:
    flops: float
    bytes: float


def decode_work(shape: DecoderShape, generated_tokens: int, decode_steps: int,
                mean_context: float, mean_batch: float, dtype: torch.dtype) -> Work:
    """At the least: each generated token multiplies every layer matrix and the head and
    attends over its context; each step reads every weight once and the batch's keys and
    values."""
    size = torch.finfo(dtype).bits // 8
    per_token = 2 * (shape.linear_parameters + shape.hidden * shape.vocab) \
        + 4 * shape.layers * shape.query_width * mean_context
    weights = (shape.linear_parameters + shape.hidden * shape.vocab) * size
    cache = 2 * shape.layers * shape.kv_width * mean_context * mean_batch * size
    return Work(per_token * generated_tokens, decode_steps * (weights + cache))


def training_work(shape: DecoderShape, fed_tokens: int, scored_tokens: int,
                  dtype: torch.dtype) -> Work:
    """Forward and backward of the frozen base (2 + 2 FLOPs per weight and token: the
    backward needs gradients of activations only; LoRA's are negligible) and the head at
    the scored positions (2 + 2 + 2); weights read once each way."""
    size = torch.finfo(dtype).bits // 8
    flops = 4 * shape.linear_parameters * fed_tokens + 6 * shape.hidden * shape.vocab * scored_tokens
    return Work(flops, 2 * (shape.linear_parameters + shape.hidden * shape.vocab) * size)


def roofline_line(label: str, work: Work, seconds: float, dtype: torch.dtype,
                  peaks: Peaks) -> str:
    achieved, streamed = work.flops / seconds, work.bytes / seconds
    peak = peaks.flops(dtype)
    return (f"roofline {label}: {achieved / 1e9:.1f} GFLOP/s = {achieved / peak:.1%} of the "
            f"measured {str(dtype).removeprefix('torch.')} peak {peak / 1e9:.0f} GFLOP/s; "
            f"{streamed / 1e9:.1f} GB/s = {streamed / peaks.read_bytes_per_s:.1%} of the "
            f"measured read bandwidth {peaks.read_bytes_per_s / 1e9:.1f} GB/s")


if __name__ == "__main__":
    peaks = measure_peaks()
    print({key: f"{value / 1e9:.1f} G/s" for key, value in asdict(peaks).items()})
