"""The training loop. It knows nothing about model families or objectives: it moves batches to the device, runs
autocast, asks the objective for loss sums, normalises them by the global target count of the accumulation window,
steps, logs, evaluates and checkpoints.

A step reads nothing back from the device: loss sums, metrics and the gradient norm stay there until the next
log line or checkpoint (``StepLog.settle``), so the host can queue the next step while the device works.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import nn

from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.data.batching.loader import BatchLayout
from plm_toolkit.data.layouts.examples import PretrainingData
from plm_toolkit.data.layouts.plan import DataPlan
from plm_toolkit.objectives.base import Objective
from plm_toolkit.training.batches import (
    Batching,
    StretchBatches,
    TrainingStretch,
    check_streams,
    rows_per_batch,
    run_length,
    stretches_ahead,
)
from plm_toolkit.training.best_model import BestModel
from plm_toolkit.training.compilation import CompileWatch, speed_switches
from plm_toolkit.training.distributed import all_reduce_max, barrier
from plm_toolkit.training.evaluation import EvaluationSchedule, Evaluator
from plm_toolkit.training.flops import ModelFlops, peak_tflops
from plm_toolkit.training.logging import MetricsWriter
from plm_toolkit.training.optim import build_optimizer, build_scheduler
from plm_toolkit.training.parallel import prepare_module
from plm_toolkit.training.phases import blend_metrics, phase_at, training_phases
from plm_toolkit.training.precision import LossScaler, Runtime
from plm_toolkit.training.preemption import Preempted, StepAbandoned, StopSignals, TrainingClock, saves_after
from plm_toolkit.training.progress import ProgressBar
from plm_toolkit.training.resume import check_length, final_evaluation_missing
from plm_toolkit.training.selection import Selection
from plm_toolkit.training.state import Checkpointer, TrainingState
from plm_toolkit.training.step import OptimizerStep, PretrainingModule
from plm_toolkit.training.step_log import StepLog
from plm_toolkit.training.trackers import chosen_loggers, take_trackers
from plm_toolkit.training.window import StepStats

log = logging.getLogger("plm_toolkit")

# Steps logged whatever trainer.log_every says.
FIRST_LOGGED_STEPS = 3


class Trainer:
    """Owns the run's state (step, data position, examples and batch layout, checkpoints written) and is its only
    writer; its collaborators get what they need and hand results back: OptimizerStep, Evaluator, Checkpointer,
    StepLog, BestModel, EvaluationSchedule, StretchBatches (training/batches.py: the training batches, phases too)."""

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
        phase_data: list[PretrainingData] | None = None,
        data_keys: tuple[str, str] = ("data.train_files", "data.validation_files"),
        longest: int | None = None,
    ):
        self.cfg, self.runtime, self.run_dir = trainer_cfg, runtime, run_dir
        # The config keys of the training and the validation data, for messages.
        self.data_keys = data_keys
        self.process = runtime.process
        self.module = PretrainingModule(model, objective).to(runtime.device)
        self.objective = objective
        self.train_examples, self.eval_examples = train_examples, eval_examples
        # trainer.phases: each phase's steps, batch size and examples (``phase_data``, built by the data entry point
        # at each phase's length; training/phases.py); None reads train_examples.
        self.phases = training_phases(trainer_cfg, phase_data) if phase_data else None
        # The data side: how batches are read and transformed (order, static copies, the objective's batch
        # transform), the training batch layout, how validation is scored and when.
        plan = plan if plan is not None else DataPlan(transform=objective.batch_transform())
        switches = speed_switches(hardware_cfg, runtime.device, type(objective), type(model))
        seed = int(trainer_cfg.seed)
        self.batching = Batching.for_run(plan, collate, switches, longest, seed, num_workers, runtime.device)
        self.layout = BatchLayout(
            rows_per_batch(train_examples, trainer_cfg),
            trainer_cfg.grad_accum_steps,
            self.process.world_size,
            self.process.rank,
        )
        rows = rows_per_batch(eval_examples, trainer_cfg)
        # The run's length: trainer.max_steps, or trainer.epochs in batches of that layout.
        self.max_steps = run_length(trainer_cfg, len(train_examples), self.layout.global_batch)
        self.evaluator = Evaluator(self.module, objective, runtime, self.batching, rows, int(trainer_cfg.eval_batches))
        # When the run evaluates (its phases all have validation examples or none do), and when trainer.time_budget
        # stops it.
        self.schedule = EvaluationSchedule.from_config(trainer_cfg, has_validation=eval_examples is not None)
        self.clock = TrainingClock(trainer_cfg.time_budget)
        # The module side: the model's FLOPs per token and the device's peak (the model FLOPs utilization logged),
        # the forward, optimizer and schedule, the optimizer step.
        self.flops = ModelFlops(self.module, model)
        peak = peak_tflops(
            runtime.device, runtime.precision, bool(hardware_cfg.allow_tf32), float(hardware_cfg.peak_tflops)
        )
        # FSDP shards the parameters in place, so the optimizer is built after it.
        forward, ddp = prepare_module(self.module, runtime, hardware_cfg, switches.compile)
        self.watch = CompileWatch(switches.compile)
        self.optimizer = build_optimizer(self.module, optimizer_cfg, hardware_cfg.optimizer_implementation)
        self.scheduler = build_scheduler(self.optimizer, optimizer_cfg, self.max_steps, self.clock.budgeted)
        self.scaler = LossScaler(runtime, hardware_cfg.min_loss_scale, hardware_cfg.max_overflow_steps)
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
            seed=seed,
            clip_grad_norm=float(trainer_cfg.clip_grad_norm),
        )
        self.checkpointer = Checkpointer(
            module=self.module,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            scaler=self.scaler,
            runtime=runtime,
            optimizer_cfg=optimizer_cfg,
            run_dir=run_dir,
            config_yaml=config_yaml,
            tokenizer_json=tokenizer_json,
            keep_last=trainer_cfg.keep_last,
        )
        self.step = 0
        self.samples_seen = 0
        self.last_checkpoint: Path | None = None
        # The step of last_checkpoint, from its training state (a resumed folder may have any name).
        self.saved_step: int | None = None
        loggers, trackers = chosen_loggers(trainer_cfg), take_trackers(run_dir)
        tensorboard, jsonl = "tensorboard" in loggers, "jsonl" in loggers
        self.metrics = MetricsWriter(run_dir, tensorboard, self.process.is_main, jsonl, trackers)
        self.step_log = StepLog(self.metrics, self.process, objective.metric_denominators, self.clock, self.watch, peak)
        # trainer.load_best_model_at_end / early_stopping_patience (training/selection.py).
        self.best = BestModel(
            Selection.from_config(trainer_cfg, objective),
            run_dir / "checkpoints",
            self.process,
            has_validation=eval_examples is not None,
            evaluates=self.schedule.during,
            trains=self.max_steps > 0,
            fsdp=runtime.fsdp,
        )
        self._rewind_point: object = None

    # --- state ---------------------------------------------------------------------------------------------
    def restore(self, checkpoint: ckpt.Checkpoint) -> None:
        state = self.checkpointer.restore(checkpoint, self.max_steps)
        self.step, self.samples_seen = state.step, state.samples_seen
        self.clock.restart(state.elapsed_seconds, state.step_seconds)
        self.last_checkpoint, self.saved_step = checkpoint.path, self.step
        self.best.restore(state.selection)
        check_length(self.cfg, self.max_steps, self.step, checkpoint)
        self.metrics.truncate_after(self.step)
        log.info("resumed from %s at step %d (%d examples seen)", checkpoint.path, self.step, self.samples_seen)

    def save(self, final: bool = False) -> None:
        self.settle()  # a checkpoint is written only after its steps' losses are known to be finite
        state = TrainingState(
            self.step, self.samples_seen, self.clock.elapsed, self.clock.step_seconds, self.best.state_dict()
        )
        self.last_checkpoint = self.checkpointer.save(state, final)
        self.saved_step = self.step
        if self.process.is_main:
            log.info("saved checkpoint %s", self.last_checkpoint)
        barrier(self.process)
        self.step_log.restart_timer()  # saving time stays out of the training throughput

    def _save_unsaved(self, final: bool = False) -> None:
        """Save this step unless its checkpoint is written already."""
        if self.saved_step != self.step:
            self.save(final)

    # --- the loop ------------------------------------------------------------------------------------------
    def fit(self) -> dict:
        try:
            plan = self.batching.plan
            if self.max_steps > 0 and self.step < self.max_steps:
                check_streams(self.train_examples, self.layout.batch_size, self.process, self.data_keys[0], plan)
            evaluating = self.schedule.during or self.schedule.at_end
            if evaluating or (self.eval_examples is not None and self.max_steps == 0):
                check_streams(self.eval_examples, self.cfg.batch_size, self.process, self.data_keys[1], plan)
                self.evaluator.log_scope(self.eval_examples)
            if self.max_steps == 0:  # evaluation only (plm-finetune trainer.epochs=0): nothing trains or is saved
                return self.evaluate()
            if self.step >= self.max_steps or (self.clock.budgeted and self.clock.next_step_overruns()):
                # A resumed run with nothing left to train: its final evaluation, where metrics.jsonl lacks it.
                args = (self.cfg, self.step, self.max_steps, self.schedule.at_end, self.metrics, self.process)
                return self.evaluate() if final_evaluation_missing(*args) else {}
            if self.best.stopped:
                return self.best.finish_stopped()
            if evaluating:
                # Whatever else evaluation cannot read fails now, not after the steps before its first turn.
                process = self.process
                next(iter(self.evaluator.batches(self.eval_examples, process.world_size, process.rank, 1)), None)
            bar = ProgressBar(
                self.max_steps,
                self.step,
                self.cfg.epochs,
                enabled=self.cfg.progress_bar,
                budget_used=self.clock.fraction if self.clock.budgeted else None,
                lines=self.process.is_main,
            )
            try:
                return self._run(self._batches(), bar)
            finally:
                bar.close()
        finally:
            self.metrics.close()

    def _batches(self) -> StretchBatches:
        """The micro-batches from the current data position (training/batches.py)."""
        examples, position = (self.train_examples, self.eval_examples), (self.layout, self.samples_seen, self.step)
        stretches = stretches_ahead(*examples, *position, self.phases, self.cfg.group_by_length)
        return StretchBatches(self.batching, stretches, self._begin)

    def _begin(self, stretch: TrainingStretch) -> None:
        """A phase begins: its examples and batch layout become the run's (evaluation and the count follow them)."""
        self.layout, self.train_examples, self.eval_examples = stretch.layout, stretch.examples, stretch.validation

    def _run(self, loader: StretchBatches, bar: ProgressBar) -> dict:
        cfg = self.cfg
        self.step_log.restart_timer()
        record: dict = {}
        stop = None
        with StopSignals(cfg.signal_grace, self._nothing_to_save) as signals:
            try:
                # The loader's workers start here, inside StopSignals: they inherit its handlers, so Ctrl-C (which
                # the terminal sends to them too) leaves them running until the step ends and the checkpoint is
                # written.
                batches = loader.start()
                self.clock.restart(self.clock.elapsed)
                while self.step < self.max_steps and stop is None:
                    lr = self.optimizer.param_groups[0]["lr"]
                    self._rewind_point = self.objective.rewind_point()
                    with signals.abandonable(f"step {self.step + 1}"):
                        micro = [next(batches) for _ in range(cfg.grad_accum_steps)]
                        stats = self.stepper.gradients(micro, self.step + 1)
                    self.step_log.add(self.stepper.update(stats))
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
                    elif self.schedule.due(
                        self.step, self.max_steps, len(self.train_examples), self.layout.global_batch
                    ):
                        with signals.abandonable(f"the evaluation at step {self.step}"):
                            evaluation = self._evaluate_or_save(bar)
                        if self._consider(evaluation):
                            stop = "early"  # trainer.early_stopping_patience
                    due = cfg.save_every and self.step % cfg.save_every == 0 and self.saved_step != self.step
                    if due and self.step != self.max_steps and not stop:
                        self.save()
                if self.schedule.at_end and stop != "early":
                    with signals.abandonable(f"the final evaluation at step {self.step}"):
                        evaluation = self._evaluate_or_save(bar, final=True)
                    record.update(evaluation)
                    self._consider(evaluation, final=True)
                self._save_unsaved(final=True)
                record.update(self.best.finish(self.step, self.module, self.evaluator, self.eval_examples))
            except StepAbandoned as dropped:
                self._abandoned(dropped, signals)
        return record

    def _nothing_to_save(self) -> bool:
        """Whether no step has completed since the last checkpoint (or since the start, without one)."""
        return self.step == (self.saved_step if self.saved_step is not None else 0)

    def _stop_on_signal(self, signals: StopSignals) -> None:
        """Save this step and stop with the requeue status (training/preemption.py)."""
        self._save_unsaved()
        signals.hand_over()  # submitit's handler requeues the job and exits here
        raise Preempted(signals.received, self.last_checkpoint)

    def _abandoned(self, dropped: StepAbandoned, signals: StopSignals) -> None:
        """A signal dropped the step or evaluation in progress: back to the last completed step, save it (unless
        nothing changed since the last checkpoint, or other processes may be inside a collective), stop."""
        self.optimizer.zero_grad(set_to_none=True)
        if dropped.work.startswith("step "):  # its forward passes may have moved a carried memory on
            self.objective.rewind(self._rewind_point)
        self.module.train()
        if saves_after(dropped, self._nothing_to_save(), self.process.distributed, self.step, self.last_checkpoint):
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

    def _consider(self, evaluation: dict, final: bool = False) -> bool:
        """Offer an evaluation to the best model (training/best_model.py); an improvement it keeps is saved first.
        True: early stopping stops the run now."""
        try:
            verdict = self.best.judge(evaluation)
        except ConfigError:  # a metric the evaluation does not report: the steps so far are saved first
            self._save_unsaved(final)
            raise
        if verdict.keep:
            self._save_unsaved(final)
        self.best.settle(verdict, self.last_checkpoint, self.step)
        return verdict.stop

    def _stop_reason(self, signals: StopSignals) -> str | None:
        """'signal' or 'budget' once any process has a reason to stop after this step (all agree), else None."""
        flags = torch.tensor([signals.received is not None, self.clock.next_step_overruns()], dtype=torch.float32)
        if self.process.distributed:
            flags = all_reduce_max(flags, self.process)
        return "signal" if flags[0] else "budget" if flags[1] else None

    def settle(self) -> None:
        """Read the pending steps back from the device (training/step_log.py); stop on a non-finite loss."""
        self.step_log.settle(self.last_checkpoint, self.scaler.enabled)

    def log(self, lr: float, bar: ProgressBar) -> dict:
        self.settle()
        blend = {}
        if hasattr(self.train_examples, "realized"):  # data.sources: each source's share and epochs so far
            last = self.step == self.max_steps
            blend = blend_metrics(self.train_examples, self._samples_in_phase(), last, self.process.is_main)
        return self.step_log.line(self.step, lr, self._epoch(), blend, bar)

    def _samples_in_phase(self) -> int:
        """Examples read so far: of the run, or with trainer.phases of the current phase."""
        if not self.phases:
            return self.samples_seen
        _, phase = phase_at(self.phases, self.step)
        return (self.step - phase.start) * self.layout.global_batch

    def _epoch(self) -> dict[str, float]:
        """Passes over the training examples so far; with trainer.phases, over the current phase's, and which."""
        if not self.phases:
            return {"epoch": self.samples_seen / len(self.train_examples)}
        number, phase = phase_at(self.phases, self.step)
        return {"epoch": self._samples_in_phase() / len(phase.data.train), "phase": number}

    def train_step(self, micro: list[dict[str, torch.Tensor]]) -> StepStats:
        """One optimizer step over the micro-batches of an accumulation window (training/step.py)."""
        return self.stepper.update(self.stepper.gradients(micro, self.step + 1))

    def evaluate(self, bar: ProgressBar | None = None, write: bool = True) -> dict:
        """Evaluate the current weights (training/evaluation.py); ``write=False`` keeps the record out of
        metrics.jsonl and the trackers."""
        if self.eval_examples is None:
            return {}
        record = self.evaluator.evaluate(self.eval_examples, self.step)
        if write:
            self.metrics.write(record)
        if bar is not None and self.process.is_main:
            bar.write(" ".join(f"{k}={v:.4g}" for k, v in record.items()))
        self.step_log.restart_timer()  # evaluation time stays out of the training throughput
        return record
