"""Typed schemas of the config groups that are not a model or an objective (those live beside their code).

Every field carries its meaning in the comment above it; docs/configuration.md is generated from the same
words. Hydra rejects unknown keys and wrong types against these classes before ``plm-train`` does any work.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from plm_toolkit.core.choices import choices

OptimizerName = choices("OptimizerName", "adamw", "adam", "sgd", "lamb", "adafactor", "adagrad")
Schedule = choices("Schedule", "linear", "cosine", "constant", "noam", "inverse_sqrt", "constant_then_inverse_sqrt")
Device = choices("Device", "auto", "cpu", "cuda")
Precision = choices("Precision", "auto", "fp32", "bf16", "fp16")
Distributed = choices("Distributed", "auto", "none", "ddp", "fsdp")
CompileMode = choices("CompileMode", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
OptimizerImplementation = choices("OptimizerImplementation", "auto", "fused", "foreach", "for_loop")
Backend = choices("Backend", "auto", "nccl", "gloo")
ResumeChanges = choices("ResumeChanges", "refuse", "accept")
EvalStrategy = choices("EvalStrategy", "steps", "epoch")


@dataclass
class OptimizerConfig:
    # Update rule: adamw, adam, sgd; lamb (You et al. 2020: Adam's moments, each matrix's step scaled by its trust
    # ratio ||w|| / ||update||, ALBERT); adafactor (Shazeer and Stern 2018: factored second moments, relative step
    # size, update clipping, T5; torch.optim.Adafactor); adagrad (ELMo's bilm-tf).
    name: OptimizerName = OptimizerName.adamw
    # Peak learning rate. With schedule=noam it is the formula's `scale`:
    # lr_t = lr * d_model^-0.5 * min(t^-0.5, t * warmup_steps^-1.5). adafactor: the cap of the relative step size,
    # each tensor moving by max(scale_epsilon, RMS(w)) * min(lr_t, 1/sqrt(t)) (T5: lr 0.01).
    lr: float = 5e-4
    # Adam's (beta1, beta2): decay rates of the gradient's first and second moment estimates (adam, adamw, lamb).
    # BERT: (0.9, 0.999); the Transformer's Noam recipe: (0.9, 0.98).
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    # Epsilon added to the second-moment root (BERT: 1e-6; the Transformer: 1e-9); adafactor: the floor of that
    # root (T5's epsilon1 = 1e-30 added to the squared gradient is about 1e-15 here); adagrad: added to the root
    # of the accumulator.
    eps: float = 1e-6
    # Decoupled weight decay (adamw, lamb: inside the trust ratio; adafactor: lr * weight_decay) or L2 (adam, sgd,
    # adagrad); never applied to biases and LayerNorm weights.
    weight_decay: float = 0.01
    # SGD momentum (name=sgd only).
    momentum: float = 0.0
    # lamb only: divide the moments by 1 - beta^t, as You et al. (2020, Algorithm 2) and TensorFlow Addons do;
    # google-research/albert's lamb_optimizer.py does not (its recipe: false).
    bias_correction: bool = True
    # adamw only: multiply each tensor's step by max(scale_epsilon, RMS(w)), Adafactor's parameter scaling, as
    # nanoT5 trains T5 v1.1 with AdamW at lr 2e-2 (adafactor always scales so).
    parameter_scale: bool = False
    # Floor of the parameter scale RMS(w) (adafactor's epsilon2, and adamw with parameter_scale): 1e-3 in T5.
    scale_epsilon: float = 1e-3
    # adafactor only: the second-moment decay beta2_t = 1 - t^-decay_rate (T5: 0.8).
    decay_rate: float = 0.8
    # adafactor only: update clipping, each tensor's update divided by max(1, RMS(update) / clip_threshold) (d = 1).
    clip_threshold: float = 1.0
    # adagrad only: starting value of the sum of squared gradients (bilm-tf's ELMo: 1.0; torch's default 0).
    initial_accumulator: float = 0.0
    # Learning-rate schedule over optimizer steps: linear or cosine decay after the warm-up; constant; noam;
    # inverse_sqrt (fairseq's: linear warm-up, then lr * sqrt(warmup_steps / t)); constant_then_inverse_sqrt
    # (T5's: lr * sqrt(warmup_steps / max(t, warmup_steps)), flat for the first warmup_steps).
    schedule: Schedule = Schedule.linear
    # Optimizer steps of linear warm-up from 0 (or lr * warmup_start) to lr; required by noam and inverse_sqrt.
    # constant_then_inverse_sqrt holds lr for as many steps instead.
    warmup_steps: int = 0
    # Warm-up as a fraction of total_steps, used when warmup_steps is 0.
    warmup_ratio: float = 0.0
    # The linear warm-up starts from lr * warmup_start instead of 0 (nanoT5: 0.5).
    warmup_start: float = 0.0
    # Length of the decay (linear, cosine); null means the run's length (trainer.max_steps, or from trainer.epochs).
    total_steps: int | None = None
    # The decay ends at lr * min_lr_ratio.
    min_lr_ratio: float = 0.0
    # Model width for the Noam formula (plm-finetune: 0 takes the backbone's hidden size).
    d_model: int = "${model.hidden_size}"  # type: ignore[assignment]


@dataclass
class HardwareConfig:
    # Where to train: auto picks cuda when a GPU is visible, else cpu.
    device: Device = Device.auto
    # fp32; bf16 autocast; fp16 autocast with a dynamic loss scale. auto = bf16 on GPUs that support it, else fp32.
    precision: Precision = Precision.auto
    # Data parallelism over the processes a launcher started (torchrun, or a submitit task): ddp replicates the
    # model; fsdp shards parameters, gradients and optimizer state (PyTorch FSDP2, one unit per transformer
    # block, bf16 parameters with fp32 gradient reduction under precision=bf16; checkpoints written shard by shard
    # with torch.distributed.checkpoint); auto = ddp whenever WORLD_SIZE > 1, else none.
    distributed: Distributed = Distributed.auto
    # Process-group backend; auto = nccl on cuda (with gloo beside it for small CPU messages), gloo on cpu.
    backend: Backend = Backend.auto
    # fsdp only: free each block's gathered parameters after its forward pass (less memory; they are gathered
    # again for the backward pass). false keeps them until the backward pass.
    reshard_after_forward: bool = True
    # fp16 only: stop with advice after this many consecutive skipped steps at the minimum loss scale.
    max_overflow_steps: int = 20
    # fp16 only: the loss scale below which overflows count towards max_overflow_steps.
    min_loss_scale: float = 1.0
    # torch.compile the backbone together with the objective's loss (per transformer block under fsdp), with static
    # shapes: batches come padded to widths in multiples of 64 tokens (never past the data's longest row), so each
    # width compiles once; metrics.jsonl counts the graphs (compiled_graphs) and their seconds (compile_s). null: on
    # where plm-train itself measured it to pay, which is nowhere yet (bert_base on an H200: 0.90x eager's tokens/s
    # compiled and unpadded; a CPU rarely earns its compile time back).
    # An objective whose batches cannot keep a few shapes (translation's token batches) says so and trains eagerly;
    # without a working compiler, or when compilation fails, training continues eagerly with one warning.
    compile: bool | None = None
    # torch.compile's backend: inductor (generated kernels); aot_eager and eager trace without generating code
    # (to tell a compiler problem from a model problem).
    compile_backend: str = "inductor"
    # torch.compile's mode: default; reduce-overhead replays CUDA graphs (less launch overhead at small batches,
    # more memory, one recording per input shape); max-autotune also searches matmul kernels (long compiles).
    compile_mode: CompileMode = CompileMode.default
    # Optimizer kernels: fused (one kernel over all parameters), foreach (batched tensor ops) or for_loop (one
    # parameter at a time); auto = fused where torch has it for the optimizer and device, else foreach.
    optimizer_implementation: OptimizerImplementation = OptimizerImplementation.auto
    # objective=mlm only: pack each batch's sequences into as few rows as hold them, each attending only to itself
    # (a block-diagonal attention mask, positions restarting per sequence), so padding costs no compute; the row
    # count is rounded up to an eighth of trainer.batch_size, so a compiled step sees few shapes. null: on where the
    # step is compiled on a GPU and the objective and family can read packed rows.
    unpad: bool | None = None
    # Peak dense TFLOP/s of one device at the run's precision, for the MFU (model FLOPs utilization) in logs;
    # 0 looks the GPU up in a table of known ones (an unknown device or a CPU then logs no MFU).
    peak_tflops: float = 0.0
    # CPU threads of each process's intra-op parallelism (torch.set_num_threads); 0 keeps torch's default, one
    # per core. On a machine that other processes keep busy, 1 can be many times faster: every parallel region
    # waits for all of its threads, and a descheduled one stalls it for a scheduler slice.
    num_threads: int = 0
    # Allow TF32 matmuls on Ampere and newer GPUs.
    allow_tf32: bool = True


@dataclass
class PhaseConfig:
    # Share of trainer.max_steps this phase lasts; the phases' shares sum to 1.
    fraction: float = 1.0
    # Tokens per sequence in this phase: its examples are prepared at this length (data.max_seq_len).
    max_seq_len: int = 128
    # Sequences per micro-batch in this phase; 0 keeps trainer.batch_size.
    batch_size: int = 0


@dataclass
class TrainerConfig:
    # Optimizer steps to train for; null derives them from trainer.epochs. Give exactly one of the two.
    # plm-finetune: 0 evaluates the starting weights without training (as trainer.epochs=0 does); given on the
    # command line without trainer.epochs, it sets plm-finetune's default epochs aside (as transformers' Trainer).
    max_steps: int | None = 300
    # Passes over the training examples (after data.max_train_samples; fractions allowed): the run lasts
    # ceil(epochs * examples / global batch) optimizer steps. Needs trainer.max_steps=null. plm-finetune: 0
    # evaluates the starting weights on data.validation_file without training or saving (no training file needed).
    epochs: float | None = None
    # Sequences per micro-batch per process.
    batch_size: int = 32
    # Micro-batches per optimizer step; the global batch is batch_size * grad_accum_steps * processes.
    grad_accum_steps: int = 1
    # Clip the global gradient norm to this value (0 disables).
    clip_grad_norm: float = 1.0
    # Log to the progress bar, metrics.jsonl and TensorBoard every N steps.
    log_every: int = 10
    # Evaluate on the validation data every N steps (0 disables), besides the evaluation at the end of training.
    eval_every: int = 100
    # Evaluate on the validation data when training ends (whatever trainer.eval_every says); false skips it.
    eval_at_end: bool = True
    # steps: evaluate every trainer.eval_every steps; epoch: at the end of every epoch of the training examples
    # (trainer.eval_every then unused), as transformers' eval_strategy=epoch.
    eval_strategy: EvalStrategy = EvalStrategy.steps
    # Keep the best evaluation's model (transformers' load_best_model_at_end): an evaluation that improves
    # trainer.metric_for_best_model is saved and checkpoints/best points to it (kept whatever trainer.keep_last
    # says); at the end its weights are evaluated again, so eval_results.json, the predictions and the run's model
    # (a run directory given to plm-finetune, plm-export, plm-glue) are the best one's. checkpoints/last stays the
    # last step, which a resume continues from.
    load_best_model_at_end: bool = False
    # The evaluation metric that picks the best model and early stopping, with or without its eval_ prefix
    # (accuracy, f1, loss, ...). Empty: the task's main metric (its first of task.metrics; f1 for SQuAD and NER),
    # eval_loss for plm-train.
    metric_for_best_model: str = ""
    # Whether a higher trainer.metric_for_best_model is better; null: false for names ending in loss or perplexity,
    # true for the others.
    greater_is_better: bool | None = None
    # Stop training after this many evaluations in a row without an improvement of the metric by more than
    # trainer.early_stopping_threshold (0: never stop early), as transformers' EarlyStoppingCallback; needs
    # validation data (refused without: the run would train its whole length).
    early_stopping_patience: int = 0
    # The smallest change of trainer.metric_for_best_model that counts as an improvement for early stopping: 0 or
    # more (0: any improvement).
    early_stopping_threshold: float = 0.0
    # Evaluation micro-batches per evaluation (0 = the whole validation set): a fixed random sample of the
    # validation rows, spread over the whole set and the same at every evaluation (the whole set when it fills no
    # more batches); stream-order layouts with a memory (Transformer-XL, XLNet, ELMo) read the first windows of
    # every sub-stream instead, in order. The run's log says which.
    eval_batches: int = 20
    # Save a checkpoint every N steps (0 saves only at the end).
    save_every: int = 100
    # Keep the newest N checkpoints (0 keeps all).
    keep_last: int = 2
    # none; auto (newest checkpoint in the run directory, or a fresh start); or a checkpoint/run directory path.
    # none in a run directory that holds checkpoints is refused: see trainer.overwrite.
    resume: str = "auto"
    # true: start afresh in a run directory that holds an earlier run's checkpoints, replacing that run: its
    # checkpoints/, metrics.jsonl, eval_results.json and tensorboard/ are deleted before step 1 (trainer.resume must
    # then be auto or none). false: such a directory is resumed (trainer.resume=auto) or refused (none).
    overwrite: bool = False
    # A resume compares the run's config with the checkpoint's config.yaml. Length, evaluation, logging and saving
    # cadence, evaluation data, data workers and cache, and hardware may change; a change to what is trained
    # (model, objective, training data, tokenizer, optimizer and schedule, seed, global batch) is refused naming the
    # keys (refuse), or applied from the resumed step on (accept). Another model family is always refused.
    resume_changes: ResumeChanges = ResumeChanges.refuse
    # Wall-clock budget of the training steps, in hours (null: none). The learning-rate schedule then runs over
    # the budget instead of max_steps (as cramming does), and the run saves and stops on the last step that fits
    # (or at max_steps, whichever comes first).
    time_budget: float | None = None
    # Batches of similar length: each shuffled epoch is cut into groups of 50 global batches, sorted by length
    # within a group, so that padding to the longest row costs little (plm-finetune's default).
    group_by_length: bool = False
    # plm-train: phases of one run in order, each {fraction: its share of trainer.max_steps, max_seq_len: its
    # sequence length, batch_size: its micro-batch (0: trainer.batch_size)}; BERT: 90% of the steps at 128, then
    # 512. A resumed run continues inside its phase where the run would have been. Empty: one phase at
    # data.max_seq_len and trainer.batch_size.
    phases: list[PhaseConfig] = field(default_factory=list)
    # Seeds weights, data order, masking and dropout.
    seed: int = 1234
    # Write TensorBoard scalars under <run dir>/tensorboard (false takes tensorboard out of trainer.loggers).
    tensorboard: bool = True
    # Where metrics go, any subset of: tensorboard (<run dir>/tensorboard), jsonl (<run dir>/metrics.jsonl), mlflow
    # (MLFLOW_TRACKING_URI: a sqlite:/// database, a file store or an http(s):// server; else ./mlflow.db; pip install
    # 'plm_toolkit[mlflow]'), wandb (Weights & Biases; WANDB_MODE=offline writes ./wandb only; pip install
    # 'plm_toolkit[wandb]'). Trackers get the resolved config, every metric (evaluations included) and the run
    # directory, from rank 0, on a thread of their own (one that fails mid-run is dropped with a warning); one that is
    # missing or does not start within seconds stops the command before any work
    # (docs/pretraining-and-data.md#experiment-trackers).
    loggers: list[str] = field(default_factory=lambda: ["tensorboard", "jsonl"])
    # Show a tqdm progress bar (rank 0 only, on a terminal). Every trainer.log_every steps the log (console and
    # <run dir>/train.log) gets a line with step, loss, lr, tokens/s and MFU either way.
    progress_bar: bool = True
    # Seconds a run that got SIGTERM, SIGINT, SIGHUP or SIGUSR1 waits for the step, compilation or evaluation in
    # progress before dropping it and saving the last completed step (SLURM kills 30 s after its SIGTERM). With no
    # step completed since the last checkpoint it stops at once. An optimizer update and a save are always finished.
    signal_grace: float = 15.0


@dataclass
class RecipeConfig:
    # The paper recipe the run follows, set by experiment=<name> (docs/recipes.md); null for none.
    name: str | None = None
    # Model families (model.name) the recipe is written for: a model of another family is refused before any work
    # (experiment=t5_base_paper model=bert_base). Empty: any.
    families: list[str] = field(default_factory=list)
    # A continued-pretraining recipe (experiment=dapt, experiment=tapt): model.checkpoint is required, and the
    # recipe's objective is trained over the checkpoint's own, as objective= on the command line would be.
    continues_checkpoint: bool = False
