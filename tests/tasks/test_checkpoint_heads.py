"""Fine-tuned Hugging Face folders (``<Family>ForSequenceClassification``, ``...ForTokenClassification``,
``...ForQuestionAnswering``): the task's head starts from the checkpoint's where both compute the same function, and
the fine-tuning model then scores exactly as transformers' model does; where they do not, one warning line says
which keys go unused and why."""

import json
import logging
import warnings

import pytest
import torch

from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.interop.pretrained import load_backbone
from plm_toolkit.tasks.base import TaskData
from plm_toolkit.tasks.checkpoint_head import start_from_checkpoint_head
from plm_toolkit.tasks.classification import ClassificationConfig, SequenceClassification
from plm_toolkit.tasks.ner import NerConfig, TokenClassification
from plm_toolkit.tasks.squad.data import SquadConfig
from plm_toolkit.tasks.squad.task import QuestionAnswering

transformers = pytest.importorskip("transformers")

VOCAB, TOLERANCE = 99, 1e-5
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
ENCODER = dict(vocab_size=VOCAB, hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=37)
GPT = dict(vocab_size=VOCAB, n_embd=36, n_layer=2, n_head=3, n_positions=40, pad_token_id=0)
# family -> (transformers' class prefix, config class, config fields)
FAMILIES = {
    "bert": ("Bert", "BertConfig", dict(ENCODER, max_position_embeddings=40)),
    "roberta": (
        "Roberta",
        "RobertaConfig",
        dict(ENCODER, max_position_embeddings=42, type_vocab_size=1, pad_token_id=1),
    ),
    "albert": ("Albert", "AlbertConfig", dict(ENCODER, max_position_embeddings=40, embedding_size=17)),
    "electra": ("Electra", "ElectraConfig", dict(ENCODER, max_position_embeddings=40, embedding_size=17)),
    "ernie": ("Ernie", "ErnieConfig", dict(ENCODER, max_position_embeddings=40)),
    "xlnet": ("XLNet", "XLNetConfig", dict(vocab_size=VOCAB, d_model=36, n_layer=2, n_head=3, d_inner=37)),
    # pad_token_id: the id transformers' GPT sequence classifiers skip to find the last token (batch pads with 0).
    "gpt2": ("GPT2", "GPT2Config", dict(GPT, n_inner=37)),
    "openai-gpt": ("OpenAIGPT", "OpenAIGPTConfig", GPT),  # its feed-forward is 4 x n_embd, no n_inner
}
CLASSES = {"sequence": "ForSequenceClassification", "token": "ForTokenClassification", "span": "ForQuestionAnswering"}
# (family, head kind) of every task class transformers has: its OpenAIGPT has only the sequence classifier.
MAPPED = [(f, k) for f in sorted(FAMILIES) for k in sorted(CLASSES) if f != "openai-gpt" or k == "sequence"]
MNLI = ["contradiction", "entailment", "neutral"]


def hf_model(family: str, kind: str = "sequence", labels=None, architecture: str | None = None, **overrides):
    prefix, config_name, fields = FAMILIES[family]
    config = getattr(transformers, config_name)(**(fields | overrides))
    if labels is not None:
        config.id2label = dict(enumerate(labels))
        config.label2id = {name: i for i, name in enumerate(labels)}
    name = architecture or prefix + CLASSES[kind] + ("Simple" if family == "xlnet" and kind == "span" else "")
    torch.manual_seed(0)
    model = getattr(transformers, name)(config)
    with torch.no_grad():  # transformers' init leaves biases at 0 and norms at 1: perturb so no mapping error hides
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    return model.eval()


def save(model, folder):
    model.save_pretrained(folder)
    words = SPECIALS + [f"tok{i}" for i in range(5, VOCAB)]
    if model.config.model_type in ("gpt2", "openai-gpt"):
        # A GPT reads a text from its first token: a tokenizer.json that adds nothing around it, as openai-gpt's (a
        # vocab.txt would put BERT's [CLS] before it, which interop/tokenizer_roles.py refuses).
        from tokenizers import Tokenizer, models, pre_tokenizers

        tokenizer = Tokenizer(models.WordLevel({word: i for i, word in enumerate(words)}, unk_token="[UNK]"))
        tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tokenizer.save(str(folder / "tokenizer.json"))
    else:
        (folder / "vocab.txt").write_text("\n".join(words) + "\n")
    return folder


def task_for(kind: str, loaded, labels=None, name: str = "sst2"):
    from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer

    vocab = vocab_from_tokenizer(loaded.tokenizer)
    if kind == "sequence":
        labels = labels or ["0", "1"]
        return SequenceClassification(
            ClassificationConfig(name=name, labels=labels), loaded.model, vocab, TaskData([], None, labels=labels)
        )
    if kind == "token":
        labels = labels or ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
        return TokenClassification(NerConfig(labels=labels), loaded.model, vocab, TaskData([], None, labels=labels))
    return QuestionAnswering(SquadConfig(), loaded.model, vocab, TaskData([], None))


def batch(family: str):
    """Three rows of 11 tokens; right padding except for XLNet, whose transformers head reads the last position; no
    token types for the GPTs, whose transformers models would add the token embeddings of the type ids."""
    ids = torch.randint(5, VOCAB, (3, 11))
    mask = torch.ones_like(ids)
    if family != "xlnet":
        mask[1, 7:] = 0
        mask[2, 4:] = 0
    ids[mask == 0] = 1 if family == "roberta" else 0
    if family in ("gpt2", "openai-gpt"):
        return {"input_ids": ids, "attention_mask": mask}
    types = torch.zeros_like(ids)
    if family not in ("roberta", "xlnet"):
        types[:, 5:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def max_diff(a, b, mask=None):
    if mask is not None:
        a, b = a[mask.bool()], b[mask.bool()]
    return (a - b).abs().max().item()


def loaded_task(tmp_path, family, kind, labels=None, task_labels=None, name="sst2", task_kind=None):
    reference = hf_model(family, kind, labels)
    loaded = load_backbone(save(reference, tmp_path / "hf"), with_task_head=True)
    task = task_for(task_kind or kind, loaded, task_labels or labels, name)
    started = start_from_checkpoint_head(task, loaded.model, loaded.task_head, loaded.initialized_keys)
    return reference, loaded.model.eval(), task.eval(), started


@pytest.mark.parametrize(("family", "kind"), MAPPED)
def test_fine_tuning_model_scores_as_transformers_does(tmp_path, family, kind):
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"] if kind == "token" else None
    reference, model, task, started = loaded_task(tmp_path, family, kind, labels)
    assert started
    inputs = batch(family)
    with torch.no_grad():
        theirs = reference(**inputs)
        if kind == "sequence":
            assert max_diff(task.logits(model, inputs), theirs.logits) <= TOLERANCE
        elif kind == "token":
            assert max_diff(task.logits(model, inputs), theirs.logits, inputs["attention_mask"]) <= TOLERANCE
        else:
            start, end = task.scores(model, inputs)
            assert max_diff(start, theirs.start_logits, inputs["attention_mask"]) <= TOLERANCE
            assert max_diff(end, theirs.end_logits, inputs["attention_mask"]) <= TOLERANCE


@pytest.mark.parametrize(
    "names", [["neutral", "contradiction", "entailment"], ["NEUTRAL", "CONTRADICTION", "ENTAILMENT"]]
)
def test_named_labels_in_another_order_have_their_rows_reordered(tmp_path, names):
    reference, model, task, started = loaded_task(tmp_path, "bert", "sequence", names, MNLI, name="mnli")
    assert started
    inputs = batch("bert")
    with torch.no_grad():
        ours, theirs = task.logits(model, inputs), reference(**inputs).logits
    # Our label i is theirs at the row of the same name: contradiction, entailment, neutral = rows 1, 2, 0.
    assert max_diff(ours, theirs[:, [1, 2, 0]]) <= TOLERANCE


def test_labels_without_a_common_name_are_taken_in_order_with_a_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="plm_toolkit"):
        reference, model, task, started = loaded_task(
            tmp_path, "bert", "sequence", ["NEGATIVE", "POSITIVE"], ["0", "1"]
        )
    assert started
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path / 'hf' / 'model.safetensors'}: the checkpoint's labels share no name with task=sst2's; they are "
        "taken in order (NEGATIVE=0, POSITIVE=1), as transformers takes them: check that this is right"
    ]
    inputs = batch("bert")
    with torch.no_grad():
        assert max_diff(task.logits(model, inputs), reference(**inputs).logits) <= TOLERANCE


def unused_warning(caplog) -> str:
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(
    ("kind", "labels", "task_labels", "name", "why"),
    [
        ("sequence", ["a", "b"], MNLI, "mnli", "(2 labels in the checkpoint, 3 in task=mnli); task=mnli starts from a "
         "fresh head"),
        ("sequence", ["a", "b", "c"], ["a", "b", "d"], "classification", "it has c that the task lacks and lacks d"),
        ("token", None, ["0", "1"], "sst2", "(BertForTokenClassification is a token classifier; task=sst2 needs a "
         "sequence classifier); task=sst2 starts from a fresh head and a fresh pooler (the checkpoint has none)"),
    ],
)  # fmt: skip
def test_a_head_that_does_not_fit_is_left_out_with_one_warning(tmp_path, caplog, kind, labels, task_labels, name, why):
    task_kind = "sequence"
    if kind == "token":
        labels = ["O", "B-PER", "I-PER"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the missing pooler is told in the same line, not as a second warning
        with caplog.at_level(logging.WARNING, logger="plm_toolkit"):
            reference, model, task, started = loaded_task(tmp_path, "bert", kind, labels, task_labels, name, task_kind)
    assert not started
    line = unused_warning(caplog)
    assert line.startswith(f"{tmp_path / 'hf' / 'model.safetensors'}: task head classifier.bias, classifier.weight")
    assert why in line
    assert not torch.equal(task.head.linear.bias, reference.classifier.bias)


def test_heads_we_do_not_map_are_named_as_such(tmp_path, caplog):
    reference = hf_model("xlnet", architecture="XLNetForQuestionAnswering")
    with caplog.at_level(logging.WARNING, logger="plm_toolkit"):
        loaded = load_backbone(save(reference, tmp_path / "hf"), with_task_head=True)
        task = task_for("span", loaded)
        assert not start_from_checkpoint_head(task, loaded.model, loaded.task_head)
    line = unused_warning(caplog)
    assert "answer_class.dense_1.weight" in line and "XLNet's beam-search SQuAD head" in line


def test_a_folder_that_does_not_name_its_class_cannot_say_what_its_head_is(tmp_path, caplog):
    folder = save(hf_model("bert", "token"), tmp_path / "hf")
    config = json.loads((folder / "config.json").read_text())
    del config["architectures"]
    (folder / "config.json").write_text(json.dumps(config))
    with caplog.at_level(logging.WARNING, logger="plm_toolkit"):
        loaded = load_backbone(folder, with_task_head=True)
        assert not start_from_checkpoint_head(task_for("token", loaded), loaded.model, loaded.task_head)
    assert "does not say which of BertForMultipleChoice or BertForSequenceClassification or " in unused_warning(caplog)


def test_a_command_without_a_task_reads_the_backbone_and_says_so(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="plm_toolkit"):
        loaded = load_backbone(save(hf_model("roberta", "sequence"), tmp_path / "hf"))
    assert loaded.task_head is None
    assert unused_warning(caplog) == (
        f"{tmp_path / 'hf' / 'model.safetensors'}: task head classifier.out_proj.bias, classifier.out_proj.weight "
        "not used (the RobertaForSequenceClassification head); only the backbone is read here; "
        "classifier.dense.bias, classifier.dense.weight stay in the backbone as pooler.dense.bias, pooler.dense.weight"
    )


def test_unknown_keys_and_wrong_head_shapes_still_fail(tmp_path):
    from safetensors.torch import load_file, save_file

    folder = save(hf_model("bert", "sequence"), tmp_path / "hf")
    weights = load_file(folder / "model.safetensors")
    save_file(weights | {"extra.weight": torch.zeros(2)}, folder / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"model.safetensors: unexpected key\(s\) extra.weight$"):
        load_backbone(folder)
    save_file(weights | {"classifier.weight": torch.zeros(3, 36)}, folder / "model.safetensors")
    message = r"classifier.weight has shape \(3, 36\); expected \(2, 36\) \(transformers' default of 2 labels;"
    with pytest.raises(CheckpointError, match=message):
        load_backbone(folder)


def hf_folder_with_tokenizer(tiny_checkpoint, folder, family: str, calibrate=None):
    """A fine-tuned sequence classifier of ``family`` over the tiny checkpoint's vocabulary (its tokenizer.json);
    ``calibrate(model)`` -> inputs on which the bias is set so that about half of them come out of each class."""
    import shutil

    from tokenizers import Tokenizer

    size = Tokenizer.from_file(str(tiny_checkpoint / "tokenizer.json")).get_vocab_size()
    model = hf_model(family, vocab_size=size, max_position_embeddings=64)
    if calibrate is not None:  # a random encoder's summaries are much alike: put the boundary among them
        with torch.no_grad():
            margins = torch.cat([model(**inputs).logits.diff(dim=-1) for inputs in calibrate(model)])
            model.classifier.bias[1] -= margins.flatten().quantile(0.5)  # between the middle two: no tie
    save(model, folder)
    (folder / "vocab.txt").unlink()
    shutil.copy(tiny_checkpoint / "tokenizer.json", folder / "tokenizer.json")
    return model


def test_evaluation_only_reports_the_checkpoints_own_accuracy(tiny_checkpoint, finetune_config, tmp_path):
    from plm_toolkit.commands.finetune import run
    from plm_toolkit.data.tokenization.tokenizer import load_tokenizer
    from plm_toolkit.tasks.classification import read_rows
    from tests.tasks.conftest import SST2_DEV

    tokenizer = load_tokenizer(tiny_checkpoint / "tokenizer.json")
    tokenizer.enable_truncation(max_length=40)
    rows = read_rows(SST2_DEV, ClassificationConfig(text_column="sentence|text"))[:64]
    encodings = [tokenizer.encode(row.text) for row in rows]
    inputs = [dict(input_ids=torch.tensor([e.ids]), token_type_ids=torch.tensor([e.type_ids])) for e in encodings]
    reference = hf_folder_with_tokenizer(tiny_checkpoint, tmp_path / "hf", "bert", calibrate=lambda model: inputs)
    cfg = finetune_config(
        "task=sst2",
        f"model.checkpoint={tmp_path / 'hf'}",
        f"data.validation_file={SST2_DEV}",
        "data.max_seq_len=40",
        "data.max_eval_samples=64",
        "trainer.epochs=0",
    )
    run(cfg, tmp_path / "run")

    with torch.no_grad():
        expected = {str(i): str(int(reference(**row).logits.argmax())) for i, row in enumerate(inputs)}
    assert set(expected.values()) == {"0", "1"}
    assert json.loads((tmp_path / "run" / "predictions.json").read_text()) == expected
    accuracy = sum(expected[str(i)] == row.label for i, row in enumerate(rows)) / len(rows)
    assert json.loads((tmp_path / "run" / "eval_results.json").read_text())["accuracy"] == pytest.approx(accuracy)
    assert not (tmp_path / "run" / "checkpoints").exists()  # nothing trained, nothing saved


@pytest.mark.slow
def test_a_head_with_its_own_dense_layer_trains_and_resumes_exactly(tiny_checkpoint, finetune_config, tmp_path):
    from safetensors.torch import load_file

    from plm_toolkit.commands.finetune import run
    from tests.commands.test_finetune import FAST, SST2
    from tests.training.conftest import read_metrics

    hf_folder_with_tokenizer(tiny_checkpoint, tmp_path / "hf", "electra")
    common = [*SST2, *FAST, f"model.checkpoint={tmp_path / 'hf'}", "data.max_train_samples=32", "optimizer.lr=1e-3",
              "data.max_eval_samples=16", "optimizer.total_steps=6", "trainer.save_every=3"]  # fmt: skip
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    run(finetune_config(*common, "trainer.max_steps=6"), straight)
    run(finetune_config(*common, "trainer.max_steps=3"), interrupted)
    run(finetune_config(*common, "trainer.max_steps=6"), interrupted)
    losses = [[r["loss"] for r in read_metrics(d) if "lr" in r] for d in (straight, interrupted)]
    assert losses[0] == losses[1] and len(losses[0]) == 6
    head = load_file(straight / "checkpoints" / "last" / "objective.safetensors")
    assert {"head.dense.weight", "head.dense.bias", "head.linear.weight", "head.linear.bias"} == set(head)


def test_plm_embed_reads_a_fine_tuned_folder_and_leaves_its_head_out(tmp_path, caplog):
    from safetensors.torch import load_file

    from tests.commands.test_embed import embed

    reference = hf_model("bert", "token")
    folder = save(reference, tmp_path / "hf")
    (tmp_path / "in.txt").write_text("tok5 tok6 tok7\n")
    with caplog.at_level(logging.WARNING, logger="plm_toolkit"):
        embed(
            f"checkpoint={folder}", f"input_file={tmp_path / 'in.txt'}", f"output_file={tmp_path / 'out.safetensors'}"
        )
    assert "task head classifier.bias, classifier.weight not used" in unused_warning(caplog)
    with torch.no_grad():
        hidden = reference.bert(input_ids=torch.tensor([[2, 5, 6, 7, 3]]), output_hidden_states=True).hidden_states
    ours = load_file(tmp_path / "out.safetensors")["0"]  # (layers, words, hidden)
    assert max_diff(ours, torch.stack(hidden)[:, 0, 1:4]) <= TOLERANCE


def test_evaluation_only_of_a_tagger_takes_its_labels_from_the_checkpoint(tiny_checkpoint, finetune_config, tmp_path):
    import shutil

    from plm_toolkit.commands.finetune import run
    from plm_toolkit.data.tokenization.tokenizer import load_tokenizer

    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    tokenizer = load_tokenizer(tiny_checkpoint / "tokenizer.json")
    reference = hf_model("bert", "token", tags, vocab_size=tokenizer.get_vocab_size(), max_position_embeddings=64)
    with torch.no_grad():
        reference.classifier.weight.mul_(40.0)  # varied tags from a random encoder
    save(reference, tmp_path / "hf")
    shutil.copy(tiny_checkpoint / "tokenizer.json", tmp_path / "hf" / "tokenizer.json")
    sentences = [["the", "film", "is", "a", "mess"], ["a", "story", "of", "love", "and", "loss"], ["it", "works"]]
    (tmp_path / "dev.conll").write_text("\n\n".join("\n".join(f"{w} O" for w in words) for words in sentences) + "\n")
    dev = f"data.validation_file={tmp_path / 'dev.conll'}"
    cfg = finetune_config("task=ner", f"model.checkpoint={tmp_path / 'hf'}", dev, "trainer.epochs=0")
    run(cfg, tmp_path / "run")

    expected = []
    with torch.no_grad():
        for words in sentences:
            encoding = tokenizer.encode(words, is_pretokenized=True)
            logits = reference(input_ids=torch.tensor([encoding.ids])).logits[0]  # (T, C)
            firsts = [encoding.word_ids.index(w) for w in range(len(words))]
            expected.append(" ".join(tags[int(logits[i].argmax())] for i in firsts))
    assert len({tag for line in expected for tag in line.split()}) > 1
    assert json.loads((tmp_path / "run" / "predictions.json").read_text()) == expected


@pytest.mark.parametrize("head_bias", [None, True, False])
def test_gpts_bias_free_score_starts_a_head_with_no_bias_or_a_zero_one(tmp_path, head_bias):
    """task.head_bias: null takes the checkpoint's (none: GPT2ForSequenceClassification's score), true keeps a bias
    that starts at zero, false none; all three score as transformers does."""
    reference = hf_model("gpt2", "sequence")
    loaded = load_backbone(save(reference, tmp_path / "hf"), with_task_head=True)
    task = task_for("sequence", loaded)
    if head_bias is not None:
        task = SequenceClassification(
            ClassificationConfig(name="sst2", labels=["0", "1"], head_bias=head_bias),
            loaded.model,
            task.vocab,
            TaskData([], None, labels=["0", "1"]),
        )
    assert start_from_checkpoint_head(task, loaded.model, loaded.task_head)
    bias = task.head.linear.bias
    assert (bias is None) == (head_bias is not True) and (bias is None or not bias.any())
    inputs = batch("gpt2")
    with torch.no_grad():
        assert max_diff(task.eval().logits(loaded.model.eval(), inputs), reference(**inputs).logits) <= TOLERANCE


def test_a_head_with_a_bias_is_not_taken_by_a_task_without_one(tmp_path, caplog):
    from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer

    loaded = load_backbone(save(hf_model("bert", "sequence"), tmp_path / "hf"), with_task_head=True)
    config = ClassificationConfig(name="sst2", labels=["0", "1"], head_bias=False)
    vocab = vocab_from_tokenizer(loaded.tokenizer)
    task = SequenceClassification(config, loaded.model, vocab, TaskData([], None, labels=["0", "1"]))
    with caplog.at_level(logging.WARNING, logger="plm_toolkit"):
        assert not start_from_checkpoint_head(task, loaded.model, loaded.task_head)
    assert "(its classifier has a bias; task.head_bias=false asks for one without)" in unused_warning(caplog)
    assert task.head.linear.bias is None


def test_the_double_heads_multiple_choice_head_is_named_and_left_out(tmp_path, caplog):
    """OpenAIGPTDoubleHeadsModel: its multiple-choice head unused, its backbone read (the embedding from lm_head,
    the one copy transformers saves of the two it ties)."""
    reference = hf_model("openai-gpt", architecture="OpenAIGPTDoubleHeadsModel")
    with caplog.at_level(logging.WARNING, logger="plm_toolkit"):
        loaded = load_backbone(save(reference, tmp_path / "hf"))
    assert "task head multiple_choice_head.summary.bias, multiple_choice_head.summary.weight not used" in (
        unused_warning(caplog)
    )
    assert loaded.task_head is None
    inputs = batch("openai-gpt")
    with torch.no_grad():
        theirs = reference.transformer(**inputs).last_hidden_state
        assert max_diff(loaded.model.eval()(**inputs).hidden, theirs, inputs["attention_mask"]) <= TOLERANCE
