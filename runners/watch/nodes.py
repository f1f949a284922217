"""A multi-node run seen from one node: which host each rank is on (exchanged by the ranks at
start-up, rank.json's `peers`), and the diagnosis of a failure whose cause lies on another
node: a node lost (this node's ranks saw only reset connections) or a culprit that the other
node's own result names. A node's launcher sees only its own processes; this is how its
result names what happened elsewhere."""

from __future__ import annotations

import datetime as dt
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runners.records import history, rank_rows
from runners.records.rundir import RunDir
from runners.watch import diagnosis as rulebook
from runners.watch.diagnosis.causes import PREVIOUS, Diagnosis

# A gloo error names the peer it lost: "Read error [10.231.7.11]:63165: Connection reset by peer".
PEER_ADDRESS = re.compile(r"\[([0-9a-fA-F.:]+)\]:\d+")
# How long a hung node waits for another host to answer a TCP connection (an answer, even a
# refusal, says the host is there; a host behind a link that is down never answers).
CONTACT_TIMEOUT_S = 3.0


def peers_of(out: Path, local_ranks: list) -> list | None:
    """Every rank's {rank, host, address}, as one of this node's ranks recorded it."""
    for r in local_ranks:
        info = rank_rows.read_rank_info(out, r) or {}
        if info.get("peers"):
            return info["peers"]
    return None


def node_of(rank: int, devices: int) -> int:
    return rank // devices  # torchrun's static rendezvous: node k holds ranks k*devices ...


def describe_node(k: int, peers: list, devices: int) -> dict:
    mine = [p for p in peers if node_of(p["rank"], devices) == k]
    return {"node": k, "host": mine[0]["host"] if mine else None,
            "address": mine[0]["address"] if mine else None, "ranks": [p["rank"] for p in mine]}


def node_text(n: dict) -> str:
    ranks = n["ranks"]
    span = f"ranks {ranks[0]}-{ranks[-1]}" if len(ranks) > 1 else f"rank {ranks[0]}" if ranks else "no ranks known"
    return f"node {n['node']} (host {n['host']}, {n['address']}, {span})"


def link_state(interface: str | None) -> str | None:
    """What is wrong with this host's interface `interface` ('down', 'without carrier', 'gone'),
    or None when it is up (or unknown)."""
    if not interface:
        return None
    base = Path("/sys/class/net") / interface
    try:
        if (base / "operstate").read_text().strip() == "down":
            return "down"
        carrier = (base / "carrier").read_text().strip()
    except OSError:  # carrier cannot be read while the link is administratively down
        return "gone" if not base.exists() else "down"
    return "without carrier" if carrier == "0" else None


def unreachable(address: str, port: int, timeout: float = CONTACT_TIMEOUT_S) -> str | None:
    """Why a TCP connection to `address` got no answer, or None when the host answered (a
    connection made or refused: either way it is there)."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return None
    except ConnectionRefusedError:
        return None
    except socket.timeout:
        return f"no answer in {timeout:g} s"
    except OSError as exc:  # no route to host, network unreachable
        return exc.strerror or str(exc)


def lost_contact(cfg, peers: list | None, network: dict | None) -> tuple:
    """(this host's link problem or None, [(node, why unreachable)]) for a hung run across
    nodes: every other node's address (the master's when the ranks never met) checked once."""
    interface = (network or {}).get("interface")
    if peers:
        others = [describe_node(k, peers, cfg.devices) for k in range(cfg.nodes) if k != cfg.node_rank]
    elif cfg.node_rank != 0:
        others = [{"node": 0, "host": None, "address": cfg.master_addr, "ranks": []}]
    else:
        others = []
    gone = [(n, why) for n in others if n["address"]
            for why in [unreachable(n["address"], cfg.master_port)] if why]
    return link_state(interface), gone, interface


def _blame_contact(cfg, status: str, diag: dict, own, gone: list, interface, since: str) -> dict:
    """A hang whose cause is the network: no rank of this node is blamed for waiting."""
    lost = "; ".join(node_text(n) for n, _ in gone)
    why = "; ".join(sorted({w for _, w in gone}))
    if own:
        what = f"this host's link {interface} is {own}" + (f"; lost contact with {lost} ({why})" if gone else "")
    else:
        what = f"lost contact with {lost}: unreachable from node {cfg.node_rank} since about {since} ({why})"
    return Diagnosis.superseding(diag, "lost_contact", f"{status}: {what}", [what], previous=("cause",),
                                 culprit_rank=None, lost_nodes=[n for n, _ in gone],
                                 own_link={"interface": interface, "state": own} if own else None)


def last_progress(diag: dict, detected_at: float) -> str:
    """When this node's ranks last made progress, as a UTC clock time (the hang's start)."""
    idle = [x.get("idle_s") for x in diag.get("ranks") or [] if x.get("idle_s") is not None]
    t = detected_at - (min(idle) if idle else 0.0)
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%H:%M:%S UTC")


def explain(cfg, out: Path, local_ranks: list, status: str, diag: dict | None, started_at: str,
            network: dict | None = None, detected_at: float | None = None) -> dict | None:
    """`diag` with every rank's host, and, when the cause is on another node, that node named:
    a node out of reach or this host's own link down (a hang, cause `lost_contact`), a lost node
    (cause `lost_node`), or the culprit another node's result names (a hang)."""
    if cfg.nodes < 2 or not diag:
        return diag
    peers = peers_of(out, local_ranks)
    if status == "hang":
        own, gone, interface = lost_contact(cfg, peers, network)
        if own or gone:
            diag = _blame_contact(cfg, status, diag, own, gone, interface,
                                  last_progress(diag, detected_at or time.time()))
    if not peers:
        return diag  # the ranks never met (no process group): nothing to say about the others
    hosts = {p["rank"]: p["host"] for p in peers}
    for x in diag.get("ranks") or []:
        if "rank" in x:
            x["host"] = hosts.get(x["rank"])
    if diag.get("cause") == "lost_contact":
        return diag
    lost = lost_nodes(cfg, diag, peers)
    if lost:  # this node's failed ranks only lost their peers there: victims, not culprits
        return _blame_lost(cfg, status, diag, lost, local_ranks)
    culprit = diag.get("culprit_rank")
    if culprit is not None and node_of(culprit, cfg.devices) == cfg.node_rank and culprit in hosts:
        diag["summary"] = re.sub(rf"\brank {culprit}\b", f"rank {culprit} on host {hosts[culprit]} "
                                 f"(node {cfg.node_rank})", diag["summary"], count=1)
        return diag
    if status == "hang" and cfg.node_rank == 0 and (culprit is None or diag.get("cause") == "collective_mismatch"):
        return _adopt_remote_culprit(cfg, out, diag, started_at)
    return diag


def lost_nodes(cfg, diag: dict, peers: list) -> list:
    """Other nodes whose addresses this node's ranks lost ('Connection reset by peer' naming
    the address), when every error of theirs is such a lost peer (they were victims)."""
    errors = [e for e in diag.get("evidence") or [] if " raised " in e]
    if not errors or not all(rulebook.PEER_LOST.search(e) for e in errors):
        return []
    addresses = {a for e in errors for a in PEER_ADDRESS.findall(e)}
    nodes = sorted({node_of(p["rank"], cfg.devices) for p in peers if p.get("address") in addresses}
                   - {cfg.node_rank})
    return [describe_node(k, peers, cfg.devices) for k in nodes]


def _blame_lost(cfg, status: str, diag: dict, lost: list, local_ranks: list) -> dict:
    mine = f"ranks {local_ranks[0]}-{local_ranks[-1]}" if len(local_ranks) > 1 else f"rank {local_ranks[0]}"
    what = "; ".join(node_text(n) for n in lost)
    return Diagnosis.superseding(diag, "lost_node", f"{status}: lost {what}: this node's {mine} saw their connections "
                                 "to it reset", [f"lost {what}"], previous=(), culprit_rank=None, lost_nodes=lost)


def _when(stamp: str | None) -> float:
    try:
        return dt.datetime.fromisoformat(stamp).timestamp()
    except (TypeError, ValueError):
        return 0.0


def result_of_node(cfg, out: Path, k: int) -> Path:
    """Where node `k` writes its result, seen from this node's run directory `out` (its staging
    directory or its point): node 0's is the job's point, node k > 0's node{k}/ inside it."""
    point = history.point_dir(out)
    job = point.parent if cfg.node_rank > 0 else point
    return RunDir(job).node(k).result if k > 0 else RunDir(job).result


# Node 0 waits the whole of --other-result-wait for the others' results; any other node waits this
# share of it for node 0's, so that two nodes that both wait never wait each other out: the other
# node's result is written while node 0 still waits.
FOLLOWER_WAIT_SHARE = 1 / 3


def other_results(cfg, out: Path, started_at: str) -> dict:
    """node k -> its result.json of this run, for the other nodes (node 0 included, seen from
    node k > 0) whose result appears within `cfg.other_result_wait_s` (--other-result-wait; on a
    node other than 0, FOLLOWER_WAIT_SHARE of it; one check every 0.5 s). A result is this run's
    when it finished after this node started and started within the start-up timeout of it (an
    earlier run of the point ended before)."""
    t0, found = _when(started_at), {}
    others = [k for k in range(cfg.nodes) if k != cfg.node_rank]
    wait = cfg.other_result_wait_s * (1.0 if cfg.node_rank == 0 else FOLLOWER_WAIT_SHARE)
    deadline = time.time() + wait
    while True:
        for k in others:
            res = rank_rows.read_json(result_of_node(cfg, out, k)) if k not in found else None
            if res and _when(res.get("finished_at")) >= t0 and abs(_when(res.get("started_at")) - t0) <= cfg.startup_timeout_s:
                found[k] = res
        if len(found) == len(others) or time.time() > deadline:
            return found
        time.sleep(0.5)


def _culprit_node(k: int, res: dict) -> dict:
    """Node `k`, as the diagnosis that adopts its result's culprit names it."""
    return {"node": k, "host": res.get("env", {}).get("hostname"), "result": str(RunDir(Path()).node(k).result)}


def _adopt_remote_culprit(cfg, out: Path, diag: dict, started_at: str) -> dict:
    """Every rank of node 0 waited in a collective: its culprit is elsewhere. The other nodes
    write their results beside node 0's (node{K}/, one --out on a shared filesystem); the
    first that names a culprit gives the run's diagnosis."""
    for k, res in sorted(other_results(cfg, out, started_at).items()):
        theirs = res.get("diagnosis") or {}
        if theirs.get("culprit_rank") is None:
            continue
        summary = f"{theirs['summary']} (node {cfg.node_rank}'s ranks waited for it in a collective)"
        return rulebook.adopted(diag, k, theirs, summary, culprit_rank=theirs["culprit_rank"],
                                culprit_node=_culprit_node(k, res))
    diag["summary"] += (f" (every rank of node {cfg.node_rank} waited: the culprit is on another node; "
                        "see the other nodes' results, node{K}/result.json)")
    return diag


def adopt_lost_culprit(cfg, out: Path, status: str, diag: dict | None, started_at: str):
    """Node 0's ranks crashed on losing another node, whose own watchdog had declared a hang and
    stopped its tree (the two watchdogs race): that node's result names the culprit, and the run
    is the hang it caused (`previous_status` crashed, `previous_cause` lost_node). A ("hang",
    diagnosis) verdict (diagnosis.OVERRIDES' `lost_culprit`), or None."""
    diag = diag or {}
    if cfg.node_rank != 0 or cfg.nodes < 2 or status != "crashed" or diag.get("cause") != "lost_node":
        return None
    lost = {n["node"] for n in diag.get("lost_nodes") or []}
    for k, res in sorted(other_results(cfg, out, started_at).items()):
        theirs = res.get("diagnosis") or {}
        if k not in lost or res.get("status") != "hang" or theirs.get("culprit_rank") is None:
            continue
        summary = (f"{theirs['summary']} (node {k}'s result; node 0's ranks lost node {k} when its watchdog stopped "
                   f"it: {diag.get('summary')})")
        return "hang", rulebook.adopted(diag, k, theirs, summary, status=status, previous=PREVIOUS,
                                        culprit_rank=theirs["culprit_rank"], culprit_node=_culprit_node(k, res))
    return None


@dataclass(frozen=True)
class NodeFacts:
    """A run across nodes as diagnosis.OVERRIDES reads it (Findings.nodes): what this node's
    ranks recorded of their peers, the network and the other nodes' results, read when an
    override asks (explain, adopt_lost_culprit)."""

    cfg: Any
    out: Path
    local_ranks: list
    started_at: str
    network: dict | None
    detected_at: float

    def explain(self, status: str, diag: dict | None) -> dict | None:
        return explain(self.cfg, self.out, self.local_ranks, status, diag, self.started_at, self.network,
                       self.detected_at)

    def adopt_lost_culprit(self, status: str, diag: dict | None):
        return adopt_lost_culprit(self.cfg, self.out, status, diag, self.started_at)
