"""A run's identity (result.json run_id) and how aggregation keys on it: runs of two
datasets side by side, a multi-node job's node1/result.json, and a result that breaks its
schema when the runner writes it. Real runs: the session's cached grid (tests/_runs.py)
plus a few short runs of our own."""

import json
import shutil
import threading

import pytest

from analysis import aggregate
from runners.config import NOT_IN_IDENTITY, RunConfig
from runners.records import result
from tests import _runs
from tests.helpers import free_port, run_config

QUICK = ["--max-steps-per-epoch", "2", "--eval-every", "0"]


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory):
    return _runs.real_runs(tmp_path_factory)


def _result(run_dir):
    return json.loads((run_dir / "result.json").read_text())


def test_identity_is_derived_from_settings_and_dataset(runs_dir):
    r = _result(runs_dir / "dgl-sage-d1")
    assert r["run_name"] == "dgl-sage-d1" and "schema_errors" not in r
    cfg = RunConfig.from_json(r["config"])
    ident = cfg.identity(r["env"]["dataset_hash"])
    assert r["identity"] == ident and r["run_id"] == ident["run_id"]
    assert r["run_id"].startswith("tiny-dgl-sage-d1-b128-w0-r0-")
    assert not set(NOT_IN_IDENTITY) & set(ident["settings"])
    # Every other setting counts: another seed, dataset or dataset hash is another run;
    # another output directory is not.
    for change in ({"seed": 1}, {"dataset": "small"}, {"stall_floor_s": 3.0}):
        assert RunConfig.from_json({**r["config"], **change}).identity(r["env"]["dataset_hash"]) != ident
    assert cfg.identity("0" * 64)["run_id"] != ident["run_id"]
    assert RunConfig.from_json({**r["config"], "out": "/elsewhere"}).identity(
        r["env"]["dataset_hash"]) == ident
    ids = {_result(runs_dir / name)["run_id"] for name in _runs.GRID}
    assert len(ids) == len(_runs.GRID)


def test_two_datasets_aggregate_as_two_runs(runs_dir, tmp_path):
    # The same directory name on another dataset, as results/runs/{dataset}/{name} lays out.
    other = tmp_path / "small" / "dgl-sage-d1"
    proc = run_config(other, framework="dgl", devices=1, epochs=1, dataset="small", extra=QUICK,
                      timeout=300)
    assert proc.returncode == 0 and _result(other)["status"] == "ok", proc.stdout[-3000:]
    agg = aggregate.aggregate([runs_dir / "dgl-sage-d1", other])
    assert agg.invalid.empty, agg.invalid.to_dict("records")
    assert sorted(agg.runs["dataset"]) == ["small", "tiny"]
    assert list(agg.runs["run_name"]) == ["dgl-sage-d1", "dgl-sage-d1"]
    assert agg.runs["run_id"].nunique() == 2
    for rid in agg.runs["run_id"]:
        assert not agg.epochs[agg.epochs["run_id"] == rid].empty

    # The same run reached twice (a copied directory) is still one run and one duplicate.
    copy = tmp_path / "copy" / "renamed"
    shutil.copytree(runs_dir / "dgl-sage-d1", copy)
    agg = aggregate.aggregate([runs_dir / "dgl-sage-d1", copy])
    assert len(agg.runs) == 1
    assert list(agg.invalid["path"]) == [str(copy / "result.json")]
    assert "duplicate run" in agg.invalid["reason"].iloc[0]


def test_node1_result_is_part_of_node0s_run(tmp_path):
    port, procs = free_port(), {}

    def node(rank):
        procs[rank] = run_config(tmp_path / "job", framework="dgl", devices=1, epochs=1,
                                 extra=QUICK + ["--nnodes", "2", "--node-rank", str(rank),
                                                "--master-port", str(port)], timeout=300)

    threads = [threading.Thread(target=node, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    r0, r1 = _result(tmp_path / "job"), _result(tmp_path / "job" / "node1")
    assert r0["status"] == "ok" and r1["status"] == "ok", (procs[0].stdout[-2000:], procs[1].stdout[-2000:])
    assert r0["run_id"] == r1["run_id"] and "-d1x2-" in r0["run_id"]

    agg = aggregate.aggregate([tmp_path])
    assert list(agg.runs["run_id"]) == [r0["run_id"]] and agg.invalid.empty
    assert sorted(agg.epochs["rank"].unique()) == [0, 1]  # node 1's rank joins the run
    assert sorted(agg.steps["rank"].unique()) == [0, 1]
    assert set(agg.steps["run_id"]) == {r0["run_id"]}

    # Without its node-0 result, node 1's result is listed, never counted as a run.
    alone = aggregate.aggregate([tmp_path / "job" / "node1"])
    assert agg.runs.shape[0] == 1 and alone.runs.empty
    assert "node 1 of a multi-node run" in alone.invalid["reason"].iloc[0]


def test_invalid_result_is_caught_when_written_and_kept(runs_dir, tmp_path):
    run_dir = tmp_path / "broken"
    shutil.copytree(runs_dir / "dgl-sage-d1", run_dir)
    good = _result(run_dir)
    assert result.write(run_dir, dict(good)) == []
    assert "schema_errors" not in _result(run_dir)

    bad = json.loads(json.dumps(good))
    bad["config"]["devices"] = 0  # what a bug in the runner could produce
    del bad["env"]["hostname"]
    errors = result.write(run_dir, bad)
    assert any(e.startswith("config.devices") for e in errors) and any("hostname" in e for e in errors)
    on_disk = _result(run_dir)
    # Written anyway: status unchanged, measurements kept, the errors recorded.
    assert on_disk["status"] == good["status"] == "ok"
    assert on_disk["epochs"] == good["epochs"] and on_disk["summary"] == good["summary"]
    assert on_disk["schema_errors"] == errors

    agg = aggregate.aggregate([run_dir])
    assert agg.runs.empty
    reason = agg.invalid.set_index("path").loc[str(run_dir / "result.json"), "reason"]
    assert "found by the runner" in reason and "config.devices" in reason
