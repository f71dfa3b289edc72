"""Words a vocabulary lacks keep their spelling beside their <UNK> id: ELMo's character CNN reads them as written
(bilm-tf's ``UnicodeCharsVocabulary.word_to_char_ids``) while the softmax predicts <UNK> for them."""

import pytest
import torch

from plm_toolkit.core.data_schema import DataConfig, TokenizerConfig
from plm_toolkit.data.batching.collate import Collator
from plm_toolkit.data.batching.loader import BatchLayout, MicroBatches, eval_loader, micro_batch_loader
from plm_toolkit.data.build import prepare_pretraining_data
from plm_toolkit.data.tokenization.characters import BOW_CHAR, EOW_CHAR, character_table, word_character_ids
from plm_toolkit.data.tokenization.spellings import spelled_character_ids
from plm_toolkit.data.tokenization.word_vocabulary import word_tokenizer
from plm_toolkit.models.elmo import Elmo, ElmoConfig
from plm_toolkit.objectives.bilm import BidirectionalLanguageModeling, BilmConfig

TRAIN = ["the cat saw a dog .", "A dog saw the cat .", "the dog ran to a cat ."] * 4
# "Zyzzyva", "quickly" and "Ölkännchen" are not in the training text; "<UNK>" written out is the <UNK> word itself.
VALID = ["the Zyzzyva saw a cat .", "A dog ran quickly to the Zyzzyva .", "the <UNK> saw Ölkännchen ."]
OUT_OF_VOCABULARY = {"Zyzzyva", "quickly", "Ölkännchen", "<UNK>"}


def spelled(char_ids: torch.Tensor) -> str:
    """The word a row of character ids spells (the inverse of word_character_ids, for ordinary words)."""
    ids = [int(c) - 1 for c in char_ids]
    assert ids[0] == BOW_CHAR
    if ids[1] >= 256:  # a sentence marker
        return {256: "<S>", 257: "</S>"}[ids[1]]
    return bytes(ids[1 : ids.index(EOW_CHAR)]).decode("utf-8")


def streams(sentences: list[str]) -> tuple[list[str], list[str]]:
    forward, backward = [], []
    for sentence in sentences:
        words = sentence.split()
        forward += ["<S>", *words, "</S>"]
        backward += ["</S>", *reversed(words), "<S>"]
    return forward, backward


def build(tmp_path, train=TRAIN, valid=VALID, tokenizer_path=None, softmax_size=None):
    (tmp_path / "train.txt").write_text("\n".join(train) + "\n", encoding="utf-8")
    (tmp_path / "valid.txt").write_text("\n".join(valid) + "\n", encoding="utf-8")
    data_cfg = DataConfig(
        train_files=[str(tmp_path / "train.txt")],
        validation_files=[str(tmp_path / "valid.txt")],
        tokenizer=TokenizerConfig(kind="word", path=tokenizer_path),
        max_seq_len=8,
        cache_dir=str(tmp_path / "cache"),
    )
    torch.manual_seed(0)
    model = Elmo(ElmoConfig(char_embedding_size=4, filters=[[1, 5], [2, 7]], hidden_size=9, cell_size=15))
    plan = BidirectionalLanguageModeling.data_plan(BilmConfig(), data_cfg, model.config)
    data = prepare_pretraining_data(data_cfg, plan, seed=0)
    size = softmax_size or data.vocab.size
    objective = BidirectionalLanguageModeling(BilmConfig(softmax_size=size, num_negatives=0), model, data.vocab)
    return data, plan.with_transform(objective.batch_transform()), objective, model


def test_an_evaluation_word_missing_from_training_is_read_as_spelled_and_predicted_as_unk(tmp_path):
    data, plan, objective, _ = build(tmp_path)
    assert plan.spellings and OUT_OF_VOCABULARY - {"<UNK>"} <= set(" ".join(VALID).split()) - set(data.vocab.tokens)
    batches = list(eval_loader(data.validation, 1, 1, 0, Collator(data.vocab), plan.transform, 0, 0, streams=True))
    assert len(batches) == (len(streams(VALID)[0]) - 9) // 8 + 1  # windows of 9 words every 8
    expected = dict(zip(("input_ids", "reverse_ids"), streams(VALID), strict=True))
    read = {"input_ids": [], "reverse_ids": []}
    for batch in batches:
        assert not any(key.endswith("_spellings") for key in batch)  # consumed: only tensors go on
        for chars, key, boundary in (
            ("char_ids", "input_ids", objective.eos_id),
            ("backward_char_ids", "reverse_ids", objective.bos_id),
        ):
            read[key] += [spelled(c) for c in batch[chars][0]]
            targets, keep = objective._targets(batch, key, boundary)
            words = expected[key][len(read[key]) - 8 : len(read[key]) + 1]
            for target, kept, word in zip(targets[0].tolist(), keep[0].tolist(), words[1:], strict=True):
                assert not kept or target == (
                    objective.unk_id if word in OUT_OF_VOCABULARY else data.vocab.tokens.index(word)
                )
    for key, words in expected.items():
        assert read[key] == words[: len(read[key])], key
    # The character ids of the new word are those of its spelling, not those of <UNK>.
    position = read["input_ids"].index("Zyzzyva")
    chars = torch.cat([b["char_ids"][0] for b in batches])[position]
    assert chars.tolist() == word_character_ids("Zyzzyva")
    assert chars.tolist() != word_character_ids("<UNK>")


def test_softmax_beyond_vocabulary_and_training_words_missing_from_a_given_vocabulary(tmp_path):
    """A vocabulary given by data.tokenizer.path may lack training words too: training reads them as spelled, in
    stream order across micro-batches and a worker process, and the softmax cut predicts <UNK> for rare words."""
    words = ["the", "cat", "saw", "a", "."]  # "dog", "A", "ran", "to" are missing
    word_tokenizer(words).save(str(tmp_path / "tokenizer.json"))
    data, plan, objective, _ = build(tmp_path, tokenizer_path=str(tmp_path / "tokenizer.json"), softmax_size=6)
    assert objective.softmax_size == 6 and data.vocab.tokens[6] == "a"  # "a" and "." are beyond the softmax
    layout = BatchLayout(batch_size=2, grad_accum_steps=1)
    batches = MicroBatches(data.train, layout, 0, Collator(data.vocab), plan.transform, seed=0, streams=True)
    forward, _ = streams(TRAIN)
    index = {w: i for i, w in enumerate(data.vocab.tokens)}
    per_stream = len(data.train) // 2
    loader = micro_batch_loader(batches, num_workers=1, stop=per_stream)
    for micro, batch in enumerate(loader):
        for row in range(2):
            start = (row * per_stream + micro) * 8
            assert [spelled(c) for c in batch["char_ids"][row]] == forward[start : start + 8]
            targets, keep = objective._targets(batch, "input_ids", objective.eos_id)
            following = forward[start + 1 : start + 9]
            for target, kept, word in zip(targets[row].tolist(), keep[row].tolist(), following, strict=True):
                assert not kept or target == (index[word] if index.get(word, 6) < 6 else objective.unk_id)


def test_overlapping_windows_list_the_spellings_of_their_own_unk_words(tmp_path):
    from plm_toolkit.data.layouts.windows import SentenceStreamWindows
    from plm_toolkit.data.store.preparation import prepare_store
    from plm_toolkit.data.store.token_store import TokenStore

    text = ["the cat saw a dog .", "A Zyzzyva ran .", "the cat ."]
    (tmp_path / "corpus.txt").write_text("\n".join(text) + "\n", encoding="utf-8")
    data_cfg = DataConfig(train_files=[str(tmp_path / "corpus.txt")], cache_dir=str(tmp_path / "cache"))
    data_cfg.tokenizer = TokenizerConfig(kind="word", path=str(tmp_path / "bilm_vocab.json"))
    word_tokenizer(["the", "cat", "."]).save(str(tmp_path / "bilm_vocab.json"))
    store = TokenStore(prepare_store(data_cfg, "sentences", spellings=True))
    windows = SentenceStreamWindows(store.split("train"), 0, 1, length=6, stride=4, unk_id=2)
    forward, backward = streams(text)
    for k in range(len(windows)):
        row = windows[k]
        for key, words in (("input", forward), ("reverse", backward)):
            window = words[4 * k : 4 * k + 6]
            assert row[f"{key}_spellings"] == [w for w in window if w not in ("<S>", "</S>", "the", "cat", ".")]
            assert len(row[f"{key}_ids"]) == 6


def test_spelled_character_ids_leave_padding_and_known_words_to_the_table():
    table = character_table(["<S>", "</S>", "<UNK>", "cat"], 12)
    ids = torch.tensor([[3, 2, 2], [2, 3, 2]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])  # the last <UNK> id of row 1 is padding
    chars = spelled_character_ids(table, ids, mask, 2, [["ox", "gnu", "yak"], ["emu"]])
    assert [[spelled(c) for c in row] for row in chars] == [["cat", "ox", "gnu"], ["emu", "cat", "<UNK>"]]
    assert torch.equal(spelled_character_ids(table, ids, mask, 2, None), table[ids])
    with pytest.raises(ValueError, match="row 1 has 1 unk tokens but 0 spellings"):
        spelled_character_ids(table, ids, mask, 2, [["ox", "gnu"], []])
