"""DGL's GraphBolt loader (`--loader graphbolt`) beside the classic DataLoader.

Real 2-process runs (gloo, tiny dataset): the seeds each loader really delivered
(steps.csv `seed_id_sum`, summed from the batch's own seed ids) are compared between the two
loaders and with the harness's split; GraphSAGE and GAT must learn under GraphBolt.
"""

import csv
import json

import pytest

from runners import datasets
from runners.config import ConfigError, build_parser, config_from_args
from runners.rank.seeds import split_seeds
from tests.helpers import DATA_ROOT, run_config

BATCH = 128
EPOCHS = 2


def _config(*extra):
    argv = ["--framework", "dgl", "--model", "sage", "--devices", "2", "--batch-size", "8", "--workers", "0",
            "--dataset", "tiny", "--epochs", "1", "--out", "/tmp/x", *extra]
    return config_from_args(build_parser().parse_args(argv), 0, 2)


def test_loader_is_checked_with_its_framework_before_anything_runs():
    with pytest.raises(ConfigError, match=r"--loader graphbolt: --framework pyg offers neighbor"):
        _config("--framework", "pyg", "--loader", "graphbolt")
    with pytest.raises(ConfigError, match=r"--loader graphbolt: the study harness"):
        _config("--loader", "graphbolt", "--harness", "study")
    assert _config().loader == "classic"  # the framework's first loader when none is named


def test_default_loader_keeps_a_runs_identity():
    classic, named, gb = _config(), _config("--loader", "classic"), _config("--loader", "graphbolt")
    assert classic.identity("h") == named.identity("h")
    assert "loader" not in classic.identity("h")["settings"]  # as before --loader existed
    assert gb.identity("h")["digest"] != classic.identity("h")["digest"]
    assert "-dgl-graphbolt-" in gb.identity("h")["run_id"]


def _steps(out, rank):
    rows = list(csv.DictReader(open(out / f"rank{rank}" / "steps.csv")))
    return {e: [int(r["seed_id_sum"]) for r in rows if int(r["epoch"]) == e] for e in range(EPOCHS)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("graphbolt")
    out = {}
    for loader in ("classic", "graphbolt"):
        out[loader] = base / loader
        proc = run_config(out[loader], framework="dgl", devices=2, workers=1, epochs=EPOCHS, batch_size=BATCH,
                          extra=["--loader", loader, "--eval-every", "0"])
        res = json.loads((out[loader] / "result.json").read_text())
        assert res["status"] == "ok", proc.stdout[-3000:]
    return out


def test_graphbolt_trains_the_classic_loaders_seed_shares(runs):
    """Same seeds per rank, per epoch and per step as the classic loader: the harness's split,
    each batch once, also when a loader worker samples (GraphBolt under DDP would otherwise
    train 1/world of them, see adapters.dgl.RankItemSampler)."""
    graph = datasets.load("tiny", root=DATA_ROOT)
    for rank in range(2):
        delivered = _steps(runs["graphbolt"], rank)
        assert delivered == _steps(runs["classic"], rank), f"rank {rank}"
        assert delivered[0] != delivered[1], "epoch 1 replayed epoch 0's batches"
        for epoch in range(EPOCHS):
            share = split_seeds(graph.train_idx, rank, 2, 0, BATCH, False, epoch)
            assert delivered[epoch] == [int(share[i:i + BATCH].sum()) for i in range(0, len(share), BATCH)]


def test_graphbolt_run_records_its_loader_and_concurrency(runs):
    res = json.loads((runs["graphbolt"] / "result.json").read_text())
    assert res["config"]["loader"] == "graphbolt"
    choices = res["ranks"][0]["adapter_choices"]
    assert choices["loader"] == "graphbolt" and "graphbolt" in choices["sampler"]
    assert choices["concurrency"]["gb_dataloader_num_workers"] == 1
    assert choices["concurrency"]["persistent_workers"] is True
    assert "--workers 1 -> gb.DataLoader(num_workers=1)" in choices["concurrency"]["mapping"]
    classic = json.loads((runs["classic"] / "result.json").read_text())
    assert classic["config"]["loader"] == "classic" and "concurrency" not in classic["ranks"][0]["adapter_choices"]


@pytest.mark.parametrize("model", ["sage", "gat"])
def test_models_learn_under_graphbolt(tmp_path, model):
    """Validation accuracy clearly above the features-only baseline (a graph-blind model)."""
    out = tmp_path / model
    proc = run_config(out, framework="dgl", model=model, devices=1, epochs=4, batch_size=64,
                      extra=["--loader", "graphbolt", "--lr", "0.02", "--dropout", "0.2", "--eval-every", "end"])
    res = json.loads((out / "result.json").read_text())
    assert res["status"] == "ok", proc.stdout[-3000:]
    baseline = res["accuracy_reference"]["baseline_val_acc"]
    assert res["summary"]["final_val_acc"] > baseline + 0.1, (res["summary"]["final_val_acc"], baseline)


def test_fault_needing_a_pipeline_is_refused_without_graphbolt():
    with pytest.raises(ConfigError, match=r"--inject hang-pipeline stops a stage of a loader's pipeline and needs "
                                          r"--loader graphbolt, got --loader the default"):
        _config("--inject", "hang-pipeline", "--allow-fault-injection")


@pytest.mark.parametrize("fault,workers,cause", [("hang-pipeline", 0, "stalled_pipeline"),
                                                  ("hang-worker", 1, "stalled_worker")])
def test_hang_inside_graphbolt_is_named(tmp_path, fault, workers, cause):
    """GraphBolt's own threads and processes under the watchdog. hang-pipeline: a stage of rank
    1's pipeline never returns, in its prefetch thread (where GraphBolt samples and fetches
    features without workers); the evidence names the thread and the stage it is in.
    hang-worker: rank 1's GraphBolt worker process is stopped; it is named with its stack. Either
    way a hang with rank 1 the culprit, and nothing of the run is left running."""
    import psutil

    out = tmp_path / fault
    proc = run_config(out, framework="dgl", devices=2, workers=workers, epochs=2,
                      extra=["--loader", "graphbolt", "--inject", fault, "--allow-fault-injection",
                             "--stall-floor", "8"])
    assert proc.returncode == 0, proc.stdout[-3000:]
    res = json.loads((out / "result.json").read_text())
    d = res["diagnosis"]
    assert res["status"] == "hang" and d["cause"] == cause and d["culprit_rank"] == 1, d
    if fault == "hang-pipeline":
        named = [e for e in d["evidence"] if "pipeline thread" in e]
        assert named and "PipelineStall.__call__ (runners/adapters/dgl.py" in named[0], d["evidence"]
        culprit = next(r for r in d["ranks"] if r["rank"] == 1)
        assert culprit["phase"] == "loading"
        assert any("prefetcher.py" in f for t in culprit["threads"] for f in t["frames"]), culprit["threads"]
    else:
        assert d["evidence"][0].startswith("loader worker rank1-worker0 (pid ") and "is stopped" in d["evidence"][0]
        assert "rank1-worker0" in d["stack_files"], d["stack_files"]
    pids = [json.loads(f.read_text())["pid"] for f in out.glob("rank*/rank.json")]
    pids += [json.loads(f.read_text())["pid"] for f in (out / "workers").glob("*.json")]
    assert len(pids) == 2 + 2 * workers, pids
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
