"""What outranks the rulebook: findings made after the stop and exit rules named a cause, each
superseding the diagnosis before it (Diagnosis.superseding keeps what it said). OVERRIDES lists
them in the order they apply; the constructors here are what the launcher, runners.watch.nodes and
runners.partitioned.server call."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from runners.watch.diagnosis.causes import CAUSES, Diagnosis, Outcome
from runners.watch.diagnosis.exits import cause_errors, diagnose_exit
from runners.watch.diagnosis.ranks import group_ranks, progress_line
from runners.watch.evidence import FULL_SHARE, MemoryWatch, OomEvidence


@dataclass(frozen=True)
class Override:
    """A finding that supersedes the diagnosis before it: the causes it names, the call that applies it."""

    causes: tuple  # the keys of CAUSES it names besides the cause another node's result names
    applied_by: str
    why: str


# In the order they apply: each may supersede what the ones above it said.
OVERRIDES = (
    Override((), "runners.watch.supervisor.Supervisor._stop: crash_before_hang",
             "a rank that raised, and recorded why, before the hang or time limit was declared is the cause "
             "(with the cause its text names); its peers' idleness after it is the consequence"),
    Override(("oom", "memory_pressure"), "runners.watch.supervisor.Supervisor.run: apply_oom",
             "a kill, or a memory cgroup at its cap, explains the hang, crash or time limit the rules saw"),
    Override(("run_dir_vanished",), "runners.launch.ranks: vanished_outcome and notice_vanished (diagnose_vanished)",
             "nothing the ranks wrote is left to explain the run; the overrides below skip such a run"),
    Override(("lost_contact", "lost_node"), "runners.watch.nodes.explain",
             "a node sees only its own processes: the network, a lost node or another node's result names the cause"),
    Override((), "runners.watch.nodes.adopt_lost_culprit",
             "node 0 crashed on losing a node whose own watchdog had declared the hang"),
    Override(("lost_server", "stalled_server"), "runners.partitioned.server.Server.explain",
             "this host's graph server, dead or stalled, outranks the peers its trainers lost on the way"),
    Override(("lost_server", "stalled_server"), "runners.partitioned.server.Server.adopt_remote",
             "another host's graph server, from that node's result, or pointed to by this node's trainers waiting "
             "over RPC"),
)


def adopted(before: dict | None, k: int, theirs: dict, summary: str, *, status: str | None = None,
            previous: tuple = (), **fields) -> Diagnosis:
    """`before` superseded by the cause node `k`'s result names (`theirs`: its diagnosis)."""
    return Diagnosis.superseding(before, theirs.get("cause"), summary, [f"node {k}'s result: {theirs['summary']}"],
                                 status=status, previous=previous, cause_text=theirs.get("cause_text"),
                                 remedy=theirs.get("remedy"), **fields)


# -- a rank's own exception: the cause of a hang declared after it -----------------------------
def crash_before_hang(status: str, diag: dict, ev: dict, detected_t: float) -> tuple | None:
    """(status, diagnosis) when a rank raised, and recorded why, before the watchdog declared the
    hang or time limit `diag` (`ev`: the run's exit evidence, runners.watch.evidence.exit_evidence;
    `detected_t`: the detection's time.time()): the exception, and the cause its text names
    (shm, OOM, NCCL, ...), is what happened, found by the exit rules as if the rank starter had
    reaped the failed rank in time; the idleness of its peers is the consequence. Ranks that
    only lost their peer are victims and name nothing. None otherwise. Pure."""
    if status not in ("hang", "timeout"):
        return None
    before = {r: e for r, e in (ev.get("errors") or {}).items()
              if e.get("time") is not None and e["time"] <= detected_t}
    primary, _ = cause_errors(before)
    if not primary:
        return None
    crashed, found = diagnose_exit(dict(ev, errors=before))
    lead = min(primary, key=lambda e: e["time"])
    summary = (f"{found['summary']}; rank {lead['rank']} raised first, {detected_t - lead['time']:.1f} s before the "
               f"watchdog declared a {status}, its consequence (the rank starter had not yet reaped the failed rank)")
    fields = {k: found[k] for k in ("cause_text", "remedy", "error_excerpt") if found.get(k) is not None}
    evidence = found["evidence"] + [f"rank {lead['rank']}'s error record was written {detected_t - lead['time']:.1f} s "
                                    f"before the {status} was declared"]
    return crashed, Diagnosis.superseding(diag, found["cause"], summary, evidence, status=status,
                                          previous=("status", "cause", "summary"),
                                          culprit_rank=found.get("culprit_rank"), **fields)


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
                      previous: dict | None = None) -> Diagnosis:
    """The diagnosis of a run whose directory vanished: `missing` (the first file the launcher
    found gone) `after_s` seconds after launch, where the directory went if the kernel said
    (`whereabouts`), every rank's last progress the watchdog saw, and what the run had ended as
    by itself (`previous`: status and diagnosis), if it had. It outranks that: nothing the
    ranks wrote is left to explain it."""
    ended = (f"the run had ended {previous['status']} by itself" if previous and previous.get("status")
             else "the run was stopped")
    summary = (f"failed: {vanished_line(run_dir, missing, after_s)}" + (f" ({whereabouts})" if whereabouts else "")
               + f"; {ended}, and nothing it measured is in this result")
    evidence = [f"{missing} was missing at the launcher's check {after_s:.1f} s after launch"]
    if whereabouts:
        evidence.append(f"{whereabouts}, says the kernel's name for the launcher's log file open in it")
    if ranks:
        evidence.append("the ranks' last progress the watchdog saw: " + progress_line(ranks))
    diag = Diagnosis.of("run_dir_vanished", summary, evidence, ranks, missing_file=str(missing),
                        detected_after_s=round(after_s, 2))
    if previous and previous.get("status"):
        before = previous.get("diagnosis") or {}
        diag.note_previous(previous["status"], before)
        evidence.append(f"the run had ended {previous['status']} by itself before the launcher found its directory "
                        "gone" + (f": {before['summary']}" if before.get("summary") else ""))
    return diag


# -- out of memory: a cause that outranks what the rules above named ------------------------
def apply_oom(outcome: Outcome, oom: OomEvidence | None, memory: MemoryWatch, note: str | None = None) -> Outcome:
    """Name an out-of-memory kill as the cause when the cgroup or the kernel saw one (`oom`:
    runners.watch.evidence.oom_evidence; `memory`: the cgroup as the supervisor watched it; `note`:
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
    # A kill is what happened, whatever it left behind (a hang, a crash, a time limit).
    status = CAUSES["oom"].status
    outcome.diagnosis = Diagnosis.superseding(outcome.diagnosis, "oom", _oom_summary(status, found),
                                              found["evidence"], status=outcome.status, oom=found)
    outcome.status = status
    return outcome


def _oom_summary(status: str, found: dict) -> str:
    """'killed: out of memory under the cap: the OOM killer killed ...; left waiting: ...'."""
    from runners.memory.units import fmt_bytes

    killed = [f"{k['role']} (pid {k['pid']})" for k in found["killed"]]
    victims = ", ".join(killed[:3]) + (f" and {len(killed) - 3} more" if len(killed) > 3 else "")
    left = group_ranks([(w["rank"], w["phase"]) for w in found["ranks_left_waiting"]], "in '{}'")
    limit = (found["cgroup"] or {}).get("limit_bytes")
    cap = f" under the {fmt_bytes(limit)} memory cap" if limit else ""
    return (f"{status}: out of memory{cap}: the OOM killer killed {victims or 'a process of the run'}"
            + (f"; left waiting: {left}" if left else "") + f"; cause: {CAUSES['oom'].label}")


def _memory_pressure(outcome: Outcome, memory: MemoryWatch) -> Outcome:
    """A hang while the run's memory cgroup sat at its cap (no process killed): name it."""
    last, full = memory.last, memory.full
    if outcome.status != "hang" or not last or not full or not last.get("limit_bytes"):
        return outcome
    if (last.get("usage_bytes") or 0) < FULL_SHARE * last["limit_bytes"]:
        return outcome
    from runners.memory.units import fmt_bytes

    faults = (last.get("major_faults") or 0) - (full.get("major_faults") or 0)
    evidence = [f"memory cgroup {last['cgroup']} at its cap when the hang was detected: usage "
                f"{fmt_bytes(last['usage_bytes'])} of {fmt_bytes(last['limit_bytes'])} (anonymous "
                f"{fmt_bytes(last.get('anon_bytes'))}, shared memory {fmt_bytes(last.get('shmem_bytes'))}, "
                f"page cache {fmt_bytes(last.get('file_bytes'))}); no process was OOM-killed",
                f"at the cap since {full['t']} s after launch; {faults} major page faults since then"]
    summary = outcome.diagnosis["summary"].split("; cause:")[0] + (
        f"; cause: {CAUSES['oom'].label} (the run sat at its {fmt_bytes(last['limit_bytes'])} memory cap)")
    outcome.diagnosis = Diagnosis.superseding(
        outcome.diagnosis, "memory_pressure", summary, evidence, previous=("cause",),
        memory_pressure={"at_limit_since_s": full["t"], "last": last, "major_faults_since": faults})
    return outcome
