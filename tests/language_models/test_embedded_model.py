"""Converting the embedded GGUF model into a Hugging Face folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from src.language_models.embedded_model import DEFAULT_MODEL, resolve_model_path
from tests.conftest import requires_embedded_model


@pytest.mark.slow
@requires_embedded_model
def test_first_conversion_leaves_the_global_rng_untouched(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # A first run converts, later runs do not: seeded LoRA initialisation after the
    # conversion must not depend on which of the two happened.
    monkeypatch.setenv("AGENT_RL_CACHE", str(tmp_path))
    torch.manual_seed(0)
    expected = torch.rand(4)
    torch.manual_seed(0)
    folder = Path(resolve_model_path(DEFAULT_MODEL))
    assert (folder / "config.json").is_file() and folder.is_relative_to(tmp_path)
    assert torch.equal(torch.rand(4), expected)


def test_unknown_embedded_model_names_the_available_ones() -> None:
    with pytest.raises(ValueError, match="embedded:smollm2-135m"):
        resolve_model_path("embedded:no-such-model")
