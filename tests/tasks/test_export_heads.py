"""plm-export of a plm-finetune checkpoint: the transformers task class that holds its head
(``...ForSequenceClassification``, ``...ForTokenClassification``, ``...ForQuestionAnswering``), which
``AutoModelFor...`` loads whole and which scores as the fine-tuned model does, with the task's label names; the
folder imports back to the same head. A head no transformers class computes is refused in one line, and
``--backbone-only`` still writes the bare backbone."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer

from plm_toolkit.commands.export import main
from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core import registry
from plm_toolkit.core.command_schema import FinetuneMode, FinetuneModeConfig
from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer
from plm_toolkit.interop.pretrained import load_backbone
from plm_toolkit.tasks.base import TaskData
from plm_toolkit.tasks.checkpoint_head import start_from_checkpoint_head
from plm_toolkit.tasks.classification import ClassificationConfig, SequenceClassification
from plm_toolkit.tasks.ner import NerConfig, TokenClassification
from plm_toolkit.tasks.squad.data import SquadConfig
from plm_toolkit.tasks.squad.task import QuestionAnswering
from tests.conftest import save_finetuned
from tests.tasks.test_checkpoint_heads import TOLERANCE, batch, max_diff

transformers = pytest.importorskip("transformers")

ODD = dict(hidden_size=36, num_layers=2, num_heads=3, intermediate_size=37, max_position_embeddings=40)
# family -> (our registry name, config fields)
FAMILIES = {
    "bert": ("bert", ODD),
    "roberta": ("bert", dict(ODD, max_position_embeddings=42, type_vocab_size=1, position_offset=2, pad_token_id=1)),
    "albert": ("albert", dict(ODD, embedding_size=17)),
    "electra": ("electra", dict(ODD, embedding_size=17)),
    "ernie": ("ernie", ODD),
    "xlnet": ("xlnet", dict(ODD, head_size=12)),
    "gpt2": ("gpt2", ODD),
    "openai-gpt": ("gpt", dict(ODD, intermediate_size=144)),  # transformers' OpenAIGPT: 4 x hidden
}
# Families whose transformers sequence classifier has no bias: their runs train theirs with task.head_bias=false.
NO_BIAS = ("gpt2", "openai-gpt")
AUTO = {"sequence": "ForSequenceClassification", "token": "ForTokenClassification", "span": "ForQuestionAnswering"}
RTE = ["entailment", "not_entailment"]
WNUT17 = ["O", "B-corporation", "I-corporation", "B-creative-work", "I-creative-work", "B-person", "I-person"]
# (family, head kind, activation of the head's own dense layer): every head a transformers class holds.
EXPORTABLE = [(family, kind, None) for family in sorted(set(FAMILIES) - {"openai-gpt"}) for kind in ("token", "span")]
EXPORTABLE += [(family, "sequence", None) for family in ("albert", "bert", "ernie", "gpt2", "openai-gpt", "roberta")]
EXPORTABLE += [("xlnet", "sequence", None)]
EXPORTABLE += [("electra", "sequence", "gelu"), ("xlnet", "sequence", "tanh"), ("xlnet", "sequence", "gelu")]


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint) -> Tokenizer:
    return Tokenizer.from_file(str(tiny_checkpoint / "tokenizer.json"))


def make_task(kind: str, model, tokenizer: Tokenizer, regression=False, finetune=None, head_activation=None, bias=None):
    vocab = vocab_from_tokenizer(tokenizer)
    if kind == "sequence":
        labels = [] if regression else RTE
        name = "stsb" if regression else "rte"
        config = ClassificationConfig(name, labels=labels, regression=regression, head_activation=head_activation)
        config.head_bias = bias
        return SequenceClassification(config, model, vocab, TaskData([], None, labels=labels), finetune=finetune)
    if kind == "token":
        return TokenClassification(NerConfig(labels=WNUT17), model, vocab, TaskData([], None, labels=WNUT17))
    return QuestionAnswering(SquadConfig(), model, vocab, TaskData([], None))


def fine_tuned(root: Path, tokenizer: Tokenizer, family: str, kind: str, activation=None, **options):
    """A random tiny ``family`` backbone and a ``kind`` task head (with its own dense layer and ``activation``),
    saved as plm-finetune saves them; returns (checkpoint, model, task), both in evaluation mode."""
    name, fields = FAMILIES[family]
    entry = registry.MODELS.get(name)
    known = {f.name for f in dataclasses.fields(entry.config_cls)}
    config = entry.config_cls(vocab_size=tokenizer.get_vocab_size(), **{k: v for k, v in fields.items() if k in known})
    torch.manual_seed(0)
    model = entry.builder(config)
    task = make_task(kind, model, tokenizer, **options)
    if activation is not None:
        task.head.add_dense(activation)
    with torch.no_grad():  # off the init's zero biases and unit norms, so that no mapping error hides
        for parameter in [*model.parameters(), *task.parameters()]:
            parameter.add_(torch.randn_like(parameter) * 0.05)
    return save_finetuned(root, model, task, tokenizer), model.eval(), task.eval()


def scores(task, model, inputs) -> list[torch.Tensor]:
    if task.head_kind == "span":
        return list(task.scores(model, inputs))
    return [task.logits(model, inputs)]


@pytest.mark.parametrize(("family", "kind", "activation"), EXPORTABLE)
def test_export_loads_whole_in_transformers_and_scores_as_the_task(tmp_path, tokenizer, family, kind, activation):
    no_bias = kind == "sequence" and family in NO_BIAS
    _, model, task = fine_tuned(tmp_path / "run", tokenizer, family, kind, activation, bias=False if no_bias else None)
    assert no_bias == (task.head.linear.bias is None)
    out = tmp_path / "hf"
    assert main([str(tmp_path / "run"), str(out)]) == 0
    theirs, info = getattr(transformers, "AutoModel" + AUTO[kind]).from_pretrained(out, output_loading_info=True)
    assert {key: value for key, value in info.items() if value} == {}  # no missing, unexpected or mismatched key
    inputs = batch(family)
    mask = None if kind == "sequence" else inputs["attention_mask"]
    with torch.no_grad():
        output = theirs.eval()(**inputs)
        expected = [output.start_logits, output.end_logits] if kind == "span" else [output.logits]
        ours = scores(task, model, inputs)
        assert max(max_diff(a, b, mask) for a, b in zip(ours, expected, strict=True)) <= TOLERANCE
    labels = {"sequence": RTE, "token": WNUT17, "span": None}[kind]
    assert (theirs.config.id2label if labels else None) == (dict(enumerate(labels)) if labels else None)

    loaded = load_backbone(out, with_task_head=True)  # and back: plm-finetune model.checkpoint=<export>
    assert loaded.task_head.labels == labels
    again = make_task(kind, loaded.model, tokenizer)
    assert start_from_checkpoint_head(again, loaded.model, loaded.task_head, loaded.initialized_keys)
    with torch.no_grad():
        back = scores(again.eval(), loaded.model.eval(), inputs)
    assert max(max_diff(a, b, mask) for a, b in zip(back, ours, strict=True)) <= TOLERANCE


def test_a_regression_exports_one_output_with_its_problem_type(tmp_path, tokenizer):
    _, model, task = fine_tuned(tmp_path / "run", tokenizer, "bert", "sequence", regression=True)
    assert main([str(tmp_path / "run"), str(tmp_path / "hf")]) == 0
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (config["architectures"], config["problem_type"]) == (["BertForSequenceClassification"], "regression")
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf").eval()
    assert theirs.num_labels == 1
    inputs = batch("bert")
    with torch.no_grad():
        assert max_diff(task.logits(model, inputs), theirs(**inputs).logits) <= TOLERANCE


@pytest.mark.parametrize(
    ("family", "theirs"),
    [
        ("electra", "ElectraForSequenceClassification is a sequence classifier with its own dense layer and gelu "
         "over the first token's state (plm-finetune task.head_activation=gelu trains that head)"),
        ("gpt2", "GPT2ForSequenceClassification is a sequence classifier without a bias over the last token's state "
         "(plm-finetune task.head_bias=false trains that head)"),
    ],
)  # fmt: skip
def test_a_head_no_transformers_class_computes_is_refused_in_one_line(tmp_path, tokenizer, capsys, family, theirs):
    step, model, _ = fine_tuned(tmp_path / "run", tokenizer, family, "sequence")
    assert main([str(tmp_path / "run"), str(tmp_path / "hf")]) == 1
    summary = "last" if family == "gpt2" else "first"
    assert capsys.readouterr().err.splitlines() == [
        f"error: {step / ckpt.OBJECTIVE_FILE}: task=rte's head is a sequence classifier over the {summary} token's "
        f"state, which no transformers {family} class computes; {theirs} (--backbone-only exports the model without "
        "the task's head)"
    ]
    assert not (tmp_path / "hf").exists()
    assert main([str(tmp_path / "run"), str(tmp_path / "hf"), "--backbone-only"]) == 0
    backbone = transformers.AutoModel.from_pretrained(tmp_path / "hf").eval()
    assert type(backbone).__name__ == {"electra": "ElectraModel", "gpt2": "GPT2Model"}[family]
    ids = torch.randint(5, 99, (2, 9))
    with torch.no_grad():
        assert max_diff(backbone(input_ids=ids).last_hidden_state, model(ids).hidden) <= TOLERANCE


def test_a_head_over_a_task_encoder_is_refused(tmp_path, tokenizer, capsys):
    features = FinetuneModeConfig(mode=FinetuneMode.features, encoder_hidden_size=5, encoder_layers=1)
    step, _, _ = fine_tuned(tmp_path / "run", tokenizer, "bert", "sequence", finetune=features)
    assert main([str(tmp_path / "run"), str(tmp_path / "hf")]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {step / ckpt.OBJECTIVE_FILE}: task=rte's head reads a task encoder (features.")
    assert line.endswith("the scalar mix and biLSTM of finetune.mode=features), which no transformers class has "
                         "(--backbone-only exports the model without the task's head)")  # fmt: skip


def test_a_dense_layer_whose_activation_is_not_recorded_is_refused(tmp_path, tokenizer):
    from plm_toolkit.commands.export import export_checkpoint
    from plm_toolkit.core.errors import CheckpointError

    step, _, _ = fine_tuned(tmp_path / "run", tokenizer, "electra", "sequence", "gelu")
    config = step / ckpt.CONFIG_FILE
    config.write_text(config.read_text().replace("activation: gelu", "activation: null"))
    with pytest.raises(CheckpointError, match=r"task_head.activation=None does not fit .* which has a dense layer of "):
        export_checkpoint(tmp_path / "run", tmp_path / "hf")


@pytest.mark.slow
def test_a_fine_tuned_tagger_exports_through_the_command_line_and_evaluates_the_same(finetune_config, tmp_path):
    """plm-finetune task=ner, plm-export, plm-finetune trainer.epochs=0 model.checkpoint=<export>: the same tags."""
    from plm_toolkit.commands.finetune import run
    from tests.commands.test_finetune import FAST

    tagged = ["Apple B-corporation", "Inc I-corporation", "hired O", "Mary B-person", "Smith I-person", "for O",
              "Star B-creative-work", "Wars I-creative-work"]  # fmt: skip
    plain = [f"{word} O" for word in ("the", "film", "is", "a", "mess", "of", "love", "and", "loss")]
    conll = "\n".join(tagged) + "\n\n" + "\n".join(plain) + "\n"
    (tmp_path / "train.conll").write_text(conll * 4)
    (tmp_path / "dev.conll").write_text(conll)
    dev = f"data.validation_file={tmp_path / 'dev.conll'}"
    train = [f"data.train_file={tmp_path / 'train.conll'}", "trainer.max_steps=12", "trainer.batch_size=8"]
    run(finetune_config("task=ner", *FAST, *train, dev), tmp_path / "run")

    plm_export = Path(sys.executable).with_name("plm-export")  # the console script, as a user runs it
    done = subprocess.run([plm_export, tmp_path / "run", tmp_path / "hf"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == ["BertForTokenClassification"]
    assert config["id2label"] == {str(i): tag for i, tag in enumerate(WNUT17)}

    run(finetune_config("task=ner", f"model.checkpoint={tmp_path / 'hf'}", dev, "trainer.epochs=0"), tmp_path / "eval")
    expected = json.loads((tmp_path / "run" / "predictions.json").read_text())
    assert json.loads((tmp_path / "eval" / "predictions.json").read_text()) == expected
    assert len({tag for line in expected for tag in line.split()}) > 1  # not a tagger that says O everywhere


def test_task_head_activation_builds_the_dense_head_that_electra_exports_with(tmp_path, tokenizer, caplog):
    """task.head_activation=gelu: ELECTRA's sequence head as transformers has it, so the run exports; the head's own
    dense layer starts as the task's linear layers do, and a checkpoint head of another activation is not taken."""
    _, model, task = fine_tuned(tmp_path / "run", tokenizer, "electra", "sequence", head_activation="gelu")
    assert task.head.activation_name == "gelu" and isinstance(task.head.activation, torch.nn.GELU)
    fresh = make_task("sequence", model, tokenizer, head_activation="gelu").head.dense
    assert fresh.bias.abs().max() == 0 and abs(fresh.weight.std().item() - 0.02) < 0.004  # initializer_range
    assert main([str(tmp_path / "run"), str(tmp_path / "hf")]) == 0
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf").eval()
    assert type(theirs).__name__ == "ElectraForSequenceClassification"
    inputs = batch("electra")
    with torch.no_grad():
        assert max_diff(task.logits(model, inputs), theirs(**inputs).logits, None) <= TOLERANCE

    loaded = load_backbone(tmp_path / "hf", with_task_head=True)
    same = make_task("sequence", loaded.model, tokenizer, head_activation="gelu")
    assert start_from_checkpoint_head(same, loaded.model, loaded.task_head, loaded.initialized_keys)
    other = make_task("sequence", loaded.model, tokenizer, head_activation="tanh")
    assert not start_from_checkpoint_head(other, loaded.model, loaded.task_head, loaded.initialized_keys)
    assert "task.head_activation=tanh asks for one with tanh" in caplog.text


def test_a_gpt2_run_padded_with_end_of_text_exports_a_pad_id_that_finds_the_same_last_token(tmp_path):
    """GPT-2's byte-level BPE has no pad token: plm-finetune pads with <|endoftext|>, which also ends every text and
    is what the head reads. transformers' classifier reads the last token that is not pad_token_id, so the export
    names another id there, which its tokenizer pads with; inputs padded with it score as the run's padded batch
    does."""
    from tokenizers import models, pre_tokenizers, trainers

    from plm_toolkit.data.tokenization.pipelines import END_OF_TEXT, _add_gpt2_specials, byte_level_tokenizer
    from tests.conftest import tokenizer_texts

    gpt2_bpe = byte_level_tokenizer(models.BPE())
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=[END_OF_TEXT], initial_alphabet=alphabet)
    gpt2_bpe.train_from_iterator(tokenizer_texts()[:300], trainer=trainer)
    _add_gpt2_specials(gpt2_bpe)
    _, model, task = fine_tuned(tmp_path / "run", gpt2_bpe, "gpt2", "sequence", bias=False)
    assert main([str(tmp_path / "run"), str(tmp_path / "hf")]) == 0
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf").eval()
    end = gpt2_bpe.token_to_id(END_OF_TEXT)
    pad = theirs.config.pad_token_id

    # transformers makes the pad token special and finds it in raw text: a piece no text spells, not "!" (id 1).
    def unlikely(piece: str) -> tuple[int, int]:  # characters for unprintable bytes ("Ġ" a space), then length
        return sum(0x100 <= ord(c) < 0x144 for c in piece), len(piece)

    assert pad != end and unlikely(gpt2_bpe.id_to_token(pad)) == max(map(unlikely, gpt2_bpe.get_vocab())) > (1, 1)
    assert transformers.AutoTokenizer.from_pretrained(tmp_path / "hf").pad_token_id == pad
    texts = ["a gripping , funny film", "dull", "it is neither good nor bad , just long"]
    rows = [{"input_ids": e.ids, "token_type_ids": e.type_ids} for e in gpt2_bpe.encode_batch(texts)]
    ours = task.collator()(rows)  # padded with <|endoftext|>
    assert (ours["input_ids"][ours["attention_mask"] == 0] == end).all() and (ours["attention_mask"] == 0).any()
    padded = ours["input_ids"].masked_fill(ours["attention_mask"] == 0, theirs.config.pad_token_id)
    with torch.no_grad():
        logits = task.logits(model, ours)
        assert max_diff(theirs(input_ids=padded, attention_mask=ours["attention_mask"]).logits, logits) <= TOLERANCE
        theirs.config.pad_token_id = end  # <|endoftext|> as the pad id: the token before it would be read
        assert max_diff(theirs(input_ids=ours["input_ids"]).logits, logits) > 1e-3
