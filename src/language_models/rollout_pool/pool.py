"""A pool of inference engines, one per Ray actor, behind the LanguageModel interface
(`RolloutPool`: how the pool syncs, places and replaces its engines). Which class an
`engine` names is engine_names.py's; which engine a prompt goes to, prompt_routing.py's."""

from __future__ import annotations

import inspect
import logging
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from src.configuration.components import COMPONENTS
from src.language_models.language_model import (
    EnginePlacement,
    Generation,
    LanguageModel,
    SamplingParams,
    TrainableLanguageModel,
)
from src.language_models.rollout_pool.engine_actor import EngineActor
from src.language_models.rollout_pool.engine_names import EngineName, engine_class
from src.language_models.rollout_pool.prompt_routing import PromptRouter
from src.runtime.ray_cluster import all_gpus, connect_ray, gpus_of
from src.runtime.reproducibility import is_reproducible

logger = logging.getLogger(__name__)

# A fixed chat whose log-probs the engines must reproduce after each sync.
PROBE_CHAT = [{"role": "user", "content": "What is 2 + 3? Put the answer in \\boxed{}."},
              {"role": "assistant", "content": "2 + 3 = 5, so the answer is \\boxed{5}."}]


class EngineFailure(RuntimeError):
    """An engine kept failing after the pool ran out of restarts."""


@COMPONENTS.register("rollout_pool")
class RolloutPool(LanguageModel):
    """Sampling in a pool of inference engines, one per Ray actor: name the trained model
    as `trainer` and give the pool to the agent; the RL trainer keeps training `trainer`
    in process (configs/assignments/math_grpo_rollout_pool_hf.yaml, ..._vllm.yaml).

    Weight sync: before sampling, engines more than `max_staleness` updates behind the
    trainer get its adapter (PEFT format, through Ray's object store: no shared disk);
    vLLM serves it as a new LoRARequest id, Hugging Face engines load it. Every sampled
    token carries the policy version that produced it. After each sync the engines are
    checked against the trainer on a fixed probe (`rollout_pool/sync_logprob_max_diff`,
    the largest log-prob difference). A later turn of an episode goes back to the engine
    that produced the earlier one (its prefix cache holds it) while loads stay even.

    Placement: engines take GPUs the trainer does not hold; with `colocate_with_trainer`
    they share the trainer's one GPU instead. Either applies to a cluster the pool starts,
    not to one it joins (`ray_address`) or finds running.

    Failures: an engine whose actor dies, or that does not answer within
    `request_timeout_s`, is replaced by a fresh actor with the current adapter and its
    requests are sent again with the same seed (`rollout_pool/engine_restarts`); after
    `max_restarts` replacements the run stops with an error naming the engine."""

    holds_policy_copy = True

    def __init__(
        self,
        trainer: TrainableLanguageModel,  # the trained language model, by its name
        # hf (Hugging Face + PEFT, CPU or GPU), vllm, or any InferenceEngine's dotted path
        engine: EngineName = "hf",
        num_engines: int = 2,
        tensor_parallel_size: int = 1,  # k > 1: each vLLM engine on k GPUs of a placement group
        gpus_per_engine: int = 0,  # 1 for GPU engines with tensor_parallel_size 1
        cpus_per_engine: int = 1,
        # passed to the engine's constructor over what it copies from the trainer (model,
        # LoRA rank), e.g. {dtype: float32, max_model_len: 1024}
        engine_parameters: dict[str, Any] | None = None,
        ray_address: str | None = None,  # join a running cluster (auto); None: start one
        max_staleness: int = 0,  # updates an engine may lag the trainer; 0: on policy
        request_timeout_s: float = 600.0,
        start_timeout_s: float = 600.0,  # for an engine to start
        max_restarts: int = 3,
        verify_sync: bool = True,  # the probe after each sync
        # the engines share the trainer's GPU (needs gpus_per_engine: 1); how much of its
        # memory they take is the engine's own setting (vLLM's gpu_memory_utilization)
        colocate_with_trainer: bool = False,
    ) -> None:
        if num_engines < 1:
            raise ValueError(f"num_engines must be at least 1, got {num_engines}")
        if colocate_with_trainer and trainer.device.type != "cuda":
            raise ValueError(f"colocate_with_trainer puts the engines on the trainer's GPU, "
                             f"but the trainer is on {trainer.device}")
        if colocate_with_trainer and gpus_per_engine * tensor_parallel_size < 1:
            raise ValueError("colocate_with_trainer needs gpus_per_engine: 1: Ray hands an "
                             "engine the trainer's GPU only when it asks for one (how much "
                             "of its memory the engine takes is the engine's own setting, "
                             "e.g. vLLM's gpu_memory_utilization in engine_parameters)")
        self.engine_class = engine_class(engine)
        if tensor_parallel_size > 1 and not self.engine_class.supports_tensor_parallel:
            raise ValueError(f"tensor_parallel_size > 1 needs an engine that shards over GPUs "
                             f"(vllm); {self.engine_class.__name__} does not")
        self.trainer = trainer
        self.num_engines = num_engines
        self.tensor_parallel_size = tensor_parallel_size
        self.gpus_per_engine = gpus_per_engine
        self.cpus_per_engine = cpus_per_engine
        self.max_staleness = max_staleness
        self.request_timeout_s = request_timeout_s
        self.start_timeout_s = start_timeout_s
        self.max_restarts = max_restarts
        self.verify_sync = verify_sync
        self._engine_parameters = self._parameters_for_engines(engine_parameters or {})
        self._served_version: int | None = None
        self._adapter_files: Any = None  # object ref of the served adapter's files
        self._metrics: dict[str, float] = {}
        self._restarts = 0
        self._router = PromptRouter(num_engines)  # a later turn goes where it is cached
        # Engines go on GPUs the trainer does not hold, or, colocated, on the trainer's
        # own GPU and no other (the one-GPU shape: vLLM beside the trainer).
        trainer_gpus = gpus_of(trainer.device)
        self._started_ray = connect_ray(
            num_engines * cpus_per_engine, ray_address,
            all_gpus() - trainer_gpus if colocate_with_trainer else trainer_gpus)
        self._placement_groups: list[Any] = []
        self._actors = [self._start_actor() for _ in range(num_engines)]
        self._wait_until_started(list(range(num_engines)))

    @classmethod
    def adapter_only_models(cls, parameters: Mapping[str, object]) -> frozenset[str]:
        # the probe after each sync scores with the trainer; colocated engines go on its GPU
        if parameters.get("verify_sync", True) or parameters.get("colocate_with_trainer"):
            return frozenset()
        return frozenset({"trainer"})

    # ---- setup ---------------------------------------------------------------------
    def _parameters_for_engines(self, extra: dict[str, Any]) -> dict[str, Any]:
        """The engine class's parameters for serving the trainer, then `extra` over them."""
        derived = self.engine_class.parameters_for_pool(self.trainer, EnginePlacement(
            gpus_per_engine=self.gpus_per_engine,
            tensor_parallel_size=self.tensor_parallel_size))
        accepted = set(inspect.signature(self.engine_class.__init__).parameters) - {"self"}
        unknown = sorted(set(extra) - accepted)
        if unknown:
            raise ValueError(f"engine_parameters has keys {unknown} that "
                             f"{self.engine_class.__name__} does not take "
                             f"(it takes: {', '.join(sorted(accepted))})")
        return {**derived, **extra}

    def _start_actor(self) -> Any:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        options: dict[str, Any] = {"num_cpus": self.cpus_per_engine,
                                   "num_gpus": self.gpus_per_engine, "max_restarts": 0}
        if self.tensor_parallel_size > 1:
            # vLLM's Ray executor places its k workers in the actor's placement group
            group = placement_group([{"GPU": 1, "CPU": 1}] * self.tensor_parallel_size,
                                    strategy="STRICT_PACK")
            ray.get(group.ready(), timeout=self.start_timeout_s)
            self._placement_groups.append(group)
            options.update(num_cpus=0, num_gpus=0, scheduling_strategy=(
                PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=0,
                                                 placement_group_capture_child_tasks=True)))
        actor_class = ray.remote(EngineActor).options(**options)
        return actor_class.remote(self.engine_class, self._engine_parameters,
                                  self.cpus_per_engine, is_reproducible())

    def _wait_until_started(self, engines: list[int]) -> None:
        import ray

        try:
            ray.get([self._actors[e].pid.remote() for e in engines],
                    timeout=self.start_timeout_s)
            if self._adapter_files is not None:  # a replacement serves what the others serve
                ray.get([self._actors[e].load_adapter.remote(self._adapter_files,
                                                             self._served_version)
                         for e in engines], timeout=self.request_timeout_s)
        except ray.exceptions.GetTimeoutError as error:
            raise EngineFailure(f"{self.engine_class.__name__} engines {engines} did not "
                                f"start within start_timeout_s={self.start_timeout_s} s"
                                ) from error
        except ray.exceptions.RayActorError as error:
            raise EngineFailure(f"a {self.engine_class.__name__} engine failed to start "
                                f"(parameters {self._engine_parameters}): {error}") from error

    def _replace_engine(self, engine: int, reason: str) -> None:
        import ray

        while True:  # a replacement that fails to start counts as one more failure
            self._restarts += 1
            self._metrics["rollout_pool/engine_restarts"] = float(self._restarts)
            if self._restarts > self.max_restarts:
                raise EngineFailure(f"engine {engine} failed ({reason}) after the pool used all "
                                    f"max_restarts={self.max_restarts} restarts")
            logger.warning("rollout engine %d failed (%s): starting a replacement", engine,
                           reason)
            ray.kill(self._actors[engine], no_restart=True)
            self._actors[engine] = self._start_actor()
            try:
                self._wait_until_started([engine])
                return
            except EngineFailure as error:
                reason = str(error)

    # ---- LanguageModel -------------------------------------------------------------
    @property
    def tokenizer(self):
        return self.trainer.tokenizer

    @property
    def max_context_tokens(self) -> int:
        return self.trainer.max_context_tokens

    @property
    def pad_id(self) -> int:
        return self.trainer.pad_id

    @property
    def role_dict(self) -> dict[str, str]:
        return self.trainer.role_dict

    @property
    def policy_version(self) -> int:
        return self._served_version if self._served_version is not None else 0

    def end_of_turn_ids(self) -> tuple[int, ...]:
        return self.trainer.end_of_turn_ids()

    def engine_pids(self) -> list[int]:
        import ray

        return ray.get([actor.pid.remote() for actor in self._actors],
                       timeout=self.request_timeout_s)

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 seed: int | None = None) -> list[list[Generation]]:
        if not prompts:
            return []
        self._sync_if_stale()
        params = replace(params, stop_token_ids=tuple(sorted(
            set(params.stop_token_ids) | set(self.end_of_turn_ids()))))
        shares = self._router.assign(prompts)
        # one seed per engine, from `seed` or else the global RNG: a seeded run samples the
        # same tokens, and a replaced engine repeats its request exactly
        generator = None if seed is None else torch.Generator().manual_seed(seed)
        seeds = torch.randint(0, 2**31 - 1, (self.num_engines,), generator=generator).tolist()
        results = self._call_engines(
            {engine: ("generate", ([list(prompts[i]) for i in indices], params, seeds[engine]))
             for engine, indices in enumerate(shares) if indices})
        generations: list[list[Generation]] = [[] for _ in prompts]
        produced: dict[tuple[int, ...], int] = {}
        for engine, indices in enumerate(shares):
            for index, samples in zip(indices, results.get(engine, []), strict=True):
                generations[index] = samples
                produced.update({(*prompts[index], *sample.token_ids): engine
                                 for sample in samples})
        self._router.remember(produced)
        return generations

    def _call_engines(self, calls: dict[int, tuple[str, tuple]]) -> dict[int, Any]:
        """Run `method(*arguments)` on each engine; replace failed engines and call again."""
        import ray

        results: dict[int, Any] = {}
        pending = dict(calls)
        while pending:
            refs = {engine: getattr(self._actors[engine], method).remote(*arguments)
                    for engine, (method, arguments) in pending.items()}
            deadline = time.monotonic() + self.request_timeout_s
            failed: dict[int, str] = {}
            for engine, ref in refs.items():
                try:
                    results[engine] = ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
                except ray.exceptions.GetTimeoutError:
                    failed[engine] = f"no answer within request_timeout_s={self.request_timeout_s} s"
                except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as error:
                    failed[engine] = f"actor died: {type(error).__name__}"
            for engine, reason in failed.items():
                self._replace_engine(engine, reason)
            pending = {engine: pending[engine] for engine in failed}
        return results

    # ---- weight sync ---------------------------------------------------------------
    def _sync_if_stale(self) -> None:
        version = self.trainer.policy_version
        if self._served_version is None or version - self._served_version > self.max_staleness:
            self._sync(version)

    def serve_latest_policy(self) -> None:
        version = self.trainer.policy_version
        if self._served_version != version:
            self._sync(version)

    def _sync(self, version: int) -> None:
        """Send the trainer's adapter, as of `version`, to every engine."""
        import ray

        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="agent-rl-adapter-") as folder:
            self.trainer.save_adapter(Path(folder))
            files = {path.name: path.read_bytes() for path in Path(folder).iterdir()
                     if path.is_file()}
        self._adapter_files = ray.put(files)
        self._served_version = version
        self._call_engines({engine: ("load_adapter", (self._adapter_files, version))
                            for engine in range(self.num_engines)})
        self._metrics["rollout_pool/sync_seconds"] = time.perf_counter() - started
        self._metrics["rollout_pool/served_version"] = float(version)
        if self.verify_sync:
            self._metrics["rollout_pool/sync_logprob_max_diff"] = self.sync_logprob_difference()

    def sync_logprob_difference(self) -> float:
        """Max |engine - trainer| log-prob over the probe chat's tokens, over all engines."""
        text = self.tokenizer.apply_chat_template(PROBE_CHAT, tokenize=False)
        probe = self.tokenizer.encode(text, add_special_tokens=False)
        expected = torch.tensor(self.trainer.sequence_logprobs([probe])[0])
        served = self._call_engines({engine: ("sequence_logprobs", ([probe], 1.0))
                                     for engine in range(self.num_engines)})
        return max(float((torch.tensor(result[0]) - expected).abs().max())
                   for result in served.values())

    def drain_metrics(self) -> dict[str, float]:
        metrics, self._metrics = self._metrics, {}
        return metrics

    def close(self) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        for actor in self._actors:
            ray.kill(actor, no_restart=True)
        for group in self._placement_groups:
            remove_placement_group(group)
        self._actors, self._placement_groups = [], []
        if self._started_ray:
            ray.shutdown()
