"""Sampling from a copy whose LoRA layers run one fused product, in fp32 and bf16."""

from __future__ import annotations

import os

import torch

from src.language_models.language_model import SamplingParams, TokenBatch
from tests.language_models.policy_samples import (
    largest_logprob_difference,
    trained_looking_policy,
)


def sampled_logprobs_against_trainer(model, prompts, seed=0):
    generations = model.generate(prompts, SamplingParams(n=1, temperature=1.0,
                                                         max_new_tokens=10), seed=seed)
    return generations, largest_logprob_difference(model, prompts, generations)


def prompts_of(model):
    encode = model.tokenizer.encode
    first, second = encode("The colour of the sky is"), encode("Two plus two makes")
    return [first, first, first, second]


def test_fused_sampling_records_the_trainers_logprobs_and_follows_updates(
        tiny_model_path) -> None:
    merged = trained_looking_policy(tiny_model_path, dtype="float32")
    unmerged = trained_looking_policy(tiny_model_path, dtype="float32", fused_sampling=False)
    prompts = prompts_of(merged)
    for _ in range(2):
        ours, difference = sampled_logprobs_against_trainer(merged, prompts)
        theirs, _ = sampled_logprobs_against_trainer(unmerged, prompts)
        assert difference < 1e-5
        assert [g[0].token_ids for g in ours] == [g[0].token_ids for g in theirs]
        # an optimiser-like in-place update: the next call must sample from it
        with torch.no_grad():
            for model in (merged, unmerged):
                for name, parameter in model.model.named_parameters():
                    if "lora_A" in name:
                        parameter.mul_(3.0)
    # every tensor but the LoRA layers' weights is the training model's own
    base = merged.model.get_base_model()
    sampler = merged._fused.model
    assert (sampler.get_input_embeddings().weight.data_ptr()
            == base.get_input_embeddings().weight.data_ptr())
    attention = base.model.layers[0].self_attn
    projections = sampler.model.layers[0].self_attn.q_proj.projections
    assert projections._base_weights == [
        attention.q_proj.base_layer.weight, attention.k_proj.base_layer.weight,
        attention.v_proj.base_layer.weight]


def test_projections_of_one_input_are_one_group(tiny_model_path) -> None:
    from src.language_models.huggingface.fused_lora_sampler import _lora_layers, shared_input_groups

    model = trained_looking_policy(tiny_model_path, dtype="float32")
    groups = shared_input_groups(model.model, _lora_layers(model.model, "default"))
    layers = model.model.get_base_model().config.num_hidden_layers
    assert len(groups) == 4 * layers  # q/k/v, o, gate/up, down
    first = [[name.split(".")[-1] for name in group] for group in groups[:4]]
    assert first == [["q_proj", "k_proj", "v_proj"], ["o_proj"], ["gate_proj", "up_proj"],
                     ["down_proj"]]
    sampler = model._sampling_model()
    q_proj = sampler.model.layers[0].self_attn.q_proj
    assert q_proj.projections is sampler.model.layers[0].self_attn.v_proj.projections
    # a member called with another input than its group's computes for that input
    x = torch.randn(3, q_proj.projections.stacked.shape[-1])
    alone = model.model.get_base_model().model.layers[0].self_attn.k_proj(x)
    k_proj = sampler.model.layers[0].self_attn.k_proj
    q_proj(torch.randn_like(x))  # leaves q's group waiting for k and v of that input
    assert torch.allclose(k_proj(x), alone, atol=1e-6)


def test_a_groups_identical_prompts_are_prefilled_once(tiny_model_path) -> None:
    model = trained_looking_policy(tiny_model_path, dtype="float32", prefix_caching=False)
    prompts = prompts_of(model)
    decoder = model._sampling_model().get_decoder()
    batch_sizes = []
    original = decoder.forward

    def counting(*args, **kwargs):
        batch_sizes.append(kwargs["input_ids"].shape[0])
        return original(*args, **kwargs)

    decoder.forward = counting
    generations, difference = sampled_logprobs_against_trainer(model, prompts)
    assert batch_sizes[0] == 2  # two distinct prompts among four rows
    assert difference < 1e-5
    assert len({tuple(g[0].token_ids) for g in generations[:3]}) > 1  # rows still differ


def test_bfloat16_weights_with_float32_adapter_and_optimizer_state(tiny_model_path) -> None:
    model = trained_looking_policy(tiny_model_path, dtype="bfloat16")
    base = model.model.get_base_model()
    assert base.model.layers[0].mlp.up_proj.base_layer.weight.dtype == torch.bfloat16
    assert model._fused.model.model.layers[0].mlp.up_proj.projections.up.dtype == torch.bfloat16
    parameters = model.trainable_parameters()
    assert parameters and all(p.dtype == torch.float32 for p in parameters)
    prompts = prompts_of(model)
    _, difference = sampled_logprobs_against_trainer(model, prompts)
    assert difference < 0.1  # bf16 rounding: the sampler and trainer differ a little
    unfused = trained_looking_policy(tiny_model_path, dtype="bfloat16", fused_sampling=False)
    _, unfused_difference = sampled_logprobs_against_trainer(unfused, prompts)
    assert difference <= 2 * unfused_difference + 1e-3  # as close as PEFT's own path
    optimizer = torch.optim.AdamW(parameters, lr=1e-3)
    model.train_mode()
    batch = TokenBatch.from_sequences([prompts[0] + prompts[3]],
                                      [[0] * len(prompts[0]) + [1] * len(prompts[3])],
                                      model.pad_id)
    (-model.score(batch).logprobs.sum()).backward()
    optimizer.step()
    state = optimizer.state[parameters[0]]
    assert state["exp_avg"].dtype == torch.float32
    assert all(p.grad.dtype == torch.float32 for p in parameters)


def test_the_prefix_a_calls_prompts_share_is_prefilled_once(tiny_model_path) -> None:
    from src.language_models.huggingface.kv_cache_sampler import SHARED_PROMPT_MIN_TOKENS

    model = trained_looking_policy(tiny_model_path, dtype="float32", prefix_caching=False)
    encode = model.tokenizer.encode
    instructions = encode(" ".join(["Answer the question in one word."] * 4))
    assert len(instructions) >= SHARED_PROMPT_MIN_TOKENS
    prompts = [instructions + encode(" The colour of the sky is"),
               instructions + encode(" Two plus two makes"),
               instructions + encode(" Two plus two makes")]
    decoder = model._sampling_model().get_decoder()
    fed: list[tuple[int, int]] = []
    original = decoder.forward

    def counting(*args, **kwargs):
        fed.append(tuple(kwargs["input_ids"].shape))
        return original(*args, **kwargs)

    decoder.forward = counting
    generations, difference = sampled_logprobs_against_trainer(model, prompts)
    shared = len(os.path.commonprefix(prompts))
    assert shared >= len(instructions)
    assert fed[0] == (1, shared)  # the shared part once, as one row
    assert fed[1] == (2, max(len(prompt) for prompt in prompts) - shared)  # the rest, per prompt
    assert difference < 1e-5
    assert all(generation[0].token_ids for generation in generations)


def test_trained_base_biases_reach_the_sampler(tiny_biased_model_path) -> None:
    """LoRA's `bias: all` trains the base layers' biases: a bias written in place, with
    the adapter untouched, is sampled from at the next call."""
    from src.language_models.instance.huggingface_lora_language_model import LoRASettings

    model = trained_looking_policy(tiny_biased_model_path, dtype="float32",
                                   lora_config=LoRASettings(r=4, lora_alpha=8, bias="all"))
    prompts = prompts_of(model)
    _, difference = sampled_logprobs_against_trainer(model, prompts)
    assert difference < 1e-5
    with torch.no_grad():
        for name, parameter in model.model.named_parameters():
            if name.endswith("base_layer.bias"):
                parameter.add_(torch.randn_like(parameter))
    _, difference = sampled_logprobs_against_trainer(model, prompts)
    assert difference < 1e-5
