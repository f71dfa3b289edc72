"""Reading documents: blank-line separation, the sentence splitter, one-line errors, saved datasets, presets."""

from pathlib import Path

import datasets
import pytest
from omegaconf import OmegaConf

from plm_toolkit.core.data_schema import DataConfig
from plm_toolkit.core.errors import ConfigError, DataError
from plm_toolkit.core.resources import register_resolvers
from plm_toolkit.data.sources import corpus
from plm_toolkit.data.sources.corpus import iter_documents, read_documents
from plm_toolkit.data.sources.documents import split_sentences

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def data_cfg(tmp_path, **fields):
    return DataConfig(cache_dir=str(tmp_path / "cache"), **fields)


def write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_documents_are_blocks_between_blank_lines(tmp_path):
    text = "First doc. Line one.\nLine two.\n\n\n\nSecond doc.\n  \t\nThird doc, after a line of spaces.\n"
    a = write(tmp_path / "a.txt", text)
    b = write(tmp_path / "b.txt", "Fourth doc.\r\nStill fourth.\r\n\r\nFifth doc.")  # CRLF, no final newline
    docs = read_documents(data_cfg(tmp_path, train_files=[a, b]), "train")
    assert list(iter_documents(docs)) == [
        "First doc. Line one.\nLine two.",
        "Second doc.",
        "Third doc, after a line of spaces.",
        "Fourth doc.\nStill fourth.",
        "Fifth doc.",
    ]


def test_no_validation_files_means_no_validation_split(tmp_path):
    cfg = data_cfg(tmp_path, train_files=[write(tmp_path / "a.txt", "Text.")])
    assert read_documents(cfg, "validation") is None


def test_no_training_files_names_the_keys(tmp_path):
    with pytest.raises(ConfigError, match="data.train_files is empty"):
        read_documents(data_cfg(tmp_path), "train")


@pytest.mark.parametrize(
    "text,expected",
    [
        ("One. Two! Three? Four", ["One.", "Two!", "Three?", "Four"]),
        ("Mr. Smith met Dr. Jones. They talked.", ["Mr. Smith met Dr. Jones.", "They talked."]),
        ("The U.S. Army came, e.g. Tanks. Then rain.", ["The U.S. Army came, e.g. Tanks.", "Then rain."]),
        ("J. R. R. Tolkien wrote it. It sold.", ["J. R. R. Tolkien wrote it.", "It sold."]),
        ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
        ('It ended. "Why?" she asked.', ["It ended.", '"Why?" she asked.']),
        ("It cost 3.5 million in 2000. 2001 was worse.", ["It cost 3.5 million in 2000.", "2001 was worse."]),
        ("Wikitext spacing . He had a role . ( It aired . )", ["Wikitext spacing .", "He had a role . ( It aired . )"]),
        ("no capital. after this", ["no capital. after this"]),
        ("Wait... What?! Yes.", ["Wait...", "What?!", "Yes."]),
        ("", []),
        ("   ", []),
    ],
)
def test_sentence_splitter(text, expected):
    assert split_sentences(text) == expected


def test_missing_file_is_named(tmp_path):
    missing = tmp_path / "nope.txt"
    with pytest.raises(DataError, match=f"corpus file {missing} does not exist"):
        read_documents(data_cfg(tmp_path, train_files=[str(missing)]), "train")


@pytest.mark.parametrize("text", ["", "\n\n  \n\t\n"])
def test_empty_file_is_named(tmp_path, text):
    path = write(tmp_path / "empty.txt", text)
    with pytest.raises(DataError, match=f"corpus file {path} has no text"):
        read_documents(data_cfg(tmp_path, train_files=[path]), "train")


def test_binary_file_names_file_and_line(tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(b"fine\nstill fine\nbad \x00\x01\x02\n")
    with pytest.raises(DataError, match=f"{path}:3: NUL byte"):
        read_documents(data_cfg(tmp_path, train_files=[str(path)]), "train")


def test_bad_utf8_names_file_and_line_across_read_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "_CHUNK", 5)  # a multi-byte character straddles a chunk boundary
    path = tmp_path / "latin1.txt"
    path.write_bytes("ab\ncdé\néé\n".encode() + "naïve\n".encode("latin-1"))
    with pytest.raises(DataError, match=f"{path}:4: not valid UTF-8"):
        read_documents(data_cfg(tmp_path, train_files=[str(path)]), "train")
    good = tmp_path / "good.txt"
    good.write_bytes("ab\ncdé\néé\nnaïve\n".encode())
    corpus.check_text_file(good)


def test_saved_dataset_dict_with_a_named_column(tmp_path):
    folder = tmp_path / "saved"
    datasets.DatasetDict(
        train=datasets.Dataset.from_dict({"id": [1, 2], "body": ["Doc one.", "Doc two."]}),
        validation=datasets.Dataset.from_dict({"id": [3], "body": ["Doc three."]}),
    ).save_to_disk(str(folder))
    cfg = data_cfg(tmp_path, dataset_path=str(folder), text_column="body")
    assert list(iter_documents(read_documents(cfg, "train"))) == ["Doc one.", "Doc two."]
    assert list(iter_documents(read_documents(cfg, "validation"))) == ["Doc three."]
    cfg.text_column = "text"
    with pytest.raises(DataError, match=r"saved dataset .*saved has no column 'text'.*\['id', 'body'\]"):
        read_documents(cfg, "train")


def test_saved_single_dataset_is_train_only(tmp_path):
    folder = tmp_path / "single"
    datasets.Dataset.from_dict({"text": ["A doc.", "Another."]}).save_to_disk(str(folder))
    cfg = data_cfg(tmp_path, dataset_path=str(folder))
    assert len(read_documents(cfg, "train").dataset) == 2
    assert read_documents(cfg, "validation") is None


def test_missing_saved_dataset_is_named(tmp_path):
    with pytest.raises(DataError, match=f"saved dataset {tmp_path / 'gone'} does not exist"):
        read_documents(data_cfg(tmp_path, dataset_path=str(tmp_path / "gone")), "train")


def test_resource_resolver_gives_an_absolute_path_to_the_bundled_corpus():
    register_resolvers()
    register_resolvers()  # idempotent
    cfg = OmegaConf.create({"p": "${plm_resource:corpora/wikitext2/train.txt}"})
    path = Path(cfg.p)
    assert path.is_absolute() and path.is_file()
    assert (path.parent / "SOURCE.md").is_file()


def preset(name: str):
    """A data preset merged onto its schema, as Hydra's `/schema/data/data@_here_` default does."""
    raw = OmegaConf.load(CONFIGS / "data" / f"{name}.yaml")
    assert raw.pop("defaults") == ["/schema/data/data@_here_"]
    return OmegaConf.merge(OmegaConf.structured(DataConfig), raw)


@pytest.mark.parametrize("name", ["default", "text_files", "saved_dataset"])
def test_data_presets_load_against_the_schema(name):
    register_resolvers()
    cfg = preset(name)
    assert cfg.name == name
    OmegaConf.to_container(cfg, resolve=True)


def test_bundled_corpus_format():
    register_resolvers()
    cfg = preset("default")
    train = Path(cfg.train_files[0]).read_text(encoding="utf-8")
    valid = Path(cfg.validation_files[0]).read_text(encoding="utf-8")
    assert "\r" not in train + valid and "@-@" not in train + valid and "@,@" not in train + valid
    assert not any(line.strip().startswith("= ") for line in (train + valid).splitlines())
    assert len(train.split("\n\n")) == 39 and len(valid.split("\n\n")) == 4
    assert len((train + valid).encode()) < 1_050_000
