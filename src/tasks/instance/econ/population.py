"""The households of one economy: names, ages, jobs and skills (hourly wages), from a seed.

Skills are Lomax (Pareto II) distributed, as EconAgent's are Pareto: shape 8 with scale 961
puts the median at 961 * (2^(1/8) - 1) ~ 87 $/h; clipping to [2, 800] $/h keeps the tail
within the range EconAgent reports.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SKILL_SHAPE = 8.0
SKILL_SCALE = 961.0
MIN_SKILL, MAX_SKILL = 2.0, 800.0
MIN_AGE, MAX_AGE = 18, 60
_POPULATION_STREAM = 0  # keeps these draws apart from the monthly ones

FIRST_NAMES = ("Adam", "Maria", "James", "Aisha", "Wei", "Sofia", "Daniel", "Grace", "Omar",
               "Elena", "Lucas", "Priya", "Noah", "Hana", "Mateo", "Chloe", "Samuel", "Zara",
               "Ethan", "Leila")
LAST_NAMES = ("Mills", "Lopez", "Chen", "Okafor", "Smith", "Kowalski", "Nguyen", "Garcia",
              "Brown", "Haddad", "Johnson", "Rossi", "Patel", "Kim", "Martin", "Silva", "Cohen",
              "Novak", "Ali", "Walker")
# (lowest hourly skill, job): a household's job is the last whose threshold its skill reaches.
JOBS = ((0.0, "Cashier"), (15.0, "Farm Worker"), (30.0, "Cook"), (45.0, "Office Clerk"),
        (60.0, "Electrician"), (80.0, "Teacher"), (100.0, "Nurse"), (130.0, "Accountant"),
        (170.0, "Software Engineer"), (250.0, "Lawyer"), (400.0, "Physician"),
        (600.0, "Surgeon"))


@dataclass(frozen=True)
class Population:
    names: tuple[str, ...]
    jobs: tuple[str, ...]
    ages: np.ndarray  # years, at month 0
    skills: np.ndarray  # hourly wage at month 0 ($/h)

    @property
    def size(self) -> int:
        return len(self.names)


def job_for(skill: float) -> str:
    return [job for threshold, job in JOBS if skill >= threshold][-1]


def sample_population(economy_seed: int, num_households: int) -> Population:
    if num_households < 1:
        raise ValueError(f"sample_population: num_households must be at least 1, "
                         f"got {num_households}")
    rng = np.random.default_rng([economy_seed, _POPULATION_STREAM])
    skills = np.clip(SKILL_SCALE * rng.pareto(SKILL_SHAPE, num_households), MIN_SKILL, MAX_SKILL)
    ages = rng.integers(MIN_AGE, MAX_AGE + 1, num_households)
    first = rng.integers(0, len(FIRST_NAMES), num_households)
    last = rng.integers(0, len(LAST_NAMES), num_households)
    skills.flags.writeable = False
    ages.flags.writeable = False
    return Population(
        names=tuple(f"{FIRST_NAMES[i]} {LAST_NAMES[j]}" for i, j in zip(first, last, strict=True)),
        jobs=tuple(job_for(float(skill)) for skill in skills),
        ages=ages,
        skills=skills,
    )
