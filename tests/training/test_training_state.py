"""A trainer's checkpoint read back: what a checkpoint written before checksums were kept
can still hold after damage that its headers do not show (weights that are not finite
numbers, an optimiser state of another shape) is named as damaged, never loaded."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from src.language_models.instance.huggingface_lora_language_model import (
    HuggingfaceLoRALanguageModel,
    LoRASettings,
)
from src.storage.files import DamagedRunFolder
from src.training.learner import Learner
from src.training.settings import OptimizerSettings
from src.training.training_state import ADAPTER, OPTIMIZER


def _learner(path: Path) -> Learner:
    model = HuggingfaceLoRALanguageModel(str(path), dtype="float32", device="cpu",
                                         lora_config=LoRASettings(r=4, lora_alpha=8))
    return Learner(model, OptimizerSettings())


@pytest.fixture
def saved(tiny_model_path: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "checkpoint-000001"
    folder.mkdir()
    learner = _learner(tiny_model_path)
    with torch.no_grad():  # an adapter of non-zero values, as after training
        for parameter in learner.model.trainable_parameters():
            parameter.fill_(0.01)
    learner.save(folder, {})
    return folder


def test_an_adapter_overwritten_in_the_middle_is_named(saved: Path,
                                                       tiny_model_path: Path) -> None:
    weights = saved / ADAPTER / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 2048] = b"\xff" * 2048  # NaN in every dtype
    weights.write_bytes(bytes(data))
    with pytest.raises(DamagedRunFolder, match=f"{saved / ADAPTER}: [1-9][0-9]* of the "
                                               "adapter's tensors hold values that are not "
                                               "finite numbers"):
        _learner(tiny_model_path).restore(saved)


@pytest.mark.parametrize(("content", "problem"), [
    ({"optimizer": [1, 2], "scheduler": None}, "not an optimiser's state"),
    ({"optimizer": {"state": {}, "param_groups": []}, "scheduler": None},
     "not the state of this trainer's optimiser"),
])
def test_an_optimiser_state_of_another_shape_is_named(saved: Path, tiny_model_path: Path,
                                                      content: dict, problem: str) -> None:
    torch.save(content, saved / OPTIMIZER)
    with pytest.raises(DamagedRunFolder, match=f"{saved / OPTIMIZER}: {problem}"):
        _learner(tiny_model_path).restore(saved)


def test_an_undamaged_checkpoint_loads(saved: Path, tiny_model_path: Path) -> None:
    learner = _learner(tiny_model_path)
    learner.restore(saved)
    assert all(torch.all(parameter == 0.01)
               for parameter in learner.model.trainable_parameters())
