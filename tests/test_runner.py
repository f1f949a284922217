"""Real DDP runs of the runner on the tiny dataset (CPU, gloo): statuses, schema, learning,
determinism, bad input and a two-agent multi-node job."""

import csv
import json
import subprocess
import sys
import threading
from pathlib import Path

import jsonschema
import pytest

from runners.adapters import registry
from tests.helpers import REPO, free_port, run_config, steps_losses
from runners.records.result import schema as result_schema

SCHEMA = result_schema()


def check_ok_result(out: Path, devices: int) -> dict:
    result = json.loads((out / "result.json").read_text())
    jsonschema.validate(result, SCHEMA)
    assert result["status"] == "ok", result.get("diagnosis")
    s = result["summary"]
    assert s["train_time_s"] == pytest.approx(max(r["train_time_s"] for r in result["ranks"]))
    assert s["train_time_s"] > 0 and s["throughput_seed_nodes_per_s"] > 0
    assert 0.0 <= s["final_val_acc"] <= 1.0
    assert len(result["ranks"]) == devices
    # Every rank took the same number of steps in every epoch.
    for epoch in {e["epoch"] for e in result["epochs"]}:
        assert len({e["steps"] for e in result["epochs"] if e["epoch"] == epoch}) == 1
    for r in range(devices):
        assert (out / f"rank{r}" / "steps.csv").exists()
        assert (out / f"rank{r}" / "cpu.csv").exists()
    assert result["probes"]["nvml"]["available"] is False and result["probes"]["nvml"]["reason"]
    assert result["env"]["pyg_sampler_backend"] in ("pyg-lib", "torch-sparse")
    assert result["env"]["dataset_hash"]
    return result


# Per framework, each of sage and gat at both process counts and both worker counts, and every
# (processes, workers) pair once: 4 runs, not the 8 of the full product (one e2e run per behaviour).
GRID = [(fw, model, devices, workers) for fw in ("pyg", "dgl")
        for model, devices, workers in (("sage", 1, 0), ("sage", 2, 1), ("gat", 1, 1), ("gat", 2, 0))]
# Every other registered model: one DDP run with a loader worker per framework.
GRID += [(fw, model, 2, 1) for fw in registry.FRAMEWORK_NAMES for model in registry.MODEL_NAMES
         if model not in ("sage", "gat")]


@pytest.mark.parametrize("framework,model,devices,workers", GRID,
                         ids=[f"{f}-{m}-d{d}-w{w}" for f, m, d, w in GRID])
def test_run_trains(tmp_path, framework, model, devices, workers):
    out = tmp_path / "run"
    proc = run_config(out, framework=framework, model=model, devices=devices, workers=workers, epochs=3)
    assert proc.returncode == 0, proc.stdout[-3000:]
    result = check_ok_result(out, devices)
    assert result["config"]["fanouts"] == [6, 5, 4]
    assert result["config"]["fanouts_framework"] == ([6, 5, 4] if framework == "pyg" else [4, 5, 6])
    losses = steps_losses(out / "rank0" / "steps.csv")
    k = max(2, len(losses) // 4)
    assert sum(losses[-k:]) / k < sum(losses[:k]) / k, "training loss did not fall"
    assert "epoch 3/3" in proc.stdout  # one progress line per epoch


def test_pyg_trim_trains_on_this_sampler_backend(tmp_path):
    """--pyg-trim runs on torch-sparse too (it reports no per-hop counts: the adapter derives them),
    with all neighbours at one hop (`--fanouts -1,4`, as the help offers -1)."""
    out = tmp_path / "run"
    proc = run_config(out, framework="pyg", devices=2, epochs=3, extra=["--pyg-trim", "--layers", "2",
                                                                        "--fanouts", "-1,4"])
    assert proc.returncode == 0, proc.stdout[-3000:]
    result = check_ok_result(out, 2)
    assert result["config"]["pyg_trim"] is True and result["config"]["fanouts"] == [-1, 4]
    assert result["config"]["adapter_choices"]["layer_compute"].startswith("trim_to_layer"), result["config"]
    losses = steps_losses(out / "rank0" / "steps.csv")
    k = max(2, len(losses) // 4)
    assert sum(losses[-k:]) / k < sum(losses[:k]) / k, "training loss did not fall"


@pytest.mark.parametrize("framework", ["pyg", "dgl"])
def test_same_configuration_gives_identical_losses(tmp_path, framework):
    a = run_config(tmp_path / "a", framework=framework, model="sage", devices=2, workers=0, epochs=2)
    b = run_config(tmp_path / "b", framework=framework, model="sage", devices=2, workers=0, epochs=2)
    assert a.returncode == 0 and b.returncode == 0
    for r in (0, 1):
        la = steps_losses(tmp_path / "a" / f"rank{r}" / "steps.csv")
        lb = steps_losses(tmp_path / "b" / f"rank{r}" / "steps.csv")
        assert la and la == lb
    c = run_config(tmp_path / "c", framework=framework, model="sage", devices=2, workers=0, epochs=2,
                   extra=["--seed", "7"])
    assert steps_losses(tmp_path / "c" / "rank0" / "steps.csv") != steps_losses(
        tmp_path / "a" / "rank0" / "steps.csv"), "the seed does not reach the run"


BAD = [
    (["--framework", "tensorflow"], "--framework 'tensorflow'"),
    (["--model", "gin"], "--model 'gin'"),
    (["--dataset", "cora"], "--dataset 'cora'"),
    (["--devices", "0"], "--devices 0"),
    (["--batch-size", "0"], "--batch-size 0"),
    (["--workers", "-1"], "--workers -1"),
    (["--fanouts", "5,5"], "has 2 hops but the model has 3 layers"),
    (["--device", "cuda"], "no GPU is visible"),
    (["--inject", "stall-rank"], "needs --allow-fault-injection"),
    (["--inject", "hang-worker", "--allow-fault-injection"], "needs --workers >= 1"),
    (["--inject", "explode", "--allow-fault-injection"], "--inject 'explode' is unknown"),
]


@pytest.mark.parametrize("override,message", BAD, ids=[b[1][:30] for b in BAD])
def test_bad_input_is_rejected_before_launch(tmp_path, override, message):
    out = tmp_path / "bad"
    proc = run_config(out, framework="pyg", model="sage", devices=1, workers=0, epochs=1, extra=override,
                      timeout=60)
    assert proc.returncode == 2
    assert message in proc.stdout
    assert not (out / "result.json").exists() and not (out / "logs").exists()


def test_two_agents_form_one_two_node_job(tmp_path):
    port = free_port()
    procs = {}

    def node(rank):
        procs[rank] = run_config(tmp_path / "job", framework="dgl", model="sage", devices=1, workers=0,
                                 epochs=2, extra=["--nnodes", "2", "--node-rank", str(rank),
                                                  "--master-port", str(port)])

    threads = [threading.Thread(target=node, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # One --out for the job: node 0 owns result.json, node 1 writes into its node1/ subdirectory.
    r0 = json.loads((tmp_path / "job" / "result.json").read_text())
    r1 = json.loads((tmp_path / "job" / "node1" / "result.json").read_text())
    assert r0["status"] == "ok" and r1["status"] == "ok", (procs[0].stdout[-2000:], procs[1].stdout[-2000:])
    assert [r["rank"] for r in r0["ranks"]] == [0] and [r["rank"] for r in r1["ranks"]] == [1]
    # Node 0 knows the slowest rank of the whole job, including the one on the other node.
    assert len(r0["summary"]["rank_train_times_s"]) == 2
    assert r0["summary"]["train_time_s"] == pytest.approx(max(r0["summary"]["rank_train_times_s"]))


def test_cpu_busy_before_launch_counts_other_work_and_not_the_launcher():
    """The launcher's busy check must see a process that competes for the cores, and must not
    count its own start-up work (it samples while it starts instead of sleeping)."""
    import time

    import psutil

    from runners.launch.ranks import cpu_mark, other_cpu_busy_percent

    t = psutil.cpu_times()
    own = 5.0
    since = (t, own)
    later = type(t)(*[v + (2.0 if f == "user" else 0.0) for f, v in zip(t._fields, t)])
    # 2 s of user time in all, 1.5 s of it this process's: 0.5 s of other work in a 2 s window.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("runners.launch.ranks.cpu_mark", lambda: (later, own + 1.5))
        assert other_cpu_busy_percent(since) == 25.0
    hog = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 5: pass"])
    try:
        time.sleep(0.5)  # the hog is running
        mark = cpu_mark()
        time.sleep(0.5)
        busy = other_cpu_busy_percent(mark)
    finally:
        hog.kill()
        hog.wait()
    # One core of psutil.cpu_count() kept busy by another process.
    assert busy >= 0.6 * 100 / psutil.cpu_count(), busy
