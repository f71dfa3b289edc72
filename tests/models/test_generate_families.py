"""Each generating family serves the one decoding module: Transformer-XL through its memory, BERT not at all."""

import pytest
import torch
import torch.nn.functional as F

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.generation.decoding import SearchConfig, generate
from plm_toolkit.models.bert import Bert, BertConfig
from plm_toolkit.models.transformer_xl import TransformerXL, TransformerXLConfig


def transformer_xl(mem_len=64):
    torch.manual_seed(0)
    config = TransformerXLConfig(
        vocab_size=53, hidden_size=36, num_layers=2, num_heads=3, head_size=12, intermediate_size=37, mem_len=mem_len
    )
    return TransformerXL(config).eval()


def test_transformer_xl_memory_decoding_equals_recomputing():
    model = transformer_xl()
    bias = torch.randn(53)
    head = lambda hidden: F.linear(hidden, model.input_embeddings.weight, bias)
    decoder = model.decoder(head)
    assert not decoder.supports_padding
    prompt, continuation = torch.randint(0, 53, (2, 6)), torch.randint(0, 53, (2, 5))
    with torch.no_grad():
        logits, state = decoder.prefill(prompt, torch.ones_like(prompt))
        stepped = [logits]
        for t in range(5):
            logits, state = decoder.step(continuation[:, t], state)
            stepped.append(logits)
        full = head(model(torch.cat([prompt, continuation], dim=1)).hidden)  # (2, 11, V)
    torch.testing.assert_close(torch.stack(stepped, dim=1), full[:, 5:], atol=1e-5, rtol=1e-5)
    greedy = generate(decoder, prompt, torch.ones_like(prompt), SearchConfig(max_new_tokens=4))
    assert [len(tokens) for tokens in greedy] == [4, 4]


def test_transformer_xl_without_memory_cannot_generate():
    with pytest.raises(ConfigError, match="model.mem_len=0"):
        transformer_xl(mem_len=0).decoder(lambda hidden: hidden)


def test_bert_cannot_generate():
    bert = Bert(BertConfig(vocab_size=20, hidden_size=12, num_layers=1, num_heads=2))
    with pytest.raises(ConfigError, match="model=bert is bidirectional: it cannot generate text"):
        bert.decoder(lambda hidden: hidden)
