"""Loading verifiers environments and running their coroutines from the loop's threads.

verifiers resolves a taskset id by importing it as a top-level module (`qa-env` ->
`qa_env`): a dotted path fails there (it first looks for `verifiers.v1.tasksets.<id>`,
whose parent package does not exist). A taskset package given by its dotted path is
therefore imported here and registered under an undotted alias; so is the chat harness.
Tool servers run as `python -m <module>` in a scratch folder: the folder the package was
imported from is added to PYTHONPATH, so that they import it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import sys
import threading
from collections.abc import Coroutine
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from src.tasks.instance.optional_packages import import_optional

import_optional("verifiers", "verifiers")  # where it is missing: the pip command
vf = importlib.import_module("verifiers.v1")
from src.tasks.instance.verifiers import chat_harness  # noqa: E402 - needs verifiers

T = TypeVar("T")
# the endpoint takes no key; verifiers reads one from this variable ("EMPTY" when unset)
API_KEY_VARIABLE = "AGENT_RL_ENDPOINT_KEY"


class TraceFailure(RuntimeError):
    """A verifiers rollout whose model calls failed (the endpoint refused or broke one)."""


def taskset_id_of(environment: str) -> str:
    """The id verifiers' loader resolves to `environment`: an installed id as it is, a
    dotted module path imported and registered under an alias. ValueError when neither."""
    _register(chat_harness.HARNESS_ID, chat_harness)
    if "." not in environment or "/" in environment or "@" in environment:
        return environment  # an id (hub ids are owner/name@version)
    try:
        module = importlib.import_module(environment)
    except ModuleNotFoundError as error:
        raise ValueError(f"environment: cannot import the taskset package '{environment}' "
                         f"({error})") from error
    alias = environment.replace(".", "__").lower()
    _register(alias, module)
    _share_import_root(module)
    return alias


def environment_config(taskset_id: str, arguments: dict[str, Any], *, where: str,
                       max_turns: int, tool_protocol: str, env_arguments: dict[str, Any],
                       timeout_s: float) -> Any:
    """The verifiers EnvConfig of one taskset config, with its agent on the chat harness in
    this process (a local runtime: no sandbox, no tunnel); errors start with `where`."""
    try:
        return vf.resolve_env_config({
            "timeout": {"episode": timeout_s}, **env_arguments,
            "taskset": {"id": taskset_id, **arguments},
            "agent": {"harness": {"id": chat_harness.HARNESS_ID,
                                  "tool_protocol": tool_protocol},
                      "runtime": {"type": "subprocess"}, "max_turns": max_turns},
        })
    except ModuleNotFoundError as error:  # verifiers' own message: not installed
        raise ValueError(f"environment: {error}") from error
    except ValueError as error:  # pydantic: a field the taskset does not have, a bad value
        raise ValueError(f"{where}: {error}") from error


def model_context(base_url: str) -> Any:
    """The model a rollout calls. The endpoint samples with the assignment's settings, so
    none are sent; the model name is not used either."""
    return vf.ModelContext(model="policy", sampling=vf.SamplingConfig(),
                           client=vf.EvalClientConfig(base_url=base_url,
                                                      api_key_var=API_KEY_VARIABLE))


class ServingLoop:
    """A daemon thread running an asyncio loop that holds the environments' `serving()`
    (their shared tool servers and interception), which rollouts of every thread share:
    `serving()` sets them on the env object, so it is entered once, on this loop."""

    def __init__(self, envs: list[Any]) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="verifiers-serving")
        self._thread.start()
        self._stack = contextlib.AsyncExitStack()
        try:
            self.run(self._serve(envs))
        except BaseException:
            self.close()
            raise

    async def _serve(self, envs: list[Any]) -> None:
        for env in envs:
            await self._stack.enter_async_context(env.serving())

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """The coroutine's result, run on the loop (called from any other thread)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def close(self) -> None:
        """Leave `serving()` (stops the tool servers) and end the thread. Safe twice."""
        if self._loop.is_closed():
            return
        try:
            self.run(self._stack.aclose())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.run_until_complete(self._loop.shutdown_default_executor())
            self._loop.close()


def _register(alias: str, module: ModuleType) -> None:
    registered = sys.modules.setdefault(alias, module)
    if registered is not module:
        raise ValueError(f"environment: the alias '{alias}' is taken by the module "
                         f"'{registered.__name__}'")


def _share_import_root(module: ModuleType) -> None:
    """Put the folder the module's top-level package lies in on PYTHONPATH."""
    if module.__file__ is None:
        return
    path = Path(module.__file__).resolve()
    if path.name == "__init__.py":
        path = path.parent
    root = str(path.parents[module.__name__.count(".")])
    paths = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])
