"""How far a measured figure is from this machine's limits, as a printed line.

`measure_peaks` times what the hardware can do here (the CPU, or a CUDA GPU given as
`device`): a large fp32 and bf16 matrix product (FLOP/s) and a streaming read of a 1 GiB
tensor (bytes/s). `decode_work`, `forward_work` and `training_work` count the FLOPs and
bytes a decoder's work needs at the least (every weight read once per decode step, each
token's matrix products), from the model's config; `roofline_line` prints achieved
FLOP/s and bytes/s against the peaks.

python bench/roofline.py [--device cuda]   prints the peaks of this machine
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from src.language_models.shared_prefix import plan_packs  # noqa: E402


@dataclass(frozen=True)
class Peaks:
    fp32_flops: float
    bf16_flops: float
    read_bytes_per_s: float

    def flops(self, dtype: torch.dtype) -> float:
        return self.bf16_flops if dtype in (torch.bfloat16, torch.float16) else self.fp32_flops


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _matmul_flops(dtype: torch.dtype, device: torch.device, size: int,
                  repeats: int = 8) -> float:
    a = torch.randn(size, size, dtype=dtype, device=device)
    b = torch.randn(size, size, dtype=dtype, device=device)
    for _ in range(2):
        a @ b
    _synchronize(device)
    started = time.perf_counter()
    for _ in range(repeats):
        a @ b
    _synchronize(device)
    return 2 * size**3 * repeats / (time.perf_counter() - started)


def _read_bytes_per_s(device: torch.device, megabytes: int = 1024, repeats: int = 4) -> float:
    data = torch.ones(megabytes * 2**20 // 4, dtype=torch.float32, device=device)
    data.sum()
    _synchronize(device)
    started = time.perf_counter()
    for _ in range(repeats):
        data.sum()
    _synchronize(device)
    return data.numel() * 4 * repeats / (time.perf_counter() - started)


def measure_peaks(device: torch.device | str = "cpu") -> Peaks:
    """A GPU reaches its matrix peak only with products far larger than a CPU needs."""
    device = torch.device(device)
    size = 8192 if device.type == "cuda" else 2048
    return Peaks(_matmul_flops(torch.float32, device, size),
                 _matmul_flops(torch.bfloat16, device, size), _read_bytes_per_s(device))


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

    @property
    def matrix_parameters(self) -> int:
        """The layers' matrices and the head: what a pass over one token multiplies, and
        what a pass reads at the least."""
        return self.linear_parameters + self.hidden * self.vocab


@dataclass(frozen=True)
class Work:
    flops: float
    bytes: float

    def __add__(self, other: Work) -> Work:
        return Work(self.flops + other.flops, self.bytes + other.bytes)


def _bytes_per_element(dtype: torch.dtype) -> int:
    return torch.finfo(dtype).bits // 8


def decode_work(shape: DecoderShape, generated_tokens: int, decode_steps: int,
                mean_context: float, mean_batch: float, dtype: torch.dtype) -> Work:
    """At the least: each generated token multiplies every layer matrix and the head and
    attends over its context; each step reads every weight once and the batch's keys and
    values."""
    size = _bytes_per_element(dtype)
    per_token = 2 * shape.matrix_parameters + 4 * shape.layers * shape.query_width * mean_context
    cache = 2 * shape.layers * shape.kv_width * mean_context * mean_batch * size
    return Work(per_token * generated_tokens,
                decode_steps * (shape.matrix_parameters * size + cache))


def tokens_fed_by(sequences: list[list[int]], packs_shared_prefixes: bool) -> int:
    """Tokens a forward over `sequences` feeds at the least: a shared prefix once where the
    model packs rows by shared prefix (src.language_models.shared_prefix), every row whole
    otherwise. A pack that the trainer splits into micro-batches feeds its prefix again."""
    lengths = [len(sequence) for sequence in sequences]
    if not packs_shared_prefixes:
        return sum(lengths)
    return sum(pack.length(lengths) for pack in plan_packs(sequences))


def forward_work(shape: DecoderShape, fed_tokens: int, scored_tokens: int,
                 dtype: torch.dtype) -> Work:
    """A forward without gradients (a reference or old log-prob pass): 2 FLOPs per weight
    and fed token, the head at the scored positions; weights read once."""
    flops = 2 * shape.linear_parameters * fed_tokens + 2 * shape.hidden * shape.vocab * scored_tokens
    return Work(flops, shape.matrix_parameters * _bytes_per_element(dtype))


def training_work(shape: DecoderShape, fed_tokens: int, scored_tokens: int,
                  dtype: torch.dtype) -> Work:
    """Forward and backward of the frozen base (2 + 2 FLOPs per weight and token: the
    backward needs gradients of activations only; LoRA's are negligible) and the head at
    the scored positions (2 + 2 + 2); weights read once each way."""
    flops = 4 * shape.linear_parameters * fed_tokens + 6 * shape.hidden * shape.vocab * scored_tokens
    return Work(flops, 2 * shape.matrix_parameters * _bytes_per_element(dtype))


def roofline_line(label: str, work: Work, seconds: float, dtype: torch.dtype,
                  peaks: Peaks) -> str:
    achieved, streamed = work.flops / seconds, work.bytes / seconds
    peak = peaks.flops(dtype)
    return (f"roofline {label}: {achieved / 1e9:.1f} GFLOP/s = {achieved / peak:.1%} of the "
            f"measured {str(dtype).removeprefix('torch.')} peak {peak / 1e9:.0f} GFLOP/s; "
            f"{streamed / 1e9:.1f} GB/s = {streamed / peaks.read_bytes_per_s:.1%} of the "
            f"measured read bandwidth {peaks.read_bytes_per_s / 1e9:.1f} GB/s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu")
    peaks = measure_peaks(parser.parse_args().device)
    print({key: f"{value / 1e9:.1f} G/s" for key, value in asdict(peaks).items()})
