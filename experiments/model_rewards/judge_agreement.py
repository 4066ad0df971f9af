"""How often a judge agrees with the math task's verifier on held-out replies.

    python3 -m experiments.model_rewards.judge_agreement REPLIES --config CONFIG \
        [--judge NAME] [--threshold 0.5] [--threads 16] [--output FILE]

REPLIES: a run folder (its last evaluation file, evaluation/step-N.jsonl; for a checkpoint,
the folder `python -m src.evaluate RUN --checkpoint best --target_dir DIR` writes), or one
evaluation file. Each counted episode's last reply is scored by the judge of CONFIG (the
math task's reward term of a `Judge` named NAME; the only one by default), built with the
language model it names and nothing else of the run, and by the task's verifier
(`accuracy`: math-verify on the last boxed answer against the sample's answer, the sample
drawn again from CONFIG's task). The judge calls a reply correct where its value reaches
`--threshold`; the replies are judged from `--threads` threads, so that the judge's model
answers them in batches.

Printed and written as JSON (`--output`, with each reply's verdict): agreement over the
replies the judge gave a verdict on, with its 95% Wilson interval; the confusion counts
(judge yes/no by verifier correct/incorrect); the judge's errors by the verifier's
outcome, and agreement counting an error as the judge's "no" (a run scores it 0).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from src.configuration.components import import_dotted
from src.language_models.language_model import LanguageModel
from src.maths.intervals import success_with_interval
from src.online_training.plan import load_online_config, plan_online_training
from src.records.chat import Role
from src.records.episode import EpisodeRecord, counted_records
from src.run.assembly import instantiate
from src.runtime.reproducibility import prepare_model_building
from src.storage.files import read_validated_json_lines
from src.tasks.instance.math_problems.rewards import accuracy
from src.tasks.instance.math_problems.task import MathProblemsTask
from src.tasks.model_rewards.judge import Judge, JudgeError
from src.tasks.model_rewards.judge_settings import JudgeSettings
from src.tasks.reward_functions import RewardTerm


def evaluation_file(replies: Path) -> Path:
    """`replies` if it is a file, else the last evaluation file of the folder."""
    if replies.is_file():
        return replies
    files = sorted((replies / "evaluation").glob("step-*.jsonl"))
    if not files:
        raise SystemExit(f"{replies}: no evaluation/step-*.jsonl (give a run folder, or an "
                         "evaluation file)")
    return files[-1]


def judge_term(reward_terms: list[RewardTerm], name: str | None) -> RewardTerm:
    """The reward term of the judge named `name` (the only judge where None)."""
    judges = {JudgeSettings.model_validate(term.parameters).name: term
              for term in reward_terms
              if term.parameters is not None and _is_judge(import_dotted(term.function))}
    if name is None and len(judges) == 1:
        return next(iter(judges.values()))
    if name not in judges:
        raise SystemExit(f"the config's task has judges {sorted(judges) or 'none'} among its "
                         f"reward_terms: name one with --judge")
    return judges[name]


def _is_judge(target: object) -> bool:
    return isinstance(target, type) and issubclass(target, Judge)


def judged(judge: Judge, record: EpisodeRecord, task: MathProblemsTask) -> dict[str, Any]:
    """One reply's verifier score and verdict (or the judge's error)."""
    sample = task.get_sample(record.sample_id)
    prompt = next(message.content for message in record.chat if message.role is Role.USER)
    reply = [message.content for message in record.chat if message.role is Role.AGENT][-1]
    row: dict[str, Any] = {"sample_id": record.sample_id, "group_index": record.group_index,
                           "verifier": accuracy(reply, sample.data["answer"])}
    try:
        verdict = judge(reply, prompt, sample.data, record.sample_id)
    except JudgeError as error:
        return row | {"judge": None, "error": str(error)}
    return row | {"judge": verdict.value, "verdict": verdict.texts["verdict"]}


def agreement(rows: list[dict[str, Any]], threshold: float) -> dict[str, Any]:
    """The figures of the module docstring over the scored replies."""
    confusion: Counter[str] = Counter()
    for row in rows:
        verifier = "correct" if row["verifier"] > 0 else "incorrect"
        judge = ("error" if row["judge"] is None
                 else "yes" if row["judge"] >= threshold else "no")
        confusion[f"judge_{judge}/verifier_{verifier}"] += 1
    equal = confusion["judge_yes/verifier_correct"] + confusion["judge_no/verifier_incorrect"]
    errors = sum(count for key, count in confusion.items() if key.startswith("judge_error"))
    verdicts = len(rows) - errors
    as_no = equal + confusion["judge_error/verifier_incorrect"]
    return {
        "replies": len(rows), "verdicts": verdicts, "equal": equal,
        "agreement": success_with_interval(equal, verdicts) if verdicts else None,
        "judge_errors": errors,
        "agreement_errors_as_no": success_with_interval(as_no, len(rows)) if rows else None,
        "confusion": dict(sorted(confusion.items())),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("replies", type=Path, help="a run folder, or an evaluation file")
    parser.add_argument("--config", type=Path, required=True,
                        help="an assignment whose math task has the judge in reward_terms")
    parser.add_argument("--judge", help="the judge's name (default: the only one)")
    parser.add_argument("--threshold", type=float, default=0.5,
                        help="a judge's value from which a reply counts as correct")
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--output", type=Path, default=Path("judge_agreement.json"))
    args = parser.parse_args(argv)

    source_file = evaluation_file(args.replies)
    records = [record for record in counted_records(
                   record for _, record in read_validated_json_lines(source_file,
                                                                     EpisodeRecord))
               if any(message.role is Role.AGENT for message in record.chat)]
    config, source = load_online_config(args.config)
    plan = plan_online_training(config, source)
    if not issubclass(plan.task.cls, MathProblemsTask):
        raise SystemExit(f"{args.config}: the task is a {plan.task.cls.__name__}, not the "
                         "math task whose verifier this compares with")
    term = judge_term(plan.task.parameters.get("reward_terms") or [], args.judge)
    assignment = config.assignment_config
    prepare_model_building(assignment.reproducible, assignment.random_seed)
    models: dict[str, LanguageModel] = {}
    for name in term.language_model_names().values():  # the judge's model alone
        models[name] = instantiate(plan.language_models[name], models)
    judge = term.with_language_models(models).build()
    # the task draws the samples again (their answers), and no model of its own is needed
    task = instantiate(replace(plan.task, parameters={**plan.task.parameters,
                                                       "reward_terms": None}), {})
    try:
        with ThreadPoolExecutor(args.threads) as pool:
            rows = list(pool.map(lambda record: judged(judge, record, task), records))
    finally:
        task.close()
        for model in models.values():
            model.close()
    figures = agreement(rows, args.threshold)
    name = JudgeSettings.model_validate(term.parameters).name
    print(f"judge '{name}' of {args.config} against the verifier on {len(rows)} replies of "
          f"{source_file}")
    print(f"agreement (replies with a verdict): {figures['agreement']}")
    print(f"judge errors: {figures['judge_errors']}; agreement counting an error as no: "
          f"{figures['agreement_errors_as_no']}")
    print("confusion: " + ", ".join(f"{key} {count}"
                                    for key, count in figures["confusion"].items()))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(
        {"replies_file": str(source_file), "config": str(args.config), "judge": name,
         "threshold": args.threshold, **figures, "rows": rows}, indent=2) + "\n")
    print(f"written: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
