"""The training loop. It knows nothing about model families or objectives: it moves batches to the device, runs
autocast, asks the objective for loss sums, normalises them by the global target count of the accumulation window,
steps, logs, evaluates and checkpoints.

A step reads nothing back from the device: loss sums, metrics and the gradient norm stay there until the next
log line or checkpoint (``window.settle``), so the host can queue the next step while the device works.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import torch
from torch import nn

from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.errors import TrainingError
from plm_toolkit.data.batching.loader import BatchLayout
from plm_toolkit.data.batching.packing import PackingTransform
from plm_toolkit.data.batching.shapes import Shapes
from plm_toolkit.data.layouts.plan import DataPlan
from plm_toolkit.objectives.base import Objective, ObjectiveOutput
from plm_toolkit.training.batches import check_streams, rows_per_batch, train_loader
from plm_toolkit.training.best_model import BestModel
from plm_toolkit.training.compilation import CompileWatch, speed_switches
from plm_toolkit.training.distributed import all_reduce_max, barrier
from plm_toolkit.training.evaluation import (
    eval_batches,
    evaluate_weights,
    evaluates,
    evaluates_at_end,
    log_eval_scope,
)
from plm_toolkit.training.flops import ModelFlops, peak_tflops
from plm_toolkit.training.logging import MetricsWriter, ProgressBar
from plm_toolkit.training.optim import build_optimizer, build_scheduler
from plm_toolkit.training.parallel import prepare_module
from plm_toolkit.training.phases import TrainingPhase, blend_metrics, phase_at, phased_micro_batches
from plm_toolkit.training.precision import LossScaler, Runtime
from plm_toolkit.training.preemption import Preempted, StepAbandoned, StopSignals, TrainingClock
from plm_toolkit.training.resume import check_length, finish_resumed
from plm_toolkit.training.selection import Selection, evaluation_due
from plm_toolkit.training.state import restore_state, save_state
from plm_toolkit.training.step import OptimizerStep
from plm_toolkit.training.trackers import chosen_loggers, take_trackers
from plm_toolkit.training.window import StepStats, Window, settle

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
        longest: int | None = None,
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
        switches = speed_switches(hardware_cfg, runtime.device, type(objective), type(model))
        # A compiled step gets a few fixed batch shapes (data/batching/shapes.py): ``longest`` is the longest row.
        # Windows of a token stream (a plan with a window) all have its width already.
        self.shapes = Shapes.compiled(longest) if switches.compile and self.plan.window is None else None
        self.transform = self.plan.transform
        if switches.unpad:
            self.transform = PackingTransform(self.transform, self.shapes)
        # FSDP shards the parameters in place, so the optimizer is built after it.
        forward, ddp = prepare_module(self.module, runtime, hardware_cfg, switches.compile)
        self.optimizer = build_optimizer(self.module, optimizer_cfg, hardware_cfg.optimizer_implementation)
        self.clock = TrainingClock(trainer_cfg.time_budget)
        self.scheduler = build_scheduler(self.optimizer, optimizer_cfg, self.max_steps, self.clock.budgeted)
        self.scaler = LossScaler(runtime, hardware_cfg.min_loss_scale, hardware_cfg.max_overflow_steps)
        self.watch = CompileWatch(switches.compile)
        self.stepper = OptimizerStep(
            module=self.module,
            forward=forward,
            ddp=ddp,
            objective=objective,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            scaler=self.scaler,
            clock=self.clock,
            runtime=runtime,
            flops=self.flops,
            watch=self.watch,
            seed=int(trainer_cfg.seed),
            clip_grad_norm=float(trainer_cfg.clip_grad_norm),
        )
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
        # Graphs compiled when the last log line was written (a window that compiled is no pace for the ETA).
        self._graphs_logged = 0
        self._rewind_point: object = None

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
            if evaluates(self) or evaluates_at_end(self) or (self.eval_examples is not None and self.max_steps == 0):
                check_streams(self.eval_examples, self.cfg.batch_size, self.process, self.data_keys[1], self.plan)
                log_eval_scope(self)
            if self.max_steps == 0:  # evaluation only (plm-finetune trainer.epochs=0): nothing trains or is saved
                return self.evaluate()
            if self.step >= self.max_steps or (self.clock.budgeted and self.clock.next_step_overruns()):
                return finish_resumed(self)
            if self.selection is not None and self.selection.stopped:
                return self.best.finish_stopped()
            if evaluates(self) or evaluates_at_end(self):
                # Whatever else evaluation cannot read fails now, not after the steps before its first turn.
                next(iter(eval_batches(self, self.process.world_size, self.process.rank, 1)), None)
            bar = ProgressBar(
                self.max_steps,
                self.step,
                self.cfg.epochs,
                enabled=self.cfg.progress_bar,
                budget_used=self.clock.fraction if self.clock.budgeted else None,
                lines=self.process.is_main,
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
        with StopSignals(cfg.signal_grace, self._nothing_to_save) as signals:
            try:
                # The loader's workers start here, inside StopSignals: they inherit its handlers, so Ctrl-C (which
                # the terminal sends to them too) leaves them running until the step ends and the checkpoint is
                # written.
                batches = iter(loader)
                self.clock.restart(self.clock.elapsed)
                while self.step < self.max_steps and stop is None:
                    lr = self.optimizer.param_groups[0]["lr"]
                    self._rewind_point = self.objective.rewind_point()
                    with signals.abandonable(f"step {self.step + 1}"):
                        micro = [next(batches) for _ in range(cfg.grad_accum_steps)]
                        stats = self.stepper.gradients(micro, self.step + 1)
                    self.pending.append(self.stepper.update(stats))
                    self.step += 1
                    self.samples_seen += self.layout.global_batch
                    bar.update()
                    stop = self._stop_reason(signals)
                    # The first steps are logged too: a slow step (SQuAD at 384 tokens on a CPU) shows a loss at
                    # once.
                    first = self.step <= FIRST_LOGGED_STEPS
                    if self.step % cfg.log_every == 0 or self.step == self.max_steps or first or stop:
                        record = self.log(lr, bar)
                    if stop == "signal":
                        self._stop_on_signal(signals)
                    if stop == "budget":
                        log.info("trainer.time_budget reached after %.0f s at step %d", self.clock.elapsed, self.step)
                    elif self._evaluation_due():
                        with signals.abandonable(f"the evaluation at step {self.step}"):
                            evaluation = self._evaluate_or_save(bar)
                        if self.best.consider(evaluation):
                            stop = "early"  # trainer.early_stopping_patience
                    due = cfg.save_every and self.step % cfg.save_every == 0 and self.saved_step != self.step
                    if due and self.step != self.max_steps and not stop:
                        self.save()
                if evaluates_at_end(self) and stop != "early":
                    with signals.abandonable(f"the final evaluation at step {self.step}"):
                        evaluation = self._evaluate_or_save(bar, final=True)
                    record.update(evaluation)
                    self.best.consider(evaluation, final=True)
                if self.saved_step != self.step:
                    self.save(final=True)
                record.update(self.best.finish())
            except StepAbandoned as dropped:
                self._abandoned(dropped, signals)
        return record

    def _nothing_to_save(self) -> bool:
        """Whether no step has completed since the last checkpoint (or since the start, without one)."""
        return self.step == (self.saved_step if self.saved_step is not None else 0)

    def _stop_on_signal(self, signals: StopSignals) -> None:
        """Save this step and stop with the requeue status (training/preemption.py)."""
        if self.saved_step != self.step:
            self.save()
        signals.hand_over()  # submitit's handler requeues the job and exits here
        raise Preempted(signals.received, self.last_checkpoint)

    def _abandoned(self, dropped: StepAbandoned, signals: StopSignals) -> None:
        """A signal dropped the step or evaluation in progress: back to the last completed step, save it (unless
        nothing changed since the last checkpoint, or other processes may be inside a collective), stop."""
        self.optimizer.zero_grad(set_to_none=True)
        if dropped.work.startswith("step "):  # its forward passes may have moved a carried memory on
            self.objective.rewind(self._rewind_point)
        self.module.train()
        if self._nothing_to_save():
            since = f"the last checkpoint ({self.last_checkpoint})" if self.last_checkpoint else "the start"
            log.warning("%s: no step has completed since %s, so there is nothing to save; stopping now", dropped, since)
        elif self.process.distributed:
            log.warning(
                "%s: not saving step %d, since the other processes may be inside a collective; the last checkpoint "
                "is %s",
                dropped,
                self.step,
                self.last_checkpoint or "none",
            )
        else:
            log.warning("%s: saving step %d, the last one that completed", dropped, self.step)
            self.save()
        signals.hand_over()
        raise Preempted(dropped.signum, self.last_checkpoint)

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
            "step_s": elapsed / max(window.steps, 1),
            "grad_norm": window.grad_norm / max(window.steps, 1),
            "elapsed_s": round(self.clock.elapsed, 3),
            **self._epoch(),
            **self.watch.record(),
        }
        if hasattr(self.train_examples, "realized"):  # data.sources: each source's share and epochs so far
            record.update(blend_metrics(self))
        if self.peak:
            record["mfu"] = window.flops / elapsed / (self.peak * 1e12 * self.process.world_size)
        self.metrics.write(record)
        # The first step warms up (allocations, data workers) and a step that compiled is no pace for the ETA.
        bar.show(record, steady=self.step > 1 and self.watch.graphs == self._graphs_logged)
        self._graphs_logged = self.watch.graphs
        self.window, self.tick = Window.empty(), time.perf_counter()
        return record

    def _epoch(self) -> dict[str, float]:
        """Passes over the training examples so far; with trainer.phases, over the current phase's, and which."""
        if not self.phases:
            return {"epoch": self.samples_seen / len(self.train_examples)}
        number, phase = phase_at(self.phases, self.step)
        samples = (self.step - phase.start) * self.layout.global_batch
        return {"epoch": samples / len(phase.data.train), "phase": number}

    def train_step(self, micro: list[dict[str, torch.Tensor]]) -> StepStats:
        """One optimizer step over the micro-batches of an accumulation window (training/step.py)."""
        return self.stepper.update(self.stepper.gradients(micro, self.step + 1))

    def evaluate(self, bar: ProgressBar | None = None, write: bool = True) -> dict:
        """Evaluate the current weights (training/evaluation.py); ``write=False`` keeps the record out of
        metrics.jsonl and the trackers."""
        return evaluate_weights(self, bar, write)
