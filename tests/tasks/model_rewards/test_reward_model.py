"""A reward model as a reward, on tiny randomly initialised sequence-classification models
built here (a two-layer Llama with the embedded model's tokenizer, a one-layer BERT with a
vocabulary written here): the rubric's figures are the model's own scores, one input or a
padded batch, a logit or a label's probability, squashed and scaled; a group's replies
scored together in the model's batches; a long input keeps its end; the model loads once
per process; settings that cannot work are refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from pydantic import ValidationError

from src.records.episode import Sample
from src.tasks.model_rewards.reward_model import RewardModel
from src.tasks.reward_functions import RewardTerm
from src.tasks.rubric import Rubric
from tests.conftest import requires_embedded_model

SAMPLE = Sample(sample_id="train-000001", data={"question": "France", "answer": "Paris"})
PROMPT = "What is the capital of France?"
REPLIES = ["Paris.", "I believe the capital of France is Paris, on the Seine.", "Lyon"]


def save_llama(folder: Path, labels: int) -> Path:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

    from src.language_models.embedded_model import DEFAULT_MODEL, resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(DEFAULT_MODEL))
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, num_labels=labels,
                         id2label={0: "rejected", 1: "chosen"} if labels == 2 else None,
                         pad_token_id=tokenizer.pad_token_id,
                         initializer_range=0.5)  # inputs far apart in score
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        LlamaForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_llama(tmp_path_factory.mktemp("reward-llama"), labels=1)


@pytest.fixture(scope="module")
def llama_two_labels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_llama(tmp_path_factory.mktemp("reward-llama-2"), labels=2)


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    folder = tmp_path_factory.mktemp("reward-bert")
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "capital", "of", "france",
             "is", "paris", "lyon", "question", "reply", ":", "?", "."]
    BertTokenizerFast(vocab={word: index for index, word in enumerate(words)}
                      ).save_pretrained(folder)
    config = BertConfig(vocab_size=len(words), hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, num_labels=1,
                        initializer_range=0.5)  # inputs far apart in score
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        BertForSequenceClassification(config).save_pretrained(folder)
    return folder


def direct_logits(folder: Path, text: str, special_tokens: bool) -> torch.Tensor:
    """The model's logits for one input, unpadded, as transformers gives them."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        return model(**tokenizer(text, return_tensors="pt",
                                 add_special_tokens=special_tokens)).logits[0]


def chat(folder: Path, reply: str) -> str:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder).apply_chat_template(
        [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": reply}],
        tokenize=False)


@requires_embedded_model
def test_the_rubric_gives_the_models_logit_for_one_reply_or_a_padded_batch(llama: Path
                                                                          ) -> None:
    expected = [float(direct_logits(llama, chat(llama, reply), False)[0]) for reply in REPLIES]
    assert min(abs(a - b) for a in expected for b in expected if a != b) > 1e-2
    scorer = RewardModel(name="preference", model=str(llama))
    for reply, logit in zip(REPLIES, expected, strict=True):
        scored = Rubric([scorer]).score(reply, SAMPLE, PROMPT)
        assert scored.values["preference"] == pytest.approx(logit, abs=1e-5)
        assert scored.metrics()["preference/error"] == 0.0
    batched = scorer.scores([scorer.text_of(reply, PROMPT, SAMPLE.data, SAMPLE.sample_id)
                             for reply in REPLIES])
    assert batched == pytest.approx(expected, abs=1e-5)
    squashed = RewardModel(model=str(llama), squash=True, scale=2.0, batch_size=2)
    assert squashed.scores([scorer.text_of(reply, PROMPT, SAMPLE.data, SAMPLE.sample_id)
                            for reply in REPLIES]) == pytest.approx(
        [2.0 * float(torch.sigmoid(torch.tensor(logit))) for logit in expected], abs=1e-5)
    assert squashed.model is scorer.model  # loaded once per process


@requires_embedded_model
def test_a_groups_replies_are_one_forward_batch_scored_as_one_by_one(llama: Path) -> None:
    scorer = RewardModel(name="preference", model=str(llama), text="{reply} ({answer})",
                         batch_size=2)
    rows: list[int] = []  # the inputs of each forward pass
    hook = scorer.model.register_forward_hook(
        lambda _, __, output: rows.append(output.logits.shape[0]))
    try:
        # the last sample has no `answer`, which `text` reads: its reply's error alone
        samples = [SAMPLE] * 3 + [Sample(sample_id="train-000002", data={})]
        scored = Rubric([scorer]).score_group(REPLIES + ["Nice"], samples, [PROMPT] * 4)
        assert rows == [2, 1]  # in batches of batch_size, in one call
        alone = [Rubric([scorer]).score(reply, SAMPLE, PROMPT) for reply in REPLIES]
    finally:
        hook.remove()
    assert [score.values["preference"] for score in scored[:3]] == pytest.approx(
        [score.values["preference"] for score in alone], abs=1e-5)
    assert scored[3].values == {"preference": 0.0}
    assert scored[3].errors["preference"] == "KeyError: 'answer'"


@requires_embedded_model
def test_a_label_gives_its_probability(llama_two_labels: Path) -> None:
    text = f"Question: {PROMPT}\nReply: {REPLIES[0]}"
    probabilities = direct_logits(llama_two_labels, text, True).softmax(-1)
    term = RewardTerm(function="src.tasks.model_rewards.reward_model.RewardModel", parameters={
        "name": "chosen", "model": str(llama_two_labels), "label": "chosen",
        "text": "Question: {prompt}\nReply: {reply}"})
    scored = Rubric([term.build()]).score(REPLIES[0], SAMPLE, PROMPT)
    assert scored.values["chosen"] == pytest.approx(float(probabilities[1]), abs=1e-6)
    by_index = RewardModel(model=str(llama_two_labels), label=0,
                           text="Question: {prompt}\nReply: {reply}")
    assert by_index(REPLIES[0], PROMPT, SAMPLE.data, SAMPLE.sample_id) == pytest.approx(
        float(probabilities[0]), abs=1e-6)


def test_a_plain_text_input_gets_the_tokenizers_special_tokens(bert: Path) -> None:
    text = "question : {question} ? reply : {reply}"
    scorer = RewardModel(model=str(bert), text=text)
    expected = [float(direct_logits(bert, text.format(question="france", reply=reply),
                                    True)[0]) for reply in ("paris .", "lyon .")]
    assert abs(expected[0] - expected[1]) > 1e-2
    assert [scorer(reply, PROMPT, {"question": "france"}, "train-0")
            for reply in ("paris .", "lyon .")] == pytest.approx(expected, abs=1e-5)
    # without its [CLS] and [SEP] the input scores otherwise
    assert float(direct_logits(bert, text.format(question="france", reply="paris ."),
                               False)[0]) != pytest.approx(expected[0], abs=1e-3)


def test_a_long_input_keeps_its_end(bert: Path) -> None:
    scorer = RewardModel(model=str(bert), text="{reply}", max_length=6)
    long_reply = "the capital of france is lyon . the capital of france is paris ."
    # [CLS] + the last four words + [SEP]: the start is cut, the end stays
    expected = float(direct_logits(bert, "france is paris .", True)[0])
    assert expected != pytest.approx(float(direct_logits(bert, "the capital of france",
                                                         True)[0]), abs=1e-3)
    assert scorer.scores([long_reply]) == pytest.approx([expected], abs=1e-5)


@requires_embedded_model
def test_settings_that_cannot_work_are_refused_when_built(llama: Path,
                                                          llama_two_labels: Path) -> None:
    refused: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"model": str(llama), "labels": 1}, ValidationError, "labels"),
        ({"model": str(llama), "text": "{prompt} alone"}, ValidationError, "never reads"),
        ({"model": str(llama), "label": 0, "squash": True}, ValidationError, "squash"),
        ({"model": str(llama), "dtype": "float64"}, ValidationError, "dtype"),
        ({"model": str(llama_two_labels)}, ValueError, "has 2 labels: name the one"),
        ({"model": str(llama_two_labels), "label": "preferred"}, ValueError,
         "'preferred' is none of the model's \\['chosen', 'rejected'\\]"),
        ({"model": str(llama_two_labels), "label": 2}, ValueError, "labels 0 to 1"),
    ]
    for settings, error, message in refused:
        with pytest.raises(error, match=message):
            RewardModel(**settings)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_on_a_gpu_the_scores_are_the_cpus(bert: Path) -> None:
    replies = ["paris .", "lyon is the capital of france ."]
    on_cpu = RewardModel(model=str(bert), text="{reply}")
    on_gpu = RewardModel(model=str(bert), text="{reply}", device="cuda")
    assert on_gpu.model.device.type == "cuda"
    assert on_gpu.scores(replies) == pytest.approx(on_cpu.scores(replies), abs=1e-4)


@requires_embedded_model
def test_an_embedded_model_is_named_as_everywhere_in_the_project() -> None:
    # its score head is new (random): what is checked is that the name resolves and scores
    from src.language_models.embedded_model import DEFAULT_MODEL

    scores = RewardModel(model=DEFAULT_MODEL, label=0).scores(REPLIES[:2])
    assert len(scores) == 2 and all(0.0 <= score <= 1.0 for score in scores)
