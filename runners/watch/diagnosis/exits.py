"""The exit rules: why a run whose rank starter exited by itself failed, from the ranks' error
records, torchrun's exit codes and log, the ledger of process deaths, /dev/shm and disk facts
(`decide_exit`, pure), and the diagnoses of runs that ended by themselves, diverged, were skipped
or were stopped by a signal to the launcher."""

from __future__ import annotations

import re
import signal
from pathlib import Path

from runners.watch.diagnosis.causes import CAUSES, SKIP_CAUSES, Diagnosis
from runners.watch.diagnosis.ranks import blame, error_text, progress_line, sole
from runners.watch.diagnosis.stop import cause_label, fd_exhaustion, remedy_for, rule_uneven
from runners.watch.evidence import FULL_SHARE, POLL_S, InterruptionEvidence, exit_evidence, rank_info


# -- runs that ended by themselves ----------------------------------------------------------
PEER_LOST = re.compile(r"Connection closed by peer|Connection reset|Broken pipe|NCCL communicator was aborted")
COLLECTIVE_TIMEOUT = re.compile(
    r"Watchdog caught collective operation timeout|NCCL timeout|[Tt]imed out waiting \d+ ?ms for (?:recv|send)"
    r"|ProcessGroupNCCL.{0,200}[Tt]imeout")
WORKER_FAILED = re.compile(r"DataLoader worker .*(killed|exited unexpectedly)")


def cause_errors(errors: dict) -> tuple:
    """(primary errors, the first of them) among the ranks' error records: ranks that only lost
    their peer are victims, so the first error of another kind is the cause (the first of all
    when every error is a lost peer; None without errors)."""
    primary = [e for e in errors.values() if not PEER_LOST.search(e["message"]) or e.get("worker_failure")]
    first = min(primary or errors.values(), key=lambda e: e.get("time", 0)) if errors else None
    return primary, first


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
    return rule_uneven(ev)


def _exit_fd_limit(ev):
    ranks, evidence = fd_exhaustion(ev)
    if evidence:  # a culprit only when no other rank failed by itself
        return "fd_limit", sole(ranks + [e["rank"] for e in ev.get("primary") or []]), evidence


def _exit_collective_timeout(ev):
    texts = [error_text(e) for e in ev["errors"].values()] + [ev["log"]]
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
    full = bool(peak and peak[1] and peak[0] >= FULL_SHARE * peak[1])
    for r, e in sorted(ev["errors"].items()):
        text = error_text(e)
        m = SHM_ERROR.search(text) or (NO_SPACE.search(text) if full else None)
        if m:
            culprit = r if culprit is None else culprit
            evidence.append(f"rank {r}: '{m.group(0)[:200]}'")
    m = SHM_ERROR.search(ev["log"])
    if m and not evidence:
        evidence.append(f"the ranks' log: '{m.group(0)[:200]}'")
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
    if first and WORKER_FAILED.search(error_text(first)):
        return "dead_worker", first["rank"], [f"rank {first['rank']}: {first.get('worker_failure') or first['message'][:300]}"]


DISK_LOW_BYTES = 2**20  # below this much free space a filesystem counts as full


def _exit_error_text(ev):
    first = ev["first"]
    if not first:
        return None
    text = error_text(first)
    if NO_SPACE.search(text):
        disk = ev.get("disk")
        if disk and disk[2] < DISK_LOW_BYTES:
            return "disk_full", first["rank"], [f"the run directory's filesystem has {disk[2] / 2**10:.0f} KiB "
                                                f"free of {disk[1] / 2**20:.1f} MiB"]
        return "shm_exhausted", first["rank"], []
    if re.search(r"/dev/shm|Bus error", text):
        return "shm_exhausted", first["rank"], []


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
    return "crash", None, [f"the rank starter exited with code {ev['rc']} and no rank left an error record"]


# Evidence-based priority list: the first rule whose evidence holds names the cause.
EXIT_RULES = [_exit_uneven, _exit_fd_limit, _exit_collective_timeout, _exit_shm, _exit_dead_worker,
              _exit_error_text, _exit_crash, _exit_signal, _exit_dead_rank, _exit_unexplained]


def decide_exit(ev: dict):
    """(cause key, culprit rank or None, evidence) of a run that ended by itself. Pure."""
    for rule in EXIT_RULES:
        verdict = rule(ev)
        if verdict:
            return verdict
    raise AssertionError("the last rule always applies")


def classify_exit(out: Path, rc: int, local_ranks: list, shm_peak=None):
    """Status and diagnosis of a run whose torchrun exited by itself (the status is the cause's)."""
    infos = {r: rank_info(out, r) or {} for r in local_ranks}
    if rc == 0 and all(i.get("finished") for i in infos.values()):
        return diagnose_divergence(infos) or ("ok", None)
    return diagnose_exit(exit_evidence(out, rc, local_ranks, shm_peak))


def diagnose_exit(ev: dict) -> tuple:
    """(status, diagnosis) of a failed run from its exit evidence (runners.watch.evidence.exit_evidence;
    its `errors` may be cut to those recorded before a hang was declared). Pure."""
    ev = dict(ev)
    ev["primary"], ev["first"] = cause_errors(ev["errors"])
    key, culprit, evidence = decide_exit(ev)
    status = CAUSES[key].status
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
        evidence.append(f"rank starter: rank {r} exit code {c}")
    who = f"rank {culprit}: " if culprit is not None else ""
    summary = f"{status}: {who}{cause_label(key, ev)} ({evidence[0][:200]})"
    return status, Diagnosis.of(key, summary, evidence, ev["ranks"], culprit, remedy=remedy_for(key, ev),
                                error_excerpt=excerpt, detected_after_s=None)


def diagnose_divergence(infos: dict):
    """("diverged", diagnosis) when a rank's loss stopped being a finite number (rank.json's
    `diverged`: the first such step), else None."""
    seen = sorted((i["diverged"]["epoch"], i["diverged"]["step"], r, i["diverged"]["loss"])
                  for r, i in infos.items() if i.get("diverged"))
    if not seen:
        return None
    epoch, step, rank, loss = seen[0]
    evidence = [f"rank {r}: loss {v} at epoch {e} step {s} (the first non-finite loss of that rank)"
                for e, s, r, v in seen]
    summary = (f"diverged: loss {loss} at epoch {epoch} step {step} (rank {rank}); every "
               "rank stopped at the end of that epoch")
    return "diverged", Diagnosis.of("diverged", summary, evidence, [], rank, detected_after_s=None,
                                    first_nonfinite={"epoch": epoch, "step": step, "rank": rank, "loss": loss})


# -- points that never ran ------------------------------------------------------------------
def skipped(reason: str, cause: str) -> Diagnosis:
    """The diagnosis of a skipped point: its cause (SKIP_CAUSES) and the reason it was given."""
    return Diagnosis.of(SKIP_CAUSES[cause].key, f"skipped: {reason}", [reason], [])


# -- runs stopped by a signal to the launcher -----------------------------------------------
def diagnose_interruption(ev: InterruptionEvidence) -> Diagnosis:
    """Say which signal stopped the run, what may have sent it and what was measured before it."""
    ctx, after_s, ranks, steps, epochs = ev.context, ev.after_s, ev.ranks, ev.steps, ev.epochs
    evidence = [f"{ev.signal} to the launcher {after_s:.1f} s after launch; sender: {ctx['sender']}"]
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
    summary = (f"interrupted: {ev.signal} to the launcher {after_s:.1f} s after launch stopped the run; "
               f"{epochs} epoch(s) and {steps} step(s) were measured before it; rank progress: "
               + progress_line(ranks))
    if slurm.get("why"):
        summary += f"; SLURM job {slurm['SLURM_JOB_ID']}: {slurm['why']}"
    return Diagnosis.of("interrupted", summary, evidence, ranks, signal=ctx, detected_after_s=round(after_s, 2))
