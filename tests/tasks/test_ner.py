"""CoNLL reading on WNUT-17, its errors, and conlleval's entity scores on hand-computed cases."""

import pytest
from omegaconf import OmegaConf

from plm_toolkit.core.errors import DataError
from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer
from plm_toolkit.interop.pretrained import load_backbone
from plm_toolkit.tasks.ner import NerConfig, TokenClassification, entities, entity_scores, read_conll


def test_entities_follow_conlleval_boundaries():
    assert entities(["B-PER", "I-PER", "O", "B-LOC"]) == {("PER", 0, 1), ("LOC", 3, 3)}
    assert entities(["O", "I-PER", "I-PER", "O"]) == {("PER", 1, 2)}  # I after O opens an entity
    assert entities(["B-PER", "B-PER"]) == {("PER", 0, 0), ("PER", 1, 1)}
    assert entities(["B-LOC", "I-PER"]) == {("LOC", 0, 0), ("PER", 1, 1)}  # a type change opens another


def test_entity_scores_hand_computed():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-PER", "I-PER", "O"], ["B-PER", "I-PER"]]
    predicted = [["B-PER", "I-PER", "O", "B-ORG"], ["O", "I-PER", "I-PER", "O"], ["B-PER", "B-PER"]]
    # gold entities 4; predicted 5 (PER, ORG | PER | PER, PER); correct 2 (the first PER, the second sentence's).
    scores = entity_scores(gold, predicted)
    assert scores["precision"] == pytest.approx(2 / 5)
    assert scores["recall"] == pytest.approx(2 / 4)
    assert scores["f1"] == pytest.approx(2 * 0.4 * 0.5 / 0.9)
    assert scores["accuracy"] == pytest.approx(7 / 10)
    assert entity_scores([["O"]], [["O"]])["f1"] == 0.0


def test_wnut17_reads_whole(shared_data):
    train = read_conll(shared_data / "ner" / "wnut17train.conll")
    dev = read_conll(shared_data / "ner" / "emerging.dev.conll")
    assert (len(train), sum(len(s.words) for s in train)) == (3394, 62730)
    assert (len(dev), sum(len(s.words) for s in dev)) == (1009, 15733)
    assert len({t for s in train for t in s.tags}) == 13
    assert train[0].words[:3] == ["@paulwalk", "It", "'s"] and train[0].tags[14] == "B-location"


def test_wrong_number_of_columns_names_the_line(tmp_path):
    path = tmp_path / "train.conll"
    path.write_text("EU NNP B-ORG\nrejects VBZ O\n\nGerman JJ B-MISC\ncall O\n")
    with pytest.raises(DataError, match=rf"{path}:5: 2 column\(s\), expected 3"):
        read_conll(path)


def test_tag_that_is_not_bio_names_the_line(tmp_path):
    path = tmp_path / "train.conll"
    path.write_text("EU\tB-ORG\nrejects\tX\n")
    with pytest.raises(DataError, match=rf"{path}:2: tag 'X' is not BIO"):
        read_conll(path)


def test_tag_unseen_in_training_names_the_line(tmp_path, tiny_checkpoint):
    (tmp_path / "train.conll").write_text("EU\tB-ORG\nrejects\tO\n")
    (tmp_path / "dev.conll").write_text("-DOCSTART-\tO\n\nPeter\tB-PER\n")
    data_cfg = OmegaConf.create(
        {
            "train_file": str(tmp_path / "train.conll"),
            "validation_file": str(tmp_path / "dev.conll"),
            "max_seq_len": 16,
            "max_train_samples": None,
            "max_eval_samples": None,
        }
    )
    loaded = load_backbone(tiny_checkpoint)
    with pytest.raises(DataError, match=r"dev.conll:3: tag 'B-PER' does not occur in the training file"):
        TokenClassification.prepare_data(
            NerConfig(), data_cfg, loaded.tokenizer, vocab_from_tokenizer(loaded.tokenizer)
        )


def test_labels_sit_on_first_sub_tokens(tmp_path, tiny_checkpoint):
    (tmp_path / "train.conll").write_text("Xylophonists\tB-PER\nplayed\tO\nthere\tB-LOC\n")
    data_cfg = OmegaConf.create(
        {
            "train_file": str(tmp_path / "train.conll"),
            "validation_file": None,
            "max_seq_len": 16,
            "max_train_samples": None,
            "max_eval_samples": None,
        }
    )
    loaded = load_backbone(tiny_checkpoint)
    data = TokenClassification.prepare_data(
        NerConfig(), data_cfg, loaded.tokenizer, vocab_from_tokenizer(loaded.tokenizer)
    )
    assert data.labels == ["O", "B-LOC", "B-PER"]
    feature = data.train[0]
    pieces = loaded.tokenizer.encode(["Xylophonists", "played", "there"], is_pretokenized=True)
    assert len(pieces.ids) > 5  # the first word is cut into several pieces
    expected = [
        -100 if w is None or w == p else data.labels.index(["B-PER", "O", "B-LOC"][w])
        for w, p in zip(pieces.word_ids, [None, *pieces.word_ids[:-1]], strict=True)
    ]
    assert feature["labels"] == expected and feature["input_ids"] == pieces.ids
