"""plm-embed: allennlp's HDF5 layout, ELMo's carried states (the released fixtures), first sub-words for BERT."""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from plm_toolkit.core.errors import DataError
from plm_toolkit.interop.elmo_bilm_tf import export_bilm_tf
from plm_toolkit.interop.pretrained import load_backbone
from plm_toolkit.models.elmo import Elmo, ElmoConfig
from tests.tasks.conftest import save_tiny_checkpoint, tiny_tokenizer

h5py = pytest.importorskip("h5py")


def embed(*keys: str):
    """plm-embed in-process through Hydra, as the console script runs it."""
    from hydra import compose, initialize_config_module

    from plm_toolkit.commands.embed import embed_file

    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        return embed_file(compose("embed", overrides=[*keys, "progress_bar=false", "device=cpu"]))


@pytest.fixture(scope="module")
def tiny_elmo(tmp_path_factory):
    torch.manual_seed(0)
    config = ElmoConfig(
        char_embedding_size=4, filters=[[1, 5], [2, 7]], num_highway=1, hidden_size=11, cell_size=17, num_layers=2
    )
    return export_bilm_tf(tmp_path_factory.mktemp("elmo"), Elmo(config))


def test_elmo_shapes_for_all_top_and_average(tiny_elmo, tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("The cat sat .\n... !!! ???\n" + "x" * 80 + " long\n")  # no letters; a word over 50 bytes
    embed(f"checkpoint={tiny_elmo}", f"input_file={text}", f"output_file={tmp_path / 'all.hdf5'}")
    with h5py.File(tmp_path / "all.hdf5") as f:
        assert [f[k].shape for k in ("0", "1", "2")] == [(3, 4, 22), (3, 3, 22), (3, 2, 22)]
        index = json.loads(f["sentence_to_index"][0])
        assert index["... !!! ???"] == "1"
        every = f["0"][...]
        # Layer 0 is the token representation twice ([x; x]).
        np.testing.assert_array_equal(every[0, :, :11], every[0, :, 11:])
    embed(f"checkpoint={tiny_elmo}", f"input_file={text}", f"output_file={tmp_path / 'top.safetensors'}", "layers=top")
    embed(f"checkpoint={tiny_elmo}", f"input_file={text}", f"output_file={tmp_path / 'avg.hdf5'}", "layers=average")
    top = load_file(str(tmp_path / "top.safetensors"))
    assert top["0"].shape == (4, 22) and top["2"].shape == (2, 22)
    np.testing.assert_allclose(top["0"].numpy(), every[-1], atol=1e-6)
    with h5py.File(tmp_path / "avg.hdf5") as f:
        np.testing.assert_allclose(f["0"][...], every.mean(axis=0), atol=1e-6)


def test_elmo_embeddings_match_the_released_biLM_with_states_carried(shared_data, tmp_path):
    folder = shared_data / "elmo"
    if not (folder / "lm_weights.hdf5").is_file():
        pytest.skip("no ELMo fixtures in shared data")
    lists = json.loads((folder / "sentences.json").read_text())
    # Lines in the fixtures' batch order: batch i (3 lines) holds sentence i of each list.
    (tmp_path / "in.txt").write_text("".join(f"{lists[k][i]}\n" for i in range(10) for k in range(3)))
    embed(
        f"checkpoint={folder}",
        f"input_file={tmp_path / 'in.txt'}",
        f"output_file={tmp_path / 'out.hdf5'}",
        "layers=top",
        "batch_size=3",
    )
    with h5py.File(tmp_path / "out.hdf5") as got:
        for k in range(3):
            with h5py.File(folder / f"lm_embeddings_{k}.hdf5") as expected:
                for i in range(10):
                    want = np.concatenate(list(expected[str(i)][...]), axis=-1)
                    assert np.allclose(got[str(3 * i + k)][...], want, atol=1e-6)


def test_bert_words_are_their_first_sub_word(tmp_path):
    texts = ["the unbelievable cat sat on the mat", "a dog ran", "zyzzyva quixotically"] * 20
    tokenizer = tiny_tokenizer(texts, vocab_size=60)
    checkpoint = save_tiny_checkpoint(tmp_path / "bert", tokenizer)
    (tmp_path / "in.txt").write_text("the unbelievable cat\nzyzzyva quixotically sat\n")
    embed(f"checkpoint={checkpoint}", f"input_file={tmp_path / 'in.txt'}", f"output_file={tmp_path / 'out.hdf5'}")
    loaded = load_backbone(checkpoint)
    encoding = loaded.tokenizer.encode("zyzzyva quixotically sat")
    assert len(encoding.ids) > 5  # the rare words are cut into several sub-words
    with torch.no_grad():
        reps = loaded.model.eval()(torch.tensor([encoding.ids]), output_all_hidden=True)
    firsts = [encoding.word_ids.index(w) for w in range(3)]
    expected = torch.stack(reps.all_hidden)[:, 0, firsts].numpy()  # (layers, words, hidden)
    with h5py.File(tmp_path / "out.hdf5") as f:
        assert f["0"].shape == (3, 3, 36)  # embeddings + 2 layers, 3 words, hidden 36
        np.testing.assert_allclose(f["1"][...], expected, atol=1e-5)


def test_bad_inputs_name_the_problem(tiny_elmo, tmp_path):
    (tmp_path / "blank.txt").write_text("one line\n\nthird\n")
    with pytest.raises(DataError, match=r"blank.txt:2: empty line"):
        embed(f"checkpoint={tiny_elmo}", f"input_file={tmp_path / 'blank.txt'}", f"output_file={tmp_path / 'o.h5'}")
    assert not (tmp_path / "o.h5").exists()
