"""The LoRA policy on the embedded model: exactness of init, log-probs, adapters, turns."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from src.agents.instance.token_exact_agent import TokenExactAgent
from src.language_models.language_model import SamplingParams, TokenBatch
from src.records.chat import Role
from src.records.episode import Episode, EpisodeStatus, Sample
from tests.conftest import requires_embedded_model

pytestmark = [pytest.mark.slow, requires_embedded_model]


@pytest.fixture(scope="module")
def model():
    from src.language_models.instance.huggingface_lora_language_model import (
        HuggingfaceLoRALanguageModel,
        LoRASettings,
    )

    return HuggingfaceLoRALanguageModel(lora_config=LoRASettings(r=8, lora_alpha=16,
                                                                 lora_dropout=0.1))


def prompt(model, text: str) -> list[int]:
    rendered = model.tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                                   tokenize=False, add_generation_prompt=True)
    return model.tokenizer(rendered, add_special_tokens=False)["input_ids"]


def test_zero_initialised_lora_equals_the_base_model(model) -> None:
    # Every adapter adds exactly zero (B = 0) ...
    layers = [m for m in model.model.modules() if hasattr(m, "lora_B") and "default" in m.lora_B]
    assert layers
    for layer in layers:
        x = torch.randn(3, layer.lora_A["default"].in_features)
        delta = layer.lora_B["default"](layer.lora_A["default"](x))
        assert torch.count_nonzero(delta) == 0
    # ... so the logits equal the base model's up to the CPU BLAS's run-to-run rounding,
    # which differs between two forwards of the very same weights too.
    ids = torch.tensor([prompt(model, "What is 2 + 2?")])
    with torch.no_grad():
        with_adapter = model.model(input_ids=ids).logits
        with model.model.disable_adapter():
            base = model.model(input_ids=ids).logits
    assert torch.allclose(with_adapter, base, rtol=0, atol=1e-2)
    assert (with_adapter.argmax(-1) == base.argmax(-1)).all()


def test_sampling_logprobs_match_recomputed_logprobs(model) -> None:
    torch.manual_seed(0)
    prompts = [prompt(model, "Count to five."), prompt(model, "Name a colour.")]
    generations = model.generate(prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=24))
    sequences, masks, sampled = [], [], []
    for base, group in zip(prompts, generations, strict=True):
        for generation in group:
            sequences.append(base + generation.token_ids)
            masks.append([0] * len(base) + [1] * len(generation.token_ids))
            sampled += generation.logprobs
    batch = TokenBatch.from_sequences(sequences, masks, model.pad_id)
    with torch.no_grad():
        scored = model.score(batch, temperature=1.0)
    recomputed = scored.logprobs[batch.loss_mask.bool()]
    difference = (recomputed - torch.tensor(sampled)).abs()
    print(f"\nsampler vs trainer log-prob |diff|: mean {difference.mean():.2e} "
          f"max {difference.max():.2e} over {difference.numel()} tokens")
    assert difference.mean() < 1e-4


def test_top_p_logprobs_are_of_the_truncated_distribution(model) -> None:
    torch.manual_seed(1)
    [[generation]] = model.generate([prompt(model, "Say hi.")],
                                    SamplingParams(temperature=1.0, top_p=0.5, max_new_tokens=8))
    # under a nucleus the sampled token holds at least the nucleus' renormalised share
    assert all(logprob <= 0.0 for logprob in generation.logprobs)
    assert generation.finish_reason in ("stop", "length")


def test_saved_adapter_reloads_to_identical_outputs(model, tmp_path: Path) -> None:
    from src.language_models.instance.huggingface_lora_language_model import (
        HuggingfaceLoRALanguageModel,
        LoRASettings,
    )

    torch.manual_seed(2)
    with torch.no_grad():
        for name, parameter in model.model.named_parameters():
            if "lora_B" in name:
                parameter.add_(torch.randn_like(parameter) * 0.01)
    ids = prompt(model, "What is 3 + 5?")
    batch = TokenBatch.from_sequences([ids], [[0] + [1] * (len(ids) - 1)], model.pad_id)
    with torch.no_grad():
        before = model.score(batch).logprobs
    model.save_adapter(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    other = HuggingfaceLoRALanguageModel(
        lora_config=LoRASettings(r=8, lora_alpha=16, lora_dropout=0.1),
        adapter_path=str(tmp_path / "adapter"))
    with torch.no_grad():
        after = other.score(batch).logprobs
    assert torch.equal(before, after)
    assert other.policy_version == 0  # a constructor's adapter is version 0
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from src.language_models.embedded_model import resolve_model_path

    peft_model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(resolve_model_path("embedded:smollm2-135m")),
        str(tmp_path / "adapter"))
    with torch.no_grad():
        logits = peft_model(input_ids=torch.tensor([ids])).logits
        expected = model.model(input_ids=torch.tensor([ids])).logits
    assert torch.allclose(logits, expected, atol=1e-5)
    with torch.no_grad():  # undo the perturbation for the other tests of this module
        for name, parameter in model.model.named_parameters():
            if "lora_B" in name:
                parameter.zero_()


def test_multi_turn_trajectory_is_what_the_model_was_fed(model) -> None:
    agent = TokenExactAgent(model, system_prompt="You are terse.", max_new_tokens=12)
    fed: list[list[list[int]]] = []
    original = model.generate

    def recording_generate(prompts, params, seed=None):
        fed.append([list(p) for p in prompts])
        return original(prompts, params, seed)

    model.generate = recording_generate
    try:
        episodes = []
        for index in range(2):
            episode = Episode(Sample(sample_id=str(index)), 0, 0, environment=None)
            episode.add_message(Role.USER, f"Question {index}: what is {index} + 1?")
            agent.start_episode(episode)
            episodes.append(episode)
        torch.manual_seed(3)
        for turn in range(3):
            replies = agent.act(episodes)
            for episode, reply in zip(episodes, replies, strict=True):
                episode.add_message(Role.AGENT, reply.content)
                episode.add_message(Role.USER, f"Turn {turn}: are you sure?")
    finally:
        model.generate = original
    for row, episode in enumerate(episodes):
        trajectory = episode.trajectory
        for turn, (start, end) in enumerate(trajectory.turn_spans):
            assert trajectory.token_ids[:start] == fed[turn][row]
            assert all(trajectory.loss_mask[start:end])
        assert sum(trajectory.loss_mask) == sum(end - start for start, end in trajectory.turn_spans)
        assert episode.info["template_consistent"]


def test_context_limit_ends_the_episode_with_a_status(model) -> None:
    agent = TokenExactAgent(model, max_new_tokens=model.max_context_tokens)
    episode = Episode(Sample(sample_id="long"), 0, 0, environment=None)
    episode.add_message(Role.USER, "hello")
    agent.start_episode(episode)
    [reply] = agent.act([episode])
    assert reply.content is None and reply.status is EpisodeStatus.AGENT_CONTEXT_LIMIT


def test_bf16_training_autocast_scores_near_fp32_and_trains_fp32_parameters(model) -> None:
    ids = prompt(model, "What is 7 + 5? Answer with one number.") + model.tokenizer(
        "12", add_special_tokens=False)["input_ids"]
    batch = TokenBatch.from_sequences([ids], [[0] * (len(ids) - 2) + [1, 1]],
                                      pad_id=model.pad_id)
    exact = model.score(batch).logprobs
    model.training_autocast = "bfloat16"
    try:  # eval mode: LoRA dropout off, so only the products' precision differs
        with torch.enable_grad():
            scored = model.score(batch).logprobs
            (-scored.sum()).backward()
    finally:
        model.training_autocast = "none"
    parameters = model.trainable_parameters()
    assert all(parameter.dtype == torch.float32 for parameter in parameters)
    grads = [parameter.grad for parameter in parameters if parameter.grad is not None]
    assert grads and all(grad.dtype == torch.float32 for grad in grads)
    assert any(grad.abs().max() > 0 for grad in grads)
    for parameter in parameters:
        parameter.grad = None
    difference = (scored.detach() - exact).abs().max().item()
    assert 0 < difference < 0.1  # bf16 products: close, not equal
