"""The start of a run that every pipeline shares: the config loaded and checked, a dry
run's plan printed, the run folder resolved and started or resumed (under the storage
guard), and what the command line asks of it."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel

from src.configuration.errors import ConfigError
from src.configuration.yaml_source import YamlSource
from src.report.run_end import end_of_run_report
from src.run.folder import RunDirectory, RunState
from src.run.resume import ResumeRules
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
              options: RunOptions, unit: str, rules: ResumeRules) -> Started[P] | Stopped:
    """The start-up every pipeline shares. `prepare` loads and checks the config and
    returns it with its plan and output_dir pattern; `rules`: how the pipeline's runs
    resume (`Pipeline.resume_rules`). A config error is printed with
    file, line and key; a damaged run folder raises DamagedRunFolder, before any weights
    load."""
    try:
        config, plan, output_dir = prepare()
        if options.dry_run:
            print(plan.describe())
            print("dry run: the config is valid")
            return Stopped(0)
        run = RunDirectory.resolve(output_dir, config, options.new_run, rules)
        with storage_guard(run.path):
            state = run.start(config, config_path, rules)
    except ConfigError as error:
        print(f"config error: {error}", file=sys.stderr)
        return Stopped(2)
    if not run.announce(state, unit):
        return Stopped(0)
    return Started(run, state, plan)


def train_run(prepare: Callable[[], tuple[BaseModel, P, str]], config_path: Path,
              options: RunOptions, unit: str, rules: ResumeRules,
              train: Callable[[Started[P]], dict[str, Any]],
              data_errors: tuple[type[Exception], ...] = ()) -> int:
    """A run's command from start to end, as every pipeline runs it: `start_run`, then
    `train` under the storage guard, then the figures it returns (printed where there are
    any) and the end-of-run report. The exit status: `start_run`'s where it stops, 2 for
    one of the pipeline's `data_errors` (its data unreadable), else 0."""
    started = start_run(prepare, config_path, options, unit, rules)
    if isinstance(started, Stopped):
        return started.exit_status
    with storage_guard(started.run.path):
        try:
            shown = train(started)
        except data_errors as error:
            print(f"data error: {error}", file=sys.stderr)
            return 2
        report = end_of_run_report(started.run.path)
    if shown:
        print(json.dumps(shown, indent=2))
    print(report)
    return 0
