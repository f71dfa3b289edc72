"""task=pos: CoNLL-U reading (multiword tokens, empty nodes, comments, the XPOS column, errors with their line),
word accuracy and accuracy on unseen words on a hand-made case, the label set and a cut word, the bundled UD
English-EWT slice, and a tiny fine-tune through the real plm-finetune command line."""

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from plm_toolkit.core.errors import ConfigError, DataError
from plm_toolkit.core.resources import resource_path
from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer
from plm_toolkit.interop.pretrained import load_backbone
from plm_toolkit.tasks.base import IGNORE
from plm_toolkit.tasks.ner import Sentence
from plm_toolkit.tasks.pos import PosConfig, PosTagging, read_conllu, tag_accuracy
from tests.tasks.conftest import save_tiny_checkpoint, tiny_tokenizer

TRAIN = resource_path("corpora/ud_ewt/train.conllu")
DEV = resource_path("corpora/ud_ewt/dev.conllu")

# "I don't know." with its multiword token, an empty node, and the comments a UD file carries.
SAMPLE = """# newdoc id = doc-1
# sent_id = doc-1-0001
# text = I don't know.
1\tI\tI\tPRON\tPRP\tCase=Nom\t4\tnsubj\t4:nsubj\t_
2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
2\tdo\tdo\tAUX\tVBP\t_\t4\taux\t4:aux\t_
3\tn't\tnot\tPART\tRB\t_\t4\tadvmod\t4:advmod\t_
4\tknow\tknow\tVERB\tVB\t_\t0\troot\t0:root\tSpaceAfter=No
5\t.\t.\tPUNCT\t.\t_\t4\tpunct\t4:punct\t_

# sent_id = doc-1-0002
1\tSue\tSue\tPROPN\tNNP\t_\t2\tnsubj\t2:nsubj\t_
2\tlikes\tlike\tVERB\tVBZ\t_\t0\troot\t0:root\t_
3\tcoffee\tcoffee\tNOUN\tNN\t_\t2\tobj\t2:obj\t_
3.1\tlikes\tlike\tVERB\tVBZ\t_\t_\t_\t2:conj\tCopyOf=2
"""


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def data_config(train, validation, max_seq_len=32):
    return OmegaConf.create(
        {
            "train_file": str(train) if train else None,
            "validation_file": str(validation) if validation else None,
            "max_seq_len": max_seq_len,
            "max_train_samples": None,
            "max_eval_samples": None,
        }
    )


def test_reader_skips_multiword_tokens_empty_nodes_and_comments(tmp_path):
    sentences = read_conllu(write(tmp_path / "a.conllu", SAMPLE))
    assert [s.words for s in sentences] == [["I", "do", "n't", "know", "."], ["Sue", "likes", "coffee"]]
    assert [s.tags for s in sentences] == [["PRON", "AUX", "PART", "VERB", "PUNCT"], ["PROPN", "VERB", "NOUN"]]
    assert sentences[0].lines == [4, 6, 7, 8, 9] and sentences[1].lines == [12, 13, 14]


def test_reader_takes_the_xpos_column(tmp_path):
    sentences = read_conllu(write(tmp_path / "a.conllu", SAMPLE), "xpos")
    assert [s.tags for s in sentences] == [["PRP", "VBP", "RB", "VB", "."], ["NNP", "VBZ", "NN"]]


def test_wrong_column_count_names_the_line(tmp_path):
    path = write(tmp_path / "a.conllu", SAMPLE.replace("2\tlikes\tlike\tVERB", "2 likes like VERB"))
    with pytest.raises(DataError, match=rf"^{path}:13: 7 tab-separated column\(s\), expected CoNLL-U's 10"):
        read_conllu(path)


@pytest.mark.parametrize(("column", "blanked"), [("upos", "\tPROPN\t"), ("xpos", "\tNNP\t")])
def test_missing_tag_names_the_line_and_the_column(tmp_path, column, blanked):
    path = write(tmp_path / "a.conllu", SAMPLE.replace(blanked, "\t_\t"))
    with pytest.raises(DataError, match=rf"^{path}:12: no {column.upper()} tag \('_'\) on the word 'Sue'"):
        read_conllu(path, column)


@pytest.mark.parametrize("bad", ["x", "1a", "0", "-1", "2-2", "3-2", "2.", "2.0", "2:1", "²"])
def test_an_id_that_is_no_word_range_or_empty_node_names_the_line(tmp_path, bad):
    path = write(tmp_path / "a.conllu", SAMPLE.replace("2\tlikes\tlike\tVERB", f"{bad}\tlikes\tlike\tVERB"))
    with pytest.raises(DataError, match=rf"^{path}:13: ID '{bad}' is not a word number \(1, 2, \.\.\.\), a multiword"):
        read_conllu(path)


def test_word_ids_out_of_order_or_a_missing_blank_line_name_the_line(tmp_path):
    skipped = write(tmp_path / "a.conllu", SAMPLE.replace("3\tcoffee\tcoffee", "4\tcoffee\tcoffee"))
    with pytest.raises(DataError, match=rf"^{skipped}:14: word ID 4 where the sentence's word 3 comes"):
        read_conllu(skipped)
    glued = write(tmp_path / "b.conllu", SAMPLE.replace("\n\n# sent_id = doc-1-0002", "\n# sent_id = doc-1-0002"))
    with pytest.raises(DataError, match=rf"^{glued}:11: word ID 1 where the sentence's word 6 comes; .* a blank line"):
        read_conllu(glued)


def test_a_file_without_sentences_is_refused(tmp_path):
    path = write(tmp_path / "a.conllu", "# only a comment\n\n")
    with pytest.raises(DataError, match=rf"^{path}: no sentences"):
        read_conllu(path)


def test_column_other_than_upos_or_xpos_is_refused():
    with pytest.raises(ConfigError, match=r"task.column=lemma: expected upos or xpos"):
        PosTagging.check_config(PosConfig(column="lemma"))


def test_accuracy_and_unseen_word_accuracy_hand_computed():
    gold = [
        Sentence(["I", "run", "fast"], ["PRON", "VERB", "ADV"], [1, 2, 3], unseen=[False, False, True]),
        Sentence(["Zyx", "runs"], ["PROPN", "VERB"], [5, 6], unseen=[True, True]),
    ]
    # Right: I, run | runs (3 of 5); unseen words: fast (wrong), Zyx (wrong, never predicted), runs (right).
    predicted = [["PRON", "VERB", "ADJ"], [None, "VERB"]]
    scores = tag_accuracy(gold, predicted)
    assert scores == {"accuracy": pytest.approx(3 / 5), "oov_accuracy": pytest.approx(1 / 3), "oov_words": 3.0}
    # Without unseen marks (an evaluation without training sentences) only the accuracy is reported.
    plain = [Sentence(s.words, s.tags, s.lines) for s in gold]
    assert tag_accuracy(plain, predicted) == {"accuracy": pytest.approx(3 / 5)}


def test_labels_come_from_the_training_file_and_unseen_words_are_marked(tmp_path, tiny_checkpoint):
    train = write(tmp_path / "train.conllu", SAMPLE)
    dev = write(tmp_path / "dev.conllu", "1\tSue\t_\tPROPN\t_\t_\t_\t_\t_\t_\n2\truns\t_\tVERB\t_\t_\t_\t_\t_\t_\n")
    loaded = load_backbone(tiny_checkpoint)
    data = PosTagging.prepare_data(
        PosConfig(), data_config(train, dev), loaded.tokenizer, vocab_from_tokenizer(loaded.tokenizer)
    )
    assert data.labels == ["AUX", "NOUN", "PART", "PRON", "PROPN", "PUNCT", "VERB"]
    (sentence, words), *_ = data.eval_info
    assert sentence.unseen == [False, True] and words == [0, 1]
    first = data.validation[0]["labels"]
    assert [label for label in first if label != IGNORE][:1] == [data.labels.index("PROPN")]


def test_dev_tag_unseen_in_training_names_its_line_also_past_the_cut(tmp_path, tiny_checkpoint):
    train = write(tmp_path / "train.conllu", SAMPLE)
    long = "".join(f"{i}\tcoffee\t_\tNOUN\t_\t_\t_\t_\t_\t_\n" for i in range(1, 40))
    dev = write(tmp_path / "dev.conllu", long + "40\twow\t_\tINTJ\t_\t_\t_\t_\t_\t_\n")
    loaded = load_backbone(tiny_checkpoint)
    with pytest.raises(DataError, match=r"dev.conllu:40: tag 'INTJ' does not occur in the training file"):
        PosTagging.prepare_data(
            PosConfig(), data_config(train, dev, 16), loaded.tokenizer, vocab_from_tokenizer(loaded.tokenizer)
        )


def test_a_word_past_max_seq_len_counts_as_wrong(tmp_path, tiny_checkpoint, caplog):
    train = write(tmp_path / "train.conllu", SAMPLE)
    long = "".join(f"{i}\tcoffee\t_\tNOUN\t_\t_\t_\t_\t_\t_\n" for i in range(1, 21))
    dev = write(tmp_path / "dev.conllu", long)
    loaded = load_backbone(tiny_checkpoint)
    vocab = vocab_from_tokenizer(loaded.tokenizer)
    data = PosTagging.prepare_data(PosConfig(), data_config(train, dev, 12), loaded.tokenizer, vocab)
    assert "1 sentence(s) longer than data.max_seq_len were cut; their tail counts as wrong" in caplog.text
    words = data.eval_info[0][1]
    assert 0 < len(words) < 20  # a prefix of the words is predicted
    task = PosTagging(PosConfig(labels=data.labels), loaded.model, vocab, data)
    noun = data.labels.index("NOUN")
    # Every predicted word right: the accuracy is the share of words that got a prediction.
    outputs = {"index": torch.tensor([0]), "word_labels": torch.tensor([[noun] * len(words) + [IGNORE]])}
    scores = task.finish_evaluation(outputs)
    assert scores["accuracy"] == pytest.approx(len(words) / 20)
    assert task.artifacts["predictions.json"][0].split() == ["NOUN"] * len(words) + ["_"] * (20 - len(words))


def test_the_bundled_slice_reads_whole():
    train, dev = read_conllu(TRAIN), read_conllu(DEV)
    assert (len(train), sum(len(s.words) for s in train)) == (2000, 39802)
    assert (len(dev), sum(len(s.words) for s in dev)) == (1000, 14063)
    assert len({t for s in train for t in s.tags}) == 17  # every universal tag
    assert {t for s in read_conllu(DEV, "xpos") for t in s.tags} <= {
        t for s in read_conllu(TRAIN, "xpos") for t in s.tags
    }


def finetune(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    command = [sys.executable, "-m", "plm_toolkit.commands.finetune", *args]
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.slow
def test_tiny_finetune_on_the_bundled_slice_beats_the_majority_tag(tmp_path):
    """plm-finetune task=pos with its default data (the bundled slice) on a tiny BERT built from scratch: the best
    epoch's dev accuracy beats tagging every word NOUN, and the checkpoint tags without its training file."""
    texts = [" ".join(s.words) for s in read_conllu(TRAIN)]
    checkpoint = save_tiny_checkpoint(tmp_path / "pretrained", tiny_tokenizer(texts, 1000))
    common = ["hardware=cpu", "trainer.progress_bar=false", "trainer.tensorboard=false", "data.max_seq_len=64"]
    run = tmp_path / "run"
    finetune(
        ["task=pos", f"model.checkpoint={checkpoint}", *common, "trainer.epochs=2", "optimizer.lr=1e-3",
         f"hydra.run.dir={run}"],
        tmp_path,
    )  # fmt: skip
    results = json.loads((run / "eval_results.json").read_text())
    counts = Counter(t for s in read_conllu(DEV) for t in s.tags)
    majority, share = counts.most_common(1)[0][0], counts.most_common(1)[0][1] / sum(counts.values())
    assert majority == "NOUN" and share == pytest.approx(0.1665, abs=1e-4)
    assert results["accuracy"] > share + 0.3, results
    assert 0.0 < results["oov_accuracy"] < results["accuracy"] and results["oov_words"] > 0
    assert (run / "checkpoints" / "best").is_symlink()
    predictions = json.loads((run / "predictions.json").read_text())
    assert len(predictions) == 1000 and len(predictions[0].split()) == 7
    # The labels travel in the checkpoint: evaluating it without a training file gives the same accuracy.
    again = tmp_path / "again"
    finetune(
        ["task=pos", f"model.checkpoint={run / 'checkpoints' / 'best'}", *common, "trainer.epochs=0",
         "data.train_file=null", f"hydra.run.dir={again}"],
        tmp_path,
    )  # fmt: skip
    evaluated = json.loads((again / "eval_results.json").read_text())
    assert evaluated["accuracy"] == pytest.approx(results["accuracy"], abs=1e-9) and "oov_accuracy" not in evaluated


def test_another_training_file_beside_the_bundled_dev_file_is_warned_about(tmp_path, tiny_checkpoint, caplog):
    train = write(tmp_path / "train.conllu", SAMPLE.replace("\tPROPN\t", "\tNOUN\t"))
    loaded = load_backbone(tiny_checkpoint)
    vocab = vocab_from_tokenizer(loaded.tokenizer)
    config = data_config(train, DEV)
    with pytest.raises(DataError, match=r"dev.conllu:\d+: tag '\w+' does not occur in the training file"):
        PosTagging.prepare_data(PosConfig(), config, loaded.tokenizer, vocab)
    assert "data.validation_file is task=pos's default, the bundled UD English-EWT dev slice" in caplog.text
    caplog.clear()
    PosTagging.prepare_data(PosConfig(), data_config(TRAIN, DEV, 16), loaded.tokenizer, vocab)
    assert "bundled UD English-EWT dev slice" not in caplog.text
