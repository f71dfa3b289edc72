"""plm-embed: contextual representations of every word of a text file, for feature-based use of a pretrained model
(ELMo, Peters et al. 2018; BERT's feature-based NER, Devlin et al. 2019 section 5.3).

plm-embed checkpoint=/models/elmo input_file=sentences.txt output_file=elmo.hdf5              # every layer
plm-embed checkpoint=runs/bert/checkpoints/last input_file=s.txt output_file=s.safetensors layers=top

The input holds one whitespace-tokenized sentence per line; the output one dataset per line, named by its 0-based line
number, as allennlp's ``elmo`` command writes them: (layers, words, dim) with ``layers=all``, (words, dim) with
``top`` or ``average``. An HDF5 file also gets ``sentence_to_index`` (JSON: sentence -> dataset name).

- ELMo: one vector per word, the layers being the token representation ([x; x]) and each biLSTM layer's [forward;
  backward]; the sentence markers are left out, and the LSTM states carry from one batch to the next (row k continues
  row k), as bilm-tf and allennlp's embedder do.
- Sub-word families (BERT, RoBERTa, ALBERT, ELECTRA, XLNet, Transformer-XL): each word is the vector of its first
  sub-word token, the representation the BERT paper's feature-based NER feeds to its tagger; the layers are the
  embedding output and every layer's output; special tokens are left out. A line longer than the model's positions
  is read in consecutive windows. A word the tokenizer turns into no token at all gets zeros (and a warning).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import hydra
import numpy as np
import torch
from omegaconf import DictConfig
from tqdm import tqdm

from plm_toolkit.commands import run_harness
from plm_toolkit.commands.run_harness import run_command
from plm_toolkit.config.numbers import merge, number_problems
from plm_toolkit.config.overrides import keep_typed_text
from plm_toolkit.core.atomic import atomic_file, save_safetensors
from plm_toolkit.core.errors import ConfigError, DataError
from plm_toolkit.data.sources.user_files import iter_lines, output_file
from plm_toolkit.data.tokenization.characters import BOS_TOKEN, EOS_TOKEN, character_ids
from plm_toolkit.data.tokenization.template import template_of
from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer
from plm_toolkit.interop.pretrained import LoadedBackbone, load_backbone
from plm_toolkit.tasks.base import character_width

log = logging.getLogger("plm_toolkit")

HDF5_SUFFIXES, SAFETENSORS_SUFFIXES = (".hdf5", ".h5"), (".safetensors",)


def read_sentences(path: Path) -> list[list[str]]:
    """The whitespace-separated words of every line; a blank line or a file that is not UTF-8 names the line."""
    sentences = []
    for number, line in iter_lines(path, "input_file"):
        words = line.split()
        if not words:
            raise DataError(f"{path}:{number}: empty line; expected one sentence per line")
        sentences.append(words)
    if not sentences:
        raise DataError(f"{path}: no sentences")
    return sentences


class ElmoEmbedder:
    """A character-reading biLM over batches of sentences, its LSTM states carried across batches."""

    def __init__(self, loaded: LoadedBackbone, device: torch.device):
        self.model, self.device = loaded.model, device
        self.max_characters = character_width(loaded.model)
        self.states: list[torch.Tensor] | None = None

    def _carried(self, batch_size: int) -> list[torch.Tensor] | None:
        """Stored states for the first ``batch_size`` rows (zeros for rows never seen), as allennlp's encoder."""
        if self.states is None:
            return None
        extra = max(batch_size - self.states[0].shape[0], 0)
        return [torch.cat([s, s.new_zeros(extra, s.shape[1])])[:batch_size] for s in self.states]

    def __call__(self, sentences: list[list[str]]) -> list[np.ndarray]:
        framed = [[BOS_TOKEN, *words, EOS_TOKEN] for words in sentences]
        chars = character_ids(framed, self.max_characters).to(self.device)
        reps = self.model(chars, memories=self._carried(len(sentences)), output_all_hidden=True)
        new = [s.detach() for s in reps.memories]
        if self.states is None or self.states[0].shape[0] <= len(sentences):
            self.states = new
        else:  # a shorter batch updates its own rows only
            self.states = [torch.cat([n, s[len(sentences) :]]) for n, s in zip(new, self.states, strict=True)]
        layers = torch.stack(reps.all_hidden, dim=1).float().cpu().numpy()  # (B, L, T + 2, D)
        return [layers[i, :, 1 : len(words) + 1] for i, words in enumerate(sentences)]


class SubwordEmbedder:
    """A token-id backbone: each word is represented by its first sub-word token."""

    def __init__(self, loaded: LoadedBackbone, device: torch.device):
        self.model, self.tokenizer, self.device = loaded.model, loaded.tokenizer, device
        self.template = template_of(self.tokenizer, pair=False)
        self.padding = vocab_from_tokenizer(self.tokenizer, source=loaded.source).padding_id
        config = self.model.config
        positions = getattr(config, "max_position_embeddings", None)
        positions = positions - getattr(config, "position_offset", 0) if positions else 512
        self.budget = max(positions - self.template.num_special, 1)
        self.empty_words = 0

    def __call__(self, sentences: list[list[str]]) -> list[np.ndarray]:
        encodings = self.tokenizer.encode_batch(sentences, is_pretokenized=True, add_special_tokens=False)
        windows, places = [], []  # places[i][w] = (window index, position) of word w's first sub-word
        for words, encoding in zip(sentences, encodings, strict=True):
            first: dict[int, tuple[int, int]] = {}
            for start in range(0, max(len(encoding.ids), 1), self.budget):
                ids, types, starts = self.template.assemble(encoding.ids[start : start + self.budget])
                for offset, word in enumerate(encoding.word_ids[start : start + self.budget]):
                    if word is not None and word not in first:
                        first[word] = (len(windows), starts["A"] + offset)
                windows.append((ids, types))
            places.append([first.get(w) for w in range(len(words))])
            self.empty_words += sum(p is None for p in places[-1])
        width = max(len(ids) for ids, _ in windows)
        input_ids = torch.full((len(windows), width), self.padding, dtype=torch.long)
        token_types = torch.zeros_like(input_ids)
        mask = torch.zeros_like(input_ids)
        for row, (ids, types) in enumerate(windows):
            input_ids[row, : len(ids)], token_types[row, : len(ids)], mask[row, : len(ids)] = (
                torch.tensor(ids),
                torch.tensor(types),
                1,
            )
        reps = self.model(
            input_ids=input_ids.to(self.device),
            attention_mask=mask.to(self.device),
            token_type_ids=token_types.to(self.device),
            output_all_hidden=True,
        )
        layers = torch.stack(reps.all_hidden, dim=1).float().cpu().numpy()  # (N, L, T, D)
        out = []
        for word_places in places:
            vectors = np.zeros((layers.shape[1], len(word_places), layers.shape[3]), dtype=np.float32)
            for w, place in enumerate(word_places):
                if place is not None:
                    vectors[:, w] = layers[place[0], :, place[1]]
            out.append(vectors)
        return out


def select(vectors: np.ndarray, layers: str) -> np.ndarray:
    """(L, T, D) -> all: (L, T, D); top: the last layer (T, D); average: the mean over layers (T, D)."""
    if layers == "top":
        return vectors[-1]
    if layers == "average":
        return vectors.mean(axis=0)
    return vectors


class Hdf5Writer:
    def __init__(self, path: Path):
        from plm_toolkit.interop.elmo_bilm_tf import h5py_module

        self.h5py = h5py_module()
        self.file = self.h5py.File(path, "w")
        self.sentence_to_index: dict[str, str] = {}

    def write(self, index: int, sentence: list[str], vectors: np.ndarray) -> None:
        self.file.create_dataset(str(index), data=vectors.astype(np.float32))
        self.sentence_to_index[" ".join(sentence)] = str(index)  # a repeated sentence names its last line, as allennlp

    def close(self) -> None:
        dataset = self.file.create_dataset("sentence_to_index", (1,), dtype=self.h5py.string_dtype())
        dataset[0] = json.dumps(self.sentence_to_index)
        self.file.close()


class SafetensorsWriter:
    def __init__(self, path: Path, metadata: dict[str, str]):
        self.path, self.metadata, self.tensors = path, metadata, {}

    def write(self, index: int, sentence: list[str], vectors: np.ndarray) -> None:
        self.tensors[str(index)] = torch.from_numpy(np.ascontiguousarray(vectors, dtype=np.float32))

    def close(self) -> None:

        save_safetensors(self.tensors, self.path, metadata=self.metadata)


def embed_file(cfg: DictConfig) -> Path:
    layers = cfg.layers.value if hasattr(cfg.layers, "value") else str(cfg.layers)
    output = Path(cfg.output_file).expanduser()
    if output.suffix not in HDF5_SUFFIXES + SAFETENSORS_SUFFIXES:
        raise ConfigError(f"output_file={output}: expected a .hdf5, .h5 or .safetensors file")
    output_file(output, "output_file")  # before any work: a folder there once failed after embedding everything
    found = merge(
        [f"batch_size={cfg.batch_size}: must be at least 1"] if cfg.batch_size < 1 else [], number_problems(cfg)
    )
    if found:
        raise ConfigError("invalid configuration: " + "; ".join(found))
    device_name = cfg.device.value if hasattr(cfg.device, "value") else str(cfg.device)
    if device_name == "auto":
        device_name = "cuda" if torch.cuda.is_available() else "cpu"
    if device_name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but no CUDA device is visible; use device=cpu or device=auto")
    device = torch.device(device_name)
    sentences = read_sentences(Path(cfg.input_file).expanduser())
    loaded = load_backbone(cfg.checkpoint)
    loaded.model.to(device).eval()
    embedder = (ElmoEmbedder if character_width(loaded.model) else SubwordEmbedder)(loaded, device)
    metadata = {"checkpoint": str(loaded.source), "layers": layers, "words": "first sub-word of each word"}
    bar = tqdm(total=len(sentences), unit="line", disable=not cfg.progress_bar)
    try:
        with atomic_file(output) as temporary:
            writer = Hdf5Writer(temporary) if output.suffix in HDF5_SUFFIXES else SafetensorsWriter(temporary, metadata)
            with torch.no_grad():
                for start in range(0, len(sentences), cfg.batch_size):
                    batch = sentences[start : start + cfg.batch_size]
                    for offset, vectors in enumerate(embedder(batch)):
                        writer.write(start + offset, batch[offset], select(vectors, layers))
                    bar.update(len(batch))
            writer.close()
    finally:
        bar.close()
    if getattr(embedder, "empty_words", 0):
        log.warning("%d word(s) had no token in the tokenizer and got zero vectors", embedder.empty_words)
    log.info("wrote %d sentences (%s layers) to %s", len(sentences), layers, output)
    return output


def run(cfg: DictConfig, run_dir: Path) -> dict:
    keep_typed_text(cfg)  # input_file=2024 is the file "2024"
    embed_file(cfg)
    return {}


@hydra.main(version_base="1.3", config_path="pkg://plm_toolkit.configs", config_name="embed")
def hydra_main(cfg: DictConfig) -> None:
    run_command(run, cfg)


def main() -> None:
    run_harness.main(hydra_main)


if __name__ == "__main__":
    main()
