"""Every config group option composes and validates; impossible settings stop with a message naming the key."""

import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

import plm_toolkit.commands.train  # noqa: F401  (registers schemas, registries and resolvers)
from plm_toolkit.config.finetune_checks import finetune_problems as problems_of
from plm_toolkit.config.resolve import model_class, objective_class
from plm_toolkit.config.train_checks import problems
from plm_toolkit.config.validate import validate
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.registry import OBJECTIVES

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
GROUPS = sorted(p.name for p in CONFIGS.iterdir() if p.is_dir() and p.name != "__pycache__")
# Presets that stand for the user's own data and so name a key the user must set.
NEEDS_USER_INPUT = {
    ("data", "text_files"): "data.train_files",
    ("data", "saved_dataset"): "data.dataset_path",
    ("experiment", "shakespeare_char_cpu"): "data.train_files",
}


# Groups that only plm-finetune composes; the rest are plm-train's.
FINETUNE_GROUPS = {"task"}


def composed(*overrides, config_name="train"):
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        return compose(config_name, overrides=list(overrides))


def serving_model(group: str, option: str) -> list[str]:
    """An objective that the default BERT cannot serve is composed with the tiny preset of the family it belongs to,
    else the first tiny preset that can serve it; sentence pairs (data=parallel) with the tiny Transformer."""
    if (group, option) == ("data", "parallel"):
        return ["model=transformer_tiny", "data=parallel"]
    if group != "objective":
        return []
    needed = objective_class(composed(f"objective={option}").objective.name).required_capabilities
    presets = sorted((CONFIGS / "model").glob("*_tiny.yaml"))
    # The family whose paper objective this is first (with the data its preset picks), else any that can serve it.
    for preset in presets:
        if composed(f"model={preset.stem}").objective.name == option:
            return [f"model={preset.stem}"]
    for preset in presets:
        if needed <= model_class(composed(f"model={preset.stem}").model.name).capabilities:
            return [f"model={preset.stem}", f"objective={option}"]
    return []


@pytest.mark.parametrize(
    "group,option",
    [(g, p.stem) for g in GROUPS for p in sorted((CONFIGS / g).glob("*.yaml"))],
)
def test_every_option_composes_and_validates(group, option, tmp_path):
    if group in FINETUNE_GROUPS:  # a task needs the user's checkpoint and data: give stand-ins
        (tmp_path / "train").write_text("")
        for lang in ("en", "de"):  # task=translation reads a prefix of two language files
            (tmp_path / f"train.{lang}").write_text("")
        user = [f"model.checkpoint={tmp_path}", f"data.train_file={tmp_path / 'train'}"]
        if option == "kbqa":  # a knowledge base too
            user += [f"task.kb_triples={tmp_path / 'train'}", f"task.kb_names={tmp_path / 'train'}"]
        cfg = composed(f"{group}={option}", *user, config_name="finetune")
        OmegaConf.to_container(cfg, resolve=True)
        assert problems_of(cfg) == []
        return
    cfg = composed(f"{group}={option}", *serving_model(group, option))
    OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves
    # Parallel data (chosen by the Transformer's presets too) names no corpus of its own.
    needs = NEEDS_USER_INPUT.get((group, option)) or ("data.train_files" if cfg.data.name == "parallel" else None)
    if needs is None:
        assert problems(cfg) == []
    else:  # a preset for the user's own data: refused until the key that names the data is given
        assert len(problems(cfg)) == 1 and needs in problems(cfg)[0], problems(cfg)


def test_defaults_are_the_tiny_bert_demo():
    cfg = composed()
    assert cfg.model.name == "bert" and cfg.model.hidden_size == 128 and cfg.model.num_layers == 2
    assert cfg.objective.name == "mlm_nsp"
    assert Path(cfg.data.train_files[0]).is_file()
    assert cfg.optimizer.d_model == cfg.model.hidden_size


def test_model_preset_picks_its_paper_objective_and_the_command_line_wins():
    assert composed("model=bert_base").objective.name == "mlm_nsp"
    assert composed("model=bert_base", "objective=mlm").objective.name == "mlm"


def test_issue_example_overrides():
    cfg = composed("model=bert_base", "objective=mlm", "optimizer.lr=1e-4", "trainer.grad_accum_steps=8")
    assert cfg.model.hidden_size == 768 and cfg.optimizer.lr == 1e-4 and cfg.trainer.grad_accum_steps == 8


@pytest.mark.parametrize(
    "override,expected",
    [
        ("trainer.max_step=10", "Key 'max_step' not in 'TrainerConfig'"),
        ("model.hiden_size=10", "Key 'hiden_size' not in 'BertConfig'"),
        ("trainer.batch_size=many", "Value 'many' of type 'str' could not be converted to Integer"),
        ("hardware.precision=fp8", "Invalid value 'fp8', expected one of \\[auto, fp32, bf16, fp16\\]"),
        ("model=bert_huge", "Could not find 'model/bert_huge'"),
    ],
)
def test_typos_and_wrong_types_are_refused_with_the_key(override, expected):
    with pytest.raises(ConfigCompositionException) as err:
        composed(override)
    message = str(err.value) + str(err.value.__cause__)
    assert pytest.importorskip("re").search(expected, message), message


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(ConfigCompositionException) as err:
        composed("objective=mlmm")
    message = str(err.value) + str(err.value.__cause__)
    assert "mlm_nsp" in message and "nsp" in message


@pytest.mark.parametrize(
    "overrides,expected",
    [
        (["data.max_seq_len=1024"], "data.max_seq_len=1024 exceeds model.max_position_embeddings=512"),
        (["model.num_heads=3"], "model.hidden_size=128 is not divisible by model.num_heads=3"),
        (["data.train_files=[/no/such/file.txt]"], "data.train_files: /no/such/file.txt is not a file"),
        (["data.packing=full_sentences"], "data.packing=full_sentences: objective=mlm_nsp needs sentence pairs"),
        (["optimizer=adam_noam", "optimizer.warmup_steps=0"], "optimizer.schedule=noam needs optimizer.warmup_steps"),
        (["trainer.grad_accum_steps=0"], "trainer.grad_accum_steps=0: must be at least 1"),
        (["optimizer.betas=[0.9,1.5]"], "optimizer.betas=\\[0.9, 1.5\\]"),
    ],
)
def test_impossible_combinations_name_the_keys(overrides, expected):
    with pytest.raises(ConfigError, match=expected):
        validate(composed(*overrides))


def test_objective_the_model_cannot_serve_is_refused(monkeypatch):
    from plm_toolkit.config.resolve import objective_class

    nsp = objective_class("nsp")
    monkeypatch.setattr(nsp, "required_capabilities", nsp.required_capabilities | {"two_stream"})
    with pytest.raises(ConfigError, match="objective=nsp needs a model that is .*two_stream.*model=bert is not"):
        validate(composed("objective=nsp"))


def test_registries_list_valid_names_for_unknown_ones():
    with pytest.raises(KeyError, match="unknown objective 'no_such'; valid objectives: .*mlm, mlm_nsp, .*nsp, .*rtd"):
        OBJECTIVES.get("no_such")


@pytest.mark.parametrize(
    "overrides,expected",
    [
        (["objective.mask_prob=1.5"], "objective.mask_prob must lie in \\[0, 1\\], got 1.5"),
        (["objective.mask_token_prob=0.9", "objective.random_token_prob=0.2"], "must be at most 1"),
        (["objective.nsp_weight=-1"], "objective.nsp_weight must be at least 0"),
    ],
)
def test_objective_settings_are_checked_before_any_work(overrides, expected):
    with pytest.raises(ConfigError, match=expected):
        validate(composed(*overrides))


def test_help_lists_only_the_commands_own_groups():
    """plm-train --help once listed plm-finetune's `task` group and the internal `schema/*` groups."""
    out = subprocess.run(
        [sys.executable, "-m", "plm_toolkit.commands.train", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    groups = out.split("== Config groups (group=option) ==")[1].split("== Config")[0]
    assert [line.split(":")[0] for line in groups.split("\n") if line] == [
        "model", "objective", "data", "optimizer", "hardware", "experiment",
    ]  # fmt: skip
    assert "bert_base" in groups and "task" not in out.split("== Config (")[0] and "schema" not in out


@pytest.mark.parametrize("module,key", [("generate", "max_new_tokens"), ("embed", "input_file")])
def test_generate_and_embed_help_show_their_own_keys_and_no_groups(module, key):
    """They take no config groups; Hydra's default help listed every group of plm-train and plm-finetune."""
    command = [sys.executable, "-m", f"plm_toolkit.commands.{module}", "--help"]
    out = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.startswith(f"plm-{module}: ") and f"\n{key}: " in out and "model: albert" not in out


def test_hydra_help_still_lists_hydras_groups():
    """Group listings are built only where a help template shows them (config/help.py); Hydra's own help shows
    its launcher group."""
    command = [sys.executable, "-m", "plm_toolkit.commands.train", "--hydra-help"]
    out = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True).stdout
    assert "hydra/launcher: " in out and "basic" in out


def test_a_reader_that_stops_early_gets_no_error_line():
    """plm-train --help | head -1 once printed a run-directory error about the broken pipe. The reader here closes
    the pipe before the help is written, so the write fails."""
    process = subprocess.Popen(
        [sys.executable, "-m", "plm_toolkit.commands.train", "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    process.stdout.close()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 1 and stderr == ""


@pytest.mark.parametrize(
    "overrides,expected",
    [
        (["+trainer.max_step=5"], "trainer.max_step: unknown key; did you mean trainer.max_steps?"),
        (["+model.hiden_size=5"], "model.hiden_size: unknown key; did you mean model.hidden_size?"),
        (["+optimizer.zzz=1"], "optimizer.zzz: unknown key (valid keys: name, lr,"),
        (["optimizer.lr=nan"], "optimizer.lr=nan: expected a finite number in (0, inf)"),
        (["optimizer.lr=-inf"], "optimizer.lr=-inf: expected a finite number in (0, inf)"),
        (["optimizer.eps=0"], "optimizer.eps=0.0: expected a finite number in (0, inf)"),
        (["optimizer.weight_decay=-0.1"], "optimizer.weight_decay=-0.1: expected a finite number in [0, inf)"),
        (["optimizer.betas=[0.9,nan]"], "optimizer.betas=[0.9, nan]: expected two values in [0, 1)"),
        (["optimizer.min_lr_ratio=1.5"], "optimizer.min_lr_ratio=1.5: expected a finite number in [0, 1]"),
        (["optimizer.total_steps=0"], "optimizer.total_steps=0: must be at least 1"),
        (["optimizer.warmup_steps=-3"], "optimizer.warmup_steps=-3: must be 0"),
        (["trainer.clip_grad_norm=inf"], "trainer.clip_grad_norm=inf: expected a finite number in [0, inf)"),
        (["trainer.epochs=2"], "trainer.max_steps=300 and trainer.epochs=2.0: give exactly one length"),
        (["trainer.max_steps=null"], "trainer.max_steps=None and trainer.epochs=None: give exactly one length"),
        (["trainer.max_steps=null", "trainer.epochs=-1"], "trainer.epochs=-1.0: expected a finite number in (0, inf)"),
        (["trainer.max_steps=0"], "trainer.max_steps=0: must be at least 1 (or null with trainer.epochs)"),
        (["trainer.max_steps=null", "trainer.epochs=0"], "trainer.epochs=0.0: expected a finite number in (0, inf)"),
        (["hardware.min_loss_scale=nan"], "hardware.min_loss_scale=nan: expected a finite number in (0, inf)"),
    ],
)
def test_unknown_keys_and_numbers_out_of_range_are_refused(overrides, expected):
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    with pytest.raises(ConfigError) as caught:
        validate(cfg)
    assert expected in str(caught.value) and "\n" not in str(caught.value)


def test_finetune_evaluates_only_with_zero_epochs_or_steps_and_then_needs_no_training_file(tmp_path):
    """plm-train refuses a length of 0 (above); plm-finetune takes it as an evaluation of the starting weights."""
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\na\t1\n")
    given = [f"model.checkpoint={tmp_path}", f"data.validation_file={tmp_path / 'dev.tsv'}"]
    for length in (["trainer.epochs=0"], ["trainer.epochs=null", "trainer.max_steps=0"]):
        assert problems_of(composed(*given, *length, config_name="finetune")) == []
    assert problems_of(composed(f"model.checkpoint={tmp_path}", "trainer.epochs=0", config_name="finetune")) == [
        "trainer.epochs=0 evaluates without training: give data.validation_file"
    ]
    assert problems_of(composed(*given, config_name="finetune")) == [
        "data.train_file is not set: give the task's training file (or evaluate only: trainer.epochs=0)"
    ]
