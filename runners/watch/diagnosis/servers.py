"""The partitioned strategy's graph servers as a cause: a server that stopped making progress
(`server_stall`, from its sampled state and CPU time), died mid-run, or another node's server that this
node's trainers waited for or lost. Each diagnosis supersedes the watchdog's."""

from __future__ import annotations

from runners.watch.diagnosis.causes import CAUSES, Diagnosis
from runners.watch.diagnosis.overrides import adopted
from runners.watch.diagnosis.ranks import CPU_IDLE_S, FROZEN_STATES, is_frozen
from runners.watch.evidence import ServerEvidence

STALLED = CAUSES["stalled_server"]


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


def diagnose_stalled_server(status: str, diag: dict | None, ev: ServerEvidence | None) -> Diagnosis | None:
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
    waited = _waiters(ev)
    summary = (f"hang: graph server {ev.node} (partition {ev.node}, pid {ev.pid}) on host {ev.host} stopped making "
               f"progress ({how}); " + (f"its trainers waited for it over RPC ({waited})" if waited else
                                       "the run's trainers, which sample and fetch features from it, waited")
               + "; cause: " + STALLED.label)
    evidence = [line] + ([f"waiting over RPC: {waited}"] if waited else [])
    server = {"node": ev.node, "partition": ev.node, "host": ev.host, "pid": ev.pid, "how": how,
              "state": ev.samples[-1][1], "window_s": ev.window_s, "evidence": ev.to_json()}
    return Diagnosis.superseding(diag, STALLED.key, summary, evidence, status=status,
                                 previous=("cause", "summary", "status"), culprit_rank=None, stalled_server=server)


def remote_server_stall(status: str, diag: dict | None, ev: ServerEvidence | None, others: list) -> Diagnosis | None:
    """A node whose trainers waited over RPC while its own server kept going, when no other node's
    result named a graph server: the stalled server is another host's (`others`: the other nodes,
    [{node, host}], host None when unknown). None unless the evidence says so."""
    if status != "hang" or ev is None or not ev.ranks_in_rpc or server_stall(ev) is not None:
        return None
    state = ev.samples[-1][1] if ev.samples else "?"
    where = ", ".join(f"node {o['node']}" + (f" (host {o['host']})" if o.get("host") else "") for o in others)
    summary = (f"hang: this host's trainers waited for a graph server over RPC ({_waiters(ev)}) while graph server "
               f"{ev.node} on host {ev.host} (pid {ev.pid}) kept running (state '{state}'): the stall points to "
               f"another node's graph server: {where or 'another node'}, whose result did not name it; cause: "
               + STALLED.label)
    evidence = [f"waiting over RPC: {_waiters(ev)}; this host's graph server {ev.node} was not stalled "
                f"(state '{state}')"]
    server = {"node": None, "suspect_nodes": [o["node"] for o in others], "evidence": ev.to_json()}
    return Diagnosis.superseding(diag, STALLED.key, summary, evidence, status=status,
                                 previous=("cause", "summary", "status"), culprit_rank=None, stalled_server=server)


def lost_server(status: str, diag: dict | None, server: dict, died: dict) -> Diagnosis:
    """This host's graph server died mid-run (`server`: node, host, pid; `died`: t_s, exit_code,
    signal): the run crashed, its trainers were the server's victims."""
    how = died["signal"] or f"exit code {died['exit_code']}"
    summary = (f"crashed: graph server {server['node']} (partition {server['node']}, pid {server['pid']}) on host "
               f"{server['host']} died ({how}) {died['t_s']:.1f} s after it started; "
               "its trainers, which sample and fetch features from it, were stopped")
    return Diagnosis.superseding(diag, "lost_server", summary, [summary], status=status, previous=("status",),
                                 culprit_rank=None, lost_server={**server, **died})


def remote_server(status: str, mine: dict | None, k: int, theirs: dict, own: int = 0) -> Diagnosis:
    """Node `own`'s trainers lost or waited for node `k`'s graph server, whose result (`theirs`:
    its diagnosis, cause lost_server or stalled_server) names it: that cause is the run's."""
    mine = mine or {}
    cause = theirs.get("cause")
    verb = "lost it" if cause == "lost_server" else "waited for it"
    summary = f"{theirs['summary']} (node {k}'s result; node {own}'s trainers {verb}: {mine.get('summary', status)})"
    return adopted(mine, k, theirs, summary, status=status, previous=("status",), culprit_rank=None,
                   **{cause: theirs.get(cause)})
