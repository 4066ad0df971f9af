"""A reward model in a Ray actor (`placement: ray_actor`): the model loads once, in the
actor, and the reward function's calls reach it batched and bounded in time.

`ActorScorer` is the calling process's side. It joins the Ray cluster as the rollout pool
does (src/runtime/ray_cluster.py `connect_ray`: the pool's cluster where the pool is up,
else the one at `ray_address`, else a local one it starts and later stops), and starts the
actor when the reward function is built, so that the model loads while the run starts.

Batching: episodes may be scored from several threads at once; requests that arrive
together (within `batch_wait_s` of the first, at most `batch_size` of them) go to the
actor as one call (src/tasks/model_rewards/batching), and each caller gets its own scores.
A group's inputs scored together (`alone`) are one call of their own, joined by no other
request, so that what the actor's forward batches hold depends on the group only.

Failures: a call is bounded by `request_timeout_s` (plus `start_timeout_s` on a new
actor's first call, while its model loads). An actor that dies or runs past that bound is
stopped, and each request of the batch raises `RewardModelActorError`: the rubric scores
those replies 0 with a recorded error (src/tasks/rubric.py), and the run goes on. The next
call starts a fresh actor, at most `max_restarts` times; after that every call raises at
once. A call the model itself fails (`RayTaskError`) raises that error and keeps the actor.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, NonNegativeFloat, NonNegativeInt, PositiveFloat

from src.runtime.ray_cluster import connect_ray
from src.runtime.reproducibility import is_reproducible
from src.runtime.worker_process import prepare_worker_process
from src.tasks.model_rewards.batching import CallBatcher

logger = logging.getLogger(__name__)
# a waiting request's bound beyond its batch's: the time the call that carries it takes
# to hand the scores out after its own bounds
_HANDOVER_S = 1.0


class RayActorSettings(BaseModel):
    """A reward model's Ray actor (`placement: ray_actor`): its resources, and how the
    calls to it are batched and bounded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_cpus: PositiveFloat = 1.0  # Ray's CPUs for the actor; its torch threads: at least 1
    num_gpus: NonNegativeFloat = 0.0  # a GPU for `device: cuda` (a fraction shares one)
    # join the cluster at this address where Ray is not up in the process yet (a rollout
    # pool joins or starts it first); None: start a local one
    ray_address: str | None = None
    # how long the first of requests arriving together waits for the others, which then
    # go to the actor as one call (or less, once `batch_size` requests wait)
    batch_wait_s: NonNegativeFloat = 0.005
    request_timeout_s: PositiveFloat = 60.0  # one call to the actor
    # added to a new actor's first call (the load); with request_timeout_s, under the
    # rollout's faults.step_timeout_s (300 s by default), which bounds the whole step
    start_timeout_s: PositiveFloat = 200.0
    # fresh actors started after one dies or overruns; then every reply is an error
    max_restarts: NonNegativeInt = 3


class Scorer(Protocol):
    """What the actor holds: a reward model placed in its own process."""

    def scores(self, texts: Sequence[str]) -> list[float]: ...


class RewardModelActorError(RuntimeError):
    """The reward model's actor gave no scores for a request (see the module docstring)."""


class RewardModelActor:
    """The Ray actor: the reward model, placed in this process (the actor's), and a count
    of the calls and inputs it scored."""

    def __init__(self, build: Callable[[], Scorer], num_threads: int,
                 reproducible: bool) -> None:
        prepare_worker_process(num_threads, reproducible)
        self._model = build()
        self._calls = self._texts = 0

    def scores(self, texts: list[str]) -> list[float]:
        self._calls += 1
        self._texts += len(texts)
        return self._model.scores(texts)

    def stats(self) -> dict[str, int]:
        """Calls to `scores` so far, the inputs they held, and the actor's process id."""
        return {"calls": self._calls, "texts": self._texts, "pid": os.getpid()}


class ActorScorer:
    """A reward model's actor as the calling process sees it: see the module docstring.
    `build` makes the reward model placed in the caller (the actor's process)."""

    def __init__(self, name: str, actor: RayActorSettings, batch_size: int,
                 build: Callable[[], Scorer]) -> None:
        self.name = name
        self.actor_settings = actor
        self.batch_size = batch_size
        self._build = build
        # a waiting request's bound: its batch's wait, a new actor's load and the call
        self._wait_bound_s = (actor.batch_wait_s + actor.start_timeout_s
                              + actor.request_timeout_s + _HANDOVER_S)
        self._started_ray = connect_ray(max(1, math.ceil(actor.num_cpus)), actor.ray_address)
        self._lock = threading.Lock()
        self._batcher: CallBatcher[list[str], list[float]] = CallBatcher(
            self._answer, f"reward-model-{name}")
        self._restarts = 0
        self._failure = ""  # why the last actor was stopped
        self._closed = False
        self.handle: Any = self._start()  # the actor; None after a failure, until the next call
        self._loading = True  # the actor has not answered yet: its model may still load

    def _start(self) -> Any:
        import ray

        settings = self.actor_settings
        actor_class = ray.remote(RewardModelActor).options(
            num_cpus=settings.num_cpus, num_gpus=settings.num_gpus, max_restarts=0)
        return actor_class.remote(self._build, max(1, int(settings.num_cpus)),
                                  is_reproducible())

    def scores(self, texts: Sequence[str], alone: bool = False) -> list[float]:
        """The scores of `texts`, sent to the actor with the requests that arrive with
        them, or `alone` in a call of their own (src/tasks/model_rewards/batching);
        RewardModelActorError where the actor gave none."""
        reply = (self._batcher.submit_many([list(texts)], 1)[0] if alone else
                 self._batcher.submit(list(texts), self.actor_settings.batch_wait_s,
                                      self.batch_size))
        try:
            return reply.result(timeout=self._wait_bound_s)
        except FutureTimeout:
            reply.cancel()  # not sent at all where its call has not begun
            raise RewardModelActorError(f"reward model {self.name}: no scores within "
                                        f"{self._wait_bound_s:g} s") from None

    def _answer(self, requests: list[list[str]]) -> list[list[float] | BaseException]:
        """One call to the actor for every text of `requests`, handed back by request."""
        scores = self._call([text for texts in requests for text in texts])
        answers: list[list[float] | BaseException] = []
        start = 0
        for texts in requests:
            answers.append(scores[start:start + len(texts)])
            start += len(texts)
        return answers

    def _call(self, texts: list[str]) -> list[float]:
        """One call to the actor, bounded in time; a dead or overrunning actor is stopped
        and RewardModelActorError raised."""
        import ray

        actor, loading = self._actor()
        settings = self.actor_settings
        timeout = settings.request_timeout_s + (settings.start_timeout_s if loading else 0.0)
        try:
            scores = ray.get(actor.scores.remote(texts), timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            reason = (f"the actor gave no scores within {timeout:g} s (request_timeout_s"
                      f"{' + start_timeout_s: its first call' if loading else ''})")
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as error:
            reason = f"the actor died ({type(error).__name__}: {error})"
        else:
            with self._lock:
                if actor is self.handle:
                    self._loading = False
            return scores
        self._stop(actor, reason)
        raise RewardModelActorError(f"reward model {self.name}: {reason}")

    def _actor(self) -> tuple[Any, bool]:
        """The actor, started again after a failure, and whether it may still load its
        model; RewardModelActorError once `max_restarts` are used up or after close."""
        with self._lock:
            if self.handle is None:
                if self._closed:
                    raise RewardModelActorError(f"reward model {self.name} is closed")
                if self._restarts >= self.actor_settings.max_restarts:
                    raise RewardModelActorError(
                        f"reward model {self.name}: its actor failed after max_restarts="
                        f"{self.actor_settings.max_restarts} restarts; the last time: "
                        f"{self._failure}")
                self._restarts += 1
                logger.warning("reward model %s: starting a fresh actor (restart %d of %d)",
                               self.name, self._restarts, self.actor_settings.max_restarts)
                self.handle, self._loading = self._start(), True
            return self.handle, self._loading

    def _stop(self, actor: Any, reason: str) -> None:
        import ray

        with self._lock:
            if actor is not self.handle:  # another call stopped it already
                return
            self.handle, self._failure = None, reason
        logger.warning("reward model %s: %s; its actor is stopped", self.name, reason)
        ray.kill(actor, no_restart=True)

    def stats(self) -> dict[str, int]:
        """The running actor's own figures (`RewardModelActor.stats`)."""
        import ray

        if self.handle is None:
            raise RewardModelActorError(f"reward model {self.name}: no actor runs")
        return ray.get(self.handle.stats.remote(),
                       timeout=self.actor_settings.request_timeout_s)

    def close(self) -> None:
        """Stop the actor, and Ray where this scorer started it. Safe to call twice."""
        import ray

        with self._lock:
            actor, self.handle, self._closed = self.handle, None, True
        if actor is not None:
            ray.kill(actor, no_restart=True)
        if self._started_ray:
            self._started_ray = False
            ray.shutdown()
