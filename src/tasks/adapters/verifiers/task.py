"""verifiers environments (PyPI `verifiers` 0.4.0) as a task, rolled out by their own
protocol against the project's endpoint and scored by their own rewards.

`environment` names a verifiers taskset: an installed environment id, or the dotted path of
a taskset package (a module whose `__all__` exports one `vf.Taskset`), e.g.
`examples.verifiers_envs.arithmetic`; `arguments` are its config fields. The samples are
its tasks in load order: the held-out split is `validation_arguments`' taskset (a second
config, e.g. `{split: validation}`) or, without one, the last `num_validation` tasks.

An episode is one verifiers rollout, driven by the environment itself: the agent must be
`openai_client_agent` without an agent function, which calls the episode's
`client_rollout` with a client of the endpoint. The rollout runs the environment's agent
through `chat_harness` (non-streaming, in process), so every model call is sampled by the
policy and recorded token-exact; the episode is one round whose reply is the rollout's
last one. `_step` ends it with the trace's reward (the sum of the environment's weighted
reward terms), correct when it reaches `success_threshold`, the metrics (each reward
term's score under its name, each verifiers metric, `truncated`, `model_calls`) and the
transcript (`verifiers_transcript` in the episode's info, bounded).

Failures: a model call the endpoint refused (context limit, prefix broken) or that failed
ends the episode through the agent (`agent_context_limit`, `agent_error`); an error of the
environment's own code (a reward, a tool server, the harness) fails it as `task_error`, and
so does a rollout that runs past `rollout_timeout_s` (plus a few seconds' grace), also
where its code blocks the event loop instead of awaiting. The endpoint's key goes to the
rollout's client alone (`keyed_client`), never into the process environment.

Group terms: where the environment's `Env` overrides `finalize(task, episode)`, that hook
judges the group instead of each episode: it runs once over a verifiers episode whose
traces are the group's (the G rollouts of one sample stand for the agents of one verifiers
episode), under the same deadline, and the rewards and metrics it records become the
episodes' final ones; each outcome follows its final reward (`outcome_of_reward`).
Supported: single-agent envs (each rollout must yield one trace; an `Env.run` that fans
out several agents would send a second conversation through one episode's endpoint) and
finalize hooks that read and record on the traces.

All rollouts of a task family run on one daemon thread's asyncio loop that holds each
environment's `serving()` (shared tool servers, the interception); `close()` ends it.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from src.configuration.components import COMPONENTS
from src.records.episode import Episode, Outcome, Sample
from src.tasks.adapters.verifiers.environments import (
    DEADLINE_GRACE_S,
    EnvironmentOverrun,
    ServingLoop,
    TraceFailure,
    environment_config,
    keyed_client,
    model_context,
    taskset_id_of,
    vf,
)
from src.tasks.adapters.verifiers.traces import (
    check_trace,
    model_failure,
    trace_metrics,
    transcript,
)
from src.tasks.task import (
    EpisodeEnv,
    EpisodeScore,
    Rounds,
    StepOutcome,
    Task,
    TaskSettingError,
    parse_split_sample_id,
    split_sample_ids,
)


@COMPONENTS.register("verifiers")
class VerifiersTask(Task["VerifiersEpisode"]):
    def __init__(
        self,
        # an installed verifiers environment id, or a taskset package's dotted path
        environment: str,
        arguments: dict[str, Any] | None = None,  # the taskset's config fields
        # the held-out split's taskset config; None: the last num_validation tasks
        validation_arguments: dict[str, Any] | None = None,
        num_train: int | None = None,  # the first num_train train tasks (None: all)
        num_validation: int = 64,  # at most this many held-out tasks
        max_turns: Rounds = 8,  # model calls a rollout may make (verifiers' agent max_turns)
        success_threshold: float = 1.0,  # the reward that counts as correct
        # how tools reach the model: `native` OpenAI tools (a chat template that renders
        # them) or `prompted` (listed in the system message, calls read from the text)
        tool_protocol: Literal["native", "prompted"] = "native",
        # the verifiers EnvConfig's other fields (an Env's own knobs, timeouts)
        env_arguments: dict[str, Any] | None = None,
        rollout_timeout_s: float = 600.0,  # verifiers' deadline for one rollout
        max_transcript_chars: int = 20_000,  # of the transcript kept in the episode info
    ) -> None:
        super().__init__(max_round=1)  # the whole rollout is the agent's one turn
        if max_turns < 1 or num_validation < 0 or (num_train is not None and num_train < 1):
            raise ValueError("max_turns and num_train must be at least 1, num_validation "
                             "at least 0")
        self.environment = environment
        self.success_threshold = success_threshold
        self.max_transcript_chars = max_transcript_chars
        self.rollout_timeout_s = rollout_timeout_s
        configs = _env_configs(environment, arguments or {}, validation_arguments,
                               max_turns=max_turns, tool_protocol=tool_protocol,
                               env_arguments=env_arguments or {},
                               timeout_s=rollout_timeout_s)
        self._envs = {split: vf.load_environment(config) for split, config in configs.items()}
        self._tasks = _split_tasks(self._envs, num_train, num_validation, environment)
        self._finalizes_groups = type(self._envs["train"]).finalize is not vf.Env.finalize
        if self._finalizes_groups:
            for env in self._envs.values():  # judged once per group, in _score_group
                env.finalize = _no_finalize
        self._loop = ServingLoop(list(self._envs.values()))

    @classmethod
    def check_parameters(cls, parameters: Mapping[str, Any]) -> None:
        """The environment is there, and its loader takes the arguments (nested ones too);
        nothing is loaded or served. Parameters the constructor does not take are the
        config reader's to name."""
        try:
            bound = inspect.signature(cls.__init__).bind(None, **parameters)
        except TypeError:
            return
        bound.apply_defaults()
        given = bound.arguments
        if not isinstance(given["environment"], str):
            return
        for key in ("arguments", "validation_arguments", "env_arguments"):
            if given[key] is not None and not isinstance(given[key], Mapping):
                raise TaskSettingError((key,), f"{key}: a mapping of the environment's "
                                       f"config fields, not {type(given[key]).__name__}")
        _env_configs(given["environment"], given["arguments"] or {},
                     given["validation_arguments"], max_turns=given["max_turns"],
                     tool_protocol=given["tool_protocol"],
                     env_arguments=given["env_arguments"] or {},
                     timeout_s=given["rollout_timeout_s"])

    def outcome_of_reward(self, reward: float) -> Outcome:
        """Correct from `success_threshold` on: a rollout's reward, or the group's."""
        return Outcome.CORRECT if reward >= self.success_threshold else Outcome.INCORRECT

    # ---- samples -------------------------------------------------------------------
    def sample_ids(self, split: str = "train") -> Sequence[str]:
        return split_sample_ids(split, len(self._tasks.get(split, [])))

    def _get_sample(self, sample_id: str) -> Sample:
        data = self.vf_task(sample_id).data
        fields = data.model_dump(exclude_none=True)
        sample_data = {"prompt": data.prompt_text}
        if "answer" in fields:
            sample_data["answer"] = str(fields["answer"])
        if data.id is not None:
            sample_data["task_id"] = data.id
        return Sample(sample_id=sample_id, category=data.name or self.environment,
                      data=sample_data)

    def vf_task(self, sample_id: str) -> Any:
        """The verifiers task (`vf.Task`) of a sample."""
        split, index = parse_split_sample_id(sample_id)
        tasks = self._tasks.get(split, [])
        if index >= len(tasks):
            raise KeyError(f"no sample '{sample_id}': split '{split}' has {len(tasks)}")
        return tasks[index]

    def new_episode(self) -> VerifiersEpisode:
        return VerifiersEpisode(self)

    # ---- rollouts ------------------------------------------------------------------
    def run_rollout(self, sample_id: str, base_url: str, api_key: str) -> Any:
        """The verifiers episode of one rollout of the sample, its model calls sent to
        `base_url` with `api_key`; called from the agent's threads, run on the serving
        loop. EnvironmentOverrun past the rollout's deadline."""
        env, context = self._env_of(sample_id), model_context(base_url)

        async def rollout() -> Any:
            async with keyed_client(env, context, api_key):
                return await env.run_episode(self.vf_task(sample_id), context)

        return self._loop.run(rollout(), self.rollout_timeout_s + DEADLINE_GRACE_S,
                              f"in a rollout of {sample_id}")

    def _env_of(self, sample_id: str) -> Any:
        """The verifiers env of the sample's split (the train one, without a second)."""
        split, _ = parse_split_sample_id(sample_id)
        return self._envs.get(split, self._envs["train"])

    def _score_group(self, episodes: Sequence[Episode]) -> list[EpisodeScore]:
        # the episodes whose rollout was scored (not those the agent ended: context limit)
        judged = [episode for episode in episodes
                  if getattr(episode.environment, "trace", None) is not None]
        if not self._finalizes_groups or not judged:
            return super()._score_group(episodes)
        sample_id = episodes[0].sample.sample_id
        env, task = self._env_of(sample_id), self.vf_task(sample_id)
        traces = [episode.environment.trace for episode in judged]  # type: ignore[attr-defined]
        group = vf.Episode(env=vf.EnvInfo(id=env.config.env_id), traces=traces,
                           task=vf.TraceTask(type=type(task).__name__, data=task.data,
                                             key=task.key, hash=task.hash))
        try:
            self._loop.run(type(env).finalize(env, task, group),
                           self.rollout_timeout_s + DEADLINE_GRACE_S,
                           f"in finalize of the group of {sample_id}")
        except Exception as error:  # noqa: BLE001 - the env's code: per-trace rewards stand
            failed = {"verifiers_finalize_error": f"{type(error).__name__}: {error}"[:2_000]}
            return [EpisodeScore(episode.reward, {"finalize_failed": 1.0}, failed)
                    for episode in episodes]
        finalized = {id(episode): EpisodeScore(trace.reward, {**trace_metrics(trace),
                                                              "finalize_failed": 0.0})
                     for episode, trace in zip(judged, traces, strict=True)}
        return [finalized.get(id(episode), EpisodeScore(episode.reward))
                for episode in episodes]

    def close(self) -> None:
        self._loop.close()
        super().close()


class VerifiersEpisode(EpisodeEnv[VerifiersTask]):
    def __init__(self, family: VerifiersTask) -> None:
        super().__init__(family)
        self.rollout: Any = None  # the verifiers episode of its rollout, once it ran
        self.trace: Any = None  # its one trace, once scored
        self.overrun: str | None = None  # why the rollout was given up, where it was

    def _reset(self, sample: Sample) -> str:
        self.rollout = self.trace = self.overrun = None
        return sample.data["prompt"]

    def client_rollout(self, client: Any, messages: list[dict[str, str]]) -> str:
        """The environment's own rollout against the agent's endpoint (`messages`, the
        first prompt, is the environment's own). Raises where a model call failed, so
        that the agent ends the episode with the endpoint's reason."""
        assert self.sample is not None
        try:
            self.rollout = self.family.run_rollout(self.sample.sample_id,
                                                   str(client.base_url), client.api_key)
        except EnvironmentOverrun as overrun:  # the environment's failure: `_step` says so
            self.overrun = str(overrun)
            return ""
        failure = model_failure(self.rollout)
        if failure is not None:
            raise TraceFailure(failure)
        traces = self.rollout.traces
        return traces[-1].last_reply if traces else ""

    def _step(self, action: str) -> StepOutcome:
        if self.overrun is not None:
            raise EnvironmentOverrun(self.overrun)
        if self.rollout is None:
            raise RuntimeError("no verifiers rollout ran for this episode: a verifiers "
                               "task needs openai_client_agent without an agent_function")
        check_trace(self.rollout)  # the environment's own failure: a task error
        self.trace = trace = self.rollout.traces[0]
        return StepOutcome(
            observation="", reward=trace.reward, terminated=True,
            outcome=self.family.outcome_of_reward(trace.reward),
            metrics=trace_metrics(trace),
            info={"verifiers_transcript": transcript(trace, self.family.max_transcript_chars),
                  "verifiers_stop": trace.stop_condition})

    def _oracle_reply(self) -> str:
        raise NotImplementedError("a verifiers environment scores its own rollouts: there "
                                  "is no reply to step without one")


async def _no_finalize(task: Any, episode: Any) -> None:
    """Stands in for an Env's finalize during single rollouts (the group's call judges)."""


def _env_configs(environment: str, arguments: Mapping[str, Any],
                 validation_arguments: Mapping[str, Any] | None, **settings: Any
                 ) -> dict[str, Any]:
    """The verifiers EnvConfig of each split's taskset config (validation only where it
    has its own); TaskSettingError for an environment that is not there, or arguments
    its loader does not take."""
    taskset_id = taskset_id_of(environment)
    configs = {"train": environment_config(taskset_id, arguments, key="arguments",
                                           **settings)}
    if validation_arguments is not None:
        configs["validation"] = environment_config(taskset_id, validation_arguments,
                                                   key="validation_arguments", **settings)
    return configs


def _split_tasks(envs: dict[str, Any], num_train: int | None, num_validation: int,
                 environment: str) -> dict[str, list[Any]]:
    train = list(envs["train"].taskset)
    if "validation" in envs:
        validation = list(envs["validation"].taskset)[:num_validation]
    else:
        if num_validation >= len(train):
            raise ValueError(f"num_validation: {environment} has {len(train)} tasks, and "
                             f"holding out {num_validation} leaves none to train on")
        cut = len(train) - num_validation
        train, validation = train[:cut], train[cut:]
    if num_train is not None:
        if num_train > len(train):
            raise ValueError(f"num_train: {environment} has {len(train)} train tasks, not "
                             f"{num_train}")
        train = train[:num_train]
    return {"train": train, "validation": validation}
