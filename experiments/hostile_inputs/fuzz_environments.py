"""Hostile environments through the Gymnasium and TextArena adapters, no model needed.

An environment made of faults (`FaultyText` for Gymnasium, `FaultyGame` for TextArena)
raises when made, reset or stepped, hangs in reset or step (waiting, or spinning in
Python), gives a huge or a non-text observation, or a reward that is no number (a string,
None, NaN, infinity). Whether an episode's environment is faulty is drawn from `random`
when it is made, on the episode's own streams, so that a batch mixes faulty and sound
episodes alike on every run. Games of two add opponents that raise, hang, or lose on an
invalid first move. Each target rolls out batches through the project's rollout
(`roll_out_lockstep`, `rollout.faults.step_timeout_s` of `--step_timeout_s`) with a
scripted agent, then a batch of sound episodes, timed against one rolled out before.
Counted per target:

- tries: episodes rolled out;
- crashes: exceptions out of the rollout;
- unscored: episodes ending `task_error` or `agent_error` (each expected where the
  environment itself broke: made, reset, hung, a non-text observation), split into the
  faulty episodes and the sound ones (these must be 0); `no_agent_turn` counted apart;
- environment errors: episodes scored with the metric `environment_error`;
- slowed: sound episodes of the batch after a hang that took longer than twice the
  batch before the hang and a second (a hung call holding up later episodes).

    python -m experiments.hostile_inputs.fuzz_environments --batches 2 \\
        --output outputs/hostile_inputs/fuzz_environments.json

Exit status 1 when a crash, an unscored sound episode or a slowed one was counted.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium

from src.agents.agent import Agent, AgentReply
from src.configuration.models import FaultPolicy
from src.records.episode import Episode, EpisodeStatus
from src.run.rollout import hung_calls, roll_out_lockstep
from src.tasks.adapters.gymnasium_text.task import GymnasiumTextTask
from src.tasks.adapters.textarena.task import TextArenaTask
from src.tasks.optional_packages import import_optional
from src.tasks.splits import SplitsWithSelection
from src.tasks.task import Task

textarena = import_optional("textarena", "textarena")

HANG_S = 20.0  # a hung call's length: past the step timeout, short of the study's end
HUGE_CHARS = 10_000_000
FAULT_RATE = 0.25  # the share of episodes whose environment is faulty
FAULTS = ("construct_raises", "reset_raises", "step_raises", "reset_hangs", "step_hangs",
          "step_spins", "huge_observation", "non_text_observation", "reward_string",
          "reward_none", "reward_nan", "reward_inf")
REWARDS: dict[str, Any] = {"reward_string": "won", "reward_none": None,
                           "reward_nan": float("nan"), "reward_inf": float("inf")}


def hang(fault: str) -> None:
    """A call that does not return within the step timeout: waiting, or computing."""
    if fault.endswith("spins"):
        until = time.monotonic() + HANG_S
        while time.monotonic() < until:
            pass
    else:
        threading.Event().wait(HANG_S)


class FaultyText(gymnasium.Env[str, str]):
    """A Gymnasium environment of text with `fault` in a `rate` share of its episodes;
    a sound one ends on the first reply, reward 1."""

    observation_space = action_space = gymnasium.spaces.Text(max_length=HUGE_CHARS)

    def __init__(self, fault: str = "none", rate: float = FAULT_RATE) -> None:
        self.fault = fault if random.random() < rate else "none"
        if self.fault == "construct_raises":
            raise RuntimeError("injected: the constructor raised")

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        if self.fault == "reset_raises":
            raise RuntimeError("injected: reset raised")
        if self.fault == "reset_hangs":
            hang(self.fault)
        return "Reply with anything.", {}

    def step(self, action: str) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        if self.fault == "step_raises":
            raise ValueError("injected: step raised")
        if self.fault in ("step_hangs", "step_spins"):
            hang(self.fault)
        if self.fault == "huge_observation":
            return "x" * HUGE_CHARS, 0.0, False, False, {}
        if self.fault == "non_text_observation":
            return {"not": "text"}, 0.0, False, False, {}
        return "", REWARDS.get(self.fault, 1.0), True, False, {}


class FaultyGame(textarena.Env):  # type: ignore[misc, name-defined]
    """A TextArena game of one player with `fault` in a `rate` share of its games; a
    sound one ends on the first move, reward 1."""

    def __init__(self, fault: str = "none", rate: float = FAULT_RATE) -> None:
        self.fault = fault if random.random() < rate else "none"
        if self.fault == "construct_raises":
            raise RuntimeError("injected: the constructor raised")

    def reset(self, num_players: int, seed: int | None = None) -> None:
        self.state = textarena.SinglePlayerState(num_players=num_players, seed=seed,
                                                 max_turns=3)
        self.state.reset(game_state={},
                         player_prompt_function=lambda **_: "Reply with anything.")
        if self.fault == "reset_raises":
            raise RuntimeError("injected: reset raised")
        if self.fault == "reset_hangs":
            hang(self.fault)

    def step(self, action: str) -> tuple[bool, dict[str, Any]]:
        if self.fault == "step_raises":
            raise ValueError("injected: step raised")
        if self.fault in ("step_hangs", "step_spins"):
            hang(self.fault)
        if self.fault == "huge_observation":
            self.state.add_observation(message="x" * HUGE_CHARS,
                                       observation_type=textarena.ObservationType.GAME_MESSAGE)
        elif self.fault == "non_text_observation":
            self.state.add_observation(message={"not": "text"},  # type: ignore[arg-type]
                                       observation_type=textarena.ObservationType.GAME_MESSAGE)
        else:
            self.state.set_outcome(REWARDS.get(self.fault, 1.0), "the game ended")
        return self.state.step()


def raising_opponent(observation: str) -> str:
    raise KeyError("injected: the opponent raised")


def hanging_opponent(observation: str) -> str:
    hang("opponent_hangs")
    return "[4]"


def nonsense_opponent(observation: str) -> str:
    return "nonsense"


class Replies(Agent):
    """One fixed reply to everything."""

    def __init__(self, reply: str) -> None:
        self.reply = reply

    def _act(self, episodes: Sequence[Episode]) -> list[AgentReply]:
        return [AgentReply(self.reply) for _ in episodes]


@dataclass
class Tally:
    target: str
    tries: int = 0
    crashes: int = 0
    unscored_faulty: int = 0
    unscored_sound: int = 0
    no_agent_turn: int = 0
    environment_errors: int = 0
    slowed: int = 0
    seconds: float = 0.0
    statuses: Counter[str] = field(default_factory=Counter)
    findings: list[str] = field(default_factory=list)


def gymnasium_task(fault: str, rate: float) -> GymnasiumTextTask:
    return GymnasiumTextTask(entry_point=f"{__name__}:FaultyText",
                             env_kwargs={"fault": fault, "rate": rate},
                             splits=SplitsWithSelection(num_train=256, num_validation=1),
                             max_turns=3)


def textarena_task(fault: str, rate: float) -> TextArenaTask:
    return TextArenaTask("FaultyGame-v0", env_kwargs={"fault": fault, "rate": rate},
                         splits=SplitsWithSelection(num_train=256, num_validation=1), max_turns=3)


def roll(task: Task[Any], agent: Agent, batch: int, size: int, timeout_s: float,
         tally: Tally, faulty: Callable[[Episode], bool]) -> float:
    """One batch of `size` samples, counted into `tally`; its wall time."""
    samples = [(task.get_sample(f"train-{(batch * size + index) % 256:06d}"), 0)
               for index in range(size)]
    started = time.monotonic()
    try:
        episodes = roll_out_lockstep(samples, task, agent, batch, list(range(size)),
                                     faults=FaultPolicy(step_timeout_s=timeout_s))
    except Exception as error:  # noqa: BLE001 - what the study counts
        tally.crashes += 1
        tally.findings.append(f"crash: {type(error).__name__}: {error}"[:300])
        return time.monotonic() - started
    seconds = time.monotonic() - started
    for episode in episodes:
        tally.tries += 1
        tally.statuses[episode.status.value] += 1
        tally.environment_errors += int(episode.metrics.get("environment_error", 0.0) > 0)
        if episode.status is EpisodeStatus.NO_AGENT_TURN:
            tally.no_agent_turn += 1
        elif episode.status.failed:
            if faulty(episode):
                tally.unscored_faulty += 1
            else:
                tally.unscored_sound += 1
                tally.findings.append(f"sound episode {episode.sample.sample_id} "
                                      f"{episode.status.value}: {episode.error}"[:300])
    return seconds


def fuzz_adapter(name: str, make: Callable[[str, float], Task[Any]], reply: str,
                 fault: str, batches: int, size: int, timeout_s: float) -> Tally:
    tally = Tally(f"{name} {fault}")
    started = time.monotonic()
    try:
        task = make(fault, FAULT_RATE)
    except Exception as error:  # noqa: BLE001 - the task's own check at construction
        tally.findings.append(f"task refused: {type(error).__name__}: {error}"[:300])
        tally.seconds = time.monotonic() - started
        return tally
    sound = make(fault, 0.0)

    def faulty(episode: Episode) -> bool:
        # the draw the environment made: the sample's first number on its streams
        seed = episode.sample.data.get("env_seed", episode.sample.data.get("game_seed"))
        return random.Random(seed).random() < FAULT_RATE

    agent = Replies(reply)
    before = roll(sound, agent, 1_000, size, timeout_s, Tally("baseline"), faulty)
    for batch in range(batches):
        roll(task, agent, batch, size, timeout_s, tally, faulty)
    after_tally = Tally("after")
    after = roll(sound, agent, 1_001, size, timeout_s, after_tally, lambda _: False)
    if after > 2 * before + 1.0:
        tally.slowed += after_tally.tries
        tally.findings.append(f"the sound batch after took {after:.1f} s, "
                              f"{before:.1f} s before")
    tally.unscored_sound += after_tally.unscored_sound
    tally.seconds = time.monotonic() - started
    return tally


def fuzz_opponents(batches: int, size: int, timeout_s: float) -> list[Tally]:
    tallies = []
    for opponent, game, player in (("raising_opponent", "TicTacToe-v0", "alternate"),
                                   ("hanging_opponent", "TicTacToe-v0", "alternate"),
                                   ("nonsense_opponent", "ConnectFour-v0", 1)):
        tally = Tally(f"textarena {game} {opponent}")
        started = time.monotonic()
        task = TextArenaTask(game, splits=SplitsWithSelection(num_train=256, num_validation=1),
                             max_turns=3, player=player, opponent_function=f"{__name__}.{opponent}")
        for batch in range(batches):
            roll(task, Replies("[col 3]" if game.startswith("Connect") else "[4]"), batch,
                 size, timeout_s, tally,
                 lambda _, opponent=opponent: opponent.startswith("hanging"))
        tally.seconds = time.monotonic() - started
        tallies.append(tally)
    return tallies


def summary_table(tallies: Sequence[Tally]) -> str:
    lines = ["| target | tries | crashes | unscored (faulty) | unscored (sound) | "
             "no agent turn | environment errors | slowed | seconds |",
             "| --- |" + " ---: |" * 8]
    for t in tallies:
        lines.append(f"| {t.target} | {t.tries} | {t.crashes} | {t.unscored_faulty} | "
                     f"{t.unscored_sound} | {t.no_agent_turn} | {t.environment_errors} | "
                     f"{t.slowed} | {t.seconds:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=2, help="faulty batches per target")
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--step_timeout_s", type=float, default=1.0)
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument("--output", help="the counts and findings as JSON")
    arguments = parser.parse_args(argv)
    if "FaultyGame-v0" not in textarena.envs.registration.ENV_REGISTRY:
        textarena.envs.registration.register(id="FaultyGame-v0",
                                             entry_point=f"{__name__}:FaultyGame")
    started = time.monotonic()
    tallies: list[Tally] = []
    for fault in arguments.faults.split(","):
        for name, make, reply in (("gymnasium", gymnasium_task, "anything"),
                                  ("textarena", textarena_task, "[1]")):
            print(f"{name} {fault}", flush=True)
            tallies.append(fuzz_adapter(name, make, reply, fault, arguments.batches,
                                        arguments.batch_size, arguments.step_timeout_s))
    tallies += fuzz_opponents(arguments.batches, arguments.batch_size,
                              arguments.step_timeout_s)
    print(summary_table(tallies))
    for tally in tallies:
        print(f"- {tally.target}: {dict(sorted(tally.statuses.items()))}")
        for finding in tally.findings[:3]:
            print(f"    {finding}")
    print(f"{sum(t.tries for t in tallies)} tries in {time.monotonic() - started:.0f} s; "
          f"environment calls still hung at the end: {hung_calls()}")
    if arguments.output:
        Path(arguments.output).parent.mkdir(parents=True, exist_ok=True)
    with open(arguments.output, "w") as stream:
            # asdict rebuilds a Counter from (key, count) pairs, counting the pairs
            json.dump({"targets": [asdict(t) | {"statuses": dict(t.statuses)}
                                   for t in tallies]}, stream, indent=1)
    bad = sum(t.crashes + t.unscored_sound + t.slowed for t in tallies)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
