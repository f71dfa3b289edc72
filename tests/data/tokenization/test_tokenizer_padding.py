"""A tokenizer.json that keeps its creator's padding and truncation (all-MiniLM-L6-v2's fixed 128) is read without
them wherever a pretraining corpus is tokenized: documents keep their own length and no pad enters the store."""

from omegaconf import OmegaConf
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

from plm_toolkit.core.data_schema import DataConfig, TokenizerConfig
from plm_toolkit.data.store.preparation import prepare_store
from plm_toolkit.data.store.token_store import TokenStore
from plm_toolkit.data.tokenization.tokenizer import load_tokenizer

WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "ran", "far", "away", "and", "then", "slept"]
DOCUMENTS = [" ".join(WORDS[(k + j) % len(WORDS)] for j in range(3 + 5 * (k % 7))) for k in range(40)]
WIDTH = 16  # the fixed length the file asks for: shorter than some documents, longer than others


def padded_tokenizer_file(tmp_path):
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tokenizer.enable_padding(length=WIDTH, pad_id=0, pad_token="[PAD]")
    tokenizer.enable_truncation(max_length=WIDTH)
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    assert len(Tokenizer.from_file(str(path)).encode("cat").ids) == WIDTH  # the file does carry them
    return path


def test_load_tokenizer_clears_the_files_padding_and_truncation(tmp_path):
    tokenizer = load_tokenizer(padded_tokenizer_file(tmp_path))
    assert tokenizer.padding is None and tokenizer.truncation is None
    longest = max(DOCUMENTS, key=len)
    assert len(tokenizer.encode(longest, add_special_tokens=False).ids) == len(longest.split()) > WIDTH
    assert tokenizer.encode("cat", add_special_tokens=False).ids == [WORDS.index("cat") + 5]


def test_a_store_prepared_with_a_padded_tokenizer_file_holds_the_documents_as_written(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(DOCUMENTS) + "\n", encoding="utf-8")
    data = DataConfig(
        train_files=[str(corpus)],
        tokenizer=TokenizerConfig(path=str(padded_tokenizer_file(tmp_path))),
        cache_dir=str(tmp_path / "cache"),
        store=str(tmp_path / "store"),
    )
    store = TokenStore(prepare_store(OmegaConf.structured(data), "documents"))
    documents = [[t for sentence in d for t in sentence] for d in store.split("train").documents()]
    assert [len(d) for d in documents] == [len(text.split()) for text in DOCUMENTS]
    assert all(0 not in d for d in documents)  # no [PAD] was written
    assert store.tokenizer.padding is None and store.tokenizer.truncation is None
