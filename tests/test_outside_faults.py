"""Faults from outside the run, made for real: a signal to the launcher, a full disk, a small
/dev/shm, a rank stopped from outside, too low an open-files limit and the run directory moved
or deleted. Each ends with a result (or, for a full disk, one line and exit code 3; for a run
directory gone with --out's parent, one line and exit code 4) that says what happened, and
nothing of the run left running.

A small /dev/shm and a small filesystem are tmpfs mounts in a private mount namespace
(`unshare -m`, as root); those tests are skipped where that is not allowed.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import psutil
import pytest

from runners.rank.probes import proc_stat, read_heartbeat
from runners.records import history
from tests.helpers import REPO, live_dir, run_env, runner_argv
from runners.records.result import schema as result_schema

SCHEMA = result_schema()
WAIT_S = 300  # for a run to reach a point the test acts at (start-up on a busy 2-core machine)


def rows(path) -> int:
    """Data rows of a CSV file (0 while it does not exist)."""
    try:
        return max(0, len(Path(path).read_text().splitlines()) - 1)
    except OSError:
        return 0


def run_pids(out: Path) -> set:
    pids = {json.loads(f.read_text())["pid"] for f in out.glob("rank*/rank.json")}
    return pids | {json.loads(f.read_text())["pid"] for f in (out / "workers").glob("*.json")}


def alive(pid) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_for(what: str, check, proc, log: Path, timeout=WAIT_S):
    """Poll `check()` until it returns something truthy; fail with the run's output otherwise."""
    deadline = time.time() + timeout
    while True:
        found = check()
        if found:
            return found
        assert proc.poll() is None, f"the run ended before {what}:\n{log.read_text()[-3000:]}"
        assert time.time() < deadline, f"no {what} within {timeout} s:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)


def default_sigint():
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a shell's background job inherits it ignored


def start(tmp_path, argv) -> tuple:
    log = tmp_path / "launcher.out"
    proc = subprocess.Popen(argv, cwd=REPO, env=run_env(), stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=default_sigint)
    return proc, log


def mount_namespaces() -> str | None:
    """Why a private mount namespace with a tmpfs is not available here (None: it is)."""
    if not shutil.which("unshare"):
        return "unshare is not installed"
    res = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
                         capture_output=True, text=True)
    return None if res.returncode == 0 else f"no private mount namespace here: {res.stderr.strip()[:200]}"


needs_mounts = pytest.mark.skipif(mount_namespaces() is not None, reason=str(mount_namespaces()))


# -- 1. SIGTERM / SIGINT to the launcher ---------------------------------------------------------
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_to_the_launcher_keeps_what_was_measured(tmp_path, sig):
    out = tmp_path / "run"
    proc, log = start(tmp_path, runner_argv(out, devices=2, workers=1, epochs=10000,
                                            extra=["--max-steps-per-epoch", "2"]))
    try:
        wait_for("two finished epochs on both ranks",
                 lambda: min(rows(live_dir(out) / f"rank{r}" / "epochs.csv") for r in (0, 1)) >= 2, proc, log)
        t0 = time.time()
        os.kill(proc.pid, sig)  # what Snakemake (Ctrl-C) or SLURM (time limit) sends
        rc = proc.wait(timeout=60)
        stopped_s = time.time() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = log.read_text()
    assert rc == 128 + sig, text[-3000:]  # non-zero: Snakemake and schedulers redo the run
    assert stopped_s < 20, stopped_s  # well inside SLURM's 30 s between SIGTERM and SIGKILL
    # No finished output of the point: the interrupted run is kept under previous/ (runners.records.history).
    assert not (out / "result.json").exists()
    (out, _), = history.history(out)
    result = json.loads((out / "result.json").read_text())
    jsonschema.validate(result, SCHEMA)
    assert result["status"] == "interrupted" and result["summary"] is None
    d = result["diagnosis"]
    assert d["cause"] == "interrupted" and d["signal"]["signal"] == sig.name
    assert d["signal"]["sender"].startswith("unknown")
    assert d["signal"]["launcher_ancestors"][0]["pid"] == os.getpid()
    assert d["summary"].startswith(f"interrupted: {sig.name} to the launcher")
    assert f"INTERRUPTED pyg/sage" in text and d["summary"] in text
    # Every epoch the ranks finished is in the result, and every step of them in steps.csv.
    epochs = {r: rows(out / f"rank{r}" / "epochs.csv") for r in (0, 1)}
    assert min(epochs.values()) >= 2
    assert len(result["epochs"]) == sum(epochs.values())
    assert all(rows(out / f"rank{r}" / "steps.csv") >= 2 * epochs[r] for r in (0, 1))
    assert not [p for p in run_pids(out) if alive(p)]
    if sig == signal.SIGTERM:
        # The analysis shows the run, with its epochs and steps.
        agg = tmp_path / "aggregate"
        res = subprocess.run([sys.executable, "-m", "analysis.aggregate", "--out-dir", str(agg), str(out)],
                             cwd=REPO, env=run_env(), capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        import pandas as pd

        runs = pd.read_csv(agg / "runs.csv")
        assert list(runs["status"]) == ["interrupted"] and runs["epochs_completed"][0] >= 2
        assert len(pd.read_csv(agg / "epochs.csv")) == len(result["epochs"])
        assert len(pd.read_csv(agg / "steps.csv")) == sum(rows(out / f"rank{r}" / "steps.csv") for r in (0, 1))
        failures = json.loads((agg / "failures.json").read_text())
        assert [f["diagnosis"]["cause"] for f in failures] == ["interrupted"]



def test_interruption_keeps_the_steps_of_the_epoch_in_progress(tmp_path):
    """Interrupted in the middle of the first epoch (nothing in epochs.csv yet): the steps a rank
    took so far still reach steps.csv (the launcher asks the ranks to write them), even from a
    rank that waits inside backward's all-reduce for a peer that cannot answer. Rank 0 is frozen
    first, so rank 1 is in that wait when the launcher is interrupted: a Python signal handler
    would never run there (a peer that wrote its rows and left first puts it in the same wait)."""
    out = tmp_path / "run"
    # Batch 2: hundreds of steps per epoch, seconds for the first one, so the signal (sent at
    # step 5, acted on at the launcher's next poll) lands well inside it.
    proc, log = start(tmp_path, runner_argv(out, devices=2, batch_size=2, epochs=50, extra=["--eval-every", "0"]))
    beats = lambda: live_dir(out) / "heartbeats"  # noqa: E731 (the staging directory appears at launch)
    try:
        hb0 = wait_for("rank 0 at its 6th step", lambda: (
            (hb := read_heartbeat(beats() / "rank0.hb")) is not None and hb["step"] >= 5 and hb), proc, log)
        os.kill(hb0["pid"], signal.SIGSTOP)
        wait_for("rank 1 waiting in backward's all-reduce", lambda: _waits_in_backward(beats() / "rank1.hb"), proc,
                 log)
        os.kill(proc.pid, signal.SIGTERM)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert rc == 128 + signal.SIGTERM, log.read_text()[-3000:]
    (out, _), = history.history(out)  # interrupted: filed under previous/, never the point's result
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "interrupted"
    assert rows(out / "rank0" / "epochs.csv") == 0 and not result["epochs"]  # the first epoch never ended
    assert rows(out / "rank1" / "steps.csv") >= 5, log.read_text()[-2000:]
    assert not [p for p in run_pids(out) if alive(p)]


def _waits_in_backward(beat: Path) -> bool:
    """The rank's progress mark says backward, and is the same 0.5 s later."""
    first = read_heartbeat(beat)
    if first is None or first.get("phase") != "backward":
        return False
    time.sleep(0.5)
    second = read_heartbeat(beat)
    return second is not None and (second.get("phase"), second["step"]) == ("backward", first["step"])


# -- 2. a full disk ----------------------------------------------------------------------------
@needs_mounts
def test_too_little_space_to_start_is_refused_before_launch(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    argv = runner_argv(mnt / "run", devices=2, workers=0, epochs=2)
    res = subprocess.run(["unshare", "-m", "sh", "-c", 'mount -t tmpfs -o size=256k tmpfs "$0" && exec "$@"',
                          str(mnt), *argv], cwd=REPO, env=run_env(), capture_output=True, text=True, timeout=WAIT_S)
    assert res.returncode == 2, res.stdout + res.stderr
    assert re.search(rf"error: --out {re.escape(str(mnt / 'run'))}: its filesystem has \d+\.\d+ KiB free but "
                     r"a run needs about \d", res.stderr), res.stderr
    assert "Traceback" not in res.stdout + res.stderr


FILL_WHEN_TRAINING = r'''
mount -t tmpfs -o size=16m tmpfs "$MNT" || exit 90
"$@" > "$LOG" 2>&1 &
run=$!
# Once both ranks have finished two epochs, fill the filesystem to the last byte. (The run
# writes into its staging directory beside --out until it has a result: runners.records.history.)
until [ "$(cat "$MNT"/.run.run-*/rank0/epochs.csv "$MNT"/.run.run-*/rank1/epochs.csv 2>/dev/null | wc -l)" -ge 6 ]; do
    kill -0 $run 2>/dev/null || break
    sleep 0.2
done
dd if=/dev/zero of="$MNT/filler" bs=64k 2>/dev/null
wait $run
rc=$?
rm -f "$MNT/filler"
cp -r "$MNT"/.run.run-* "$COPY"
exit $rc
'''


@needs_mounts
def test_disk_filling_up_during_the_run_stops_it_with_one_line(tmp_path):
    mnt, copy, log = tmp_path / "small", tmp_path / "copy", tmp_path / "launcher.out"
    mnt.mkdir()
    # More epochs than the 2 before the fill and the few until a write fails, few enough for the
    # pre-flight to find room for all of them (about 3 MiB of its 16).
    argv = runner_argv(mnt / "run", devices=2, workers=1, epochs=400,
                       extra=["--max-steps-per-epoch", "2", "--time-limit", "200"])
    res = subprocess.run(["unshare", "-m", "sh", "-c", FILL_WHEN_TRAINING, "sh", *argv], cwd=REPO,
                         env={**run_env(), "MNT": str(mnt), "LOG": str(log), "COPY": str(copy)},
                         capture_output=True, text=True, timeout=WAIT_S)
    text = log.read_text()
    assert res.returncode == 3, text[-3000:]
    assert "pre-flight warning: --out's filesystem" not in text  # it had room before the filler
    errors = [line for line in text.splitlines() if "No space left on device" in line]
    assert len(errors) == 1, text[-3000:]
    assert re.match(rf"error: No space left on device: could not write {re.escape(str(mnt))}/\.run\.run-"
                    r"\S* \([\d.]+ (B|KiB) free of 16\.00 MiB on its filesystem\); stopped the run",
                    errors[0]), errors[0]
    assert "Traceback" not in text and "Exception ignored" not in text, text[-3000:]
    assert not (copy / "result.json").exists()
    pids = run_pids(copy)
    assert len(pids) >= 4  # two ranks and their workers
    assert not [p for p in pids if alive(p)]


# -- 3. a small /dev/shm -----------------------------------------------------------------------
@needs_mounts
def test_small_dev_shm_is_diagnosed_as_shared_memory_exhaustion(tmp_path):
    out = tmp_path / "run"
    # 4 MiB of /dev/shm, as the issue found it: PyG's 2 ranks x 2 workers with batches of 512
    # seeds of the small graph need several times that.
    argv = runner_argv(out, devices=2, workers=2, batch_size=512, epochs=2, dataset="small",
                       extra=["--stall-floor", "20"])
    res = subprocess.run(["unshare", "-m", "sh", "-c", 'mount -t tmpfs -o size=4m tmpfs /dev/shm && exec "$@"',
                          "sh", *argv], cwd=REPO, env=run_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=WAIT_S)
    assert res.returncode == 0, res.stdout[-3000:]
    assert "pre-flight warning: /dev/shm has 4.00 MiB free" in res.stdout, res.stdout[-3000:]
    result = json.loads((out / "result.json").read_text())
    d = result["diagnosis"]
    assert result["status"] == "crashed", d  # never a hang: the rank's own error is the cause (issue 56)
    assert d["cause"] == "shm_exhausted", d
    assert d["culprit_rank"] in (0, 1)
    assert "--shm-size" in d["remedy"] and "--workers 0" in d["remedy"]
    assert any("/dev/shm has 4.00 MiB free" in w for w in result["preflight"]["warnings"])
    assert not [p for p in run_pids(out) if alive(p)]


def rank_starter(proc) -> psutil.Process | None:
    """The run's rank starter (runners.launch.spawn), a child of the launcher `proc`."""
    try:
        return next((c for c in psutil.Process(proc.pid).children(recursive=True)
                     if "runners.launch.spawn" in " ".join(c.cmdline())), None)
    except psutil.Error:
        return None


def test_a_crashed_rank_reaped_late_is_the_cause_not_the_hang_after_it(tmp_path):
    """issue 56: a rank that raised and recorded why stays unreaped (its rank starter is held back,
    as a busy machine held it with a full /dev/shm), so its peer waits in the all-reduce past the
    stall floor and the watchdog declares a hang. The rank's exception is the cause; the hang is
    kept as what came before."""
    out = tmp_path / "run"
    proc, log = start(tmp_path, runner_argv(out, framework="dgl", devices=2, epochs=2, extra=[
        "--inject", "crash-rank", "--allow-fault-injection", "--stall-floor", "5"]))
    starter = None
    try:
        wait_for("both ranks started", lambda: all((live_dir(out) / "heartbeats" / f"rank{r}.hb").exists()
                                                   for r in (0, 1)), proc, log)
        starter = wait_for("the rank starter", lambda: rank_starter(proc), proc, log)
        starter.suspend()  # it can no longer reap the rank that crashes at step 2, nor stop its peer
        rc = proc.wait(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert rc == 0, log.read_text()[-3000:]
    result = json.loads((out / "result.json").read_text())
    d = result["diagnosis"]
    assert result["status"] == "crashed" and d["cause"] == "crash" and d["culprit_rank"] == 1, d
    assert d["summary"].startswith("crashed: rank 1: a rank raised an exception (rank 1 raised RuntimeError: injected "
                                   "fault crash-rank"), d["summary"]
    assert "; rank 1 raised first, " in d["summary"], d["summary"]
    assert "before the watchdog declared a hang, its consequence" in d["summary"], d["summary"]
    assert d["previous_status"] == "hang" and d["previous_cause"] != "crash", d
    assert result["watchdog"]["killed_by_watchdog"] and result["watchdog"]["survivors"] == [], result["watchdog"]
    jsonschema.validate(result, SCHEMA)
    assert not [p for p in run_pids(out) if alive(p)] and not alive(starter.pid)


# -- 4. a rank stopped from outside while it waits for its loader ----------------------------------
def test_rank_stopped_while_it_waits_for_its_loader_is_the_culprit(tmp_path):
    out = tmp_path / "run"
    # The harness stops rank 1's loader worker (SIGSTOP) at epoch 0 step 2, so rank 1 ends up
    # waiting for its next batch; the test then stops rank 1 itself and lets the worker go on.
    proc, log = start(tmp_path, runner_argv(out, devices=2, workers=1, epochs=2,
                                            extra=["--inject", "hang-worker", "--allow-fault-injection",
                                                   "--stall-floor", "10"]))
    try:
        worker = int(wait_for("the stopped worker", lambda: re.search(
            r"injected fault hang-worker: signalled loader worker pid (\d+)", log.read_text()), proc, log).group(1))
        seen = {}

        def waiting_for_loader():
            hb = read_heartbeat(live_dir(out) / "heartbeats" / "rank1.hb")
            if not hb or hb["phase"] != "loading":
                seen.clear()
                return None
            if seen.get("beats") != hb["beats"]:
                seen.update(beats=hb["beats"], since=time.time())
            return hb if time.time() - seen["since"] >= 1.0 else None

        rank1 = wait_for("rank 1 waiting for its loader", waiting_for_loader, proc, log)["pid"]
        os.kill(rank1, signal.SIGSTOP)
        wait_for("rank 1 stopped", lambda: (proc_stat(rank1) or {}).get("state") == "T", proc, log, timeout=10)
        os.kill(worker, signal.SIGCONT)  # the loader is healthy again; only the rank is frozen
        rc = proc.wait(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert rc == 0, log.read_text()[-3000:]
    result = json.loads((out / "result.json").read_text())
    d = result["diagnosis"]
    assert result["status"] == "hang", d
    assert (d["cause"], d["culprit_rank"]) == ("stalled_rank", 1), d
    culprit = next(x for x in d["ranks"] if x["rank"] == 1)
    assert culprit["phase"] == "loading" and culprit["state"] == "stopped", culprit
    assert d["evidence"][0].startswith("rank 1 is frozen: process state 'stopped'"), d["evidence"]
    assert next(w for w in d["workers"] if w["pid"] == worker)["status"] != "stopped", d["workers"]
    assert "hang: rank 1 made no progress in phase 'loading'" in d["summary"]
    assert not [p for p in run_pids(out) if alive(p)]


# -- 5. too low an open-files limit ------------------------------------------------------------------
FD_LIMIT = 48  # below the ~50 descriptors a PyG rank or worker holds before its first batch


def lowered_fd_limit() -> str | None:
    """Why a shell cannot lower its open-files limit here (None: it can)."""
    res = subprocess.run(["bash", "-c", f"ulimit -n {FD_LIMIT} && ulimit -n"], capture_output=True, text=True)
    ok = res.returncode == 0 and res.stdout.strip() == str(FD_LIMIT)
    return None if ok else f"`ulimit -n {FD_LIMIT}` did not take: {(res.stderr or res.stdout).strip()[:200]}"


@pytest.mark.skipif(lowered_fd_limit() is not None, reason=str(lowered_fd_limit()))
def test_open_files_limit_is_diagnosed_as_such_with_its_remedy(tmp_path):
    out = tmp_path / "run"
    # The case: PyG, 2 ranks x 2 workers, under `ulimit -n 48`, once a hang diagnosed
    # as a collective mismatch; the workers' batches pass as descriptors and run out of them.
    argv = runner_argv(out, devices=2, workers=2, epochs=2, extra=["--stall-floor", "5"])
    res = subprocess.run(["bash", "-c", f'ulimit -n {FD_LIMIT} && exec "$@"', "bash", *argv], cwd=REPO,
                         env=run_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=WAIT_S)
    assert res.returncode == 0, res.stdout[-3000:]
    assert f"pre-flight warning: open-files limit (`ulimit -n`) {FD_LIMIT} is below" in res.stdout
    result = json.loads((out / "result.json").read_text())
    jsonschema.validate(result, SCHEMA)
    d = result["diagnosis"]
    assert result["status"] in ("hang", "crashed"), d  # which one depends on where a batch was lost
    assert d["cause"] == "fd_limit", d
    assert f"`ulimit -n` is {FD_LIMIT} here" in d["remedy"] and "set_sharing_strategy('file_system')" in d["remedy"]
    assert f"too many open files (`ulimit -n` {FD_LIMIT}, a rank needs about " in d["summary"], d["summary"]
    assert any("Too many open files" in e for e in d["evidence"]), d["evidence"]
    check = result["preflight"]["open_files"]
    assert check["soft_limit"] == FD_LIMIT < check["needed_per_process_estimate"] and check["warning"]
    assert not [p for p in run_pids(out) if alive(p)]


# -- 6. the run directory moved or deleted from outside -----------------------------------------------
def training_stage(out: Path):
    """The staging directory of a run of `out` once both its ranks have finished an epoch, else None."""
    found = history.stagings(out)
    if found and min(rows(found[-1] / f"rank{r}" / "epochs.csv") for r in (0, 1)) >= 1:
        return found[-1]
    return None


def remove(path: Path, timeout=10) -> None:
    """`rm -rf path`, rerun until it is gone: the ranks may add a file while it runs."""
    deadline = time.time() + timeout
    while path.exists():
        assert time.time() < deadline, f"{path} could not be removed within {timeout} s"
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("how", ["deleted", "moved"])
def test_run_directory_vanishing_mid_run_is_recorded_as_failed(tmp_path, how):
    """The staging directory is deleted or moved away while the ranks train: the launcher stops
    every process of the run and records it in --out as `failed`, cause run_dir_vanished, naming
    the file it found missing; no traceback."""
    out = tmp_path / "run"
    proc, log = start(tmp_path, runner_argv(out, devices=2, workers=0, epochs=10000,
                                            extra=["--max-steps-per-epoch", "2", "--time-limit", "300"]))
    moved = tmp_path / "moved-away"
    try:
        stage = wait_for("an epoch finished on both ranks", lambda: training_stage(out), proc, log)
        tree = {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
        tree |= {read_heartbeat(stage / "heartbeats" / f"rank{r}.hb")["pid"] for r in (0, 1)}
        if how == "deleted":
            remove(stage)
        else:
            os.rename(stage, moved)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = log.read_text()
    assert rc == 0, text[-3000:]  # a result was recorded
    assert "Traceback" not in text, text[-3000:]
    assert not [p for p in tree if alive(p)]
    assert history.stagings(out) == []
    result = json.loads((out / "result.json").read_text())
    jsonschema.validate(result, SCHEMA)
    d = result["diagnosis"]
    assert (result["status"], d["cause"]) == ("failed", "run_dir_vanished"), d
    missing = Path(d["missing_file"])
    assert missing == stage or stage in missing.parents, (missing, stage)
    when = re.search(r"went missing (\d+\.\d) s after launch", d["summary"])
    assert when and 0 < float(when[1]) <= result["wall_time_s"], d["summary"]
    named = f"the run directory {stage}" if missing == stage else f"{missing.relative_to(stage)} went missing"
    assert named in d["summary"] and "moved or deleted from outside the run" in d["summary"], d["summary"]
    assert ("(it was deleted" if how == "deleted" else f"(it is now at {moved})") in d["summary"], d["summary"]
    assert "FAILED pyg/sage" in text and d["summary"] in text
    assert not result["epochs"]  # what the ranks wrote went with the directory
    assert (out / "config.json").is_file() and (out / "command.sh").is_file()
    if how == "moved":  # the launcher leaves what was moved alone
        assert rows(moved / "rank0" / "epochs.csv") >= 1


def test_run_directory_vanishing_with_its_parent_ends_with_one_line(tmp_path):
    """--out's directory deleted with the run in it: no result can be written, so exactly one
    line on stderr says what vanished, exit 4, nothing of the run left running and nothing rebuilt."""
    parent, log, err = tmp_path / "points", tmp_path / "launcher.out", tmp_path / "launcher.err"
    out = parent / "run"
    proc = subprocess.Popen(runner_argv(out, devices=2, workers=0, epochs=10000,
                                        extra=["--max-steps-per-epoch", "2", "--time-limit", "300"]),
                            cwd=REPO, env=run_env(), stdout=open(log, "w"), stderr=open(err, "w"),
                            start_new_session=True, preexec_fn=default_sigint)
    try:
        stage = wait_for("an epoch finished on both ranks", lambda: training_stage(out), proc, log)
        tree = {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
        remove(parent)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    lines = err.read_text().splitlines()
    assert rc == 4, (lines, log.read_text()[-3000:])
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ") and f"the run directory {stage} was moved or deleted from " \
        "outside the run" in lines[0], lines[0]
    assert f"no result could be written (--out's directory {parent} is gone too)" in lines[0], lines[0]
    assert "Traceback" not in log.read_text()
    assert not parent.exists()  # a run does not rebuild what was removed around it
    assert not [p for p in tree if alive(p)]
