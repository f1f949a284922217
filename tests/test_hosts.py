"""Multi-node runs across two hosts on this machine (tests/netns_hosts.py: a network namespace
and a hostname per host, joined by a bridge): the fixture itself and its leak check, DDP across
the hosts for both frameworks, and the watchdog when a rank on the other host freezes or the
other host dies. Skipped, with the reason, where namespaces cannot be made (not root, no
CAP_NET_ADMIN, no `ip`)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import jsonschema
import pytest

from tests import netns_hosts
from tests.helpers import REPO, live_dir, run_env, runner_argv
from runners.records.result import schema as result_schema

SCHEMA = result_schema()
RUN_TIMEOUT_S = 240
_ports = itertools.count(29600)  # a fresh port per job: the namespaces are this session's own


@pytest.fixture(scope="module")
def hosts():
    reason = netns_hosts.why_not()
    if reason:
        pytest.skip(reason)
    made = netns_hosts.Hosts(2)
    try:
        made.start()
    except netns_hosts.Unavailable as exc:
        pytest.skip(str(exc))
    try:
        yield made
    finally:
        made.stop()
        left = made.leftovers()
        assert not left, f"the hosts fixture left {left}"


def test_hosts_are_two_machines_on_one_link(hosts):
    h0, h1 = hosts.hosts
    names = [hosts.run(h, ["hostname"]).stdout.strip() for h in (h0, h1)]
    assert names == [h0.hostname, h1.hostname] and names[0] != names[1]
    # Each host has loopback and its link address, and only the link's subnet is routed: test
    # traffic cannot leave the fixture.
    for h in (h0, h1):
        addrs = hosts.run(h, ["ip", "-o", "-4", "addr"]).stdout
        assert f"inet {h.address}/24" in addrs and "127.0.0.1" in addrs
        routes = hosts.run(h, ["ip", "route"]).stdout.strip().splitlines()
        assert len(routes) == 1 and routes[0].startswith(f"{hosts.subnet}.0/24 dev {netns_hosts.IFNAME}"), routes
    # TCP from host 0 to host 1's address, by its name.
    server = hosts.popen(h1, ["python3", "-c", "import socket; s = socket.create_server(('', 5999)); "
                              "s.settimeout(20); c, _ = s.accept(); c.sendall(socket.gethostname().encode())"],
                         stdout=subprocess.PIPE, text=True)
    reply = ""
    for _ in range(50):  # until the server listens: at most 50 tries, 5 s
        got = hosts.run(h0, ["python3", "-c", f"import socket; print(socket.create_connection(('{h1.hostname}', "
                             "5999), timeout=2).recv(100).decode())"])
        if got.returncode == 0:
            reply = got.stdout.strip()
            break
        time.sleep(0.1)
    assert server.wait(timeout=20) == 0 and reply == h1.hostname


def test_teardown_leaves_nothing_even_after_a_failure():
    """A second set of hosts, a process left running in each (one in a process group of its
    own, as torchrun starts its ranks) and a failure inside the `with`: stop() still removes
    every process, link and namespace."""
    reason = netns_hosts.why_not()
    if reason:
        pytest.skip(reason)
    made = netns_hosts.Hosts(2, prefix=f"{netns_hosts.Hosts().prefix}x")
    pids = []
    with pytest.raises(RuntimeError):
        try:
            made.start()
            for h in made.hosts:
                made.popen(h, ["sleep", "300"])
                # detached: a new session inside the host, out of the group the fixture tracks
                made.popen(h, ["setsid", "sleep", "301"])
            time.sleep(0.5)
            pids = [p for h in made.hosts for p in made.pids(h)]
            assert len(pids) >= 4, pids
            raise RuntimeError("a test failed with processes running")
        finally:
            made.stop()
    assert made.leftovers() == []
    assert not [p for p in pids if Path(f"/proc/{p}").exists() and
                Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]


def test_leak_check_finds_a_process_in_a_namespace_without_its_name():
    """A process left in a host whose namespace was deleted by name (it keeps the namespace
    alive, unlisted by `ip netns`) and out of every process group the fixture started: the
    leak check still finds it, by the namespace's inode."""
    reason = netns_hosts.why_not()
    if reason:
        pytest.skip(reason)
    made = netns_hosts.Hosts(1, prefix=f"{netns_hosts.Hosts().prefix}y")
    pids = []
    try:
        made.start()
        host = made.hosts[0]
        made.popen(host, ["setsid", "-f", "sleep", "300"])  # -f: a fork in a session of its own
        for _ in range(50):  # until the fork runs: at most 50 polls, 5 s
            pids = [p for p in made.pids(host) if Path(f"/proc/{p}/cmdline").read_bytes().startswith(b"sleep")]
            if pids:
                break
            time.sleep(0.1)
        assert pids
        subprocess.run(["ip", "netns", "del", host.netns], check=True, timeout=10)
        assert made.pids(host) == []  # gone from `ip netns`, not from the machine
        assert f"process {pids[0]} in namespace inode" in " ".join(made.leftovers())
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        made.stop()
    assert made.leftovers() == []


# -- DDP across the hosts --------------------------------------------------------------------

def start_job(hosts, out: Path, framework: str, epochs=2, extra=(), node_extra=None) -> list:
    """One runner (one torchrun agent, 2 ranks) per host, the master on host 0's address; the
    same --out for both (the namespaces share this filesystem): node 1 writes into node1/.
    `node_extra`: node index -> options for that node's runner alone."""
    port = next(_ports)
    procs = []
    for h in hosts.hosts:
        argv = runner_argv(out, framework=framework, devices=2, epochs=epochs, extra=[
            "--nnodes", "2", "--node-rank", str(h.index), "--master-addr", hosts.hosts[0].address,
            "--master-port", str(port), *extra, *(node_extra or {}).get(h.index, ())])
        log = open(out.parent / f"node{h.index}.log", "w")
        # `env` inside the host: `ip netns exec` keeps the environment, but say what the run needs.
        procs.append(hosts.popen(h, ["env", f"PYTHONPATH={run_env()['PYTHONPATH']}", *argv], cwd=REPO,
                                 stdout=log, stderr=subprocess.STDOUT))
        log.close()
    return procs


def wait_job(procs: list, out: Path) -> list:
    codes = [p.wait(timeout=RUN_TIMEOUT_S) for p in procs]
    return codes


def logs(out: Path) -> str:
    return "".join(f"--- node{i}.log\n" + (out.parent / f"node{i}.log").read_text()[-2500:] for i in (0, 1))


def result_of(d: Path) -> dict:
    result = json.loads((d / "result.json").read_text())
    jsonschema.validate(result, SCHEMA)
    return result


@pytest.mark.parametrize("framework", ["pyg", "dgl"])
def test_ddp_across_two_hosts(hosts, tmp_path, framework):
    """4 ranks, 2 per host: each all-reduce goes between ranks on one host and across the link.
    Gloo is bound to the link's interface: left to itself it binds the address the hostname
    resolves to, 127.0.1.1 here (as on Debian), and the hosts cannot connect."""
    out = tmp_path / "job"
    codes = wait_job(start_job(hosts, out, framework), out)
    assert codes == [0, 0], logs(out)
    r0, r1 = result_of(out), result_of(out / "node1")
    assert r0["status"] == "ok" and r1["status"] == "ok", logs(out)
    assert r0["run_id"] == r1["run_id"] and "-d2x2-" in r0["run_id"]
    h0, h1 = hosts.hosts
    assert [(r["rank"], r["host"]) for r in r0["ranks"]] == [(0, h0.hostname), (1, h0.hostname)]
    assert [(r["rank"], r["host"]) for r in r1["ranks"]] == [(2, h1.hostname), (3, h1.hostname)]
    for r, h in ((r0, h0), (r1, h1)):
        net = r["env"]["network"]
        assert r["env"]["hostname"] == h.hostname
        assert (net["address"], net["interface"], net["gloo_socket_ifname"], net["nccl_socket_ifname"]) == (
            h.address, netns_hosts.IFNAME, netns_hosts.IFNAME, f"={netns_hosts.IFNAME}"), net
        assert net["master_addr"] == h0.address
        # What the ranks ran with: gloo's and NCCL's interface both (NCCL itself needs GPUs).
        rank_env = r["env"]["rank_env_vars"]
        assert (rank_env["GLOO_SOCKET_IFNAME"], rank_env["NCCL_SOCKET_IFNAME"]) == (
            netns_hosts.IFNAME, f"={netns_hosts.IFNAME}"), rank_env
        # The run's result names both hosts and their ranks (exchanged at the end of training).
        assert net["ranks_by_host"] == {h0.hostname: [0, 1], h1.hostname: [2, 3]} and net["all_ranks_known"]
    # Node 0 knows the slowest rank of the whole job, including those on the other host.
    assert len(r0["summary"]["rank_train_times_s"]) == 4
    assert r0["summary"]["train_time_s"] == pytest.approx(max(r0["summary"]["rank_train_times_s"]))
    # The aggregate merges node 1's ranks into node 0's run.
    from analysis import aggregate

    agg = aggregate.aggregate([tmp_path])
    assert list(agg.runs["run_id"]) == [r0["run_id"]] and agg.invalid.empty
    assert sorted(agg.epochs["rank"].unique()) == [0, 1, 2, 3]


def test_unreachable_master_is_refused_naming_it(hosts, tmp_path):
    """A master address no interface of the host routes to: exit 2 before launch, naming it."""
    out = tmp_path / "job"
    bad = "192.0.2.1"  # TEST-NET-1: the hosts have no route to it, so no packet is ever sent
    argv = runner_argv(out, framework="pyg", devices=1, epochs=1, extra=[
        "--nnodes", "2", "--node-rank", "1", "--master-addr", bad, "--master-port", str(next(_ports))])
    res = hosts.run(hosts.hosts[1], ["env", f"PYTHONPATH={run_env()['PYTHONPATH']}", *argv], timeout=120, cwd=REPO)
    assert res.returncode == 2, res.stdout[-2000:]
    assert f"--master-addr {bad}: not reachable from this host" in res.stdout
    assert not (out / "node1" / "result.json").exists()


# -- the watchdog across hosts -----------------------------------------------------------------

def node_pids(hosts) -> dict:
    return {h.index: hosts.pids(h) for h in hosts.hosts}


def first_epoch_done(out: Path) -> bool:
    """Wait until node 0 has finished an epoch: at most 600 polls, 120 s."""
    for _ in range(600):
        epochs = next(live_dir(out).glob("rank0/epochs.csv"), None)
        if epochs is not None and len(epochs.read_text().splitlines()) > 1:
            return True
        time.sleep(0.2)
    return False


def test_killed_host_is_named_and_nothing_is_left(hosts, tmp_path):
    """Host 1 dies mid-run (every process in it killed at once): node 0's run ends with a result
    that names the lost node and its host, and nothing of the run is left on host 0."""
    out = tmp_path / "job"
    # Host 1's result can never come (every process of it is killed): node 0 waits for it the
    # whole --other-result-wait, 5 s here instead of 30.
    procs = start_job(hosts, out, "dgl", epochs=40, extra=["--stall-floor", "5", "--other-result-wait", "5"])
    h0, h1 = hosts.hosts
    assert first_epoch_done(out), logs(out)
    assert hosts.kill_all(h1) and not hosts.pids(h1)
    assert procs[0].wait(timeout=RUN_TIMEOUT_S) == 0, logs(out)
    r0 = result_of(out)
    d = r0["diagnosis"]
    assert r0["status"] == "crashed" and d["cause"] == "lost_node", d
    assert d["lost_nodes"] == [{"node": 1, "host": h1.hostname, "address": h1.address, "ranks": [2, 3]}], d
    assert d["summary"].startswith(f"crashed: lost node 1 (host {h1.hostname}, {h1.address}, ranks 2-3)"), d
    assert d["culprit_rank"] is None  # node 0's ranks were victims
    assert r0["epochs"] and not r0["summary"]  # what node 0 measured is kept; no timing claimed
    # Nothing of the run is left on host 0 (nor on host 1): every process of both namespaces is gone.
    assert node_pids(hosts) == {0: [], 1: []}
    assert not [p for p in run_pids(out) if alive(p)]


def run_pids(out: Path) -> set:
    """Every rank pid node 0 recorded, and every rank's of the job (the ranks exchange them)."""
    return {json.loads(f.read_text())["pid"] for f in out.glob("rank*/rank.json")}


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("floors", [(5, 5), (60, 5)], ids=["same-floor", "node1-first"])
def test_frozen_rank_on_the_other_host_is_named_with_its_host(hosts, tmp_path, floors):
    """Rank 3, on host 1, is frozen (SIGSTOP inside backward): host 1's watchdog names it with
    its host from its process state; node 0, whose ranks only wait in the all-reduce, names the
    same culprit from node 1's result. Which watchdog fires first is a race: when node 1's does,
    node 0's ranks crash on the lost node, and node 0 still adopts node 1's hang (node1-first
    takes that path every time). Nothing is left running on either host."""
    out = tmp_path / "job"
    procs = start_job(hosts, out, "pyg", epochs=3, extra=["--inject", "freeze-rank", "--allow-fault-injection"],
                      node_extra={k: ["--stall-floor", str(f)] for k, f in enumerate(floors)})
    assert wait_job(procs, out) == [0, 0], logs(out)
    h0, h1 = hosts.hosts
    r0, r1 = result_of(out), result_of(out / "node1")
    d1 = r1["diagnosis"]
    assert r1["status"] == "hang" and d1["culprit_rank"] == 3 and d1["cause"] == "stalled_rank", d1
    assert d1["summary"].startswith(f"hang: rank 3 on host {h1.hostname} (node 1) "), d1
    frozen = next(x for x in d1["ranks"] if x["rank"] == 3)
    assert frozen["state"] == "stopped" and frozen["host"] == h1.hostname, frozen
    d0 = r0["diagnosis"]
    assert r0["status"] == "hang" and d0["culprit_rank"] == 3 and d0["cause"] == "stalled_rank", d0
    assert f"rank 3 on host {h1.hostname} (node 1)" in d0["summary"], d0
    assert d0["culprit_node"]["node"] == 1 and d0["culprit_node"]["host"] == h1.hostname, d0
    assert {x["host"] for x in d0["ranks"]} == {h0.hostname}  # node 0 saw its own ranks waiting
    assert node_pids(hosts) == {0: [], 1: []}
    assert not [p for p in run_pids(out) | run_pids(out / "node1") if alive(p)]


@pytest.mark.parametrize("framework", ["pyg", "dgl"])
def test_link_down_on_one_host_is_lost_contact_naming_the_other(hosts, tmp_path, framework):
    """Host 1's link goes down mid-run and every process stays alive. Neither node blames its
    own rank: node 0 names node 1, its host and address, as out of reach; node 1 says its own
    link is down. Both end within the stall floor + 30 s, and nothing is left on either host."""
    floor = 10
    out = tmp_path / "job"
    procs = start_job(hosts, out, framework, epochs=400, extra=["--stall-floor", str(floor)])
    h0, h1 = hosts.hosts
    try:
        assert first_epoch_done(out), logs(out)
        assert all(p.poll() is None for p in procs), logs(out)
        hosts.set_link(h1, up=False)
        down = time.time()
        codes = [p.wait(timeout=RUN_TIMEOUT_S) for p in procs]
        ended = time.time() - down
    finally:
        hosts.set_link(h1, up=True)  # the module's other tests use the hosts after this one
    assert codes == [0, 0], logs(out)
    assert ended <= floor + 30, (ended, logs(out))
    r0, r1 = result_of(out), result_of(out / "node1")
    d0, d1 = r0["diagnosis"], r1["diagnosis"]
    assert r0["status"] == "hang" and d0["cause"] == "lost_contact" and d0["culprit_rank"] is None, d0
    assert d0["summary"].startswith(f"hang: lost contact with node 1 (host {h1.hostname}, {h1.address}, "
                                    "ranks 2-3)"), d0
    assert "unreachable from node 0 since about" in d0["summary"], d0
    assert r1["status"] == "hang" and d1["cause"] == "lost_contact" and d1["culprit_rank"] is None, d1
    assert d1["summary"].startswith(f"hang: this host's link {netns_hosts.IFNAME} is down; lost contact with "
                                    f"node 0 (host {h0.hostname}, {h0.address}"), d1
    assert node_pids(hosts) == {0: [], 1: []}
    assert not [p for p in run_pids(out) | run_pids(out / "node1") if alive(p)]


def test_a_node_that_never_comes_up_is_named_at_the_start_up_limit(hosts, tmp_path):
    """Only node 0 is started: its ranks wait for node 1, which never joins. The run is a hang at
    the start-up timeout (not the time limit) that names node 1 and its ranks, and leaves
    nothing running."""
    out = tmp_path / "job"
    port = next(_ports)
    argv = runner_argv(out, framework="pyg", devices=2, epochs=1, extra=[
        "--nnodes", "2", "--node-rank", "0", "--master-addr", hosts.hosts[0].address,
        "--master-port", str(port), "--startup-timeout", "20", "--stall-floor", "5"])
    t0 = time.time()
    res = hosts.run(hosts.hosts[0], ["env", f"PYTHONPATH={run_env()['PYTHONPATH']}", *argv], timeout=RUN_TIMEOUT_S,
                    cwd=REPO)
    assert res.returncode == 0, res.stdout[-3000:]
    assert time.time() - t0 < 20 + 60, res.stdout[-3000:]
    r0 = result_of(out)
    d = r0["diagnosis"]
    assert r0["status"] == "hang" and d["cause"] == "startup_hang" and d["missing_nodes"] == [1], d
    assert d["summary"].startswith(f"hang in start-up: node 1 (ranks 2-3) never joined the rendezvous at "
                                   f"{hosts.hosts[0].address}:{port} within 20 s"), d
    assert d["startup_limit"]["limit_s"] == 20, d
    assert node_pids(hosts) == {0: [], 1: []}
