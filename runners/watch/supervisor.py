"""Supervision of one launched run: watch its process tree, decide when to stop it, stop it.

The supervisor polls every rank's heartbeat (see runners.rank.probes). A hang is declared when
some rank shows no progress for longer than `max(stall_floor, stall_factor x the slowest
step seen so far)`; before its first step, when it stays in one start-up phase longer than that
phase's own limit (`startup_limits`), or past the start-up timeout. It then has the stacks
and process states gathered (runners.watch.evidence), stops the whole process tree (SIGTERM, then
SIGKILL after a grace period) and has the run diagnosed (runners.watch.diagnosis). Every process
of the run is tracked from the start, so none is left behind whatever the outcome. A
SIGTERM or SIGINT to the launcher (Ctrl-C, Snakemake, a scheduler's time limit) stops the
tree the same way, at the next poll (see runners.launch.interruption). A run directory moved or
deleted from outside is noticed at the next poll too (`missing_file`); the launcher stops the
tree and records it (runners.run).
"""

from __future__ import annotations

import errno
import json
import os
import select
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from runners.rank.probes import STARTUP_PHASES, descendant_pids, read_heartbeat
from runners.records.rundir import RunDir
from runners.watch.diagnosis import (Outcome, classify_exit, diagnose_interruption,
                                     diagnose_stop)
from runners.watch.evidence import (POLL_S, MemoryWatch, ProcessLedger, capture_stacks, exit_evidence,
                                    interruption_evidence, is_alive, oom_evidence, process_roles, process_states,
                                    shm_usage)

# Phases in which a rank waits for the others (the rendezvous waits for every rank to arrive).
COLLECTIVE_PHASES = ("backward", "epoch-sync", "evaluation", "rendezvous")
# A start-up phase may take this many times what it took the slowest rank that finished it
# (ranks import and load side by side on shared cores), never less than the stall floor.
STARTUP_FACTOR = 3.0
# Before any rank has loaded the dataset: its size over a slow disk's rate (bytes per second).
SLOW_READ_RATE = 50e6
CPU_SAMPLE_S = 1.0  # at a hang: how long to watch whether each process's CPU time advances
EXIT_GRACE_S = 30.0  # after every rank reported 'done'


@dataclass
class RankWatch:
    """What the supervisor last saw of one rank's heartbeat, and since when."""

    rank: int
    beats: int = -1
    last_change: float = 0.0
    last_step_key: tuple = (-1, -1)
    step_started: float = 0.0
    heartbeat: dict | None = None
    phase: str = "starting"
    phase_since: float = 0.0
    startup_s: dict = field(default_factory=dict)  # start-up phase -> seconds this rank took
    cpu_s: float = -1.0  # the rank process's CPU time at the last poll (start-up only)
    cpu_at: float = 0.0  # when it last grew


def dataset_bytes(cfg) -> int:
    """Size of the run's dataset files (0 when they cannot be listed)."""
    try:
        return sum(f.stat().st_size for f in (Path(cfg.data_root) / cfg.dataset).iterdir() if f.is_file())
    except (OSError, TypeError):
        return 0


def startup_limits(watch: dict, floor: float, timeout: float, load_estimate_s: float,
                   single_node: bool) -> dict:
    """Start-up phase -> (limit in seconds spent in it, where the limit comes from).

    Each limit is STARTUP_FACTOR x what the slowest rank that finished the phase took (its
    imports measured from launch), at least the stall floor. Before any rank has finished its
    imports there is nothing to measure against and only the start-up timeout holds; the
    dataset's first load is judged against its size over a slow disk. A rendezvous that waits
    for more than this node's ranks (other hosts that start later, graph servers) is held to the
    start-up timeout (`single_node` False).
    """
    took = {p: max((w.startup_s[p] for w in watch.values() if p in w.startup_s), default=None)
            for p in STARTUP_PHASES}

    def scaled(ref: float, what: str):
        limit = max(floor, STARTUP_FACTOR * ref)
        why = f"{STARTUP_FACTOR:g} x {what} ({ref:.1f} s)"
        return round(limit, 2), why + ("" if limit > floor else f", raised to the stall floor {floor:g} s")

    limits = {}
    if took["starting"] is None:
        limits["starting"] = (timeout, "the start-up timeout: no rank has finished its imports yet")
    else:
        limits["starting"] = scaled(took["starting"], "the slowest rank's interpreter start and imports")
        limits["rendezvous"] = (limits["starting"] if single_node else
                                (timeout, "the start-up timeout: other hosts may start later"))
    load = took["data-load"]
    limits["data-load"] = (scaled(load, "the slowest rank's dataset load") if load is not None else
                           scaled(load_estimate_s, f"the dataset's size over {SLOW_READ_RATE / 1e6:g} MB/s"))
    build = took["model-build"]
    limits["model-build"] = (scaled(build, "the slowest rank's model and loader build") if build is not None
                             else limits["data-load"])
    return limits


def sleep_until_exit(proc: subprocess.Popen, timeout: float) -> None:
    """Sleep `timeout` seconds, or until `proc` exits. A pidfd wakes this process only then;
    Popen.wait(timeout), the fallback where the kernel has no pidfds, polls with sleeps of up to
    50 ms, and on a small machine every wakeup takes a core from a rank for a moment."""
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        return
    try:
        select.select([fd], [], [], timeout)
    finally:
        os.close(fd)


def dir_identity(path: Path) -> tuple:
    """(device, inode) of a directory: which directory a path names, not just that one exists."""
    st = os.stat(path)
    return st.st_dev, st.st_ino


def missing_file(run_dir: Path, identity: tuple | None, files=()) -> Path | None:
    """What went missing of a run directory moved or deleted from outside: the first of `files`
    (paths the run made and never removes) that is gone, else `run_dir` itself when it is no
    longer the directory of `identity` (dir_identity at the launch: another one may have been
    made at its path). None while everything is in place."""
    gone = next((Path(f) for f in files if not os.path.lexists(f)), None)
    if gone is not None:
        return gone
    try:
        same = identity is None or dir_identity(run_dir) == identity
    except OSError:
        same = False
    return None if same else Path(run_dir)


PARTIAL_EPOCH_WAIT_S = 2.0  # what an interrupted run gives its ranks to write the epoch in progress


def keep_partial_epochs(watch: dict, wait_s: float) -> None:
    """Ask every rank (SIGUSR2, runners.rank.harness) to write the steps of the epoch in progress
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


class Supervisor:
    """Watches one run's process tree (its rank starter: runners.launch.spawn, or torchrun across nodes)
    until it ends or must be stopped.

    `cgroup`: a runners.memory.cgroup.MemoryCgroup when the tree runs under --memory-limit;
    `interruption`: an installed runners.launch.interruption.Interruption (a signal to the launcher
    stops the run); `write_errors`: a list the launcher's log pump appends a failed write
    (OSError) to; `mute`: a threading.Event that stops the log pump's echo on the terminal;
    `run_dir_id`: dir_identity of `out` when the run was launched."""

    def __init__(self, cfg, out: Path, proc: subprocess.Popen, local_ranks: list, launch_t: float, *,
                 cgroup=None, interruption=None, write_errors: list | None = None, mute=None, run_dir_id=None):
        self.cfg, self.out, self.proc, self.launch_t = cfg, Path(out), proc, launch_t
        self.run_dir_id = run_dir_id
        self.cgroup, self.interruption, self.write_errors, self.mute = cgroup, interruption, write_errors, mute
        self.memory = MemoryWatch()  # the cgroup as seen at every poll (capped runs)
        self.launch_uptime = None  # the kernel clock at launch (its log's time stamps), set when the watch starts
        self.watch = {r: RankWatch(r, last_change=time.time(), phase_since=launch_t) for r in local_ranks}
        self.load_estimate_s = dataset_bytes(cfg) / SLOW_READ_RATE
        self.limit_used = None  # (limit s, where it comes from, phase) of the hang declared
        self.seen: dict = {}  # pid -> psutil.Process, every process of the run ever seen
        self.ledger = ProcessLedger()
        self.max_step_s = 0.0
        self.shm_peak = None  # (used, total, seconds after launch) of /dev/shm at its fullest
        self.timeline = open(RunDir(self.out).timeline, "a")

    # -- observation ---------------------------------------------------------------------
    def _track_processes(self) -> None:
        # Every poll walks the tree: the cheap walk (descendant_pids) keeps the launcher's own
        # CPU off the cores the ranks train on.
        for pid in descendant_pids(self.proc.pid):
            if pid not in self.seen:
                try:
                    self.seen[pid] = psutil.Process(pid)
                except psutil.Error:  # exited since the walk
                    pass
        self.ledger.observe(list(self.seen), time.time())
        shm = shm_usage()
        if shm and (self.shm_peak is None or shm[0] > self.shm_peak[0]):
            self.shm_peak = (shm[0], shm[1], round(time.time() - self.launch_t, 2))
        if self.cgroup is not None:
            self.memory.observe(self.cgroup.stats(), round(time.time() - self.launch_t, 2), lambda: {
                r: (w.heartbeat or {"phase": "starting"})["phase"] for r, w in self.watch.items()})

    def missing(self) -> Path | None:
        """What went missing of the run directory (missing_file), or None: every rank's heartbeat
        once it has beaten and the directories made before the launch are never removed by the run."""
        d = RunDir(self.out)
        kept = [d.heartbeat(r) for r, w in sorted(self.watch.items()) if w.beats > 0]
        return missing_file(self.out, self.run_dir_id, kept + [d.heartbeats, d.launcher_log.parent, d.stacks])

    def last_progress(self) -> list:
        """Every rank's last heartbeat the watchdog saw: rank, pid, epoch, step and phase."""
        return [{"rank": r, "pid": w.heartbeat["pid"], "epoch": w.heartbeat["epoch"], "step": w.heartbeat["step"],
                 "phase": w.heartbeat["phase"]} for r, w in sorted(self.watch.items()) if w.heartbeat]

    def _write_ledger(self) -> None:
        self.ledger.observe(list(self.seen), time.time())
        self.ledger.write(RunDir(self.out).processes, process_roles(self.out))

    def _poll_heartbeats(self, now: float) -> None:
        for r, w in self.watch.items():
            hb = read_heartbeat(RunDir(self.out).heartbeat(r))
            if hb is None or hb["beats"] == w.beats:
                continue
            w.beats, w.last_change, w.heartbeat = hb["beats"], now, hb
            if hb["phase"] != w.phase:
                if w.phase in STARTUP_PHASES:
                    w.startup_s[w.phase] = now - w.phase_since
                w.phase, w.phase_since = hb["phase"], now
            key = (hb["epoch"], hb["step"])
            if hb["phase"] in ("loading", "copy", "forward", "backward", "optimizer") and key != w.last_step_key:
                if w.last_step_key[1] >= 0 and hb["epoch"] == w.last_step_key[0]:
                    self.max_step_s = max(self.max_step_s, now - w.step_started)
                w.last_step_key, w.step_started = key, now
            self.timeline.write(json.dumps({"t": round(now - self.launch_t, 3), "rank": r, **{
                k: hb[k] for k in ("epoch", "step", "phase")}}) + "\n")
        self.timeline.flush()
        for w in self.watch.values():  # start-up work shows as CPU time, not as heartbeats
            if w.phase in STARTUP_PHASES and w.heartbeat is not None:
                cpu = self._cpu_time(w.heartbeat["pid"])
                if cpu is not None and cpu > w.cpu_s:
                    w.cpu_s, w.cpu_at = cpu, now

    def _cpu_time(self, pid: int):
        p = self.seen.get(pid)
        try:
            t = (p or psutil.Process(pid)).cpu_times()
            return t.user + t.system
        except psutil.Error:
            return None

    def threshold(self) -> float:
        """The stall limit of a rank past its start-up (the limit the diagnosis quotes, unless a
        start-up limit fired: `limit_used`)."""
        if self.limit_used is not None:
            return self.limit_used[0]
        return max(self.cfg.stall_floor_s, self.cfg.stall_factor * self.max_step_s)

    def startup_limits(self) -> dict:
        # The partitioned strategy's rendezvous also waits for its graph servers to serve.
        alone = self.cfg.nodes <= 1 and self.cfg.strategy != "partitioned"
        return startup_limits(self.watch, self.cfg.stall_floor_s, self.cfg.startup_timeout_s,
                              self.load_estimate_s, alone)

    def _stalled_rank(self, now: float):
        """(rank, idle seconds) of a rank that shows a hang, or None (see `hang_candidate`)."""
        # A start-up phase's clock runs from its start or the rank's last CPU use, whichever is
        # later (imports and loading compute; a stopped or blocked rank does not); the
        # rendezvous's from the last local rank's arrival, once all are there (before that, the
        # ranks still on their way are the ones to judge).
        arrived = [w.phase_since for w in self.watch.values() if w.phase == "rendezvous"]
        everyone = len(arrived) == len(self.watch)
        ranks = []
        for w in self.watch.values():
            since = w.last_change
            if w.phase == "rendezvous":
                since = max(arrived)
            elif w.phase in STARTUP_PHASES:
                since = max(w.phase_since, w.cpu_at)
            ranks.append((w.rank, since, w.phase))
        limits = self.startup_limits()
        found = hang_candidate(ranks, now, self.launch_t, self.threshold(), self.cfg.startup_timeout_s,
                               {p: v[0] for p, v in limits.items() if p != "rendezvous" or everyone})
        if found is not None and all(w.phase in STARTUP_PHASES for w in self.watch.values()):
            phase = self.watch[found[0]].phase
            if now - self.launch_t > self.cfg.startup_timeout_s or phase not in limits:
                self.limit_used = (self.cfg.startup_timeout_s, "the start-up timeout (--startup-timeout)", phase)
            else:
                self.limit_used = (*limits[phase], phase)
        return found

    # -- the loop ------------------------------------------------------------------------
    def run(self) -> Outcome:
        from runners.memory.cgroup import uptime_s

        self.launch_uptime = (uptime_s() or 0.0) - (time.time() - self.launch_t)
        outcome = self._supervise()
        if outcome.status in ("ok", "interrupted"):
            return outcome
        try:
            oom, note = oom_evidence(self.out, self.watch, set(self.seen), self.proc.pid, self.cgroup,
                                     self.launch_uptime, self.memory), None
        except Exception as exc:  # evidence gathering must never lose the run's result
            oom, note = None, f"OOM evidence could not be read: {exc}"
        outcome.findings.oom = (oom, self.memory)  # for diagnosis.OVERRIDES' out_of_memory
        if note:
            outcome.note = note
        return outcome

    def _supervise(self) -> Outcome:
        while True:
            now = time.time()
            if self.interruption is not None and self.interruption.signum is not None:
                return self._interrupted()
            if self.write_errors:
                raise self.write_errors[0]  # the launcher stops the tree and reports it
            gone = self.missing()
            if gone is not None:  # the launcher stops the tree and records why (runners.run)
                raise FileNotFoundError(errno.ENOENT, "moved or deleted from outside the run", str(gone))
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
            sleep_until_exit(self.proc, POLL_S)  # a tree that exits ends the wait at once, not at the next poll

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
        leftovers = [p for p in self.seen.values() if is_alive(p)]
        survivors = stop_tree(leftovers, self.cfg.kill_grace_s) if leftovers else []
        status, diagnosis = classify_exit(self.out, rc, sorted(self.watch), self.shm_peak)
        self.timeline.close()
        return Outcome(status, diagnosis, returncode=rc, orphans_killed=[p.pid for p in leftovers],
                       survivors=survivors)

    def _stop_tree(self) -> tuple:
        """Stop every process of the run; (survivors' pids, the rank starter's exit code or None)."""
        survivors = stop_tree([p for p in self.seen.values() if is_alive(p)], self.cfg.kill_grace_s)
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
        diagnosis = diagnose_interruption(interruption_evidence(self.out, sig, self.watch, after))
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
        if status == "hang" and self.limit_used is not None:
            self._explain_startup(diagnosis)
        outcome = Outcome(status, diagnosis, detected_after_s=detected_after, returncode=rc,
                          killed_by_watchdog=True, survivors=survivors)
        # A rank that raised before the detection, still unreaped, is the cause (diagnosis.OVERRIDES' crash_before_hang).
        outcome.findings.stop = (exit_evidence(self.out, rc, sorted(self.watch), self.shm_peak), now)
        return outcome

    def _explain_startup(self, diagnosis: dict) -> None:
        """A hang before the first step: the start-up limit that fired and where it comes from,
        the time each rank took for each start-up phase it finished, and, when every rank of
        this node waited in the rendezvous of a run across nodes, the ranks that never came."""
        limit, basis, phase = self.limit_used
        diagnosis["startup_limit"] = {"phase": phase, "limit_s": limit, "basis": basis,
                                      "took_s": {str(w.rank): {p: round(t, 2) for p, t in w.startup_s.items()}
                                                 for w in self.watch.values()}}
        diagnosis["evidence"].append(f"start-up limit for '{phase}': {limit:.1f} s ({basis})")
        # torchrun starts a node's ranks only once every node's agent has joined: ranks that never
        # began, or that all wait in the rendezvous, wait for nodes that never came.
        waiting = [w.heartbeat is None or w.phase == "rendezvous" for w in self.watch.values()]
        if self.cfg.nodes > 1 and all(waiting):
            local = sorted(self.watch)
            others = [r for r in range(self.cfg.nodes * len(local)) if r not in local]
            nodes = sorted({r // len(local) for r in others})
            began = any(w.heartbeat is not None for w in self.watch.values())
            mine = ("this node's ranks waited in the rendezvous" if began else
                    "this node's ranks were never started (torchrun starts them once every node has joined)")
            diagnosis["summary"] = (
                f"hang in start-up: node{'s' if len(nodes) > 1 else ''} {', '.join(map(str, nodes))}"
                f" (ranks {others[0]}-{others[-1]}) never joined the rendezvous at {self.cfg.master_addr}:"
                f"{self.cfg.master_port} within {limit:.0f} s; {mine}")
            diagnosis["missing_nodes"] = nodes


def hang_candidate(ranks: list, now: float, launch_t: float, limit: float, startup_timeout: float,
                   startup_limits: dict | None = None):
    """(rank, idle seconds) of a rank that shows a hang once some rank is past its limit, else None.

    `ranks`: (rank, time of its last heartbeat change, phase). A rank still in its start-up is
    held to its start-up phase's limit (`startup_limits`: phase -> seconds in that phase) and
    to the start-up timeout from launch, not to the stall limit: start-up time differs per rank,
    and a rank that has not yet beaten its first step while another has is slow, not stalled.
    A rank that failed (raised) counts once it stays past the stall limit: its rank starter
    should have ended the run at once. Only detection: the culprit is decided later from process
    evidence (see `blame`) and the ranks' error records (diagnosis.crash_before_hang). This
    returns a rank outside collectives (loading, forward, ...) if there is one, else the one
    idle longest.
    """
    idle, failed = [], []
    over = False
    for rank, last_change, phase in ranks:
        if phase == "done":
            continue
        if phase == "failed":
            # A rank that raised ends the run at once (its starter stops the others): one still
            # there past the limit was never reaped, and nothing else would end the run.
            failed.append((rank, now - last_change, phase))
            over = over or now - last_change > limit
            continue
        idle.append((rank, now - last_change, phase))
        if phase in STARTUP_PHASES:
            own = (startup_limits or {}).get(phase)
            over = over or now - launch_t > startup_timeout or (own is not None and now - last_change > own)
        else:
            over = over or now - last_change > limit
    if not over:
        return None
    outside = [x for x in idle if x[2] not in COLLECTIVE_PHASES]
    rank, t, _ = max(outside or idle or failed, key=lambda x: x[1])
    return rank, t

