"""The watchdog's decisions over recorded evidence (pure logic, fed constructed evidence), and
the process-level evidence it reads from real processes (/proc: state, CPU time, exit signal)."""

import os
import signal
import subprocess
import sys
import time

import pytest

from runners.rank.probes import exit_of, proc_stat
from runners.watch.diagnosis import CAUSES, blame, decide_exit, decide_stop
from runners.watch.evidence import ProcessLedger, process_states


def rank(r, epoch, step, phase, state="sleeping", cpu=0.0, stack=()):
    return {"rank": r, "epoch": epoch, "step": step, "phase": phase, "state": state, "state_before": state,
            "cpu_delta_s": cpu, "cpu_interval_s": 1.0, "stack_top": list(stack)}


def stop_ev(ranks, workers=(), counts=None):
    return {"status": "hang", "ranks": ranks, "workers": list(workers), "counts": counts, "shm": None}


# -- hangs: which rank the others wait for ---------------------------------------------------
def test_frozen_rank_in_the_same_phase_as_its_victim_is_the_culprit():
    # Both ranks in 'backward': heartbeats alone cannot tell the culprit from the waiting rank.
    victim = rank(0, 0, 2, "backward", stack=["backward (torch/autograd/__init__.py:266)"])
    frozen = rank(1, 0, 2, "backward", state="stopped", stack=["_freeze_self (runners/rank/harness.py:112)"])
    assert decide_stop(stop_ev([victim, frozen]))[:2] == ("stalled_rank", 1)
    culprit, why = blame([victim, frozen])
    assert culprit == 1 and "stopped" in why[0] and "_freeze_self" in why[0]
    # Without process evidence the same heartbeats name nobody (and no healthy rank is blamed).
    unknown = [dict(x, state=None, state_before=None, cpu_delta_s=None) for x in (victim, frozen)]
    assert decide_stop(stop_ev(unknown))[:2] == ("collective_mismatch", None)


def test_uninterruptible_sleep_counts_as_frozen_only_without_cpu_progress():
    stuck = rank(0, 1, 4, "backward", state="disk-sleep", cpu=0.0)
    waiting = rank(1, 1, 4, "backward")
    assert blame([waiting, stuck])[0] == 0
    # A rank that passes through 'D' while still computing is not frozen.
    busy = rank(0, 1, 4, "backward", state="disk-sleep", cpu=0.6)
    assert blame([waiting, busy])[0] == 0  # it is the only rank computing
    assert "only rank still computing" in blame([waiting, busy])[1][0]


def test_nccl_culprit_is_the_rank_behind_whatever_phase_the_waiting_ranks_block_in():
    # Under NCCL the all-reduce is asynchronous: ranks that already launched it run on and
    # block later (a copy, the next forward, the optimiser), every one spinning on the GPU.
    ranks = [rank(0, 0, 3, "copy", state="running", cpu=1.0),
             rank(1, 0, 3, "forward", state="running", cpu=1.0),
             rank(2, 0, 2, "forward", state="sleeping", cpu=0.0, stack=["at (runners/rank/harness.py:90)"]),
             rank(3, 0, 2, "optimizer", state="running", cpu=1.0)]
    key, culprit, why = decide_stop(stop_ev(ranks))
    assert (key, culprit) == ("stalled_rank", 2)
    assert "behind" in why[0]
    # The same when the culprit is in the phase a gloo victim would wait in, one step behind.
    ranks = [rank(0, 1, 0, "loading", state="running", cpu=1.0), rank(1, 0, 7, "backward", state="running", cpu=1.0)]
    assert decide_stop(stop_ev(ranks))[:2] == ("stalled_rank", 1)


def test_nccl_spinning_ranks_at_the_same_point_name_nobody():
    ranks = [rank(0, 0, 2, "backward", state="running", cpu=1.0), rank(1, 0, 2, "backward", state="running", cpu=0.9)]
    assert decide_stop(stop_ev(ranks))[:2] == ("collective_mismatch", None)


def healthy_worker(r, pid=50):
    return {"role": f"rank{r}-worker0", "pid": pid, "status": "sleeping", "status_before": "sleeping"}


def test_rank_behind_waiting_for_its_loader_blames_the_worker():
    ranks = [rank(0, 0, 2, "backward"), rank(1, 0, 2, "loading")]
    assert decide_stop(stop_ev(ranks, [healthy_worker(1)]))[:2] == ("stalled_worker", 1)
    worker = {"role": "rank0-worker0", "pid": 42, "status": "stopped", "status_before": "stopped"}
    ranks = [rank(0, 0, 2, "loading"), rank(1, 0, 2, "backward")]
    key, culprit, why = decide_stop(stop_ev(ranks, [worker]))
    assert (key, culprit) == ("stalled_worker", 0) and "pid 42" in why[0]


def test_rank_frozen_while_it_waits_for_its_loader_is_the_culprit_not_its_worker():
    # A rank stopped from outside (SIGSTOP) while it waited for its next batch: its worker is
    # healthy (sleeping with its prefetched batches); the process state names the rank.
    ranks = [rank(0, 0, 3, "backward"), rank(1, 0, 3, "loading", state="stopped")]
    worker = {"role": "rank1-worker0", "pid": 43, "status": "sleeping", "status_before": "sleeping"}
    key, culprit, why = decide_stop(stop_ev(ranks, [worker]))
    assert (key, culprit) == ("stalled_rank", 1)
    assert "rank 1 is frozen" in why[0] and "stopped" in why[0]
    # Uninterruptible sleep without CPU progress is process evidence too; with CPU progress it is not.
    ranks = [rank(0, 0, 3, "backward"), rank(1, 0, 3, "loading", state="disk-sleep", cpu=0.0)]
    assert decide_stop(stop_ev(ranks))[:2] == ("stalled_rank", 1)
    ranks = [rank(0, 0, 3, "backward"), rank(1, 0, 3, "loading", state="disk-sleep", cpu=0.9)]
    assert decide_stop(stop_ev(ranks, [healthy_worker(1)]))[:2] == ("stalled_worker", 1)


def test_a_rank_without_loader_workers_waiting_in_its_loader_is_the_culprit_itself():
    # --workers 0 (or DistDGL's trainer waiting on a graph server over RPC): no worker to blame.
    ranks = [rank(0, 0, 2, "backward"), rank(1, 0, 2, "loading")]
    key, culprit, why = decide_stop(stop_ev(ranks))
    assert (key, culprit) == ("stalled_rank", 1)
    assert "rank 1 has no loader workers" in why[-1]
    # Another rank's workers are not this rank's.
    assert decide_stop(stop_ev(ranks, [healthy_worker(0)]))[:2] == ("stalled_rank", 1)


def test_rank_frozen_during_startup_is_named_rather_than_a_startup_hang():
    ranks = [rank(0, -1, -1, "starting"), rank(1, -1, -1, "starting", state="stopped")]
    assert decide_stop(stop_ev(ranks))[:2] == ("stalled_rank", 1)
    assert decide_stop(stop_ev([rank(0, -1, -1, "starting"), rank(1, -1, -1, "starting")]))[:2] == (
        "startup_hang", None)


def test_uneven_batches_outrank_everything_else():
    ranks = [rank(0, 0, 5, "backward"), rank(1, 0, 4, "epoch-sync", state="stopped")]
    assert decide_stop(stop_ev(ranks, counts=[6, 5]))[:2] == ("uneven_batches", 1)


# -- runs that ended by themselves -----------------------------------------------------------
def exit_ev(errors=(), ledger=(), ranks=None, log="", codes=None, rc=1):
    errors = {e["rank"]: e for e in errors}
    from runners.watch.diagnosis import PEER_LOST

    primary = [e for e in errors.values() if not PEER_LOST.search(e["message"]) or e.get("worker_failure")]
    first = min(primary or errors.values(), key=lambda e: e["time"]) if errors else None
    ranks = ranks or [{"rank": r, "pid": 100 + r, "epoch": 0, "step": 2, "last_phase": "loading"} for r in (0, 1)]
    return {"rc": rc, "ranks": ranks, "errors": errors, "primary": primary, "first": first, "log": log,
            "codes": codes or {}, "ledger": list(ledger), "counts": None}


def error(r, t, type_, message, **kw):
    return {"rank": r, "time": t, "type": type_, "message": message, "traceback": "", **kw}


RESET = "[Errno 104] Connection reset by peer"
PEER = "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:58291"


def test_worker_killed_while_sending_a_batch_is_a_dead_worker_from_the_ledger_alone():
    # The flaky case: the rank saw only a reset connection and recorded nothing about its
    # worker; the supervisor's ledger caught the worker as a zombie killed by SIGKILL.
    ev = exit_ev(errors=[error(1, 100.0, "ConnectionResetError", RESET), error(0, 101.0, "RuntimeError", PEER)],
                 ledger=[{"pid": 500, "role": "rank1-worker0", "last_alive": 99.0, "dead_seen": 99.5,
                          "signal": "SIGKILL"}])
    key, culprit, why = decide_exit(ev)
    assert (key, culprit) == ("dead_worker", 1)
    assert "pid 500" in why[0] and "SIGKILL" in why[0]


def test_worker_killed_is_a_dead_worker_from_its_ranks_record():
    dead = [{"pid": 501, "worker_id": 0, "seen_t": 99.9, "state": "zombie", "signal": "SIGKILL"}]
    ev = exit_ev(errors=[error(1, 100.0, "ConnectionResetError", RESET, dead_workers=dead),
                         error(0, 101.0, "RuntimeError", PEER)])
    assert decide_exit(ev)[:2] == ("dead_worker", 1)


def test_worker_killed_after_a_rank_failed_is_not_the_cause():
    # rank 1 crashed first; rank 0's worker was stopped afterwards with the rest of the tree.
    ev = exit_ev(errors=[error(1, 100.0, "RuntimeError", "injected fault crash-rank at epoch 0 step 2"),
                         error(0, 101.0, "RuntimeError", PEER)],
                 ledger=[{"pid": 600, "role": "rank0-worker0", "last_alive": 101.5, "dead_seen": 102.0,
                          "signal": "SIGTERM"}])
    assert decide_exit(ev)[:2] == ("crash", 1)


def test_worker_that_ended_normally_is_not_a_dead_worker():
    ev = exit_ev(errors=[error(1, 100.0, "ValueError", "bad batch")],
                 ledger=[{"pid": 601, "role": "rank1-worker0", "last_alive": 98.0, "dead_seen": 98.5, "exit_code": 0}])
    assert decide_exit(ev)[:2] == ("crash", 1)


def test_pytorch_collective_timeout_stays_a_hang_and_names_the_rank_behind():
    msg = ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, "
           "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600123 milliseconds before timing out.")
    ranks = [{"rank": 0, "pid": 100, "epoch": 0, "step": 3, "last_phase": "copy"},
             {"rank": 1, "pid": 101, "epoch": 0, "step": 2, "last_phase": "forward"}]
    ev = exit_ev(errors=[error(0, 100.0, "RuntimeError", msg)], ranks=ranks, codes={0: 1, 1: -6})
    key, culprit, why = decide_exit(ev)
    assert (key, culprit) == ("collective_timeout", 1)
    assert CAUSES[key].status == "hang"
    assert "Watchdog caught collective operation timeout" in why[0] and "behind" in why[1]


# -- shared memory and disk space -------------------------------------------------------------
BUS = "DataLoader worker (pid(s) 700) exited unexpectedly"


def test_worker_killed_by_sigbus_is_shared_memory_exhaustion_not_a_dead_worker():
    # A loader worker writing a batch into a full /dev/shm (tmpfs) dies of SIGBUS.
    ev = exit_ev(errors=[error(1, 100.0, "RuntimeError", BUS), error(0, 101.0, "RuntimeError", PEER)],
                 ledger=[{"pid": 700, "role": "rank1-worker1", "last_alive": 99.0, "dead_seen": 99.5,
                          "signal": "SIGBUS"}])
    ev["shm_peak"] = (4 * 2**20, 4 * 2**20, 12.5)
    key, culprit, why = decide_exit(ev)
    assert (key, culprit) == ("shm_exhausted", 1)
    assert "rank1-worker1" in why[0] and "SIGBUS" in why[0]
    assert "/dev/shm at its fullest the watchdog saw" in why[-1] and "4.0 MiB used of 4.0 MiB" in why[-1]
    # The same death by SIGKILL (the OOM killer) stays a dead worker.
    ev["ledger"][0]["signal"] = "SIGKILL"
    assert decide_exit(ev)[:2] == ("dead_worker", 1)


def test_pytorch_shared_memory_errors_are_shm_exhaustion():
    for message in ("unable to write to file </torch_4242_1608512961_0>: No space left on device (28)",
                    "DataLoader worker (pid 801) is killed by signal: Bus error. It is possible that "
                    "dataloader's workers are out of shared memory. Please try to raise your shared memory limit."):
        ev = exit_ev(errors=[error(0, 100.0, "RuntimeError", message), error(1, 101.0, "RuntimeError", PEER)])
        key, culprit, why = decide_exit(ev)
        assert (key, culprit) == ("shm_exhausted", 0), message
        assert why[0].startswith("rank 0: '")


SHM_BUS = ("DataLoader worker (pid 13003) is killed by signal: Bus error. It is possible that dataloader's "
           "workers are out of shared memory. Please try to raise your shared memory limit.")
HANG = {"summary": "hang: rank 1 made no progress in phase 'failed' while rank 0 waited in 'loading'; cause: a "
                   "loader worker stopped making progress", "cause": "stalled_worker", "culprit_rank": 1,
        "evidence": ["loader worker rank1-worker0 (pid 13003) is gone"], "ranks": [{"rank": 0}, {"rank": 1}],
        "threshold_s": 10.0}


def test_a_failed_rank_left_unreaped_past_the_limit_is_a_stop():
    """A rank that raised ends the run at once; one still there past the stall limit (its rank
    starter never reaped it) must not leave the watchdog waiting for the time limit."""
    from runners.watch.supervisor import hang_candidate

    both_failed = [(0, 2.0, "failed"), (1, 1.0, "failed")]
    assert hang_candidate(both_failed, now=9.0, launch_t=0.0, limit=8.0, startup_timeout=600.0) is None
    assert hang_candidate(both_failed, now=10.5, launch_t=0.0, limit=8.0, startup_timeout=600.0) == (1, 9.5)
    # A peer still waiting is the candidate the stop reports first, as before.
    waiting = [(0, 5.0, "backward"), (1, 1.0, "failed")]
    assert hang_candidate(waiting, now=10.0, launch_t=0.0, limit=8.0, startup_timeout=600.0) == (0, 5.0)
    assert hang_candidate([(0, 1.0, "done"), (1, 1.0, "done")], now=100.0, launch_t=0.0, limit=8.0,
                          startup_timeout=600.0) is None


@pytest.mark.parametrize("status, errors, detected_t, expected", [
    # A rank that raised and recorded why before the hang was declared: its cause, not the hang's.
    ("hang", [error(1, 100.0, "RuntimeError", SHM_BUS)], 110.0, ("crashed", "shm_exhausted", 1)),
    ("hang", [error(0, 100.0, "ValueError", "bad batch")], 110.0, ("crashed", "crash", 0)),
    ("timeout", [error(1, 100.0, "RuntimeError", SHM_BUS)], 110.0, ("crashed", "shm_exhausted", 1)),
    # the first primary error names the culprit; a peer that only lost its peer is a victim
    ("hang", [error(0, 99.0, "RuntimeError", PEER), error(1, 100.0, "RuntimeError", SHM_BUS)], 110.0,
     ("crashed", "shm_exhausted", 1)),
    # an error recorded after the detection (the tree being stopped) is the hang's consequence
    ("hang", [error(1, 111.0, "RuntimeError", SHM_BUS)], 110.0, None),
    # only lost peers: nothing this node's ranks raised explains it (runners.watch.nodes does)
    ("hang", [error(1, 100.0, "RuntimeError", PEER)], 110.0, None),
    ("hang", [], 110.0, None),
    ("crashed", [error(1, 100.0, "RuntimeError", SHM_BUS)], 110.0, None),
], ids=["shm-before-hang", "crash-before-hang", "before-timeout", "victim-first", "after-detection", "peer-lost",
        "no-error", "not-a-hang"])
def test_a_recorded_exception_outranks_a_hang_declared_after_it(status, errors, detected_t, expected):
    """issue 56: the precedence of a rank's own exception over the watchdog's hang, as a table."""
    from runners.watch.diagnosis import crash_before_hang

    ev = exit_ev(errors=errors)
    found = crash_before_hang(status, dict(HANG), ev, detected_t)
    if expected is None:
        assert found is None, found
        return
    new_status, d = found
    assert (new_status, d["cause"], d["culprit_rank"]) == expected, d
    assert d["summary"].startswith(f"crashed: rank {expected[2]}: "), d["summary"]
    assert f"raised first, 10.0 s before the watchdog declared a {status}" in d["summary"], d["summary"]
    assert (d["previous_status"], d["previous_cause"]) == (status, "stalled_worker"), d
    assert d["previous_summary"] == HANG["summary"] and d["threshold_s"] == 10.0  # what the hang said is kept
    assert d["remedy"] == CAUSES[expected[1]].remedy
    assert d["evidence"][-1] == HANG["evidence"][0]


def test_no_space_left_is_shm_only_with_shm_evidence_and_a_full_disk_otherwise():
    nospace = "[Errno 28] No space left on device"
    ev = exit_ev(errors=[error(1, 100.0, "OSError", nospace)])
    ev["disk"] = (8 * 2**20, 8 * 2**20, 0)  # the run directory's filesystem: nothing free
    key, culprit, why = decide_exit(ev)
    assert (key, culprit) == ("disk_full", 1) and "0 KiB free of 8.0 MiB" in why[0]
    ev["shm_peak"] = (63 * 2**20, 64 * 2**20, 3.0)  # /dev/shm was full during the run
    assert decide_exit(ev)[:2] == ("shm_exhausted", 1)
    ev["shm_peak"], ev["disk"] = (2**20, 64 * 2**20, 3.0), (2**30, 2**31, 2**30)
    assert decide_exit(ev)[:2] == ("shm_exhausted", 1)  # neither is full: as before, the shared memory


def test_rank_gone_before_the_others_lost_it_is_the_dead_rank():
    ev = exit_ev(errors=[error(0, 101.0, "RuntimeError", PEER)],
                 ledger=[{"pid": 101, "role": "rank1", "last_alive": 99.0, "dead_seen": 99.5}])
    assert decide_exit(ev)[:2] == ("dead_rank", 1)


# -- process evidence read from real processes --------------------------------------------------
def test_exit_signal_of_a_process_killed_while_its_parent_is_alive():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        assert exit_of(child.pid) is None  # running
        ledger = ProcessLedger()
        ledger.observe([child.pid], 1.0)
        os.kill(child.pid, signal.SIGKILL)
        found = None
        while found is None:  # the kill is asynchronous; exit_of waits while it is exiting
            found = exit_of(child.pid)
        assert found["state"] == "zombie" and found["signal"] == "SIGKILL"
        ledger.observe([child.pid], 2.0)
        assert ledger.records[child.pid]["signal"] == "SIGKILL"
        assert ledger.records[child.pid]["last_alive"] == 1.0 and ledger.records[child.pid]["dead_seen"] == 2.0
    finally:
        child.kill()
        child.wait()
    assert exit_of(child.pid)["state"] == "gone"


def test_stopped_process_is_seen_stopped_without_cpu_progress():
    import psutil

    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.kill(child.pid, signal.SIGSTOP)
        while proc_stat(child.pid)["state"] != "T":
            time.sleep(0.01)
        st = process_states([psutil.Process(child.pid)], interval=0.5)[child.pid]
        assert st["status"] == st["status_before"] == "stopped"
        assert st["cpu_delta_s"] == 0
    finally:
        child.kill()
        child.wait()


def test_a_rank_still_starting_is_held_to_the_startup_timeout_not_the_stall_limit():
    from runners.watch.supervisor import hang_candidate

    # Seen in the fault loop under load: rank 0 had not yet beaten its first step when rank 1
    # had; its 9 s of start-up were taken for a stall past the 8 s floor.
    ranks = [(0, 3.6, "starting"), (1, 12.7, "loading")]
    assert hang_candidate(ranks, now=12.7, launch_t=0.0, limit=8.0, startup_timeout=600.0) is None
    assert hang_candidate(ranks, now=601.0, launch_t=0.0, limit=8.0, startup_timeout=600.0)[0] == 0
    stalled = [(0, 10.0, "backward"), (1, 1.0, "forward")]
    assert hang_candidate(stalled, now=10.5, launch_t=0.0, limit=8.0, startup_timeout=600.0)[0] == 1
    assert hang_candidate(stalled, now=8.5, launch_t=0.0, limit=8.0, startup_timeout=600.0) is None


def test_each_start_up_phase_has_a_limit_of_its_own_from_what_the_ranks_took():
    from runners.watch.supervisor import RankWatch, hang_candidate, startup_limits

    watch = {0: RankWatch(0), 1: RankWatch(1)}
    limits = startup_limits(watch, floor=5.0, timeout=600.0, load_estimate_s=0.1, single_node=True)
    # nothing measured yet: only the timeout holds for the imports; a small dataset gets the floor
    assert limits["starting"][0] == 600.0 and "no rank has finished" in limits["starting"][1]
    assert limits["data-load"][0] == 5.0 and "stall floor" in limits["data-load"][1]
    watch[0].startup_s = {"starting": 4.0}
    limits = startup_limits(watch, floor=5.0, timeout=600.0, load_estimate_s=0.1, single_node=True)
    assert limits["starting"][0] == limits["rendezvous"][0] == 12.0
    # across nodes a rendezvous also waits for hosts that start later: only the timeout
    assert startup_limits(watch, 5.0, 600.0, 0.1, single_node=False)["rendezvous"][0] == 600.0
    watch[1].startup_s = {"starting": 5.0, "rendezvous": 0.2, "data-load": 20.0}
    limits = startup_limits(watch, floor=5.0, timeout=600.0, load_estimate_s=0.1, single_node=True)
    assert limits["starting"][0] == 15.0 and limits["data-load"][0] == 60.0
    # a rank held in its imports for longer than its limit is found long before the timeout
    ranks = [(0, 4.0, "rendezvous"), (1, 0.5, "starting")]
    lim = {"starting": 12.0}
    assert hang_candidate(ranks, now=12.0, launch_t=0.0, limit=5.0, startup_timeout=600.0, startup_limits=lim) is None
    assert hang_candidate(ranks, now=13.0, launch_t=0.0, limit=5.0, startup_timeout=600.0, startup_limits=lim)[0] == 1


def test_a_run_directory_moved_or_replaced_is_found_missing(tmp_path):
    from runners.watch.supervisor import dir_identity, missing_file

    run_dir = tmp_path / ".run.run-20260101T000000Z-1"
    (run_dir / "heartbeats").mkdir(parents=True)
    (run_dir / "heartbeats" / "rank0.hb").write_bytes(b"\0")
    kept = [run_dir / "heartbeats" / "rank0.hb", run_dir / "heartbeats"]
    identity = dir_identity(run_dir)
    assert missing_file(run_dir, identity, kept) is None
    os.rename(run_dir, tmp_path / "elsewhere")
    assert missing_file(run_dir, identity, kept) == kept[0]
    assert missing_file(run_dir, identity) == run_dir
    (run_dir / "heartbeats").mkdir(parents=True)  # another directory at its path (a rank's mkdir -p)
    (run_dir / "heartbeats" / "rank0.hb").write_bytes(b"\0")
    assert missing_file(run_dir, identity, kept) == run_dir


def test_a_vanished_run_directory_outranks_how_the_run_ended():
    from pathlib import Path

    from runners.watch.diagnosis import diagnose_vanished

    run_dir = Path("/results/.run.run-20260101T000000Z-1")
    crashed = {"status": "crashed", "diagnosis": {"cause": "crash", "summary": "crashed: rank 1: a rank raised"}}
    d = diagnose_vanished(run_dir, run_dir / "processes.json", 12.34, "it was deleted",
                          [rank(0, 3, 1, "forward"), rank(1, 3, 1, "forward")], crashed)
    assert (d["cause"], d["previous_status"], d["previous_cause"]) == ("run_dir_vanished", "crashed", "crash")
    assert d["summary"].startswith(f"failed: processes.json went missing 12.3 s after launch: the run directory "
                                   f"{run_dir} was moved or deleted from outside the run (it was deleted); "), d
    assert "; the run had ended crashed by itself, and nothing it measured is in this result" in d["summary"]
    assert d["missing_file"] == str(run_dir / "processes.json") and d["detected_after_s"] == 12.34
    assert "ranks 0 and 1 at epoch 3 step 1 'forward'" in d["evidence"][2]
    assert d["evidence"][-1].endswith("crashed: rank 1: a rank raised")
    alone = diagnose_vanished(run_dir, run_dir, 1.0, None, [])
    assert alone["summary"].startswith(f"failed: the run directory {run_dir} went missing 1.0 s after launch: it "
                                       "was moved or deleted from outside the run; ")


# -- summaries: many ranks in one line ----------------------------------------------------------
def test_summary_of_a_hang_at_64_ranks_is_one_short_line():
    from runners.watch.diagnosis import stop_summary

    ranks = [rank(0, 0, 2, "loading")] + [rank(r, 0, 2, "forward") for r in range(1, 64)]
    line = stop_summary("hang", ranks, 0, "a loader worker stopped")
    assert line == ("hang: rank 0 made no progress in phase 'loading' while 63 ranks waited in 'forward' "
                    "(ranks 1-63); cause: a loader worker stopped")
    # Nobody to blame: every group of ranks by its phase, in the order first seen.
    ranks[5]["phase"] = ranks[9]["phase"] = "backward"
    line = stop_summary("hang", ranks, None, "x")
    assert line == ("hang: rank 0 waited in 'loading', 61 ranks waited in 'forward' (ranks 1-4, 6-8, 10-63), "
                    "ranks 5 and 9 waited in 'backward'; cause: x")
    timeout = stop_summary("timeout", [rank(r, 3, 7, "forward") for r in range(8)], None, "x")
    assert timeout == "time limit reached; rank progress: 8 ranks at epoch 3 step 7 'forward' (ranks 0-7)"


def test_up_to_three_ranks_are_named_and_runs_of_three_become_ranges():
    from runners.watch.diagnosis import group_ranks, rank_ranges

    assert group_ranks([(1, "forward"), (2, "forward"), (3, "forward")], "waited in '{}'") == \
        "ranks 1, 2 and 3 waited in 'forward'"
    assert group_ranks([(2, "a"), (0, "a"), (1, "a"), (7, "a")], "in '{}'") == "4 ranks in 'a' (ranks 0-2, 7)"
    assert rank_ranges([9, 0, 1, 2, 3, 4, 5, 7, 10]) == "0-5, 7, 9, 10"
    assert group_ranks([], "in '{}'") == ""


def test_rank_behind_names_the_ranks_ahead_grouped():
    ranks = [rank(0, 0, 2, "forward", state="sleeping")] + [rank(r, 0, 3, "copy", state="running", cpu=1.0)
                                                            for r in range(1, 32)]
    culprit, why = blame(ranks)
    assert culprit == 0
    assert "while 31 ranks at epoch 0 step 3 'copy' (ranks 1-31): the others wait for it" in why[0]


# -- open files: a process out of descriptors -------------------------------------------------------
SHM_EMFILE = ("RuntimeError: unable to open shared memory object </torch_7203_387396866_7> in read-write mode: "
              "Too many open files (24)")
FD = {"soft_limit": 48, "hard_limit": 48, "needed_per_process": 72}


def test_descriptor_exhaustion_outranks_the_collective_and_worker_rules():
    # As `ulimit -n 48` left PyG 2 x 2: every rank waits for its loader, nothing frozen or behind.
    both_loading = [rank(0, 0, 0, "loading"), rank(1, 0, 0, "loading")]
    assert decide_stop(stop_ev(both_loading))[:2] == ("collective_mismatch", None)
    ev = dict(stop_ev(both_loading), log="Traceback ...\n" + SHM_EMFILE + "\n", roles={7203: "rank1-worker1"}, fd=FD)
    key, culprit, why = decide_stop(ev)
    # Both ranks wait for their own loaders: the log names rank 1's worker, but not a culprit.
    assert (key, culprit) == ("fd_limit", None)
    assert why[0] == f"the ranks' log (rank1-worker1): '{SHM_EMFILE}'"
    assert why[-1] == ("open-files limit of the run's processes (`ulimit -n`): 48 (hard limit 48); a rank needs "
                       "about 72 with its loader workers (pre-flight estimate)")
    # Rank 0 waits in the all-reduce for rank 1, whose loader lost a batch: rank 1 is the culprit,
    # where the stalled-worker rule would have named the worker alone.
    one_loading = [rank(0, 0, 0, "backward"), rank(1, 0, 0, "loading")]
    assert decide_stop(stop_ev(one_loading, [healthy_worker(1)]))[0] == "stalled_worker"
    assert decide_stop(dict(ev, ranks=one_loading))[:2] == ("fd_limit", 1)


def test_a_process_at_its_descriptor_limit_is_evidence_without_any_error_text():
    worker = {"role": "rank0-worker1", "pid": 42, "status": "sleeping", "status_before": "sleeping",
              "fds": 47, "fd_limit": 48}
    ranks = [rank(0, 0, 0, "loading"), rank(1, 0, 0, "backward")]
    key, culprit, why = decide_stop(dict(stop_ev(ranks, [worker]), fd=FD))
    assert (key, culprit) == ("fd_limit", 0)
    assert why[0] == "rank0-worker1 (pid 42) held 47 open descriptors at detection, its limit 48"
    assert decide_stop(stop_ev(ranks, [dict(worker, fds=30)]))[0] == "stalled_worker"


def test_a_flood_of_the_same_error_is_one_line_of_evidence():
    from runners.watch.diagnosis import fd_exhaustion

    log = "OSError: [Errno 24] Too many open files\n" * 5000  # a DGL worker's resource sharer, looping
    ranks, why = fd_exhaustion({"ranks": [], "log": log})
    assert ranks == [] and why == ["the ranks' log: 'OSError: [Errno 24] Too many open files' (5000 lines)"]


def test_crash_after_descriptor_exhaustion_is_fd_limit_not_a_crash():
    # `ulimit -n 56`: rank 0's loader lost its worker (EOFError), the workers' errors are in the log.
    ev = exit_ev(errors=[error(0, 100.0, "EOFError", ""), error(1, 101.0, "RuntimeError", PEER)],
                 log="OSError: [Errno 24] Too many open files\n")
    assert decide_exit(exit_ev(errors=[error(0, 100.0, "EOFError", "")]))[:2] == ("crash", 0)
    assert decide_exit(ev)[:2] == ("fd_limit", 0)
    # The rank's own record of a truncated descriptor transfer names it.
    ev = exit_ev(errors=[error(1, 100.0, "RuntimeError", "received 0 items of ancdata")])
    key, culprit, why = decide_exit(ev)
    assert (key, culprit) == ("fd_limit", 1) and why == ["rank 1: 'RuntimeError: received 0 items of ancdata'"]
    assert CAUSES[key].status == "crashed"


def test_fd_limit_remedy_names_ulimit_the_limit_found_and_the_need():
    from runners.watch.diagnosis import cause_label, fd_remedy

    remedy = fd_remedy(FD)
    assert "`ulimit -n` is 48 here and a rank needs about 72 descriptors" in remedy
    assert "`ulimit -n 1024`" in remedy and "the hard limit 48 is the ceiling" in remedy
    assert "set_sharing_strategy('file_system')" in remedy
    assert "`ulimit -n`" in CAUSES["fd_limit"].remedy and "'file_system'" in CAUSES["fd_limit"].remedy
    assert fd_remedy(None) == CAUSES["fd_limit"].remedy
    assert cause_label("fd_limit", {"fd": FD}) == "too many open files (`ulimit -n` 48, a rank needs about 72)"


def test_an_interruption_is_diagnosed_from_its_evidence_alone():
    from runners.watch.diagnosis import diagnose_interruption
    from runners.watch.evidence import InterruptionEvidence

    ev = InterruptionEvidence(signal="SIGTERM", after_s=12.34, ranks=[
        {"rank": 0, "pid": 1, "epoch": 2, "step": 5, "phase": "backward", "blocked_in": "all-reduce"}],
        steps=17, epochs=2, context={"sender": "unknown", "launcher_ancestors": [],
                                     "slurm": {"SLURM_JOB_ID": "42", "why": "the job reached its time limit",
                                               "job_state": "TIMEOUT", "job_reason": "TimeLimit"}})
    d = diagnose_interruption(ev)
    assert d["cause"] == "interrupted" and d["detected_after_s"] == 12.34 and d["signal"] is ev.context
    assert d["summary"].startswith("interrupted: SIGTERM to the launcher 12.3 s after launch stopped the run; "
                                   "2 epoch(s) and 17 step(s) were measured before it")
    assert d["summary"].endswith("; SLURM job 42: the job reached its time limit")


# -- the partitioned strategy: a graph server that stopped making progress ------------------
def server_ev(states, cpu=(0.0,) * 3, waiters=((0, "recv_rpc_message (dgl/distributed/rpc.py:1095)"),),
              stack=(), idle=None, window=10.0):
    from runners.watch.evidence import ServerEvidence

    times = [-window + i * window / (len(states) - 1) for i in range(len(states))]
    return ServerEvidence(node=1, host="h1", pid=4242, window_s=window, samples=list(zip(times, states, cpu)),
                          ranks_in_rpc=list(waiters), stack_top=list(stack), waiting_for_requests=idle)


def test_a_stopped_graph_server_is_the_cause_of_the_hang():
    from runners.watch.diagnosis import diagnose_stalled_server

    watchdog = {"summary": "hang: rank 1 made no progress", "cause": "stalled_worker", "evidence": ["rank 1 ..."]}
    d = diagnose_stalled_server("hang", watchdog, server_ev(["sleeping", "stopped", "stopped"]))
    assert d["cause"] == "stalled_server" and d["culprit_rank"] is None and d["previous_cause"] == "stalled_worker"
    assert d["summary"].startswith("hang: graph server 1 (partition 1, pid 4242) on host h1 stopped making progress "
                                   "(stopped); its trainers waited for it over RPC (rank 0 in recv_rpc_message")
    assert "process state 'stopped'" in d["evidence"][0] and "from 0.0 s before" not in d["evidence"][0]
    assert d["evidence"][-1] == "rank 1 ..." and d["stalled_server"]["host"] == "h1"
    # stopped at one sample only (continued since), or a run that ended otherwise: not the cause
    assert diagnose_stalled_server("hang", watchdog, server_ev(["stopped", "stopped", "sleeping"])) is None
    assert diagnose_stalled_server("timeout", watchdog, server_ev(["stopped"] * 3)) is None
    assert diagnose_stalled_server("hang", watchdog, None) is None
    # a crash (its trainers lost their peers when another node's watchdog stopped its own) while
    # the server was stopped: the hang it caused; a server that was merely stuck is no such proof
    lost = {"summary": "crashed: lost node 0", "cause": "lost_node", "evidence": []}
    crashed = diagnose_stalled_server("crashed", lost, server_ev(["stopped"] * 3))
    assert crashed["cause"] == "stalled_server" and crashed["previous_status"] == "crashed"
    assert crashed["previous_cause"] == "lost_node" and crashed["summary"].startswith("hang: graph server 1")
    stuck = server_ev(["sleeping"] * 3, stack=["acquire (threading.py:320)"], idle=False)
    assert diagnose_stalled_server("hang", {}, stuck) is not None
    assert diagnose_stalled_server("crashed", lost, stuck) is None


def test_an_idle_graph_server_is_not_a_stuck_one():
    """No CPU over the window with trainers waiting in RPC: stuck only when its main thread is
    outside its request wait (an idle server sleeps there too, without CPU)."""
    from runners.watch.diagnosis import diagnose_stalled_server, remote_server_stall, server_stall

    idle = server_ev(["sleeping"] * 3, stack=["recv_rpc_message (dgl/distributed/rpc.py:1095)"], idle=True)
    assert server_stall(idle) is None
    stuck = server_ev(["sleeping"] * 3, stack=["acquire (threading.py:320)"], idle=False)
    d = diagnose_stalled_server("hang", {}, stuck)
    assert d["stalled_server"]["how"] == "stuck" and "acquire (threading.py:320)" in d["evidence"][0]
    # the same stack with CPU progress, or no trainer waiting over RPC: not stuck
    assert server_stall(server_ev(["running"] * 3, cpu=(0.0, 4.0, 9.0), stack=["acquire (x.py:1)"], idle=False)) is None
    assert server_stall(server_ev(["sleeping"] * 3, waiters=(), stack=["acquire (x.py:1)"], idle=False)) is None
    # node 0, whose trainers waited over RPC while its own server idled: the stall points elsewhere
    pointed = remote_server_stall("hang", {"cause": "stalled_worker"}, idle, [{"node": 1, "host": "h1"}])
    assert pointed["cause"] == "stalled_server" and pointed["stalled_server"]["node"] is None
    assert "points to another node's graph server: node 1 (host h1), whose result" in pointed["summary"]
    assert remote_server_stall("hang", {}, server_ev(["sleeping"] * 3, waiters=()), []) is None
    assert remote_server_stall("hang", {}, server_ev(["stopped"] * 3), []) is None


# -- the closed rulebook -----------------------------------------------------------------------
def test_the_result_schema_enumerates_every_cause_and_no_other():
    from runners.records.result import schema as result_schema
    from runners.watch.diagnosis import OVERRIDES

    enum = result_schema()["properties"]["diagnosis"]["properties"]["cause"]["enum"]
    assert sorted(enum) == sorted(CAUSES) and len(enum) == len(set(enum))
    assert all(c.text.startswith(c.label) and c.key == k for k, c in CAUSES.items())
    assert all(k in CAUSES for o in OVERRIDES for k in o.causes)


def test_a_superseding_diagnosis_keeps_the_one_before():
    from runners.watch.diagnosis import Diagnosis

    before = Diagnosis.of("dead_rank", "crashed: rank 1", ["rank 1 raised X"], [{"rank": 1}], 1, error_excerpt="X")
    after = Diagnosis.superseding(before, "lost_server", "crashed: server", ["server died"], status="crashed",
                                  culprit_rank=None)
    assert after["cause"] == "lost_server" and after["cause_text"] == CAUSES["lost_server"].text
    assert (after["previous_status"], after["previous_cause"]) == ("crashed", "dead_rank")
    assert after["evidence"] == ["server died", "rank 1 raised X"] and after["culprit_rank"] is None
    assert after["error_excerpt"] == "X" and before["cause"] == "dead_rank"
    assert "previous_status" not in Diagnosis.superseding(before, "oom", "killed", [], previous=("cause",))


def test_node1_adopts_the_graph_server_that_node0s_result_names(tmp_path):
    """issue 56: node 0's graph server died and node 0's result says so; node 1, whose trainer
    waited on it, names it from that result (any node reads the others', node 0's included)."""
    import datetime as dt
    import json
    import types

    from runners.partitioned.server import Server, ServerFacts
    from runners.watch.diagnosis import Outcome, apply_overrides

    job = tmp_path / "job"
    stage = job / ".node1.run-20261128T110000Z-4242"  # node 1's staging directory inside the job
    stage.mkdir(parents=True)
    now = dt.datetime.now(dt.timezone.utc).isoformat()
    lost = {"node": 0, "host": "gh8-a", "pid": 77, "signal": "SIGKILL", "t_s": 17.3}
    theirs = {"summary": "crashed: graph server 0 (partition 0, pid 77) on host gh8-a died (SIGKILL) 17.3 s after "
                         "it started; its trainers, which sample and fetch features from it, were stopped",
              "cause": "lost_server", "lost_server": lost, "evidence": [], "ranks": []}
    (job / "result.json").write_text(json.dumps({"status": "crashed", "diagnosis": theirs, "started_at": now,
                                                 "finished_at": now, "env": {"hostname": "gh8-a"}}))
    cfg = types.SimpleNamespace(node_rank=1, nodes=2, other_result_wait_s=0.0, startup_timeout_s=600.0)
    server = Server(cfg=cfg, proc=None, log_path=tmp_path / "server1.log", started_t=0.0, host="gh8-b", out=stage)
    hang = {"summary": "hang: rank 1 made no progress in phase 'loading'; cause: one rank stopped making progress",
            "cause": "stalled_rank", "culprit_rank": 1, "evidence": ["rank 1 ..."], "ranks": []}
    outcome = Outcome("hang", dict(hang))
    outcome.findings.server = ServerFacts(server, stage, now)
    apply_overrides(outcome)
    d = outcome.diagnosis
    assert outcome.status == "crashed" and d["cause"] == "lost_server" and d["culprit_rank"] is None, d
    assert d["summary"].startswith(theirs["summary"] + " (node 0's result; node 1's trainers lost it: hang: rank 1"), d
    assert d["lost_server"] == lost and d["previous_status"] == "hang", d


def _two_node_job(tmp_path, node: int, theirs: dict):
    """A job directory where the other node's result (diagnosis `theirs`) is written, and this
    node's (`node`) run directory and settings."""
    import datetime as dt
    import json
    import types

    job = tmp_path / "job"
    other = job / "node1" / "result.json" if node == 0 else job / "result.json"
    other.parent.mkdir(parents=True, exist_ok=True)
    stage = job if node == 0 else job / ".node1.run-20261128T110000Z-4242"
    stage.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc).isoformat()
    other.write_text(json.dumps({"status": "crashed", "diagnosis": theirs, "started_at": now, "finished_at": now,
                                 "env": {"hostname": "gh8-b" if node == 0 else "gh8-a"}}))
    cfg = types.SimpleNamespace(node_rank=node, nodes=2, other_result_wait_s=0.0, startup_timeout_s=600.0)
    return stage, now, cfg


def _lost(node: int, pid: int, sig: str, t_s: float, at: float) -> dict:
    summary = (f"crashed: graph server {node} (partition {node}, pid {pid}) on host gh8-{'ab'[node]} died ({sig}) "
               f"{t_s} s after it started; its trainers, which sample and fetch features from it, were stopped")
    return {"summary": summary, "cause": "lost_server", "evidence": [], "ranks": [],
            "lost_server": {"node": node, "host": f"gh8-{'ab'[node]}", "pid": pid, "signal": sig, "t_s": t_s,
                            "at": at}}


@pytest.mark.parametrize("theirs_signal, theirs_at, adopted", [("SIGKILL", 1000.0, True), ("SIGABRT", 990.0, True),
                                                               ("SIGABRT", 1010.0, False)],
                         ids=["killed-from-outside", "aborted-earlier", "aborted-later"])
def test_a_server_that_aborted_after_another_was_lost_names_that_one(tmp_path, theirs_signal, theirs_at, adopted):
    """CI found this race: node 1's server was killed, node 1's launcher stopped its trainers, and
    node 0's server aborted on the broken pipe to them while node 0's trainers still ran. Node 0
    names the server lost first (killed from outside, or earlier), not its own, which was a victim."""
    import types

    from runners.partitioned.server import Server, ServerFacts
    from runners.watch.diagnosis import Outcome, apply_overrides

    theirs = _lost(1, 88, theirs_signal, 10.6, theirs_at)
    stage, now, cfg = _two_node_job(tmp_path, 0, theirs)
    server = Server(cfg=cfg, proc=types.SimpleNamespace(pid=66), log_path=tmp_path / "server0.log", started_t=0.0,
                    host="gh8-a", out=stage)
    server.died = {"t_s": 11.6, "at": 1000.0, "exit_code": None, "signal": "SIGABRT"}
    crash = {"summary": "crashed: rank 0 on host gh8-a (node 0): a rank raised an exception", "cause": "crash",
             "culprit_rank": 0, "evidence": [], "ranks": []}
    outcome = Outcome("crashed", dict(crash))
    outcome.findings.server = ServerFacts(server, stage, now)
    apply_overrides(outcome)
    d = outcome.diagnosis
    assert outcome.status == "crashed" and d["cause"] == "lost_server", d
    named = theirs["summary"] if adopted else "crashed: graph server 0 (partition 0, pid 66) on host gh8-a died"
    assert d["summary"].startswith(named), d
    assert d["lost_server"]["node"] == (1 if adopted else 0), d


def test_a_server_killed_from_outside_is_named_without_waiting_for_the_other_nodes(tmp_path):
    """CI found this race: node 0's server was killed and node 0's trainer crashed on the peer it
    lost (`lost_node`). Node 0 names its own server at once: it does not wait for node 1's result
    (lost_culprit's wait), while node 1 waits for node 0's, to learn which server was lost."""
    import time
    import types

    from runners.partitioned.server import Server, ServerFacts
    from runners.watch import nodes
    from runners.watch.diagnosis import Outcome, apply_overrides

    stage, now, cfg = _two_node_job(tmp_path, 0, {"summary": "crashed: rank 1 ...", "cause": "crash"})
    (stage / "node1" / "result.json").unlink()  # node 1 is still waiting for node 0's result
    cfg.other_result_wait_s = 30.0
    server = Server(cfg=cfg, proc=types.SimpleNamespace(pid=66), log_path=tmp_path / "server0.log", started_t=0.0,
                    host="gh8-a", out=stage)
    server.died = {"t_s": 13.5, "at": 1000.0, "exit_code": None, "signal": "SIGKILL"}
    peers = [{"rank": 0, "host": "gh8-a", "address": "10.0.0.1"}, {"rank": 1, "host": "gh8-b", "address": "10.0.0.2"}]
    lost = {"summary": "crashed: lost node 1", "cause": "lost_node", "culprit_rank": None, "evidence": [],
            "ranks": [], "lost_nodes": [nodes.describe_node(1, peers, 1)]}
    outcome = Outcome("crashed", dict(lost))
    outcome.findings.server = ServerFacts(server, stage, now)
    outcome.findings.nodes = nodes.NodeFacts(cfg, stage, [0], now, None, time.time())
    t0 = time.monotonic()
    apply_overrides(outcome)
    assert time.monotonic() - t0 < 5.0, "node 0 waited for node 1's result"
    d = outcome.diagnosis
    assert d["cause"] == "lost_server" and d["lost_server"]["node"] == 0 and d["lost_server"]["signal"] == "SIGKILL"


def test_torchrun_exit_codes_name_the_global_rank_not_the_local_one():
    """Node 1 of a two-node run: torchrun's log names its only rank as rank 1, local_rank 0."""
    from runners.watch.evidence import torchrun_exit_codes

    log = ("[2026-11-28 11:10:03,626] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -6) "
           "local_rank: 0 (pid: 4142) of binary: python\nTraceback ...\nRoot Cause (first observed failure):\n[0]:\n"
           "  time      : 2026-11-28_11:10:03\n  host      : gn4081h1\n  rank      : 1 (local_rank: 0)\n"
           "  exitcode  : -6 (pid: 4142)\n  traceback : Signal 6 (SIGABRT) received by PID 4142\n")
    assert torchrun_exit_codes(log) == {1: -6}
    spawned = "runners.launch.spawn: a rank failed\n  rank : 0 (local_rank: 0)  exitcode : 1 (pid: 9)\n"
    assert torchrun_exit_codes(spawned) == {0: 1}
