"""XLNet: content-stream memory equals the concatenated context; the query stream never sees its own token nor a
later target of its factorization order; fine-tuning runs the content stream alone."""

import torch

from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.models.xlnet import XLNet, XLNetConfig
from plm_toolkit.objectives.permutation_lm import PermutationTransform, PlmConfig

VOCAB = Vocab(size=61, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4)


def tiny(**overrides) -> XLNet:
    config = dict(
        vocab_size=61,
        hidden_size=36,
        num_layers=2,
        num_heads=3,
        head_size=11,
        intermediate_size=37,
        mem_len=16,
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    config.update(overrides)
    torch.manual_seed(0)
    return XLNet(XLNetConfig(**config)).eval()


def test_content_stream_with_memory_equals_forward_over_concatenated_context():
    model = tiny()
    ids = torch.randint(5, 61, (2, 14))
    first, second = ids[:, :6], ids[:, 6:]
    # Over the concatenation, the first segment must not see the second (it was encoded before it existed).
    perm_mask = torch.zeros(2, 14, 14)
    perm_mask[:, :6, 6:] = 1
    types = torch.zeros(2, 14, dtype=torch.long)
    types[:, 10:] = 1  # a second segment inside the current one; memory counts as segment 0
    with torch.no_grad():
        full = model(ids, token_type_ids=types, perm_mask=perm_mask).hidden
        cached = model(first, token_type_ids=types[:, :6])
        later = model(second, token_type_ids=types[:, 6:], memories=cached.memories)
    torch.testing.assert_close(cached.hidden, full[:, :6], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(later.hidden, full[:, 6:], atol=1e-5, rtol=1e-5)


def test_memory_keeps_reused_prefix_only():
    model = tiny(mem_len=5)
    out = model(torch.randint(5, 61, (2, 8)), reuse_len=3)
    assert [m.shape for m in out.memories] == [(2, 3, 36)] * 2
    again = model(torch.randint(5, 61, (2, 8)), memories=out.memories, reuse_len=3)
    assert again.memories[0].shape == (2, 5, 36) and torch.equal(again.memories[0][:, :2], out.memories[0][:, 1:])


def input_gradients(model, batch, stream_row):
    """d(stream_row output) / d(each input position's embedding) as a (T,) norm."""
    captured = {}

    def keep(module, args, output):
        output.retain_grad()
        captured["x"] = output

    handle = model.word_embedding.register_forward_hook(keep)
    out = model(
        batch["input_ids"][:1],
        token_type_ids=batch["token_type_ids"][:1],
        perm_mask=batch["perm_mask"][:1],
        target_mapping=batch["target_mapping"][:1],
    )
    handle.remove()
    stream, row = stream_row
    states = out.extras["query"] if stream == "query" else out.hidden
    # A plain sum of a LayerNorm output is constant: project on a random direction.
    (states[0, row] * torch.randn(states.shape[-1])).sum().backward()
    return captured["x"].grad[0].abs().sum(-1)  # (T,)


def test_query_stream_does_not_see_its_own_token_nor_later_targets():
    model = tiny()
    transform = PermutationTransform(PlmConfig(reuse_len=8, perm_size=4), VOCAB)
    checked = 0
    for seed in range(4):
        windows = torch.randint(5, 61, (1, 21), generator=torch.Generator().manual_seed(seed))
        batch = transform({"input_ids": windows}, [seed])
        perm = batch["perm_mask"][0]
        positions = batch["target_mapping"][0].argmax(-1)[batch["target_mask"][0]]  # (n,) target positions
        for p, z in enumerate(positions.tolist()):
            grad = input_gradients(model, batch, ("query", p))
            assert grad[z] == 0, "the query stream saw the content of its own target"
            later = [int(t) for t in positions if perm[z, t] and t != z]  # targets after z in the order
            assert all(grad[t] == 0 for t in later)
            visible = (~perm[z]).nonzero().squeeze(1)
            assert (grad[visible] > 0).all()  # and it does use what it may see
            checked += 1
        # The content stream at a target does see its own token.
        z = int(positions[0])
        assert input_gradients(model, batch, ("content", z))[z] > 0
    assert checked > 5


def test_fine_tuning_drops_the_query_stream():
    model = tiny()
    ids = torch.randint(5, 61, (2, 9))
    out = model(ids)
    assert out.extras == {}
    with torch.no_grad():
        model.mask_embedding.add_(1.0)  # w only feeds the query stream
    torch.testing.assert_close(model(ids).hidden, out.hidden)


def test_bi_data_reads_the_second_half_backwards():
    model = tiny(bi_data=True)
    positions = model.positions(3, 5, 4, None)
    assert positions.shape == (4, 8, 36)
    assert torch.equal(positions[0], positions[1]) and not torch.equal(positions[0], positions[2])
    # sin is odd, cos even: negating the distances flips only the sine half.
    torch.testing.assert_close(positions[2, :, :18], -positions[0, :, :18])
