"""Memory: the --memory-limit option, the pre-flight memory model, and a real OOM kill under a cap."""

import json
import re
from pathlib import Path

import jsonschema
import psutil
import pytest

from runners.config import ConfigError, RunConfig, build_parser, config_from_args
from runners.launch import preflight
from runners.memory import cgroup, model, peak, units
from runners.watch.evidence import MemoryWatch, oom_evidence
from runners.watch.supervisor import RankWatch
from tests.helpers import REPO, run_config
from runners.records.result import schema as result_schema

META = {"num_nodes": 232_965, "num_edges": 114_615_892, "num_features": 602, "num_classes": 41,
        "dataset_bytes": 1_500_000_000, "adjacency_bytes": 918_000_000}


def _cfg(**kw) -> RunConfig:
    base = dict(framework="pyg", model="sage", devices=2, batch_size=1024, workers=2, dataset="tiny",
                epochs=1, out="/tmp/unused", fanouts=[10, 10, 10], hidden=256)
    base.update(kw)
    return RunConfig(**base)


@pytest.mark.parametrize("text,expected", [("512M", 512 * 2**20), ("2G", 2 * 2**30), ("1.5g", 3 * 2**29),
                                           ("2GiB", 2 * 2**30), ("104857600", 104857600)])
def test_parse_size_accepts_binary_units(text, expected):
    assert units.parse_size(text) == expected


@pytest.mark.parametrize("text", ["2X", "abc", "", "-1G", "1 G B", "12M", "1000"])
def test_parse_size_rejects_with_the_value_named(text):
    with pytest.raises(units.MemoryLimitError) as exc:
        units.parse_size(text)
    assert repr(text) in str(exc.value)


def test_bad_memory_limit_is_refused_before_launch(tmp_path):
    res = run_config(tmp_path / "r", framework="dgl", extra=["--memory-limit", "2X"], timeout=120)
    assert res.returncode == 2, res.stdout
    assert "--memory-limit '2X'" in res.stdout and "512M" in res.stdout
    assert not (tmp_path / "r" / "result.json").exists()  # refused before anything ran


def test_memory_limit_option_reaches_the_config():
    args = build_parser().parse_args(["--framework", "dgl", "--model", "sage", "--devices", "1", "--batch-size",
                                      "8", "--workers", "0", "--dataset", "tiny", "--epochs", "1", "--out", "x",
                                      "--memory-limit", "768M"])
    assert config_from_args(args, 0, 2).memory_limit_bytes == 768 * 2**20
    args.memory_limit = "lots"
    with pytest.raises(ConfigError, match="'lots'"):
        config_from_args(args, 0, 2)


def test_model_grows_with_workers_ranks_and_batch():
    total = lambda **kw: model.model_peak(_cfg(**kw), META)["total_bytes"]  # noqa: E731
    assert total(workers=0) < total(workers=1) < total(workers=2) < total(workers=8)
    assert total(devices=1) < total(devices=2) < total(devices=4)
    assert total(batch_size=16) < total(batch_size=64) < total(batch_size=256)
    # a batch can't reach more nodes than the graph has
    assert total(batch_size=10**6) == total(batch_size=2 * 10**6)


def test_model_leaves_compute_to_the_gpu_on_cuda():
    cpu = model.model_peak(_cfg(), META)["terms_bytes"]
    gpu = model.model_peak(_cfg(device_type="cuda", backend="nccl"), META)["terms_bytes"]
    assert cpu["compute"] > 0 and cpu["parameters_optimizer"] > 0
    assert gpu["compute"] == 0 and gpu["parameters_optimizer"] == 0
    assert gpu["batches_in_flight"] == cpu["batches_in_flight"]


def test_model_counts_pyg_adjacency_copies_only_with_workers():
    terms = lambda **kw: model.model_peak(_cfg(**kw), META)["terms_bytes"]  # noqa: E731
    assert terms(framework="pyg", workers=2, devices=4)["dataset_copies"] == 4 * META["adjacency_bytes"]
    assert terms(framework="pyg", workers=0)["dataset_copies"] == 0
    assert terms(framework="dgl", workers=2)["dataset_copies"] == 0
    assert terms(framework="dgl", workers=2)["dataset_shared"] == META["dataset_bytes"]


def test_preflight_reports_the_model(capsys):
    env = {"shm_bytes": 2**34, "open_files_limit": 20000, "memory_bytes": 2**30}
    pre = preflight.preflight(_cfg(workers=8, devices=4, memory_limit_bytes=2**30), env, META)
    modelled = pre["memory_model"]
    assert pre["memory_model_bytes"] == modelled["total_bytes"] > 2**30
    assert pre["memory_limit_bytes"] == 2**30
    for key in ("agent_baseline", "rank_baseline", "worker_baseline", "dataset_shared", "dataset_copies",
                "batches_in_flight", "compute", "parameters_optimizer"):
        assert key in modelled["terms_bytes"]
    assert modelled["inputs"]["batch_nodes_bound"] == META["num_nodes"]  # 1024 x 10 x 10 x 10 > nodes
    assert any("exceeds --memory-limit" in w for w in pre["warnings"])
    assert "modelled peak host memory" in capsys.readouterr().out


def test_measured_peak_sums_ranks_and_workers_at_the_same_sample(tmp_path):
    cols = "t_s,pid,role,cpu_percent,rss_bytes,uss_bytes,pss_bytes\n"
    (tmp_path / "rank0").mkdir()
    (tmp_path / "rank1").mkdir()
    (tmp_path / "rank0" / "cpu.csv").write_text(cols + "0.0,1,rank,0,500,100,200\n0.5,1,rank,0,600,,\n"
                                                "5.0,1,rank,0,700,300,400\n5.0,2,worker,0,100,10,20\n")
    (tmp_path / "rank1" / "cpu.csv").write_text(cols + "0.0,3,rank,0,500,100,900\n5.0,3,rank,0,500,100,100\n")
    measured = peak.measured_peak(tmp_path, [0, 1])
    # sample 0: 200 + 900 = 1100; sample 1: 420 + 100 = 520
    assert measured["pss_bytes"] == 1100
    assert measured["uss_bytes"] == 410


def _cgroup_reason():
    try:
        cgroup.MemoryCgroup.check()
    except units.MemoryLimitError as exc:
        return str(exc)
    return None


@pytest.mark.skipif(_cgroup_reason() is not None, reason=f"no writable memory cgroup: {_cgroup_reason()}")
@pytest.mark.e2e  # a real run
def test_too_small_memory_cap_is_diagnosed_as_oom(tmp_path):
    # A wide model (hidden 4096) holds ~0.7 GB of anonymous memory per rank once training starts
    # (gradients and Adam's moments appear at the first step), against ~1.3 GB for the whole tree
    # at start-up: a 1800M cap lets start-up through and kills a process in the first step. The
    # pre-flight models more than the cap and would refuse the run: --force-launch.
    out = tmp_path / "oom"
    stall = 20
    res = run_config(out, framework="dgl", devices=2, workers=1, epochs=1, batch_size=64,
                     extra=["--hidden", "4096", "--eval-every", "0", "--memory-limit", "1800M", "--force-launch",
                            "--stall-floor", str(stall)], timeout=300)
    assert res.returncode == 0, res.stdout[-3000:]
    result = json.loads((out / "result.json").read_text())
    jsonschema.validate(result, result_schema())
    diag = result["diagnosis"]
    assert result["status"] == "killed", diag  # never "hang": the kill is what happened
    assert diag["cause"] == "oom", diag
    killed = diag["oom"]["killed"]
    assert killed and all(re.match(r"rank\d+(-worker\d+)?$", k["role"]) for k in killed), killed
    assert killed[0]["role"] in diag["summary"] and "out of memory" in diag["summary"]
    assert diag["oom"]["cgroup"]["oom_kill"] >= 1
    # the training had started: every rank was past start-up when the kill was seen
    assert diag["oom"]["first_seen_s"] is not None
    assert "starting" not in diag["oom"]["phases_at_kill"].values(), diag["oom"]
    assert result["memory"]["limit_bytes"] == 1800 * 2**20 == result["config"]["memory_limit_bytes"]
    assert result["memory"]["model_bytes"] == result["preflight"]["memory_model_bytes"] > 0
    # stopped within the stall threshold + 30 s of the kill, and nothing is left behind
    assert result["wall_time_s"] - diag["oom"]["first_seen_s"] <= stall + 30
    assert result["watchdog"]["survivors"] == [] and result["memory"]["cgroup_leftover_pids"] == []
    assert not __import__("pathlib").Path(diag["oom"]["cgroup"]["cgroup"]).exists()
    # runs.csv and the memory table carry the model, the cgroup's peak and the killed process
    from analysis.aggregate import aggregate
    from analysis.tables.memory import memory_model_table

    agg = aggregate([out])
    row = agg.runs.iloc[0]
    assert row["diag_cause"] == "oom" and row["mem_limit_bytes"] == 1800 * 2**20
    assert row["mem_model_bytes"] > 0 and row["mem_cgroup_peak_bytes"] > 0
    table = memory_model_table(agg.runs)
    # the cap can kill more than one process (both ranks, say): the table names every one
    assert len(table) == 1 and set(table.iloc[0]["oom_killed"].split(", ")) == {k["role"] for k in killed}
    left = []
    for p in psutil.process_iter(["cmdline"]):
        if str(out.parent) in " ".join(p.info["cmdline"] or []):  # the run's staging directory too
            left.append(p.pid)
    assert left == []


def test_refuses_a_cap_without_root(monkeypatch):
    monkeypatch.setattr(cgroup.os, "geteuid", lambda: 1000)
    with pytest.raises(units.MemoryLimitError, match="needs root"):
        cgroup.MemoryCgroup.check()


def _stats(usage, faults):
    return {"cgroup": "/sys/fs/cgroup/memory/x", "limit_bytes": 1000, "usage_bytes": usage, "peak_bytes": 1000,
            "anon_bytes": 600, "file_bytes": 100, "shmem_bytes": 300, "major_faults": faults, "t": 5.0}


def apply_oom(outcome, oom, memory):
    """`outcome` after diagnosis.OVERRIDES, with the OOM evidence the supervisor gathers (Findings.oom)."""
    from runners.watch.diagnosis import apply_overrides

    outcome.findings.oom = (oom, memory)
    return apply_overrides(outcome)


def test_a_hang_at_the_memory_cap_is_named_memory_pressure(tmp_path):
    from runners.watch.diagnosis import Outcome

    hang = {"summary": "hang: rank 0 made no progress; cause: a loader worker stopped", "cause": "stalled_worker",
            "ranks": [], "evidence": ["rank 0: no progress"]}
    out = apply_oom(Outcome("hang", dict(hang)), None, MemoryWatch(last=_stats(990, 500), full=_stats(960, 20)))
    assert out.diagnosis["cause"] == "memory_pressure" and out.diagnosis["previous_cause"] == "stalled_worker"
    assert "480 major page faults" in " ".join(out.diagnosis["evidence"])
    # below the cap at detection: the hang keeps its own diagnosis
    out = apply_oom(Outcome("hang", dict(hang)), None, MemoryWatch(last=_stats(500, 500), full=_stats(960, 20)))
    assert out.diagnosis["cause"] == "stalled_worker"


class _Cgroup:
    """The memory cgroup's record as a capped run leaves it: one OOM kill counted."""

    path = Path("/sys/fs/cgroup/memory/gnnscale-test-none")

    def stats(self):
        return dict(_stats(990, 500), oom_kill=1)


def _killed_run(tmp_path, ranks=2, oom_seen=True) -> tuple:
    """(OOM evidence, memory watch) of a capped run whose rank 0 loader worker the OOM killer
    took, gathered from its directory and cgroup record as the supervisor gathers them."""
    (tmp_path / "rank0").mkdir()
    (tmp_path / "rank0" / "error.json").write_text(json.dumps({
        "message": "DataLoader worker (pid(s) 4242) exited unexpectedly", "worker_failure": None}))
    phases = {0: "loading", **{r: "backward" for r in range(1, ranks)}}
    memory = MemoryWatch(last=_stats(990, 500), full=_stats(960, 20),
                         oom_seen={"t": 3.0, "oom_kill": 1, "phases": phases} if oom_seen else None)
    watch = {r: RankWatch(r) for r in range(ranks)}
    return oom_evidence(tmp_path, watch, set(), -1, _Cgroup(), None, memory), memory


def test_an_oom_kill_is_status_killed_whatever_the_run_showed_after_it(tmp_path):
    from runners.watch.diagnosis import Outcome

    hang = {"summary": "hang: ...; cause: every rank is blocked in a collective", "cause": "collective_mismatch",
            "ranks": [], "evidence": []}
    for status in ("hang", "crashed", "timeout"):
        run_dir = tmp_path / status
        run_dir.mkdir()
        out = apply_oom(Outcome(status, dict(hang)), *_killed_run(run_dir, ranks=8))
        assert out.status == "killed", status
        d = out.diagnosis
        assert (d["cause"], d["previous_status"], d["previous_cause"]) == ("oom", status, "collective_mismatch")
        assert d["summary"] == ("killed: out of memory under the 1000 B memory cap: the OOM killer killed "
                                "rank0-worker (pid 4242); left waiting: 7 ranks in 'backward' (ranks 1-7); "
                                "cause: memory exhaustion"), d["summary"]


def test_kills_after_a_hang_at_the_cap_stay_memory_pressure(tmp_path):
    from runners.watch.diagnosis import Outcome

    hang = {"summary": "hang: rank 0 made no progress; cause: a loader worker stopped", "cause": "stalled_worker",
            "ranks": [], "evidence": []}
    out = apply_oom(Outcome("hang", dict(hang)), *_killed_run(tmp_path, oom_seen=False))
    assert out.status == "hang" and out.diagnosis["cause"] == "memory_pressure"
    assert out.diagnosis["oom"]["killed"][0]["pid"] == 4242


def test_the_memory_watch_keeps_the_first_time_at_the_cap_and_the_first_kill():
    watch, asked = MemoryWatch(), []

    def phases():
        asked.append(1)
        return {0: "backward"}

    watch.observe(_stats(500, 1), 1.0, phases)
    assert watch.full is None and watch.oom_seen is None and not asked  # below the cap, no kill
    watch.observe(_stats(960, 2), 2.0, phases)
    watch.observe(dict(_stats(999, 3), oom_kill=1), 3.0, phases)
    watch.observe(dict(_stats(999, 4), oom_kill=2), 4.0, phases)
    assert watch.full["t"] == 2.0 and watch.last["t"] == 4.0
    assert watch.oom_seen == {"t": 3.0, "oom_kill": 1, "phases": {0: "backward"}} and len(asked) == 1
