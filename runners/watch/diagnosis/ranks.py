"""Where the ranks got, in one line however many they are, and which rank the others wait for:
the rank-level reading that the stop and exit rules share (pure functions of rank records)."""

from __future__ import annotations


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


def cpu_rate(x: dict):
    """CPU seconds per second between the two samples of a process, or None when unknown."""
    if x.get("cpu_delta_s") is None or not x.get("cpu_interval_s"):
        return None
    return x["cpu_delta_s"] / x["cpu_interval_s"]


def is_frozen(x: dict) -> bool:
    """Stopped (SIGSTOP, a debugger) at both samples, or in uninterruptible sleep at both
    samples without using any CPU (stuck in the kernel or a driver)."""
    now, before = x.get("state"), x.get("state_before", x.get("state"))
    if now in FROZEN_STATES and before in FROZEN_STATES:
        return True
    rate = cpu_rate(x)
    return now == before == "disk-sleep" and rate is not None and rate < CPU_IDLE_S


def describe_process(x: dict) -> str:
    """A process record as evidence: state, CPU time, open files, stack top."""
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
        return x["rank"], [f"rank {x['rank']} is frozen: {describe_process(x)}"]
    keys = sorted(progress_key(x) for x in live)
    if keys[0] < keys[1]:
        x = min(live, key=progress_key)
        ahead = progress_line([y for y in live if y is not x])
        return x["rank"], [f"rank {x['rank']} is behind (epoch {x['epoch']} step {x['step']} "
                           f"'{x['phase']}') while {ahead}: the others wait for it"]
    rates = {x["rank"]: cpu_rate(x) for x in live}
    if None not in rates.values():
        busy = [r for r, v in rates.items() if v >= CPU_BUSY_S]
        if len(busy) == 1 and all(v < CPU_IDLE_S for r, v in rates.items() if r != busy[0]):
            x = next(y for y in live if y["rank"] == busy[0])
            return x["rank"], [f"rank {x['rank']} is the only rank still computing: {describe_process(x)}"]
    return None, []


def worker_stuck(w: dict) -> bool:
    """Whether a loader worker was stopped, stuck in the kernel or gone at both samples."""
    bad = ("stopped", "tracing-stop", "zombie", "gone", "disk-sleep")
    return w["status"] in bad and w.get("status_before", w["status"]) in bad



def error_text(e: dict) -> str:
    """An error record's whole text: type, message, worker failure and traceback."""
    return f"{e['type']}: {e['message']}" + (e.get("worker_failure") or "") + e.get("traceback", "")


def sole(ranks) -> int | None:
    """The one rank of `ranks`, or None when they name none or several."""
    ranks = set(ranks)
    return ranks.pop() if len(ranks) == 1 else None
