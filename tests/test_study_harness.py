"""The seed study's harness (--harness study) against the fair harness: who trains what.

Real 2-process CPU runs (torchrun, gloo) on the tiny dataset, two at a time. Under the
study harness Lightning shards PyG's loader (built in a DataModule hook) but not DGL's
(built outside any hook, iterable dataset): every DGL rank trains the whole training
split. The fair harness splits both frameworks' seeds equally.
"""

import json
import math
import os
import subprocess
import sys

import jsonschema
import pandas as pd
import pytest

from tests.helpers import DATA_ROOT, REPO
from runners.records.result import schema as result_schema

SCHEMA = result_schema()
BATCH = 256
RUNS = {f"{h}-{fw}": (h, fw) for h in ("study", "fair") for fw in ("pyg", "dgl")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """run id -> result directory of a 2-process, 2-epoch run of every harness x framework."""
    root = tmp_path_factory.mktemp("study-harness")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    prep = subprocess.run([sys.executable, "-m", "runners.datasets", "prepare", "tiny", "--root", str(DATA_ROOT)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert prep.returncode == 0, prep.stdout + prep.stderr
    pending, running = list(RUNS.items()), []
    while pending or running:
        while pending and len(running) < 2:  # two runs at a time: the machine has 2 cores
            run_id, (harness, fw) = pending.pop(0)
            cmd = [sys.executable, "-m", "runners.run", "--framework", fw, "--model", "sage", "--devices", "2",
                   "--batch-size", str(BATCH), "--workers", "0", "--dataset", "tiny", "--epochs", "2",
                   "--fanouts", "6,5,4", "--data-root", str(DATA_ROOT), "--harness", harness,
                   "--out", str(root / run_id)]
            log = open(root / f"{run_id}.log", "w")
            running.append((run_id, subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT),
                            log))
        run_id, proc, log = running.pop(0)
        rc = proc.wait(timeout=300)
        log.close()
        assert rc == 0, f"{run_id}: exit {rc}\n" + (root / f"{run_id}.log").read_text()[-3000:]
    return {run_id: root / run_id for run_id in RUNS}


def rank_epochs(out):
    """rank -> its epochs.csv (the harness's own per-epoch record)."""
    return {r: pd.read_csv(out / f"rank{r}" / "epochs.csv") for r in (0, 1)}


def load_ok(out) -> dict:
    result = json.loads((out / "result.json").read_text())
    jsonschema.validate(result, SCHEMA)
    assert result["status"] == "ok", result.get("diagnosis")
    return result


@pytest.mark.parametrize("run_id", list(RUNS))
def test_work_per_rank(runs, run_id):
    harness, fw = RUNS[run_id]
    out = runs[run_id]
    result = load_ok(out)
    split = result["summary"]["train_split_seed_nodes"]
    from runners import datasets

    assert split == len(datasets.load("tiny", root=DATA_ROOT).train_idx)
    whole_split = harness == "study" and fw == "dgl"
    expected = split if whole_split else math.ceil(split / 2)  # equal shares, padded
    for rank, ep in rank_epochs(out).items():
        assert len(ep) == 2, f"rank {rank}: {len(ep)} epochs recorded"
        assert list(ep["seed_nodes"]) == [expected, expected], f"{run_id} rank {rank}"
        assert list(ep["steps"]) == [math.ceil(expected / BATCH)] * 2, f"{run_id} rank {rank}"
    s = result["summary"]
    assert s["harness"] == harness and result["config"]["harness"] == harness
    assert s["seed_nodes_per_rank_epoch"] == expected
    assert s["steps_per_rank_epoch"] == math.ceil(expected / BATCH)
    assert s["split_passes_per_epoch"] == pytest.approx(2.0 if whole_split else expected * 2 / split)
    for r in result["ranks"]:
        assert r["seed_nodes_per_epoch"] == [expected, expected]


def test_study_harness_records_how_it_ran(runs):
    dgl = load_ok(runs["study-dgl"])
    settings = dgl["config"]["harness_settings"]
    assert settings["name"] == "study" and settings["lightning"] == dgl["env"]["lightning"]
    assert "whole split" in dgl["config"]["adapter_choices"]["seed_split"]
    assert "self-loop" in dgl["config"]["adapter_choices"]["self_loops"]
    pyg = load_ok(runs["study-pyg"])
    assert "DistributedSampler" in pyg["config"]["adapter_choices"]["seed_split"]
    # trainer.fit's wall time (validation included) is the training time, as the study timed it.
    for result in (dgl, pyg):
        for r in result["ranks"]:
            loop = sum(e["time_s"] for e in result["epochs"] if e["rank"] == r["rank"])
            assert r["train_time_s"] > loop
        assert len(result["validation"]) == 2


def test_aggregate_has_work_columns(runs, tmp_path):
    from analysis.aggregate import aggregate

    df = aggregate([str(p) for p in runs.values()]).runs.set_index("run_name")
    assert set(df["harness"]) == {"fair", "study"}
    assert df.loc["study-dgl", "split_passes_per_epoch"] == pytest.approx(2.0)
    assert df.loc["study-pyg", "split_passes_per_epoch"] == pytest.approx(1.0, abs=0.01)
    split = df.loc["study-dgl", "train_split_seed_nodes"]
    assert df.loc["study-dgl", "steps_per_epoch"] == math.ceil(split / BATCH)
    assert df.loc["study-pyg", "steps_per_epoch"] == math.ceil(math.ceil(split / 2) / BATCH)
    assert df.loc["fair-dgl", "seed_nodes_per_rank_epoch"] == df.loc["fair-pyg", "seed_nodes_per_rank_epoch"]


def test_bad_harness_is_refused(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "runners.run", "--framework", "dgl", "--model", "sage",
                           "--devices", "1", "--batch-size", "64", "--workers", "0", "--dataset", "tiny",
                           "--epochs", "1", "--harness", "lightning", "--out", str(tmp_path / "x")],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 2
    assert "--harness 'lightning'" in proc.stderr and "fair, study" in proc.stderr
    assert not (tmp_path / "x").exists()


def test_report_section_puts_harnesses_side_by_side(runs, tmp_path):
    from analysis.report import render
    from analysis.aggregate import aggregate

    page = render.render(aggregate([str(p) for p in runs.values()]), tmp_path / "index.html", tmp_path)
    text = page.read_text()
    assert "Why did the seed study see what it saw?" in text and 'id="memory-model"' in text
    work = pd.read_csv(tmp_path / "study_work.csv").set_index(["harness", "framework"])
    assert work.loc[("study", "dgl"), "split_passes_per_epoch"] == pytest.approx(2.0)
    for key in (("study", "pyg"), ("fair", "pyg"), ("fair", "dgl")):
        assert work.loc[key, "split_passes_per_epoch"] == pytest.approx(1.0, abs=0.01), key
    time = pd.read_csv(tmp_path / "study_time.csv")
    assert set(time["harness"]) == {"study", "fair"} and (time["train_time_s"] > 0).all()
