"""Supervision of one launched run: progress, hang detection, stacks, tree kill, diagnosis.

The supervisor polls every rank's heartbeat (see runners.probes). A hang is declared when
some rank shows no progress for longer than `max(stall_floor, stall_factor x the slowest
step seen so far)` (before the first step: the start-up timeout). It then captures the
Python stacks of every rank and every loader worker (py-spy, with faulthandler via SIGUSR1
as a fallback), stops the whole process tree (SIGTERM, then SIGKILL after a grace period)
and explains what it saw. Every process of the run is tracked from the start, so none is
left behind whatever the outcome.
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

from runners.probes import PHASE_BLOCKED_IN, read_heartbeat

COLLECTIVE_PHASES = ("backward", "epoch-sync", "evaluation")
POLL_S = 0.5
AT_LIMIT = 0.95  # a memory cgroup this full is reclaiming pages to stay under its cap
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
        "one rank stopped making progress outside any collective while the others wait for it "
        "in the all-reduce",
        "look at that rank's stack: a straggler, an infinite loop, or a blocking call in the "
        "training step",
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
        "shared memory (/dev/shm) is (nearly) full: loader workers pass batches through it",
        "enlarge /dev/shm (docker --shm-size), use fewer workers or smaller batches",
    ),
    "fd_limit": (
        "too many open file descriptors for shared tensors",
        "raise `ulimit -n` or use torch.multiprocessing.set_sharing_strategy('file_system')",
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
    """Watches one torchrun process tree until it ends or must be stopped."""

    cgroup = None  # a runners.memory.MemoryCgroup when the tree runs under --memory-limit

    def __init__(self, cfg, out: Path, proc: subprocess.Popen, local_ranks: list, launch_t: float):
        self.cfg, self.out, self.proc, self.launch_t = cfg, Path(out), proc, launch_t
        self.watch = {r: RankWatch(r, last_change=time.time()) for r in local_ranks}
        self.seen: dict = {}  # pid -> psutil.Process, every process of the run ever seen
        self.max_step_s = 0.0
        self.timeline = open(self.out / "heartbeats" / "timeline.jsonl", "a")

    # -- observation ---------------------------------------------------------------------
    def _track_processes(self) -> None:
        for p in process_tree(self.proc.pid):
            self.seen.setdefault(p.pid, p)
        if self.cgroup is not None:
            self._watch_oom()

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
        """(rank, idle seconds) of the rank to blame once some rank is past the threshold.

        Ranks waiting in a collective are victims: blame a rank stuck outside collectives
        (loading, forward, ...) if there is one, else the one idle longest.
        """
        limit = self.threshold()
        idle = []
        for w in self.watch.values():
            phase = w.heartbeat["phase"] if w.heartbeat else "starting"
            if phase in ("done", "failed"):
                continue
            idle.append((w.rank, now - w.last_change, phase))
        if not any(t > limit for _, t, _ in idle):
            return None
        outside = [x for x in idle if x[2] not in COLLECTIVE_PHASES]
        rank, t, _ = max(outside or idle, key=lambda x: x[1])
        return rank, t

    # -- the loop ------------------------------------------------------------------------
    def run(self) -> Outcome:
        from runners.memory import uptime_s

        self.launch_uptime = (uptime_s() or 0.0) - (time.time() - self.launch_t)
        return apply_oom(self._supervise(), self)

    def _supervise(self) -> Outcome:
        while True:
            now = time.time()
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
        survivors = stop_tree([p for p in self.seen.values() if _alive(p)], self.cfg.kill_grace_s)
        try:
            rc = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            rc = None
        status, diagnosis = classify_exit(self.out, 0, sorted(self.watch))
        self.timeline.close()
        outcome = Outcome(status, diagnosis, returncode=rc, killed_by_watchdog=True, survivors=survivors)
        outcome.note = f"every rank finished but the process tree had not exited after {EXIT_GRACE_S:.0f} s; stopped it"
        return outcome

    def _finish(self, rc: int) -> Outcome:
        leftovers = [p for p in self.seen.values() if _alive(p)]
        survivors = stop_tree(leftovers, self.cfg.kill_grace_s) if leftovers else []
        status, diagnosis = classify_exit(self.out, rc, sorted(self.watch))
        self.timeline.close()
        return Outcome(status, diagnosis, returncode=rc, orphans_killed=[p.pid for p in leftovers],
                       survivors=survivors)

    def _stop(self, status: str, stalled, now: float) -> Outcome:
        detected_after = now - self.launch_t
        self._track_processes()
        states = process_states(self.seen.values())
        stacks = capture_stacks(self.out, self.seen.values(), self.watch, native=self.cfg.native_stacks)
        survivors = stop_tree([p for p in self.seen.values() if _alive(p)], self.cfg.kill_grace_s)
        try:
            rc = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            rc = None
        self.timeline.close()
        diagnosis = diagnose_stop(self.out, status, stalled, self.watch, states, stacks,
                                  self.threshold(), now, self.launch_t)
        diagnosis["detected_after_s"] = round(detected_after, 2)
        return Outcome(status, diagnosis, detected_after_s=detected_after, returncode=rc,
                       killed_by_watchdog=True, survivors=survivors)


def _alive(p) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _roles(out: Path, watch: dict) -> dict:
    """pid -> role label ('rank1', 'rank1-worker0', ...) from heartbeats and worker records."""
    roles = {}
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


def process_states(procs) -> dict:
    states = {}
    for p in procs:
        try:
            states[p.pid] = {"status": p.status(), "name": p.name(), "ppid": p.ppid()}
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


def top_frames(text: str, n: int = 4) -> list:
    """The innermost `n` frames of the main thread from a py-spy dump."""
    frames = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("Thread ") and frames:
            break
        if s and not s.startswith(("Process ", "Python v", "Thread ")):
            frames.append(s)
    return frames[:n]


def diagnose_stop(out: Path, status: str, stalled, watch: dict, states: dict, stacks: dict,
                  threshold: float, now: float, launch_t: float) -> dict:
    """Explain a hang or a timeout from heartbeats, process states and stacks."""
    ranks, evidence = [], []
    infos = {r: _read_json(out / f"rank{r}" / "rank.json") for r in watch}
    for r, w in sorted(watch.items()):
        hb = w.heartbeat or {"epoch": -1, "step": -1, "phase": "starting"}
        stack_file = stacks.get(f"rank{r}")
        frames = top_frames((out / "stacks" / stack_file).read_text()) if stack_file else []
        ranks.append({"rank": r, "epoch": hb["epoch"], "step": hb["step"], "phase": hb["phase"],
                      "blocked_in": PHASE_BLOCKED_IN.get(hb["phase"], hb["phase"]),
                      "idle_s": round(now - w.last_change, 1), "stack_top": frames,
                      "steps_per_epoch": (infos.get(r) or {}).get("steps_per_epoch")})
    workers = []
    roles = _roles(out, watch)
    for pid, role in roles.items():
        if "-worker" in role:
            st = states.get(pid, {}).get("status", "gone")
            workers.append({"role": role, "pid": pid, "status": st, "stack_file": stacks.get(role)})
    counts = next((i.get("steps_per_rank") for i in infos.values() if i and i.get("steps_per_rank")), None)
    phases = {x["rank"]: x["phase"] for x in ranks}
    stalled_rank = stalled[0] if stalled else None

    if status == "timeout":
        key = "timeout"
    elif all(p == "starting" for p in phases.values()):
        key = "startup_hang"
    elif counts and len(set(counts)) > 1:
        key = "uneven_batches"
        evidence.append(f"steps per epoch by rank: {counts}")
    elif any(w["status"] in ("stopped", "gone", "zombie", "disk-sleep") for w in workers) or (
            stalled_rank is not None and phases.get(stalled_rank) == "loading"):
        key = "stalled_worker"
        for w in workers:
            if w["status"] != "sleeping" and w["status"] != "running":
                evidence.append(f"loader worker {w['role']} (pid {w['pid']}) is {w['status']}")
    elif stalled_rank is not None and phases.get(stalled_rank) not in COLLECTIVE_PHASES:
        key = "stalled_rank"
    else:
        key = "collective_mismatch"
    shm = shm_usage()
    if shm and shm[1] and shm[0] / shm[1] > 0.95:
        key = "shm_exhausted"
        evidence.append(f"/dev/shm {shm[0] / 2**20:.0f} MiB used of {shm[1] / 2**20:.0f} MiB")
    cause, remedy = CAUSES[key]
    culprit = stalled_rank
    if key == "uneven_batches" and counts:
        culprit = min(range(len(counts)), key=lambda r: counts[r])
    for x in ranks:
        evidence.append(f"rank {x['rank']}: epoch {x['epoch']} step {x['step']} phase '{x['phase']}' "
                        f"({x['blocked_in']}), no progress for {x['idle_s']} s")
    evidence.append(f"threshold {threshold:.1f} s; detected {now - launch_t:.1f} s after launch")
    if status == "timeout":
        summary = "time limit reached; rank progress: " + ", ".join(
            f"r{x['rank']} e{x['epoch']} s{x['step']} {x['phase']}" for x in ranks)
    else:
        where = phases.get(culprit, "?") if culprit is not None else "?"
        summary = (f"hang: rank {culprit} made no progress in phase '{where}' while "
                   + ", ".join(f"rank {x['rank']} waited in '{x['phase']}'" for x in ranks if x["rank"] != culprit)
                   + f"; cause: {cause.split(':')[0]}")
    return {"summary": summary, "cause": key, "cause_text": cause, "remedy": remedy, "evidence": evidence,
            "ranks": ranks, "workers": workers, "culprit_rank": culprit, "stack_files": stacks,
            "threshold_s": round(threshold, 2)}


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


def classify_exit(out: Path, rc: int, local_ranks: list):
    """Status and diagnosis of a run whose torchrun exited by itself."""
    infos = {r: _read_json(out / f"rank{r}" / "rank.json") or {} for r in local_ranks}
    if rc == 0 and all(i.get("finished") for i in infos.values()):
        return "ok", None
    errors = {r: e for r in local_ranks if (e := _read_json(out / f"rank{r}" / "error.json"))}
    log = ""
    try:
        log = (out / "logs" / "launcher.log").read_text(errors="replace")
    except OSError:
        pass
    codes = torchrun_exit_codes(log)
    signalled = {r: c for r, c in codes.items() if c < 0}
    ranks = []
    for r in local_ranks:
        e = errors.get(r)
        ranks.append({"rank": r, "exit_code": codes.get(r), "phase": "failed" if e else "?",
                      "blocked_in": "raised an exception" if e else "stopped by torchrun after another rank failed",
                      "error": f"{e['type']}: {e['message'][:300]}" if e else None,
                      "epoch": e.get("epoch") if e else None, "step": e.get("step") if e else None})
    evidence = []
    counts = next((i.get("steps_per_rank") for i in infos.values() if i.get("steps_per_rank")), None)
    if errors:
        # Ranks that only lost their peer are victims: the first error of another kind is the cause.
        primary = [e for e in errors.values() if not PEER_LOST.search(e["message"]) or e.get("worker_failure")]
        first = min(primary or errors.values(), key=lambda e: e.get("time", 0))
        msg = f"{first['type']}: {first['message']}"
        text = msg + (first.get("worker_failure") or "") + first.get("traceback", "")
        if first.get("worker_failure"):
            evidence.append(f"rank {first['rank']}: {first['worker_failure']}")
        if re.search(r"DataLoader worker .*(killed|exited unexpectedly)", text):
            key = "dead_worker"
        elif re.search(r"No space left on device|/dev/shm|Bus error", text):
            key = "shm_exhausted"
        elif "Too many open files" in text:
            key = "fd_limit"
        elif not primary:
            key = "dead_rank"
        else:
            key = "crash"
        status = "crashed"
        culprit = first["rank"]
        evidence.insert(0, f"rank {culprit} raised {msg[:500]}")
        excerpt = first.get("traceback", "")[-1500:]
    elif signalled:
        culprit = sorted(signalled)[0]
        sig = -signalled[culprit]
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        # SIGKILL/SIGTERM come from outside (OOM killer, scheduler); SIGABRT/SIGSEGV/SIGBUS from the process.
        external = sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        key = "killed" if external else ("shm_exhausted" if sig == signal.SIGBUS else "crash")
        status = "killed" if external else "crashed"
        excerpt = log[-1500:]
        evidence.append(f"rank {culprit} exited by {name}")
    else:
        key, status, culprit, excerpt = "crash", "crashed", None, log[-1500:]
        evidence.append(f"torchrun exited with code {rc} and no rank left an error record")
    if counts and len(set(counts)) > 1:
        key = "uneven_batches"  # whatever the symptom, unequal step counts are the cause
        evidence.insert(0, f"steps per epoch by rank: {counts}")
        culprit = min(range(len(counts)), key=lambda r: counts[r])
    cause, remedy = CAUSES[key]
    for r, c in sorted(codes.items()):
        evidence.append(f"torchrun: rank {r} exit code {c}")
    summary = f"{status}: rank {culprit}: {cause.split(':')[0]} ({evidence[0][:200]})"
    return status, {"summary": summary, "cause": key, "cause_text": cause,
                    "remedy": remedy, "evidence": evidence, "ranks": ranks, "culprit_rank": culprit,
                    "error_excerpt": excerpt, "detected_after_s": None}
