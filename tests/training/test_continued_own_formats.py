"""Continued pretraining from the formats transformers does not have: a plm-train checkpoint (Transformer-XL: its
weights and its objective's head carried over as they were saved) and a bilm-tf folder (ELMo, its softmax where the
weights file holds one)."""

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from plm_toolkit.commands.train import run
from plm_toolkit.core import checkpoint as ckpt
from tests.commands.test_train_xl import COMMON, XL
from tests.training.test_continued_pretraining import first_batch

XL_RUN = [*XL["transformer_xl"], *COMMON, "trainer.max_steps=2"]


@pytest.mark.slow
def test_a_plm_train_checkpoint_continues_with_its_weights_and_head(make_config, tmp_path, caplog):
    run(make_config(*XL_RUN, tiny=False), tmp_path / "xl")
    step = ckpt.plm_checkpoint_dir(tmp_path / "xl")
    with caplog.at_level("INFO", logger="plm_toolkit"):
        _, losses, model, objective = first_batch(make_config, tmp_path / "xl", tmp_path / "run")
    line = next(r.getMessage() for r in caplog.records if "heads loaded" in r.getMessage())
    assert "(plm_train)" in line and "objective=clm heads loaded: bias; new: none" in line
    for module, name in ((model, ckpt.MODEL_FILE), (objective, ckpt.OBJECTIVE_FILE)):
        saved = load_file(str(step / name))
        assert saved and all(torch.equal(module.state_dict()[k], v) for k, v in saved.items())
    assert set(losses) == {"clm"}


def test_a_bilm_tf_folder_continues_with_its_softmax(make_config, small_corpus, tmp_path, caplog):
    h5py = pytest.importorskip("h5py")
    from plm_toolkit.data.tokenization.word_vocabulary import train_word_tokenizer
    from plm_toolkit.interop.elmo_bilm_tf import export_bilm_tf
    from plm_toolkit.models.elmo import Elmo, ElmoConfig

    tokenizer = train_word_tokenizer(Path(small_corpus["train"]).read_text().splitlines())
    config = ElmoConfig(char_embedding_size=4, filters=[[1, 5], [2, 7]], num_highway=1, hidden_size=11, cell_size=17)
    folder = export_bilm_tf(tmp_path / "elmo", Elmo(config), tokenizer)
    softmax = torch.randn(tokenizer.get_vocab_size(), 11), torch.randn(tokenizer.get_vocab_size())
    with h5py.File(next(folder.glob("*weights*.hdf5")), "a") as weights:  # as bilm-tf's training checkpoint has it
        weights["softmax/W"], weights["softmax/b"] = softmax[0].numpy(), softmax[1].numpy()
    with caplog.at_level("INFO", logger="plm_toolkit"):
        _, losses, _, objective = first_batch(
            make_config, folder, tmp_path / "run", "objective=bilm", "data.max_seq_len=12"
        )
    line = next(r.getMessage() for r in caplog.records if "heads loaded" in r.getMessage())
    assert "objective=bilm heads loaded: softmax_weight, softmax_bias; new: none" in line
    assert torch.equal(objective.softmax_weight, softmax[0]) and torch.equal(objective.softmax_bias, softmax[1])
    assert losses["bilm"] > 0


def test_ernie_for_pretraining_gives_knowledge_masking_its_mlm_head(tmp_path, caplog):
    """ERNIE's objective reads the MLM head of ErnieForPreTraining; its NSP head has no place there and is dropped."""
    transformers = pytest.importorskip("transformers")
    from plm_toolkit.data.tokenization.vocab import Vocab
    from plm_toolkit.models.ernie import Ernie
    from plm_toolkit.objectives.knowledge_masking import KnowledgeMasking, KnowledgeMaskingConfig
    from plm_toolkit.training.continued import load_starting_weights, read_starting_point
    from tests.interop.test_hf_ernie import hf_config, randomized, save_hf

    reference = randomized(transformers.ErnieForPreTraining(hf_config()))
    start = read_starting_point(save_hf(reference, tmp_path / "hf"))
    model = Ernie(start.model_config)
    vocab = Vocab(size=start.model_config.vocab_size, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4)
    objective = KnowledgeMasking(KnowledgeMaskingConfig(total_steps=10), model, vocab)
    with caplog.at_level("INFO", logger="plm_toolkit"):
        load_starting_weights(start, model, objective, "knowledge_masking")
    assert "heads loaded: head; new: none; dropped (no part of objective=knowledge_masking): nsp.head" in caplog.text
    predictions = reference.cls.predictions
    assert torch.equal(objective.head.dense.weight, predictions.transform.dense.weight)
    assert torch.equal(objective.head.bias, predictions.bias)
    assert torch.equal(model.input_embeddings.weight, reference.ernie.embeddings.word_embeddings.weight)
