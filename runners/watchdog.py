"""Supervision of one launched run: progress, hang detection, stacks, tree kill, diagnosis.

The supervisor polls every rank's heartbeat (see runners.probes). A hang is declared when
some rank shows no progress for longer than `max(stall_floor, stall_factor x the slowest
step seen so far)` (before the first step: the start-up timeout). It then captures the
Python stacks of every rank and every loader worker (py-spy, with faulthandler via SIGUSR1
as a fallback), stops the whole process tree (SIGTERM, then SIGKILL after a grace period)
and explains what it saw. Every process of the run is tracked from the start, so none is
left behind whatever the outcome. A SIGTERM or SIGINT to the launcher (Ctrl-C, Snakemake,
a scheduler's time limit) stops the tree the same way, at the next poll (see Interruption).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from runners.probes import PHASE_BLOCKED_IN, describe_wait_status, proc_stat, read_heartbeat
from runners.stacks import top_frames

COLLECTIVE_PHASES = ("backward", "epoch-sync", "evaluation")
POLL_S = 0.5
AT_LIMIT = 0.95  # a memory cgroup this full is reclaiming pages to stay under its cap
CPU_SAMPLE_S = 1.0  # at a hang: how long to watch whether each process's CPU time advances
# Progress order of the phases within one step; the end-of-epoch phases come after every step.
PHASE_ORDER = {"starting": -1, "loading": 0, "copy": 1, "forward": 2, "backward": 3, "optimizer": 4,
               "epoch-sync": 5, "evaluation": 6}
FROZEN_STATES = ("stopped", "tracing-stop")  # psutil names of 'T' and 't'
EXIT_GRACE_S = 30.0  # after every rank reported 'done'

# Known causes: key -> (cause, remedy). The diagnosis names one and lists its evidence.
CAUSES = {
    "uneven_batches": (
        "unequal numbers of batches per rank: a rank that ran out of batches left the others "
        "waiting in the gradient all-reduce",
        "give every rank the same number of batches (pad the seed split as DGL's use_ddp=True "
        "does, or drop the remainder); never use a naive split",
    ),
    "stalled_worker": (
        "a loader worker stopped making progress, so its rank waits for the next mini-batch while "
        "the other ranks wait for it in the all-reduce",
        "look at the worker's stack; common roots are fork after CUDA/OpenMP initialisation, a "
        "full /dev/shm, or too many open file descriptors; try fewer workers, "
        "multiprocessing start method 'spawn', a larger /dev/shm or a higher `ulimit -n`",
    ),
    "dead_worker": (
        "a loader worker died (killed by a signal, often the out-of-memory killer)",
        "check memory and /dev/shm size (`df -h /dev/shm`), reduce workers or batch size",
    ),
    "stalled_rank": (
        "one rank stopped making progress (frozen, stuck in a call, or behind the others) while "
        "the others wait for it in a collective",
        "look at that rank's stack and process state: a stopped process (SIGSTOP, a debugger), "
        "a straggler, an infinite loop, or a blocking call in the training step",
    ),
    "dead_rank": (
        "a rank failed and the remaining ranks were left waiting in a collective",
        "fix the failing rank's error (see its excerpt); torchrun then stops the others",
    ),
    "collective_mismatch": (
        "every rank is blocked in a collective: the ranks issued collectives that do not match "
        "(different counts or order)",
        "make every rank run the same sequence of collectives (same number of steps, evaluation "
        "on every rank rather than on rank 0 followed by a barrier)",
    ),
    "startup_hang": (
        "the run never reached its first training step (rendezvous, process-group set-up, "
        "dataset loading or loader start-up)",
        "check the rendezvous address/port and firewall, that every node started, and the "
        "dataset path; raise --startup-timeout for very large datasets",
    ),
    "shm_exhausted": (
        "shared memory (/dev/shm) ran out: loader workers hand every batch to their rank through "
        "/dev/shm, and a worker writing into a full one dies of SIGBUS or fails with 'No space left "
        "on device'",
        "enlarge /dev/shm (`docker run --shm-size=2g`, or remount it larger), or need less of it: "
        "fewer loader workers per rank (--workers 0 passes no batch through /dev/shm), smaller "
        "batches or fan-outs; `df -h /dev/shm` shows its size and what is free",
    ),
    "disk_full": (
        "the filesystem of the run directory ran out of space (or quota): a rank could not write "
        "its records",
        "free space there or point --out at a filesystem with room (`df -h` on the run directory)",
    ),
    "interrupted": (
        "the launcher was stopped from outside by a signal before the run finished (Ctrl-C, kill, "
        "Snakemake cancelling its jobs, a scheduler's time limit or preemption)",
        "rerun the command (a Snakemake rerun redoes the run); on a cluster, raise the job's time "
        "limit if it was reached",
    ),
    "fd_limit": (
        "too many open file descriptors for shared tensors",
        "raise `ulimit -n` or use torch.multiprocessing.set_sharing_strategy('file_system')",
    ),
    "collective_timeout": (
        "a collective waited longer than PyTorch's own process-group timeout: a hang that PyTorch "
        "turned into a crash",
        "find why the culprit rank stopped (its last phase, its error); the harness sets the timeout "
        "above the watchdog's limits, so this means a timeout was lowered or a limit raised",
    ),
    "crash": ("a rank raised an exception", "see the error excerpt and the rank's log"),
    "killed": (
        "a rank was killed by a signal (SIGKILL is what the out-of-memory killer sends)",
        "check memory use per rank (cpu.csv) and the kernel log (dmesg) for the OOM killer",
    ),
    "oom": (
        "memory exhaustion: the kernel's out-of-memory killer killed a process of the run (the run's "
        "memory cap or the machine's memory was reached), and the ranks that depended on it were "
        "left waiting or failed",
        "compare the memory model in the pre-flight with the cap; use fewer loader workers per rank "
        "(each holds prefetched batches), smaller batches or fan-outs, fewer ranks per machine, or "
        "more memory",
    ),
    "memory_pressure": (
        "memory exhaustion without a kill: the run's memory cgroup stayed at its cap, so every "
        "allocation and every read of the memory-mapped dataset waited for the kernel to reclaim "
        "pages (the file-backed dataset is evicted and read back from disk again and again)",
        "compare the memory model in the pre-flight with the cap; use fewer loader workers per rank, "
        "smaller batches or fan-outs, fewer ranks per machine, or more memory",
    ),
    "timeout": (
        "the run exceeded its overall time limit while still making progress",
        "raise --time-limit or reduce epochs/dataset size",
    ),
}


class Interruption:
    """SIGTERM and SIGINT to the launcher, noted by a handler and acted on by the supervisor's
    loop at its next poll, so no exception lands in the middle of a write. Python's handlers
    are not told who sent a signal; `context` records what can be known instead."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.signum = None
        self.received_t = None
        self.count = 0

    def install(self) -> "Interruption":
        for s in self.SIGNALS:
            if signal.getsignal(s) is not signal.SIG_IGN:  # `nohup`, a background job's SIGINT
                signal.signal(s, self._note)
        return self

    def _note(self, signum, frame) -> None:
        self.count += 1  # a second Ctrl-C must not cut the clean-up short
        if self.signum is None:
            self.signum, self.received_t = signum, time.time()

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    def context(self) -> dict:
        """The launcher's ancestors and a SLURM job around it: who may have sent the signal."""
        ctx = {"signal": self.name, "number": self.signum, "count": self.count,
               "sender": "unknown (a Python signal handler is not told which process sent the signal)"}
        chain = []
        try:
            p = psutil.Process(os.getpid()).parent()
            while p is not None and len(chain) < 4:
                chain.append({"pid": p.pid, "name": p.name(), "cmdline": " ".join(p.cmdline())[:300]})
                p = p.parent()
        except psutil.Error:
            pass
        ctx["launcher_ancestors"] = chain
        slurm = {k: os.environ[k] for k in ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_JOB_NAME",
                                            "SLURM_JOB_PARTITION") if k in os.environ}
        if slurm:
            slurm.update(slurm_job_state(slurm["SLURM_JOB_ID"]))
            ctx["slurm"] = slurm
        return ctx


# Why SLURM signalled a job, by the state slurmctld has already given it when the SIGTERM comes.
SLURM_REASONS = {"TIMEOUT": "the job reached its time limit", "CANCELLED": "the job was cancelled (scancel)",
                 "PREEMPTED": "the job was preempted", "NODE_FAIL": "a node of the job failed",
                 "DEADLINE": "the job reached its deadline"}


def slurm_job_state(job_id: str) -> dict:
    """The SLURM job's state and reason from `scontrol show job` (the controller has set them
    before it signals the job, so TIMEOUT or CANCELLED tells who sent the SIGTERM); {} where
    scontrol does not answer within a few seconds (a scheduler's grace time is short)."""
    try:
        res = subprocess.run(["scontrol", "show", "job", "-o", str(job_id)], capture_output=True, text=True,
                             timeout=5)
    except (OSError, subprocess.SubprocessError):
        return {}
    fields = dict(f.split("=", 1) for f in res.stdout.split() if "=" in f)
    info = {k: fields[f] for k, f in (("job_state", "JobState"), ("job_reason", "Reason"),
                                      ("time_limit", "TimeLimit"), ("run_time", "RunTime")) if f in fields}
    # Reason=TimeLimit is the surer sign: the state may already read COMPLETING.
    state = "TIMEOUT" if info.get("job_reason") == "TimeLimit" else info.get("job_state")
    if state in SLURM_REASONS:
        info["why"] = SLURM_REASONS[state]
    return info


@dataclass
class RankWatch:
    rank: int
    beats: int = -1
    last_change: float = 0.0
    last_step_key: tuple = (-1, -1)
    step_started: float = 0.0
    heartbeat: dict | None = None


@dataclass
class Outcome:
    status: str
    diagnosis: dict | None
    detected_after_s: float | None = None
    returncode: int | None = None
    killed_by_watchdog: bool = False
    orphans_killed: list = field(default_factory=list)
    survivors: list = field(default_factory=list)
    note: str | None = None


def process_tree(root_pid: int) -> list:
    try:
        root = psutil.Process(root_pid)
        return [root] + root.children(recursive=True)
    except psutil.Error:
        return []


PARTIAL_EPOCH_WAIT_S = 2.0  # what an interrupted run gives its ranks to write the epoch in progress


def keep_partial_epochs(watch: dict, wait_s: float) -> None:
    """Ask every rank (SIGUSR2, runners.harness) to write the steps of the epoch in progress
    and exit; wait up to `wait_s` for them. A rank blocked in a collective cannot answer and is
    stopped with the rest of the tree."""
    ranks = []
    for w in watch.values():
        pid = (w.heartbeat or {}).get("pid")
        try:
            p = psutil.Process(pid) if pid else None
            if p is not None:
                p.send_signal(signal.SIGUSR2)
                ranks.append(p)
        except psutil.Error:
            pass
    psutil.wait_procs(ranks, timeout=wait_s)


def stop_tree(procs: list, grace_s: float) -> list:
    """SIGTERM every process, SIGKILL what is left after `grace_s`; return survivors' pids."""
    alive = []
    for p in procs:
        try:
            p.send_signal(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
            p.terminate()
            alive.append(p)
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(alive, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(alive, timeout=5)
    return [p.pid for p in alive]


class ProcessLedger:
    """When and how each process of the run ended, as seen from outside, polled every POLL_S.

    A process is alive at `last_alive` and known dead at `dead_seen`; if it was caught as a
    zombie (not yet reaped by its parent), how it ended (signal or exit code) is read from
    /proc. Together with each rank's own record of its workers this orders the deaths: which
    process died first, and by which signal.
    """

    def __init__(self):
        self.records: dict = {}

    def observe(self, pids, now: float) -> None:
        for pid in pids:
            rec = self.records.setdefault(pid, {"pid": pid, "last_alive": None, "dead_seen": None})
            if rec["dead_seen"]:
                continue  # once dead, a pid that shows up again is another process
            st = proc_stat(pid)
            if st is None:
                rec["dead_seen"] = rec["dead_seen"] or now
            elif st["state"] in ("Z", "X"):
                rec["dead_seen"] = rec["dead_seen"] or now
                rec.update(describe_wait_status(st["wait_status"] or 0))
            else:
                rec["last_alive"] = now

    def write(self, path: Path, roles: dict) -> list:
        rows = [{**r, "role": roles.get(pid)} for pid, r in sorted(self.records.items())]
        Path(path).write_text(json.dumps(rows, indent=1))
        return rows


class Supervisor:
    """Watches one torchrun process tree until it ends or must be stopped."""

    cgroup = None  # a runners.memory.MemoryCgroup when the tree runs under --memory-limit
    interruption = None  # an installed Interruption: a signal to the launcher stops the run
    write_errors = None  # a list the launcher's log pump appends a failed write (OSError) to
    mute = None  # a threading.Event that stops the log pump's echo on the terminal

    def __init__(self, cfg, out: Path, proc: subprocess.Popen, local_ranks: list, launch_t: float):
        self.cfg, self.out, self.proc, self.launch_t = cfg, Path(out), proc, launch_t
        self.watch = {r: RankWatch(r, last_change=time.time()) for r in local_ranks}
        self.seen: dict = {}  # pid -> psutil.Process, every process of the run ever seen
        self.ledger = ProcessLedger()
        self.max_step_s = 0.0
        self.shm_peak = None  # (used, total, seconds after launch) of /dev/shm at its fullest
        self.timeline = open(self.out / "heartbeats" / "timeline.jsonl", "a")

    # -- observation ---------------------------------------------------------------------
    def _track_processes(self) -> None:
        for p in process_tree(self.proc.pid):
            self.seen.setdefault(p.pid, p)
        self.ledger.observe(list(self.seen), time.time())
        shm = shm_usage()
        if shm and (self.shm_peak is None or shm[0] > self.shm_peak[0]):
            self.shm_peak = (shm[0], shm[1], round(time.time() - self.launch_t, 2))
        if self.cgroup is not None:
            self._watch_oom()

    def _write_ledger(self) -> None:
        self.ledger.observe(list(self.seen), time.time())
        self.ledger.write(self.out / "processes.json", _roles(self.out))

    def _watch_oom(self) -> None:
        """Remember where every rank was when the cgroup's OOM-kill count first rose, and the
        cgroup's state at the last poll and when it first reached its limit."""
        stats = self.cgroup.stats()
        self.cg_last = dict(stats, t=round(time.time() - self.launch_t, 2))
        if stats.get("usage_bytes") and stats.get("limit_bytes") and not getattr(self, "cg_full", None) \
                and stats["usage_bytes"] >= AT_LIMIT * stats["limit_bytes"]:
            self.cg_full = self.cg_last
        if getattr(self, "oom_seen", None):
            return
        count = stats.get("oom_kill") or 0
        if count > 0:
            self.oom_seen = {"t": round(time.time() - self.launch_t, 2), "oom_kill": count, "phases": {
                r: (w.heartbeat or {"phase": "starting"})["phase"] for r, w in self.watch.items()}}

    def _poll_heartbeats(self, now: float) -> None:
        for r, w in self.watch.items():
            hb = read_heartbeat(self.out / "heartbeats" / f"rank{r}.hb")
            if hb is None or hb["beats"] == w.beats:
                continue
            w.beats, w.last_change, w.heartbeat = hb["beats"], now, hb
            key = (hb["epoch"], hb["step"])
            if hb["phase"] in ("loading", "copy", "forward", "backward", "optimizer") and key != w.last_step_key:
                if w.last_step_key[1] >= 0 and hb["epoch"] == w.last_step_key[0]:
                    self.max_step_s = max(self.max_step_s, now - w.step_started)
                w.last_step_key, w.step_started = key, now
            self.timeline.write(json.dumps({"t": round(now - self.launch_t, 3), "rank": r, **{
                k: hb[k] for k in ("epoch", "step", "phase")}}) + "\n")
        self.timeline.flush()

    def threshold(self) -> float:
        if all(w.heartbeat is None or w.heartbeat["phase"] == "starting" for w in self.watch.values()):
            return self.cfg.startup_timeout_s
        return max(self.cfg.stall_floor_s, self.cfg.stall_factor * self.max_step_s)

    def _stalled_rank(self, now: float):
        """(rank, idle seconds) of a rank that shows a hang, or None (see `hang_candidate`)."""
        ranks = [(w.rank, w.last_change, w.heartbeat["phase"] if w.heartbeat else "starting")
                 for w in self.watch.values()]
        return hang_candidate(ranks, now, self.launch_t, self.threshold(), self.cfg.startup_timeout_s)

    # -- the loop ------------------------------------------------------------------------
    def run(self) -> Outcome:
        from runners.memory import uptime_s

        self.launch_uptime = (uptime_s() or 0.0) - (time.time() - self.launch_t)
        outcome = self._supervise()
        return outcome if outcome.status == "interrupted" else apply_oom(outcome, self)

    def _supervise(self) -> Outcome:
        while True:
            now = time.time()
            if self.interruption is not None and self.interruption.signum is not None:
                return self._interrupted()
            if self.write_errors:
                raise self.write_errors[0]  # the launcher stops the tree and reports it
            self._track_processes()
            self._poll_heartbeats(now)
            rc = self.proc.poll()
            if rc is not None:
                return self._finish(rc)
            if now - self.launch_t > self.cfg.time_limit_s:
                return self._stop("timeout", None, now)
            if self._finished_but_lingering(now):
                return self._stop_lingering()
            stalled = self._stalled_rank(now)
            if stalled is not None:
                return self._stop("hang", stalled, now)
            time.sleep(POLL_S)

    def _finished_but_lingering(self, now: float) -> bool:
        """Every rank reported 'done' yet the launcher is still running after a grace period."""
        beats = [w.heartbeat for w in self.watch.values()]
        if not all(b and b["phase"] == "done" for b in beats):
            return False
        return now - max(w.last_change for w in self.watch.values()) > EXIT_GRACE_S

    def _stop_lingering(self) -> Outcome:
        """All measurements are on disk; stop the processes that failed to exit and keep the result."""
        self._write_ledger()
        survivors, rc = self._stop_tree()
        status, diagnosis = classify_exit(self.out, 0, sorted(self.watch), self.shm_peak)
        outcome = Outcome(status, diagnosis, returncode=rc, killed_by_watchdog=True, survivors=survivors)
        outcome.note = f"every rank finished but the process tree had not exited after {EXIT_GRACE_S:.0f} s; stopped it"
        return outcome

    def _finish(self, rc: int) -> Outcome:
        self._write_ledger()  # before the leftovers are stopped: their deaths are not evidence
        leftovers = [p for p in self.seen.values() if _alive(p)]
        survivors = stop_tree(leftovers, self.cfg.kill_grace_s) if leftovers else []
        status, diagnosis = classify_exit(self.out, rc, sorted(self.watch), self.shm_peak)
        self.timeline.close()
        return Outcome(status, diagnosis, returncode=rc, orphans_killed=[p.pid for p in leftovers],
                       survivors=survivors)

    def _stop_tree(self) -> tuple:
        """Stop every process of the run; (survivors' pids, torchrun's exit code or None)."""
        survivors = stop_tree([p for p in self.seen.values() if _alive(p)], self.cfg.kill_grace_s)
        try:
            rc = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            rc = None
        self.timeline.close()
        return survivors, rc

    def _interrupted(self) -> Outcome:
        """The launcher got SIGTERM/SIGINT: stop the tree at once (no stacks: the cause is known
        and a scheduler's grace period is short) and say how far every rank got."""
        sig = self.interruption
        if self.mute is not None:
            self.mute.set()
        self._track_processes()
        self._write_ledger()
        keep_partial_epochs(self.watch, PARTIAL_EPOCH_WAIT_S)
        survivors, rc = self._stop_tree()
        after = sig.received_t - self.launch_t
        diagnosis = diagnose_interruption(self.out, sig, self.watch, after)
        return Outcome("interrupted", diagnosis, detected_after_s=after, returncode=rc, killed_by_watchdog=True,
                       survivors=survivors, note=f"stopped on {sig.name} to the launcher")

    def _stop(self, status: str, stalled, now: float) -> Outcome:
        detected_after = now - self.launch_t
        self._track_processes()
        states = process_states(self.seen.values(), CPU_SAMPLE_S)
        stacks = capture_stacks(self.out, self.seen.values(), self.watch, native=self.cfg.native_stacks)
        self._write_ledger()
        survivors, rc = self._stop_tree()
        diagnosis = diagnose_stop(self.out, status, stalled, self.watch, states, stacks,
                                  self.threshold(), now, self.launch_t)
        diagnosis["detected_after_s"] = round(detected_after, 2)
        return Outcome(status, diagnosis, detected_after_s=detected_after, returncode=rc,
                       killed_by_watchdog=True, survivors=survivors)


def hang_candidate(ranks: list, now: float, launch_t: float, limit: float, startup_timeout: float):
    """(rank, idle seconds) of a rank that shows a hang once some rank is past its limit, else None.

    `ranks`: (rank, time of its last heartbeat change, phase). A rank still starting is held to
    the start-up timeout from launch, not to the stall limit: start-up time differs per rank,
    and a rank that has not yet beaten its first step while another has is slow, not stalled.
    Only detection: the culprit is decided later from process evidence (see `blame`). This
    returns a rank outside collectives (loading, forward, ...) if there is one, else the one
    idle longest.
    """
    idle = []
    over = False
    for rank, last_change, phase in ranks:
        if phase in ("done", "failed"):
            continue
        idle.append((rank, now - last_change, phase))
        if phase == "starting":
            over = over or now - launch_t > startup_timeout
        else:
            over = over or now - last_change > limit
    if not over:
        return None
    outside = [x for x in idle if x[2] not in COLLECTIVE_PHASES]
    rank, t, _ = max(outside or idle, key=lambda x: x[1])
    return rank, t


def _alive(p) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _roles(out: Path, watch: dict | None = None) -> dict:
    """pid -> role label ('rank1', 'rank1-worker0', ...) from heartbeats and worker records."""
    roles = {}
    if watch is None:
        for f in (out / "heartbeats").glob("rank*.hb"):
            hb = read_heartbeat(f)
            if hb:
                roles[hb["pid"]] = f.stem
    else:
        for r, w in watch.items():
            if w.heartbeat:
                roles[w.heartbeat["pid"]] = f"rank{r}"
    for f in (out / "workers").glob("*.json") if (out / "workers").exists() else []:
        try:
            rec = json.loads(f.read_text())
            roles[rec["pid"]] = f"rank{rec['rank']}-worker{rec['worker_id']}"
        except (OSError, ValueError, KeyError):
            pass
    return roles


def process_states(procs, interval: float = 0.0) -> dict:
    """pid -> status, and how much CPU time it used over `interval` seconds.

    Two samples `interval` apart: a process is 'stopped' or in 'disk-sleep' at both, and its
    CPU time advanced by `cpu_delta_s` in between (0 for a frozen process).
    """
    procs = list(procs)
    first = {}
    for p in procs:
        try:
            first[p.pid] = (p.status(), sum(p.cpu_times()[:2]))
        except psutil.Error:
            pass
    if interval:
        time.sleep(interval)
    states = {}
    for p in procs:
        try:
            status, cpu = p.status(), sum(p.cpu_times()[:2])
            states[p.pid] = {"status": status, "name": p.name(), "ppid": p.ppid()}
            if p.pid in first:
                states[p.pid]["status_before"] = first[p.pid][0]
                states[p.pid]["cpu_delta_s"] = round(cpu - first[p.pid][1], 3)
                states[p.pid]["interval_s"] = interval
        except psutil.Error:
            states[p.pid] = {"status": "gone"}
    return states


def py_spy_dump(py_spy: str, pid: int, native: bool) -> str:
    """py-spy's dump of every thread; a stopped process can't be suspended, so retry without."""
    text = ""
    for extra in ([], ["--nonblocking"]):
        cmd = [py_spy, "dump", "--pid", str(pid)] + (["--native"] if native and not extra else []) + extra
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired:
            text = "py-spy timed out after 30 s"
            continue
        if res.returncode == 0:
            return res.stdout
        text = f"py-spy failed ({res.returncode}): {res.stderr[-1500:]}"
    return text


def capture_stacks(out: Path, procs, watch: dict, native: bool = False) -> dict:
    """Dump every thread's stack of every rank and loader worker; return role -> file."""
    stacks_dir = out / "stacks"
    stacks_dir.mkdir(exist_ok=True)
    roles = _roles(out, watch)
    files = {}
    py_spy = shutil.which("py-spy") or str(Path(os.sys.executable).parent / "py-spy")
    have_py_spy = Path(py_spy).exists()
    for p in procs:
        if p.pid not in roles or not _alive(p):
            continue
        role = roles[p.pid]
        # Python-level fallback first: it needs nothing but the process's own handler.
        try:
            os.kill(p.pid, signal.SIGUSR1)
        except OSError:
            pass
        if have_py_spy:
            text = py_spy_dump(py_spy, p.pid, native)
        else:
            text = "py-spy not installed; see the faulthandler-*.txt dumps"
        path = stacks_dir / f"{role}-pid{p.pid}.txt"
        path.write_text(text)
        files[role] = path.name
    time.sleep(0.5)  # let the faulthandler dumps land
    return files


# -- blame: which rank the others wait for (pure logic over recorded evidence) -------------
CPU_IDLE_S = 0.05  # CPU seconds per second below which a process is not running at all
CPU_BUSY_S = 0.25  # ... and above which it is clearly computing


def progress_key(x: dict) -> tuple:
    """How far a rank got: (epoch, step, phase order) of its last heartbeat."""
    epoch = x.get("epoch") if x.get("epoch") is not None else -1
    step = x.get("step") if x.get("step") is not None else -1
    return (epoch, step, PHASE_ORDER.get(x.get("phase"), -1))


def _cpu_rate(x: dict):
    if x.get("cpu_delta_s") is None or not x.get("cpu_interval_s"):
        return None
    return x["cpu_delta_s"] / x["cpu_interval_s"]


def is_frozen(x: dict) -> bool:
    """Stopped (SIGSTOP, a debugger) at both samples, or in uninterruptible sleep at both
    samples without using any CPU (stuck in the kernel or a driver)."""
    now, before = x.get("state"), x.get("state_before", x.get("state"))
    if now in FROZEN_STATES and before in FROZEN_STATES:
        return True
    rate = _cpu_rate(x)
    return now == before == "disk-sleep" and rate is not None and rate < CPU_IDLE_S


def _describe(x: dict) -> str:
    parts = [f"process state '{x.get('state')}'"]
    if x.get("cpu_delta_s") is not None:
        parts.append(f"CPU time +{x['cpu_delta_s']:.2f} s in {x.get('cpu_interval_s', 0):.1f} s")
    if x.get("stack_top"):
        parts.append(f"stack top: {x['stack_top'][0]}")
    return ", ".join(parts)


def blame(ranks: list):
    """(culprit rank, evidence) of a hang, or (None, []) when the evidence names nobody.

    In order of strength: a rank whose process is frozen; a rank behind all the others in
    (epoch, step, phase) - the others could only get ahead because it had not yet joined
    the collective they wait in, whatever phase that is (under NCCL the all-reduce is
    asynchronous and the waiting ranks block later, in a copy, the next forward or the
    optimiser); the only rank still burning CPU while the others are idle.
    """
    live = [x for x in ranks if x.get("phase") not in ("done", "failed")]
    if len(live) < 2:
        return (live[0]["rank"], [f"rank {live[0]['rank']} is the only rank still running"]) if live else (None, [])
    frozen = [x for x in live if is_frozen(x)]
    if frozen:
        x = min(frozen, key=progress_key)
        return x["rank"], [f"rank {x['rank']} is frozen: {_describe(x)}"]
    keys = sorted(progress_key(x) for x in live)
    if keys[0] < keys[1]:
        x = min(live, key=progress_key)
        ahead = ", ".join(f"rank {y['rank']} at epoch {y['epoch']} step {y['step']} '{y['phase']}'"
                          for y in live if y is not x)
        return x["rank"], [f"rank {x['rank']} is behind (epoch {x['epoch']} step {x['step']} "
                           f"'{x['phase']}') while {ahead}: the others wait for it"]
    rates = {x["rank"]: _cpu_rate(x) for x in live}
    if None not in rates.values():
        busy = [r for r, v in rates.items() if v >= CPU_BUSY_S]
        if len(busy) == 1 and all(v < CPU_IDLE_S for r, v in rates.items() if r != busy[0]):
            x = next(y for y in live if y["rank"] == busy[0])
            return x["rank"], [f"rank {x['rank']} is the only rank still computing: {_describe(x)}"]
    return None, []


def _worker_stuck(w: dict) -> bool:
    bad = ("stopped", "tracing-stop", "zombie", "gone", "disk-sleep")
    return w["status"] in bad and w.get("status_before", w["status"]) in bad


def _rule_timeout(ev):
    if ev["status"] == "timeout":
        return "timeout", None, []


def _rule_startup(ev):
    if all(x["phase"] == "starting" for x in ev["ranks"]) and not any(is_frozen(x) for x in ev["ranks"]):
        return "startup_hang", None, []


def _rule_uneven(ev):
    counts = ev.get("counts")
    if counts and len(set(counts)) > 1:
        return "uneven_batches", min(range(len(counts)), key=lambda r: counts[r]), [
            f"steps per epoch by rank: {counts}"]


def _rule_shm(ev):
    shm = ev.get("shm")
    if shm and shm[1] and shm[0] / shm[1] > 0.95:
        return "shm_exhausted", None, [f"/dev/shm {shm[0] / 2**20:.0f} MiB used of {shm[1] / 2**20:.0f} MiB"]


def _rule_frozen_rank(ev):
    # Process evidence outranks the phase: a rank stopped while it waits for its loader is
    # the culprit, not its (healthy) worker.
    frozen = [x for x in ev["ranks"] if x.get("phase") not in ("done", "failed") and is_frozen(x)]
    if frozen:
        x = min(frozen, key=progress_key)
        return "stalled_rank", x["rank"], [f"rank {x['rank']} is frozen: {_describe(x)}"]


def _rule_stalled_worker(ev):
    stuck = [w for w in ev["workers"] if _worker_stuck(w)]
    if stuck:
        return "stalled_worker", int(stuck[0]["role"].split("-")[0][len("rank"):]), [
            f"loader worker {w['role']} (pid {w['pid']}) is {w['status']}" for w in stuck]
    culprit, why = blame(ev["ranks"])
    if culprit is not None and next(x for x in ev["ranks"] if x["rank"] == culprit)["phase"] == "loading":
        return "stalled_worker", culprit, why + [f"rank {culprit} waits for its loader"]


def _rule_stalled_rank(ev):
    culprit, why = blame(ev["ranks"])
    if culprit is not None:
        return "stalled_rank", culprit, why


def _rule_mismatch(ev):
    return "collective_mismatch", None, ["no rank is frozen, behind the others or still computing"]


# Evidence-based priority list: the first rule whose evidence holds names the cause.
STOP_RULES = [_rule_timeout, _rule_startup, _rule_uneven, _rule_frozen_rank, _rule_shm, _rule_stalled_worker,
              _rule_stalled_rank, _rule_mismatch]


def decide_stop(ev: dict):
    """(cause key, culprit rank or None, evidence) of a stopped run from its evidence.

    `ev`: status ('hang'/'timeout'), ranks (rank, epoch, step, phase, state, state_before,
    cpu_delta_s, cpu_interval_s, stack_top), workers (role, pid, status), counts (steps per
    rank) and shm ((used, total) of /dev/shm). Pure: tested with constructed evidence.
    """
    for rule in STOP_RULES:
        verdict = rule(ev)
        if verdict:
            return verdict
    raise AssertionError("the last rule always applies")


def stop_evidence(out: Path, status: str, watch: dict, states: dict, stacks: dict, now: float) -> dict:
    """What a stopped run shows: every rank's progress, process state, CPU use and stack top."""
    infos = {r: _read_json(out / f"rank{r}" / "rank.json") for r in watch}
    ranks = []
    for r, w in sorted(watch.items()):
        hb = w.heartbeat or {"epoch": -1, "step": -1, "phase": "starting", "pid": None}
        st = states.get(hb.get("pid"), {})
        stack_file = stacks.get(f"rank{r}")
        frames = top_frames((out / "stacks" / stack_file).read_text()) if stack_file else []
        ranks.append({"rank": r, "pid": hb.get("pid"), "epoch": hb["epoch"], "step": hb["step"],
                      "phase": hb["phase"], "blocked_in": PHASE_BLOCKED_IN.get(hb["phase"], hb["phase"]),
                      "idle_s": round(now - w.last_change, 2), "stack_top": frames,
                      "state": st.get("status"), "state_before": st.get("status_before"),
                      "cpu_delta_s": st.get("cpu_delta_s"), "cpu_interval_s": st.get("interval_s"),
                      "steps_per_epoch": (infos.get(r) or {}).get("steps_per_epoch")})
    workers = []
    for pid, role in _roles(out, watch).items():
        if "-worker" in role:
            st = states.get(pid, {})
            workers.append({"role": role, "pid": pid, "status": st.get("status", "gone"),
                            "status_before": st.get("status_before", st.get("status", "gone")),
                            "cpu_delta_s": st.get("cpu_delta_s"), "stack_file": stacks.get(role)})
    counts = next((i.get("steps_per_rank") for i in infos.values() if i and i.get("steps_per_rank")), None)
    return {"status": status, "ranks": ranks, "workers": workers, "counts": counts, "shm": shm_usage()}


def diagnose_stop(out: Path, status: str, stalled, watch: dict, states: dict, stacks: dict,
                  threshold: float, now: float, launch_t: float) -> dict:
    """Explain a hang or a timeout from heartbeats, process states, CPU use and stacks."""
    ev = stop_evidence(out, status, watch, states, stacks, now)
    key, culprit, evidence = decide_stop(ev)
    cause, remedy = CAUSES[key]
    ranks = ev["ranks"]
    evidence = list(evidence)
    for x in ranks:
        evidence.append(f"rank {x['rank']}: epoch {x['epoch']} step {x['step']} phase '{x['phase']}' "
                        f"({x['blocked_in']}), no progress for {x['idle_s']} s; {_describe(x)}")
    if stalled:
        evidence.append(f"rank {stalled[0]} passed the threshold first (idle {stalled[1]:.1f} s)")
    evidence.append(f"threshold {threshold:.1f} s; detected {now - launch_t:.1f} s after launch")
    if status == "timeout":
        summary = "time limit reached; rank progress: " + ", ".join(
            f"r{x['rank']} e{x['epoch']} s{x['step']} {x['phase']}" for x in ranks)
    elif culprit is None:
        summary = ("hang: " + ", ".join(f"rank {x['rank']} waited in '{x['phase']}'" for x in ranks)
                   + f"; cause: {cause.split(':')[0]}")
    else:
        where = next((x["phase"] for x in ranks if x["rank"] == culprit), "?")
        summary = (f"hang: rank {culprit} made no progress in phase '{where}' while "
                   + ", ".join(f"rank {x['rank']} waited in '{x['phase']}'" for x in ranks if x["rank"] != culprit)
                   + f"; cause: {cause.split(':')[0]}")
    return {"summary": summary, "cause": key, "cause_text": cause, "remedy": remedy, "evidence": evidence,
            "ranks": ranks, "workers": ev["workers"], "culprit_rank": culprit, "stack_files": stacks,
            "threshold_s": round(threshold, 2)}


def _csv_rows(path: Path) -> int:
    try:
        with open(path) as fh:
            return max(0, sum(1 for _ in fh) - 1)
    except OSError:
        return 0


def diagnose_interruption(out: Path, sig: Interruption, watch: dict, after_s: float) -> dict:
    """Say which signal stopped the run, what may have sent it and what was measured before it."""
    ctx = sig.context()
    ranks = []
    for r, w in sorted(watch.items()):
        # The ranks ran on until the tree was stopped: their last heartbeat, not the last poll's.
        hb = (read_heartbeat(out / "heartbeats" / f"rank{r}.hb") or w.heartbeat
              or {"epoch": -1, "step": -1, "phase": "starting", "pid": None})
        ranks.append({"rank": r, "pid": hb.get("pid"), "epoch": hb["epoch"], "step": hb["step"],
                      "phase": hb["phase"], "blocked_in": PHASE_BLOCKED_IN.get(hb["phase"], hb["phase"])})
    steps = sum(_csv_rows(out / f"rank{r}" / "steps.csv") for r in watch)
    epochs = min((_csv_rows(out / f"rank{r}" / "epochs.csv") for r in watch), default=0)
    cause, remedy = CAUSES["interrupted"]
    evidence = [f"{sig.name} to the launcher {after_s:.1f} s after launch; sender: {ctx['sender']}"]
    if ctx["launcher_ancestors"]:
        evidence.append("the launcher's parents: " + " <- ".join(
            f"{a['name']} (pid {a['pid']})" for a in ctx["launcher_ancestors"]))
    slurm = ctx.get("slurm") or {}
    if slurm.get("why"):
        evidence.append(f"inside SLURM job {slurm['SLURM_JOB_ID']}, state {slurm['job_state']} "
                        f"reason {slurm.get('job_reason')} "
                        f"(time limit {slurm.get('time_limit')}, ran {slurm.get('run_time')}): {slurm['why']}")
    elif slurm:
        evidence.append(f"inside SLURM job {slurm.get('SLURM_JOB_ID')}: SLURM sends SIGTERM at the time "
                        "limit, on preemption and on scancel (`sacct -j JOB` says which)")
    evidence.append(f"measured before the signal: {epochs} finished epoch(s) per rank, {steps} step(s) in "
                    "rank*/steps.csv (the steps of the epoch in progress included: each rank that could still act "
                    "wrote them on the launcher's SIGUSR2 before the tree was stopped)")
    evidence += [f"rank {x['rank']}: epoch {x['epoch']} step {x['step']} phase '{x['phase']}'" for x in ranks]
    summary = (f"interrupted: {sig.name} to the launcher {after_s:.1f} s after launch stopped the run; "
               f"{epochs} epoch(s) and {steps} step(s) were measured before it; rank progress: "
               + ", ".join(f"r{x['rank']} e{x['epoch']} s{x['step']} {x['phase']}" for x in ranks))
    if slurm.get("why"):
        summary += f"; SLURM job {slurm['SLURM_JOB_ID']}: {slurm['why']}"
    return {"summary": summary, "cause": "interrupted", "cause_text": cause, "remedy": remedy,
            "evidence": evidence, "ranks": ranks, "culprit_rank": None, "signal": ctx,
            "detected_after_s": round(after_s, 2)}


def shm_usage():
    try:
        u = shutil.disk_usage("/dev/shm")
        return (u.used, u.total)
    except OSError:
        return None


def _read_json(path: Path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


WORKER_PIDS = re.compile(r"DataLoader worker \(pids?\(?s?\)?\s*([\d, ]+)\)")


def oom_findings(sup) -> dict | None:
    """Out-of-memory evidence for a supervised run: the cgroup's OOM-kill count and peak, the
    kernel log's kills of the run's processes, and which process (rank, loader worker) died.
    None when nothing says the OOM killer acted on this run."""
    from runners.memory import fmt_bytes, kernel_oom_kills

    stats = sup.cgroup.stats() if sup.cgroup is not None else None
    kills, log_reason = kernel_oom_kills(pids=set(sup.seen), cgroup_path=sup.cgroup.path if sup.cgroup else None,
                                         since_uptime=getattr(sup, "launch_uptime", None))
    count = (stats or {}).get("oom_kill") or 0
    if not count and not kills:
        return None
    roles = _roles(sup.out, sup.watch)
    roles[sup.proc.pid] = "torchrun agent"
    evidence = []
    if stats:
        evidence.append(f"memory cgroup {stats['cgroup']}: oom_kill {count}, peak {fmt_bytes(stats['peak_bytes'])} "
                        f"of limit {fmt_bytes(stats['limit_bytes'])}")
    killed = [{"pid": k["pid"], "role": roles.get(k["pid"], f"process {k['name']}"), "source": k["source"]}
              for k in kills]
    if not killed:
        # No kernel log here: take the loader's or torchrun's own report of who died.
        evidence.append(f"kernel log not usable ({log_reason or 'no OOM line for this run'}); "
                        "victims from the ranks' error records and torchrun's exit codes")
        for r in sup.watch:
            err = _read_json(sup.out / f"rank{r}" / "error.json") or {}
            m = WORKER_PIDS.search((err.get("worker_failure") or "") + err.get("message", ""))
            for pid in (int(x) for x in (m.group(1).replace(",", " ").split() if m else [])):
                killed.append({"pid": pid, "role": roles.get(pid, f"rank{r}-worker"), "source": f"rank {r}'s loader"})
        try:
            codes = torchrun_exit_codes((sup.out / "logs" / "launcher.log").read_text(errors="replace"))
        except OSError:
            codes = {}
        for r, c in codes.items():
            if c == -signal.SIGKILL:
                killed.append({"pid": None, "role": f"rank{r}", "source": "torchrun: exit code -9 (SIGKILL)"})
    for k in killed:
        evidence.append(f"killed by the OOM killer: {k['role']} (pid {k['pid']}; {k['source']})")
    snap = getattr(sup, "oom_seen", None)
    phases = snap["phases"] if snap else {r: (w.heartbeat or {"phase": "starting"})["phase"]
                                         for r, w in sup.watch.items()}
    victim_ranks = set()
    for k in killed:
        m = re.match(r"rank(\d+)", k["role"])
        if m:
            victim_ranks.add(int(m.group(1)))
    waiting = [{"rank": r, "phase": p, "blocked_in": PHASE_BLOCKED_IN.get(p, p)}
               for r, p in sorted(phases.items()) if r not in victim_ranks]
    if snap:
        evidence.append(f"first OOM kill seen {snap['t']} s after launch; rank phases then: "
                        + ", ".join(f"rank {r} '{p}'" for r, p in sorted(phases.items())))
    return {"killed": killed, "ranks_left_waiting": waiting, "cgroup": stats, "evidence": evidence,
            "kernel_log": log_reason or "read", "first_seen_s": snap["t"] if snap else None,
            "phases_at_kill": {str(r): p for r, p in phases.items()}}


def apply_oom(outcome: Outcome, sup) -> Outcome:
    """Name an out-of-memory kill as the cause when the cgroup or the kernel saw one."""
    if outcome.status == "ok":
        return outcome
    try:
        found = oom_findings(sup)
    except Exception as exc:  # evidence gathering must never lose the run's result
        found = None
        outcome.note = f"OOM evidence could not be read: {exc}"
    if not found:
        return _memory_pressure(outcome, sup)
    if outcome.status == "hang" and not getattr(sup, "oom_seen", None):
        # The kills came after the hang was detected (while stacks were taken): the stall at the
        # cap is the cause, the kills its consequence.
        found["evidence"].append("the OOM kills happened after the hang was detected (while the stacks were "
                                 "taken and the tree was stopped)")
        pressured = _memory_pressure(outcome, sup)
        if pressured.diagnosis.get("cause") == "memory_pressure":
            pressured.diagnosis["oom"] = found
            pressured.diagnosis["evidence"] = pressured.diagnosis["evidence"] + found["evidence"]
            return pressured
    diag = dict(outcome.diagnosis or {"ranks": [], "evidence": []})
    cause, remedy = CAUSES["oom"]
    diag["previous_cause"] = diag.get("cause")
    diag.update({"cause": "oom", "cause_text": cause, "remedy": remedy, "oom": found,
                 "evidence": found["evidence"] + list(diag.get("evidence") or [])})
    victims = ", ".join(f"{k['role']} (pid {k['pid']})" for k in found["killed"]) or "a process of the run"
    left = ", ".join(f"rank {w['rank']} in '{w['phase']}'" for w in found["ranks_left_waiting"])
    status = "killed" if outcome.status == "crashed" else outcome.status
    limit = (found["cgroup"] or {}).get("limit_bytes")
    from runners.memory import fmt_bytes

    cap = f" under the {fmt_bytes(limit)} memory cap" if limit else ""
    diag["summary"] = (f"{status}: out of memory{cap}: the OOM killer killed {victims}"
                       + (f"; left waiting: {left}" if left else "") + "; cause: memory exhaustion")
    outcome.status, outcome.diagnosis = status, diag
    return outcome


def _memory_pressure(outcome: Outcome, sup) -> Outcome:
    """A hang while the run's memory cgroup sat at its cap (no process killed): name it."""
    last, full = getattr(sup, "cg_last", None), getattr(sup, "cg_full", None)
    if outcome.status != "hang" or not last or not full or not last.get("limit_bytes"):
        return outcome
    if (last.get("usage_bytes") or 0) < AT_LIMIT * last["limit_bytes"]:
        return outcome
    from runners.memory import fmt_bytes

    diag = dict(outcome.diagnosis)
    cause, remedy = CAUSES["memory_pressure"]
    faults = (last.get("major_faults") or 0) - (full.get("major_faults") or 0)
    evidence = [f"memory cgroup {last['cgroup']} at its cap when the hang was detected: usage "
                f"{fmt_bytes(last['usage_bytes'])} of {fmt_bytes(last['limit_bytes'])} (anonymous "
                f"{fmt_bytes(last.get('anon_bytes'))}, shared memory {fmt_bytes(last.get('shmem_bytes'))}, "
                f"page cache {fmt_bytes(last.get('file_bytes'))}); no process was OOM-killed",
                f"at the cap since {full['t']} s after launch; {faults} major page faults since then"]
    diag["previous_cause"] = diag.get("cause")
    diag.update({"cause": "memory_pressure", "cause_text": cause, "remedy": remedy,
                 "evidence": evidence + list(diag.get("evidence") or []),
                 "memory_pressure": {"at_limit_since_s": full["t"], "last": last, "major_faults_since": faults}})
    diag["summary"] = diag["summary"].split("; cause:")[0] + ("; cause: memory exhaustion (the run sat at its "
                                                             f"{fmt_bytes(last['limit_bytes'])} memory cap)")
    outcome.diagnosis = diag
    return outcome


PEER_LOST = re.compile(r"Connection closed by peer|Connection reset|Broken pipe|NCCL communicator was aborted")
SIGNAL_RE = re.compile(r"rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", re.S)


def torchrun_exit_codes(log_text: str) -> dict:
    """rank -> exit code from torchrun's failure summary (negative = killed by that signal)."""
    codes = {}
    for block in log_text.split("[") + [log_text]:
        for m in SIGNAL_RE.finditer(block):
            codes.setdefault(int(m.group(1)), int(m.group(2)))
    return codes


COLLECTIVE_TIMEOUT = re.compile(
    r"Watchdog caught collective operation timeout|NCCL timeout|[Tt]imed out waiting \d+ ?ms for (?:recv|send)"
    r"|ProcessGroupNCCL.{0,200}[Tt]imeout")
WORKER_FAILED = re.compile(r"DataLoader worker .*(killed|exited unexpectedly)")


def exit_evidence(out: Path, rc: int, local_ranks: list, shm_peak=None) -> dict:
    """What a run that ended by itself left behind: rank records, errors, torchrun's log,
    final heartbeats, the supervisor's ledger of process deaths (processes.json), /dev/shm at
    its fullest during the run and the space left on the run directory's filesystem."""
    infos = {r: _read_json(out / f"rank{r}" / "rank.json") or {} for r in local_ranks}
    errors = {r: e for r in local_ranks if (e := _read_json(out / f"rank{r}" / "error.json"))}
    try:
        log = (out / "logs" / "launcher.log").read_text(errors="replace")
    except OSError:
        log = ""
    codes = torchrun_exit_codes(log)
    ranks = []
    for r in local_ranks:
        e = errors.get(r)
        hb = read_heartbeat(out / "heartbeats" / f"rank{r}.hb") or {}
        last = e if e else hb
        ranks.append({"rank": r, "exit_code": codes.get(r), "phase": "failed" if e else "?",
                      "blocked_in": "raised an exception" if e else "stopped by torchrun after another rank failed",
                      "error": f"{e['type']}: {e['message'][:300]}" if e else None,
                      "epoch": last.get("epoch"), "step": last.get("step"),
                      "last_phase": (e.get("phase") if e else hb.get("phase")), "pid": infos[r].get("pid", hb.get("pid"))})
    # Ranks that only lost their peer are victims: the first error of another kind is the cause.
    primary = [e for e in errors.values() if not PEER_LOST.search(e["message"]) or e.get("worker_failure")]
    first = min(primary or errors.values(), key=lambda e: e.get("time", 0)) if errors else None
    try:
        disk = shutil.disk_usage(out)
        disk = (disk.used, disk.total, disk.free)
    except OSError:
        disk = None
    return {"rc": rc, "ranks": ranks, "errors": errors, "primary": primary, "first": first, "log": log,
            "codes": codes, "ledger": _read_json(out / "processes.json") or [],
            "counts": next((i.get("steps_per_rank") for i in infos.values() if i.get("steps_per_rank")), None),
            "shm_peak": shm_peak, "disk": disk}


def _error_text(e: dict) -> str:
    return f"{e['type']}: {e['message']}" + (e.get("worker_failure") or "") + e.get("traceback", "")


def rank_failure_times(ev: dict) -> dict:
    """rank -> the earliest time it is known to have failed: its error record, else the last
    time the supervisor saw it alive (it ended after that)."""
    times = {r: e["time"] for r, e in ev["errors"].items() if e.get("time")}
    pid_rank = {x["pid"]: x["rank"] for x in ev["ranks"] if x.get("pid")}
    for rec in ev["ledger"]:
        r = pid_rank.get(rec["pid"])
        if r is not None and r not in times and rec.get("dead_seen") and rec.get("last_alive"):
            times[r] = rec["last_alive"]
    return times


def worker_deaths(ev: dict) -> list:
    """Every loader worker known to have ended: pid, rank, signal or exit code, and the time by
    which it was dead, from its rank's failure record and from the supervisor's ledger."""
    deaths = {}
    for r, e in ev["errors"].items():
        for d in e.get("dead_workers") or []:
            rec = deaths.setdefault(d["pid"], {"pid": d["pid"], "rank": r, "role": f"rank{r}-worker{d.get('worker_id')}",
                                               "dead_by": d.get("seen_t"), "seen_by": [f"rank {r}"]})
            for k in ("signal", "exit_code"):
                if k in d:
                    rec[k] = d[k]
    for L in ev["ledger"]:
        role = L.get("role") or ""
        if "-worker" not in role or not L.get("dead_seen"):
            continue
        rec = deaths.setdefault(L["pid"], {"pid": L["pid"], "rank": int(role.split("-")[0][len("rank"):]),
                                           "role": role, "dead_by": L["dead_seen"], "seen_by": []})
        rec["dead_by"] = min(t for t in (rec.get("dead_by"), L["dead_seen"]) if t)
        rec["seen_by"].append("the watchdog")
        for k in ("signal", "exit_code"):
            if k in L and k not in rec:
                rec[k] = L[k]
    return sorted(deaths.values(), key=lambda d: d.get("dead_by") or 0)


def _exit_uneven(ev):
    return _rule_uneven(ev)


def _exit_collective_timeout(ev):
    texts = [_error_text(e) for e in ev["errors"].values()] + [ev["log"]]
    hit = next((m for t in texts if (m := COLLECTIVE_TIMEOUT.search(t))), None)
    if not hit:
        return None
    positions = [{"rank": x["rank"], "epoch": x["epoch"], "step": x["step"], "phase": x["last_phase"]}
                 for x in ev["ranks"]]
    culprit, why = blame(positions)
    return "collective_timeout", culprit, [f"PyTorch's collective timeout fired: '{hit.group(0)}'"] + why


# PyTorch's words (torch 2.2) for a loader that ran out of /dev/shm: its shared-memory allocator
# failing to fill or map a /torch_* file, the worker's own SIGBUS handler, and the loader's
# report of a worker killed by SIGBUS.
SHM_ERROR = re.compile(r"unable to (?:write to|mmap \d+ bytes from) file </torch_[^>]*>[^\n]{0,80}"
                       r"|insufficient shared memory \(shm\)|out of shared memory|killed by signal: Bus error")
NO_SPACE = re.compile(r"No space left on device|Disk quota exceeded")
FULL = 0.95  # /dev/shm this full (by any process) leaves a loader's next batch no room


def shm_exhaustion(ev) -> tuple:
    """(culprit rank or None, evidence) that /dev/shm ran out; empty evidence when nothing says so.

    A worker killed by SIGBUS, or PyTorch's shared-memory error text, is direct evidence; a
    bare 'No space left on device' counts only when /dev/shm was seen full during the run (it
    is also what a full disk says)."""
    evidence, culprit = [], None
    for d in worker_deaths(ev):
        if d.get("signal") == "SIGBUS":
            culprit = d["rank"] if culprit is None else culprit
            evidence.append(f"loader worker {d['role']} (pid {d['pid']}) was killed by SIGBUS (seen by "
                            f"{' and '.join(d['seen_by'])}): what a write into a full /dev/shm gets")
    peak = ev.get("shm_peak")
    full = bool(peak and peak[1] and peak[0] >= FULL * peak[1])
    for r, e in sorted(ev["errors"].items()):
        text = _error_text(e)
        m = SHM_ERROR.search(text) or (NO_SPACE.search(text) if full else None)
        if m:
            culprit = r if culprit is None else culprit
            evidence.append(f"rank {r}: '{m.group(0)[:200]}'")
    m = SHM_ERROR.search(ev["log"])
    if m and not evidence:
        evidence.append(f"torchrun's log: '{m.group(0)[:200]}'")
    if evidence and peak:
        # Sampled every poll: the allocation that failed was freed at once, so this is a floor.
        evidence.append(f"/dev/shm at its fullest the watchdog saw (every {POLL_S} s): {peak[0] / 2**20:.1f} MiB "
                        f"used of {peak[1] / 2**20:.1f} MiB, {peak[2]} s after launch")
    return culprit, evidence


def _exit_shm(ev):
    culprit, evidence = shm_exhaustion(ev)
    if evidence:
        return "shm_exhausted", culprit, evidence


def _exit_dead_worker(ev):
    failed_at = rank_failure_times(ev)
    first_failure = min(failed_at.values()) if failed_at else None
    for d in worker_deaths(ev):
        bad = d.get("signal") or d.get("exit_code")
        if bad and d.get("dead_by") and (first_failure is None or d["dead_by"] <= first_failure):
            how = f"killed by {d['signal']}" if d.get("signal") else f"exited with code {d['exit_code']}"
            return "dead_worker", d["rank"], [
                f"loader worker {d['role']} (pid {d['pid']}) {how} before any rank failed "
                f"(seen dead by {' and '.join(d['seen_by'])})"]
    first = ev["first"]
    if first and WORKER_FAILED.search(_error_text(first)):
        return "dead_worker", first["rank"], [f"rank {first['rank']}: {first.get('worker_failure') or first['message'][:300]}"]


DISK_LOW_BYTES = 2**20  # below this much free space a filesystem counts as full


def _exit_error_text(ev):
    first = ev["first"]
    if not first:
        return None
    text = _error_text(first)
    if NO_SPACE.search(text):
        disk = ev.get("disk")
        if disk and disk[2] < DISK_LOW_BYTES:
            return "disk_full", first["rank"], [f"the run directory's filesystem has {disk[2] / 2**10:.0f} KiB "
                                                f"free of {disk[1] / 2**20:.1f} MiB"]
        return "shm_exhausted", first["rank"], []
    if re.search(r"/dev/shm|Bus error", text):
        return "shm_exhausted", first["rank"], []
    if "Too many open files" in text:
        return "fd_limit", first["rank"], []


def _exit_crash(ev):
    if ev["primary"]:
        return "crash", ev["first"]["rank"], []


def _exit_signal(ev):
    signalled = {r: c for r, c in ev["codes"].items() if c < 0}
    if not signalled:
        return None
    culprit = sorted(signalled)[0]
    sig = -signalled[culprit]
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    # SIGKILL/SIGTERM come from outside (OOM killer, scheduler); SIGABRT/SIGSEGV/SIGBUS from the process.
    external = sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    key = "killed" if external else ("shm_exhausted" if sig == signal.SIGBUS else "crash")
    return key, culprit, [f"rank {culprit} exited by {name}"]


def _exit_dead_rank(ev):
    if not ev["errors"]:
        return None
    # Every error is a lost peer: a rank that left no error record and was already gone when
    # the first error was recorded is the one that died.
    first_t = ev["first"].get("time") or 0
    pid_rank = {x["pid"]: x["rank"] for x in ev["ranks"] if x.get("pid")}
    silent = sorted((rec["dead_seen"], pid_rank[rec["pid"]]) for rec in ev["ledger"]
                    if pid_rank.get(rec["pid"]) is not None and pid_rank[rec["pid"]] not in ev["errors"]
                    and rec.get("dead_seen") and rec["dead_seen"] <= first_t)
    if silent:
        return "dead_rank", silent[0][1], [f"rank {silent[0][1]} was gone before any rank recorded an error"]
    return "dead_rank", ev["first"]["rank"], []


def _exit_unexplained(ev):
    return "crash", None, [f"torchrun exited with code {ev['rc']} and no rank left an error record"]


# Evidence-based priority list: the first rule whose evidence holds names the cause.
EXIT_RULES = [_exit_uneven, _exit_collective_timeout, _exit_shm, _exit_dead_worker, _exit_error_text,
              _exit_crash, _exit_signal, _exit_dead_rank, _exit_unexplained]
EXIT_STATUS = {"killed": "killed", "collective_timeout": "hang"}  # any other cause: 'crashed'


def decide_exit(ev: dict):
    """(cause key, culprit rank or None, evidence) of a run that ended by itself. Pure."""
    for rule in EXIT_RULES:
        verdict = rule(ev)
        if verdict:
            return verdict
    raise AssertionError("the last rule always applies")


def classify_exit(out: Path, rc: int, local_ranks: list, shm_peak=None):
    """Status and diagnosis of a run whose torchrun exited by itself."""
    infos = {r: _read_json(out / f"rank{r}" / "rank.json") or {} for r in local_ranks}
    if rc == 0 and all(i.get("finished") for i in infos.values()):
        return "ok", None
    ev = exit_evidence(out, rc, local_ranks, shm_peak)
    key, culprit, evidence = decide_exit(ev)
    status = EXIT_STATUS.get(key, "crashed")
    evidence = list(evidence)
    first = ev["first"]
    if first:
        msg = f"{first['type']}: {first['message']}"
        evidence.append(f"rank {first['rank']} raised {msg[:500]}")
        if first.get("worker_failure"):
            evidence.append(f"rank {first['rank']}: {first['worker_failure']}")
        excerpt = first.get("traceback", "")[-1500:]
    else:
        excerpt = ev["log"][-1500:]
    for r, c in sorted(ev["codes"].items()):
        evidence.append(f"torchrun: rank {r} exit code {c}")
    cause, remedy = CAUSES[key]
    summary = f"{status}: rank {culprit}: {cause.split(':')[0]} ({evidence[0][:200]})"
    return status, {"summary": summary, "cause": key, "cause_text": cause,
                    "remedy": remedy, "evidence": evidence, "ranks": ev["ranks"], "culprit_rank": culprit,
                    "error_excerpt": excerpt, "detected_after_s": None}
