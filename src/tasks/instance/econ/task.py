"""Household decisions in the EconAgent economy: the policy chooses work and consumption.

A sample is a month of a seeded economy whose households have followed the rule policy
(`rule_policy`) so far, and one or more of its households (`households_per_sample`; with
several, the episode asks for each in turn). The reply is `{"work": x, "consumption": y}`
(`reply_parser`); the month is then stepped with the sample's own draws, the other
households on the rule policy, and the reward is the household's expected value of the
month (`reward`; the mean over the households). A format failure scores -1.0. An episode
is CORRECT when its reward is at least the rule policy's. The reward is one value of the
simulated month (with several households, of the replies of every round), or the format
failure's in its place: not a weighted sum of terms of one reply, so no `Rubric`.

Metrics (averaged per batch): `json_parse_success`, `format_failure` (the share of -1.0
rewards), `work` and `consumption` (the mean decision of an episode, parsed replies only),
`valid_reward` (the reward of parsed replies) and `reward_vs_rule`. Their standard
deviations come from the per-episode values in runs.jsonl (`metrics`).

With `show_cash_on_hand`, the prompt also states the money the month leaves the household
if it works and if it does not, in dollars and in goods at today's price: the quantity the
rule policy's consumption share falls with (rank correlation -0.97 over 400 train
states of the task's seed 0), which the EconAgent prompt leaves to arithmetic. With
`compact_prompt` as well, the prompt is only the price, that line and a short question
(`prompt.compact_household_prompt`). With `show_market_outlook`, either prompt also states
the month's goods on sale, the purchases the households plan on the rule policy and the
price move that imbalance implies (`outlook`): the figure the planner's gain over the rule
follows (correlation 0.66 of its share shift on 800 train states of the compact prompt).

The oracle (the demonstrations of a supervised stage) answers with the rule policy, or with
`oracle_policy: planner` with the planner (`planner`): the best grid reply in expectation
over `planning_draws` other draws of the month, which beats the rule on average.

With `few_shot_examples` = k > 0, a prompt shows up to k of the best earlier training
decisions in the nearest situations (`memory`). The memory is filled when a group ends, so
every prompt of a batch sees the same history. It is the family's state: saved with each
checkpoint of the run (`save_state`) and read back when a killed run resumes.

`EconDecisionTask` is the family (samples, the rule economies computed once, the memory);
`EconEpisode` is one episode.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Literal

import numpy as np

from src.configuration.components import COMPONENTS
from src.records.episode import Episode, Outcome, Sample
from src.storage.state import Stateful
from src.tasks.instance.econ import planner
from src.tasks.instance.econ.baseline_run import rule_economy_states
from src.tasks.instance.econ.memory import (
    Experience,
    ExperienceMemory,
    situation_features,
)
from src.tasks.instance.econ.outlook import market_outlook
from src.tasks.instance.econ.population import Population, sample_population
from src.tasks.instance.econ.prompt import (
    compact_household_prompt,
    household_prompt,
    situation,
)
from src.tasks.instance.econ.reply_parser import Decision, FormatFailure, parse_decision
from src.tasks.instance.econ.reward import household_rewards
from src.tasks.instance.econ.rule_policy import rule_decisions
from src.tasks.instance.econ.simulation import (
    Decisions,
    EconomyState,
    MonthDraws,
    month_draws,
    planning_draws,
)
from src.tasks.instance.econ.utility import UtilityParameters
from src.tasks.splits import Splits
from src.tasks.task import (
    SPLITS,
    EpisodeEnv,
    EpisodeScore,
    StepOutcome,
    Task,
    parse_split_sample_id,
)

FORMAT_FAILURE_REWARD = -1.0
MEMORY_FILE = "few_shot_memory.json"
_ECONOMY_STREAM, _SAMPLE_STREAM = 0, 1
# (lowest hourly skill at month 0, category): each band holds about a third of households
SKILL_BANDS = ((0.0, "low_skill"), (40.0, "middle_skill"), (150.0, "high_skill"))
# Rule economies kept at once: about 1.3 MB each for 100 households over 240 months.
ECONOMIES_CACHED = 32


@COMPONENTS.register("econ_decision")
class EconDecisionTask(Task["EconEpisode"], Stateful):
    """One household's monthly work and consumption decision in a seeded EconAgent economy
    whose households have followed the rule policy so far, answered as strict JSON
    `{"work": x, "consumption": y}`. The reward is the household's expected utility of
    the month (src/tasks/instance/econ/reward.py has the formula and why); a format
    failure scores -1.0, and an episode is correct when its reward is at least the rule
    policy's. Categories: `low_skill`, `middle_skill`, `high_skill`. Metrics:
    `json_parse_success`, `format_failure`, `work`, `consumption`, `valid_reward`,
    `reward_vs_rule`. Study tools (a full simulation, replies against the rule, headroom
    over it) are in experiments/econ_policy/."""

    def __init__(
        self,
        # `seed` draws the economies and the samples from them; validation economies have
        # seeds of their own
        splits: Splits = Splits(),
        num_economies: int = 8,  # economies per split; samples take them in turn
        num_households: int = 100,  # per economy
        months: int = 120,  # simulated per economy; a sample is one of them
        households_per_sample: int = 1,  # > 1: the episode asks for each in turn
        # the reward's CRRA parameters (src/tasks/instance/econ/reward.py)
        utility: UtilityParameters | None = None,
        # k > 0: a prompt shows up to k of the best earlier training decisions in the
        # nearest situations, from a memory of `few_shot_capacity`, filled as groups end;
        # saved with the run's checkpoints (task_state/), so a resumed run prompts as the
        # uninterrupted one would
        few_shot_examples: int = 0,
        few_shot_capacity: int = 512,  # decisions kept, the oldest dropped first
        # the prompt also states the month's money, working and not, in dollars and in
        # goods at today's price
        show_cash_on_hand: bool = False,
        # with show_cash_on_hand: the prompt is only the price, that line and a short
        # question (a third of the tokens)
        compact_prompt: bool = False,
        # either prompt also states the month's goods on sale, the purchases the
        # households plan and the price move that imbalance implies
        show_market_outlook: bool = False,
        # the expert of a supervised stage. planner: the best grid reply in expectation
        # over `planning_draws` other draws of the month, which beats the rule on average
        oracle_policy: Literal["rule", "planner"] = "rule",
        planning_draws: int = 8,
    ) -> None:
        super().__init__(max_round=households_per_sample)
        for name, value, least in (("num_economies", num_economies, 1),
                                   ("num_households", num_households, 1), ("months", months, 2),
                                   ("few_shot_examples", few_shot_examples, 0),
                                   ("planning_draws", planning_draws, 1)):
            if value < least:
                raise ValueError(f"EconDecisionTask: {name} must be at least {least}, got {value}")
        if households_per_sample > num_households:
            raise ValueError(f"EconDecisionTask: households_per_sample={households_per_sample} "
                             f"exceeds num_households={num_households}")
        if compact_prompt and not show_cash_on_hand:
            raise ValueError("EconDecisionTask: compact_prompt is the cash-on-hand line and a "
                             "short question; set show_cash_on_hand: true with it")
        if oracle_policy not in ("rule", "planner"):
            raise ValueError(f"EconDecisionTask: oracle_policy must be 'rule' or 'planner', "
                             f"got {oracle_policy!r}")
        self.splits = splits
        self.num_economies = num_economies
        self.num_households = num_households
        self.months = months
        self.households_per_sample = households_per_sample
        # model_validate also takes the plain dicts of direct Python construction
        self.utility = UtilityParameters.model_validate(utility or {})
        self.few_shot_examples = few_shot_examples
        self.show_cash_on_hand = show_cash_on_hand
        self.compact_prompt = compact_prompt
        self.show_market_outlook = show_market_outlook
        self.oracle_policy = oracle_policy
        self.planning_draws = planning_draws
        self.memory = ExperienceMemory(few_shot_capacity) if few_shot_examples > 0 else None
        # Every episode of a sample's economy starts from its rule run: compute each once.
        self._economy_states: Callable[[int], tuple[EconomyState, ...]] = lru_cache(
            maxsize=ECONOMIES_CACHED)(self._rule_economy_states)

    # ---- samples -------------------------------------------------------------------
    def sample_ids(self, split: str = "train") -> Sequence[str]:
        return self.splits.sample_ids(split)

    def _economy_seed(self, split: str, economy: int) -> int:
        sequence = np.random.SeedSequence([self.splits.seed, SPLITS.index(split), _ECONOMY_STREAM,
                                           economy])
        return int(sequence.generate_state(1)[0])

    def _get_sample(self, sample_id: str) -> Sample:
        split, index = parse_split_sample_id(sample_id)
        if index >= len(self.sample_ids(split)):
            raise KeyError(f"econ sample id '{sample_id}' is beyond the {split} split")
        rng = np.random.default_rng([self.splits.seed, SPLITS.index(split), _SAMPLE_STREAM, index])
        economy_seed = self._economy_seed(split, index % self.num_economies)
        month = int(rng.integers(1, self.months))
        households = [int(h) for h in rng.choice(self.num_households,
                                                 self.households_per_sample, replace=False)]
        skill = float(sample_population(economy_seed, self.num_households).skills[households[0]])
        category = [name for threshold, name in SKILL_BANDS if skill >= threshold][-1]
        return Sample(sample_id=sample_id, category=category,
                      data={"economy_seed": economy_seed, "month": month,
                            "households": households})

    def _rule_economy_states(self, economy_seed: int) -> tuple[EconomyState, ...]:
        return rule_economy_states(economy_seed, self.num_households, self.months, self.utility)

    def sample_state(self, sample: Sample) -> EconomyState:
        """The economy at the start of the sample's month."""
        return self._economy_states(sample.data["economy_seed"])[sample.data["month"]]

    def planned_decision(self, sample: Sample, decisions: Decisions,
                         household: int) -> tuple[float, float]:
        """The planner's (work, share) for a household of the sample, the others as in
        `decisions`, averaged over `planning_draws` other draws of the sample's month."""
        draws = planning_draws(sample.data["economy_seed"], sample.data["month"],
                               self.num_households, self.planning_draws)
        return planner.planned_decision(self.sample_state(sample), decisions, household, draws,
                                        self.utility)

    def new_episode(self) -> EconEpisode:
        return EconEpisode(self)

    # ---- few-shot memory -----------------------------------------------------------
    def prompt(self, population: Population, state: EconomyState, household: int,
               plans: Decisions) -> str:
        """The household's prompt, with the best remembered decisions in similar situations
        (and, with `show_market_outlook`, the outlook of every household following `plans`)."""
        examples: list[Experience] = []
        if self.memory is not None:
            features = situation_features(state.savings[household], state.wage[household],
                                          state.price, state.last_redistribution)
            examples = self.memory.recall(features, self.few_shot_examples)
        outlook = market_outlook(state, plans) if self.show_market_outlook else None
        if self.compact_prompt:
            return compact_household_prompt(population, state, household, examples, outlook)
        return household_prompt(population, state, household, examples,
                                show_cash_on_hand=self.show_cash_on_hand, outlook=outlook)

    def _score_group(self, episodes: Sequence[Episode]) -> list[EpisodeScore]:
        """Remember the group's parsed training decisions for later prompts; the rewards
        stay as they are."""
        scores = super()._score_group(episodes)
        if self.memory is None:
            return scores
        for episode in episodes:
            decisions = episode.info.get("econ/decisions")
            if parse_split_sample_id(episode.sample.sample_id)[0] != "train" or decisions is None:
                continue
            state = self.sample_state(episode.sample)
            for decision in decisions:
                household = decision["household"]
                self.memory.add(Experience(
                    features=situation_features(state.savings[household], state.wage[household],
                                                state.price, state.last_redistribution),
                    situation=situation(state, household), work=decision["work"],
                    consumption=decision["consumption"],
                    advantage=episode.metrics["reward_vs_rule"]))
        return scores

    @property
    def keeps_state(self) -> bool:
        return self.memory is not None

    def save_state(self, directory: Path) -> None:
        if self.memory is not None:
            self.memory.save(directory / MEMORY_FILE)

    def restore_state(self, directory: Path) -> None:
        if self.memory is not None:
            self.memory.load(directory / MEMORY_FILE)


class EconEpisode(EpisodeEnv[EconDecisionTask]):
    def __init__(self, family: EconDecisionTask) -> None:
        super().__init__(family)
        self._population: Population | None = None
        self._state: EconomyState | None = None
        self._draws: MonthDraws | None = None
        self._rule: Decisions | None = None
        self._households: list[int] = []
        self._decisions: list[Decision] = []

    def _reset(self, sample: Sample) -> str:
        family = self.family
        self._population = sample_population(sample.data["economy_seed"], family.num_households)
        self._state = family.sample_state(sample)
        self._draws = month_draws(sample.data["economy_seed"], sample.data["month"],
                                  family.num_households)
        self._rule = rule_decisions(self._state, family.utility)
        self._households = list(sample.data["households"])
        self._decisions = []
        return self._prompt(self._households[0])

    def _prompt(self, household: int) -> str:
        assert self._population is not None and self._state is not None
        assert self._rule is not None
        # everyone on the rule's plans, the prompted household too: its own reply is unknown
        return self.family.prompt(self._population, self._state, household, self._rule)

    def _step(self, action: str) -> StepOutcome:
        parsed = parse_decision(action)
        if isinstance(parsed, FormatFailure):
            return StepOutcome(observation="", reward=FORMAT_FAILURE_REWARD, terminated=True,
                               outcome=Outcome.INCORRECT,
                               metrics={"json_parse_success": 0.0, "format_failure": 1.0},
                               info={"econ/format_error": parsed.reason})
        self._decisions.append(parsed)
        if len(self._decisions) < len(self._households):
            return StepOutcome(observation=self._prompt(self._households[len(self._decisions)]))
        return self._score_month()

    def _score_month(self) -> StepOutcome:
        assert self._state is not None and self._draws is not None and self._rule is not None
        utility = self.family.utility
        decisions = self._rule
        for household, decision in zip(self._households, self._decisions, strict=True):
            decisions = decisions.with_decision(household, decision.work, decision.consumption)
        reward = float(household_rewards(self._state, self._draws, decisions, self._households,
                                         utility).mean())
        rule_reward = float(household_rewards(self._state, self._draws, self._rule,
                                              self._households, utility).mean())
        metrics = {
            "json_parse_success": 1.0,
            "format_failure": 0.0,
            "work": float(np.mean([d.work for d in self._decisions])),
            "consumption": float(np.mean([d.consumption for d in self._decisions])),
            "valid_reward": reward,
            "reward_vs_rule": reward - rule_reward,
        }
        decisions = [{"household": h, "work": d.work, "consumption": d.consumption}
                     for h, d in zip(self._households, self._decisions, strict=True)]
        return StepOutcome(observation="", reward=reward, terminated=True,
                           outcome=Outcome.CORRECT if reward >= rule_reward else Outcome.INCORRECT,
                           metrics=metrics, info={"econ/decisions": decisions})

    def _oracle_reply(self) -> str:
        assert self._rule is not None and self.sample is not None
        household = self._households[len(self._decisions)]
        if self.family.oracle_policy == "planner":
            work, consumption = self.family.planned_decision(self.sample, self._rule, household)
        else:
            work = float(self._rule.work[household])
            consumption = float(self._rule.consumption[household])
        return Decision(work=work, consumption=consumption).to_json()
