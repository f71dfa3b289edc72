"""plm-train model.checkpoint=PATH continues a released checkpoint: the first batch's loss is transformers' loss of
the same checkpoint on the same batch (the weights and heads were continued, not replaced), and a continued run
exported with plm-export loads in transformers and computes what ours does, its tokenizer giving the same ids."""

import pytest
import torch
from omegaconf import OmegaConf

from plm_toolkit.commands.train import build_model
from plm_toolkit.config.resolve import resolve_run
from plm_toolkit.core import registry
from plm_toolkit.data.batching.collate import Collator
from plm_toolkit.data.batching.loader import eval_loader
from plm_toolkit.data.build import build_run_data
from plm_toolkit.objectives.masking import IGNORE_INDEX
from plm_toolkit.objectives.rtd import flat_targets, gumbel_sample, rtd_labels
from plm_toolkit.training.continued import adopt_checkpoint, load_starting_weights
from tests.training import released

transformers = pytest.importorskip("transformers")
TOLERANCE = 1e-5


def first_batch(make_config, folder, run_dir, *overrides):
    """What plm-train builds from ``model.checkpoint=folder`` and its first batch (the validation's, fixed masks),
    with each loss component's mean over its targets, in evaluation mode (no dropout)."""
    cfg = make_config(f"model.checkpoint={folder}", "data.max_seq_len=32", *overrides, tiny=False)
    run_dir.mkdir(parents=True, exist_ok=True)
    start = adopt_checkpoint(cfg, run_dir, overrides=list(overrides))  # as the command line gives them
    resolved = resolve_run(cfg)
    data = build_run_data(resolved.data, resolved.plan, cfg.trainer.seed)
    torch.manual_seed(0)
    model, _ = build_model(cfg.model, data.vocab.size, vocab=data.vocab)
    entry = registry.OBJECTIVES.get(cfg.objective.name)
    objective = entry.builder(OmegaConf.to_object(cfg.objective), model, data.vocab)
    load_starting_weights(start, model, objective, cfg.objective.name)
    plan = resolved.plan.with_transform(objective.batch_transform())
    batch = next(iter(eval_loader(data.validation, 3, 1, 0, Collator(data.vocab), plan.transform, 0, 1)))
    model.eval(), objective.eval()
    with torch.no_grad():
        out = objective(model, batch)
    counts = objective.target_counts(batch)
    return batch, {name: (value / counts[name]).item() for name, value in out.loss_sums.items()}, model, objective


def hf_loss(model, **inputs) -> float:
    with torch.no_grad():
        return model(**inputs).loss.item()


def masked(batch):
    return {
        "input_ids": batch["input_ids"],
        "attention_mask": batch["attention_mask"],
        "labels": batch["mlm_labels"],
    }


def test_bert_for_pretraining(make_config, tmp_path):
    folder = released.bert(transformers, tmp_path / "hf")
    batch, losses, _, _ = first_batch(make_config, folder, tmp_path / "run")
    assert set(losses) == {"mlm", "nsp"}
    reference = transformers.BertForPreTraining.from_pretrained(folder).eval()
    theirs = hf_loss(
        reference,
        **masked(batch),
        token_type_ids=batch["token_type_ids"],
        next_sentence_label=batch["next_sentence_label"],
    )
    assert abs(losses["mlm"] + losses["nsp"] - theirs) <= TOLERANCE


def test_bert_model_only_folder_gets_a_tied_decoder_and_a_fresh_transform(make_config, tmp_path, caplog):
    """all-MiniLM-L6-v2's layout: no heads. The decoder is the word embeddings (tied), the transform new."""
    folder = released.bert(transformers, tmp_path / "hf", cls_name="BertModel")
    with caplog.at_level("INFO", logger="plm_toolkit"):
        _, losses, model, objective = first_batch(make_config, folder, tmp_path / "run", "objective=mlm")
    line = next(r.getMessage() for r in caplog.records if "heads loaded" in r.getMessage())
    assert "heads loaded: none; new: head" in line
    reference = transformers.BertModel.from_pretrained(folder)
    assert torch.equal(model.input_embeddings.weight, reference.embeddings.word_embeddings.weight)
    assert torch.count_nonzero(objective.head.bias) == 0  # BERT's init: a zero output bias
    assert losses["mlm"] > 0


def test_a_head_of_another_objective_is_dropped_with_a_log_line(make_config, tmp_path, caplog):
    folder = released.bert(transformers, tmp_path / "hf")
    with caplog.at_level("INFO", logger="plm_toolkit"):
        batch, losses, _, _ = first_batch(make_config, folder, tmp_path / "run", "objective=mlm")
    line = next(r.getMessage() for r in caplog.records if "heads loaded" in r.getMessage())
    assert "heads loaded: head; new: none; dropped (no part of objective=mlm): nsp.head" in line
    reference = transformers.BertForMaskedLM.from_pretrained(folder).eval()
    theirs = hf_loss(reference, **masked(batch), token_type_ids=batch["token_type_ids"])
    assert abs(losses["mlm"] - theirs) <= TOLERANCE


def test_roberta_for_masked_lm(make_config, tmp_path):
    folder = released.roberta(transformers, tmp_path / "hf")
    batch, losses, _, _ = first_batch(make_config, folder, tmp_path / "run")
    reference = transformers.RobertaForMaskedLM.from_pretrained(folder).eval()
    assert abs(losses["mlm"] - hf_loss(reference, **masked(batch))) <= TOLERANCE


def test_albert_for_pretraining(make_config, tmp_path):
    folder = released.albert(transformers, tmp_path / "hf")
    batch, losses, _, _ = first_batch(make_config, folder, tmp_path / "run")
    assert set(losses) == {"mlm", "sop"}
    reference = transformers.AlbertForPreTraining.from_pretrained(folder).eval()
    theirs = hf_loss(
        reference, **masked(batch), token_type_ids=batch["token_type_ids"], sentence_order_label=batch["sop_label"]
    )
    assert abs(losses["mlm"] + losses["sop"] - theirs) <= TOLERANCE


def test_electra_discriminator_and_generator(make_config, tmp_path):
    folder = released.electra(transformers, tmp_path / "hf")
    batch, losses, model, objective = first_batch(make_config, folder, tmp_path / "run")
    generator = transformers.ElectraForMaskedLM.from_pretrained(folder / "generator").eval()
    types = batch["token_type_ids"]
    assert abs(losses["mlm"] - hf_loss(generator, **masked(batch), token_type_ids=types)) <= TOLERANCE
    # The discriminator sees the generator's samples: drawn as evaluation draws them (seed 0).
    with torch.no_grad():
        logits = objective.generator_logits(model, batch)
    sampled = gumbel_sample(logits / objective.temperature, torch.Generator().manual_seed(0))
    positions = flat_targets(batch["mlm_labels"], batch)
    corrupted, replaced = rtd_labels(
        batch["input_ids"], batch["mlm_labels"], sampled, positions, batch["attention_mask"]
    )
    discriminator = transformers.ElectraForPreTraining.from_pretrained(folder).eval()
    theirs = hf_loss(
        discriminator,
        input_ids=corrupted,
        attention_mask=batch["attention_mask"],
        token_type_ids=types,
        labels=replaced.long(),
    )
    assert abs(losses["rtd"] / objective.rtd_weight - theirs) <= TOLERANCE


@pytest.mark.parametrize("family", ["gpt2", "gpt"])
def test_gpt_lm_heads(make_config, tmp_path, family):
    folder = getattr(released, family)(transformers, tmp_path / "hf")
    batch, losses, _, _ = first_batch(make_config, folder, tmp_path / "run")
    cls = transformers.GPT2LMHeadModel if family == "gpt2" else transformers.OpenAIGPTLMHeadModel
    reference = cls.from_pretrained(folder).eval()
    ids, mask = batch["input_ids"], batch["attention_mask"]  # (B, T + 1): inputs and, shifted, their targets
    labels = ids.masked_fill(mask == 0, IGNORE_INDEX)
    inputs = {"input_ids": ids, "labels": labels}
    if family == "gpt2":
        inputs["attention_mask"] = mask
    assert abs(losses["clm"] - hf_loss(reference, **inputs)) <= TOLERANCE


@pytest.mark.parametrize("version", ["v1.0", "v1.1"])
def test_t5_lm_head(make_config, tmp_path, version):
    folder = released.t5(transformers, tmp_path / "hf", version)
    batch, losses, _, _ = first_batch(make_config, folder, tmp_path / "run")
    reference = transformers.T5ForConditionalGeneration.from_pretrained(folder).eval()
    theirs = hf_loss(
        reference,
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        decoder_input_ids=batch["decoder_input_ids"],
        labels=batch["labels"],
    )
    assert abs(losses["span_corruption"] - theirs) <= TOLERANCE


def test_xlnet_lm_head(make_config, tmp_path):
    folder = released.xlnet(transformers, tmp_path / "hf")
    batch, losses, _, _ = first_batch(make_config, folder, tmp_path / "run")
    reference = transformers.XLNetLMHeadModel.from_pretrained(folder).eval()
    theirs = hf_loss(
        reference,
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        token_type_ids=batch["token_type_ids"],
        perm_mask=batch["perm_mask"],
        target_mapping=batch["target_mapping"],
        labels=batch["target_ids"].masked_fill(~batch["target_mask"].bool(), IGNORE_INDEX),
    )
    assert abs(losses["plm"] - theirs) <= TOLERANCE
