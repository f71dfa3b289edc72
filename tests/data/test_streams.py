"""The "streams" layout: windows of one token stream, dealt out so that consecutive batches continue each row."""

import pytest
import torch

from plm_toolkit.data.batching.collate import Collator
from plm_toolkit.data.batching.loader import BatchLayout, MicroBatches, StreamOrder, eval_loader
from plm_toolkit.data.build import prepare_pretraining_data

from .test_pretraining import labelled_corpus


def test_windows_cover_the_corpus_in_order_with_the_given_stride(tmp_path):
    cfg = labelled_corpus(tmp_path, num_documents=20, max_seq_len=16)
    data = prepare_pretraining_data(cfg, "streams", seed=0)  # default window: 17 tokens every 16
    rows = [r["input_ids"] for r in data.train]
    assert all(len(r) == 17 for r in rows)
    assert all(a[16] == b[0] for a, b in zip(rows, rows[1:], strict=False))  # the last input is the next's first
    overlapping = prepare_pretraining_data(cfg, "streams", seed=0, window=(13, 8)).train["input_ids"]
    assert all(a[8:] == b[:5] for a, b in zip(overlapping, overlapping[1:], strict=False))
    assert data.vocab.sep_id in {t for r in rows for t in r}  # documents are joined by [SEP]


@pytest.mark.parametrize(("batch_size", "world_size", "accum"), [(3, 1, 1), (2, 2, 3)])
def test_consecutive_micro_batches_hold_consecutive_windows_of_each_row(batch_size, world_size, accum):
    examples = [{"input_ids": [k, k + 1]} for k in range(40)]  # window k starts with token k
    from plm_toolkit.data.tokenization.vocab import Vocab

    vocab = Vocab(size=50, pad_id=49, unk_id=48, cls_id=47, sep_id=46, mask_id=45)
    streams = batch_size * world_size
    per_stream = 40 // streams
    for rank in range(world_size):
        layout = BatchLayout(batch_size, accum, world_size, rank)
        batches = MicroBatches(examples, layout, 0, Collator(vocab), None, seed=0, streams=True)
        for micro in range(per_stream):
            batch = batches[micro]
            expected = torch.tensor([(rank * batch_size + b) * per_stream + micro for b in range(batch_size)])
            assert torch.equal(batch["input_ids"][:, 0], expected), (rank, micro)
            assert batch["stream_start"].tolist() == [micro == 0] * batch_size
        again = batches[per_stream]  # the next pass over the text: memory must not carry over
        assert torch.equal(again["input_ids"], batches[0]["input_ids"]) and again["stream_start"].all()


def test_stream_order_wraps_and_eval_follows_streams():
    order = StreamOrder(10, 3)  # 3 streams of 3 windows; window 9 is dropped
    assert [order(p) for p in range(9)] == [0, 3, 6, 1, 4, 7, 2, 5, 8]
    assert order(9) == order(0)
    from plm_toolkit.data.tokenization.vocab import Vocab

    vocab = Vocab(size=50, pad_id=49, unk_id=48, cls_id=47, sep_id=46, mask_id=45)
    examples = [{"input_ids": [k]} for k in range(10)]
    batches = list(eval_loader(examples, 3, 1, 0, Collator(vocab), None, 0, 0, streams=True))
    assert [b["input_ids"][:, 0].tolist() for b in batches] == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
    with pytest.raises(ValueError, match="lower the batch size"):
        StreamOrder(2, 3)


def test_backward_half_reads_its_streams_last_to_first_so_reversed_reuse_parts_continue():
    from plm_toolkit.data.tokenization.vocab import Vocab

    vocab = Vocab(size=200, pad_id=199, unk_id=198, cls_id=197, sep_id=196, mask_id=195)
    length, stride = 13, 4  # XLNet: windows of max_seq_len - 3 tokens every reuse_len tokens
    examples = [{"input_ids": list(range(k * stride, k * stride + length))} for k in range(24)]  # token = position
    batches = MicroBatches(
        examples, BatchLayout(4, 1), 0, Collator(vocab), None, seed=0, streams=True, backward_half=True
    )
    first, second = batches[0]["input_ids"], batches[1]["input_ids"]
    assert torch.equal(second[:2, 0], first[:2, 0] + stride)  # forward rows move on
    assert torch.equal(second[2:, 0], first[2:, 0] - stride)  # backward rows move back
    # Read backwards (the objective flips those rows), the next window's reused prefix continues this one's.
    this, following = first[2].flip(0), second[2].flip(0)
    assert torch.equal(following[:stride], this[stride : 2 * stride])
