"""plm-generate: continue prompts with a causal model (GPT, GPT-2, Transformer-XL with its memory), or decode an
output for each input with an encoder-decoder (T5, the Transformer).

plm-generate checkpoint=runs/gpt2/checkpoints/last prompt="The history of"
plm-generate checkpoint=/models/gpt2 prompts_file=prompts.txt max_new_tokens=50 do_sample=true top_p=0.9 seed=1 \
    output_file=continuations.jsonl
plm-generate checkpoint=PATH prompt="..." num_beams=4 length_penalty=0.6
plm-generate checkpoint=runs/t5/checkpoints/last prompt='"The <extra_id_0> walks in <extra_id_1> park"'
plm-generate checkpoint=runs/wmt/averaged prompts_file=test.en num_beams=4 length_penalty=0.6 max_length_a=1 \
    max_new_tokens=50

A causal model continues the (left-padded) prompt. An encoder-decoder reads the prompt, followed by the end token
as its training sources were, in its encoder (right-padded and masked, so positions start at 0 in every row) and
decodes from its decoder start token. Without ``output_file`` the continuations (an encoder-decoder's outputs) are
printed, one per prompt; with it, a JSONL row per prompt holds ``prompt``, ``prompt_ids``, ``text`` and
``token_ids`` (the generated ids, without the prompt). Greedy and beam search give the same tokens as transformers'
``generate`` on the same weights.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig

from plm_toolkit.commands import failures, run_harness
from plm_toolkit.config.checks import decoding_problems
from plm_toolkit.config.numbers import merge, number_problems
from plm_toolkit.config.overrides import keep_typed_text
from plm_toolkit.core.atomic import write_text
from plm_toolkit.core.command_schema import DecodingOptions
from plm_toolkit.core.errors import ConfigError, DataError
from plm_toolkit.data.sources.user_files import iter_lines, not_a_file, output_file
from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer
from plm_toolkit.generation.decoding import SearchConfig, SlidingDecoder, generate, new_tokens
from plm_toolkit.interop.pretrained import LoadedLanguageModel, load_language_model
from plm_toolkit.models.base import ENCODER_DECODER

log = logging.getLogger("plm_toolkit")


def check(cfg) -> None:
    """One message per impossible setting, naming the key: every decoding option in its domain (``DECODING_RANGES``),
    and every number of the config one that a key can mean (``config/numbers.py``)."""
    found = []
    if (cfg.prompt is None) == (cfg.prompts_file is None):
        found.append("give exactly one of prompt=TEXT and prompts_file=PATH")
    if cfg.prompts_file is not None and not_a_file(cfg.prompts_file):
        found.append(f"prompts_file={cfg.prompts_file}: {not_a_file(cfg.prompts_file)}; expected a regular file")
    found += decoding_problems(cfg)
    if cfg.batch_size < 1:
        found.append(f"batch_size={cfg.batch_size}: must be at least 1")
    if cfg.seed < 0:
        found.append(f"seed={cfg.seed}: must be 0 or positive")
    if cfg.num_beams > 1 and cfg.do_sample:
        found.append(f"num_beams={cfg.num_beams} with do_sample=true: beam search is deterministic; pick one")
    found = merge(found, number_problems(cfg))
    if found:
        raise ConfigError("invalid configuration: " + "; ".join(found))


def read_prompts(cfg) -> tuple[list[str], list[str]]:
    """The prompts, and where each comes from for messages: ``prompt`` (the key) or ``file:line``."""
    if cfg.prompt is not None:
        return [cfg.prompt], ["prompt"]
    path = Path(cfg.prompts_file).expanduser()
    numbered = [(number, line) for number, line in iter_lines(path, "prompts_file") if line.strip()]
    if not numbered:
        raise DataError(f"{path}: no prompts; expected one prompt per line")
    return [line for _, line in numbered], [f"{path}:{number}" for number, _ in numbered]


def encode_prompts(
    lm: LoadedLanguageModel,
    prompts: list[str],
    max_new_tokens: int,
    places: list[str],
    max_length_a: float = 0.0,
    slide: bool = False,
) -> list[list[int]]:
    """Token ids of every prompt (no template tokens). For a causal model an empty prompt starts from the
    start-of-text token, and without ``slide`` (slide_context) a prompt that leaves no room for max_new_tokens in the
    position table is refused, naming its place (``places``: the key or file:line). An encoder-decoder's source ends
    with the end token, as in training (``Seq2SeqCollator``, span corruption); one longer than the encoder's position
    table is refused."""
    vocab = vocab_from_tokenizer(lm.tokenizer)
    longest = type(lm.model).max_length(lm.model.config)
    encoder_decoder = ENCODER_DECODER in type(lm.model).capabilities
    out = []
    encodings = lm.tokenizer.encode_batch(prompts, add_special_tokens=False)
    for prompt, where, encoding in zip(prompts, places, encodings, strict=True):
        excerpt = repr(prompt[:40]) + ("..." if len(prompt) > 40 else "")
        if encoder_decoder:
            ids = [*encoding.ids, vocab.require("eos_id", "plm-generate on an encoder-decoder")]
            if longest is not None and len(ids) > longest:
                raise DataError(
                    f"{where}: {len(ids)} tokens with the end token, more than the model's {longest} "
                    f"(max_position_embeddings); shorten the prompt ({excerpt})"
                )
            out.append(ids)
            continue
        ids = encoding.ids or ([vocab.bos_id] if vocab.bos_id is not None else [])
        if not ids:
            raise DataError(f"{where}: an empty prompt, and the tokenizer has no start-of-text token to start from")
        new = new_tokens(len(ids), max_new_tokens, max_length_a)
        if longest is not None and len(ids) + new > longest and not slide:
            relative = f" + max_length_a={max_length_a} x {len(ids)}" if max_length_a else ""
            raise DataError(
                f"{where}: {len(ids)} tokens, with max_new_tokens={max_new_tokens}{relative} {len(ids) + new} "
                f"positions, more than the model's {longest} (max_position_embeddings); shorten the prompt or lower "
                f"max_new_tokens{' or max_length_a' if max_length_a else ''}, or set slide_context=true ({excerpt})"
            )
        out.append(ids)
    return out


def sliding(lm: LoadedLanguageModel, decoder, prompt_ids: list[list[int]], places: list[str], cfg):
    """``decoder`` over a sliding context (``SlidingDecoder``) where a causal model's position table is shorter than
    a prompt and its new tokens, said in one log line; else ``decoder`` itself."""
    longest = type(lm.model).max_length(lm.model.config)
    if longest is None or ENCODER_DECODER in type(lm.model).capabilities:
        return decoder
    needs = [len(ids) + new_tokens(len(ids), cfg.max_new_tokens, cfg.max_length_a) for ids in prompt_ids]
    if max(needs) <= longest:
        return decoder
    row = needs.index(max(needs))
    log.info(
        "%s: %d prompt tokens and up to %d new ones need %d positions, more than the model's %d "
        "(max_position_embeddings): the context slides, each token past position %d seeing the last %d tokens, as "
        "nanoGPT's generate crops it (%d of %d prompts outgrow the table)",
        places[row], len(prompt_ids[row]), needs[row] - len(prompt_ids[row]), needs[row], longest, longest, longest,
        sum(n > longest for n in needs), len(needs),
    )  # fmt: skip
    return SlidingDecoder(decoder, longest)


def batches(prompt_ids: list[list[int]], batch_size: int, padding: bool):
    """Indices of the prompts decoded together: consecutive ones when the decoder takes left padding, else prompts
    of one length."""
    if padding:
        order = list(range(len(prompt_ids)))
        yield from (order[i : i + batch_size] for i in range(0, len(order), batch_size))
        return
    by_length: dict[int, list[int]] = {}
    for index, ids in enumerate(prompt_ids):
        by_length.setdefault(len(ids), []).append(index)
    for group in by_length.values():
        yield from (group[i : i + batch_size] for i in range(0, len(group), batch_size))


def padded(rows: list[list[int]], pad_id: int, device, side: str = "left") -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) ids and mask of rows padded on ``side``: left for a causal prompt (every row's last token in the last
    column), right for an encoder's source."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        place = slice(width - len(row), width) if side == "left" else slice(0, len(row))
        ids[i, place] = torch.tensor(row)
        mask[i, place] = 1
    return ids.to(device), mask.to(device)


def detokenize(tokenizer, ids: list[int], eos_id: int | None) -> str:
    """The text of generated ids without the end token that stopped them; other special tokens stay (T5's
    sentinels mark the spans they stand for)."""
    return tokenizer.decode(ids[:-1] if ids and ids[-1] == eos_id else ids, skip_special_tokens=False)


def run(cfg: DictConfig) -> list[dict]:
    keep_typed_text(cfg)  # prompt=1e3 is the text "1e3", not Hydra's float
    check(cfg)
    output = output_file(cfg.output_file, "output_file") if cfg.output_file else None
    prompts, places = read_prompts(cfg)
    lm = load_language_model(cfg.checkpoint)
    device_name = getattr(cfg.device, "value", cfg.device)
    device = torch.device(
        "cuda" if device_name == "cuda" or (device_name == "auto" and torch.cuda.is_available()) else "cpu"
    )
    model = lm.model.to(device)
    decoder = model.decoder(lm.head)
    vocab = vocab_from_tokenizer(lm.tokenizer)
    options = {f.name: cfg[f.name] for f in dataclasses.fields(DecodingOptions)}
    search = SearchConfig(**options, eos_id=vocab.eos_id if cfg.stop_at_eos else None)
    prompt_ids = encode_prompts(lm, prompts, cfg.max_new_tokens, places, cfg.max_length_a, cfg.slide_context)
    decoder = sliding(lm, decoder, prompt_ids, places, cfg)
    generator = torch.Generator(device).manual_seed(cfg.seed)
    generated: list[list[int]] = [[] for _ in prompts]
    for group in batches(prompt_ids, cfg.batch_size, decoder.supports_padding):
        ids, mask = padded([prompt_ids[i] for i in group], vocab.padding_id, device, decoder.padding_side)
        for index, tokens in zip(group, generate(decoder, ids, mask, search, generator), strict=True):
            generated[index] = tokens
    rows = [
        {"prompt": p, "prompt_ids": ids, "text": detokenize(lm.tokenizer, new, vocab.eos_id), "token_ids": new}
        for p, ids, new in zip(prompts, prompt_ids, generated, strict=True)
    ]
    if output is not None:
        write_text(output, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
        log.info("%d continuation(s) written to %s", len(rows), output)
    else:
        continuing = ENCODER_DECODER not in type(model).capabilities
        for row in rows:
            print(row["prompt"] + row["text"] if continuing else row["text"])
    return rows


@hydra.main(version_base="1.3", config_path="pkg://plm_toolkit.configs", config_name="generate")
def hydra_main(cfg: DictConfig) -> None:
    failures.task_started()
    try:
        run(cfg)
    except Exception as err:
        if not failures.report(err):
            raise


def main() -> None:
    run_harness.main(hydra_main)


if __name__ == "__main__":
    main()
