"""The permutation-LM batch transform: layout, target fraction ~ 1/K, a leakage-free permutation mask; validation;
the loss."""

import pytest
import torch
from hydra import compose, initialize_config_module

import plm_toolkit.commands.train  # noqa: F401  (registers schemas and registries)
from plm_toolkit.config.train_checks import problems
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.models.xlnet import XLNet, XLNetConfig
from plm_toolkit.objectives.permutation_lm import (
    PermutationLanguageModeling,
    PermutationTransform,
    PlmConfig,
    local_order,
)

VOCAB = Vocab(size=101, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4)


def sample(rows=64, seq_len=48, seed=0, **config):
    config = PlmConfig(**{"reuse_len": 16, "perm_size": 8, **config})
    windows = torch.randint(5, 101, (rows, seq_len - 3), generator=torch.Generator().manual_seed(seed))
    return windows, PermutationTransform(config, VOCAB)({"input_ids": windows}, [seed * 1000 + i for i in range(rows)])


def test_layout_reuse_a_sep_b_sep_cls():
    windows, batch = sample(rows=8)
    for window, ids, types in zip(windows, batch["input_ids"], batch["token_type_ids"], strict=True):
        assert ids[-1] == VOCAB.cls_id and ids[-2] == VOCAB.sep_id
        first_sep = int((ids == VOCAB.sep_id).nonzero()[0])
        assert 16 < first_sep < len(ids) - 3
        body = torch.cat([ids[:first_sep], ids[first_sep + 1 : -2]])
        assert torch.equal(body, window)  # the window's text, in order, around the separators
        assert (types[: first_sep + 1] == 0).all() and (types[first_sep + 1 : -1] == 1).all() and types[-1] == 2


def test_fraction_predicted_is_about_one_over_k():
    for k in (6.0, 4.0):
        _, batch = sample(rows=400, seq_len=64, partial_prediction_k=k, reuse_len=32, perm_size=16)
        fraction = batch["target_mask"].sum().item() / (400 * 61)  # SEP, SEP, CLS are never predicted
        assert abs(fraction - 1 / k) < 0.02, (k, fraction)


def test_permutation_mask_is_leakage_free_over_many_samples():
    _, batch = sample(rows=200)
    sep_or_cls = (batch["input_ids"] == VOCAB.sep_id) | (batch["input_ids"] == VOCAB.cls_id)
    for row in range(200):
        blocked = batch["perm_mask"][row]  # (T, T): True = may not see
        mapping = batch["target_mapping"][row][batch["target_mask"][row]]  # (n, T)
        targets = mapping.sum(0).bool()
        assert torch.equal(mapping.argmax(-1), targets.nonzero().squeeze(1))  # one row per target, in order
        assert not (targets & sep_or_cls[row]).any()
        context = ~targets & ~sep_or_cls[row]
        # Everyone sees the context of its part (the rest also the reused part's): targets come last in the order.
        assert not blocked[:, :16][:, context[:16]].any() and not blocked[16:, 16:][:, context[16:]].any()
        same_part = torch.zeros_like(blocked)
        same_part[:16, :16] = same_part[16:, 16:] = True
        assert blocked[context][:, targets][same_part[context][:, targets]].all()  # context sees no target of its part
        assert blocked[:16, 16:].all()  # the reused part never sees the rest (its states become memory)
        sees = ~blocked[targets][:, targets]  # (n, n) target i sees target j
        assert not sees.diagonal().any()  # the query stream never sees its own token
        # "Sees" among targets is a strict order: antisymmetric and transitive, i.e. one factorization order.
        assert not (sees & sees.T).any()
        assert torch.equal((sees.float() @ sees.float() > 0) & ~sees, torch.zeros_like(sees))


def test_local_order_shuffles_offsets_within_blocks():
    rank = local_order(12, 4, torch.Generator().manual_seed(0))
    assert sorted(rank.tolist()) == list(range(12))
    blocks = rank.view(3, 4)
    assert torch.equal(blocks - blocks[:, :1], (blocks - blocks[:, :1])[0].expand(3, 4))  # same shuffle per block
    assert torch.equal(blocks // 4, torch.arange(3)[:, None].expand(3, 4))


def test_rows_depend_on_their_seed_only():
    windows, batch = sample(rows=6, seed=1)
    transform = PermutationTransform(PlmConfig(reuse_len=16, perm_size=8), VOCAB)
    alone = transform({"input_ids": windows[2:3]}, [1002])
    assert torch.equal(alone["perm_mask"][0], batch["perm_mask"][2])
    n = int(alone["target_mask"].sum())
    assert torch.equal(alone["target_ids"][0, :n], batch["target_ids"][2, :n])


def compose_cfg(*overrides):
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        return compose("train", overrides=list(overrides))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model=xlnet_tiny", "data.max_seq_len=63"], "data.max_seq_len=63: permutation LM needs an even"),
        (["model=xlnet_tiny", "objective.reuse_len=16", "objective.perm_size=32"], "at most objective.reuse_len"),
        (["model=xlnet_tiny", "objective.reuse_len=24", "objective.perm_size=16"], "must divide"),
        (["model=bert_tiny", "objective=plm"], "objective=plm needs a model that is two_stream"),
        (["model=xlnet_tiny", "data.packing=full_sentences"], "objective=plm needs streams"),
    ],
)
def test_validation_names_the_keys(overrides, message):
    found = problems(compose_cfg(*overrides))
    assert any(message in p for p in found), found


def test_loss_sums_over_targets():
    torch.manual_seed(0)
    model = XLNet(
        XLNetConfig(
            vocab_size=101, hidden_size=36, num_layers=1, num_heads=3, head_size=11, intermediate_size=37, mem_len=8
        )
    )
    objective = PermutationLanguageModeling(PlmConfig(reuse_len=16, perm_size=8), model, VOCAB)
    _, batch = sample(rows=3)
    out = objective(model, batch)
    n = objective.target_counts(batch)["plm"]
    assert n == int(batch["target_mask"].sum()) > 0
    assert abs(out.loss_sums["plm"].item() / n - torch.log(torch.tensor(101.0)).item()) < 0.5
    # Training carries the reused prefix's memory to the next batch; evaluation starts from none.
    assert objective.carried_state()["memory.0"].shape == (3, 8, 36)
    objective.eval()
    assert objective.memory.get(False, batch) is None


def test_bi_data_reverses_the_second_half_of_the_batch():
    windows = torch.arange(5, 5 + 4 * 13).view(4, 13)
    transform = PermutationTransform(PlmConfig(reuse_len=8, perm_size=4), VOCAB, bi_data=True)
    batch = transform({"input_ids": windows}, [0, 1, 2, 3])
    assert torch.equal(batch["input_ids"][0, :8], windows[0, :8])
    assert torch.equal(batch["input_ids"][3, :8], windows[3].flip(0)[:8])
    model = XLNet(
        XLNetConfig(
            vocab_size=101,
            hidden_size=36,
            num_layers=1,
            num_heads=3,
            head_size=11,
            intermediate_size=37,
            mem_len=8,
            bi_data=True,
        )
    )
    assert PermutationLanguageModeling(PlmConfig(), model, VOCAB).backward_half
