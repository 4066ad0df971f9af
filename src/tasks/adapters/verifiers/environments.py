"""Loading verifiers environments and running their coroutines from the loop's threads.

verifiers resolves a taskset id by importing it as a top-level module (`qa-env` ->
`qa_env`): a dotted path fails there (it first looks for `verifiers.v1.tasksets.<id>`,
whose parent package does not exist). A taskset package given by its dotted path is
therefore imported here and registered under an undotted alias; so is the chat harness.
Tool servers run as `python -m <module>` in a scratch folder: the folder the package was
imported from is added to PYTHONPATH, so that they import it too.

The environment's code (its tools' client side, rewards, `finalize`) runs on one asyncio
loop in a thread of its own (`ServingLoop`); every wait on it is bounded, since code that
blocks instead of awaiting (a `time.sleep` in a reward) holds the loop, and with it the
environment's own deadlines, for as long as it blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.metadata
import importlib.util
import logging
import os
import pkgutil
import sys
import threading
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from concurrent.futures import TimeoutError as FutureTimeoutError
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from src.tasks.optional_packages import import_optional
from src.tasks.task import TaskSettingError, unknown_name

import_optional("verifiers", "verifiers")  # where it is missing: the pip command
vf = importlib.import_module("verifiers.v1")
vf_loaders = importlib.import_module("verifiers.v1.utils.loaders")
vf_clients = importlib.import_module("verifiers.v1.clients")
vf_interception = importlib.import_module("verifiers.v1.interception")
vf_tasksets = importlib.import_module("verifiers.v1.tasksets")
from src.tasks.adapters.verifiers import chat_harness  # noqa: E402 - needs verifiers

logger = logging.getLogger(__name__)
T = TypeVar("T")
# the variable verifiers would read the endpoint's key from: never set (the key would be
# inherited by every tool server), so it reads "EMPTY"; `keyed_client` gives the key
API_KEY_VARIABLE = "AGENT_RL_ENDPOINT_KEY"
START_TIMEOUT_S = 300.0  # to start serving: tool servers, the interception
CLOSE_TIMEOUT_S = 10.0  # to stop serving, then for the loop's thread to end
# beyond a deadline of verifiers' own, before the wait on the loop gives up: its own
# deadline ends a rollout that awaits, this one a loop that its code blocks
DEADLINE_GRACE_S = 5.0


class TraceFailure(RuntimeError):
    """A verifiers rollout whose model calls failed (the endpoint refused or broke one)."""


def taskset_id_of(environment: str) -> str:
    """The id verifiers' loader resolves to `environment`: an installed id as it is, a
    dotted module path imported and registered under an alias. TaskSettingError (key
    `environment`, with the closest names) when neither is there."""
    _register(chat_harness.HARNESS_ID, chat_harness)
    if "." not in environment or "/" in environment or "@" in environment:
        # an id (hub ids are owner/name@version), imported as verifiers imports it
        module = environment.rsplit("/", 1)[-1].split("@", 1)[0].replace("-", "_").lower()
        if not any(_module_exists(name) for name in (f"{vf_tasksets.__name__}.{module}",
                                                     module)):
            raise TaskSettingError(("environment",), unknown_name(
                "verifiers environment", environment, installed_environments()))
        return environment
    try:
        module = importlib.import_module(environment)
    except ModuleNotFoundError as error:
        if error.name is None or not environment.startswith(error.name):
            raise  # the package itself imports something that is missing
        raise TaskSettingError(("environment",), _unknown_module(environment)) from error
    alias = environment.replace(".", "__").lower()
    _register(alias, module)
    _share_import_root(module)
    return alias


def installed_environments() -> list[str]:
    """The verifiers environment ids this Python has: the tasksets verifiers ships and the
    packages installed that require verifiers."""
    ids = [module.name for module in pkgutil.iter_modules(vf_tasksets.__path__)]
    for distribution in importlib.metadata.distributions():
        if any(requirement.split(";")[0].strip().lower().startswith("verifiers")
               for requirement in distribution.requires or ()):
            ids.append(distribution.metadata["Name"])
    return sorted(set(ids))


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package that is not there
        return False


def _unknown_module(path: str) -> str:
    """'unknown module' with the closest modules of the deepest package of `path` that
    imports."""
    parts = path.split(".")
    for depth in range(len(parts) - 1, -1, -1):
        parent = ".".join(parts[:depth])
        if depth and not _module_exists(parent):
            continue
        package = importlib.import_module(parent) if depth else None
        search = getattr(package, "__path__", None) if package else None
        if depth and search is None:
            continue
        known = [f"{parent + '.' if depth else ''}{name}" for name in _submodules(search)]
        return unknown_name("taskset package", ".".join(parts[:depth + 1]), known) + (
            f" (in '{path}')" if depth + 1 < len(parts) else "")
    return unknown_name("taskset package", path, [])


def _submodules(search: Sequence[str] | None) -> list[str]:
    """The modules and packages in `search` (sys.path where None), namespace packages
    (folders without an `__init__.py`) included."""
    names = {module.name for module in pkgutil.iter_modules(search)}
    for folder in search if search is not None else sys.path:
        with contextlib.suppress(OSError):
            names.update(entry.name for entry in Path(folder or ".").iterdir()
                         if entry.is_dir() and entry.name.isidentifier())
    return sorted(names)


def environment_config(taskset_id: str, arguments: Mapping[str, Any], *, key: str,
                       max_turns: int, tool_protocol: str, env_arguments: Mapping[str, Any],
                       timeout_s: float) -> Any:
    """The verifiers EnvConfig of one taskset config (`arguments`, the task parameter
    `key`), with its agent on the chat harness in this process (a local runtime: no
    sandbox, no tunnel; one interception server, which `keyed_client` gives each rollout's
    key). A field the environment does not take, or a bad value: TaskSettingError at the
    field's path under `key` (or under `env_arguments`)."""
    data = {"timeout": {"episode": timeout_s}, **env_arguments,
            "interception": {"type": "server"},
            "taskset": {"id": taskset_id, **arguments},
            "agent": {"harness": {"id": chat_harness.HARNESS_ID,
                                  "tool_protocol": tool_protocol},
                      "runtime": {"type": "subprocess"}, "max_turns": max_turns}}
    try:
        return vf.resolve_env_config(data)
    except ModuleNotFoundError as error:  # verifiers' own message: not installed
        raise TaskSettingError(("environment",), str(error)) from error
    except ValidationError as error:  # a field the environment does not have, a bad value
        raise _setting_error(error, taskset_id, key) from error


def _setting_error(error: ValidationError, taskset_id: str, key: str) -> TaskSettingError:
    """The first of pydantic's errors as a TaskSettingError at the task parameter's path:
    the taskset's fields are `key`'s, the env config's own `env_arguments`'."""
    first = error.errors()[0]
    location = [str(part) for part in first["loc"]]
    if location[:1] == ["taskset"]:
        path, config = [key, *location[1:]], vf_loaders.taskset_config_type(taskset_id)
    else:
        path, config = ["env_arguments", *location], vf_loaders.env_config_type(taskset_id)
    if first["type"] == "extra_forbidden":
        fields = _fields_at(config, path[1:-1])
        message = unknown_name("argument", path[-1], fields)
        if fields:
            message += f" (it takes {', '.join(fields)})"
    else:
        message = f"{first['msg']} (got {first.get('input')!r:.200})"
    return TaskSettingError(path, f"{'.'.join(path)}: {message}")


def _fields_at(model: type[BaseModel], location: Sequence[str]) -> list[str]:
    """The field names of the config model nested in `model` at `location` (none where
    the walk leaves pydantic models: a union, a mapping)."""
    for part in location:
        field = model.model_fields.get(part)
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return list(model.model_fields)


def model_context(base_url: str) -> Any:
    """The model a rollout calls. The endpoint samples with the assignment's settings, so
    none are sent; the model name is not used either."""
    return vf.ModelContext(model="policy", sampling=vf.SamplingConfig(),
                           client=vf.EvalClientConfig(base_url=base_url,
                                                      api_key_var=API_KEY_VARIABLE))


@contextlib.asynccontextmanager
async def keyed_client(env: Any, context: Any, api_key: str) -> AsyncIterator[None]:
    """While a rollout of `context` runs, the interception forwards its model calls with
    a client that holds `api_key` itself. verifiers reads a key from a variable of the
    process environment, which several rollout threads would write at once and every
    tool server started later would inherit; its interception server takes the client of
    a call's endpoint config from its table, where this one is put for the rollout (and
    closed after it, not kept for the run)."""
    server = env._interception  # one InterceptionServer: `environment_config` asks for it
    if not isinstance(server, vf_interception.InterceptionServer):
        raise TypeError(f"the verifiers env serves through {type(server).__name__}, not "
                        "the one interception server a rollout's key is given to")
    key = context.client.model_dump_json()
    client = vf_clients.EvalClient(context.client)
    client.api_key = api_key
    server.clients[key] = client
    try:
        yield
    finally:
        server.clients.pop(key, None)
        await client.close()


class EnvironmentOverrun(RuntimeError):
    """The environment's code did not finish within its bound (it blocked the loop, or
    awaited past its deadline). Not a TimeoutError: the rollout reads one raised out of
    an environment's step as the step's own bound running out."""


class ServingLoop:
    """A daemon thread running an asyncio loop that holds the environments' `serving()`
    (their shared tool servers and interception), which rollouts of every thread share:
    `serving()` sets them on the env object, so it is entered once, on this loop. Each
    wait on the loop is bounded: past it the coroutine is cancelled and the caller gets
    EnvironmentOverrun, also where code blocking the loop keeps the cancellation from
    taking effect (the thread is a daemon: it never holds up the exit)."""

    def __init__(self, envs: list[Any]) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="verifiers-serving")
        self._thread.start()
        self._stack = contextlib.AsyncExitStack()
        self._closed = False
        try:
            self.run(self._serve(envs), START_TIMEOUT_S, "starting to serve")
        except BaseException:
            self.close()
            raise

    async def _serve(self, envs: list[Any]) -> None:
        for env in envs:
            await self._stack.enter_async_context(env.serving())

    def run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float, what: str) -> T:
        """The coroutine's result, run on the loop (called from any other thread);
        EnvironmentOverrun naming `what` after `timeout_s` seconds."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(timeout=timeout_s)
        except FutureTimeoutError:
            future.cancel()
            raise EnvironmentOverrun(
                f"the verifiers environment ran past {timeout_s:g} s {what}: its deadline "
                "passed, or its code blocked the event loop (a tool, reward or finalize "
                "that calls time.sleep or blocking I/O instead of awaiting)") from None

    def close(self) -> None:
        """Leave `serving()` (stops the tool servers) and end the thread, each within
        CLOSE_TIMEOUT_S: a loop its environment's code still blocks is left behind, with
        a warning. Safe twice."""
        if self._closed:
            return
        self._closed = True
        try:
            self.run(self._stack.aclose(), CLOSE_TIMEOUT_S, "stopping serving")
        except EnvironmentOverrun:
            logger.warning("the verifiers environment did not stop serving within %g s: "
                           "its tool servers may be left running", CLOSE_TIMEOUT_S)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(CLOSE_TIMEOUT_S)
            if self._thread.is_alive():
                logger.warning("the verifiers serving loop is still blocked after %g s: "
                               "its thread is left behind", CLOSE_TIMEOUT_S)
            else:
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
