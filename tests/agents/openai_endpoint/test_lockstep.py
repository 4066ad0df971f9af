"""The lockstep batcher: one generate for all waiting agents, in episode order; a failed
generate reaches every waiting call."""

from __future__ import annotations

import threading

import pytest

from src.agents.openai_endpoint.lockstep import LockstepBatcher
from src.language_models.language_model import Generation


def run_agents(batcher: LockstepBatcher, prompts: dict[int, list[int]]) -> dict[int, object]:
    results: dict[int, object] = {}

    def agent(order: int) -> None:
        try:
            results[order] = batcher.submit(order, prompts[order])
        except RuntimeError as error:
            results[order] = error
        finally:
            batcher.leave()

    batcher.open(len(prompts))
    threads = [threading.Thread(target=agent, args=(order,)) for order in reversed(prompts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


def test_one_generate_for_all_in_episode_order() -> None:
    batches = []

    def generate(prompts):
        batches.append([list(p) for p in prompts])
        return [Generation([p[0] + 100], [-1.0], "length") for p in prompts]

    results = run_agents(LockstepBatcher(generate), {0: [1], 1: [2], 2: [3]})
    assert batches == [[[1], [2], [3]]]
    assert {order: r.token_ids for order, r in results.items()} == {0: [101], 1: [102], 2: [103]}


def test_a_failed_generate_reaches_every_waiting_call() -> None:
    def generate(prompts):
        raise RuntimeError("the engine died")

    results = run_agents(LockstepBatcher(generate), {0: [1], 1: [2]})
    assert all(isinstance(r, RuntimeError) for r in results.values())


def test_an_agent_that_returns_without_calling_does_not_hold_the_others() -> None:
    batcher = LockstepBatcher(lambda prompts: [Generation([7], [0.0], "stop") for _ in prompts])
    batcher.open(2)
    batcher.leave()  # the first agent returned at once
    assert batcher.submit(1, [5]).token_ids == [7]


@pytest.mark.parametrize("agents", [1, 3])
def test_open_sets_the_number_of_agents(agents: int) -> None:
    batcher = LockstepBatcher(lambda prompts: [Generation([len(prompts)], [0.0], "stop")
                                               for _ in prompts])
    results = run_agents(batcher, {order: [order] for order in range(agents)})
    assert all(r.token_ids == [agents] for r in results.values())
