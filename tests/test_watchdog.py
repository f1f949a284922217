"""Injected faults at 2 ranks on the tiny dataset: the right status, rank and cause, stacks of
every process, detection within threshold + 30 s, and no process of the run left behind."""

import json
import os
import re
import signal
import subprocess
import time

import psutil
import pytest

from tests.helpers import REPO, run_config

FLOOR = 8.0  # stall floor for these runs: small, so the tests are quick

FAULTS = {
    # fault: (allowed statuses, cause); the culprit is always the last rank (1).
    # gloo aborts on the mismatched collective that unequal batch counts cause; NCCL would hang.
    "uneven-batches": (("crashed", "hang"), "uneven_batches"),
    "stall-rank": (("hang",), "stalled_rank"),
    # Frozen (SIGSTOP) inside backward, the phase its victim waits in: process evidence names it.
    "freeze-rank": (("hang",), "stalled_rank"),
    "hang-worker": (("hang",), "stalled_worker"),
    "crash-rank": (("crashed",), "crash"),
    "kill-worker": (("crashed",), "dead_worker"),
}


def run_pids(out):
    """Every rank and loader-worker pid the run recorded."""
    pids = set()
    for f in out.glob("rank*/rank.json"):
        pids.add(json.loads(f.read_text())["pid"])
    for f in (out / "workers").glob("*.json"):
        pids.add(json.loads(f.read_text())["pid"])
    return pids


def alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_injected_fault_is_caught_and_explained(tmp_path, fault):
    statuses, cause = FAULTS[fault]
    out = tmp_path / fault
    t0 = time.time()
    proc = run_config(out, framework="dgl" if fault != "stall-rank" else "pyg", devices=2, workers=1, epochs=2,
                      extra=["--inject", fault, "--allow-fault-injection", "--stall-floor", str(FLOOR)])
    elapsed = time.time() - t0
    assert proc.returncode == 0, proc.stdout[-3000:]  # a recorded failure is a measured outcome
    result = json.loads((out / "result.json").read_text())
    assert result["status"] in statuses, result["diagnosis"]
    d = result["diagnosis"]
    assert d["cause"] == cause, d
    assert d["culprit_rank"] == 1, d
    assert result["config"]["inject"] == fault
    assert not result["summary"]
    # PyTorch's own collective timeout outlasts the watchdog's limits: a hang stays a hang.
    info = json.loads((out / "rank0" / "rank.json").read_text())
    assert info["collective_timeout_s"] > result["config"]["startup_timeout_s"] + result["config"]["stall_floor_s"]
    if fault == "kill-worker":
        # The process tree's own evidence names the worker the fault killed: its exit signal
        # (from its rank or the watchdog), or, when the loader reaped it first, the loader's report.
        victim = re.search(r"signalled loader worker pid (\d+)", (out / "logs" / "launcher.log").read_text()).group(1)
        first = d["evidence"][0]
        assert f"pid {victim}" in first or f"pid(s) {victim}" in first, d["evidence"]
        assert any(t in first for t in ("killed by SIGKILL before any rank failed", "exited unexpectedly",
                                        "is killed by signal")), first
    if fault == "freeze-rank":
        culprit = next(r for r in d["ranks"] if r["rank"] == 1)
        assert culprit["phase"] == "backward" and culprit["state"] == "stopped", culprit
        assert culprit["cpu_delta_s"] == 0, culprit
        assert "_freeze_self" in culprit["stack_top"][0], culprit
        assert next(r for r in d["ranks"] if r["rank"] == 0)["phase"] == "backward", d["ranks"]
    if result["status"] == "hang":
        # Detected once a rank passed the threshold, within 30 s of the culprit's last progress,
        # with stacks of every process. (A frozen culprit may have stopped just after its victim.)
        # idle_s and threshold_s are rounded to the same precision, so the order is kept.
        culprit = next(r for r in d["ranks"] if r["rank"] == 1)
        assert max(r["idle_s"] for r in d["ranks"]) >= d["threshold_s"]
        assert culprit["idle_s"] <= d["threshold_s"] + 30
        roles = set(d["stack_files"])
        assert {"rank0", "rank1"} <= roles
        assert {"rank0-worker0", "rank1-worker0"} <= roles, roles
        for name in d["stack_files"].values():
            assert "Thread" in (out / "stacks" / name).read_text()
        assert (out / "heartbeats" / "timeline.jsonl").stat().st_size > 0
    assert elapsed < 180
    # Nothing of the run survives, loader workers included.
    pids = run_pids(out)
    assert len(pids) >= 2
    assert not [p for p in pids if alive(p)]


def test_a_frozen_sole_rank_is_a_hang_that_blames_no_peer(tmp_path):
    """A 1-process run (one GPU) frozen inside backward: nobody waits for it in a collective, and
    the watchdog still declares the hang, names the rank, and leaves nothing running."""
    out = tmp_path / "freeze-1"
    proc = run_config(out, devices=1, epochs=2,
                      extra=["--inject", "freeze-rank", "--allow-fault-injection", "--stall-floor", str(FLOOR)])
    assert proc.returncode == 0, proc.stdout[-3000:]
    result = json.loads((out / "result.json").read_text())
    d = result["diagnosis"]
    assert (result["status"], d["cause"], d["culprit_rank"]) == ("hang", "stalled_rank", 0), d
    assert "only rank" in d["summary"] and "others wait" not in d["summary"], d["summary"]
    assert d["ranks"][0]["state"] == "stopped", d["ranks"]
    pids = run_pids(out)
    assert pids and not [p for p in pids if alive(p)]


def _cuda_devices() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:
        return 0


@pytest.mark.gpu
@pytest.mark.skipif(_cuda_devices() < 2, reason="needs 2 CUDA devices (NCCL)")
def test_nccl_stalled_rank_is_the_culprit(tmp_path):
    # Under NCCL the all-reduce is asynchronous: rank 0 runs on past its backward and blocks
    # elsewhere, ahead of the stalled rank 1, which the diagnosis must still name.
    out = tmp_path / "nccl-stall"
    proc = run_config(out, framework="dgl", devices=2, workers=1, epochs=2,
                      extra=["--device", "cuda", "--inject", "stall-rank", "--allow-fault-injection",
                             "--stall-floor", str(FLOOR)])
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "hang", (result["diagnosis"], proc.stdout[-3000:])
    d = result["diagnosis"]
    assert (d["cause"], d["culprit_rank"]) == ("stalled_rank", 1), d
    assert result["config"]["backend"] == "nccl"
    info = json.loads((out / "rank0" / "rank.json").read_text())
    assert info["collective_timeout_s"] > result["config"]["startup_timeout_s"] + FLOOR
    assert not [p for p in run_pids(out) if alive(p)]


def test_ok_run_is_not_flagged_with_a_tight_threshold(tmp_path):
    out = tmp_path / "ok"
    proc = run_config(out, framework="pyg", devices=2, workers=1, epochs=3,
                      extra=["--stall-floor", "5", "--stall-factor", "5"])
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "ok", (result["diagnosis"], proc.stdout[-2000:])
    assert not [p for p in run_pids(out) if alive(p)]


def test_time_limit_gives_timeout(tmp_path):
    # Far more epochs than 25 s allow on any machine (200 finished in 24.1 s on a quiet one).
    out = tmp_path / "slow"
    run_config(out, framework="dgl", devices=1, workers=0, epochs=100000, extra=["--time-limit", "25"])
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "timeout"
    assert result["diagnosis"]["cause"] == "timeout"
    # What was measured before the limit is kept.
    assert result["epochs"], "epochs finished before the time limit were lost"


def test_a_rank_held_in_its_start_up_is_a_hang_naming_the_phase(tmp_path):
    """A rank stopped from outside before the rendezvous (SIGSTOP while it imports): a hang that
    names the start-up phase, found within its start-up limit (a few times the other rank's
    measured imports, at least the floor) rather than at the time limit, nothing left behind."""
    from runners.rank.probes import read_heartbeat
    from runners.records.rundir import RunDir
    from tests.helpers import live_dir, run_env, runner_argv

    out = tmp_path / "held"
    proc = subprocess.Popen(runner_argv(out, devices=2, epochs=1, extra=["--stall-floor", str(FLOOR)]),
                            cwd=REPO, env=run_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 120
        while True:  # rank 1 has begun: its heartbeat says it is still importing
            hb = read_heartbeat(RunDir(live_dir(out)).heartbeat(1))
            if hb is not None and hb["phase"] == "starting":
                break
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            assert time.time() < deadline, "rank 1 never started"
            time.sleep(0.02)
        os.kill(hb["pid"], signal.SIGSTOP)
        held = time.time()
        log, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, log[-3000:]
    result = json.loads((out / "result.json").read_text())
    d = result["diagnosis"]
    assert result["status"] == "hang" and d["culprit_rank"] == 1, d
    assert "rank 1 made no progress in phase 'start-up: " in d["summary"], d["summary"]
    limit = d["startup_limit"]
    assert limit["phase"] in ("starting", "rendezvous") and limit["limit_s"] >= FLOOR, limit
    assert "imports" in limit["basis"] and limit["limit_s"] < result["config"]["startup_timeout_s"], limit
    assert d["detected_after_s"] <= (held - result_launch(result)) + limit["limit_s"] + 30, d
    assert not [p for p in run_pids(out) if alive(p)]


def result_launch(result) -> float:
    """The run's launch as a Unix time."""
    from datetime import datetime

    return datetime.fromisoformat(result["started_at"]).timestamp()
