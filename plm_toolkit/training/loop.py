"""The training loop. It knows nothing about model families or objectives: it moves batches to the device, runs
autocast, asks the objective for loss sums, normalises them by the global target count of the accumulation window,
steps, logs, evaluates and checkpoints.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from plm_toolkit.data.loader import BatchLayout, MicroBatches, eval_loader, micro_batch_loader, mix_seed
from plm_toolkit.data.plan import DataPlan
from plm_toolkit.errors import TrainingError
from plm_toolkit.objectives.base import Objective, ObjectiveOutput, normalized_loss
from plm_toolkit.training import checkpoint as ckpt
from plm_toolkit.training.distributed import all_gather_objects, all_reduce_sum, barrier
from plm_toolkit.training.logging import MetricsWriter, ProgressBar
from plm_toolkit.training.optim import build_optimizer, build_scheduler
from plm_toolkit.training.precision import LossScaler, Runtime

log = logging.getLogger("plm_toolkit")


class PretrainingModule(nn.Module):
    """Backbone and objective as one module, so DDP and the optimizer see every trained parameter."""

    def __init__(self, model: nn.Module, objective: Objective):
        super().__init__()
        self.model = model
        self.objective = objective

    def forward(self, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        return self.objective(self.model, batch)


@dataclass
class Window:
    """Sums over optimizer steps since the last log line, already reduced over processes."""

    loss_sums: dict[str, float]
    counts: dict[str, float]
    metrics: dict[str, float]
    tokens: float = 0.0
    steps: int = 0

    @classmethod
    def empty(cls) -> Window:
        return cls(defaultdict(float), defaultdict(float), defaultdict(float))

    def add(self, other: Window) -> None:
        for mine, theirs in (
            (self.loss_sums, other.loss_sums),
            (self.counts, other.counts),
            (self.metrics, other.metrics),
        ):
            for k, v in theirs.items():
                mine[k] += v
        self.tokens += other.tokens
        self.steps += other.steps

    def loss(self) -> float:
        return sum(v / max(self.counts[k], 1.0) for k, v in self.loss_sums.items())

    def summary(self, denominators: dict[str, str], prefix: str = "", components: bool = False) -> dict[str, float]:
        out = {f"{prefix}loss": self.loss()}
        if components or len(self.loss_sums) > 1:
            out.update({f"{prefix}{k}_loss": v / max(self.counts[k], 1.0) for k, v in self.loss_sums.items()})
        for name, value in self.metrics.items():
            component = denominators.get(name)
            label = name.removesuffix("_correct") + "_accuracy" if name.endswith("_correct") else name
            out[f"{prefix}{label}"] = value / max(self.counts[component], 1.0) if component else value
        return out


def _reduce(window: Window, process) -> Window:
    """Sum a window's numbers over all processes with one all-reduce."""
    keys = [("l", k) for k in sorted(window.loss_sums)] + [("c", k) for k in sorted(window.counts)]
    keys += [("m", k) for k in sorted(window.metrics)]
    tables = {"l": window.loss_sums, "c": window.counts, "m": window.metrics}
    values = torch.tensor([tables[t][k] for t, k in keys] + [window.tokens], dtype=torch.float64)
    values = all_reduce_sum(values, process).tolist()
    out = Window.empty()
    for (t, k), v in zip(keys, values[:-1], strict=True):
        {"l": out.loss_sums, "c": out.counts, "m": out.metrics}[t][k] = v
    out.tokens, out.steps = values[-1], window.steps
    return out


class Trainer:
    def __init__(
        self,
        *,
        model: nn.Module,
        objective: Objective,
        train_examples,
        eval_examples,
        collate,
        runtime: Runtime,
        trainer_cfg,
        optimizer_cfg,
        hardware_cfg,
        run_dir: Path,
        config_yaml: str,
        tokenizer_json: str | None,
        num_workers: int = 0,
        plan: DataPlan | None = None,
    ):
        self.cfg, self.runtime, self.run_dir = trainer_cfg, runtime, run_dir
        self.process = runtime.process
        self.module = PretrainingModule(model, objective).to(runtime.device)
        self.objective = objective
        self.train_examples, self.eval_examples, self.collate = train_examples, eval_examples, collate
        self.config_yaml, self.tokenizer_json = config_yaml, tokenizer_json
        self.num_workers = num_workers
        # How batches are read and transformed (order, static copies, the objective's batch transform).
        self.plan = plan if plan is not None else DataPlan(transform=objective.batch_transform())
        self.optimizer = build_optimizer(self.module, optimizer_cfg)
        self.scheduler = build_scheduler(self.optimizer, optimizer_cfg, trainer_cfg.max_steps)
        self.scaler = LossScaler(runtime, hardware_cfg.min_loss_scale, hardware_cfg.max_overflow_steps)
        self.forward_module: nn.Module = self.module
        if runtime.ddp:
            # find_unused_parameters: an objective may leave part of the backbone idle (MLM alone never uses
            # BERT's pooler), which plain DDP treats as an error.
            device_ids = [runtime.device.index] if runtime.device.type == "cuda" else None
            self.forward_module = DistributedDataParallel(
                self.module, device_ids=device_ids, find_unused_parameters=True
            )
        if hardware_cfg.compile:
            self.forward_module = torch.compile(self.forward_module)
        self.layout = BatchLayout(
            trainer_cfg.batch_size, trainer_cfg.grad_accum_steps, self.process.world_size, self.process.rank
        )
        self.step = 0
        self.samples_seen = 0
        self.last_checkpoint: Path | None = None
        self.metrics = MetricsWriter(run_dir, trainer_cfg.tensorboard, enabled=self.process.is_main)

    # --- state ---------------------------------------------------------------------------------------------
    def restore(self, checkpoint: ckpt.Checkpoint) -> None:
        ckpt.load_weights(self.module.model, checkpoint.path / ckpt.MODEL_FILE)
        ckpt.load_weights(self.module.objective, checkpoint.path / ckpt.OBJECTIVE_FILE)
        state = checkpoint.trainer_state()
        try:
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
            self.scaler.load_state_dict(state["scaler"])
            self.step, self.samples_seen = int(state["step"]), int(state["samples_seen"])
        except (KeyError, ValueError, RuntimeError) as err:
            raise ckpt.CheckpointError(
                f"{checkpoint.path / ckpt.STATE_FILE}: training state does not fit this run ({err})"
            ) from err
        ckpt.set_rng_state(state["rng"])
        own = f"rank{self.process.rank}."  # each rank carries the memories of its own rows
        carried = state.get("objective_state", {})
        self.objective.load_carried_state({k.removeprefix(own): v for k, v in carried.items() if k.startswith(own)})
        self.last_checkpoint = checkpoint.path
        self.metrics.truncate_after(self.step)
        log.info("resumed from %s at step %d (%d examples seen)", checkpoint.path, self.step, self.samples_seen)

    def save(self) -> None:
        carried = all_gather_objects(self.objective.carried_state(), self.process)
        if self.process.is_main:
            state = {
                "step": self.step,
                "samples_seen": self.samples_seen,
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict(),
                "rng": ckpt.rng_state(),
                "world_size": self.process.world_size,
                # What the objective carries between batches (segment memories), per rank: resuming continues
                # exactly.
                "objective_state": {f"rank{r}.{k}": v for r, part in enumerate(carried) for k, v in part.items()},
            }
            self.last_checkpoint = ckpt.save_checkpoint(
                self.run_dir,
                self.step,
                self.module.model,
                self.module.objective,
                state,
                self.config_yaml,
                self.tokenizer_json,
                self.cfg.keep_last,
            )
            log.info("saved checkpoint %s", self.last_checkpoint)
        barrier(self.process)

    # --- the loop ------------------------------------------------------------------------------------------
    def fit(self) -> dict:
        cfg = self.cfg
        batches = iter(
            micro_batch_loader(
                MicroBatches(
                    self.train_examples,
                    self.layout,
                    self.samples_seen,
                    self.collate,
                    self.plan.transform,
                    cfg.seed,
                    static_copies=self.plan.static_copies,
                    streams=self.plan.streams,
                    backward_half=self.plan.backward_half,
                ),
                num_workers=self.num_workers,
            )
        )
        bar = ProgressBar(cfg.max_steps, self.step, enabled=cfg.progress_bar and self.process.is_main)
        window, tick = Window.empty(), time.perf_counter()
        record: dict = {}
        while self.step < cfg.max_steps:
            micro = [next(batches) for _ in range(cfg.grad_accum_steps)]
            lr = self.optimizer.param_groups[0]["lr"]
            stats = self.train_step(micro)
            self.step += 1
            self.samples_seen += self.layout.global_batch
            window.add(stats)
            bar.update()
            if self.step % cfg.log_every == 0 or self.step == cfg.max_steps:
                elapsed = time.perf_counter() - tick
                grad_norm = window.metrics.pop("_grad_norm") / window.steps
                record = {
                    "step": self.step,
                    **window.summary(self.objective.metric_denominators),
                    "lr": lr,
                    "tokens_per_s": window.tokens / elapsed,
                    "grad_norm": grad_norm,
                }
                self.metrics.write(record)
                bar.show(record)
                window, tick = Window.empty(), time.perf_counter()
            if cfg.eval_every and self.step % cfg.eval_every == 0 and self.step != cfg.max_steps:
                self.evaluate(bar)
            if cfg.save_every and self.step % cfg.save_every == 0 and self.step != cfg.max_steps:
                self.save()
        if self.eval_examples is not None and cfg.eval_every:
            record.update(self.evaluate(bar))
        if self.last_checkpoint is None or ckpt.Checkpoint(self.last_checkpoint).step != self.step:
            self.save()
        bar.close()
        self.metrics.close()
        return record

    def train_step(self, micro: list[dict[str, torch.Tensor]]) -> Window:
        """One optimizer step over the micro-batches of an accumulation window."""
        stats = self.accumulate_gradients(micro)
        self.scaler.unscale_(self.optimizer)
        stats.metrics["_grad_norm"] = self._clip_gradients()
        if not math.isfinite(stats.loss()) and not self.scaler.enabled:
            raise TrainingError(
                f"loss is {stats.loss()} at step {self.step + 1}; the last good checkpoint is "
                f"{self.last_checkpoint or 'none (no checkpoint written yet)'}. Lower optimizer.lr, raise "
                "optimizer.warmup_steps, or check the data"
            )
        if self.scaler.step(self.optimizer):
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return stats

    def accumulate_gradients(self, micro: list[dict[str, torch.Tensor]]) -> Window:
        """Backward over every micro-batch; the gradient is that of sum(loss sums) / global target counts."""
        local = Window.empty()
        for batch in micro:
            for name, n in self.objective.target_counts(batch).items():
                local.counts[name] += n
            local.tokens += float(batch["attention_mask"].sum()) if "attention_mask" in batch else 0.0
        counts = _reduce(Window(defaultdict(float), local.counts, defaultdict(float)), self.process).counts
        # Dropout and on-device sampling are reseeded per step and rank, so resuming needs no RNG replay.
        torch.manual_seed(mix_seed(self.cfg.seed, self.step, stream=2 + self.process.rank))
        self.module.train()
        for j, batch in enumerate(micro):
            batch = {k: v.to(self.runtime.device, non_blocking=True) for k, v in batch.items()}
            last = j == len(micro) - 1
            sync = self.forward_module.no_sync() if self.runtime.ddp and not last else contextlib.nullcontext()
            with sync:
                with self.runtime.autocast():
                    out = self.forward_module(batch)
                # DDP averages gradients over processes; scaling by world size makes that a sum of
                # per-process sums, each already divided by the global target count.
                loss = normalized_loss(out, counts) * self.process.world_size
                self.scaler.scale(loss).backward()
            for k, v in out.loss_sums.items():
                local.loss_sums[k] += float(v.detach())
            for k, v in out.metrics.items():
                local.metrics[k] += float(v.detach())
        reduced = _reduce(local, self.process)
        reduced.steps = 1
        return reduced

    def _clip_gradients(self) -> float:
        params = [p for p in self.module.parameters() if p.grad is not None]
        max_norm = self.cfg.clip_grad_norm if self.cfg.clip_grad_norm > 0 else float("inf")
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))

    @torch.no_grad()
    def evaluate(self, bar: ProgressBar | None = None) -> dict:
        if self.eval_examples is None:
            return {}
        self.module.eval()
        window = Window.empty()
        batches = eval_loader(
            self.eval_examples,
            self.cfg.batch_size,
            self.process.world_size,
            self.process.rank,
            self.collate,
            self.plan.transform,
            self.cfg.seed,
            self.cfg.eval_batches,
            streams=self.plan.streams,
            backward_half=self.plan.backward_half,
        )
        outputs: dict[str, list[torch.Tensor]] = defaultdict(list)
        for batch in batches:
            for name, n in self.objective.target_counts(batch).items():
                window.counts[name] += n
            batch = {k: v.to(self.runtime.device) for k, v in batch.items()}
            with self.runtime.autocast():
                out = self.module(batch)
            for k, v in out.loss_sums.items():
                window.loss_sums[k] += float(v)
            for k, v in out.metrics.items():
                window.metrics[k] += float(v)
            for k, v in out.outputs.items():
                outputs[k].append(v.detach().float().cpu() if v.is_floating_point() else v.detach().cpu())
        window = _reduce(window, self.process)
        summary = window.summary(self.objective.metric_denominators, prefix="eval_", components=True)
        for name in self.objective.perplexity_components:
            if f"eval_{name}_loss" in summary:
                summary[f"eval_{name}_perplexity"] = math.exp(min(summary[f"eval_{name}_loss"], 50.0))
        if type(self.objective).finish_evaluation is not Objective.finish_evaluation:
            # Every process holds the rows of its own batches; tasks decode from all of them.
            gathered = all_gather_objects({k: torch.cat(v) for k, v in outputs.items()}, self.process)
            keys = sorted({k for part in gathered for k in part})
            merged = {k: torch.cat([part[k] for part in gathered if k in part]) for k in keys}
            summary.update({f"eval_{k}": v for k, v in self.objective.finish_evaluation(merged).items()})
        record = {"step": self.step, **summary}
        self.metrics.write(record)
        if bar is not None and self.process.is_main:
            bar.write(" ".join(f"{k}={v:.4g}" for k, v in record.items()))
        self.module.train()
        return record
