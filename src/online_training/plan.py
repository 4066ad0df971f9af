"""The online pipeline's plan: an `assignment_config` file's components resolved and
checked before any weights load, and built into the live run.

Planning also decides which weights this process loads: a trained policy that every
component naming it uses only for its adapter (the agent samples from a rollout pool, the
RL trainer's workers score and update) is built without its base weights
(`base_weights: meta`, see `_choose_base_weights`). A reward term in a component's
parameters (a judge's settings) may name language models too: each must be listed and the
term's alone (src.run.judge_models).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from src.agents.agent import Agent
from src.configuration.components import constructor_fields
from src.configuration.errors import ConfigError
from src.configuration.short_names import drop_registered_modules
from src.configuration.yaml_source import YamlSource
from src.language_models.language_model import BASE_WEIGHTS, LanguageModel
from src.online_training.config import OnlineExperimentConfig
from src.online_training.flat_names import Origin, translate_flat_names
from src.run.assembly import (
    adapter_only,
    check_selection_split,
    instantiate,
    is_language_model_type,
    language_model_uses,
    plan_component,
)
from src.run.component_plan import ComponentPlan
from src.run.judge_models import check_reward_term_models
from src.run.trainer import Trainer
from src.runtime.reproducibility import prepare_model_building
from src.storage.state import Stateful
from src.tasks.task import Task


@dataclass(frozen=True)
class OnlineTrainingPlan:
    """Every component resolved and its parameters checked; nothing built yet."""

    config: OnlineExperimentConfig
    source: YamlSource
    task: ComponentPlan
    agent: ComponentPlan
    language_models: dict[str, ComponentPlan]
    trainers: dict[str, ComponentPlan]  # callback_dict: id -> trainer

    def describe(self) -> str:
        assignment = self.config.assignment_config
        lines = [f"assignment: {self.source.path}", self.task.describe(), self.agent.describe()]
        lines += [plan.describe() + (" (no base weights in this process: base_weights meta)"
                                     if plan.parameters.get(BASE_WEIGHTS) == "meta" else "")
                  for plan in self.language_models.values()]
        lines += [plan.describe() for plan in self.trainers.values()]
        rollout = assignment.rollout
        lines.append(f"rollout: batch_size={rollout.batch_size} group_size={rollout.group_size} "
                     f"num_epochs={rollout.num_epochs} max_batches={rollout.max_batches} "
                     f"max_staleness={rollout.max_staleness}")
        lines.append(f"output_dir: {assignment.output_dir}")
        return "\n".join(lines)


def load_online_config(file: Path | YamlSource) -> tuple[OnlineExperimentConfig, YamlSource]:
    """An RL assignment from its file (or the file already read), flat names translated."""
    source = file if isinstance(file, YamlSource) else YamlSource(file)
    if not isinstance(source.data, dict):
        raise ConfigError("the file must hold a mapping with key 'assignment_config'",
                          file=str(source.path))
    read_in_todays_names(source.data, source)
    return source.validate(OnlineExperimentConfig), source


def read_in_todays_names(data: Any, origin: Origin) -> None:
    """A file as read (in place) into today's spelling: LifelongAgentBench's flat names
    translated (flat_names.py), a registered component named by its name alone
    (src/configuration/short_names.py)."""
    translate_flat_names(data, origin)
    drop_registered_modules(data, OnlineExperimentConfig)


def plan_online_training(config: OnlineExperimentConfig,
                         source: YamlSource) -> OnlineTrainingPlan:
    assignment = config.assignment_config
    root = ("assignment_config",)
    language_models: dict[str, ComponentPlan] = {}
    for index, spec in enumerate(assignment.language_model_list):
        if spec.name in language_models:
            raise source.error(f"duplicate language model name '{spec.name}'",
                               (*root, "language_model_list", index, "name"))
        # a language model may name those listed before it (a rollout pool its trainer)
        language_models[spec.name] = plan_component(
            spec, (*root, "language_model_list", index), source, LanguageModel,
            language_models)
    plan = OnlineTrainingPlan(
        config=config,
        source=source,
        task=plan_component(assignment.task, (*root, "task"), source, Task, language_models),
        agent=plan_component(assignment.agent, (*root, "agent"), source, Agent,
                             language_models),
        language_models=language_models,
        trainers={trainer_id: plan_component(spec, (*root, "callback_dict", trainer_id),
                                             source, Trainer, language_models)
                  for trainer_id, spec in assignment.callback_dict.items()},
    )
    _check_reward_term_models(plan)
    explicit = {spec.name for spec in assignment.language_model_list
                if BASE_WEIGHTS in spec.parameters}
    plan = replace(plan, language_models=_choose_base_weights(plan, explicit))
    if assignment.rollout.max_staleness > 0:
        _check_overlapped_rollouts(plan)
    if "selection" in assignment.evaluation.splits:
        check_selection_split(plan.task, source, (*root, "evaluation", "splits"))
    return plan


def _check_reward_term_models(plan: OnlineTrainingPlan) -> None:
    """A model that a reward term names is listed and that term's alone
    (src.run.judge_models)."""
    components = (plan.task, plan.agent, *plan.language_models.values(),
                  *plan.trainers.values())
    used_by: dict[str, str] = {}  # model -> the first place that names it otherwise
    for component in components:
        for user, parameter, model in language_model_uses(component):
            used_by.setdefault(model, ".".join(map(str, (*user.key_path, "parameters",
                                                         parameter))))
    check_reward_term_models(components, used_by, plan.language_models, plan.source)


def _choose_base_weights(plan: OnlineTrainingPlan, explicit: set[str]) -> dict[str, ComponentPlan]:
    """The language models' plans with `base_weights` chosen, where a class takes it:
    "meta" for a model that components name but none samples from or scores with in this
    process (each lists its parameter in `adapter_only_models`), so that no weights load
    here that nothing here runs; a value the config gives is kept, "meta" checked."""
    named: set[str] = set()
    needed: dict[str, str] = {}  # model -> a place that samples from or scores with it
    for component in (plan.task, plan.agent, *plan.language_models.values(),
                      *plan.trainers.values()):
        for user, parameter, model in language_model_uses(component):
            named.add(model)
            if parameter not in adapter_only(user):
                needed.setdefault(model, ".".join(map(str, (*user.key_path, "parameters",
                                                            parameter))))
    chosen = dict(plan.language_models)
    for name, model_plan in plan.language_models.items():
        if BASE_WEIGHTS not in model_plan.parameters:
            continue
        if name in explicit:
            if model_plan.parameters[BASE_WEIGHTS] == "meta" and name in needed:
                raise plan.source.error(
                    f"is meta, but {needed[name]} samples from or scores with '{name}' in "
                    f"this process, which needs its base weights: set load, or leave it out "
                    f"and the run chooses", (*model_plan.key_path, "parameters", BASE_WEIGHTS))
        elif name in named and name not in needed:
            chosen[name] = replace(model_plan,
                                   parameters={**model_plan.parameters, BASE_WEIGHTS: "meta"})
    return chosen


def _check_overlapped_rollouts(plan: OnlineTrainingPlan) -> None:
    """With rollout.max_staleness > 0 the next batch is sampled while the trainer's weights
    change: the agent must sample from a copy of the policy (a rollout pool) and keep no
    state of its own, and a trainer that drops stale samples must keep those one update
    old."""
    staleness = plan.config.assignment_config.rollout.max_staleness
    fields = constructor_fields(plan.agent.cls)
    samplers = [plan.agent.parameters[name] for name in fields
                if is_language_model_type(fields[name][0])
                and plan.agent.parameters.get(name) is not None]
    in_process = [name for name in samplers
                  if not plan.language_models[name].cls.holds_policy_copy]
    if not samplers or in_process:
        raise plan.source.error(
            f"is {staleness}: the next batch is sampled while the trainer updates, so the "
            f"agent must sample from a rollout pool (a copy of the policy in other "
            f"processes); it samples from {in_process or 'no language model of this run'}",
            ("assignment_config", "rollout", "max_staleness"))
    for name in samplers:
        # a pool that syncs itself at a smaller lag would move the batch sampled ahead to
        # the new policy whenever the update ends first: a batch of mixed, timing-made
        # versions, and a run that does not repeat itself
        model = plan.language_models[name]
        pool_fields = constructor_fields(model.cls)
        if "max_staleness" in pool_fields:
            lag = model.parameters.get("max_staleness", pool_fields["max_staleness"][1])
            if isinstance(lag, int) and lag < staleness:
                raise plan.source.error(
                    f"is {staleness}, but language model '{name}' syncs to the trainer "
                    f"whenever it lags more than max_staleness={lag} updates, so the batch "
                    f"sampled ahead would take the new policy whenever the update ends "
                    f"first; give '{name}' max_staleness: {staleness}",
                    ("assignment_config", "rollout", "max_staleness"))
    if issubclass(plan.agent.cls, Stateful):
        raise plan.source.error(
            f"is {staleness}, but agent '{plan.agent.name}' keeps state learnt from episodes "
            f"(it saves state with each batch), and the batch sampled ahead would reach it "
            f"before its batch is committed; use max_staleness 0 with this agent",
            ("assignment_config", "rollout", "max_staleness"))
    for trainer_id, trainer in plan.trainers.items():
        kept = trainer.cls.oldest_trained(trainer.parameters)
        if kept is not None and kept < staleness:
            raise plan.source.error(
                f"train only on episodes at most {kept} updates old, below "
                f"rollout.max_staleness={staleness}: every sample of an overlapped batch "
                f"would be dropped; let the trainer keep episodes {staleness} updates old "
                f"(RLTrainer: max_policy_staleness {staleness}, or null)",
                ("assignment_config", "callback_dict", trainer_id, "parameters"))


@dataclass
class Components:
    make_task: Callable[[], Task]
    agent: Agent
    language_models: dict[str, LanguageModel]
    trainers: dict[str, Trainer]


def build_language_models(plan: OnlineTrainingPlan,
                          built: dict[str, LanguageModel] | None = None
                          ) -> dict[str, LanguageModel]:
    """The run's language models in the config's order, each given those before it; into
    `built` if given, so that a caller can close the ones made before a failure."""
    assignment = plan.config.assignment_config
    prepare_model_building(assignment.reproducible, assignment.random_seed)
    language_models = {} if built is None else built
    for name, language_model_plan in plan.language_models.items():
        language_models[name] = instantiate(language_model_plan, language_models)
    return language_models


def build_components(plan: OnlineTrainingPlan) -> Components:
    language_models = build_language_models(plan)
    trainers: dict[str, Trainer] = {}
    for trainer_id, trainer_plan in plan.trainers.items():
        trainers[trainer_id] = instantiate(trainer_plan, language_models)
    return Components(
        make_task=lambda: instantiate(plan.task, language_models),
        agent=instantiate(plan.agent, language_models),
        language_models=language_models,
        trainers=trainers,
    )
