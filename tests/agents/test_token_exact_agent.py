"""The LoRA agent's turn boundaries: decided on token ids, checked against the template."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from src.agents.instance.token_exact_agent import TokenExactAgent
from src.language_models.chat_template import (
    TemplateError,
    demonstration_ids,
    probe_turn_boundary,
)
from src.language_models.language_model import LanguageModel
from src.records.chat import Role
from src.records.episode import Episode, Sample
from src.run.evaluation import task_metrics
from tests.agents.scripted_model import ScriptedLanguageModel

SYSTEM_PROMPT = "You are terse."


def encode(model: LanguageModel, text: str) -> list[int]:
    return model.tokenizer(text, add_special_tokens=False)["input_ids"]


def rendered_ids(model: LanguageModel, episode: Episode) -> list[int]:
    """The template's own rendering of the chat so far, with the generation prompt."""
    roles = {Role.USER: "user", Role.AGENT: "assistant"}
    messages = [{"role": "system", "content": SYSTEM_PROMPT}]
    messages += [{"role": roles[m.role], "content": m.content} for m in episode.chat]
    text = model.tokenizer.apply_chat_template(messages, tokenize=False,
                                               add_generation_prompt=True)
    return encode(model, text)


def play(agent: TokenExactAgent, turns: int) -> Episode:
    """One episode of `turns` agent turns, each answered by a new user message."""
    episode = Episode(Sample(sample_id="s"), 0, 0, environment=None)  # type: ignore[arg-type]
    episode.add_message(Role.USER, "What is 2 + 2?")
    agent.start_episode(episode)
    for turn in range(turns):
        [reply] = agent.act([episode])
        episode.add_message(Role.AGENT, reply.content)
        episode.add_message(Role.USER, f"Turn {turn}: are you sure?")
    return episode


@pytest.mark.parametrize("cut_off_text", ["<", "<|"])
def test_truncated_reply_ending_in_a_closing_prefix_is_closed_by_the_end_of_turn_token_with_scripted_model(
        tiny_model_path: Path, cut_off_text: str) -> None:
    probe = ScriptedLanguageModel(tiny_model_path, [])
    end_of_turn = probe.tokenizer.convert_tokens_to_ids("<|im_end|>")
    truncated = encode(probe, "Four ") + encode(probe, cut_off_text)
    assert probe.tokenizer.decode(truncated[-1:]) == cut_off_text[-1]
    stopped = encode(probe, "Yes") + [end_of_turn]
    model = ScriptedLanguageModel(tiny_model_path, [(truncated, "length"), (stopped, "stop"),
                                                    (stopped, "stop")])
    agent = TokenExactAgent(model, system_prompt=SYSTEM_PROMPT, max_new_tokens=len(truncated))
    episode = play(agent, turns=2)
    agent.act([episode])  # feeds the last user message

    trajectory = episode.trajectory
    assert trajectory is not None
    (_, cut_end), (stop_start, stop_end), (last_start, _) = trajectory.turn_spans
    assert trajectory.token_ids[cut_end - len(truncated):cut_end] == truncated
    # The turn the token limit cut off still ends with the end-of-turn token, as a token
    # (not as the text "|im_end|>" after a sampled "<"), then the template's next turn.
    assert trajectory.token_ids[cut_end] == end_of_turn
    assert trajectory.token_ids[cut_end:stop_start] == (
        encode(model, "<|im_end|>\n<|im_start|>user\nTurn 0: are you sure?<|im_end|>\n"
                      "<|im_start|>assistant\n"))
    assert trajectory.token_ids[stop_end - 1] == end_of_turn
    assert trajectory.token_ids[stop_end] != end_of_turn  # not closed twice
    assert model.prompts[-1] == trajectory.token_ids[:last_start]
    assert model.tokenizer.decode(model.prompts[-1]) == model.tokenizer.decode(
        rendered_ids(model, episode))
    assert episode.info["template_consistent"] is True
    assert task_metrics([episode.to_record()], "rollout/") == {
        "rollout/template_inconsistent": 0.0}


def test_stopped_replies_give_exactly_the_ids_the_template_renders_with_scripted_model(
        tiny_model_path: Path) -> None:
    probe = ScriptedLanguageModel(tiny_model_path, [])
    end_of_turn = probe.tokenizer.convert_tokens_to_ids("<|im_end|>")
    replies = [(encode(probe, text) + [end_of_turn], "stop") for text in ("Four.", "Yes, 4.", "4")]
    model = ScriptedLanguageModel(tiny_model_path, [*replies, replies[-1]])
    agent = TokenExactAgent(model, system_prompt=SYSTEM_PROMPT)
    episode = play(agent, turns=3)
    agent.act([episode])  # feeds the last user message

    assert episode.trajectory is not None
    assert model.prompts[-1] == rendered_ids(model, episode)
    assert episode.trajectory.token_ids[:len(model.prompts[-1])] == model.prompts[-1]
    assert episode.metrics["template_inconsistent"] == 0.0


def test_a_reply_the_template_cannot_render_counts_as_inconsistent_with_scripted_model(
        tiny_model_path: Path) -> None:
    probe = ScriptedLanguageModel(tiny_model_path, [])
    end_of_turn = probe.tokenizer.convert_tokens_to_ids("<|im_end|>")
    turn_start = probe.tokenizer.convert_tokens_to_ids("<|im_start|>")
    # A special token inside the reply is fed as sampled but left out of the reply's text.
    replies = [(encode(probe, "Four") + [turn_start] + encode(probe, "x") + [end_of_turn], "stop"),
               (encode(probe, "Yes") + [end_of_turn], "stop")]
    agent = TokenExactAgent(ScriptedLanguageModel(tiny_model_path, replies),
                        system_prompt=SYSTEM_PROMPT)
    episode = play(agent, turns=1)
    agent.act([episode])  # feeds the last user message

    assert episode.info["template_consistent"] is False
    assert episode.metrics["template_inconsistent"] == 1.0


def test_every_sampled_turn_is_closed_by_the_end_of_turn_token(tiny_model_path: Path) -> None:
    from src.language_models.instance.huggingface_lora_language_model import (
        HuggingfaceLoRALanguageModel,
    )

    model = HuggingfaceLoRALanguageModel(str(tiny_model_path))
    end_of_turn = model.tokenizer.convert_tokens_to_ids("<|im_end|>")
    agent = TokenExactAgent(model, system_prompt=SYSTEM_PROMPT, max_new_tokens=3)
    torch.manual_seed(0)
    episode = play(agent, turns=3)

    trajectory = episode.trajectory
    assert trajectory is not None
    assert "length" in trajectory.finish_reasons[:-1]  # a random model rarely stops in 3 tokens
    # the last turn is not closed yet: no user message came after it
    for (start, end), finish_reason in zip(trajectory.turn_spans[:-1],
                                           trajectory.finish_reasons[:-1], strict=True):
        closed_at = end - 1 if finish_reason == "stop" else end
        assert trajectory.token_ids[closed_at] == end_of_turn
        assert all(trajectory.loss_mask[start:end]) and not trajectory.loss_mask[end]


def test_a_template_whose_turns_do_not_end_with_an_end_of_turn_token_is_refused(
        tiny_model_path: Path) -> None:
    model = ScriptedLanguageModel(tiny_model_path, [])
    model.tokenizer.chat_template = (
        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}")
    with pytest.raises(TemplateError, match="does not start with one of the model's end-of-turn"):
        TokenExactAgent(model)


def test_a_demonstration_is_tokenised_as_the_agent_feeds_and_samples_it_with_scripted_model(
        tiny_model_path: Path) -> None:
    """The supervised stage trains on exactly the ids and mask the agent would have
    produced had it sampled the demonstration's replies."""
    probe = ScriptedLanguageModel(tiny_model_path, [])
    end_of_turn = probe.tokenizer.convert_tokens_to_ids("<|im_end|>")
    texts = ["Four.", "Yes:\n```sql\nSELECT 4;\n```"]
    model = ScriptedLanguageModel(tiny_model_path, [
        (encode(probe, text) + [end_of_turn], "stop") for text in texts])
    agent = TokenExactAgent(model, system_prompt=SYSTEM_PROMPT)
    episode = play(agent, turns=2)
    trajectory = episode.trajectory
    assert trajectory is not None

    chat = [(message.role.value, message.content) for message in episode.chat[:-1]]
    ids, mask = demonstration_ids(model, probe_turn_boundary(model, SYSTEM_PROMPT),
                                  SYSTEM_PROMPT, chat)
    assert ids == trajectory.token_ids and mask == trajectory.loss_mask
    with pytest.raises(ValueError, match="ends with the agent's reply"):
        demonstration_ids(model, probe_turn_boundary(model, None), None, chat[:1])


def test_lifelong_agent_bench_s_path_names_the_agent() -> None:
    from src.agents.agent import Agent
    from src.agents.instance.lora_rl_agent import LoRARLAgent
    from src.configuration.components import import_component_class

    assert LoRARLAgent is TokenExactAgent
    assert import_component_class("src.agents.instance.lora_rl_agent", Agent) is TokenExactAgent
