"""Tiny random Hugging Face checkpoints of every family with a pretraining head, saved as releases are (config.json,
weights, a tokenizer.json that fits them), for the continued-pretraining tests. Odd sizes (hidden 36, 3 heads,
feed-forward 37), and every parameter perturbed so that a head that was not loaded cannot pass for one that was."""

import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

from plm_toolkit.data.tokenization.pipelines import (
    BPE_SPECIAL_TOKENS,
    SPECIAL_TOKENS,
    _add_bpe_specials,
    _add_specials,
    byte_level_tokenizer,
    gpt2_tokenizer,
    unigram_tokenizer,
)
from plm_toolkit.data.tokenization.sentinels import add_sentinels, t5_unigram_trainer
from tests.conftest import tokenizer_texts

HIDDEN, LAYERS, HEADS, INTERMEDIATE, POSITIONS = 36, 2, 3, 37, 64
ENCODER = dict(
    hidden_size=HIDDEN,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    intermediate_size=INTERMEDIATE,
    max_position_embeddings=POSITIONS,
)


def randomized(model):
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    return model.eval()


def wordpiece() -> Tokenizer:
    """BERT's pipeline over a WordPiece of 301 pieces, [PAD] at 0."""
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    trainer = trainers.WordPieceTrainer(vocab_size=301, special_tokens=specials, show_progress=False)
    tokenizer.train_from_iterator(tokenizer_texts()[:3000], trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    return tokenizer


def roberta_bpe() -> Tokenizer:
    tokenizer = byte_level_tokenizer(models.BPE())
    trainer = trainers.BpeTrainer(vocab_size=403, special_tokens=list(BPE_SPECIAL_TOKENS), show_progress=False)
    tokenizer.train_from_iterator(tokenizer_texts()[:3000], trainer=trainer)
    _add_bpe_specials(tokenizer)
    return tokenizer


def gpt2_bpe() -> Tokenizer:
    tokenizer = gpt2_tokenizer(models.BPE())
    trainer = trainers.BpeTrainer(vocab_size=403, special_tokens=["<|endoftext|>"], show_progress=False)
    tokenizer.train_from_iterator(tokenizer_texts()[:3000], trainer=trainer)
    return tokenizer


def t5_unigram() -> Tokenizer:
    tokenizer = unigram_tokenizer(lowercase=False)
    tokenizer.train_from_iterator(tokenizer_texts()[:3000], trainer=t5_unigram_trainer(301))
    add_sentinels(tokenizer)
    return tokenizer


def save(model, tokenizer: Tokenizer, folder: Path) -> Path:
    model.save_pretrained(folder)
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def bert(transformers, folder: Path, cls_name: str = "BertForPreTraining") -> Path:
    tokenizer = wordpiece()
    config = transformers.BertConfig(vocab_size=tokenizer.get_vocab_size(), **ENCODER)
    return save(randomized(getattr(transformers, cls_name)(config)), tokenizer, folder)


def roberta(transformers, folder: Path) -> Path:
    tokenizer = roberta_bpe()
    sizes = ENCODER | {"max_position_embeddings": POSITIONS + 2}
    config = transformers.RobertaConfig(vocab_size=tokenizer.get_vocab_size(), type_vocab_size=1, **sizes)
    return save(randomized(transformers.RobertaForMaskedLM(config)), tokenizer, folder)


def albert(transformers, folder: Path) -> Path:
    tokenizer = wordpiece()
    config = transformers.AlbertConfig(vocab_size=tokenizer.get_vocab_size(), embedding_size=17, **ENCODER)
    return save(randomized(transformers.AlbertForPreTraining(config)), tokenizer, folder)


def electra(transformers, folder: Path) -> Path:
    """A discriminator and, in ``<folder>/generator``, its generator, their embeddings tied as ELECTRA trains them."""
    tokenizer = wordpiece()
    sizes = ENCODER | {"vocab_size": tokenizer.get_vocab_size(), "embedding_size": 17}
    disc = randomized(transformers.ElectraForPreTraining(transformers.ElectraConfig(**sizes)))
    narrow = sizes | {"hidden_size": 12, "num_attention_heads": 3, "intermediate_size": 19}
    gen = randomized(transformers.ElectraForMaskedLM(transformers.ElectraConfig(**narrow)))
    with torch.no_grad():
        gen.electra.embeddings.load_state_dict(disc.electra.embeddings.state_dict())
    save(gen, tokenizer, folder / "generator")
    return save(disc, tokenizer, folder)


def gpt2(transformers, folder: Path) -> Path:
    tokenizer = gpt2_bpe()
    config = transformers.GPT2Config(
        vocab_size=tokenizer.get_vocab_size(), n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_inner=INTERMEDIATE,
        n_positions=POSITIONS,
    )  # fmt: skip
    return save(randomized(transformers.GPT2LMHeadModel(config)), tokenizer, folder)


def gpt(transformers, folder: Path) -> Path:
    tokenizer = gpt2_bpe()
    config = transformers.OpenAIGPTConfig(
        vocab_size=tokenizer.get_vocab_size(), n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=POSITIONS,
        afn="gelu",
    )  # fmt: skip
    return save(randomized(transformers.OpenAIGPTLMHeadModel(config)), tokenizer, folder)


T5_SIZES = dict(d_model=HIDDEN, d_kv=7, d_ff=INTERMEDIATE, num_layers=2, num_decoder_layers=3, num_heads=5,
                relative_attention_num_buckets=11, relative_attention_max_distance=9)  # fmt: skip
T5_VERSIONS = {
    "v1.0": dict(feed_forward_proj="relu", tie_word_embeddings=True),
    "v1.1": dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False),
}


def t5(transformers, folder: Path, version: str = "v1.1") -> Path:
    """The released layout: shared.weight once, lm_head only when untied (v1.1)."""
    tokenizer = t5_unigram()
    vocab = tokenizer.get_vocab_size()
    config = transformers.T5Config(vocab_size=vocab, **T5_SIZES, **T5_VERSIONS[version], decoder_start_token_id=0)
    model = randomized(transformers.T5ForConditionalGeneration(config))
    if version == "v1.1":  # transformers 5 ties every head at construction; give v1.1 its own
        model.lm_head.weight = torch.nn.Parameter(torch.randn(vocab, HIDDEN) * 0.05)
    state = {k: v.contiguous() for k, v in model.state_dict().items() if "embed_tokens" not in k}
    if version == "v1.0":
        state.pop("lm_head.weight")
    folder.mkdir(parents=True)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    hf = dict(model_type="t5", vocab_size=vocab, **T5_SIZES, **T5_VERSIONS[version], pad_token_id=0, eos_token_id=1)
    (folder / "config.json").write_text(json.dumps(hf | {"decoder_start_token_id": 0}))
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def xlnet(transformers, folder: Path) -> Path:
    """XLNet's SentencePiece-style unigram, its template ``A [SEP] [CLS]``."""
    tokenizer = unigram_tokenizer(lowercase=False)
    trainer = trainers.UnigramTrainer(
        vocab_size=301, special_tokens=list(SPECIAL_TOKENS), unk_token="[UNK]", show_progress=False
    )
    tokenizer.train_from_iterator(tokenizer_texts()[:3000], trainer=trainer)
    _add_specials(tokenizer, xlnet_layout=True)
    config = transformers.XLNetConfig(
        vocab_size=tokenizer.get_vocab_size(), d_model=HIDDEN, n_layer=LAYERS, n_head=HEADS, d_head=12,
        d_inner=INTERMEDIATE, ff_activation="gelu", mem_len=6, reuse_len=8, untie_r=True,
    )  # fmt: skip
    return save(randomized(transformers.XLNetLMHeadModel(config)), tokenizer, folder)
