"""The nine GLUE tasks' official files (GLUE's download layout), a few hand-made rows each in the real columns: every
training, dev and test file read by the task's preset, the texts, labels and test indices where the format puts
them; QQP's broken rows skipped and counted; the diagnostic set read for MNLI."""

import functools
import logging
from pathlib import Path

import pytest

from plm_toolkit.core.errors import ConfigError, DataError
from plm_toolkit.tasks.classification import read_rows
from plm_toolkit.tasks.glue.suite import BENCHMARK, TASKS, check_files, find_tasks, read_test_rows
from tests.tasks import test_glue

# Composing a preset takes a quarter of a second; each is read-only here.
preset = functools.cache(test_glue.preset)

MNLI_HEAD = (
    "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t"
    "sentence2_parse\tsentence1\tsentence2"
)
MNLI_ROW = (
    "{i}\t31193\t31193n\tgovernment\t( ( Conceptually cream ) ... )\t( ( ( Product and ) geography ) ... )\t"
    "(ROOT (S ...))\t(ROOT (S ...))\t{s1}\t{s2}"
)
STSB_HEAD = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
# Per task folder: file -> its text, as GLUE's download script writes it (two rows each; CoLA without a header).
FILES = {
    "CoLA": {
        "train.tsv": "gj04\t1\t\tOur friends won't buy this analysis, let alone the next one we propose.\n"
                     "gj04\t0\t*\tThey drank the pub.\n",
        "dev.tsv": "gj04\t1\t\tThe sailors rode the breeze clear of the rocks.\n"
                   "gj04\t0\t*\tThe more we study verbs, the crazier they get get.\n",
        "test.tsv": "index\tsentence\n0\tBill whistled past the house.\n1\tThe car honked its way down the road.\n",
    },
    "SST-2": {
        "train.tsv": "sentence\tlabel\nhide new secretions from the parental units \t0\ncontains no wit \t0\n",
        "dev.tsv": "sentence\tlabel\nit 's a charming and often affecting journey . \t1\nunflinchingly bleak \t0\n",
        "test.tsv": "index\tsentence\n0\tuneasy mishmash of styles and genres .\n1\tthis film 's relationship .\n",
    },
    "MRPC": {
        "train.tsv": "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                     '1\t702876\t702977\tAmrozi accused his brother , whom he called " the witness " .\t'
                     'Referring to him as only " the witness " , Amrozi accused his brother .\n'
                     "0\t2108705\t2108831\tYucaipa owned Dominick 's before selling the chain .\t"
                     "Yucaipa bought Dominick 's in 1995 for $ 693 million .\n",
        "dev.tsv": "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                   "1\t1355540\t1355592\tHe said the foodservice pie business doesn 't fit .\t"
                   "The foodservice pie business does not fit our long-term growth strategy .\n",
        "test.tsv": "index\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                    "0\t1089874\t1089925\tPCCW 's chief operating officer will also be on the board .\t"
                    "Mr Wong , PCCW 's chief operating officer , will also be on the board .\n",
    },
    "STS-B": {
        "train.tsv": f"{STSB_HEAD}\tscore\n"
                     "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane is taking off.\t"
                     "An air plane is taking off.\t5.000\n"
                     "1\tmain-captions\tMSRvid\t2012test\t0004\tnone\tnone\tA man is playing a large flute.\t"
                     "A man is playing a flute.\t3.800\n",
        "dev.tsv": f"{STSB_HEAD}\tscore\n"
                   "0\tmain-captions\tMSRvid\t2012test\t0000\tnone\tnone\tA man with a hard hat is dancing.\t"
                   "A man wearing a hard hat is dancing.\t5.000\n",
        "test.tsv": f"{STSB_HEAD}\n"
                    "0\tmain-captions\tMSRvid\t2012test\t0024\tnone\tnone\tA girl is styling her hair.\t"
                    "A girl is brushing her hair.\n",
    },
    "QQP": {
        # Line 4: a question broken over two lines, as in GLUE's first QQP download.
        "train.tsv": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                     "133273\t213221\t213222\tHow is the life of a math student?\tWhich level is enough?\t0\n"
                     "402555\t536040\t536041\tHow do I control my emotions?\tHow do you control your anger?\t1\n"
                     "201359\t303345\t303346\tWhy do people ask Quora questions\n"
                     "\tWas Muhammad a real historical figure?\t0\n",
        "dev.tsv": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                   "40066\t72134\t72135\tWhat is the best way to learn?\tHow do I learn fast?\t0\n",
        "test.tsv": "id\tquestion1\tquestion2\n0\tWould the idea of Trump ever happen?\tWhat are the chances?\n",
    },
    "MNLI": {
        "train.tsv": f"{MNLI_HEAD}\tlabel1\tgold_label\n"
                     + MNLI_ROW.format(i=0, s1="Conceptually cream skimming has two basic dimensions.",
                                       s2="Product and geography are what make cream skimming work.")
                     + "\tneutral\tneutral\n"
                     + MNLI_ROW.format(i=1, s1="you know during the season", s2="You lose the things.")
                     + "\tentailment\tentailment\n",
        "dev_matched.tsv": f"{MNLI_HEAD}\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n"
                           + MNLI_ROW.format(i=0, s1="The new rights are nice enough", s2="Everyone really likes them")
                           + "\tneutral\tentailment\tneutral\tneutral\tneutral\tneutral\n",
        "dev_mismatched.tsv": f"{MNLI_HEAD}\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n"
                              + MNLI_ROW.format(i=0, s1="Your contribution helped make it possible",
                                                s2="Your contributions were of no help.")
                              + "\tcontradiction\tcontradiction\tcontradiction\tcontradiction\tcontradiction\t"
                              "contradiction\n",
        "test_matched.tsv": f"{MNLI_HEAD}\n" + MNLI_ROW.format(i=0, s1="Hierbas is a cocktail.", s2="It is good.")
                            + "\n",
        "test_mismatched.tsv": f"{MNLI_HEAD}\n" + MNLI_ROW.format(i=0, s1="What a day.", s2="It was a day.") + "\n",
    },
    "QNLI": {
        "train.tsv": "index\tquestion\tsentence\tlabel\n"
                     "0\tWhen did the third Digimon series begin?\tUnlike the two seasons before it, most of the "
                     "events take place.\tnot_entailment\n"
                     "1\tWhich missile batteries often have individual launchers?\tIt is a common "
                     "misconception.\tentailment\n",
        "dev.tsv": "index\tquestion\tsentence\tlabel\n0\tWhat came into force after the new constitution?\t"
                   "As of that day, the new constitution came into force.\tentailment\n",
        "test.tsv": "index\tquestion\tsentence\n0\tWhat organization is devoted to Jihad?\tFor some decades Jihad.\n",
    },
    "RTE": {
        "train.tsv": "index\tsentence1\tsentence2\tlabel\n"
                     "0\tNo Weapons of Mass Destruction Found in Iraq Yet.\tWeapons Found in Iraq.\tnot_entailment\n"
                     "1\tA place of sorrow became a place of celebration.\tThe Pope is new.\tentailment\n",
        "dev.tsv": "index\tsentence1\tsentence2\tlabel\n0\tDana Reeve died.\tShe had an accident.\tnot_entailment\n",
        "test.tsv": "index\tsentence1\tsentence2\n0\tMaude and Dora had seen the trains.\tMaude saw trains.\n",
    },
    "WNLI": {
        "train.tsv": "index\tsentence1\tsentence2\tlabel\n"
                     "0\tI stuck a pin through a carrot. When I pulled the pin out, it had a hole.\t"
                     "The carrot had a hole.\t1\n"
                     "1\tJohn couldn't see the stage with Billy in front of him because he is so short.\t"
                     "John is so short.\t1\n",
        "dev.tsv": "index\tsentence1\tsentence2\tlabel\n0\tThe drain is clogged with hair. It has to be cleaned.\t"
                   "The hair has to be cleaned.\t0\n",
        "test.tsv": "index\tsentence1\tsentence2\n0\tMaude and Dora had seen the trains rushing.\tHorses ran.\n",
    },
    "diagnostic": {
        "diagnostic.tsv": "index\tsentence1\tsentence2\n0\tThe cat sat on the mat.\tThe cat did not sit on the mat.\n"
                          "1\tThe cat sat on the mat.\tThe cat sat.\n",
    },
}  # fmt: skip


def write_glue(root: Path, files: dict = FILES) -> Path:
    for folder, contents in files.items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        for name, text in contents.items():
            (root / folder / name).write_text(text, encoding="utf-8")
    return root


def test_every_task_reads_its_official_files(tmp_path, caplog):
    glue_dir = write_glue(tmp_path)
    assert [task.name for task in find_tasks(glue_dir, [])] == [task.name for task in BENCHMARK]
    with caplog.at_level(logging.WARNING, logger="plm_toolkit"):
        counts = {task.folder: check_files(task, preset(task.name), glue_dir, with_tests=True) for task in BENCHMARK}
    assert counts["CoLA"] == {"train": 2, "dev": 2, "CoLA.tsv": 2}
    assert counts["QQP"] == {"train": 2, "dev": 1, "QQP.tsv": 1}  # the broken question's two lines are skipped
    assert "QQP/train.tsv: skipped 2 row(s) whose field count is not the header's 6 (lines 4, 5)" in caplog.text
    assert counts["MNLI"] == {"train": 2, "dev": 1, "mismatched": 1, "MNLI-m.tsv": 1, "MNLI-mm.tsv": 1, "AX.tsv": 2}

    def first(folder: str, name: str = "train.tsv"):
        row = read_rows(glue_dir / folder / name, preset(TASKS_BY_FOLDER[folder]))[0]
        return row.text, row.pair, row.label

    assert first("CoLA") == ("Our friends won't buy this analysis, let alone the next one we propose.", None, "1")
    assert first("SST-2", "dev.tsv") == ("it 's a charming and often affecting journey . ", None, "1")
    assert first("MRPC")[0].startswith("Amrozi accused") and first("MRPC")[2] == "1"
    assert first("STS-B") == ("A plane is taking off.", "An air plane is taking off.", "5.000")
    assert first("QQP")[2] == "0" and first("QQP")[1] == "Which level is enough?"
    assert first("MNLI", "dev_mismatched.tsv") == (
        "Your contribution helped make it possible",
        "Your contributions were of no help.",
        "contradiction",
    )
    assert first("QNLI")[0] == "When did the third Digimon series begin?" and first("QNLI")[2] == "not_entailment"
    assert first("WNLI")[2] == "1"


TASKS_BY_FOLDER = {task.folder: task.name for task in BENCHMARK}


@pytest.mark.parametrize(
    ("name", "file", "expected"),
    [
        ("cola", "CoLA/test.tsv", ("1", "The car honked its way down the road.", None)),
        ("sst2", "SST-2/test.tsv", ("1", "this film 's relationship .", None)),
        ("mrpc", "MRPC/test.tsv", ("0", "PCCW 's chief operating officer will also be on the board .", "Mr Wong")),
        ("stsb", "STS-B/test.tsv", ("0", "A girl is styling her hair.", "A girl is brushing her hair.")),
        ("qqp", "QQP/test.tsv", ("0", "Would the idea of Trump ever happen?", "What are the chances?")),
        ("mnli", "MNLI/test_mismatched.tsv", ("0", "What a day.", "It was a day.")),
        ("mnli", "diagnostic/diagnostic.tsv", ("1", "The cat sat on the mat.", "The cat sat.")),
        ("qnli", "QNLI/test.tsv", ("0", "What organization is devoted to Jihad?", "For some decades Jihad.")),
        ("rte", "RTE/test.tsv", ("0", "Maude and Dora had seen the trains.", "Maude saw trains.")),
        ("wnli", "WNLI/test.tsv", ("0", "Maude and Dora had seen the trains rushing.", "Horses ran.")),
    ],
)
def test_test_files_give_index_and_texts(tmp_path, name, file, expected):
    glue_dir = write_glue(tmp_path)
    index, row = read_test_rows(glue_dir / file, TASKS[name], preset(name))[-1]
    assert (index, row.text) == expected[:2]
    assert row.pair == expected[2] or (expected[2] and row.pair.startswith(expected[2]))
    assert [name for _, name in TASKS[name].test_files(glue_dir)] == [t.submission for t in TASKS[name].tests]


def test_the_shared_sst2_header_text_is_read_as_sentence(tmp_path):
    glue_dir = write_glue(tmp_path, {"SST-2": FILES["SST-2"]})
    (glue_dir / "SST-2" / "train.tsv").write_text("text\tlabel\ngood \t1\nbad \t0\n")  # ../shared/data's header
    assert check_files(TASKS["sst2"], preset("sst2"), glue_dir, with_tests=True)["train"] == 2


def test_a_folder_without_tasks_lists_what_it_looked_for(tmp_path):
    (tmp_path / "notes.txt").write_text("no GLUE here\n")
    with pytest.raises(DataError) as caught:
        find_tasks(tmp_path, [])
    message = str(caught.value)
    assert f"data.glue_dir={tmp_path}: no GLUE task found; looked for CoLA/train.tsv, SST-2/train.tsv" in message
    assert "WNLI/train.tsv" in message


def test_a_task_lacking_a_file_or_unknown_is_named(tmp_path):
    glue_dir = write_glue(tmp_path, {"MNLI": {k: v for k, v in FILES["MNLI"].items() if k != "dev_mismatched.tsv"}})
    with pytest.raises(DataError, match=r"task MNLI lacks .*MNLI/dev_mismatched.tsv"):
        find_tasks(glue_dir, [])
    with pytest.raises(DataError, match=r"task RTE lacks .*RTE/train.tsv"):
        find_tasks(glue_dir, ["rte"])
    with pytest.raises(ConfigError, match="glue.tasks: unknown sst; the GLUE tasks are cola, sst2"):
        find_tasks(glue_dir, ["sst"])


def test_wrong_columns_and_unknown_labels_name_the_file(tmp_path):
    glue_dir = write_glue(tmp_path, {"RTE": FILES["RTE"]})
    (glue_dir / "RTE" / "train.tsv").write_text("index\tpremise\thypothesis\tlabel\n0\ta\tb\tentailment\n")
    with pytest.raises(DataError, match=r"RTE/train.tsv:1: no column 'sentence1' \(task.text_column\); the columns"):
        check_files(TASKS["rte"], preset("rte"), glue_dir, with_tests=False)
    (glue_dir / "RTE" / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tcontradiction\n")
    with pytest.raises(DataError, match=r"RTE/train.tsv:2: label 'contradiction' is not among"):
        check_files(TASKS["rte"], preset("rte"), glue_dir, with_tests=False)
    (glue_dir / "RTE" / "train.tsv").write_text(FILES["RTE"]["train.tsv"])
    (glue_dir / "RTE" / "test.tsv").write_text("sentence1\tsentence2\na\tb\n")
    with pytest.raises(DataError, match=r"RTE/test.tsv:1: no column 'index\|id' \(index\)"):
        check_files(TASKS["rte"], preset("rte"), glue_dir, with_tests=True)
