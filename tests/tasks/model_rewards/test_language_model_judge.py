"""A judge that is a language model of the run: a fake model scripted to answer chosen
verdicts (read as rewards, asked greedily through the model's chat template), the tiny
random Llama (garbage: a recorded judge error), concurrent calls batched into one generate
call with each verdict back to its caller, a group's replies judged in one generate call
(the tiny Llama's figures as one by one; cut at batch_size in their order), bounds in
time, refused settings, the math task judging each episode's last reply where its group
has ended, and a SingleTurnTask and the math task judged from a config, run to their end;
a config whose judge names the policy, or no listed model, is refused by the dry run."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from transformers import AutoTokenizer

from src.language_models.instance.huggingface_lora_language_model import (
    HuggingfaceLoRALanguageModel,
)
from src.language_models.language_model import Generation, LanguageModel, SamplingParams
from src.records.episode import EpisodeStatus, Outcome, Sample
from src.run_experiment import main
from src.tasks.instance.math_problems.task import MathProblemsTask
from src.tasks.model_rewards.judge import Judge, JudgeError
from src.tasks.reward_functions import RewardTerm
from src.tasks.rubric import ERRORS_KEY, TEXTS_KEY, Rubric
from src.tasks.splits import Splits
from tests.tasks.model_rewards.capitals_config import capitals_config
from tests.tasks.stepping import recorded_episode

SAMPLE = Sample(sample_id="train-000003", data={"question": "France", "answer": "Paris"})
TEMPLATE = "Question: {question}\nReference: {answer}\nReply: {reply}\nVerdict:"
YES_NO = {"yes": 1.0, "no": 0.0}


class ScriptedVerdictModel(LanguageModel):
    """A fake judge model: answers each prompt with the verdict of the first key of
    `verdicts` found in the prompt's text (else `otherwise`), after `delay_s`, and records
    each generate call's prompts (as text), its sampling settings, and how many calls ever
    ran at once."""

    def __init__(self, tokenizer_path: str, verdicts: dict[str, str],
                 otherwise: str = "I am not sure.", delay_s: float = 0.0,
                 context_tokens: int = 2048) -> None:
        self._tokenizer: Any = AutoTokenizer.from_pretrained(tokenizer_path)
        self.verdicts = verdicts
        self.otherwise = otherwise
        self.delay_s = delay_s
        self.context_tokens = context_tokens
        self.calls: list[list[str]] = []
        self.params: list[SamplingParams] = []
        self.most_at_once = 0
        self._running = 0
        self._lock = threading.Lock()

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def max_context_tokens(self) -> int:
        return self.context_tokens

    def generate(self, prompts: Any, params: SamplingParams,
                 seed: int | None = None) -> list[list[Generation]]:
        with self._lock:
            self._running += 1
            self.most_at_once = max(self.most_at_once, self._running)
        try:
            time.sleep(self.delay_s)
            texts = [self.tokenizer.decode(prompt) for prompt in prompts]
            self.calls.append(texts)
            self.params.append(params)
            answers = [next((verdict for key, verdict in self.verdicts.items() if key in text),
                            self.otherwise) for text in texts]
            return [[Generation(ids, [0.0] * len(ids), "stop")] for ids in
                    (self.tokenizer(answer, add_special_tokens=False)["input_ids"]
                     for answer in answers)]
        finally:
            with self._lock:
                self._running -= 1


def model_judge(judge_model: LanguageModel, **settings: Any) -> Judge:
    return Judge(**{"language_models": {"grader": judge_model}, "name": "graded",
                    "language_model": "grader", "template": TEMPLATE, "labels": YES_NO,
                    "max_tokens": 16, **settings})


def judge_reply(judge: Judge, reply: str, sample: Sample = SAMPLE) -> Any:
    return judge(reply, f"Capital of {sample.data['question']}?", sample.data,
                 sample.sample_id)


def test_a_fake_scripted_model_judges_greedily_through_its_chat_template(
        tiny_model_path: Path) -> None:
    model = ScriptedVerdictModel(str(tiny_model_path), {"Reply: Paris": "It is. \\boxed{Yes}",
                                                        "Reply: Lyon": "\\boxed{no}"})
    graded = model_judge(model, system="You grade capitals.", max_tokens=7)
    scored = Rubric([graded]).score("Paris", SAMPLE, "Capital of France?")
    message = "Question: France\nReference: Paris\nReply: Paris\nVerdict:"
    assert scored.values == {"graded": 1.0} and scored.metrics()["graded/error"] == 0.0
    assert scored.info() == {TEXTS_KEY: {"graded": {"prompt": message,
                                                     "verdict": "It is. \\boxed{Yes}"}}}
    assert judge_reply(graded, "Lyon").value == 0.0
    [[asked], [_]] = model.calls
    # the system message, then the filled template as the user's turn, then the reply's
    assert asked.index("You grade capitals.") < asked.index(message)
    assert asked.endswith("<|im_start|>assistant\n")
    assert model.params == [SamplingParams(temperature=0.0, max_new_tokens=7)] * 2
    # a reply judged before is not asked again
    assert judge_reply(graded, "Paris").value == 1.0 and len(model.calls) == 2


def test_the_tiny_random_models_garbage_is_a_recorded_judge_error(
        tiny_model_path: Path) -> None:
    model = HuggingfaceLoRALanguageModel(str(tiny_model_path))
    graded = model_judge(model, max_tokens=12)
    scored = Rubric([graded]).score("Paris", SAMPLE, "Capital of France?")
    assert scored.values == {"graded": 0.0} and scored.metrics()["graded/error"] == 1.0
    assert scored.errors["graded"].startswith("JudgeError: unreadable verdict")
    # the garbage is kept as the verdict's end in the message: greedy, so asked again
    # (a judge of its own, no cache between them) it is the same
    again = Rubric([model_judge(model, max_tokens=12)]).score("Paris", SAMPLE, "asked")
    assert again.errors == scored.errors


def test_concurrent_calls_become_one_generate_call_each_verdict_to_its_caller(
        tiny_model_path: Path) -> None:
    capitals = ["Paris", "Lyon", "Nice", "Lille", "Brest", "Metz"]
    model = ScriptedVerdictModel(str(tiny_model_path), {
        f"Reply: {capital}\n": "\\boxed{yes}" if index % 2 == 0 else "\\boxed{no}"
        for index, capital in enumerate(capitals)})
    graded = model_judge(model, batch_wait_s=1.0, batch_size=len(capitals))
    values: dict[str, float] = {}
    start = threading.Barrier(len(capitals))

    def call(capital: str) -> None:
        start.wait()
        values[capital] = judge_reply(graded, capital).value

    threads = [threading.Thread(target=call, args=(capital,)) for capital in capitals]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    [batch] = model.calls  # one generate call of every prompt
    assert sorted(text.split("Reply: ")[1].split("\n")[0] for text in batch) == sorted(capitals)
    assert values == {capital: 1.0 if index % 2 == 0 else 0.0
                      for index, capital in enumerate(capitals)}
    # a batch is cut at batch_size, and one model never generates in two threads at once
    model.calls.clear()
    small = model_judge(model, batch_wait_s=0.3, batch_size=2, cache_size=0)
    threads = [threading.Thread(target=judge_reply, args=(small, capital))
               for capital in capitals]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(len(batch) for batch in model.calls) == [2, 2, 2]
    assert model.most_at_once == 1


def test_a_groups_replies_reach_the_tiny_model_in_one_generate_call_scored_as_one_by_one(
        tiny_model_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = HuggingfaceLoRALanguageModel(str(tiny_model_path))
    chats: list[int] = []  # the chats of each generate call
    generate = model.generate

    def counted(prompts: Any, params: SamplingParams,
                seed: int | None = None) -> list[list[Generation]]:
        chats.append(len(prompts))
        return generate(prompts, params, seed)

    monkeypatch.setattr(model, "generate", counted)
    # the last reply is the first's again (asked once); Chad's sample has no `answer`,
    # which the template reads: its reply's error alone, never asked
    chad = Sample(sample_id="train-000009", data={"question": "Chad"})
    replies = ["Paris", "Lyon", "It is Paris, on the Seine.", "Marseille", "Paris", "Paris"]
    samples = [SAMPLE] * 4 + [chad, SAMPLE]
    prompts = ["Capital of France?"] * 6
    together = Rubric([model_judge(model, max_tokens=12)]).score_group(replies, samples,
                                                                       prompts)
    assert chats == [4]  # one call, each distinct request once
    one_by_one = [Rubric([model_judge(model, max_tokens=12, cache_size=0)]).score(*asked)
                  for asked in zip(replies, samples, prompts, strict=True)]
    assert chats == [4] + [1] * 5
    assert together == one_by_one
    assert together[4].errors["graded"].startswith("ValueError: template reads 'answer'")
    assert all(score.errors["graded"].startswith("JudgeError: unreadable verdict")
               for index, score in enumerate(together) if index != 4)


def test_a_groups_chats_are_cut_at_batch_size_in_their_order_and_bounded_in_time(
        tiny_model_path: Path) -> None:
    capitals = ["Paris", "Lyon", "Nice", "Lille", "Brest"]
    model = ScriptedVerdictModel(str(tiny_model_path), {"Reply: Paris\n": "\\boxed{yes}"},
                                 "\\boxed{no}")
    graded = model_judge(model, batch_size=2)
    rewards = graded.many([{"reply": capital, "prompt": "asked", "sample": SAMPLE.data,
                            "sample_id": SAMPLE.sample_id} for capital in capitals])
    assert [reward.value for reward in rewards] == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert [[text.split("Reply: ")[1].split("\n")[0] for text in call]
            for call in model.calls] == [["Paris", "Lyon"], ["Nice", "Lille"], ["Brest"]]
    # every reply of a group waits at most total_timeout_s from the group's asking
    slow = ScriptedVerdictModel(str(tiny_model_path), {}, "\\boxed{yes}", delay_s=1.5)
    began = time.monotonic()
    late = model_judge(slow, total_timeout_s=0.2, batch_size=2).many(
        [{"reply": capital, "prompt": "asked", "sample": SAMPLE.data,
          "sample_id": SAMPLE.sample_id} for capital in capitals])
    assert time.monotonic() - began < 1.0
    assert all(isinstance(error, JudgeError) and "no verdict within total_timeout_s=0.2"
               in str(error) for error in late)


def test_a_slow_failing_or_overfull_model_is_a_recorded_judge_error(
        tiny_model_path: Path) -> None:
    slow = ScriptedVerdictModel(str(tiny_model_path), {}, "\\boxed{yes}", delay_s=1.5)
    began = time.monotonic()
    with pytest.raises(JudgeError, match="no verdict within total_timeout_s=0.2"):
        judge_reply(model_judge(slow, total_timeout_s=0.2), "Paris")
    assert time.monotonic() - began < 1.0

    class Failing(ScriptedVerdictModel):
        def generate(self, prompts: Any, params: SamplingParams,
                     seed: int | None = None) -> list[list[Generation]]:
            raise RuntimeError("CUDA out of memory")

    failing = Failing(str(tiny_model_path), {})
    scored = Rubric([model_judge(failing)]).score("Paris", SAMPLE, "asked")
    assert scored.errors["graded"] == ("JudgeError: the judge's model gave no verdict: "
                                       "RuntimeError: CUDA out of memory")
    small = ScriptedVerdictModel(str(tiny_model_path), {}, "\\boxed{yes}", context_tokens=128)
    with pytest.raises(JudgeError, match="PromptTooLong: the judge's prompt is \\d+ tokens: "
                                         "with max_tokens=16 it passes the model's context"):
        judge_reply(model_judge(small), "Paris " * 100)
    assert small.calls == []
    assert judge_reply(model_judge(small), "Paris").value == 1.0


def test_judge_settings_of_the_other_kind_or_a_missing_model_are_refused(
        tiny_model_path: Path) -> None:
    model = ScriptedVerdictModel(str(tiny_model_path), {})
    refused = [
        ({"base_url": "http://127.0.0.1:9/v1"}, "give one of language_model"),
        ({"model": "judge-7b"}, "model: not read by a judge that is a language model"),
        ({"retries": 2, "backoff_s": 0.1}, "backoff_s, retries: not read by a judge that"),
    ]
    for settings, message in refused:
        with pytest.raises(ValidationError, match=message):
            model_judge(model, **settings)
    with pytest.raises(ValidationError, match="batch_wait_s: not read by a judge that is a "
                                              "server"):
        Judge(name="graded", base_url="http://127.0.0.1:9/v1", model="judge-7b",
              template=TEMPLATE, labels=YES_NO, batch_wait_s=0.1)
    with pytest.raises(ValueError, match="asks language model 'grader', which it was not "
                                         "given \\(given: other\\)"):
        Judge(language_models={"other": model}, language_model="grader", template=TEMPLATE,
              labels=YES_NO)
    term = RewardTerm(function="src.tasks.model_rewards.judge.Judge",
                      parameters={"language_model": "grader", "template": TEMPLATE,
                                  "labels": YES_NO})
    assert term.language_model_names() == {"language_model": "grader"}
    with pytest.raises(ValueError, match="names language models \\['grader'\\], which it "
                                         "was not given"):
        term.build()
    assert isinstance(term.with_language_models({"grader": model}).build(), Judge)
    with pytest.raises(ValueError, match="reward_terms: \\['accuracy'\\] are the task's own"):
        MathProblemsTask(splits=Splits(num_train=2, num_validation=1), reward_terms=[
            term.model_copy(update={"parameters": {**term.parameters, "name": "accuracy"}})
            .with_language_models({"grader": model})])


SCRIPTED_GRADER = """\
  language_model_list:
    - name: grader
      module: tests.tasks.model_rewards.test_language_model_judge.ScriptedVerdictModel
      parameters:
        tokenizer_path: TOKENIZER
        verdicts: {"Reply: NDjamena": "no idea"}
        otherwise: "\\\\boxed{yes}"
"""


def scripted_capitals_config(output: Path, judge_model: str, tokenizer: Path) -> str:
    judge = {"language_model": judge_model,
             "template": '"Reference: {answer}\\nReply: {reply}\\nVerdict:"',
             "labels": '{"yes": 1.0, "no": 0.0}'}
    return capitals_config(output, 4, 2, judge,
                           SCRIPTED_GRADER.replace("TOKENIZER", str(tokenizer)))


def test_a_single_turn_task_judged_by_a_language_model_from_a_config_runs_to_its_end(
        tmp_path: Path, tiny_model_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(scripted_capitals_config(tmp_path / "run", "grader", tiny_model_path))
    assert main(["--config_path", str(config), "--no_progress"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    rollouts = [row for row in rows if "rollout/helpful" in row]
    assert len(rollouts) == 2  # two batches
    # Chad's verdict is unreadable: its episodes score the judge 0 with an error
    assert sum(row["rollout/helpful/error"] for row in rollouts) == pytest.approx(1 / 2)
    [evaluation] = [row for row in rows if "eval/helpful" in row]
    assert evaluation["eval/reward"] == 1.5 and evaluation["eval/success_rate"] == 1.0
    episodes = [json.loads(line) for line in (tmp_path / "run" / "runs.jsonl").open()]
    assert len(episodes) == 8 and all(episode["status"] == "completed" for episode in episodes)
    for episode in episodes:
        info = episode["info"]
        if episode["sample_id"] == "train-000002":  # Chad
            assert episode["reward"] == 1.0
            assert info[ERRORS_KEY]["helpful"].startswith("JudgeError: unreadable verdict")
        else:
            assert episode["reward"] == 1.5
            assert info[TEXTS_KEY]["helpful"]["verdict"] == "\\boxed{yes}"
    # a judge naming a model that is not listed is found by the dry run
    config.write_text(scripted_capitals_config(tmp_path / "refused", "grder", tiny_model_path))
    assert main(["--config_path", str(config), "--dry_run"]) == 2
    assert ("names language model 'grder', which is not in language_model_list (have: "
            "grader)") in capsys.readouterr().err


MATH_CONFIG = """\
assignment_config:
  output_dir: {output}
  rollout: {{batch_size: 2, group_size: 2, num_epochs: 1, max_batches: 2}}
  evaluation: {{at_end: true, max_samples: 2}}
  task:
    name: math_problems
    parameters:
      num_train: 4
      num_validation: 2
      reward_weights: {{boxed_number: 0.1}}
      reward_terms:
        - function: src.tasks.model_rewards.judge.Judge
          weight: 0.9
          parameters:
            language_model: {judge_model}
            template: "Reference: {{answer}}\\nReply: {{reply}}\\nVerdict:"
            labels: {{"yes": 1.0, "no": 0.0}}
            max_tokens: 6
  language_model_list:
    - name: judge
      module: src.language_models.instance.huggingface_lora_language_model.HuggingfaceLoRALanguageModel
      parameters: {{model_name_or_path: {model}}}
{policy}  agent: {agent}
"""
POLICY = """\
    - name: policy
      module: src.language_models.instance.huggingface_lora_language_model.HuggingfaceLoRALanguageModel
      parameters: {{model_name_or_path: {model}}}
"""


def test_the_math_task_judged_by_the_tiny_model_keeps_the_verifiers_figures(
        tmp_path: Path, tiny_model_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(MATH_CONFIG.format(output=tmp_path / "run", judge_model="judge",
                                         model=tiny_model_path, policy="",
                                         agent="{name: oracle_agent}"))
    assert main(["--config_path", str(config), "--no_progress"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    rollouts = [row for row in rows if "rollout/judge" in row]
    assert len(rollouts) == 2
    for row in rollouts:  # the random model's verdicts are garbage; the verifier's stand
        assert row["rollout/judge/error"] == 1.0 and row["rollout/accuracy"] == 1.0
        assert row["rollout/reward"] == pytest.approx(0.1)  # the boxed number alone
    [evaluation] = [row for row in rows if "eval/judge" in row]
    assert evaluation["eval/accuracy"] == 1.0 and evaluation["eval/success_rate"] == 1.0
    episodes = [json.loads(line) for line in (tmp_path / "run" / "runs.jsonl").open()]
    assert len(episodes) == 8
    assert all(episode["outcome"] == "correct" and episode["info"][ERRORS_KEY]["judge"]
               .startswith("JudgeError: unreadable verdict") for episode in episodes)
    # the policy judging its own replies is refused before any weights load
    config.write_text(MATH_CONFIG.format(
        output=tmp_path / "refused", judge_model="policy", model=tiny_model_path,
        policy=POLICY.format(model=tiny_model_path),
        agent="{name: lora_rl_agent, parameters: {language_model: policy}}"))
    assert main(["--config_path", str(config), "--dry_run"]) == 2
    assert ("names language model 'policy', which assignment_config.agent.parameters."
            "language_model uses too") in capsys.readouterr().err


def test_the_math_task_judges_each_episodes_last_reply_where_its_group_ends(
        tiny_model_path: Path) -> None:
    model = ScriptedVerdictModel(str(tiny_model_path), {})
    term = RewardTerm(function="src.tasks.model_rewards.judge.Judge", weight=0.9,
                      parameters={"language_model": "grader", "template": TEMPLATE,
                                  "labels": YES_NO})
    task = MathProblemsTask(splits=Splits(num_train=2, num_validation=1), max_round=2,
                            reward_weights={"boxed_number": 0.1},
                            reward_terms=[term.with_language_models({"grader": model})])
    gold = int(task.get_sample("train-000000").data["answer"])
    right, also_right, wrong = (f"\\boxed{{{gold}}}", f"So \\boxed{{{gold}}}.",
                                f"\\boxed{{{gold + 1}}}")
    # yes to any right reply, even to the wrong one (which is never asked), no verdict
    # for a reply without a number
    model.verdicts = {f"Reply: {reply}\n": "\\boxed{yes}"
                      for reply in (right, also_right, wrong)}
    group = [recorded_episode(task, "train-000000", replies, index) for index, replies
             in enumerate([[wrong, right], [also_right], [wrong, "no idea"], [right]])]
    assert model.calls == []  # the steps judge nothing
    assert all("judge" not in episode.metrics for episode in group)
    scores = task.score_group(group)
    # one generate call: each episode's last reply, in order, each distinct one once
    [call] = model.calls
    assert [text.split("Reply: ")[1].split("\n")[0] for text in call] == [
        right, also_right, "no idea"]
    assert [score.reward for score in scores] == pytest.approx([1.0, 1.0, 0.0, 1.0])
    # the verifier decides the outcome; the judge's figures and texts are the episode's
    assert [episode.outcome for episode in group] == [
        Outcome.CORRECT, Outcome.CORRECT, Outcome.INCORRECT, Outcome.CORRECT]
    assert scores[0].metrics == {"judge": 1.0, "judge/error": 0.0, "scorer_timeout": 0.0}
    assert scores[0].info[TEXTS_KEY]["judge"]["verdict"] == "\\boxed{yes}"
    assert scores[2].metrics == {"judge": 0.0, "judge/error": 1.0, "scorer_timeout": 0.0}
    assert scores[2].info[ERRORS_KEY]["judge"].startswith("JudgeError: unreadable verdict")
    # as a reply judged by itself, where its episode ended
    alone = MathProblemsTask(splits=Splits(num_train=2, num_validation=1),
                             reward_terms=[term.with_language_models({"grader": model})])
    for episode, score in zip(group, scores, strict=True):
        assert episode.status is EpisodeStatus.COMPLETED
        reply = episode.chat[-1].content
        by_itself = alone.model_rubric.score(reply, episode.sample,
                                             episode.environment.prompt)
        assert score.metrics == by_itself.metrics() and score.info == by_itself.info()
        assert score.reward == episode.reward + by_itself.score
