"""The start of a run that every pipeline shares: the config loaded and checked, a dry
run's plan printed, the run folder resolved and started or resumed (under the storage
guard), and what the command line asks of it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from pydantic import BaseModel

from src.configuration.errors import ConfigError
from src.configuration.yaml_source import YamlSource
from src.run.folder import RunDirectory, RunState
from src.run.storage_guard import storage_guard

Config = TypeVar("Config", bound=BaseModel)


class Plan(Protocol):
    def describe(self) -> str: ...


P = TypeVar("P", bound=Plan)


def keyed_config(source: YamlSource, key: str, load: Callable[[YamlSource], Config],
                 plan: Callable[[Config, YamlSource], P], output_dir: str | None
                 ) -> Callable[[], tuple[Config, P, str]]:
    """`start_run`'s `prepare` for a file whose one top-level section `key` holds an
    `output_dir` (which the command line's `output_dir` overrides)."""

    def prepare() -> tuple[Config, P, str]:
        config = load(source)
        section = getattr(config, key)
        if output_dir is not None:
            section = section.model_copy(update={"output_dir": output_dir})
            config = config.model_copy(update={key: section})
        return config, plan(config, source), section.output_dir

    return prepare


@dataclass(frozen=True)
class RunOptions:
    """What the command line asks of any pipeline's run."""

    output_dir: str | None = None  # overrides the config's ({TIMESTAMP} allowed)
    dry_run: bool = False  # validate and print the plan; load no weights
    new_run: bool = False  # with {TIMESTAMP} in output_dir: start fresh, do not resume
    show_progress: bool = True


@dataclass(frozen=True)
class Started(Generic[P]):
    """A run to train: its folder, the state it resumes from and its plan."""

    run: RunDirectory
    state: RunState
    plan: P


@dataclass(frozen=True)
class Stopped:
    """Nothing to train: 0 after a dry run or for a finished run, 2 for a config error."""

    exit_status: int


def start_run(prepare: Callable[[], tuple[BaseModel, P, str]], config_path: Path,
              options: RunOptions, unit: str) -> Started[P] | Stopped:
    """The start-up every pipeline shares. `prepare` loads and checks the config and
    returns it with its plan and output_dir pattern. A config error is printed with file,
    line and key; a damaged run folder raises DamagedRunFolder, before any weights load."""
    try:
        config, plan, output_dir = prepare()
        if options.dry_run:
            print(plan.describe())
            print("dry run: the config is valid")
            return Stopped(0)
        run = RunDirectory.resolve(output_dir, config, fresh=options.new_run)
        with storage_guard(run.path):
            state = run.start(config, config_path)
    except ConfigError as error:
        print(f"config error: {error}", file=sys.stderr)
        return Stopped(2)
    if not run.announce(state, unit):
        return Stopped(0)
    return Started(run, state, plan)
