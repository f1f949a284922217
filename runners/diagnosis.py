"""The rulebook that turns a run's evidence into its status, cause and summary line.

Given what runners.evidence gathered (heartbeats, process states, stacks, error records,
torchrun's exit codes, the ledger of process deaths, /dev/shm, disk and memory facts), it
decides why a run hung, timed out, crashed, was killed, ran out of memory or was
interrupted: which known cause applies (CAUSES, with its remedy), which rank is to blame,
the evidence for it and the one-line summary. The decisions (`decide_stop`, `decide_exit`,
`blame`, `apply_oom`, `diagnose_interruption`) are pure functions of the evidence (dicts, and
runners.evidence's OomEvidence, MemoryWatch and InterruptionEvidence), tested with constructed
evidence.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field
from pathlib import Path

from runners.adapters import registry
from runners.evidence import (AT_LIMIT, POLL_S, InterruptionEvidence, MemoryWatch, OomEvidence, ServerEvidence,
                              exit_evidence, rank_info, stop_evidence)
from runners.probes import STARTUP_PHASES


@dataclass
class Outcome:
    """How a supervised run ended: its status, diagnosis and what the supervisor had to do."""

    status: str
    diagnosis: dict | None
    detected_after_s: float | None = None
    returncode: int | None = None
    killed_by_watchdog: bool = False
    orphans_killed: list = field(default_factory=list)
    survivors: list = field(default_factory=list)
    note: str | None = None


# Known causes: key -> (cause, remedy). The diagnosis names one and lists its evidence.
CAUSES = {
    "uneven_batches": (
        "unequal numbers of batches per rank: a rank that ran out of batches left the others "
        "waiting in their next collective (DDP's gradient all-reduce, or its bucket set-up in forward)",
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
    "stalled_pipeline": (
        "a stage of the rank's loader pipeline stopped making progress (GraphBolt runs sampling and "
        "feature fetching up to copy_to in a prefetch thread of the rank), so the rank waits for "
        "its next mini-batch while the other ranks wait for it in the all-reduce",
        "look at the prefetch thread's stack (stacks/rankN-*.txt): the stage it is in never returned "
        "(a custom transform, a feature store or sampler call that blocks); with --workers N the "
        "sampling stages run in worker processes instead, whose stacks are dumped too",
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
    "stalled_server": (
        "a graph server of the partitioned strategy stopped making progress (stopped by a signal or a "
        "debugger, or stuck), so the trainers that sample and fetch features from it waited for its "
        "answers over RPC until the watchdog's stall limit",
        "look at the server's process state and stack (logs/server<K>.log, stacks/graph-server*): a "
        "SIGSTOP or a debugger attached to it, a host that swaps, a request it never finished; then rerun",
    ),
    "dead_rank": (
        "a rank failed and the remaining ranks were left waiting in a collective",
        "fix the failing rank's error (see its excerpt); the rank starter then stops the others",
    ),
    "lost_node": (
        "another node of a multi-node run was lost (its processes died, or the host or network "
        "went away): this node's ranks saw their connections to it reset",
        "look at the lost node: its own result (node{K}/result.json), its kernel log (OOM killer), "
        "the scheduler's record of it; then rerun the job",
    ),
    "lost_contact": (
        "another node of a multi-node run stopped answering over the network (a link down, a cable "
        "or switch port, a host that froze) while every process stayed alive: this node's ranks "
        "waited for it",
        "check the named host's network link and the switch between the hosts (`ip link`, the "
        "interface's carrier), and that the host itself still runs; then rerun the job",
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
        "too many open files: loader workers pass every tensor of a batch to their rank as a file "
        "descriptor (torch.multiprocessing's 'file_descriptor' sharing strategy), and a rank or worker "
        "reached its open-files limit (`ulimit -n`), so a batch was lost (its rank waits for it) or "
        "its transfer failed",
        "raise the open-files limit in the shell that starts the run (`ulimit -n`; the pre-flight "
        "estimates what a rank needs), or have the workers pass batches through files in /dev/shm "
        "instead: torch.multiprocessing.set_sharing_strategy('file_system') in the rank and worker "
        "processes; or use fewer loader workers (--workers)",
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
    "diverged": (
        "the training loss became NaN or infinite: from that step on the model learns nothing and "
        "the run's times describe arithmetic on NaN, not training",
        "check the dataset's features for NaN or infinite values (python -m runners.datasets verify), "
        "then lower the learning rate (--lr) or normalise the features",
    ),
    "timeout": (
        "the run exceeded its overall time limit while still making progress",
        "raise --time-limit or reduce epochs/dataset size",
    ),
    "run_dir_vanished": (
        "the run directory was moved or deleted from outside the run while it was going (a `mv` or "
        "`rm -r` of the results, a cleaner of /tmp such as systemd-tmpfiles, a sync tool): the watchdog "
        "lost its view of the ranks, and what they wrote there is not in this result",
        "find what moved or deleted it and keep it off the results directory while runs are going, "
        "then rerun the point (its command.sh)",
    ),
}



# -- summaries: many ranks in one line -------------------------------------------------------
def rank_ranges(ranks) -> str:
    """Rank numbers, runs of three or more as ranges: '0-5, 7, 9, 10'."""
    ranks, parts, i = sorted(ranks), [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts += [f"{ranks[i]}-{ranks[j]}"] if j - i >= 2 else [str(r) for r in ranks[i:j + 1]]
        i = j + 1
    return ", ".join(parts)


def group_ranks(pairs, verb: str) -> str:
    """Ranks grouped by what they did, in first-seen order: "rank 0 waited in 'loading', ranks 1
    and 2 waited in 'forward', 60 ranks waited in 'backward' (ranks 3-62)".

    `pairs`: (rank, label); `verb`: the predicate with {} for the label. Up to 3 ranks of a
    group are named; beyond that a count and ranges, so a summary stays one line at 64 ranks."""
    groups: dict = {}
    for r, label in pairs:
        groups.setdefault(label, []).append(r)
    parts = []
    for label, ranks in groups.items():
        said = verb.format(label)
        if len(ranks) == 1:
            parts.append(f"rank {ranks[0]} {said}")
        elif len(ranks) <= 3:
            parts.append(f"ranks {', '.join(map(str, ranks[:-1]))} and {ranks[-1]} {said}")
        else:
            parts.append(f"{len(ranks)} ranks {said} (ranks {rank_ranges(ranks)})")
    return ", ".join(parts)


def progress_line(ranks: list) -> str:
    """Where every rank got, grouped: "2 ranks at epoch 1 step 3 'forward' (...)"."""
    return group_ranks([(x["rank"], f"epoch {x['epoch']} step {x['step']} '{x['phase']}'") for x in ranks], "at {}")


# -- hangs and timeouts: which rank the others wait for ---------------------------------------
CPU_IDLE_S = 0.05  # CPU seconds per second below which a process is not running at all
CPU_BUSY_S = 0.25  # ... and above which it is clearly computing
# Progress order of the phases within one step; the end-of-epoch phases come after every step.
PHASE_ORDER = {"starting": -5, "rendezvous": -4, "data-load": -3, "model-build": -2, "loading": 0, "copy": 1, "forward": 2, "backward": 3, "optimizer": 4,
               "epoch-sync": 5, "evaluation": 6}
FROZEN_STATES = ("stopped", "tracing-stop")  # psutil names of 'T' and 't'


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
    if x.get("fds") is not None:
        parts.append(f"{x['fds']} open files (limit {x.get('fd_limit')})")
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
        ahead = progress_line([y for y in live if y is not x])
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


# -- open files: a process out of descriptors ----------------------------------------------
# Python's and PyTorch's words for it: EMFILE from a worker sharing a tensor (shm_open, the
# resource sharer's socket), recvmsg's truncated descriptor passing in a rank, the loader's hint.
FD_ERROR = re.compile(r"[^\n]*(?:Too many open files|EMFILE|received 0 items of ancdata)[^\n]*")
SHM_NAME_PID = re.compile(r"torch_(\d+)_\d+")  # PyTorch names a shared tensor's file after its creator
FD_FULL = 0.95  # a process holding this share of its limit has no room for the next batch


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
        if fds is not None and limit and limit > 0 and fds >= FD_FULL * limit:
            role = x.get("role") or f"rank{x['rank']}"
            found.append(([_rank_of(role)], f"{role} (pid {x.get('pid')}) held {fds} open descriptors at "
                                            f"detection, its limit {limit}"))
    return found


def fd_exhaustion(ev) -> tuple:
    """(ranks implicated in order, evidence) that a process of the run ran out of descriptors:
    error records, torchrun's log and descriptor counts; empty evidence when nothing says so."""
    found = []
    for e in sorted((ev.get("errors") or {}).values(), key=lambda e: e.get("time") or 0):
        m = FD_ERROR.search(_error_text(e))
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
    from runners.descriptors import suggested_limit

    generic = CAUSES["fd_limit"][1]
    if not fd or not fd.get("needed_per_process"):
        return generic
    need, soft, hard = fd["needed_per_process"], fd["soft_limit"], fd.get("hard_limit")
    ceiling = f"; without root the hard limit {hard} is the ceiling" if hard is not None and 0 < hard < 2 * need else ""
    return (f"raise the open-files limit in the shell that starts the run: `ulimit -n` is {soft} here and a rank "
            f"needs about {need} descriptors with its loader workers, so run `ulimit -n "
            f"{suggested_limit(need, hard)}` first{ceiling}; or have the workers pass batches through files in "
            "/dev/shm instead: torch.multiprocessing.set_sharing_strategy('file_system') in the rank and worker "
            "processes; or use fewer loader workers (--workers)")


# stalled_rank in a run of one process, where no other rank waits for it in a collective.
SOLE_RANK_STALL = "the run's only rank stopped making progress (frozen, or stuck in a call or a loop)"


def cause_label(key: str, ev: dict) -> str:
    """The cause as a summary line names it (with the limit and the need for fd_limit)."""
    if key == "stalled_rank" and len(ev.get("ranks") or []) == 1:
        return SOLE_RANK_STALL
    label = CAUSES[key][0].split(":")[0]
    fd = ev.get("fd") or {}
    if key == "fd_limit" and fd.get("soft_limit"):
        need = f", a rank needs about {fd['needed_per_process']}" if fd.get("needed_per_process") else ""
        label += f" (`ulimit -n` {fd['soft_limit']}{need})"
    return label


def remedy_for(key: str, ev: dict) -> str:
    return fd_remedy(ev.get("fd")) if key == "fd_limit" else CAUSES[key][1]


def _sole(ranks) -> int | None:
    ranks = set(ranks)
    return ranks.pop() if len(ranks) == 1 else None


def _rule_fd_limit(ev):
    ranks, evidence = fd_exhaustion(ev)
    if evidence:
        # A rank waiting for its own loader may have lost a batch too, though no line names it:
        # a culprit only when the evidence and the waiting point at one rank.
        loading = [x["rank"] for x in ev["ranks"] if x.get("phase") == "loading"]
        return "fd_limit", _sole(ranks + loading), evidence


def _rule_timeout(ev):
    if ev["status"] == "timeout":
        return "timeout", None, []


def _rule_startup(ev):
    # A frozen rank is named as such (the next rules), whatever phase it froze in.
    if all(x["phase"] in STARTUP_PHASES for x in ev["ranks"]) and not any(is_frozen(x) for x in ev["ranks"]):
        culprit, why = blame(ev["ranks"])
        return "startup_hang", culprit, why


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


# Frames that say only that a thread waits, not where its work stopped.
WAIT_FILES = ("threading.py", "queue.py")


def _pipeline_thread(x: dict):
    """The rank's pipeline thread (GraphBolt's prefetch thread), or None."""
    return next((t for t in x.get("threads") or []
                 if any(f in frame for frame in t["frames"] for f in registry.PIPELINE_THREAD_FILES)), None)


def _rule_stalled_pipeline(ev):
    if any(_worker_stuck(w) for w in ev["workers"]):
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
# Descriptor exhaustion leaves direct evidence (its error text, a process at its limit), and the
# patterns the later rules read (start-up, a rank behind, all in a collective) are its consequences.
STOP_RULES = [_rule_timeout, _rule_fd_limit, _rule_startup, _rule_uneven, _rule_frozen_rank, _rule_shm,
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
    named = {x["rank"]: STARTUP_NAMES.get(x["phase"], x["phase"]) for x in ranks}
    waiting = group_ranks([(x["rank"], named[x["rank"]]) for x in ranks if x["rank"] != culprit], "waited in '{}'")
    if culprit is None:
        return f"hang: {waiting}; cause: {cause}"
    where = named.get(culprit, "?")
    return f"hang: rank {culprit} made no progress in phase '{where}'" + (
        f" while {waiting}" if waiting else "") + f"; cause: {cause}"


def diagnose_stop(out: Path, status: str, stalled, watch: dict, states: dict, stacks: dict,
                  threshold: float, now: float, launch_t: float) -> dict:
    """Explain a hang or a timeout from heartbeats, process states, CPU use and stacks."""
    ev = stop_evidence(out, status, watch, states, stacks, now)
    key, culprit, evidence = decide_stop(ev)
    cause, remedy = CAUSES[key][0], remedy_for(key, ev)
    ranks = ev["ranks"]
    if key == "stalled_rank" and len(ranks) == 1:  # nobody waits for it: a 1-process run
        cause = SOLE_RANK_STALL
    evidence = list(evidence)
    for x in ranks:
        evidence.append(f"rank {x['rank']}: epoch {x['epoch']} step {x['step']} phase '{x['phase']}' "
                        f"({x['blocked_in']}), no progress for {x['idle_s']} s; {_describe(x)}")
    if stalled:
        evidence.append(f"rank {stalled[0]} passed the threshold first (idle {stalled[1]:.1f} s)")
    evidence.append(f"threshold {threshold:.1f} s; detected {now - launch_t:.1f} s after launch")
    summary = stop_summary(status, ranks, culprit, cause_label(key, ev))
    return {"summary": summary, "cause": key, "cause_text": cause, "remedy": remedy, "evidence": evidence,
            "ranks": ranks, "workers": ev["workers"], "culprit_rank": culprit, "stack_files": stacks,
            "threshold_s": round(threshold, 2)}


# -- the partitioned strategy: a graph server that stopped making progress ------------------
def server_stall(ev: ServerEvidence):
    """(how, evidence line) when the graph server stopped making progress by the detection, else
    None. Stopped ('T', 't') or in uninterruptible sleep without CPU at its last two samples, as
    `is_frozen` judges a rank; or, while its host's trainers waited for it over RPC, no CPU
    progress over the stall window with its main thread outside its request wait (an idle server
    waits there too, without CPU: the stack tells a stuck server from an idle one)."""
    if len(ev.samples) < 2:
        return None
    (t0, s0, c0), (t1, s1, c1) = ev.samples[-2:]
    # the last two samples in the shape of a rank's record, judged as is_frozen judges a rank
    tail = {"state": s1, "state_before": s0, "cpu_interval_s": t1 - t0,
            "cpu_delta_s": c1 - c0 if None not in (c0, c1) else None}
    frozen = is_frozen(tail)
    cpu = [c for _, _, c in ev.samples]
    used = cpu[-1] - cpu[0] if None not in (cpu[0], cpu[-1]) else None
    span = ev.samples[-1][0] - ev.samples[0][0]
    who = f"graph server {ev.node} (pid {ev.pid})"
    since = ev.samples[-1][0]
    for t, s, _ in reversed(ev.samples):
        if s not in FROZEN_STATES:
            break
        since = t
    # stopped only after the watchdog's detection: not what the trainers waited for
    if frozen and s1 in FROZEN_STATES and since <= 0:
        return "stopped", (f"{who} was in process state '{s1}' (stopped: SIGSTOP or a debugger) from "
                           f"{-since:.1f} s before the detection on, in a stall window of {ev.window_s:.1f} s"
                           + (f"; CPU time +{used:.2f} s over {span:.1f} s" if used is not None else ""))
    if frozen and s1 == "disk-sleep":
        return "uninterruptible sleep", (f"{who} was in uninterruptible sleep ('disk-sleep') without CPU use "
                                         f"(+{tail['cpu_delta_s']:.2f} s in {t1 - t0:.1f} s): stuck in the kernel")
    if (ev.ranks_in_rpc and ev.waiting_for_requests is False and used is not None and span > 0
            and span >= ev.window_s / 2 and used / span < CPU_IDLE_S):
        return "stuck", (f"{who} used no CPU (+{used:.2f} s in {span:.1f} s of the {ev.window_s:.1f} s stall "
                         f"window) while its host's trainers waited for it over RPC, and its main thread was "
                         f"not waiting for requests: {ev.stack_top[0] if ev.stack_top else '?'}")
    return None


def _waiters(ev: ServerEvidence) -> str:
    return ", ".join(f"rank {r} in {frame}" for r, frame in ev.ranks_in_rpc)


def diagnose_stalled_server(status: str, diag: dict | None, ev: ServerEvidence | None) -> dict | None:
    """The diagnosis of a hang whose cause is this host's graph server (cause `stalled_server`,
    naming the server, its partition, pid, host and how it stopped), or None when the server
    kept going (`server_stall`). `diag`: the watchdog's diagnosis, kept as the evidence after.
    A `crashed` run counts only when its server was stopped: another node's watchdog ended the
    run first, and this node's trainers crashed on the peers they lost while waiting for it."""
    if status not in ("hang", "crashed") or ev is None:
        return None
    found = server_stall(ev)
    if found is None or (status == "crashed" and found[0] != "stopped"):
        return None
    how, line = found
    cause, remedy = CAUSES["stalled_server"]
    waited = _waiters(ev)
    summary = (f"hang: graph server {ev.node} (partition {ev.node}, pid {ev.pid}) on host {ev.host} stopped making "
               f"progress ({how}); " + (f"its trainers waited for it over RPC ({waited})" if waited else
                                       "the run's trainers, which sample and fetch features from it, waited")
               + "; cause: " + cause.split(" (")[0])
    d = dict(diag or {})
    evidence = [line] + ([f"waiting over RPC: {waited}"] if waited else [])
    d.update(summary=summary, cause="stalled_server", cause_text=cause, remedy=remedy, culprit_rank=None,
             previous_cause=d.get("cause"), previous_summary=d.get("summary"), previous_status=status,
             stalled_server={"node": ev.node, "partition": ev.node, "host": ev.host, "pid": ev.pid, "how": how,
                             "state": ev.samples[-1][1], "window_s": ev.window_s, "evidence": ev.to_json()},
             evidence=evidence + list(d.get("evidence") or []))
    d.setdefault("ranks", [])
    return d


def remote_server_stall(status: str, diag: dict | None, ev: ServerEvidence | None, others: list) -> dict | None:
    """Node 0, when no other node's result named a graph server: its trainers waited over RPC
    while its own server kept going, so the stalled server is another host's (`others`: the other
    nodes, [{node, host}], host None when unknown). None unless the evidence says so."""
    if status != "hang" or ev is None or not ev.ranks_in_rpc or server_stall(ev) is not None:
        return None
    cause, remedy = CAUSES["stalled_server"]
    state = ev.samples[-1][1] if ev.samples else "?"
    where = ", ".join(f"node {o['node']}" + (f" (host {o['host']})" if o.get("host") else "") for o in others)
    summary = (f"hang: this host's trainers waited for a graph server over RPC ({_waiters(ev)}) while graph server "
               f"{ev.node} on host {ev.host} (pid {ev.pid}) kept running (state '{state}'): the stall points to "
               f"another node's graph server: {where or 'another node'}, whose result did not name it; cause: "
               + cause.split(" (")[0])
    d = dict(diag or {})
    d.update(summary=summary, cause="stalled_server", cause_text=cause, remedy=remedy, culprit_rank=None,
             previous_cause=d.get("cause"), previous_summary=d.get("summary"), previous_status=status,
             stalled_server={"node": None, "suspect_nodes": [o["node"] for o in others], "evidence": ev.to_json()},
             evidence=[f"waiting over RPC: {_waiters(ev)}; this host's graph server {ev.node} was not stalled "
                       f"(state '{state}')"] + list(d.get("evidence") or []))
    d.setdefault("ranks", [])
    return d


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


def _exit_fd_limit(ev):
    ranks, evidence = fd_exhaustion(ev)
    if evidence:  # a culprit only when no other rank failed by itself
        return "fd_limit", _sole(ranks + [e["rank"] for e in ev.get("primary") or []]), evidence


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
    infos = {r: rank_info(out, r) or {} for r in local_ranks}
    if rc == 0 and all(i.get("finished") for i in infos.values()):
        return diagnose_divergence(infos) or ("ok", None)
    ev = exit_evidence(out, rc, local_ranks, shm_peak)
    ev["primary"], ev["first"] = cause_errors(ev["errors"])
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
        evidence.append(f"rank starter: rank {r} exit code {c}")
    cause, remedy = CAUSES[key][0], remedy_for(key, ev)
    who = f"rank {culprit}: " if culprit is not None else ""
    summary = f"{status}: {who}{cause_label(key, ev)} ({evidence[0][:200]})"
    return status, {"summary": summary, "cause": key, "cause_text": cause,
                    "remedy": remedy, "evidence": evidence, "ranks": ev["ranks"], "culprit_rank": culprit,
                    "error_excerpt": excerpt, "detected_after_s": None}


def diagnose_divergence(infos: dict):
    """("diverged", diagnosis) when a rank's loss stopped being a finite number (rank.json's
    `diverged`: the first such step), else None."""
    seen = sorted((i["diverged"]["epoch"], i["diverged"]["step"], r, i["diverged"]["loss"])
                  for r, i in infos.items() if i.get("diverged"))
    if not seen:
        return None
    epoch, step, rank, loss = seen[0]
    cause, remedy = CAUSES["diverged"]
    evidence = [f"rank {r}: loss {v} at epoch {e} step {s} (the first non-finite loss of that rank)"
                for e, s, r, v in seen]
    return "diverged", {"summary": f"diverged: loss {loss} at epoch {epoch} step {step} (rank {rank}); every "
                                   "rank stopped at the end of that epoch",
                        "cause": "diverged", "cause_text": cause, "remedy": remedy, "evidence": evidence,
                        "ranks": [], "culprit_rank": rank, "detected_after_s": None,
                        "first_nonfinite": {"epoch": epoch, "step": step, "rank": rank, "loss": loss}}


# -- points that never ran ------------------------------------------------------------------
# Why a grid point can be skipped: (what the cause means, what to do about it).
SKIP_CAUSES = {
    "not_enough_devices": ("the grid point asks for more GPUs than this node has",
                           "run it on a node with enough GPUs, or drop it from the grid"),
    "over_capacity": ("the pre-flight found the run impossible on this machine (memory or processes per core)",
                      "run the point on a larger machine, or drop it from the grid (--force-launch runs it anyway)"),
    "framework_unavailable": ("the framework cannot be imported in this lane (not installed, or its "
                              "release does not load on this torch)",
                              "run the point in a lane that carries the framework (the pair lane carries "
                              "both), or drop it from this lane's grid"),
}


def skipped(reason: str, cause: str) -> dict:
    """The diagnosis of a skipped point: its cause (SKIP_CAUSES) and the reason it was given."""
    return {"summary": f"skipped: {reason}", "cause": cause, "cause_text": SKIP_CAUSES[cause][0],
            "remedy": SKIP_CAUSES[cause][1], "evidence": [reason], "ranks": [], "culprit_rank": None}


# -- runs stopped by a signal to the launcher -----------------------------------------------
def diagnose_interruption(ev: InterruptionEvidence) -> dict:
    """Say which signal stopped the run, what may have sent it and what was measured before it."""
    ctx, after_s, ranks, steps, epochs = ev.context, ev.after_s, ev.ranks, ev.steps, ev.epochs
    cause, remedy = CAUSES["interrupted"]
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
    return {"summary": summary, "cause": "interrupted", "cause_text": cause, "remedy": remedy,
            "evidence": evidence, "ranks": ranks, "culprit_rank": None, "signal": ctx,
            "detected_after_s": round(after_s, 2)}


# -- a run directory moved or deleted from outside -------------------------------------------
def vanished_line(run_dir: Path, missing: Path, after_s: float | None) -> str:
    """'FILE went missing T s after launch: the run directory DIR was moved or deleted from
    outside the run' (FILE relative to DIR when inside it; `after_s` None: before the launch)."""
    run_dir, missing = Path(run_dir), Path(missing)
    what = str(missing.relative_to(run_dir)) if missing.is_relative_to(run_dir) and missing != run_dir else str(missing)
    when = "before the launch" if after_s is None else f"{after_s:.1f} s after launch"
    if missing == run_dir:
        return f"the run directory {run_dir} went missing {when}: it was moved or deleted from outside the run"
    return f"{what} went missing {when}: the run directory {run_dir} was moved or deleted from outside the run"


def diagnose_vanished(run_dir: Path, missing: Path, after_s: float, whereabouts: str | None, ranks: list,
                      previous: dict | None = None) -> dict:
    """The diagnosis of a run whose directory vanished: `missing` (the first file the launcher
    found gone) `after_s` seconds after launch, where the directory went if the kernel said
    (`whereabouts`), every rank's last progress the watchdog saw, and what the run had ended as
    by itself (`previous`: status and diagnosis), if it had. It outranks that: nothing the
    ranks wrote is left to explain it."""
    cause, remedy = CAUSES["run_dir_vanished"]
    ended = (f"the run had ended {previous['status']} by itself" if previous and previous.get("status")
             else "the run was stopped")
    summary = (f"failed: {vanished_line(run_dir, missing, after_s)}" + (f" ({whereabouts})" if whereabouts else "")
               + f"; {ended}, and nothing it measured is in this result")
    evidence = [f"{missing} was missing at the launcher's check {after_s:.1f} s after launch"]
    if whereabouts:
        evidence.append(f"{whereabouts}, says the kernel's name for the launcher's log file open in it")
    if ranks:
        evidence.append("the ranks' last progress the watchdog saw: " + progress_line(ranks))
    diag = {"summary": summary, "cause": "run_dir_vanished", "cause_text": cause, "remedy": remedy,
            "evidence": evidence, "ranks": ranks, "culprit_rank": None, "missing_file": str(missing),
            "detected_after_s": round(after_s, 2)}
    if previous and previous.get("status"):
        before = previous.get("diagnosis") or {}
        diag["previous_status"], diag["previous_cause"] = previous["status"], before.get("cause")
        evidence.append(f"the run had ended {previous['status']} by itself before the launcher found its directory "
                        "gone" + (f": {before['summary']}" if before.get("summary") else ""))
    return diag


# -- out of memory: a cause that outranks what the rules above named ------------------------
def apply_oom(outcome: Outcome, oom: OomEvidence | None, memory: MemoryWatch, note: str | None = None) -> Outcome:
    """Name an out-of-memory kill as the cause when the cgroup or the kernel saw one (`oom`:
    runners.evidence.oom_evidence; `memory`: the cgroup as the supervisor watched it; `note`:
    why the OOM evidence could not be read, if it could not)."""
    if outcome.status == "ok":
        return outcome
    if note:
        outcome.note = note
    if oom is None:
        return _memory_pressure(outcome, memory)
    found = oom.to_json()
    if outcome.status == "hang" and not memory.oom_seen:
        # The kills came after the hang was detected (while stacks were taken): the stall at the
        # cap is the cause, the kills its consequence.
        found["evidence"].append("the OOM kills happened after the hang was detected (while the stacks were "
                                 "taken and the tree was stopped)")
        pressured = _memory_pressure(outcome, memory)
        if pressured.diagnosis.get("cause") == "memory_pressure":
            pressured.diagnosis["oom"] = found
            pressured.diagnosis["evidence"] = pressured.diagnosis["evidence"] + found["evidence"]
            return pressured
    diag = dict(outcome.diagnosis or {"ranks": [], "evidence": []})
    cause, remedy = CAUSES["oom"]
    diag["previous_cause"], diag["previous_status"] = diag.get("cause"), outcome.status
    diag.update({"cause": "oom", "cause_text": cause, "remedy": remedy, "oom": found,
                 "evidence": found["evidence"] + list(diag.get("evidence") or [])})
    killed = [f"{k['role']} (pid {k['pid']})" for k in found["killed"]]
    victims = ", ".join(killed[:3]) + (f" and {len(killed) - 3} more" if len(killed) > 3 else "")
    left = group_ranks([(w["rank"], w["phase"]) for w in found["ranks_left_waiting"]], "in '{}'")
    # A kill is what happened, whatever it left behind (a hang, a crash, a time limit).
    status = "killed"
    limit = (found["cgroup"] or {}).get("limit_bytes")
    from runners.memory.units import fmt_bytes

    cap = f" under the {fmt_bytes(limit)} memory cap" if limit else ""
    diag["summary"] = (f"{status}: out of memory{cap}: the OOM killer killed {victims or 'a process of the run'}"
                       + (f"; left waiting: {left}" if left else "") + "; cause: memory exhaustion")
    outcome.status, outcome.diagnosis = status, diag
    return outcome


def _memory_pressure(outcome: Outcome, memory: MemoryWatch) -> Outcome:
    """A hang while the run's memory cgroup sat at its cap (no process killed): name it."""
    last, full = memory.last, memory.full
    if outcome.status != "hang" or not last or not full or not last.get("limit_bytes"):
        return outcome
    if (last.get("usage_bytes") or 0) < AT_LIMIT * last["limit_bytes"]:
        return outcome
    from runners.memory.units import fmt_bytes

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
