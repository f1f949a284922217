"""The stop rules: why the watchdog had to stop a run (a hang or its time limit), from heartbeats,
process states, CPU use, stacks, loader workers and descriptor counts (`decide_stop`, pure), and
the diagnosis of such a run (`diagnose_stop`)."""

from __future__ import annotations

import re
from pathlib import Path

from runners.adapters import registry
from runners.rank.probes import STARTUP_PHASES
from runners.watch.diagnosis.causes import CAUSES, SOLE_RANK, Diagnosis
from runners.watch.diagnosis.ranks import (blame, describe_process, error_text, group_ranks, is_frozen, progress_key,
                                           progress_line, sole, worker_stuck)
from runners.watch.evidence import FULL_SHARE, stop_evidence


# -- open files: a process out of descriptors ----------------------------------------------
# Python's and PyTorch's words for it: EMFILE from a worker sharing a tensor (shm_open, the
# resource sharer's socket), recvmsg's truncated descriptor passing in a rank, the loader's hint.
FD_ERROR = re.compile(r"[^\n]*(?:Too many open files|EMFILE|received 0 items of ancdata)[^\n]*")
SHM_NAME_PID = re.compile(r"torch_(\d+)_\d+")  # PyTorch names a shared tensor's file after its creator


def _rank_of(role) -> int | None:
    m = re.match(r"rank(\d+)", role or "")
    return int(m.group(1)) if m else None


def _fd_log_lines(ev) -> list:
    """(ranks, evidence) of torchrun's log lines that name descriptor exhaustion, one per kind of
    line (a worker can print the same error thousands of times); the ranks are those whose
    processes the lines name (a shared tensor's file carries its creator's pid)."""
    kinds: dict = {}
    for m in FD_ERROR.finditer(ev.get("log") or ""):
        line = m.group(0).strip()
        kind = kinds.setdefault(re.sub(r"\d+", "N", line), {"line": line, "n": 0, "roles": []})
        kind["n"] += 1
        pid = SHM_NAME_PID.search(line)
        role = (ev.get("roles") or {}).get(int(pid.group(1))) if pid else None
        if role and role not in kind["roles"]:
            kind["roles"].append(role)
    found = []
    for k in list(kinds.values())[:3]:
        where = f" ({', '.join(k['roles'])})" if k["roles"] else ""
        found.append(([_rank_of(r) for r in k["roles"]], f"the ranks' log{where}: '{k['line'][:200]}'"
                      + (f" ({k['n']} lines)" if k["n"] > 1 else "")))
    return found


def _fd_at_limit(ev) -> list:
    """([rank], evidence) of processes holding nearly all the descriptors their limit allows."""
    found = []
    for x in list(ev.get("ranks") or []) + list(ev.get("workers") or []):
        fds, limit = x.get("fds"), x.get("fd_limit")
        if fds is not None and limit and limit > 0 and fds >= FULL_SHARE * limit:
            role = x.get("role") or f"rank{x['rank']}"
            found.append(([_rank_of(role)], f"{role} (pid {x.get('pid')}) held {fds} open descriptors at "
                                            f"detection, its limit {limit}"))
    return found


def fd_exhaustion(ev) -> tuple:
    """(ranks implicated in order, evidence) that a process of the run ran out of descriptors:
    error records, torchrun's log and descriptor counts; empty evidence when nothing says so."""
    found = []
    for e in sorted((ev.get("errors") or {}).values(), key=lambda e: e.get("time") or 0):
        m = FD_ERROR.search(error_text(e))
        if m:
            found.append(([e["rank"]], f"rank {e['rank']}: '{m.group(0).strip()[:200]}'"))
    found += _fd_log_lines(ev) + _fd_at_limit(ev)
    if not found:
        return [], []
    ranks = list(dict.fromkeys(r for rs, _ in found for r in rs if r is not None))
    return ranks, [text for _, text in found] + _fd_limit_lines(ev.get("fd"))


def _fd_limit_lines(fd) -> list:
    if not fd or not fd.get("soft_limit"):
        return []
    need = f"; a rank needs about {fd['needed_per_process']} with its loader workers (pre-flight estimate)" \
        if fd.get("needed_per_process") else ""
    return [f"open-files limit of the run's processes (`ulimit -n`): {fd['soft_limit']} (hard limit "
            f"{fd.get('hard_limit')}){need}"]


def fd_remedy(fd) -> str:
    """The fd_limit remedy with the limit found and the estimate needed, where known."""
    from runners.launch.descriptors import suggested_limit

    generic = CAUSES["fd_limit"].remedy
    if not fd or not fd.get("needed_per_process"):
        return generic
    need, soft, hard = fd["needed_per_process"], fd["soft_limit"], fd.get("hard_limit")
    ceiling = f"; without root the hard limit {hard} is the ceiling" if hard is not None and 0 < hard < 2 * need else ""
    return (f"raise the open-files limit in the shell that starts the run: `ulimit -n` is {soft} here and a rank "
            f"needs about {need} descriptors with its loader workers, so run `ulimit -n "
            f"{suggested_limit(need, hard)}` first{ceiling}; or have the workers pass batches through files in "
            "/dev/shm instead: torch.multiprocessing.set_sharing_strategy('file_system') in the rank and worker "
            "processes; or use fewer loader workers (--workers)")


def cause_label(key: str, ev: dict) -> str:
    """The cause as a summary line names it (with the limit and the need for fd_limit)."""
    if key == "stalled_rank" and len(ev.get("ranks") or []) == 1:
        return SOLE_RANK.label
    label = CAUSES[key].label
    fd = ev.get("fd") or {}
    if key == "fd_limit" and fd.get("soft_limit"):
        need = f", a rank needs about {fd['needed_per_process']}" if fd.get("needed_per_process") else ""
        label += f" (`ulimit -n` {fd['soft_limit']}{need})"
    return label


def remedy_for(key: str, ev: dict) -> str:
    """The cause's remedy (for fd_limit with the limit found and the need)."""
    return fd_remedy(ev.get("fd")) if key == "fd_limit" else CAUSES[key].remedy


def _rule_fd_limit(ev):
    ranks, evidence = fd_exhaustion(ev)
    if evidence:
        # A rank waiting for its own loader may have lost a batch too, though no line names it:
        # a culprit only when the evidence and the waiting point at one rank.
        loading = [x["rank"] for x in ev["ranks"] if x.get("phase") == "loading"]
        return "fd_limit", sole(ranks + loading), evidence


def _rule_timeout(ev):
    if ev["status"] == "timeout":
        return "timeout", None, []


def _rule_startup(ev):
    # A frozen rank is named as such (the next rules), whatever phase it froze in.
    if all(x["phase"] in STARTUP_PHASES for x in ev["ranks"]) and not any(is_frozen(x) for x in ev["ranks"]):
        culprit, why = blame(ev["ranks"])
        return "startup_hang", culprit, why


def rule_uneven(ev):
    """uneven_batches when the ranks ran different numbers of steps per epoch (the stop and exit rules)."""
    counts = ev.get("counts")
    if counts and len(set(counts)) > 1:
        return "uneven_batches", min(range(len(counts)), key=lambda r: counts[r]), [
            f"steps per epoch by rank: {counts}"]


def _rule_shm(ev):
    shm = ev.get("shm")
    if shm and shm[1] and shm[0] / shm[1] > FULL_SHARE:
        return "shm_exhausted", None, [f"/dev/shm {shm[0] / 2**20:.0f} MiB used of {shm[1] / 2**20:.0f} MiB"]


def _rule_frozen_rank(ev):
    # Process evidence outranks the phase: a rank stopped while it waits for its loader is
    # the culprit, not its (healthy) worker.
    frozen = [x for x in ev["ranks"] if x.get("phase") not in ("done", "failed") and is_frozen(x)]
    if frozen:
        x = min(frozen, key=progress_key)
        return "stalled_rank", x["rank"], [f"rank {x['rank']} is frozen: {describe_process(x)}"]


# Frames that say only that a thread waits, not where its work stopped.
WAIT_FILES = ("threading.py", "queue.py")


def _pipeline_thread(x: dict):
    """The rank's pipeline thread (GraphBolt's prefetch thread), or None."""
    return next((t for t in x.get("threads") or []
                 if any(f in frame for frame in t["frames"] for f in registry.PIPELINE_THREAD_FILES)), None)


def _rule_stalled_pipeline(ev):
    if any(worker_stuck(w) for w in ev["workers"]):
        return None  # a stopped worker process starves the pipeline thread: the worker is the cause
    culprit, why = blame(ev["ranks"])
    if culprit is None:
        return None
    x = next(x for x in ev["ranks"] if x["rank"] == culprit)
    thread = _pipeline_thread(x) if x["phase"] == "loading" else None
    if thread is None:
        return None
    where = next((f for f in thread["frames"] if not any(w in f for w in WAIT_FILES)), thread["frames"][0])
    return "stalled_pipeline", culprit, why + [
        f"rank {culprit} waits for its loader, whose pipeline thread '{thread['name']}' (GraphBolt's "
        f"prefetch thread) is in {where}"]


def has_workers(ev, rank: int) -> bool:
    """Whether `rank` has loader worker processes (alive or not) among the run's processes."""
    return any(w["role"].startswith(f"rank{rank}-") for w in ev.get("workers") or [])


def _rule_stalled_worker(ev):
    stuck = [w for w in ev["workers"] if worker_stuck(w)]
    if stuck:
        return "stalled_worker", int(stuck[0]["role"].split("-")[0][len("rank"):]), [
            f"loader worker {w['role']} (pid {w['pid']}) is {w['status']}" for w in stuck]
    culprit, why = blame(ev["ranks"])
    # A worker is blamed only where one exists: with --workers 0 the rank samples in its own process.
    if culprit is not None and _phase(ev, culprit) == "loading" and has_workers(ev, culprit):
        return "stalled_worker", culprit, why + [f"rank {culprit} waits for its loader"]


def _phase(ev, rank: int) -> str:
    return next(x for x in ev["ranks"] if x["rank"] == rank)["phase"]


def _rule_stalled_rank(ev):
    culprit, why = blame(ev["ranks"])
    if culprit is not None:
        own = ([f"rank {culprit} has no loader workers: it was in its own loader (sampling and gathering in the "
                "rank's process, or waiting on what that loader calls)"]
               if _phase(ev, culprit) == "loading" else [])
        return "stalled_rank", culprit, why + own


def _rule_mismatch(ev):
    return "collective_mismatch", None, ["no rank is frozen, behind the others or still computing"]


# Evidence-based priority list: the first rule whose evidence holds names the cause.
# Descriptor exhaustion leaves direct evidence (its error text, a process at its limit), and the
# patterns the later rules read (start-up, a rank behind, all in a collective) are its consequences.
STOP_RULES = [_rule_timeout, _rule_fd_limit, _rule_startup, rule_uneven, _rule_frozen_rank, _rule_shm,
              _rule_stalled_pipeline, _rule_stalled_worker, _rule_stalled_rank, _rule_mismatch]


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


# How a summary names the start-up phases (the heartbeat's 'starting' is the imports).
STARTUP_NAMES = {"starting": "start-up: imports", "rendezvous": "start-up: rendezvous",
                 "data-load": "start-up: data load", "model-build": "start-up: model build"}


def stop_summary(status: str, ranks: list, culprit, cause: str) -> str:
    """The one line of a hang or a timeout: who waited where, and the cause."""
    if status == "timeout":
        return "time limit reached; rank progress: " + progress_line(ranks)
    return f"{hang_head(ranks, culprit)}; cause: {cause}"


def hang_head(ranks: list, culprit) -> str:
    """A hang's line up to its cause: who made no progress, who waited where (`ranks`: the
    diagnosis's, with rank and phase)."""
    named = {x["rank"]: STARTUP_NAMES.get(x["phase"], x["phase"]) for x in ranks}
    waiting = group_ranks([(x["rank"], named[x["rank"]]) for x in ranks if x["rank"] != culprit], "waited in '{}'")
    if culprit is None:
        return f"hang: {waiting}"
    where = named.get(culprit, "?")
    return f"hang: rank {culprit} made no progress in phase '{where}'" + (f" while {waiting}" if waiting else "")


def diagnose_stop(out: Path, status: str, stalled, watch: dict, states: dict, stacks: dict,
                  threshold: float, now: float, launch_t: float) -> Diagnosis:
    """Explain a hang or a timeout from heartbeats, process states, CPU use and stacks."""
    ev = stop_evidence(out, status, watch, states, stacks, now)
    key, culprit, evidence = decide_stop(ev)
    ranks = ev["ranks"]
    sole_rank = key == "stalled_rank" and len(ranks) == 1  # nobody waits for it: a 1-process run
    evidence = list(evidence)
    for x in ranks:
        evidence.append(f"rank {x['rank']}: epoch {x['epoch']} step {x['step']} phase '{x['phase']}' "
                        f"({x['blocked_in']}), no progress for {x['idle_s']} s; {describe_process(x)}")
    if stalled:
        evidence.append(f"rank {stalled[0]} passed the threshold first (idle {stalled[1]:.1f} s)")
    evidence.append(f"threshold {threshold:.1f} s; detected {now - launch_t:.1f} s after launch")
    summary = stop_summary(status, ranks, culprit, cause_label(key, ev))
    return Diagnosis.of(key, summary, evidence, ranks, culprit, text=SOLE_RANK.text if sole_rank else None,
                        remedy=remedy_for(key, ev), workers=ev["workers"], stack_files=stacks,
                        threshold_s=round(threshold, 2))
