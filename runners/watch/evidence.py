"""Evidence of how a supervised run went, gathered from outside its processes.

While the run goes and when it fails or is stopped, this module reads what can be known
without the ranks' help: every process's state, CPU time and exit (/proc, the ledger of
deaths in processes.json), every thread's Python stack (py-spy, faulthandler), each rank's
heartbeat and records, torchrun's exit codes from its log, /dev/shm and disk usage, the
memory cgroup's and the kernel's record of OOM kills, and who may have sent a signal to the
launcher. It gathers and writes facts; runners.watch.diagnosis turns them into a cause.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from runners.rank.probes import PHASE_BLOCKED_IN, describe_wait_status, proc_stat, read_heartbeat
from runners.records import rank_rows
from runners.records.rundir import RunDir
from runners.watch.stacks import other_threads, top_frames

POLL_S = 0.5  # how often the supervisor samples heartbeats, processes and /dev/shm
# A share of a limit past which nothing more fits: a memory cgroup this full is reclaiming pages to stay
# under its cap, a /dev/shm this full leaves a loader's next batch no room, a process holding this
# share of its open-files limit has no room for the next batch's descriptors.
FULL_SHARE = 0.95


# -- what the run wrote ---------------------------------------------------------------------
def rank_info(out: Path, rank: int):
    """The rank's own record (rank{rank}/rank.json), or None where it wrote none (yet)."""
    return rank_rows.read_rank_info(out, rank)


def recorded_rows(out: Path, rank: int, table: str) -> int:
    """How many rows the rank wrote to rank{rank}/{table}.csv (table: 'steps', 'epochs')."""
    return rank_rows.count_rows(out, rank, table)


LOG_READ_BYTES = 8 * 2**20  # of each end of torchrun's log: a worker failing in a loop writes MBs a second


def launcher_log(out: Path) -> str:
    """torchrun's output as the launcher logged it, its first and last LOG_READ_BYTES when it is
    longer ('' where there is none)."""
    try:
        with open(RunDir(out).launcher_log, "rb") as fh:
            head = fh.read(LOG_READ_BYTES + 1)
            if len(head) <= LOG_READ_BYTES:
                return head.decode(errors="replace")
            fh.seek(max(LOG_READ_BYTES, fh.seek(0, os.SEEK_END) - LOG_READ_BYTES))
            tail = fh.read()
        return (head[:LOG_READ_BYTES] + b"\n[... log cut ...]\n" + tail).decode(errors="replace")
    except OSError:
        return ""


def fd_facts(out: Path) -> dict:
    """The run's open-files limits (its processes inherit the launcher's) and the pre-flight's
    estimate of what a rank needs (runners.launch.descriptors, from the run's config.json)."""
    from runners.config import RunConfig
    from runners.launch import descriptors

    soft, hard = descriptors.limits()
    try:
        need = descriptors.fd_need(RunConfig.load(RunDir(out).config))["per_process"]
    except (OSError, ValueError, KeyError, TypeError):
        need = None
    return {"soft_limit": soft, "hard_limit": hard, "needed_per_process": need}


# The global rank: torchrun's "[ERROR] failed (exitcode: -6) local_rank: 0" names the local one.
SIGNAL_RE = re.compile(r"(?<!local_)rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", re.S)


def torchrun_exit_codes(log_text: str) -> dict:
    """rank -> exit code from torchrun's failure summary (negative = killed by that signal)."""
    codes = {}
    for block in log_text.split("[") + [log_text]:
        for m in SIGNAL_RE.finditer(block):
            codes.setdefault(int(m.group(1)), int(m.group(2)))
    return codes


# -- processes, as seen from outside ---------------------------------------------------------
def is_alive(p) -> bool:
    """The psutil process still runs (neither gone nor a zombie)."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def process_roles(out: Path, watch: dict | None = None) -> dict:
    """pid -> role label ('rank1', 'rank1-worker0', ...) from heartbeats and worker records."""
    roles = {}
    if watch is None:
        for f in RunDir(out).heartbeat_files():
            hb = read_heartbeat(f)
            if hb:
                roles[hb["pid"]] = f.stem
    else:
        for r, w in watch.items():
            if w.heartbeat:
                roles[w.heartbeat["pid"]] = f"rank{r}"
    for f in RunDir(out).worker_files():
        try:
            rec = json.loads(f.read_text())
            roles[rec["pid"]] = f"rank{rec['rank']}-worker{rec['worker_id']}"
        except (OSError, ValueError, KeyError):
            pass
    return roles


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


def process_states(procs, interval: float = 0.0) -> dict:
    """pid -> status, and how much CPU time it used over `interval` seconds.

    Two samples `interval` apart: a process is 'stopped' or in 'disk-sleep' at both, and its
    CPU time advanced by `cpu_delta_s` in between (0 for a frozen process).
    """
    from runners.launch import descriptors

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
            states[p.pid] = {"status": status, "name": p.name(), "ppid": p.ppid(), **descriptors.in_use(p.pid)}
            if p.pid in first:
                states[p.pid]["status_before"] = first[p.pid][0]
                states[p.pid]["cpu_delta_s"] = round(cpu - first[p.pid][1], 3)
                states[p.pid]["interval_s"] = interval
        except psutil.Error:
            states[p.pid] = {"status": "gone"}
    return states


def py_spy_path() -> str | None:
    """py-spy's executable: on PATH, or beside this Python (a venv not activated); None without it."""
    py_spy = shutil.which("py-spy") or str(Path(os.sys.executable).parent / "py-spy")
    return py_spy if Path(py_spy).exists() else None


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
    stacks_dir = RunDir(out).stacks
    stacks_dir.mkdir(exist_ok=True)
    roles = process_roles(out, watch)
    files = {}
    py_spy = py_spy_path()
    for p in procs:
        if p.pid not in roles or not is_alive(p):
            continue
        role = roles[p.pid]
        # Python-level fallback first: it needs nothing but the process's own handler.
        try:
            os.kill(p.pid, signal.SIGUSR1)
        except OSError:
            pass
        if py_spy is not None:
            text = py_spy_dump(py_spy, p.pid, native)
        else:
            text = "py-spy not installed; see the faulthandler-*.txt dumps"
        path = RunDir(out).stack_dump(role, p.pid)
        path.write_text(text)
        files[role] = path.name
    time.sleep(0.5)  # let the faulthandler dumps land
    return files


def shm_usage():
    """(used, total) bytes of /dev/shm, or None where it cannot be read."""
    try:
        u = shutil.disk_usage("/dev/shm")
        return (u.used, u.total)
    except OSError:
        return None


def disk_usage(path: Path):
    """(used, total, free) bytes of the filesystem holding `path`, or None where it cannot be read."""
    try:
        disk = shutil.disk_usage(path)
        return (disk.used, disk.total, disk.free)
    except OSError:
        return None


# -- the evidence of one outcome ------------------------------------------------------------
def stop_evidence(out: Path, status: str, watch: dict, states: dict, stacks: dict, now: float) -> dict:
    """What a stopped run shows: every rank's progress, process state, CPU use and stack top."""
    infos = {r: rank_info(out, r) for r in watch}
    ranks = []
    for r, w in sorted(watch.items()):
        hb = w.heartbeat or {"epoch": -1, "step": -1, "phase": "starting", "pid": None}
        st = states.get(hb.get("pid"), {})
        stack_file = stacks.get(f"rank{r}")
        text = (RunDir(out).stacks / stack_file).read_text() if stack_file else ""
        ranks.append({"rank": r, "pid": hb.get("pid"), "epoch": hb["epoch"], "step": hb["step"],
                      "phase": hb["phase"], "blocked_in": PHASE_BLOCKED_IN.get(hb["phase"], hb["phase"]),
                      "idle_s": round(now - w.last_change, 2), "stack_top": top_frames(text),
                      "threads": other_threads(text),
                      "state": st.get("status"), "state_before": st.get("status_before"),
                      "cpu_delta_s": st.get("cpu_delta_s"), "cpu_interval_s": st.get("interval_s"),
                      "fds": st.get("fds"), "fd_limit": st.get("fd_limit"),
                      "steps_per_epoch": (infos.get(r) or {}).get("steps_per_epoch")})
    roles = process_roles(out, watch)
    workers = []
    for pid, role in roles.items():
        if "-worker" in role:
            st = states.get(pid, {})
            workers.append({"role": role, "pid": pid, "status": st.get("status", "gone"),
                            "status_before": st.get("status_before", st.get("status", "gone")),
                            "cpu_delta_s": st.get("cpu_delta_s"), "fds": st.get("fds"), "fd_limit": st.get("fd_limit"),
                            "stack_file": stacks.get(role)})
    counts = next((i.get("steps_per_rank") for i in infos.values() if i and i.get("steps_per_rank")), None)
    # A rank that failed (or a worker that printed an error) may say why the others wait.
    errors = {r: e for r in watch if (e := rank_rows.read_json(RunDir(out).rank_error(r)))}
    return {"status": status, "ranks": ranks, "workers": workers, "counts": counts, "shm": shm_usage(),
            "errors": errors, "log": launcher_log(out), "roles": roles, "fd": fd_facts(out)}


def exit_evidence(out: Path, rc: int, local_ranks: list, shm_peak=None) -> dict:
    """What a run that ended by itself left behind: rank records, errors, torchrun's log,
    final heartbeats, the supervisor's ledger of process deaths (processes.json), /dev/shm at
    its fullest during the run and the space left on the run directory's filesystem. Which
    error is the cause is runners.watch.diagnosis's to say."""
    infos = {r: rank_info(out, r) or {} for r in local_ranks}
    errors = {r: e for r in local_ranks if (e := rank_rows.read_json(RunDir(out).rank_error(r)))}
    log = launcher_log(out)
    codes = torchrun_exit_codes(log)
    ranks = []
    for r in local_ranks:
        e = errors.get(r)
        hb = read_heartbeat(RunDir(out).heartbeat(r)) or {}
        last = e if e else hb
        ranks.append({"rank": r, "exit_code": codes.get(r), "phase": "failed" if e else "?",
                      "blocked_in": "raised an exception" if e else "stopped by the rank starter after another rank failed",
                      "error": f"{e['type']}: {e['message'][:300]}" if e else None,
                      "epoch": last.get("epoch"), "step": last.get("step"),
                      "last_phase": (e.get("phase") if e else hb.get("phase")), "pid": infos[r].get("pid", hb.get("pid"))})
    return {"rc": rc, "ranks": ranks, "errors": errors, "log": log, "roles": process_roles(out),
            "fd": fd_facts(out), "codes": codes, "ledger": rank_rows.read_json(RunDir(out).processes) or [],
            "counts": next((i.get("steps_per_rank") for i in infos.values() if i.get("steps_per_rank")), None),
            "shm_peak": shm_peak, "disk": disk_usage(out)}


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


def signal_context(sig) -> dict:
    """The launcher's ancestors and a SLURM job around it: who may have sent the signal that
    `sig` (a runners.launch.interruption.Interruption) noted."""
    ctx = {"signal": sig.name, "number": sig.signum, "count": sig.count,
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


@dataclass(frozen=True)
class InterruptionEvidence:
    """A run stopped by a signal to the launcher: the signal, when, what may have sent it, and
    how far the run got (every rank's last position, the steps of all ranks and the finished
    epochs of the least advanced rank on disk)."""

    signal: str
    after_s: float
    context: dict  # signal_context
    ranks: list
    steps: int
    epochs: int


def interruption_evidence(out: Path, sig, watch: dict, after_s: float) -> InterruptionEvidence:
    """What an interrupted run shows, `after_s` seconds after launch (`sig`: the
    runners.launch.interruption.Interruption that noted the signal)."""
    ranks = []
    for r, w in sorted(watch.items()):
        # The ranks ran on until the tree was stopped: their last heartbeat, not the last poll's.
        hb = (read_heartbeat(RunDir(out).heartbeat(r)) or w.heartbeat
              or {"epoch": -1, "step": -1, "phase": "starting", "pid": None})
        ranks.append({"rank": r, "pid": hb.get("pid"), "epoch": hb["epoch"], "step": hb["step"],
                      "phase": hb["phase"], "blocked_in": PHASE_BLOCKED_IN.get(hb["phase"], hb["phase"])})
    steps = sum(recorded_rows(out, r, "steps") for r in watch)
    epochs = min((recorded_rows(out, r, "epochs") for r in watch), default=0)
    return InterruptionEvidence(signal=sig.name, after_s=after_s, context=signal_context(sig), ranks=ranks,
                                steps=steps, epochs=epochs)


@dataclass(frozen=True)
class ServerEvidence:
    """A graph server of a partitioned run (runners.partitioned.server) through the stall the watchdog
    detected: its process state and CPU time as its launcher sampled them over the stall window
    (the watchdog's threshold up to the detection), its main thread's stack when it was dumped,
    and which of its host's trainers were waiting for an answer over the framework's RPC."""

    node: int  # the server's node, which is also its partition (one server per host)
    host: str
    pid: int
    window_s: float  # the watchdog's stall threshold
    samples: list  # [(seconds relative to the detection, psutil status, CPU seconds or None)], oldest first
    ranks_in_rpc: list  # [(rank, its innermost frame)]: this host's trainers blocked in an RPC call
    stack_top: list = dataclasses.field(default_factory=list)  # the server's innermost frames, [] if not dumped
    waiting_for_requests: bool | None = None  # its innermost frame is the RPC request wait; None if not dumped

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def rpc_waiters(ranks: list, files) -> list:
    """[(rank, frame)] of the ranks (runners.watch.diagnosis's rank records, with stack_top) whose
    innermost frames are in one of `files` (the RPC client's source)."""
    found = []
    for x in ranks:
        frame = next((f for f in (x.get("stack_top") or []) if any(name in f for name in files)), None)
        if frame is not None and x.get("phase") not in ("done", "failed"):
            found.append((x["rank"], frame))
    return found


WORKER_PIDS = re.compile(r"DataLoader worker \(pids?\(?s?\)?\s*([\d, ]+)\)")


def reported_kills(out: Path, ranks, roles: dict) -> list:
    """The processes the ranks' loaders and torchrun report killed: loader worker pids from the
    ranks' error records, ranks that torchrun saw end by SIGKILL."""
    killed = []
    for r in ranks:
        err = rank_rows.read_json(RunDir(out).rank_error(r)) or {}
        m = WORKER_PIDS.search((err.get("worker_failure") or "") + err.get("message", ""))
        for pid in (int(x) for x in (m.group(1).replace(",", " ").split() if m else [])):
            killed.append({"pid": pid, "role": roles.get(pid, f"rank{r}-worker"), "source": f"rank {r}'s loader"})
    for r, c in torchrun_exit_codes(launcher_log(out)).items():
        if c == -signal.SIGKILL:
            killed.append({"pid": None, "role": f"rank{r}", "source": "rank starter: exit code -9 (SIGKILL)"})
    return killed


@dataclass
class MemoryWatch:
    """A capped run's memory cgroup as the supervisor saw it while the run went on."""

    last: dict | None = None  # the cgroup's state at the last poll (`t`: seconds after launch)
    full: dict | None = None  # its state when its usage first reached FULL_SHARE of the cap
    oom_seen: dict | None = None  # when its OOM-kill count first rose, and every rank's phase then

    def observe(self, stats: dict, t: float, phases) -> None:
        """One poll's cgroup `stats`, `t` seconds after launch; `phases()`: every rank's phase now."""
        self.last = dict(stats, t=t)
        if stats.get("usage_bytes") and stats.get("limit_bytes") and not self.full \
                and stats["usage_bytes"] >= FULL_SHARE * stats["limit_bytes"]:
            self.full = self.last
        count = stats.get("oom_kill") or 0
        if not self.oom_seen and count > 0:
            self.oom_seen = {"t": t, "oom_kill": count, "phases": phases()}


@dataclass(frozen=True)
class OomEvidence:
    """What says the OOM killer acted on a run: who was killed, which ranks were left waiting,
    the cgroup's record, and the lines of evidence."""

    killed: list
    ranks_left_waiting: list
    cgroup: dict | None
    evidence: list
    kernel_log: str
    first_seen_s: float | None
    phases_at_kill: dict

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def oom_evidence(out: Path, watch: dict, pids: set, root_pid: int, cgroup, since_uptime: float | None,
                 memory: MemoryWatch) -> OomEvidence | None:
    """Out-of-memory evidence for a supervised run: the cgroup's OOM-kill count and peak (`cgroup`:
    a runners.memory.cgroup.MemoryCgroup, or None), the kernel log's kills of the run's `pids`
    since `since_uptime`, and which process (rank, loader worker) died. None when nothing says
    the OOM killer acted on this run."""
    from runners.memory.cgroup import kernel_oom_kills
    from runners.memory.units import fmt_bytes

    stats = cgroup.stats() if cgroup is not None else None
    kills, log_reason = kernel_oom_kills(pids=pids, cgroup_path=cgroup.path if cgroup else None,
                                         since_uptime=since_uptime)
    count = (stats or {}).get("oom_kill") or 0
    if not count and not kills:
        return None
    roles = process_roles(out, watch)
    roles[root_pid] = "rank starter"
    evidence = []
    if stats:
        evidence.append(f"memory cgroup {stats['cgroup']}: oom_kill {count}, peak {fmt_bytes(stats['peak_bytes'])} "
                        f"of limit {fmt_bytes(stats['limit_bytes'])}")
    killed = [{"pid": k["pid"], "role": roles.get(k["pid"], f"process {k['name']}"), "source": k["source"]}
              for k in kills]
    if not killed:
        # No kernel log here: take the loader's or torchrun's own report of who died.
        evidence.append(f"kernel log not usable ({log_reason or 'no OOM line for this run'}); "
                        "victims from the ranks' error records and the rank starter's exit codes")
        killed = reported_kills(out, watch, roles)
    for k in killed:
        evidence.append(f"killed by the OOM killer: {k['role']} (pid {k['pid']}; {k['source']})")
    snap = memory.oom_seen
    phases = snap["phases"] if snap else {r: (w.heartbeat or {"phase": "starting"})["phase"]
                                         for r, w in watch.items()}
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
    return OomEvidence(killed=killed, ranks_left_waiting=waiting, cgroup=stats, evidence=evidence,
                       kernel_log=log_reason or "read", first_seen_s=snap["t"] if snap else None,
                       phases_at_kill={str(r): p for r, p in phases.items()})
