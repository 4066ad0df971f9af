"""Lockstep rollout: many episodes stepped together, so each agent turn is one batched call."""

from __future__ import annotations

import functools
import logging
import threading
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import Any, TypeVar

from src.agents.agent import Agent, AgentReply
from src.configuration.models import FaultPolicy
from src.records.chat import ChatMessage, Role
from src.records.episode import Episode, EpisodeStatus, Sample
from src.run.worker_thread import WorkerThread
from src.tasks.task import Task

logger = logging.getLogger(__name__)
T = TypeVar("T")


# the threads of environment calls left running past their bound, process-wide: a
# thread cannot be killed, so `FaultPolicy.max_hung_calls` caps how many pile up
_hung: list[WorkerThread] = []
_hung_lock = threading.Lock()


def hung_calls() -> int:
    """How many environment calls left past their bound still run."""
    with _hung_lock:
        _hung[:] = [worker for worker in _hung if worker.alive]
        return len(_hung)


class _EnvironmentThread:
    """The thread an episode's environment runs in, each call bounded by `timeout_s`.

    One thread for all of an episode's calls (reset, steps, close), since resources such as
    a SQLite connection belong to the thread that opened them. A call past the bound raises
    TimeoutError and leaves the thread behind (a daemon: it never holds up the exit);
    while `max_hung` such calls still run, no thread is started for a new episode (its
    first call raises). The abandoned call is interrupted (`WorkerThread.interrupt`), so a
    pure-Python loop stops at once; one blocked in C code runs on until that returns.
    Without a bound, calls run in the caller's thread.
    """

    def __init__(self, name: str, timeout_s: float | None, max_hung: int) -> None:
        self.name = name
        self.timeout_s = timeout_s
        self.max_hung = max_hung
        self.stuck = False
        self._worker: WorkerThread | None = None

    def call(self, function: Callable[[], T]) -> T:
        if self.timeout_s is None:
            return function()
        if self._worker is None:
            if (hung := hung_calls()) >= self.max_hung:
                raise RuntimeError(
                    f"{hung} environment calls still run past step_timeout_s="
                    f"{self.timeout_s} (rollout.faults.max_hung_calls={self.max_hung}): no "
                    "thread is started for another episode")
            self._worker = WorkerThread(self.name)
        future = self._worker.submit(function)
        try:
            return future.result(timeout=self.timeout_s)
        except FutureTimeoutError:
            if future.done():  # the environment's own TimeoutError: the same class as ours
                raise
            self.stuck = True
            self._worker.interrupt()
            with _hung_lock:
                _hung.append(self._worker)
            raise TimeoutError(f"the environment ran past step_timeout_s={self.timeout_s}"
                               ) from None

    def stop(self) -> None:
        if self._worker is not None:
            self._worker.stop()


def episode_seed(random_seed: int, batch_index: int, slot: int) -> int:
    """The seed of the episode in `slot` of batch `batch_index` (an evaluation at step N
    uses batch index -1 - N), so that a redone batch draws the same episodes."""
    return (random_seed * 1_000_003 + batch_index * 10_007 + slot) % (2**31)


def roll_out_seeded(samples: Sequence[tuple[Sample, int]], task: Task[Any], agent: Agent,
                    batch_index: int, random_seed: int, faults: FaultPolicy,
                    first_slot: int = 0) -> list[Episode]:
    """`roll_out_lockstep` of (sample, group_index) pairs, each episode seeded by its slot."""
    seeds = [episode_seed(random_seed, batch_index, slot)
             for slot in range(first_slot, first_slot + len(samples))]
    return roll_out_lockstep(samples, task, agent, batch_index, seeds, faults)


def roll_out_lockstep(samples: Sequence[tuple[Sample, int]], task: Task[Any], agent: Agent,
                      batch_index: int, seeds: Sequence[int],
                      faults: FaultPolicy | None = None) -> list[Episode]:
    """Run one episode per (sample, group_index), each in a new episode environment of
    `task`, until all have ended; environments are reset in the order of `samples`.

    Every round, the agent answers all running episodes in one call; finished episodes
    drop out while the others go on. At the end each group (episodes of one sample) gets
    its group-wise scores from the family, and every environment is closed. An
    environment that raises or overruns `faults.step_timeout_s` ends its episode as
    `task_error` (only its own: the others go on); one whose reset says it ended before
    the agent's first turn (`EpisodeEnv.ended_before_agent`) is `no_agent_turn`; a model
    call that still raises after `faults.model_retries` retries ends the episodes it served
    as `agent_error`.
    """
    faults = faults or FaultPolicy()
    episodes: list[Episode] = []
    threads: list[_EnvironmentThread] = []
    try:
        for (sample, group_index), seed in zip(samples, seeds, strict=True):
            environment = task.new_episode()
            thread = _EnvironmentThread(f"episode-{sample.sample_id}-{group_index}",
                                        faults.step_timeout_s, faults.max_hung_calls)
            episode = Episode(sample=sample, group_index=group_index, batch_index=batch_index,
                              environment=environment)
            # before reset: closed even if the reset fails
            episodes.append(episode)
            threads.append(thread)
            if _reset(episode, thread, seed):
                agent.start_episode(episode)
        thread_of = {id(episode): thread for episode, thread in zip(episodes, threads,
                                                                     strict=True)}
        while running := [episode for episode in episodes if episode.running]:
            replies = _act(agent, running, faults.model_retries)
            for index, episode in enumerate(running):
                if replies is None:
                    pass  # _act ended them
                elif replies[index].content is None:
                    _record_exchange(episode, replies[index].exchange)
                    episode.status = replies[index].status or EpisodeStatus.AGENT_CONTEXT_LIMIT
                else:
                    _interact(episode, replies[index], thread_of[id(episode)])
        _score_groups(task, episodes)
    finally:
        for episode, thread in zip(episodes, threads, strict=True):
            _close(episode, thread)
    return episodes


def _reset(episode: Episode, thread: _EnvironmentThread, seed: int) -> bool:
    """Reset the episode's environment in its thread; whether the agent takes a turn (not
    where the reset failed or the episode ended before the agent's first turn)."""
    sample, environment = episode.sample, episode.environment
    try:
        observation, info = thread.call(functools.partial(
            environment.reset, seed=seed,
            options={"sample": sample, "group_index": episode.group_index}))
    except Exception:  # a broken data row: this episode fails, the batch goes on
        _record_failure(episode, EpisodeStatus.TASK_ERROR, "reset")
        return False
    episode.add_message(Role.USER, observation)
    episode.info.update(info)
    if environment.ended_before_agent is not None:
        # no turn of the agent's: nothing to score or train, in no success rate
        episode.status = EpisodeStatus.NO_AGENT_TURN
        episode.info["ended_before_agent"] = environment.ended_before_agent
        return False
    return True


def _score_groups(task: Task[Any], episodes: list[Episode]) -> None:
    """Each group's (episodes of one sample) group-wise scores from the family."""
    groups: dict[str, list[Episode]] = {}
    for episode in episodes:
        groups.setdefault(episode.sample.sample_id, []).append(episode)
    for group in groups.values():
        # a failed episode has no outcome to score, one without an agent turn no reply
        scored = [episode for episode in group
                  if not episode.status.failed and episode.status.counted]
        if not scored:
            continue
        try:
            scores = task.score_group(scored)
        except Exception:  # the family's scoring failed (a judge's host, say): the group's
            for episode in scored:  # episodes fail, the batch goes on
                _record_failure(episode, EpisodeStatus.TASK_ERROR, "score_group")
            continue
        for episode, score in zip(scored, scores, strict=True):
            episode.reward = score.reward
            if score.outcome is not None:
                episode.outcome = score.outcome
            episode.metrics.update(score.metrics)
            episode.info.update(score.info)


def _act(agent: Agent, running: list[Episode], retries: int) -> list[AgentReply] | None:
    """The agent's replies, the call made again up to `retries` times if it raises; None
    once every try failed, with the running episodes ended as `agent_error`."""
    for attempt in range(retries + 1):
        try:
            return agent.act(running)
        except Exception:
            logger.exception("model call for %d episodes failed (try %d of %d)",
                             len(running), attempt + 1, retries + 1)
            if attempt == retries:
                for episode in running:
                    _record_failure(episode, EpisodeStatus.AGENT_ERROR, "model call")
    return None


def _record_exchange(episode: Episode, exchange: Sequence[ChatMessage]) -> None:
    """The messages of a reply's model calls into the chat, a turn per sampled reply."""
    episode.chat.extend(exchange)
    episode.turns += sum(message.role is Role.AGENT for message in exchange)


def _interact(episode: Episode, reply: AgentReply, thread: _EnvironmentThread) -> None:
    assert reply.content is not None
    if reply.exchange:
        _record_exchange(episode, reply.exchange)
    else:
        episode.add_message(Role.AGENT, reply.content)
        episode.turns += 1
    try:
        observation, reward, terminated, truncated, info = thread.call(
            functools.partial(episode.environment.step, reply.content))
    except Exception:  # the environment failed, not the model: keep the run alive
        _record_failure(episode, EpisodeStatus.TASK_ERROR, "step")
        return
    episode.reward += reward
    episode.status = info["status"]
    episode.outcome = info["outcome"]
    episode.metrics.update(info["metrics"])
    episode.info.update(info["extras"])
    if episode.running:
        episode.add_message(Role.USER, observation)


def _close(episode: Episode, thread: _EnvironmentThread) -> None:
    """Release the episode's resources in its thread; one that cannot close (its thread
    is stuck, or close raises) is logged and left, so that the others still close."""
    if thread.stuck:
        logger.warning("episode %s/%d left open: its environment is stuck",
                       episode.sample.sample_id, episode.group_index)
    else:
        try:
            thread.call(episode.environment.close)
        except Exception:
            logger.exception("closing the environment of sample %s failed",
                             episode.sample.sample_id)
    thread.stop()


def _record_failure(episode: Episode, status: EpisodeStatus, stage: str) -> None:
    """End `episode` with a failure `status` raised in `stage` (reset, step, model call);
    call from the `except` block that caught it. The reason goes in its `error`."""
    logger.exception("%s in %s of sample %s", status.value, stage, episode.sample.sample_id)
    episode.status = status
    episode.error = f"{stage}: {traceback.format_exc(limit=3)}"
