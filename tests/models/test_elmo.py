"""ELMo: the released biLM's outputs (bilm-tf fixtures), one-sidedness of each direction, carried states, export."""

import json

import numpy as np
import pytest
import torch

from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.data.tokenization.characters import character_ids
from plm_toolkit.models.elmo import Elmo, ElmoConfig

h5py = pytest.importorskip("h5py")


def tiny(**overrides) -> Elmo:
    config = dict(
        char_embedding_size=5,
        filters=[[1, 7], [2, 9], [3, 11]],
        num_highway=1,
        hidden_size=13,
        cell_size=29,
        num_layers=2,
        dropout=0.0,
        cell_clip=3.0,
        projection_clip=3.0,
    )
    config.update(overrides)
    return Elmo(ElmoConfig(**config)).eval()


def sentences(n: int = 3, length: int = 9) -> list[list[str]]:
    rng = np.random.default_rng(0)
    words = ["the", "cat", "sat", "on", "a", "mat", ".", "Zürich", "1984", "--"]
    return [["<S>", *rng.choice(words, size=length - 2 - i).tolist(), "</S>"] for i in range(n)]


@pytest.fixture
def released(shared_data):
    from plm_toolkit.interop.elmo_bilm_tf import import_bilm_tf

    folder = shared_data / "elmo"
    if not (folder / "lm_weights.hdf5").is_file():
        pytest.skip("no ELMo fixtures in shared data")
    return folder, import_bilm_tf(folder).eval()


def test_token_encoder_matches_bilm_tf(released):
    folder, model = released
    words = (folder / "vocab_test.txt").read_text().strip().split("\n")
    with torch.no_grad():
        tokens = model.token_encoder(character_ids([words])[0]).numpy()  # (458, 16)
    with h5py.File(folder / "elmo_token_embeddings.hdf5") as f:
        expected = f["embedding"][...]
    assert tokens.shape == expected.shape
    assert np.abs(tokens - expected).max() <= 1e-6


def test_top_layer_matches_bilm_tf_with_states_carried_across_batches(released):
    """As the fixtures were made: batch i holds sentence i of each of the three lists, states carried."""
    folder, model = released
    lists = json.loads((folder / "sentences.json").read_text())
    expected = [h5py.File(folder / f"lm_embeddings_{k}.hdf5") for k in range(3)]
    states, worst = None, 0.0
    for i in range(10):
        batch = [["<S>", *lists[k][i].split(), "</S>"] for k in range(3)]
        with torch.no_grad():
            reps = model(character_ids(batch), memories=states)
        states = reps.memories
        for k in range(3):
            got = reps.hidden[k, 1 : len(batch[k]) - 1].numpy()  # sentence boundaries removed
            want = np.concatenate(list(expected[k][str(i)][...]), axis=-1)  # [forward; backward]
            # allennlp's criterion (numpy's default rtol 1e-5): the float32 reference itself is up to 1.1e-6 from
            # a float64 recomputation, so a pure 1e-6 bound cannot hold for every value.
            assert np.allclose(got, want, atol=1e-6), (i, k, np.abs(got - want).max())
            worst = max(worst, float(np.abs(got - want).max()))
    assert worst < 2e-6
    # Without the carried states the later batches differ: the fixture really tests statefulness.
    with torch.no_grad():
        fresh = model(character_ids([["<S>", *lists[0][9].split(), "</S>"]])).hidden[0, 1:-1].numpy()
    assert np.abs(fresh - np.concatenate(list(expected[0]["9"][...]), axis=-1)).max() > 1e-3


def test_forward_never_sees_later_tokens_and_backward_never_earlier():
    model = tiny()
    chars = character_ids(sentences(1, 9))
    changed = character_ids([["<S>", "the", "cat", "sat", "XYZ", "mat", "on", "a", "</S>"]])
    chars[0, 4] = changed[0, 4]  # a different word at position 4
    base = character_ids(sentences(1, 9))
    with torch.no_grad():
        a, b = model(base, output_all_hidden=True), model(chars, output_all_hidden=True)
    for name, before, after in (("forward", slice(0, 4), slice(4, 9)), ("backward", slice(5, 9), slice(0, 5))):
        torch.testing.assert_close(a.extras[name][0, before], b.extras[name][0, before], atol=0, rtol=0)
        assert (a.extras[name][0, after] - b.extras[name][0, after]).abs().max() > 1e-4
    assert len(a.all_hidden) == 3 and all(h.shape == (1, 9, 26) for h in a.all_hidden)


def test_padding_changes_nothing_and_states_continue_a_sentence():
    model = tiny()
    batch = sentences(3, 9)
    with torch.no_grad():
        together = model(character_ids(batch))
        alone = model(character_ids(batch[2:]))
        n = len(batch[2])
        torch.testing.assert_close(together.hidden[2, :n], alone.hidden[0], atol=1e-6, rtol=1e-5)
        assert together.hidden[2, n:].abs().max() == 0
        # The forward direction over two halves with carried states equals one pass over the whole row.
        first = model(character_ids([batch[0][:4]]))
        second = model(character_ids([batch[0][4:]]), memories=first.memories)
        torch.testing.assert_close(
            torch.cat([first.extras["forward"], second.extras["forward"]], dim=1)[0],
            together.extras["forward"][0],
            atol=1e-6,
            rtol=1e-5,
        )


def test_export_then_import_gives_the_same_model(tmp_path):
    from plm_toolkit.interop.elmo_bilm_tf import export_bilm_tf, import_bilm_tf

    model = tiny(num_layers=3, residual=True)
    export_bilm_tf(tmp_path, model)
    back = import_bilm_tf(tmp_path).eval()
    chars = character_ids(sentences())
    with torch.no_grad():
        torch.testing.assert_close(back(chars).hidden, model(chars).hidden, atol=1e-6, rtol=1e-6)


def test_bad_bilm_tf_files_name_what_is_wrong(tmp_path):
    from plm_toolkit.interop.elmo_bilm_tf import export_bilm_tf, import_bilm_tf

    export_bilm_tf(tmp_path, tiny())
    options = json.loads((tmp_path / "options.json").read_text())
    del options["lstm"]["projection_dim"]
    (tmp_path / "options.json").write_text(json.dumps(options))
    with pytest.raises(CheckpointError, match="missing field 'lstm.projection_dim'"):
        import_bilm_tf(tmp_path)
    options["lstm"]["projection_dim"] = "13"
    (tmp_path / "options.json").write_text(json.dumps(options))
    with pytest.raises(CheckpointError, match="'lstm.projection_dim' is '13'; expected an integer"):
        import_bilm_tf(tmp_path)
    options["lstm"]["projection_dim"] = 14  # the weights were written for 13
    (tmp_path / "options.json").write_text(json.dumps(options))
    with pytest.raises(CheckpointError, match=r"dataset 'char_embed'|has shape .* the options imply"):
        import_bilm_tf(tmp_path)
    options["lstm"]["projection_dim"] = 13
    (tmp_path / "options.json").write_text(json.dumps(options))
    with h5py.File(tmp_path / "weights.hdf5", "a") as f:
        del f["CNN_high_0/W_carry"]
    with pytest.raises(CheckpointError, match="no dataset 'CNN_high_0/W_carry'"):
        import_bilm_tf(tmp_path)
