"""GRPO step throughput: this project's training path against TRL's GRPOTrainer, same work.

Both sides train a LoRA adapter (r=8, alpha 16, dropout 0, on q_proj and v_proj) on the
embedded SmolLM2-135M (CPU; ours in --dtype, TRL in fp32 or with its bf16 flag,
--trl_bf16), loaded from the same converted Hugging Face folder,
on the same prompts: the math task's procedural level-1 problems with the worked
example, rendered with the chat template (the same prompt strings, checked to give the
same token ids to both). A step is 8 prompts x 4 samples at temperature 1.0, at most 64
new tokens, rewarded by the project's math accuracy reward (1 if math-verify says the
boxed answer is right, else 0), GRPO advantages, PPO-clip loss with eps 0.2, no KL
(beta 0), one AdamW update per batch at a constant learning rate, gradients clipped at
norm 1.0. With ours in bfloat16, the trainer's log-probs are the PPO ratio's "old" and
token-level TIS (C = 2) corrects for the sampler, as a bf16 run does
(mismatch: {old_logprobs: trainer, correction: tis}).

- Ours: the code path a run takes: TokenExactAgent + roll_out_lockstep (the experiment
  loop's rollout, with the task's rewards) + RLTrainer.train.
- TRL: GRPOTrainer with a datasets.Dataset of the prompt strings and a wrapper around
  the same reward function; num_iterations 1, gradient_accumulation_steps 1, one
  generation batch of 8 x 4 per optimizer step; a TrainerCallback times each step
  (on_step_begin to on_step_end) and reads completions/mean_length from its logs.

Both are built once, then run alternately in one process, TRL step then our step,
--warmup steps each (not counted) and --pairs measured pairs. Printed: the
configuration, per-step wall time and completion tokens, the median of the per-pair
ratios (TRL time / our time), the median completion tokens trained per second, and a
breakdown of our step (generation; reference/old log-prob pass; training forward,
backward and optimizer step), timed by wrapping the model's `generate` and `score` and
the learner's clipped optimizer step from outside (src/ is unchanged). TRL's generation
and loss forward are timed the same way for comparison. Results also go to --out as JSON.

python bench/grpo_vs_trl.py [--pairs 5] [--warmup 1] [--prompts 8] [--samples 4]
    [--max_new_tokens 64] [--learning_rate 1e-5] [--loss_type dapo|grpo]
    [--micro_batch_max_tokens 512 | 0 for one micro-batch]
    [--trl_attn_implementation sdpa|grouped_sdpa] [--torch_profile]
    [--dtype float32|bfloat16] [--trl_bf16]
    [--out outputs/bench/grpo_vs_trl.json]
"""

from __future__ import annotations

import argparse
import math
import random
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from roofline import (  # noqa: E402, I001
    DecoderShape,
    Peaks,
    Work,
    decode_work,
    measure_peaks,
    roofline_line,
    tokens_fed_by,
    training_work,
)

from src.agents.instance.token_exact_agent import TokenExactAgent  # noqa: E402
from src.language_models.embedded_model import DEFAULT_MODEL, resolve_model_path  # noqa: E402
from src.language_models.instance.huggingface_lora_language_model import (  # noqa: E402
    HuggingfaceLoRALanguageModel,
    LoRASettings,
)
from src.online_training.trainer import RLTrainer  # noqa: E402
from src.records.chat import Role  # noqa: E402
from src.records.episode import Episode, Sample  # noqa: E402
from src.run.rollout import roll_out_lockstep  # noqa: E402
from src.run.trainer import BatchContext, TrainingSchedule  # noqa: E402
from src.storage.files import atomic_write_json  # noqa: E402
from src.tasks.instance.math_problems.rewards import accuracy  # noqa: E402
from src.tasks.instance.math_problems.task import MathProblemsTask  # noqa: E402
from src.tasks.splits import Splits
from src.training import learner as learner_module  # noqa: E402
from src.training.settings import (  # noqa: E402
    AdvantageSettings,
    KLSettings,
    MismatchSettings,
    OptimizerSettings,
    PPOSettings,
    RewardSettings,
)

LORA = {"r": 8, "lora_alpha": 16, "lora_dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
# TRL loss_type -> our loss_aggregation. With one process, gradient_accumulation_steps 1
# and steps_per_generation 1, TRL's "dapo" divides the summed per-token loss by the
# number of completion tokens in the whole batch: our token-mean. "grpo" averages each
# sequence over its tokens, then over sequences: our seq-mean-token-mean.
LOSS_TYPES = {"dapo": "token-mean", "grpo": "seq-mean-token-mean"}
RESULT_DEFAULT = Path(__file__).resolve().parents[1] / "outputs/bench/grpo_vs_trl.json"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class Stopwatch:
    """Seconds spent in wrapped calls, by label, since the last reset."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def reset(self) -> None:
        self.seconds = defaultdict(float)

    def wrap(self, function, label):
        """`function` timed under `label`; a callable label picks it per call."""

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                name = label() if callable(label) else label
                self.seconds[name] += time.perf_counter() - start

        return timed


# ---- our side ----------------------------------------------------------------------
class OurTrainer:
    """The project's own pieces, wired as the experiment loop wires them."""

    def __init__(self, arguments: argparse.Namespace, task: MathProblemsTask,
                 samples: list[Sample]):
        self.arguments = arguments
        self.task = task  # the family: each episode gets its own environment from it
        self.samples = samples
        self.model = HuggingfaceLoRALanguageModel(
            model_name_or_path=DEFAULT_MODEL, dtype=arguments.dtype, device="cpu",
            lora_config=LoRASettings(**LORA))
        self.shape = DecoderShape.of(self.model.model.get_base_model())
        exact = self.model.dtype == torch.float32
        self.agent = TokenExactAgent(self.model, temperature=1.0, top_p=1.0,
                                 max_new_tokens=arguments.max_new_tokens)
        # The trainer scores at the temperature each trajectory records: the agent's 1.0.
        self.callback = RLTrainer(
            self.model,
            advantage=AdvantageSettings(estimator="grpo", clip=None, zero_std_groups="keep"),
            ppo=PPOSettings(loss="ppo_clip", clip_ratio_low=0.2, clip_ratio_high=0.2,
                            dual_clip=None, epochs=1, mini_batch_size=None,
                            aggregation=LOSS_TYPES[arguments.loss_type], entropy_coeff=0.0,
                            mask_truncated_completions=False),
            kl=KLSettings(coef=0.0), reward=RewardSettings(),
            optimizer=OptimizerSettings(
                optimizer_class="AdamW", learning_rate=arguments.learning_rate,
                weight_decay=0.0, lr_schedule="constant", warmup_ratio=0.0,
                max_grad_norm=1.0, gradient_accumulation_steps=1,
                micro_batch_max_tokens=arguments.micro_batch_max_tokens or None),
            mismatch=MismatchSettings() if exact else MismatchSettings(
                old_logprobs="trainer", correction="tis", level="token", threshold=2.0),
            seed=arguments.seed)
        self.callback.prepare(TrainingSchedule(arguments.warmup + arguments.pairs,
                                                   arguments.prompts * arguments.samples))
        # Timers around the calls the step makes (src/ is unchanged): the model's methods
        # on the instance (the learner scores through the same object), and the clipped
        # optimizer step (clip, AdamW step, schedule, zero_grad) as src.training.learner
        # imported it; only our learner calls it in this process.
        self.watch = Stopwatch()
        self.model.generate = self.watch.wrap(self.model.generate, "generation")
        self.model.score = self.watch.wrap(
            self.model.score,
            lambda: "training_forward" if torch.is_grad_enabled() else "logprob_pass")
        learner_module.clipped_optimizer_step = self.watch.wrap(
            learner_module.clipped_optimizer_step, "optimizer_step")

    def step(self, index: int) -> dict:
        arguments = self.arguments
        prompts = self.samples[index * arguments.prompts:(index + 1) * arguments.prompts]
        pairs = [(sample, g) for sample in prompts for g in range(arguments.samples)]
        seeds = [arguments.seed * 1_000_003 + index * 10_007 + slot for slot in range(len(pairs))]
        self.watch.reset()
        start = time.perf_counter()
        episodes = roll_out_lockstep(pairs, self.task, self.agent, index, seeds)
        rolled_out = time.perf_counter()
        metrics = self.callback.train(BatchContext(index, episodes, arguments.samples))
        end = time.perf_counter()
        parts = dict(self.watch.seconds)
        total, update = end - start, end - rolled_out
        breakdown = {
            "generation": parts.get("generation", 0.0),
            "logprob_pass": parts.get("logprob_pass", 0.0),
            "training_forward": parts.get("training_forward", 0.0),
            "optimizer_step": parts.get("optimizer_step", 0.0),
        }
        # the update's remainder: loss terms, backward, token batch, advantages, metrics
        breakdown["backward_and_loss"] = (update - breakdown["logprob_pass"]
                                          - breakdown["training_forward"]
                                          - breakdown["optimizer_step"])
        # the rollout's remainder: templating, task steps and rewards, bookkeeping
        breakdown["rollout_other"] = (rolled_out - start) - breakdown["generation"]
        tokens = sum(episode.trajectory.completion_token_count for episode in episodes)
        sequences = [list(episode.trajectory.token_ids) for episode in episodes]
        fed = tokens_fed_by(sequences, self.model.packs_shared_prefixes)
        longest = max(episode.trajectory.completion_token_count for episode in episodes)
        prompt = statistics.mean(len(s) - e.trajectory.completion_token_count
                                 for s, e in zip(sequences, episodes, strict=True))
        work = {"generation": decode_work(self.shape, tokens, longest, prompt + longest / 2,
                                          tokens / longest, self.model.dtype),
                "training": training_work(self.shape, fed, tokens, self.model.dtype)}
        return {"seconds": total, "completion_tokens": tokens, "fed_tokens": fed,
                "work": {key: vars(value) for key, value in work.items()},
                "mean_length": tokens / len(episodes), "reward": metrics.get("reward"),
                "frac_reward_zero_std": metrics.get("frac_reward_zero_std"),
                "loss": metrics.get("loss"), "breakdown": breakdown}

    def prompt_ids(self, sample: Sample) -> list[int]:
        """The token ids the agent feeds for this sample's first turn."""
        env = self.task.new_episode()
        observation, _ = env.reset(options={"sample": sample})
        episode = Episode(sample=sample, group_index=0, batch_index=0, environment=env)
        episode.add_message(Role.USER, observation)
        self.agent.start_episode(episode)
        assert episode.trajectory is not None
        return list(episode.trajectory.token_ids)


# ---- TRL's side --------------------------------------------------------------------
def roofline_lines(step: dict, dtype: torch.dtype, peaks: Peaks) -> list[str]:
    """Our step's generation and training (forward + backward + loss) against the peaks."""
    parts = step["breakdown"]
    training_seconds = (parts["logprob_pass"] + parts["training_forward"]
                        + parts["backward_and_loss"])
    return [roofline_line("generation", Work(**step["work"]["generation"]),
                          parts["generation"], dtype, peaks),
            roofline_line(f"training ({step['fed_tokens']} tokens fed)",
                          Work(**step["work"]["training"]), training_seconds, dtype, peaks)]


def build_trl(arguments: argparse.Namespace, model_path: str, prompts: list[str],
              answers: list[str], callbacks: list, output_dir: str):
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    def math_accuracy(completions: list[str], answer: list[str], **kwargs) -> list[float]:
        """The project's accuracy reward, per completion (strings: non-chat prompts)."""
        return [accuracy(completion, gold) for completion, gold in
                zip(completions, answer, strict=True)]

    group = arguments.prompts * arguments.samples
    config = GRPOConfig(
        output_dir=output_dir,
        max_steps=arguments.warmup + arguments.pairs,
        per_device_train_batch_size=group,  # one optimizer step = 8 prompts x 4 samples
        gradient_accumulation_steps=1,
        num_generations=arguments.samples,
        num_iterations=1,  # steps_per_generation defaults to gradient_accumulation_steps: 1
        shuffle_dataset=False,  # prompts in dataset order, the order our side uses
        max_completion_length=arguments.max_new_tokens,
        temperature=1.0, top_p=1.0, top_k=0, min_p=None, repetition_penalty=1.0,
        beta=0.0, epsilon=0.2, epsilon_high=None, delta=None,
        loss_type=arguments.loss_type, scale_rewards="group",
        importance_sampling_level="token", mask_truncated_completions=False,
        learning_rate=arguments.learning_rate, lr_scheduler_type="constant", warmup_steps=0,
        optim="adamw_torch", weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999,
        adam_epsilon=1e-8, max_grad_norm=1.0,
        bf16=arguments.trl_bf16, fp16=False,  # GRPOConfig turns bf16 on unless told
        gradient_checkpointing=False,  # GRPOConfig's default is True; ours is off
        use_cpu=True, seed=arguments.seed, data_seed=arguments.seed,
        logging_strategy="steps", logging_steps=1, report_to="none", save_strategy="no",
        eval_strategy="no", disable_tqdm=True, dataloader_num_workers=0,
        log_completions=False,
    )
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(
        model_path, dtype=torch.float32, attn_implementation=arguments.trl_attn_implementation)
    dataset = Dataset.from_dict({"prompt": prompts, "answer": answers})
    trainer = GRPOTrainer(
        model=model, reward_funcs=[math_accuracy], args=config, train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=LoraConfig(task_type="CAUSAL_LM", bias="none", **LORA),
        callbacks=callbacks)
    trainer.remove_callback(PrinterCallback)  # our own lines report each step
    return trainer, config


def make_trl_timer():
    """A TrainerCallback that times TRL's steps and runs `after_step` once each is logged."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.start = 0.0
            self.seconds: list[float] = []
            self.logs: list[dict] = []
            self.after_step = None  # called with the step's index once its log is in

        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(time.perf_counter() - self.start)

        def on_log(self, args, state, control, logs=None, **kwargs):
            # the per-step log carries GRPO's metrics; the end-of-training summary does not
            if logs and "completions/mean_length" in logs:
                self.logs.append(dict(logs))
                if self.after_step is not None:
                    self.after_step(len(self.logs) - 1)

    return StepTimer()


# ---- reporting ---------------------------------------------------------------------
def median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=5, help="measured TRL/ours step pairs")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps per side first")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step")
    parser.add_argument("--samples", type=int, default=4, help="completions per prompt (>= 2)")
    parser.add_argument("--max_new_tokens", type=int, default=64)
    parser.add_argument("--learning_rate", type=float, default=1e-5)
    parser.add_argument("--loss_type", default="dapo", choices=sorted(LOSS_TYPES),
                        help="TRL's loss_type; ours gets the aggregation that matches it")
    parser.add_argument("--micro_batch_max_tokens", type=int, default=512,
                        help="our callback's micro-batch cap (its default); 0: the whole "
                             "batch in one forward, as TRL does")
    parser.add_argument("--trl_attn_implementation", default="sdpa",
                        choices=["sdpa", "eager", "grouped_sdpa"],
                        help="TRL's model: transformers' sdpa (what TRL users get) or the "
                             "project's grouped_sdpa kernel (ours on CPU)")
    parser.add_argument("--dtype", default="float32",
                        choices=["float32", "bfloat16", "bfloat16_where_native"],
                        help="our model's weights (LoRA and optimizer state stay fp32)")
    parser.add_argument("--trl_bf16", action="store_true",
                        help="TRL's bf16 flag (mixed precision); default fp32")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--torch_profile", action="store_true",
                        help="afterwards, profile one more of our steps with torch.profiler")
    parser.add_argument("--out", type=Path, default=RESULT_DEFAULT,
                        help="JSON results, written atomically (default: "
                             "outputs/bench/grpo_vs_trl.json)")
    arguments = parser.parse_args()
    if arguments.pairs < 1 or arguments.warmup < 0 or arguments.samples < 2:
        parser.error("need --pairs >= 1, --warmup >= 0 and --samples >= 2 (GRPO groups)")

    # TRL imports vLLM when it is installed (the project's vllm extra) and warns that it
    # has not been tested with this version; generation here is transformers' own.
    warnings.filterwarnings("ignore", message="TRL currently supports vLLM")
    import trl

    steps = arguments.warmup + arguments.pairs
    extra = 1 if arguments.torch_profile else 0
    count = (steps + extra) * arguments.prompts

    task = MathProblemsTask(source="procedural", levels=[1], worked_example=True,
                            splits=Splits(num_train=count), reward_weights={"accuracy": 1.0})
    samples = [task.get_sample(sample_id) for sample_id in task.sample_ids("train")]

    peaks = measure_peaks()
    print(f"peaks: fp32 {peaks.fp32_flops / 1e9:.0f} GFLOP/s, bf16 {peaks.bf16_flops / 1e9:.0f} "
          f"GFLOP/s, read {peaks.read_bytes_per_s / 1e9:.1f} GB/s", flush=True)
    seed_everything(arguments.seed)  # LoRA A matrices are drawn at construction
    ours = OurTrainer(arguments, task, samples)
    model_path = resolve_model_path(DEFAULT_MODEL)
    tokenizer = ours.model.tokenizer
    user_role = ours.model.role_dict["user"]
    prompts, answers = [], []
    for sample in samples[: steps * arguments.prompts]:
        observation, _ = task.new_episode().reset(options={"sample": sample})
        prompt = tokenizer.apply_chat_template([{"role": user_role, "content": observation}],
                                               tokenize=False, add_generation_prompt=True)
        # TRL tokenizes a plain-string prompt with processing_class(text=prompts)
        if tokenizer(text=prompt)["input_ids"] != ours.prompt_ids(sample):
            raise SystemExit(f"prompt ids differ between the sides for {sample.sample_id}")
        prompts.append(prompt)
        answers.append(sample.data["answer"])

    timer = make_trl_timer()
    output_dir = tempfile.mkdtemp(prefix="grpo_vs_trl_")
    try:
        trainer, trl_config = build_trl(arguments, model_path, prompts, answers, [timer],
                                        output_dir)
        trl_watch = Stopwatch()
        trainer._generate_single_turn = trl_watch.wrap(trainer._generate_single_turn,
                                                       "generation")
        trainer._compute_loss = trl_watch.wrap(trainer._compute_loss, "training_forward")

        config = {
            "model": f"{DEFAULT_MODEL} ({model_path}), CPU",
            "ours_dtype": str(ours.model.dtype),
            "ours_old_logprobs": "sampler" if ours.model.dtype == torch.float32
            else "trainer (from the update's forward), token TIS C=2",
            "ours_shared_prefix_training": ours.model.packs_shared_prefixes,
            "trl_bf16": arguments.trl_bf16,
            "cpu_threads": torch.get_num_threads(),
            "versions": {name: version(name) for name in
                         ("torch", "transformers", "peft", "trl", "accelerate", "datasets")},
            "lora": LORA,
            "prompts": "math procedural level 1, worked example, chat template "
                       "(same strings and token ids both sides)",
            "prompts_per_step": arguments.prompts, "samples_per_prompt": arguments.samples,
            "completions_per_step": arguments.prompts * arguments.samples,
            "max_new_tokens": arguments.max_new_tokens, "temperature": 1.0, "top_p": 1.0,
            "top_k": "off", "reward": "src.tasks.instance.math_problems.rewards.accuracy",
            "advantage": "GRPO (r - group mean) / (group std + eps); eps 1e-6 ours, 1e-4 TRL; "
                         "no advantage clipping",
            "policy_loss": "PPO clip eps 0.2 both sides, no dual clip / delta",
            "kl_beta": 0.0, "updates_per_batch": 1,
            "loss": f"TRL loss_type={arguments.loss_type} == ours "
                    f"loss_aggregation={LOSS_TYPES[arguments.loss_type]}",
            "optimizer": f"torch AdamW lr {arguments.learning_rate} constant, betas "
                         f"(0.9, 0.999), eps 1e-8, weight decay 0, grad-norm clip 1.0",
            "ours_micro_batch_max_tokens": arguments.micro_batch_max_tokens or None,
            "ours_attention": "grouped_sdpa (the project's default on CPU)",
            "trl_attention": arguments.trl_attn_implementation,
            "trl_generation": "transformers generate (use_vllm False)",
            "trl_per_device_train_batch_size": trl_config.per_device_train_batch_size,
            "trl_gradient_accumulation_steps": trl_config.gradient_accumulation_steps,
            "trl_steps_per_generation": trl_config.steps_per_generation,
            "trl_generation_batch_size": trl_config.generation_batch_size,
            "trl_num_iterations": trl_config.num_iterations,
            "gradient_checkpointing": False,
            "warmup_steps_each": arguments.warmup, "pairs": arguments.pairs,
            "order": "TRL step, then our step, alternating", "seed": arguments.seed,
        }
        print("configuration:")
        for key, value in config.items():
            print(f"  {key}: {value}")

        our_steps: list[dict] = []
        trl_breakdowns: list[dict] = []

        def after_trl_step(index: int) -> None:
            trl_breakdowns.append(dict(trl_watch.seconds))
            trl_watch.reset()
            log = timer.logs[index]
            phase = "warm-up" if index < arguments.warmup else f"pair {index - arguments.warmup}"
            tokens = log["completions/mean_length"] * arguments.prompts * arguments.samples
            print(f"[{phase}] TRL  step: {timer.seconds[index]:6.1f} s, {tokens:5.0f} completion "
                  f"tokens (mean {log['completions/mean_length']:.1f}), reward "
                  f"{log.get('reward', math.nan):.3f}", flush=True)
            result = ours.step(index)
            our_steps.append(result)
            shares = ", ".join(f"{key} {value / result['seconds']:.0%}"
                               for key, value in result["breakdown"].items())
            print(f"[{phase}] ours step: {result['seconds']:6.1f} s, "
                  f"{result['completion_tokens']:5d} completion tokens (mean "
                  f"{result['mean_length']:.1f}), reward {result['reward']:.3f} | {shares}",
                  flush=True)

        timer.after_step = after_trl_step
        trainer.train()
    finally:
        shutil.rmtree(output_dir, ignore_errors=True)

    group = arguments.prompts * arguments.samples
    trl_steps = [{"seconds": seconds, "completion_tokens": log["completions/mean_length"] * group,
                  "mean_length": log["completions/mean_length"], "reward": log.get("reward"),
                  "frac_reward_zero_std": log.get("frac_reward_zero_std"),
                  "trl_step_time": log.get("step_time"),
                  "breakdown": {"generation": parts.get("generation", 0.0),
                                "training_forward": parts.get("training_forward", 0.0),
                                "backward_optimizer_and_other": seconds - sum(parts.values())}}
                 for seconds, log, parts in zip(timer.seconds, timer.logs, trl_breakdowns,
                                                strict=True)]
    if len(trl_steps) != steps or len(our_steps) != steps:
        raise SystemExit(f"expected {steps} steps per side, got TRL {len(trl_steps)}, "
                         f"ours {len(our_steps)}")
    measured = range(arguments.warmup, steps)
    ratios = [trl_steps[i]["seconds"] / our_steps[i]["seconds"] for i in measured]
    trl_rate = median([trl_steps[i]["completion_tokens"] / trl_steps[i]["seconds"]
                       for i in measured])
    our_rate = median([our_steps[i]["completion_tokens"] / our_steps[i]["seconds"]
                       for i in measured])
    our_median = median([our_steps[i]["seconds"] for i in measured])
    trl_median = median([trl_steps[i]["seconds"] for i in measured])
    our_parts = {key: median([our_steps[i]["breakdown"][key] for i in measured])
                 for key in our_steps[0]["breakdown"]}
    trl_parts = {key: median([trl_steps[i]["breakdown"][key] for i in measured])
                 for key in trl_steps[0]["breakdown"]}

    print("\nmeasured pairs (TRL s / ours s = ratio):")
    for i in measured:
        print(f"  pair {i - arguments.warmup}: TRL {trl_steps[i]['seconds']:.1f} s "
              f"({trl_steps[i]['completion_tokens']:.0f} tokens), ours "
              f"{our_steps[i]['seconds']:.1f} s ({our_steps[i]['completion_tokens']} tokens) "
              f"-> {ratios[i - arguments.warmup]:.2f}x")
    print(f"median step: TRL {trl_median:.1f} s, ours {our_median:.1f} s; median of per-pair "
          f"ratios (TRL time / ours time): {median(ratios):.2f}x")
    print(f"completion tokens trained per second (median): TRL {trl_rate:.1f}, ours "
          f"{our_rate:.1f} ({our_rate / trl_rate:.2f}x)")
    print("our step, median seconds and share of the median step:")
    for key, value in our_parts.items():
        print(f"  {key:>18}: {value:6.2f} s  {value / our_median:6.1%}")
    middle = sorted(measured, key=lambda index: our_steps[index]["seconds"])[len(measured) // 2]
    lines = roofline_lines(our_steps[middle], ours.model.dtype, peaks)
    for line in lines:
        print(line)
    print("TRL step (timed around _generate_single_turn and _compute_loss), median:")
    for key, value in trl_parts.items():
        print(f"  {key:>18}: {value:6.2f} s  {value / trl_median:6.1%}")

    profile_table = None
    if arguments.torch_profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as profiler:
            ours.step(steps)
        profile_table = profiler.key_averages().table(sort_by="self_cpu_time_total",
                                                      row_limit=30)
        print(f"\ntorch.profiler, one more of our steps (step {steps}):\n{profile_table}")

    result = {
        "config": config, "trl_version": trl.__version__,
        "trl_steps": trl_steps, "our_steps": our_steps, "warmup": arguments.warmup,
        "per_pair_ratio_trl_over_ours": ratios, "median_ratio_trl_over_ours": median(ratios),
        "median_step_seconds": {"trl": trl_median, "ours": our_median},
        "median_completion_tokens_per_second": {"trl": trl_rate, "ours": our_rate},
        "our_breakdown_median_seconds": our_parts,
        "our_breakdown_share_of_median_step": {key: value / our_median
                                               for key, value in our_parts.items()},
        "trl_breakdown_median_seconds": trl_parts,
        "peaks": vars(peaks), "our_median_step_roofline": lines,
    }
    if profile_table is not None:
        result["torch_profile_table"] = profile_table
    atomic_write_json(arguments.out, result)
    print(f"wrote {arguments.out}")


if __name__ == "__main__":
    main()
