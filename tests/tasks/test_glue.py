"""GLUE-style readers on the real files, their errors, and the sentence-level metrics on hand-computed cases."""

import numpy as np
import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

import plm_toolkit.commands.finetune  # noqa: F401
from plm_toolkit.core.errors import DataError
from plm_toolkit.tasks.classification import ClassificationConfig, SequenceClassification, read_rows
from plm_toolkit.tasks.metrics import accuracy, f1, matthews, pearson, spearman
from tests.tasks.conftest import SST2_DEV, SST2_TRAIN


def preset(name: str) -> ClassificationConfig:
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        cfg = compose("finetune", overrides=[f"task={name}", "model.checkpoint=x"])
    return OmegaConf.to_object(cfg.task)


def data_config(train, validation=None, **extra):
    return OmegaConf.create(
        {
            "train_file": str(train),
            "validation_file": str(validation) if validation else None,
            "max_seq_len": 32,
            "max_train_samples": None,
            "max_eval_samples": None,
            **extra,
        }
    )


def test_sst2_real_files(shared_data):
    config = preset("sst2")
    train = read_rows(shared_data / "glue" / "SST-2" / "train.tsv", config)  # header "text", GLUE's is "sentence"
    dev = read_rows(shared_data / "glue" / "SST-2" / "dev.tsv", config)
    assert (len(train), len(dev)) == (67349, 872)
    assert sum(r.label == "1" for r in train) == 37569 and sum(r.label == "1" for r in dev) == 444
    assert train[0].text.strip() == "hide new secretions from the parental units" and train[0].line == 2
    assert read_rows(SST2_TRAIN, config)[0].text == train[0].text  # the bundled slice: GLUE's header


def test_rte_real_files_are_pairs(shared_data):
    config = preset("rte")
    train = read_rows(shared_data / "glue" / "RTE" / "train.tsv", config)
    dev = read_rows(shared_data / "glue" / "RTE" / "dev.tsv", config)
    assert (len(train), len(dev)) == (2490, 277)
    assert sum(r.label == "entailment" for r in train) == 1249 and sum(r.label == "entailment" for r in dev) == 146
    assert train[0].text == "No Weapons of Mass Destruction Found in Iraq Yet."
    assert train[0].pair == "Weapons of Mass Destruction Found in Iraq."


def test_features_pair_layout(tiny_checkpoint, shared_data):
    from plm_toolkit.interop.pretrained import load_backbone

    loaded = load_backbone(tiny_checkpoint)
    from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer

    vocab = vocab_from_tokenizer(loaded.tokenizer)
    data = SequenceClassification.prepare_data(
        preset("rte"),
        data_config(shared_data / "glue" / "RTE" / "dev.tsv", max_train_samples=20),
        loaded.tokenizer,
        vocab,
    )
    assert len(data.train) == 20 and data.labels == ["entailment", "not_entailment"]
    for feature in data.train:
        ids, types = feature["input_ids"], feature["token_type_ids"]
        assert len(ids) <= 32 and ids[0] == vocab.cls_id and ids[-1] == vocab.sep_id and ids.count(vocab.sep_id) == 2
        assert types[0] == 0 and types[-1] == 1 and feature["labels"] in (0, 1)


def test_cola_without_header_by_index(tmp_path):
    path = tmp_path / "in_domain_train.tsv"
    path.write_text("gj04\t1\t\tOur friends won't buy this analysis.\ngj04\t0\t*\tThey drank the pub.\n")
    rows = read_rows(path, preset("cola"))
    assert [(r.text, r.label, r.line) for r in rows] == [
        ("Our friends won't buy this analysis.", "1", 1),
        ("They drank the pub.", "0", 2),
    ]


def test_generic_csv_and_jsonl_read_named_columns(tmp_path):
    config = ClassificationConfig(text_column="review", label_column="stars")
    (tmp_path / "a.csv").write_text('review,stars\n"good, really",5\nbad,1\n')
    (tmp_path / "a.jsonl").write_text('{"review": "good", "stars": 5}\n\n{"review": "bad", "stars": 1}\n')
    assert [(r.text, r.label) for r in read_rows(tmp_path / "a.csv", config)] == [("good, really", "5"), ("bad", "1")]
    assert [(r.text, r.label, r.line) for r in read_rows(tmp_path / "a.jsonl", config)] == [
        ("good", "5", 1),
        ("bad", "1", 3),
    ]


def test_missing_column_names_file_and_columns(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("sentence1\tlabel\na\tentailment\n")
    with pytest.raises(DataError, match=rf"{path}:1: no column 'sentence2' \(task.text_pair_column\)"):
        read_rows(path, preset("rte"))


def test_short_row_names_its_line(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\ta b\tentailment\n")
    with pytest.raises(DataError, match=rf"{path}:3: 3 field\(s\), expected 4"):
        read_rows(path, preset("rte"))


def test_label_unseen_in_training_names_its_line(tmp_path, tiny_checkpoint):
    from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer
    from plm_toolkit.interop.pretrained import load_backbone

    (tmp_path / "train.tsv").write_text("text\tlabel\ngood\tpos\nbad\tneg\n")
    (tmp_path / "dev.tsv").write_text("text\tlabel\nfine\tpos\nmeh\tneutral\n")
    loaded = load_backbone(tiny_checkpoint)
    with pytest.raises(
        DataError, match=r"dev.tsv:3: label 'neutral' is not among the training labels \['neg', 'pos'\]"
    ):
        SequenceClassification.prepare_data(
            ClassificationConfig(),
            data_config(tmp_path / "train.tsv", tmp_path / "dev.tsv"),
            loaded.tokenizer,
            vocab_from_tokenizer(loaded.tokenizer),
        )


def test_metrics_on_hand_computed_cases():
    gold, pred = [1, 1, 0, 0, 1, 0], [1, 0, 0, 1, 1, 0]
    assert accuracy(pred, gold) == pytest.approx(4 / 6)
    assert f1(pred, gold) == pytest.approx(2 / 3)  # tp 2, fp 1, fn 1
    assert matthews(pred, gold) == pytest.approx((2 * 2 - 1 * 1) / 9)  # (tp tn - fp fn) / sqrt(3 3 3 3)
    assert matthews([0, 0, 0], [0, 1, 0]) == 0.0
    assert matthews([0, 1, 2, 0], [0, 1, 2, 0]) == pytest.approx(1.0)
    x, y = [1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 9.0]
    assert pearson(x, y) == pytest.approx(np.corrcoef(x, y)[0, 1])
    assert spearman(x, y) == pytest.approx(1.0)
    # Ties take their average rank: ranks (1, 2.5, 2.5, 4) against (1, 2, 3, 4).
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(np.corrcoef([1, 2.5, 2.5, 4], [1, 2, 3, 4])[0, 1])


def test_bundled_slice_is_documented():
    from pathlib import Path

    folder = Path(SST2_TRAIN).parent
    assert (folder / "SOURCE.md").is_file()
    assert len(Path(SST2_DEV).read_text().splitlines()) == 873


def test_summary_is_the_pooled_vector_or_the_declared_token():
    import torch

    from plm_toolkit.models.base import Representations
    from plm_toolkit.tasks.base import summary_vector

    class LastTokenBackbone(torch.nn.Module):
        summary_position = "last"

    hidden = torch.arange(2 * 4 * 3, dtype=torch.float32).view(2, 4, 3)  # (B, T, H)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    assert torch.equal(summary_vector(LastTokenBackbone(), Representations(hidden), mask), hidden[[0, 1], [2, 3]])
    assert torch.equal(summary_vector(torch.nn.Module(), Representations(hidden), mask), hidden[:, 0])
    pooled = torch.ones(2, 3)
    assert summary_vector(LastTokenBackbone(), Representations(hidden, pooled=pooled), mask) is pooled
