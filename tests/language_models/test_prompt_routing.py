"""A rollout pool's routing: a later turn goes back to the engine that produced the
earlier one (its prefix cache holds it) while loads stay within one prompt of even."""

from __future__ import annotations

from src.language_models.rollout_pool.prompt_routing import PromptRouter


def test_a_later_turn_goes_to_the_engine_that_produced_its_prefix() -> None:
    router = PromptRouter(num_engines=2)
    router.remember({(1, 2, 3): 1, (1, 2): 0, (7, 8): 0})
    assert router.engine_for([1, 2, 3, 4]) == 1  # the longest remembered prefix wins
    assert router.engine_for([1, 2, 5]) == 0
    assert router.engine_for([9]) is None
    assert router.assign([[7, 8, 9], [1, 2, 3, 4], [5]]) == [[0, 2], [1]]


def test_loads_stay_even_when_one_engine_produced_every_prefix() -> None:
    router = PromptRouter(num_engines=2)
    router.remember({(index,): 0 for index in range(4)})
    shares = router.assign([[index, 10] for index in range(4)])
    assert shares == [[0, 1], [2, 3]]
    router.remember({})  # a new call's sequences replace the last call's
    assert router.engine_for([0, 10]) is None
