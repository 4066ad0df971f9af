"""Judge chats for training a judge adapter: train-split replies of math runs, each put in
a judge's prompt and answered with the verifier's verdict.

    python3 -m experiments.model_rewards.judge_chats RUNS_JSONL [RUNS_JSONL ...] \
        --config CONFIG --output CHATS [--watch_output RECORDS] [--watch_fraction 0.1] \
        [--mismatched 0] [--seed 42] [--judge NAME]

Each counted episode of a TRAIN-split problem (held-out problems are refused: the judge
is measured on them) gives one chat: the system message and template of CONFIG's judge
(as judge_agreement.py finds it) filled with the problem's answer and the episode's last
reply, and the assistant turn "The verdict is \\boxed{yes}." where the task's verifier
(`accuracy`) finds the reply right, else "\\boxed{no}." (the labels of the judge's
`labels`). Equal (problem, reply) pairs count once. With `--mismatched K` each reply also
gives K chats with the answers of other problems drawn at random, labelled the same way
(mostly a no for a reply that is right elsewhere: form alone must not earn a yes). The problems are split by a seeded
draw: a `--watch_fraction` of them give no chat but their episodes go to `--watch_output`
(an evaluation file for judge_agreement.py: the trained judge on train problems it never
saw). The classes are balanced by keeping a seeded draw of the larger one, as many as
the smaller; CHATS is a chats_jsonl source of the supervised stage
(src/supervised_training/config.py). Counts are printed.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import replace
from pathlib import Path

from experiments.model_rewards.judge_agreement import judge_term
from src.online_training.plan import load_online_config, plan_online_training
from src.records.chat import Role
from src.records.episode import EpisodeRecord, counted_records
from src.run.assembly import instantiate
from src.storage.files import read_validated_json_lines
from src.tasks.instance.math_problems.rewards import accuracy
from src.tasks.model_rewards.judge_settings import JudgeSettings
from src.tasks.task import parse_split_sample_id


def verdict_text(label: str) -> str:
    return f"The verdict is \\boxed{{{label}}}."


def judge_chat(settings: JudgeSettings, record: EpisodeRecord, answer: str,
               label: str) -> dict[str, list[dict[str, str]]]:
    """The judge's chat for the record's last reply, answered with `label`."""
    prompt = next(message.content for message in record.chat if message.role is Role.USER)
    reply = [message.content for message in record.chat if message.role is Role.AGENT][-1]
    if len(reply) > settings.max_field_chars:  # the judge would see it cut
        raise SystemExit(f"{record.sample_id}: a reply of {len(reply)} characters passes "
                         f"max_field_chars={settings.max_field_chars}")
    message = settings.template.format_map({"answer": answer, "reply": reply,
                                            "prompt": prompt,
                                            "sample_id": record.sample_id})
    system = [{"role": "system", "content": settings.system}] if settings.system else []
    return {"messages": [*system, {"role": "user", "content": message},
                         {"role": "assistant", "content": verdict_text(label)}]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="runs.jsonl files of math runs")
    parser.add_argument("--config", type=Path, required=True,
                        help="an assignment whose math task has the judge in reward_terms")
    parser.add_argument("--judge", help="the judge's name (default: the only one)")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--watch_output", type=Path)
    parser.add_argument("--watch_fraction", type=float, default=0.1)
    parser.add_argument("--mismatched", type=int, default=0,
                        help="chats per reply with another fit problem's answer")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)

    config, source = load_online_config(args.config)
    plan = plan_online_training(config, source)
    term = judge_term(plan.task.parameters.get("reward_terms") or [], args.judge)
    settings = JudgeSettings.model_validate(term.parameters)
    labels = settings.labels or {}
    yes = max(labels, key=labels.__getitem__)
    no = min(labels, key=labels.__getitem__)
    # the task draws the problems (their answers) and checks the replies: no judge needed
    task = instantiate(replace(plan.task, parameters={**plan.task.parameters,
                                                       "reward_terms": None}), {})
    try:
        train_ids = list(task.sample_ids("train"))
        watched = set(random.Random(args.seed).sample(
            train_ids, round(args.watch_fraction * len(train_ids))))
        draw = random.Random(args.seed)
        chats: dict[str, list[dict]] = {yes: [], no: []}
        seen: set[tuple[str, str]] = set()
        watch_lines: list[str] = []
        for path in args.runs:
            for _, record in read_validated_json_lines(path, EpisodeRecord):
                if not counted_records([record]) or not any(
                        message.role is Role.AGENT for message in record.chat):
                    continue
                split, _ = parse_split_sample_id(record.sample_id)
                if split != "train":
                    raise SystemExit(f"{path}: {record.sample_id} is a {split} problem: "
                                     "judge chats come from train problems only")
                if record.sample_id in watched:
                    watch_lines.append(record.model_dump_json())
                    continue
                reply = [message.content for message in record.chat
                         if message.role is Role.AGENT][-1]
                if (record.sample_id, reply) in seen:
                    continue
                seen.add((record.sample_id, reply))
                # the reply against its own problem's answer, and against the answers of
                # `--mismatched` other fit problems (mostly a no: a well-formed reply that
                # is right elsewhere, so that form alone does not earn a yes)
                others = draw.sample([sample_id for sample_id in train_ids
                                      if sample_id not in watched
                                      and sample_id != record.sample_id], args.mismatched)
                for sample_id in [record.sample_id, *others]:
                    answer = task.get_sample(sample_id).data["answer"]
                    label = yes if accuracy(reply, answer) > 0 else no
                    chats[label].append(judge_chat(settings, record, answer, label))
    finally:
        task.close()
    kept = min(len(chats[yes]), len(chats[no]))
    balanced = draw.sample(chats[yes], kept) + draw.sample(chats[no], kept)
    draw.shuffle(balanced)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("".join(json.dumps(chat) + "\n" for chat in balanced))
    print(f"chats of fit problems' distinct replies: {yes} {len(chats[yes])}, "
          f"{no} {len(chats[no])}; "
          f"kept {kept} of each: {args.output}")
    if args.watch_output is not None:
        args.watch_output.write_text("".join(line + "\n" for line in watch_lines))
        print(f"{len(watch_lines)} episodes of {len(watched)} watched train problems: "
              f"{args.watch_output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
