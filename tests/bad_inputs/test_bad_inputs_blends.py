"""Bad data.sources (weighted blends, data/layouts/blend.py) through the real command line (plm-train): a weight that is
negative, zero for all or not a number; a source with no files or files that match nothing; a source with no name,
a name that cannot key a metric, two sources of one name; data.sources beside data.train_files (the default preset's
bundled corpus included) or data.validation_files; a layout a blend cannot interleave. Each gets exit status 1 and
one line on stderr starting ``error:`` naming the key, no traceback (test_bad_inputs.py's harness)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bad_inputs.test_bad_inputs import Case, assert_one_error_line, run_cases
from tests.training.conftest import QUIET

BASE = ("model=gpt2_tiny", "data=text_files", "data.cache_dir={tmp}/cache", "data.num_proc=1", "trainer.max_steps=1",
        *QUIET)  # fmt: skip
WIKI = "{{name:wiki,files:[{tmp}/a.txt],weight:0.7}}"
CODE = "{{name:code,files:[{tmp}/b.txt],weight:0.3}}"


def blend(*sources: str) -> str:
    return f"data.sources=[{','.join(sources)}]"


CASES = [
    Case("negative_weight", "train", (blend(WIKI, "{{name:code,files:[{tmp}/b.txt],weight:-0.3}}"),), "data.sources[1].weight=-0.3: expected a number of 0 or more", base=BASE),
    Case("all_weights_zero", "train", (blend("{{name:wiki,files:[{tmp}/a.txt],weight:0}}", "{{name:code,files:[{tmp}/b.txt],weight:0.0}}"),), "data.sources: every weight is 0; give at least one source a positive weight", base=BASE),
    Case("weight_not_a_number", "train", (blend(WIKI, "{{name:code,files:[{tmp}/b.txt],weight:lots}}"),), "weight:lots}}]: weight: Value 'lots' of type 'str' could not be converted to Float", base=BASE),
    Case("weight_nan", "train", (blend(WIKI, "{{name:code,files:[{tmp}/b.txt],weight:nan}}"),), "data.sources[1].weight=nan: expected a number of 0 or more", base=BASE),
    Case("source_without_files", "train", (blend(WIKI, "{{name:code,files:[],weight:0.3}}"),), "data.sources[1].files is empty: give the source's files or patterns", base=BASE),
    Case("source_files_match_nothing", "train", (blend(WIKI, "{{name:code,files:[{tmp}/code/*.jsonl],weight:0.3}}"),), "data.sources[1].files: the pattern {tmp}/code/*.jsonl matches no file", base=BASE),
    Case("source_validation_file_missing", "train", (blend(WIKI, "{{name:code,files:[{tmp}/b.txt],validation_files:[{tmp}/nope.txt]}}"),), "data.sources[1].validation_files: {tmp}/nope.txt is not a file", base=BASE),
    Case("source_without_name", "train", (blend(WIKI, "{{files:[{tmp}/b.txt],weight:0.3}}"),), "data.sources[1].name is empty: give every source a name", base=BASE),
    Case("source_name_with_a_space", "train", (blend(WIKI, "{{name:'my code',files:[{tmp}/b.txt]}}"),), "data.sources[1].name='my code': expected letters, digits", base=BASE),
    Case("duplicate_names", "train", (blend(WIKI, "{{name:wiki,files:[{tmp}/b.txt],weight:0.3}}"),), "data.sources[1].name=wiki: data.sources[0] has that name too", base=BASE),
    Case("sources_and_train_files", "train", (blend(WIKI, CODE), "data.train_files=[{tmp}/a.txt]"), "data.sources and data.train_files are both set", base=BASE),
    Case("sources_with_the_default_corpus", "train", ("model=gpt2_tiny", "data.cache_dir={tmp}/cache", *QUIET, blend(WIKI, CODE)), "data.sources and data.train_files are both set: a blend reads data.sources[i].files; give data=text_files", base=("hardware=cpu",)),
    Case("sources_and_validation_files", "train", (blend(WIKI, CODE), "data.validation_files=[{tmp}/a.txt]"), "data.sources and data.validation_files are both set", base=BASE),
    Case("prepare_part_out_of_range", "prepare", ("model=gpt2_tiny", "data=text_files", "data.train_files=[{tmp}/a.txt]", "data.store={tmp}/store", "data.prepare_parts=2", "data.prepare_part=2"), "data.prepare_part=2: expected 0 to data.prepare_parts - 1 (2 parts)"),
    Case("sources_for_transformer_xl", "train", ("model=transformer_xl_tiny", blend(WIKI, CODE)), "data.sources: objective=clm reads one contiguous stream per batch row", base=BASE),
]  # fmt: skip


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("bad_blends")
    for name in ("a", "b"):
        (root / f"{name}.txt").write_text(f"Document {name} has one sentence.\n\nAnother one follows.\n")
    return run_cases(CASES, root)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_blend_gets_one_line_naming_the_key(case, outcomes):
    assert_one_error_line(case, outcomes[case.name])
    assert not Path(outcomes[case.name]["places"]["tmp"], "cache").exists()  # refused before any data work
