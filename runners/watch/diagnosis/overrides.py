"""What outranks the rulebook: findings made after the stop and exit rules named a cause, each
superseding the diagnosis before it (Diagnosis.superseding keeps what it said).

OVERRIDES declares them, in the order they apply, and apply_overrides runs them as one loop, at
one call site (runners.run.conclude), over the evidence the run's Outcome carries (its Findings,
gathered where each is seen: Override.gathered_by). An override is a function of the run's
status and diagnosis so far and that evidence: a (status, Diagnosis) Verdict when it supersedes,
None when it does not; it edits nothing else. A new one: its Cause in causes.py, its function
and its place in OVERRIDES here (register() inserts one from outside, as tests/test_rulebook_drill.py
does), its evidence gathered into Findings.extra where it is seen."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple

from runners.watch.diagnosis.causes import CAUSES, Diagnosis, Findings, Outcome
from runners.watch.diagnosis.exits import cause_errors, diagnose_exit
from runners.watch.diagnosis.ranks import group_ranks, progress_line
from runners.watch.diagnosis.stop import hang_head
from runners.watch.evidence import FULL_SHARE, MemoryWatch, OomEvidence


class Verdict(NamedTuple):
    """What an override found: the run's status and its diagnosis."""

    status: str
    diagnosis: dict | None


@dataclass(frozen=True)
class Override:
    """A finding that supersedes the diagnosis before it: its name, the causes it names, the
    function that decides it (status, diagnosis, Findings -> Verdict or None), where its
    evidence is gathered, and whether the overrides after it skip a run it superseded (`final`)."""

    name: str
    causes: tuple  # the keys of CAUSES it names besides the cause another node's result names
    decide: Callable
    gathered_by: str
    why: str
    final: bool = False


# -- the overrides, as functions of the run's status, diagnosis and Findings ----------------------
def _crash_first(status: str, diag: dict | None, f: Findings) -> Verdict | None:
    found = crash_before_hang(status, diag, *f.stop) if f.stop is not None else None
    return Verdict(*found) if found is not None else None


def _out_of_memory(status: str, diag: dict | None, f: Findings) -> Verdict | None:
    return out_of_memory(status, diag, *f.oom) if f.oom is not None else None


def _vanished(status: str, diag: dict | None, f: Findings) -> Verdict | None:
    if f.vanished is None:
        return None
    v = dict(f.vanished)
    previous = {"status": status, "diagnosis": diag} if v.pop("ended") else None
    return Verdict("failed", diagnose_vanished(**v, previous=previous))


def _nodes_explain(status: str, diag: dict | None, f: Findings) -> Verdict | None:
    return Verdict(status, f.nodes.explain(status, diag)) if f.nodes is not None else None


def _lost_culprit(status: str, diag: dict | None, f: Findings) -> Verdict | None:
    return f.nodes.adopt_lost_culprit(status, diag) if f.nodes is not None else None


def _server_explain(status: str, diag: dict | None, f: Findings) -> Verdict | None:
    return f.server.explain(status, diag) if f.server is not None else None


def _server_remote(status: str, diag: dict | None, f: Findings) -> Verdict | None:
    return f.server.adopt_remote(status, diag) if f.server is not None else None


# In the order they apply: each may supersede what the ones above it said.
OVERRIDES = [
    Override("crash_before_hang", (), _crash_first, "runners.watch.supervisor.Supervisor._stop (Findings.stop)",
             "a rank that raised, and recorded why, before the hang or time limit was declared is the cause "
             "(with the cause its text names); its peers' idleness after it is the consequence"),
    Override("out_of_memory", ("oom", "memory_pressure"), _out_of_memory,
             "runners.watch.supervisor.Supervisor.run (Findings.oom)",
             "a kill, or a memory cgroup at its cap, explains the hang, crash or time limit the rules saw"),
    Override("run_dir_vanished", ("run_dir_vanished",), _vanished,
             "runners.launch.ranks: vanished_outcome and notice_vanished (Findings.vanished)",
             "nothing the ranks wrote is left to explain the run; the overrides below skip such a run", final=True),
    Override("lost_node", ("lost_contact", "lost_node"), _nodes_explain,
             "runners.run.conclude: runners.watch.nodes.NodeFacts (Findings.nodes)",
             "a node sees only its own processes: the network, a lost node or another node's result names the cause"),
    Override("server", ("lost_server", "stalled_server"), _server_explain,
             "runners.launch.strategy.Partitioned.explain: runners.partitioned.server.ServerFacts (Findings.server)",
             "this host's graph server, dead or stalled, outranks the peers its trainers lost on the way; "
             "before lost_culprit, whose wait for the other nodes' results it makes needless (one of them may be "
             "waiting for this node's meanwhile)"),
    Override("lost_culprit", (), _lost_culprit, "runners.watch.nodes.NodeFacts.adopt_lost_culprit (Findings.nodes)",
             "node 0 crashed on losing a node whose own watchdog had declared the hang"),
    Override("remote_server", ("lost_server", "stalled_server"), _server_remote,
             "runners.partitioned.server.ServerFacts.adopt_remote (Findings.server)",
             "another host's graph server, from that node's result, or pointed to by this node's trainers waiting "
             "over RPC"),
]


def apply_overrides(outcome: Outcome, overrides: list | None = None) -> Outcome:
    """`outcome` with every override of OVERRIDES (or `overrides`) applied, in order, to the
    Findings it carries: each that finds something supersedes the status and diagnosis before
    it; after a `final` one that did, none. The one place the overrides are applied."""
    outcome.status, outcome.diagnosis = _verdict(outcome, OVERRIDES if overrides is None else overrides)
    return outcome


def preview(outcome: Outcome, before: str) -> Outcome:
    """A copy of `outcome` as the overrides declared before the one named `before` would leave
    it, `outcome` itself untouched: for evidence that must be gathered while the run's processes
    still live, and depends on how the run ended (a graph server's: Server.gather)."""
    import dataclasses

    names = [o.name for o in OVERRIDES]
    status, diag = _verdict(outcome, OVERRIDES[:names.index(before)])
    return dataclasses.replace(outcome, status=status, diagnosis=diag)


def _verdict(outcome: Outcome, overrides: list) -> Verdict:
    status, diag = outcome.status, outcome.diagnosis
    for o in overrides:
        found = o.decide(status, diag, outcome.findings)
        if found is None:
            continue
        status, diag = found
        if o.final:
            break
    return Verdict(status, diag)


def register(override: Override, *, before: str | None = None, after: str | None = None) -> None:
    """Put `override` into OVERRIDES just before or after the one named (at the end when neither
    is given): a fault found outside this module, applied in its declared place."""
    names = [o.name for o in OVERRIDES]
    if override.name in names:
        raise ValueError(f"an override named {override.name!r} is already declared")
    at = names.index(before) if before else names.index(after) + 1 if after else len(names)
    OVERRIDES.insert(at, override)


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
def out_of_memory(status: str, diag: dict | None, oom: OomEvidence | None, memory: MemoryWatch) -> Verdict | None:
    """An out-of-memory kill named as the cause when the cgroup or the kernel saw one (`oom`:
    runners.watch.evidence.oom_evidence; `memory`: the cgroup as the supervisor watched it), or a
    hang at the memory cap without one (memory_pressure). None otherwise."""
    if status == "ok":
        return None
    if oom is None:
        return _memory_pressure(status, diag, memory)
    found = oom.to_json()
    if status == "hang" and not memory.oom_seen:
        # The kills came after the hang was detected (while stacks were taken): the stall at the
        # cap is the cause, the kills its consequence.
        found["evidence"].append("the OOM kills happened after the hang was detected (while the stacks were "
                                 "taken and the tree was stopped)")
        pressured = _memory_pressure(status, diag, memory)
        if pressured is not None:
            pressured.diagnosis["oom"] = found
            pressured.diagnosis["evidence"] = pressured.diagnosis["evidence"] + found["evidence"]
            return pressured
    # A kill is what happened, whatever it left behind (a hang, a crash, a time limit).
    killed = CAUSES["oom"].status
    return Verdict(killed, Diagnosis.superseding(diag, "oom", _oom_summary(killed, found), found["evidence"],
                                                 status=status, oom=found))


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


def _memory_pressure(status: str, diag: dict | None, memory: MemoryWatch) -> Verdict | None:
    """A hang while the run's memory cgroup sat at its cap (no process killed): name it. Its
    summary is the stop rules' line for the hang (runners.watch.diagnosis.stop.hang_head) with
    this cause, or, when the hang's line was another (a start-up hang across nodes, a crash
    found first), that line with this cause after it."""
    last, full = memory.last, memory.full
    if status != "hang" or not last or not full or not last.get("limit_bytes"):
        return None
    if (last.get("usage_bytes") or 0) < FULL_SHARE * last["limit_bytes"]:
        return None
    from runners.memory.units import fmt_bytes

    faults = (last.get("major_faults") or 0) - (full.get("major_faults") or 0)
    evidence = [f"memory cgroup {last['cgroup']} at its cap when the hang was detected: usage "
                f"{fmt_bytes(last['usage_bytes'])} of {fmt_bytes(last['limit_bytes'])} (anonymous "
                f"{fmt_bytes(last.get('anon_bytes'))}, shared memory {fmt_bytes(last.get('shmem_bytes'))}, "
                f"page cache {fmt_bytes(last.get('file_bytes'))}); no process was OOM-killed",
                f"at the cap since {full['t']} s after launch; {faults} major page faults since then"]
    head = hang_head(diag.get("ranks") or [], diag.get("culprit_rank"))
    said = diag["summary"]
    line = head if said.startswith(f"{head}; cause: ") else said
    summary = f"{line}; cause: {CAUSES['oom'].label} (the run sat at its {fmt_bytes(last['limit_bytes'])} memory cap)"
    return Verdict(status, Diagnosis.superseding(
        diag, "memory_pressure", summary, evidence, previous=("cause",),
        memory_pressure={"at_limit_since_s": full["t"], "last": last, "major_faults_since": faults}))
