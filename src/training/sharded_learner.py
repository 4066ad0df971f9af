"""The learner's update spread over worker processes, the weights sharded with FSDP.

`num_workers` Ray actors form one torch.distributed process group (gloo on CPUs, nccl on
GPUs). Each builds a replica of the policy (`TrainableLanguageModel.replica_parameters`),
shards it with PyTorch's own FSDP (`shard_for_data_parallel`: each decoder layer's
weights, frozen base included, are split over the workers and gathered only for that
layer's forward and backward), and runs the one update path (src.training.learner) on its
`Shard` of the micro-batches. Each micro-batch's loss is a share of the whole
mini-batch's (normalised by the mini-batch's totals), so the gradients summed over the
workers are the single-process gradient; every worker then takes the same optimiser step
on its part of the adapter and of the optimiser state.

The workers score too (old and reference log-probs). This process's policy receives the
adapter after every step, to sample with it or hand it to a rollout pool; when a pool
samples, it holds only the adapter, no base weights (`base_weights: meta`,
src.language_models.huggingface.meta_base). Checkpoints are written here by the one checkpoint
writer, in the single-process learner's format (adapter in PEFT format, optimiser state
keyed by parameter index, gathered whole from the workers), so a run resumes with any
number of workers.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path
from typing import Any

import torch

from src.language_models.language_model import TrainableLanguageModel
from src.runtime.ray_cluster import connect_ray, gpus_of
from src.runtime.reproducibility import is_reproducible
from src.runtime.worker_process import prepare_worker_process
from src.training.learner import (
    AUTO_BUDGET_KEY,
    Learner,
    Objective,
    Shard,
    StepResult,
    budget_record,
    load_trainable,
)
from src.training.settings import OptimizerSettings
from src.training.token_metrics import TokenMetrics
from src.training.token_rows import TokenRows
from src.training.training_state import load_training_state, save_training_state


def _whole(tensor: torch.Tensor) -> torch.Tensor:
    """A sharded tensor gathered whole (a collective: every worker calls it), on the CPU."""
    from torch.distributed.tensor import DTensor

    if isinstance(tensor, DTensor):
        tensor = tensor.full_tensor()
    return tensor.detach().cpu()


def _like(value: Any, parameter: torch.Tensor) -> Any:
    """A whole optimiser-state tensor cut to `parameter`'s shard (scalars as they are)."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if (isinstance(parameter, DTensor) and isinstance(value, torch.Tensor)
            and value.shape == parameter.shape):
        return distribute_tensor(value.to(parameter.device), parameter.device_mesh,
                                 parameter.placements)
    return value


class LearnerWorker:
    """One worker: a sharded replica of the policy and a Learner over its shard."""

    def __init__(self, model_class: type[TrainableLanguageModel], parameters: dict[str, Any],
                 settings: OptimizerSettings, rank: int, world: int, num_threads: int,
                 reproducible: bool) -> None:
        prepare_worker_process(num_threads, reproducible)
        self._model_class, self._parameters = model_class, parameters
        self._settings, self._shard = settings, Shard(rank, world)
        self._learner: Learner | None = None
        self._store: Any = None  # rank 0's TCPStore, the group's meeting point

    def open_store(self) -> tuple[str, int]:
        """Rank 0 only: listen for the group on a port the system picks while binding and
        return where. A port probed free and bound later can be taken in between by any
        connection the machine opens (Ray opens many while the workers load the model)."""
        import torch.distributed as dist
        from torch.distributed.constants import default_pg_timeout

        host = socket.gethostbyname(socket.gethostname())
        self._store = dist.TCPStore(host, 0, self._shard.world, is_master=True,
                                    timeout=default_pg_timeout, wait_for_workers=False)
        return host, self._store.port

    def start(self, host: str, port: int, trainable: list[torch.Tensor]) -> int:
        import torch.distributed as dist
        from torch.distributed.constants import default_pg_timeout

        model = self._model_class(**self._parameters)
        backend = "nccl" if model.device.type == "cuda" else "gloo"
        store = self._store if self._shard.rank == 0 else dist.TCPStore(
            host, port, self._shard.world, is_master=False, timeout=default_pg_timeout)
        dist.init_process_group(backend, store=store, rank=self._shard.rank,
                                world_size=self._shard.world)
        load_trainable(model, self._shards_of(model, trainable))
        model.shard_for_data_parallel()
        self._learner = Learner(model, self._settings, self._shard)
        budget = self._learner.token_budget()
        if budget is not None:  # every worker must cut the same micro-batches: the least
            agreed = torch.tensor([budget], device="cuda" if backend == "nccl" else "cpu")
            dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
            self._learner.fix_token_budget(int(agreed.item()))
        return os.getpid()

    def token_budget(self) -> int | None:
        return self.learner.token_budget()

    def fix_token_budget(self, tokens: int | None) -> None:
        self.learner.fix_token_budget(tokens)

    @property
    def learner(self) -> Learner:
        assert self._learner is not None, "start() first"
        return self._learner

    @staticmethod
    def _shards_of(model: TrainableLanguageModel, values: list[torch.Tensor]
                   ) -> list[torch.Tensor]:
        """Whole values of the trainable parameters cut to this worker's shards."""
        return [_like(value, parameter) for value, parameter
                in zip(values, model.trainable_parameters(), strict=True)]

    def schedule(self, total_steps: int) -> float:
        self.learner.schedule(total_steps)
        return self.learner.learning_rate

    def score(self, rows: TokenRows, temperature: float, with_adapter: bool,
              adapter: list[torch.Tensor] | None) -> torch.Tensor:
        """Log-probs of this worker's share of the rows (zeros on the others' rows)."""
        if adapter is not None:
            adapter = self._shards_of(self.learner.model, adapter)
        return self.learner.score(rows, temperature=temperature, with_adapter=with_adapter,
                                  adapter=adapter)

    def update(self, rows: TokenRows, indices: list[int], objective: Objective,
               temperature: float) -> tuple[StepResult, TokenMetrics, float, list[torch.Tensor]]:
        """One optimiser step on this worker's share; returns its result, its metric sums,
        the next step's learning rate and the whole adapter after the step."""
        metrics = TokenMetrics()
        # Dropout draws from a generator seeded by step and rank, not from one carried
        # over: a run resumed by new workers draws what the uninterrupted one drew.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(1_000_003 * self.learner.step + self._shard.rank)
            result = self.learner.update(rows, indices, objective, metrics, temperature)
        trainable = self.trainable_state()  # gathered by all, sent by one
        return (result, metrics, self.learner.learning_rate,
                trainable if self._shard.rank == 0 else [])

    def trainable_state(self) -> list[torch.Tensor]:
        return [_whole(parameter) for parameter in self.learner.model.trainable_parameters()]

    def optimizer_state(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The optimiser's and schedule's state dicts with every tensor gathered whole."""
        learner = self.learner
        state = learner.optimizer.state_dict()
        state["state"] = {index: {key: _whole(value) if isinstance(value, torch.Tensor)
                                  and value.dim() > 0 else value
                                  for key, value in values.items()}
                          for index, values in state["state"].items()}
        return state, learner.scheduler.state_dict() if learner.scheduler else None

    def load_state(self, trainable: list[torch.Tensor], step: int,
                   optimizer_state: dict[str, Any] | None,
                   scheduler_state: dict[str, Any] | None) -> None:
        learner = self.learner
        load_trainable(learner.model, self._shards_of(learner.model, trainable))
        if optimizer_state is not None:
            parameters = learner.model.trainable_parameters()
            optimizer_state = {**optimizer_state, "state": {
                index: {key: _like(value, parameters[index]) for key, value in values.items()}
                for index, values in optimizer_state["state"].items()}}
        learner.load_optimizer_state(optimizer_state, scheduler_state)
        learner.step = step

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        self._store = None


class ShardedLearner:
    """The Learner's interface (score, update, schedule, save, restore) for a policy
    trained by `num_workers` FSDP workers, which also score: this process's copy of the
    policy only samples or serves a rollout pool its adapter, and may stay on the CPU
    while the workers take a GPU each, or hold no base weights at all."""

    def __init__(self, model: TrainableLanguageModel, settings: OptimizerSettings,
                 num_workers: int, cpus_per_worker: int = 1, gpus_per_worker: int = 0,
                 ray_address: str | None = None, start_timeout_s: float = 600.0) -> None:
        import ray

        if num_workers < 2:
            raise ValueError(f"a sharded learner needs at least 2 workers, got {num_workers}")
        self.model = model
        self.settings = settings
        self._started_ray = connect_ray(num_workers * cpus_per_worker, ray_address,
                                        gpus_of(model.device))
        worker_class = ray.remote(LearnerWorker).options(
            num_cpus=cpus_per_worker, num_gpus=gpus_per_worker, max_restarts=0)
        parameters = model.replica_parameters("cuda" if gpus_per_worker else "cpu")
        self._workers: list[Any] = [worker_class.remote(type(model), parameters, settings, rank,
                                                        num_workers, cpus_per_worker,
                                                        is_reproducible())
                                    for rank in range(num_workers)]
        try:
            host, port = ray.get(self._workers[0].open_store.remote(),
                                 timeout=start_timeout_s)
            trainable = [_whole(parameter) for parameter in model.trainable_parameters()]
            self.worker_pids: list[int] = ray.get(
                [worker.start.remote(host, port, trainable) for worker in self._workers],
                timeout=start_timeout_s)
        except ray.exceptions.GetTimeoutError as error:
            self.close()
            raise RuntimeError(
                f"{num_workers} trainer workers ({cpus_per_worker} CPUs and {gpus_per_worker} "
                f"GPUs each) did not start within {start_timeout_s:.0f} s; the Ray cluster "
                f"has {ray.available_resources()} free") from error
        self.step = 0
        self._learning_rate = settings.learning_rate

    def _all(self, method: str, *args: Any) -> list[Any]:
        """Call `method` on every worker at once (their collectives need all of them)."""
        import ray

        return ray.get([getattr(worker, method).remote(*args) for worker in self._workers])

    def schedule(self, total_steps: int) -> None:
        self._learning_rate = self._all("schedule", total_steps)[0]

    @property
    def learning_rate(self) -> float:
        return self._learning_rate

    def score(self, rows: TokenRows, *, temperature: float = 1.0, with_adapter: bool = True,
              adapter: list[torch.Tensor] | None = None) -> torch.Tensor:
        # each row is scored by exactly one worker, zeros elsewhere: the sum is exact
        return torch.stack(self._all("score", rows, temperature, with_adapter, adapter)).sum(0)

    def update(self, rows: TokenRows, indices: list[int], objective: Objective,
               metrics: TokenMetrics, temperature: float = 1.0) -> StepResult:
        results = self._all("update", rows, list(indices), objective, temperature)
        for _, worker_metrics, _, _ in results:
            metrics.merge(worker_metrics)
        first, _, self._learning_rate, trainable = results[0]
        load_trainable(self.model, trainable)
        self.step += 1
        return StepResult(sum(result.loss for result, *_ in results), first.grad_norm,
                          first.learning_rate, first.scored)

    # ---- state ---------------------------------------------------------------------
    def save(self, directory: Path, extra: dict[str, Any]) -> None:
        optimizer_state, scheduler_state = self._all("optimizer_state")[0]
        save_training_state(directory, self.model, optimizer_state, scheduler_state,
                            {"optimizer_step": self.step,
                             **budget_record(self.settings, self.token_budget), **extra})

    def token_budget(self) -> int | None:
        """The budget the workers agreed on (the least of theirs, for `auto`)."""
        import ray

        return ray.get(self._workers[0].token_budget.remote())

    def restore(self, directory: Path, restore_optimizer: bool = True) -> dict[str, Any]:
        saved = load_training_state(directory, self.model)
        self.step = saved.extra["optimizer_step"]
        trainable = [_whole(parameter) for parameter in self.model.trainable_parameters()]
        self._all("load_state", trainable, self.step,
                  saved.optimizer_state if restore_optimizer else None,
                  saved.scheduler_state if restore_optimizer else None)
        if restore_optimizer and saved.optimizer_state is not None:
            self._learning_rate = saved.optimizer_state["param_groups"][0]["lr"]
        if AUTO_BUDGET_KEY in saved.extra:
            self._all("fix_token_budget", saved.extra[AUTO_BUDGET_KEY])
        return saved.extra

    def close(self) -> None:
        import ray

        for worker in self._workers:
            # a worker already gone needs no closing
            with contextlib.suppress(ray.exceptions.RayError):
                ray.get(worker.close.remote(), timeout=30)
            ray.kill(worker, no_restart=True)
        self._workers = []
        if self._started_ray:
            ray.shutdown()
