"""plm-glue end to end on tiny tasks (a tiny odd-sized BERT, a few rows per task): the summary against the sub-runs'
own eval_results.json, the test predictions against plm-finetune's dev predictions of the same rows, the submission
folder, continuing a run; and the pieces alone: GLUE's average, the GPU scheduler with a fake launcher."""

import csv
import json
import statistics
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from plm_toolkit.commands.glue import command as glue
from plm_toolkit.commands.glue.runs import RECORD, SubRun, record
from plm_toolkit.commands.glue.schedule import Job, failure_line, launch_worker, schedule, visible_gpus
from plm_toolkit.commands.glue.summary import markdown, summarize
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.tasks.glue.suite import find_tasks

from .conftest import SST2_TRAIN
from .test_glue_formats import FILES, write_glue

TINY = ["hardware=cpu", "trainer.epochs=1", "trainer.batch_size=8", "data.max_seq_len=48", "glue.learning_rates=[1e-3]",
        "trainer.progress_bar=false", "trainer.tensorboard=false", "trainer.log_every=100"]  # fmt: skip


def sst2_rows() -> list[tuple[str, str]]:
    lines = Path(SST2_TRAIN).read_text().splitlines()[1:]
    return [tuple(line.split("\t")) for line in lines]


def tsv(header: str, rows) -> str:
    return "\n".join([header, *("\t".join(map(str, row)) for row in rows)]) + "\n"


def two_tasks(root: Path) -> Path:
    """SST-2 and an RTE of sentence pairs (entailment when both sentences have the same sentiment), in GLUE's
    layout; each test file holds the task's dev rows, so that its predictions can be checked against plm-finetune's."""
    rows = sst2_rows()
    sst2 = rows[:60]
    same = [(a, b, x == y) for (a, x), (b, y) in zip(rows[60:100], rows[100:140], strict=True)]
    pairs = [(a, b, "entailment" if equal else "not_entailment") for a, b, equal in same]
    files = {
        "SST-2": {
            "train.tsv": tsv("sentence\tlabel", sst2[:40]),
            "dev.tsv": tsv("sentence\tlabel", sst2[40:]),
            "test.tsv": tsv("index\tsentence", [(i, text) for i, (text, _) in enumerate(sst2[40:])]),
        },
        "RTE": {
            "train.tsv": tsv("index\tsentence1\tsentence2\tlabel", [(i, *p) for i, p in enumerate(pairs[:28])]),
            "dev.tsv": tsv("index\tsentence1\tsentence2\tlabel", [(i, *p) for i, p in enumerate(pairs[28:])]),
            "test.tsv": tsv("index\tsentence1\tsentence2", [(i, a, b) for i, (a, b, _) in enumerate(pairs[28:])]),
        },
    }
    return write_glue(root / "glue", files)


def run_glue(checkpoint: Path, glue_dir: Path, run_dir: Path, *overrides: str) -> dict:
    base = [f"model.checkpoint={checkpoint}", f"data.glue_dir={glue_dir}", *TINY, *overrides]
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        return glue.run(compose("glue", overrides=base), run_dir)


def submission(path: Path) -> dict[str, str]:
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    assert rows[0] == ["index", "prediction"]
    return dict(rows[1:])


def test_suite_on_two_tiny_tasks(tiny_checkpoint, tmp_path):
    glue_dir, run_dir = two_tasks(tmp_path), tmp_path / "run"
    run_glue(tiny_checkpoint, glue_dir, run_dir, "glue.seeds=[7]", "glue.small_tasks_seeds=[1,2,3]")
    summary = json.loads((run_dir / "glue_results.json").read_text())
    assert list(summary["tasks"]) == ["SST-2", "RTE"]
    names = ("sst2/lr0.001-seed7", "rte/lr0.001-seed1", "rte/lr0.001-seed2", "rte/lr0.001-seed3")
    dev = {name: json.loads((run_dir / name / "eval_results.json").read_text())["accuracy"] for name in names}
    rte = [dev[f"rte/lr0.001-seed{seed}"] for seed in (1, 2, 3)]
    best = max(range(3), key=lambda i: (rte[i], -i))  # the first of equals
    assert summary["tasks"]["SST-2"]["accuracy"] == dev["sst2/lr0.001-seed7"]
    assert summary["tasks"]["RTE"] | {"seeds": None} == {
        "accuracy": rte[best], "score": rte[best], "learning_rate": 1e-3, "seed": best + 1,
        "run": f"rte/lr0.001-seed{best + 1}", "runs": 3, "seeds": None,
    }  # fmt: skip
    assert summary["tasks"]["RTE"]["seeds"]["accuracy"] == pytest.approx(
        {"mean": statistics.fmean(rte), "std": statistics.stdev(rte), "min": min(rte), "max": max(rte)}
    )
    assert summary["tasks"]["SST-2"]["seeds"]["score"]["std"] is None  # one run
    assert summary["average"] == pytest.approx((dev["sst2/lr0.001-seed7"] + rte[best]) / 2)
    table = (run_dir / "glue_results.md").read_text()
    assert "| SST-2 (accuracy) | RTE (accuracy) | Average |" in table
    spread = f"{100 * statistics.fmean(rte):.1f} ± {100 * statistics.stdev(rte):.1f}"
    assert f"| RTE | {100 * rte[best]:.1f} | 0.001 | {best + 1} | 3 | 3: {spread} | {100 * min(rte):.1f} |" in table

    # The submission: the selected runs' predictions of every test row, equal to plm-finetune's of the same rows.
    assert sorted(p.name for p in (run_dir / "submission").iterdir()) == ["RTE.tsv", "SST-2.tsv"]
    for task, chosen in (("SST-2", "sst2/lr0.001-seed7"), ("RTE", f"rte/lr0.001-seed{best + 1}")):
        predicted = submission(run_dir / "submission" / f"{task}.tsv")
        assert predicted == json.loads((run_dir / chosen / "predictions.json").read_text())
    assert set(submission(run_dir / "submission" / "RTE.tsv").values()) <= {"entailment", "not_entailment"}
    # glue.keep_checkpoints=best: only the selected RTE run keeps its weights.
    kept = sorted(p.parent.name for p in run_dir.glob("*/*/checkpoints"))
    assert kept == sorted(["lr0.001-seed7", f"lr0.001-seed{best + 1}"])

    # Continued in the same run directory: nothing trains again; a sub-run interrupted after training gets its extras.
    (run_dir / "sst2/lr0.001-seed7" / RECORD).unlink()
    (run_dir / "sst2/lr0.001-seed7/test_predictions/SST-2.tsv").unlink()
    trained = {p: p.stat().st_mtime_ns for p in run_dir.glob("*/*/eval_results.json")}
    run_glue(tiny_checkpoint, glue_dir, run_dir, "glue.seeds=[7]", "glue.small_tasks_seeds=[1,2,3]")
    assert {p: p.stat().st_mtime_ns for p in run_dir.glob("*/*/eval_results.json")} == trained
    assert json.loads((run_dir / "glue_results.json").read_text())["tasks"] == summary["tasks"]
    assert (run_dir / "sst2/lr0.001-seed7/test_predictions/SST-2.tsv").is_file()
    with pytest.raises(ConfigError, match=r"rte/lr0.001-seed1/subrun.yaml: this sub-run was started with other "
                                          r"settings \(data.max_seq_len: 48 -> 40\)"):  # fmt: skip
        run_glue(tiny_checkpoint, glue_dir, run_dir, "glue.seeds=[7]", "glue.small_tasks_seeds=[1,2,3]",
                 "glue.tasks=[rte]", "data.max_seq_len=40")  # fmt: skip


def test_mnli_mismatched_and_ax_and_stsb(tiny_checkpoint, tmp_path):
    """MNLI's second dev file is evaluated with each run's model (here a copy of the first: the same accuracy as
    plm-finetune's evaluation), its test files and the diagnostic set predicted; STS-B's scores are regressed."""
    mnli = dict(FILES["MNLI"])
    train = mnli["train.tsv"].splitlines()
    mnli["train.tsv"] = "\n".join([train[0], *(train[1:] * 6)]) + "\n"
    mnli["dev_mismatched.tsv"] = mnli["dev_matched.tsv"]
    stsb = dict(FILES["STS-B"])
    train = stsb["train.tsv"].splitlines()
    stsb["train.tsv"] = "\n".join([train[0], *(train[1:] * 6)]) + "\n"
    stsb["dev.tsv"] = stsb["train.tsv"]
    glue_dir = write_glue(tmp_path / "glue", {"MNLI": mnli, "STS-B": stsb, "diagnostic": FILES["diagnostic"]})
    run_dir = tmp_path / "run"
    run_glue(tiny_checkpoint, glue_dir, run_dir, "glue.seeds=[3]", "glue.small_tasks_seeds=[3]")
    summary = json.loads((run_dir / "glue_results.json").read_text())
    matched = json.loads((run_dir / "mnli/lr0.001-seed3/eval_results.json").read_text())["accuracy"]
    assert summary["tasks"]["MNLI"]["matched_accuracy"] == matched
    assert summary["tasks"]["MNLI"]["mismatched_accuracy"] == pytest.approx(matched)
    figures = json.loads((run_dir / "stsb/lr0.001-seed3/eval_results.json").read_text())
    assert summary["tasks"]["STS-B"]["score"] == pytest.approx((figures["pearson"] + figures["spearman"]) / 2)
    assert summary["average"] == pytest.approx((matched + summary["tasks"]["STS-B"]["score"]) / 2)
    names = sorted(p.name for p in (run_dir / "submission").iterdir())
    assert names == ["AX.tsv", "MNLI-m.tsv", "MNLI-mm.tsv", "STS-B.tsv"]
    assert set(submission(run_dir / "submission" / "AX.tsv")) == {"0", "1"}
    labels = set(submission(run_dir / "submission" / "MNLI-mm.tsv").values())
    assert labels <= {"contradiction", "entailment", "neutral"}
    (score,) = submission(run_dir / "submission" / "STS-B.tsv").values()
    assert 0.0 <= float(score) <= 5.0 and len(score.split(".")[1]) == 3


def test_glue_average_is_the_mean_of_task_scores():
    records = {
        SubRun("mrpc", 2e-5, 1): {"metrics": {"f1": 0.9, "accuracy": 0.8}, "score": 0.85},
        SubRun("mrpc", 2e-5, 2): {"metrics": {"f1": 0.7, "accuracy": 0.6}, "score": 0.65},
        SubRun("mrpc", 3e-5, 1): {"metrics": {"f1": 0.8, "accuracy": 0.9}, "score": 0.85},  # ties: the first counts
        SubRun("mnli", 2e-5, 1): {"metrics": {"matched_accuracy": 0.8, "mismatched_accuracy": 0.7}, "score": 0.75},
    }
    folders = {run: Path(run.name) for run in records}
    settings = {"checkpoint": "c", "learning_rates": [2e-5, 3e-5], "epochs": 3, "batch_size": 32, "max_seq_len": 128}
    summary = summarize(list(records), records, folders, settings)
    assert summary["average"] == pytest.approx((0.85 + 0.75) / 2)
    assert summary["tasks"]["MRPC"]["learning_rate"] == 2e-5 and summary["tasks"]["MRPC"]["seed"] == 1
    assert summary["tasks"]["MRPC"]["seeds"]["f1"] == pytest.approx(
        {"mean": 0.8, "std": statistics.stdev([0.9, 0.7]), "min": 0.7, "max": 0.9}
    )
    assert summary["average_of_seed_means"] == pytest.approx((0.75 + 0.75) / 2)
    assert "| MRPC (f1/accuracy) | MNLI (matched_accuracy/mismatched_accuracy) | Average |" in markdown(summary)
    assert "| 90.0/80.0 | 80.0/70.0 | 80.0 |" in markdown(summary)


class FakeProcess:
    """Ends with ``status`` after ``polls`` polls; records what ran at once."""

    def __init__(self, log: list, job: Job, device: str, polls: int, status: int):
        self.log, self.job, self.device, self.left, self.status = log, job, device, polls, status

    def poll(self):
        self.left -= 1
        if self.left > 0:
            return None
        self.log.append(("end", self.job.name, self.device))
        return self.status


def test_scheduler_runs_one_job_per_device_heaviest_first():
    log, ended = [], []
    lengths = {"qqp": 5, "mnli": 6, "rte": 1, "mrpc": 1, "sst2": 2}

    def launch(job, device):
        log.append(("start", job.name, device))
        return FakeProcess(log, job, device, lengths[job.name], 0)

    jobs = [Job(name, Path(name), weight=lengths[name]) for name in lengths]
    failed = schedule(jobs, ["0", "1"], launch, lambda job, status: ended.append((job.name, status)), sleep=lambda s: 0)
    assert failed == [] and sorted(ended) == sorted((name, 0) for name in lengths)
    assert [entry[1] for entry in log if entry[0] == "start"] == ["mnli", "qqp", "sst2", "rte", "mrpc"]
    busy = {}
    for event, name, device in log:  # never two jobs on one device
        assert (busy.get(device) is None) == (event == "start"), (event, name, device)
        busy[device] = name if event == "start" else None


def test_scheduler_stops_starting_after_a_failure_and_waits_for_the_running():
    log = []
    lengths = {"a": 2, "b": 4, "c": 1, "d": 1}

    def launch(job, device):
        log.append(("start", job.name, device))
        return FakeProcess(log, job, device, lengths[job.name], 1 if job.name == "a" else 0)

    jobs = [Job(name, Path(name), weight=w) for name, w in (("b", 9), ("a", 8), ("c", 1), ("d", 0))]
    failed = schedule(jobs, ["0", "1"], launch, lambda job, status: None, sleep=lambda s: 0)
    assert [(job.name, status) for job, status in failed] == [("a", 1)]
    assert [e[1] for e in log if e[0] == "start"] == ["b", "a"] and ("end", "b", "0") in log


def test_visible_gpus_follow_cuda_visible_devices(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6,7")
    assert visible_gpus("auto", None) == ["4", "6", "7"] and visible_gpus("cuda", 2) == ["4", "6"]
    assert visible_gpus("cpu", None) == []
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert visible_gpus("auto", None) == ["0", "1", "2"]


def test_glue_defaults_are_plm_finetunes():
    """configs/glue.yaml repeats plm-finetune's recipe (Hydra cannot include a config of another schema): the shared
    sections must compose to the same values."""
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        suite, single = compose("glue"), compose("finetune")
    for key in ("model", "finetune", "optimizer", "hardware", "trainer"):
        assert OmegaConf.to_container(suite[key]) == OmegaConf.to_container(single[key]), key
    shared = {k: v for k, v in OmegaConf.to_container(suite.data).items() if k != "glue_dir"}
    assert shared == OmegaConf.to_container(single.data)


@pytest.mark.slow
def test_worker_processes_run_a_subrun_and_report_a_failure(tiny_checkpoint, tmp_path):
    """The GPU path's worker (``python -m plm_toolkit.commands.glue.runs FOLDER``), here with no GPU visible."""
    glue_dir = two_tasks(tmp_path)
    overrides = [f"model.checkpoint={tiny_checkpoint}", f"data.glue_dir={glue_dir}", *TINY, "glue.seeds=[7,8]"]
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        cfg = compose("glue", overrides=[*overrides, "glue.tasks=[sst2]"])
        folders = glue.prepared_runs(cfg, tmp_path / "run", find_tasks(glue_dir, ["sst2"]), glue_dir)
    good, bad = folders.values()
    saved = OmegaConf.load(bad / "subrun.yaml")
    saved.finetune.model.checkpoint = str(tmp_path / "gone")
    OmegaConf.save(saved, bad / "subrun.yaml")
    jobs = [Job("good", good, weight=2), Job("bad", bad, weight=1)]
    failed = schedule(jobs, [""], launch_worker, lambda job, status: None, poll_seconds=0.2)
    assert [(job.name, status) for job, status in failed] == [("bad", 1)]
    assert f"model.checkpoint={tmp_path / 'gone'}: no such file or directory" in failure_line(failed[0][0])
    accuracy = json.loads((good / "eval_results.json").read_text())["accuracy"]
    assert record(good)["metrics"] == {"accuracy": accuracy} and (good / "test_predictions" / "SST-2.tsv").is_file()
