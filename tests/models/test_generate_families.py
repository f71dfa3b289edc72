"""Each generating family serves the one decoding module: Transformer-XL through its memory, GPT past its position
table through a sliding context, BERT not at all."""

import pytest
import torch
import torch.nn.functional as F

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.generation.decoding import SearchConfig, SlidingDecoder, generate
from plm_toolkit.models.bert import Bert, BertConfig
from plm_toolkit.models.gpt import GPT, GPTConfig
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


def test_gpt_past_its_position_table_slides_its_context_as_nanogpt_crops_it():
    """Greedy decoding 20 tokens past a 12-position table: each token is the argmax of the model read afresh over the
    last 12 tokens from position 0 (nanoGPT's generate), for two left-padded prompts of different lengths."""
    torch.manual_seed(0)
    window = 12
    model = GPT(GPTConfig(vocab_size=53, hidden_size=36, num_layers=2, num_heads=3, intermediate_size=37,
                          max_position_embeddings=window)).eval()  # fmt: skip
    head = lambda hidden: F.linear(hidden, model.input_embeddings.weight)
    prompts = [torch.randint(1, 53, (9,)).tolist(), torch.randint(1, 53, (5,)).tolist()]
    ids = torch.tensor([prompts[0], [0] * 4 + prompts[1]])
    mask = torch.tensor([[1] * 9, [0] * 4 + [1] * 5])
    decoder = SlidingDecoder(model.decoder(head), window)
    generated = generate(decoder, ids, mask, SearchConfig(max_new_tokens=20))
    with torch.no_grad():
        for prompt, tokens in zip(prompts, generated, strict=True):
            expected = list(prompt)
            for _ in range(20):
                context = torch.tensor([expected[-window:]])
                expected.append(int(head(model(context).hidden[:, -1]).argmax()))
            assert tokens == expected[len(prompt) :]
    # Within the table the slide changes nothing: the cached decoder's own tokens.
    short = generate(decoder, ids, mask, SearchConfig(max_new_tokens=3))
    assert short == generate(model.decoder(head), ids, mask, SearchConfig(max_new_tokens=3))
    beams = generate(decoder, ids, mask, SearchConfig(max_new_tokens=20, num_beams=2))
    assert [len(tokens) for tokens in beams] == [20, 20]
