"""Typed schemas of the commands: each one's top-level keys (``configs/<command>.yaml`` extends ``<command>_schema``)
and the groups that only plm-finetune, plm-glue, plm-generate or plm-embed has. The groups every training command
shares are ``schema.py``'s and ``data_schema.py``'s; a model's, an objective's and a task's live beside their code.
``register_schemas`` stores them all in Hydra's ConfigStore.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from plm_toolkit.core.choices import choices
from plm_toolkit.core.data_schema import DataConfig, ParallelDataConfig
from plm_toolkit.core.schema import Device, HardwareConfig, OptimizerConfig, RecipeConfig, TrainerConfig

FinetuneMode = choices("FinetuneMode", "full", "features")
EmbedLayers = choices("EmbedLayers", "all", "top", "average")
KeepCheckpoints = choices("KeepCheckpoints", "best", "all", "none")


# --- plm-train ---------------------------------------------------------------------------------------------


@dataclass
class TrainConfig:
    model: Any = MISSING
    objective: Any = MISSING
    data: DataConfig = MISSING
    optimizer: OptimizerConfig = MISSING
    hardware: HardwareConfig = MISSING
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    recipe: RecipeConfig = field(default_factory=RecipeConfig)


# --- plm-finetune ------------------------------------------------------------------------------------------


@dataclass
class BackboneSourceConfig:
    # The pretrained backbone: a plm-train checkpoint (checkpoints/step_N, checkpoints/last or a run directory)
    # or a local Hugging Face folder (config.json, weights, tokenizer); a fine-tuned one's task head (a Hugging Face
    # folder's, or a plm-finetune run's whole task module) starts the task's where it computes the same thing
    # (docs/fine-tuning.md).
    checkpoint: str = MISSING
    # Dropout of the backbone while fine-tuning (every dropout module); null keeps the checkpoint's.
    dropout: float | None = None


@dataclass
class TaskDataConfig:
    # Training file in the task's official format (SQuAD JSON, GLUE TSV, CoNLL columns, ...; a classification or
    # seq2seq table may also be CSV, JSONL or Parquet); not needed to evaluate only (trainer.epochs=0).
    train_file: str | None = None
    # Evaluation file in the same format; null trains without evaluating.
    validation_file: str | None = None
    # Tokens per sequence, special tokens included (SQuAD: 384 in the BERT paper).
    max_seq_len: int = 128
    # Use only the first N training examples (rows, questions or sentences); null uses all.
    max_train_samples: int | None = None
    # Use only the first N evaluation examples; null uses all.
    max_eval_samples: int | None = None
    # Data-loader worker processes (0 loads in the training process).
    num_workers: int = 0


@dataclass
class FinetuneModeConfig:
    # full: train the whole backbone with the task's head (BERT's fine-tuning); features: freeze the backbone and
    # train a scalar mix of its layers, a biLSTM task encoder and the head (ELMo's use, BERT section 5.3).
    mode: FinetuneMode = FinetuneMode.full
    # features only: width of each direction of the task biLSTM (BERT section 5.3: 768, two layers).
    encoder_hidden_size: int = 256
    # features only: layers of the task biLSTM.
    encoder_layers: int = 2
    # features only: dropout on the mixed features and between the biLSTM's layers (allennlp's ELMo: 0.5).
    dropout: float = 0.5


@dataclass
class FinetuneConfig:
    model: BackboneSourceConfig = field(default_factory=BackboneSourceConfig)
    task: Any = MISSING
    # How much of the model trains: all of it, or a task encoder over the frozen backbone's layers.
    finetune: FinetuneModeConfig = field(default_factory=FinetuneModeConfig)
    data: TaskDataConfig = field(default_factory=TaskDataConfig)
    optimizer: OptimizerConfig = MISSING
    hardware: HardwareConfig = MISSING
    trainer: TrainerConfig = field(default_factory=TrainerConfig)


# --- plm-glue ----------------------------------------------------------------------------------------------


@dataclass
class GlueDataConfig(TaskDataConfig):
    # The GLUE folder in the layout of GLUE's download script: <glue_dir>/SST-2/{train,dev,test}.tsv, RTE/...,
    # MNLI/{train,dev_matched,dev_mismatched,test_matched,test_mismatched}.tsv, diagnostic/diagnostic.tsv (AX).
    # data.train_file and data.validation_file stay null: each sub-run gets its task's files from here.
    glue_dir: str = MISSING


@dataclass
class GlueSuiteConfig:
    # Tasks to run, by preset name (cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli); empty: every GLUE task
    # whose train.tsv is in data.glue_dir.
    tasks: list[str] = field(default_factory=list)
    # Peak learning rates tried on every task; the best run on dev is reported (BERT, Devlin et al. 2019 section 4.1:
    # 5e-5, 4e-5, 3e-5 and 2e-5).
    learning_rates: list[float] = field(default_factory=lambda: [5e-5, 4e-5, 3e-5, 2e-5])
    # Seeds (trainer.seed) of the tasks not in glue.small_tasks: one sub-run per learning rate and seed.
    seeds: list[int] = field(default_factory=lambda: [1234])
    # Tasks fine-tuned with several random restarts, the best on dev kept (BERT section 4.1: fine-tuning "was
    # sometimes unstable on small datasets, so we ran several random restarts"): those under 10k training examples.
    small_tasks: list[str] = field(default_factory=lambda: ["cola", "mrpc", "stsb", "rte", "wnli"])
    # Seeds of the tasks in glue.small_tasks.
    small_tasks_seeds: list[int] = field(default_factory=lambda: [1234, 1235, 1236, 1237, 1238])
    # Per task, plm-finetune keys for its sub-runs, set over the shared ones: +glue.task_overrides.<task>.<key>=VALUE,
    # e.g. +glue.task_overrides.sst2.data.max_train_samples=8000 (the grid's keys stay the suite's).
    task_overrides: dict[str, Any] = field(default_factory=dict)
    # Sub-runs at a time, each in a process of its own on a GPU of its own: null takes one per visible GPU; 1 runs
    # them one after another in this process (as on a CPU or a single GPU).
    max_parallel: int | None = None
    # Predict every test file of data.glue_dir with each sub-run and write the selected ones as a submission folder
    # in the GLUE server's format (<run dir>/submission).
    predict_test: bool = True
    # Checkpoints kept once a task's sub-runs finish: best (the selected sub-run's), all, or none.
    keep_checkpoints: KeepCheckpoints = KeepCheckpoints.best


@dataclass
class GlueConfig:
    model: BackboneSourceConfig = field(default_factory=BackboneSourceConfig)
    finetune: FinetuneModeConfig = field(default_factory=FinetuneModeConfig)
    data: GlueDataConfig = field(default_factory=GlueDataConfig)
    optimizer: OptimizerConfig = MISSING
    hardware: HardwareConfig = MISSING
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    glue: GlueSuiteConfig = field(default_factory=GlueSuiteConfig)


# --- plm-generate ------------------------------------------------------------------------------------------


@dataclass
class DecodingOptions:
    # Tokens to generate after each prompt, at most (fewer where a row produces the end-of-text token).
    max_new_tokens: int = 32
    # Makes the limit relative to each row's input: max_new_tokens + max_length_a x the row's input length
    # (fairseq's max_len_a x source length + max_len_b; the Transformer decodes up to the source length + 50).
    max_length_a: float = 0.0
    # Sample the next token; false takes the most likely one (greedy search, or beam search with num_beams > 1).
    do_sample: bool = False
    # Divide the logits by this before sampling (below 1 sharper, above 1 flatter); must be positive.
    temperature: float = 1.0
    # Sample among the k most likely tokens only; 0 keeps all.
    top_k: int = 0
    # Sample from the smallest set of tokens whose probabilities reach top_p (nucleus sampling); in (0, 1].
    top_p: float = 1.0
    # Beams of beam search (1: greedy search or sampling).
    num_beams: int = 1
    # Beam search's GNMT length penalty alpha (Wu et al. 2016, eq. 14): hypotheses are ranked by
    # log p / ((5 + length) / 6)^alpha; 0 ranks by log p alone.
    length_penalty: float = 0.0


@dataclass
class GenerateConfig(DecodingOptions):
    # A plm-train checkpoint (checkpoints/step_N, checkpoints/last or a run directory) or a local Hugging Face
    # folder (config.json, weights, tokenizer) of a causal family.
    checkpoint: str = MISSING
    # The text to continue; or prompts_file.
    prompt: str | None = None
    # A UTF-8 file with one prompt per line (a line ends at \n; blank lines are skipped); or prompt.
    prompts_file: str | None = None
    # Seeds sampling: the same seed and settings give the same texts.
    seed: int = 0
    # Stop a continuation at the end-of-text token (kept in token_ids, not in text).
    stop_at_eos: bool = True
    # Prompts decoded together (left-padded; families without padding support batch prompts of equal length).
    batch_size: int = 8
    # Write JSONL rows (prompt, prompt_ids, text, token_ids) here instead of printing the texts.
    output_file: str | None = None
    # A causal model with a position table (GPT, GPT-2) whose prompt and new tokens outgrow it keeps generating,
    # each new token seeing the last max_position_embeddings tokens (as nanoGPT's generate crops its context);
    # false refuses such a prompt instead.
    slide_context: bool = True
    # Where to run: auto picks cuda when a GPU is visible.
    device: Device = Device.auto


# --- plm-embed ---------------------------------------------------------------------------------------------


@dataclass
class EmbedConfig:
    # The model: a plm-train checkpoint or run directory, a local Hugging Face folder, or a bilm-tf folder
    # (*options.json + *weights*.hdf5, a released ELMo).
    checkpoint: str = MISSING
    # UTF-8 text, one whitespace-tokenized sentence per line (no blank lines).
    input_file: str = MISSING
    # Where to write: .hdf5 / .h5 (allennlp's elmo layout, written as it goes) or .safetensors (held in memory).
    output_file: str = MISSING
    # all: every layer, (layers, words, dim) per line; top: the last layer, (words, dim); average: their mean.
    layers: EmbedLayers = EmbedLayers.all
    # Sentences per forward pass (ELMo carries its LSTM states from one batch to the next, as the original does).
    batch_size: int = 64
    # Where to run: auto picks cuda when a GPU is visible, else cpu.
    device: Device = Device.auto
    # Show a tqdm progress bar over the lines.
    progress_bar: bool = True


def register_schemas() -> None:
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    cs.store(name="finetune_schema", node=FinetuneConfig)
    cs.store(name="embed_schema", node=EmbedConfig)
    cs.store(name="glue_schema", node=GlueConfig)
    cs.store(name="generate_schema", node=GenerateConfig)
    cs.store(group="schema/data", name="data", node=DataConfig)
    cs.store(group="schema/data", name="parallel", node=ParallelDataConfig)
    cs.store(group="schema/optimizer", name="optimizer", node=OptimizerConfig)
    cs.store(group="schema/hardware", name="hardware", node=HardwareConfig)
