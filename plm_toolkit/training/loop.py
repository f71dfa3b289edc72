"""The training loop. It knows nothing about model families or objectives: it moves batches to the device, runs
autocast, asks the objective for loss sums, normalises them by the global target count of the accumulation window,
steps, logs, evaluates and checkpoints.

A step reads nothing back from the device: loss sums, metrics and the gradient norm stay there until the next
log line or checkpoint (``window.settle``), so the host can queue the next step while the device works.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch import nn

from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.errors import TrainingError
from plm_toolkit.data.batching.collate import PackingTransform
from plm_toolkit.data.batching.loader import BatchLayout, mix_seed
from plm_toolkit.data.layouts.plan import DataPlan
from plm_toolkit.objectives.base import Objective, ObjectiveOutput, normalized_loss
from plm_toolkit.training.batches import check_streams, rows_per_batch, train_loader
from plm_toolkit.training.best_model import BestModel
from plm_toolkit.training.distributed import all_reduce_max, barrier
from plm_toolkit.training.evaluation import eval_batches, evaluate_weights, evaluates, log_eval_scope
from plm_toolkit.training.flops import ModelFlops, peak_tflops
from plm_toolkit.training.logging import MetricsWriter, ProgressBar
from plm_toolkit.training.optim import build_optimizer, build_scheduler
from plm_toolkit.training.parallel import prepare_module
from plm_toolkit.training.phases import TrainingPhase, blend_metrics, phased_micro_batches
from plm_toolkit.training.precision import LossScaler, Runtime
from plm_toolkit.training.preemption import Preempted, StopSignals, TrainingClock
from plm_toolkit.training.resume import check_length, finish_resumed
from plm_toolkit.training.selection import Selection, evaluation_due
from plm_toolkit.training.state import restore_state, save_state
from plm_toolkit.training.trackers import chosen_loggers, take_trackers
from plm_toolkit.training.window import StepStats, Window, reduce_window, settle

log = logging.getLogger("plm_toolkit")

# Steps logged whatever trainer.log_every says.
FIRST_LOGGED_STEPS = 3


def run_length(trainer_cfg, num_examples: int, global_batch: int) -> int:
    """Optimizer steps of the run: trainer.max_steps, or trainer.epochs passes over the training examples."""
    if trainer_cfg.max_steps is not None:
        return int(trainer_cfg.max_steps)
    if trainer_cfg.epochs == 0:  # plm-finetune's evaluation only
        return 0
    return max(1, math.ceil(trainer_cfg.epochs * num_examples / global_batch))


class PretrainingModule(nn.Module):
    """Backbone and objective as one module, so DDP, FSDP and the optimizer see every trained parameter."""

    def __init__(self, model: nn.Module, objective: Objective):
        super().__init__()
        self.model = model
        self.objective = objective

    def forward(self, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        return self.objective(self.model, batch)


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
        phases: list[TrainingPhase] | None = None,
        data_keys: tuple[str, str] = ("data.train_files", "data.validation_files"),
    ):
        self.cfg, self.runtime, self.run_dir = trainer_cfg, runtime, run_dir
        self.optimizer_cfg = optimizer_cfg
        # The config keys of the training and the validation data, for messages.
        self.data_keys = data_keys
        self.process = runtime.process
        self.module = PretrainingModule(model, objective).to(runtime.device)
        self.objective = objective
        self.train_examples, self.eval_examples, self.collate = train_examples, eval_examples, collate
        self.config_yaml, self.tokenizer_json = config_yaml, tokenizer_json
        self.num_workers = num_workers
        # trainer.phases: examples and batch sizes by step (training/phases.py); None reads train_examples.
        self.phases = phases
        # How batches are read and transformed (order, static copies, the objective's batch transform).
        self.plan = plan if plan is not None else DataPlan(transform=objective.batch_transform())
        self.layout = BatchLayout(
            rows_per_batch(train_examples, trainer_cfg),
            trainer_cfg.grad_accum_steps,
            self.process.world_size,
            self.process.rank,
        )
        self.max_steps = run_length(trainer_cfg, len(train_examples), self.layout.global_batch)
        self.flops = ModelFlops(self.module, model)
        self.peak = peak_tflops(
            runtime.device, runtime.precision, bool(hardware_cfg.allow_tf32), float(hardware_cfg.peak_tflops)
        )
        # FSDP shards the parameters in place, so the optimizer is built after it.
        self.forward_module, self.ddp = prepare_module(self.module, runtime, hardware_cfg)
        self.optimizer = build_optimizer(self.module, optimizer_cfg, hardware_cfg.optimizer_implementation)
        self.clock = TrainingClock(trainer_cfg.time_budget)
        self.scheduler = build_scheduler(self.optimizer, optimizer_cfg, self.max_steps, self.clock.budgeted)
        self.scaler = LossScaler(runtime, hardware_cfg.min_loss_scale, hardware_cfg.max_overflow_steps)
        self.transform = self.plan.transform
        if hardware_cfg.unpad:
            self.transform = PackingTransform(self.transform)
        self.step = 0
        self.samples_seen = 0
        self.last_checkpoint: Path | None = None
        # The step of last_checkpoint, from its training state (a resumed folder may have any name).
        self.saved_step: int | None = None
        loggers = chosen_loggers(trainer_cfg)
        self.metrics = MetricsWriter(
            run_dir, "tensorboard" in loggers, self.process.is_main, "jsonl" in loggers, take_trackers(run_dir)
        )
        # trainer.load_best_model_at_end / early_stopping_patience (training/selection.py), or None.
        self.selection = Selection.from_config(trainer_cfg, objective)
        self.best = BestModel(self)
        self.pending: list[StepStats] = []

    # --- state ---------------------------------------------------------------------------------------------
    def restore(self, checkpoint: ckpt.Checkpoint) -> None:
        state = restore_state(self, checkpoint)
        self.step, self.samples_seen = int(state["step"]), int(state["samples_seen"])
        self.clock.restart(float(state.get("elapsed_seconds", 0.0)), float(state.get("step_seconds", 0.0)))
        self.last_checkpoint, self.saved_step = checkpoint.path, self.step
        self.best.restore(state)
        check_length(self.cfg, self.max_steps, self.step, checkpoint)
        self.metrics.truncate_after(self.step)
        log.info("resumed from %s at step %d (%d examples seen)", checkpoint.path, self.step, self.samples_seen)

    def save(self, final: bool = False) -> None:
        self.settle()  # a checkpoint is written only after its steps' losses are known to be finite
        self.last_checkpoint = save_state(self, final)
        self.saved_step = self.step
        if self.process.is_main:
            log.info("saved checkpoint %s", self.last_checkpoint)
        barrier(self.process)
        self.tick = time.perf_counter()  # saving time stays out of the training throughput

    # --- the loop ------------------------------------------------------------------------------------------
    def fit(self) -> dict:
        try:
            if self.max_steps > 0 and self.step < self.max_steps:
                check_streams(self.train_examples, self.layout.batch_size, self.process, self.data_keys[0], self.plan)
            if evaluates(self) or (self.eval_examples is not None and self.max_steps == 0):
                check_streams(self.eval_examples, self.cfg.batch_size, self.process, self.data_keys[1], self.plan)
                log_eval_scope(self)
            if self.max_steps == 0:  # evaluation only (plm-finetune trainer.epochs=0): nothing trains or is saved
                return self.evaluate()
            if self.step >= self.max_steps or (self.clock.budgeted and self.clock.next_step_overruns()):
                return finish_resumed(self)
            if self.selection is not None and self.selection.stopped:
                return self.best.finish_stopped()
            if evaluates(self):
                # Whatever else evaluation cannot read fails now, not after the steps before its first turn.
                next(iter(eval_batches(self, self.process.world_size, self.process.rank, 1)), None)
            bar = ProgressBar(
                self.max_steps,
                self.step,
                self.cfg.epochs,
                enabled=self.cfg.progress_bar and self.process.is_main,
                budget_used=self.clock.fraction if self.clock.budgeted else None,
                lines=not sys.stderr.isatty(),
            )
            try:
                pin_memory = self.runtime.device.type == "cuda"
                loader = phased_micro_batches(self, pin_memory) if self.phases else train_loader(self)
                return self._run(loader, bar)
            finally:
                bar.close()
        finally:
            self.metrics.close()

    def _evaluation_due(self) -> bool:
        """Whether this step, before the last, evaluates (trainer.eval_every or eval_strategy=epoch)."""
        due = evaluation_due(self.cfg, self.step, len(self.train_examples), self.layout.global_batch)
        return evaluates(self) and due and self.step != self.max_steps

    def _run(self, loader, bar: ProgressBar) -> dict:
        cfg = self.cfg
        self.window, self.tick = Window.empty(), time.perf_counter()
        record: dict = {}
        stop = None
        with StopSignals() as signals:
            # The loader's workers start here, inside StopSignals: they inherit its handlers, so Ctrl-C (which the
            # terminal sends to them too) leaves them running until the step ends and the checkpoint is written.
            batches = iter(loader)
            self.clock.restart(self.clock.elapsed)
            while self.step < self.max_steps and stop is None:
                micro = [next(batches) for _ in range(cfg.grad_accum_steps)]
                lr = self.optimizer.param_groups[0]["lr"]
                self.pending.append(self.train_step(micro))
                self.step += 1
                self.samples_seen += self.layout.global_batch
                bar.update()
                stop = self._stop_reason(signals)
                # The first steps are logged too: a slow step (SQuAD at 384 tokens on a CPU) shows a loss at once.
                first = self.step <= FIRST_LOGGED_STEPS
                if self.step % cfg.log_every == 0 or self.step == self.max_steps or first or stop:
                    record = self.log(lr, bar)
                if stop == "signal":
                    self.save()
                    signals.hand_over()  # submitit's handler requeues the job and exits here
                    raise Preempted(signals.received, self.last_checkpoint)
                if stop == "budget":
                    log.info("trainer.time_budget reached after %.0f s at step %d", self.clock.elapsed, self.step)
                elif self._evaluation_due() and self.best.consider(self._evaluate_or_save(bar)):
                    stop = "early"  # trainer.early_stopping_patience
                due = cfg.save_every and self.step % cfg.save_every == 0 and self.saved_step != self.step
                if due and self.step != self.max_steps and not stop:
                    self.save()
            # Inside StopSignals still: a signal during the final evaluation or save waits for them.
            if evaluates(self) and stop != "early":
                evaluation = self._evaluate_or_save(bar, final=True)
                record.update(evaluation)
                self.best.consider(evaluation, final=True)
            if self.saved_step != self.step:
                self.save(final=True)
            record.update(self.best.finish())
        return record

    def _evaluate_or_save(self, bar: ProgressBar, final: bool = False) -> dict:
        """Evaluate; should it fail, this step's checkpoint is written first, so evaluation never costs a save."""
        try:
            return self.evaluate(bar)
        except Exception:
            if self.saved_step != self.step:
                log.error("evaluation failed at step %d; saving the step's checkpoint before stopping", self.step)
                self.save(final)
            raise

    def _stop_reason(self, signals: StopSignals) -> str | None:
        """'signal' or 'budget' once any process has a reason to stop after this step (all agree), else None."""
        flags = torch.tensor([signals.received is not None, self.clock.next_step_overruns()], dtype=torch.float32)
        if self.process.distributed:
            flags = all_reduce_max(flags, self.process)
        return "signal" if flags[0] else "budget" if flags[1] else None

    def settle(self) -> None:
        """Read the pending steps back from the device into the log window; stop on a non-finite loss."""
        window, losses = settle(self.pending, self.process)
        self.pending = []
        bad = next(((step, loss) for step, loss in losses if not math.isfinite(loss)), None)
        if bad is not None and not self.scaler.enabled:
            raise TrainingError(
                f"loss is {bad[1]} at step {bad[0]}; the last good checkpoint is "
                f"{self.last_checkpoint or 'none (no checkpoint written yet)'}. Lower optimizer.lr, raise "
                "optimizer.warmup_steps, or check the data"
            )
        self.window.add(window)

    def log(self, lr: float, bar: ProgressBar) -> dict:
        self.settle()
        window, elapsed = self.window, time.perf_counter() - self.tick
        record = {
            "step": self.step,
            **window.summary(self.objective.metric_denominators),
            "lr": lr,
            "tokens_per_s": window.tokens / elapsed,
            "grad_norm": window.grad_norm / max(window.steps, 1),
            "elapsed_s": round(self.clock.elapsed, 3),
            "epoch": self.samples_seen / len(self.train_examples),
        }
        if hasattr(self.train_examples, "realized"):  # data.sources: each source's share and epochs so far
            record.update(blend_metrics(self))
        if self.peak:
            record["mfu"] = window.flops / elapsed / (self.peak * 1e12 * self.process.world_size)
        self.metrics.write(record)
        bar.show(record)
        self.window, self.tick = Window.empty(), time.perf_counter()
        return record

    def train_step(self, micro: list[dict[str, torch.Tensor]]) -> StepStats:
        """One optimizer step over the micro-batches of an accumulation window."""
        stats = self.accumulate_gradients(micro)
        self.scaler.unscale_(self.optimizer)
        stats.grad_norm = self._clip_gradients()
        self.clock.tick()
        if self.scaler.step(self.optimizer):
            if self.clock.budgeted:  # the schedule runs over the time budget (optim.ScheduleFactor)
                for factor in self.scheduler.lr_lambdas:
                    factor.progress = self.clock.fraction()
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return stats

    def accumulate_gradients(self, micro: list[dict[str, torch.Tensor]]) -> StepStats:
        """Backward over every micro-batch; the gradient is that of sum(loss sums) / global target counts."""
        local = Window.empty()
        for batch in micro:
            for name, n in self.objective.target_counts(batch).items():
                local.counts[name] += n
        counts = reduce_window(Window(defaultdict(float), local.counts, defaultdict(float)), self.process).counts
        stats = StepStats(self.step + 1, {}, {}, dict(counts))
        # Dropout and on-device sampling are reseeded per step and rank, so resuming needs no RNG replay.
        torch.manual_seed(mix_seed(self.cfg.seed, self.step, stream=2 + self.process.rank))
        self.module.train()
        for j, batch in enumerate(micro):
            stats.tokens += float(batch["attention_mask"].sum()) if "attention_mask" in batch else 0.0
            stats.flops += self.flops.of_batch(batch)
            batch = {k: v.to(self.runtime.device, non_blocking=True) for k, v in batch.items()}
            last = j == len(micro) - 1
            with self._gradient_sync(last):
                with self.runtime.autocast():
                    out = self.forward_module(batch)
                # DDP and FSDP average gradients over processes; scaling by world size makes that a sum of
                # per-process sums, each already divided by the global target count.
                loss = normalized_loss(out, counts) * self.process.world_size
                self.scaler.scale(loss).backward()
            for table, values in ((stats.loss_sums, out.loss_sums), (stats.metrics, out.metrics)):
                for k, v in values.items():
                    v = v.detach().float().clone()  # a CUDA-graph replay would overwrite the output in place
                    table[k] = table[k] + v if k in table else v
        return stats

    def _gradient_sync(self, last: bool):
        """Reduce gradients over processes only after the last micro-batch of the window."""
        if self.ddp is not None and not last:
            return self.ddp.no_sync()
        if self.runtime.fsdp:
            self.module.set_requires_gradient_sync(last)
        return contextlib.nullcontext()

    def _clip_gradients(self) -> torch.Tensor:
        params = [p for p in self.module.parameters() if p.grad is not None]
        max_norm = self.cfg.clip_grad_norm if self.cfg.clip_grad_norm > 0 else float("inf")
        if not hasattr(torch.nn.utils, "get_total_norm"):  # torch < 2.6 (no FSDP2 there either)
            return torch.nn.utils.clip_grad_norm_(params, max_norm).detach()
        norm = torch.nn.utils.get_total_norm([p.grad for p in params])
        if hasattr(norm, "full_tensor"):  # FSDP: a DTensor of partial sums over the shards
            norm = norm.full_tensor()
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm)
        return norm.detach()

    def evaluate(self, bar: ProgressBar | None = None, write: bool = True) -> dict:
        """Evaluate the current weights (training/evaluation.py); ``write=False`` keeps the record out of
        metrics.jsonl and the trackers."""
        return evaluate_weights(self, bar, write)
