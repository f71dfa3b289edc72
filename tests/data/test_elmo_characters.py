"""ELMo's character ids: bilm-tf's byte ids, markers, +1 shift, truncation."""

import torch

from plm_toolkit.data.tokenization.characters import character_ids, character_table, word_character_ids


def test_known_word_is_its_utf8_bytes_between_word_markers_shifted_by_one():
    ids = word_character_ids("Héllo")
    # b"H\xc3\xa9llo": 72, 195, 169, 108, 108, 111; begin-of-word 258, end-of-word 259, padding 260; all + 1.
    assert ids[:9] == [259, 73, 196, 170, 109, 109, 112, 260, 261]
    assert ids[9:] == [261] * 41
    assert len(ids) == 50


def test_sentence_markers_are_single_characters():
    assert word_character_ids("<S>")[:4] == [259, 257, 260, 261]
    assert word_character_ids("</S>")[:4] == [259, 258, 260, 261]
    # A word that only looks similar is spelled out.
    assert word_character_ids("<s>")[:5] == [259, ord("<") + 1, ord("s") + 1, ord(">") + 1, 260]


def test_long_word_is_cut_to_48_bytes_even_inside_a_character():
    word = "a" * 47 + "é" + "b" * 10  # the 48th and 49th bytes are é's two bytes
    ids = word_character_ids(word)
    assert ids[1:48] == [ord("a") + 1] * 47
    assert ids[48] == 0xC3 + 1  # the first byte of é, its second byte cut off as bilm-tf slices bytes
    assert ids[49] == 260  # end-of-word
    assert word_character_ids("x" * 200) == word_character_ids("x" * 48)


def test_text_without_letters_and_padding_tokens():
    batch = character_ids([["...", "!!"], ["--"]])
    assert batch.shape == (2, 2, 50)
    assert batch[0, 0, :5].tolist() == [259, 47, 47, 47, 260]
    assert torch.equal(batch[1, 1], torch.zeros(50, dtype=torch.long))  # a padding token is all zeros (masked)
    assert character_ids([]).shape == (0, 0, 50)
    assert torch.equal(character_table(["ab", "<S>"]).long(), character_ids([["ab", "<S>"]])[0])
