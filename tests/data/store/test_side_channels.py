"""The token store's side channels (data/store/side_channels.py): a unit registered from outside the store codes
every token in the spawned workers and adds up its shards in the manifest; the store imports none of the packages
that register one, and a unit nobody registered is refused by name."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from plm_toolkit.data.store.preparation import prepare_store
from plm_toolkit.data.store.side_channels import register_side_channel
from plm_toolkit.data.store.token_store import TokenStore
from tests.data.store.test_store import DOCUMENTS, config, write_corpus


class ParityEncoder:
    """Codes each token by the parity of its position in its sentence; counts the sentences of a shard."""

    main_process_only = False

    def start(self, source: str) -> None:
        self.sentences = 0

    def encode(self, batch, writer, tokenizer) -> None:
        for text, ends in batch:
            for line in text.splitlines():
                ids = tokenizer.encode(line, add_special_tokens=False).ids
                if ids:
                    writer.add_sentence(ids, codes=[k % 2 for k in range(len(ids))])
                    self.sentences += 1
            if ends:
                writer.end_document()

    def finish(self, stem: Path) -> None:
        stem.with_name(stem.name + ".parity.json").write_text(json.dumps(self.sentences), encoding="utf-8")


class Parity:
    description = "lines coded by the parity of each token's position"
    one_node = ""

    def settings(self, sources) -> dict:
        return {"every": int(sources)}

    def difference(self, have, wanted) -> str:
        return f"holds parity codes of another kind ({have} against {wanted})"

    def encoder(self, folder, data_cfg, plan, sources, processes) -> ParityEncoder:
        return ParityEncoder()

    def summary(self, folder, split, shards, sources) -> dict:
        files = [folder / split / f"{k:05d}.parity.json" for k in range(shards)]
        return {"sentences": sum(json.loads(f.read_text(encoding="utf-8")) for f in files)}


PARITY = Parity()


def test_a_registered_side_channel_codes_the_tokens_in_spawned_workers(tmp_path):
    register_side_channel("parity", f"{__name__}:PARITY")  # resolved on first use, as data/units registers
    cfg = config(tmp_path, [write_corpus(tmp_path)], shard_bytes=4096, num_proc=2)
    folder = prepare_store(cfg, "parity", units=2)
    store = TokenStore(folder)
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["settings"]["parity"] == {"every": 2} and manifest["settings"]["sentence_rules"] == 2
    train = store.split("train")
    assert manifest["splits"]["train"]["shards"] == 2 and manifest["prepared"]["processes"] == 2
    assert manifest["splits"]["train"]["parity"] == {"sentences": 3 * len(DOCUMENTS)}
    for index in (0, len(DOCUMENTS) - 1):
        sentences, codes = train.document(index), train.document(index, "units")
        assert [len(s) for s in sentences] == [len(c) for c in codes] and len(sentences) == 3
        assert all(list(c) == [k % 2 for k in range(len(c))] for c in codes)
    assert prepare_store(cfg, "parity", units=2) == folder  # found again under the same key
    with pytest.raises(Exception, match="holds parity codes of another kind"):
        prepare_store(config(tmp_path, [write_corpus(tmp_path)], store=str(folder)), "parity", units=3)


def test_a_unit_nobody_registered_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="the token store has no unit 'sparkles'"):
        prepare_store(config(tmp_path, [write_corpus(tmp_path)]), "sparkles")


def test_the_store_imports_no_side_channel_and_registering_imports_little():
    """Importing the store's modules brings in nothing of data/units; importing the units' worker code registers
    them without importing their store settings (which read the datasets library)."""
    script = (
        "import sys\n"
        "import plm_toolkit.data.store.preparation, plm_toolkit.data.store.parts\n"
        "import plm_toolkit.data.store.translation_pairs\n"
        "print(sorted(m for m in sys.modules if m.startswith('plm_toolkit.data.units')))\n"
        "for m in [m for m in sys.modules if m.startswith(('plm_toolkit', 'datasets'))]: del sys.modules[m]\n"
        "import plm_toolkit.data.units.corpus\n"
        "from plm_toolkit.data.store.side_channels import _CHANNELS\n"
        "print(sorted(_CHANNELS), 'plm_toolkit.data.units.store' in sys.modules, 'datasets' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["[]", "['units'] False False"]
