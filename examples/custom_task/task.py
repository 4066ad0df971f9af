"""Capital cities: a task in fifteen lines (samples, a prompt and a rubric)."""
from src.tasks.rubric import Rubric
from src.tasks.single_turn import SingleTurnTask

PAIRS = ("France:Paris Italy:Rome Japan:Tokyo Spain:Madrid Egypt:Cairo Russia:Moscow Peru:Lima "
         "China:Beijing Germany:Berlin Greece:Athens Kenya:Nairobi Cuba:Havana Norway:Oslo "
         "Iran:Tehran Austria:Vienna Poland:Warsaw Sweden:Stockholm Ireland:Dublin Chile:Santiago "
         "Portugal:Lisbon Hungary:Budapest Finland:Helsinki Denmark:Copenhagen Belgium:Brussels "
         "Thailand:Bangkok Canada:Ottawa England:London Turkey:Ankara Vietnam:Hanoi Syria:Damascus "
         "Nepal:Kathmandu Ukraine:Kyiv")
ROWS = [dict(zip(("question", "answer"), pair.split(":"), strict=True)) for pair in PAIRS.split()]


def correct(reply: str, answer: str) -> float:
    return float(answer.lower() in reply.lower())


def brief(reply: str) -> float:  # the city alone, not a sentence or a list of guesses
    return float(len(reply.split()) <= 3)


class Capitals(SingleTurnTask):
    def __init__(self, num_validation: int = 8) -> None:
        super().__init__({"train": ROWS[num_validation:], "validation": ROWS[:num_validation]},
                         Rubric([correct, brief], weights=[1.0, 0.2]),
                         prompt="What is the capital of {question}? Reply with the city only.",
                         oracle=lambda sample: sample["answer"])
