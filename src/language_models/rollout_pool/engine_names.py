"""The `engine` a rollout pool's config names: a short name or a dotted class path,
resolved to an `InferenceEngine` subclass when the config is read."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

from src.language_models.language_model import InferenceEngine

# The short names configs use for `engine`; any other engine is named by its dotted path.
ENGINES: dict[str, str] = {
    "hf": "src.language_models.instance.huggingface_lora_language_model"
          ".HuggingfaceLoRALanguageModel",
    "vllm": "src.language_models.instance.vllm_language_model.VLLMLanguageModel",
}


def engine_class(engine: str) -> type[InferenceEngine]:
    """The engine class a short name from ENGINES or a dotted path 'package.module.Class'
    names. Importing its module is cheap for the shipped engines: vLLM itself is imported
    only when an engine is built."""
    path = ENGINES.get(engine, engine)
    module_name, _, name = path.rpartition(".")
    if not module_name:
        raise ValueError(f"engine '{engine}' is neither a short name ({', '.join(ENGINES)}) "
                         "nor a dotted path 'package.module.Class'")
    try:
        found = getattr(importlib.import_module(module_name), name, None)
    except ImportError as error:
        raise ValueError(f"engine '{engine}': cannot import {module_name}: {error}") from error
    if not (inspect.isclass(found) and issubclass(found, InferenceEngine)):
        raise ValueError(f"engine '{engine}' names {found!r}, not an InferenceEngine subclass")
    return found


class EngineName(str):
    """An `engine` value, checked when the config is read (before any weights load) by
    importing the class it names. A str subclass rather than `Annotated[str, validator]`:
    the config reads constructor hints without their `Annotated` metadata."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any,
                                     handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(cls._checked,
                                                            core_schema.str_schema())

    @staticmethod
    def _checked(engine: str) -> str:
        engine_class(engine)
        return engine
