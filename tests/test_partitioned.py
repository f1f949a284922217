"""The partitioned strategy (DistDGL) across two hosts of tests/netns_hosts.py (the fixture of
tests/test_hosts.py): one graph server and one trainer per host, the graph split in 2 by METIS,
GraphSAGE trained with DistNodeDataLoader and DDP over gloo on the hosts' link. Each host gets a
/dev/shm of its own, as a real host has (DistDGL names its shared memory after the graph).
Requests the strategy cannot serve are refused before launch, naming the value."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from runners.config import ConfigError, build_parser, config_from_args
from tests.helpers import DATA_ROOT, REPO, run_config, run_env, runner_argv
from tests.test_hosts import _ports, alive, hosts, node_pids, result_of  # noqa: F401  (the fixture)

RUN_TIMEOUT_S = 300


def start_partitioned(hosts, out: Path, epochs=4, extra=(), node_extra=None) -> list:  # noqa: F811
    """One launcher per host, each starting its host's graph server and trainer; DDP's master and
    DGL's ip_config name the hosts' link addresses. `node_extra`: {node: options of that node's only}."""
    h0 = hosts.hosts[0]
    master_port, dgl_port = next(_ports), next(_ports)
    ip_config = out.parent / "ip_config.txt"
    ip_config.write_text("".join(f"{h.address} {dgl_port}\n" for h in hosts.hosts))
    procs = []
    for h in hosts.hosts:
        argv = runner_argv(out, framework="dgl", devices=1, epochs=epochs, extra=[
            "--strategy", "partitioned", "--nnodes", "2", "--node-rank", str(h.index), "--master-addr", h0.address,
            "--master-port", str(master_port), "--ip-config", str(ip_config), *extra,
            *(node_extra or {}).get(h.index, ())])
        with open(out.parent / f"node{h.index}.log", "w") as log:
            procs.append(hosts.popen(h, ["env", f"PYTHONPATH={run_env()['PYTHONPATH']}", *argv], private_shm=True,
                                     cwd=REPO, stdout=log, stderr=subprocess.STDOUT))
    return procs


def logs(out: Path) -> str:
    text = "".join(f"--- node{i}.log\n" + (out.parent / f"node{i}.log").read_text()[-3000:] for i in (0, 1))
    for server_log in sorted(out.parent.rglob("server*.log")):
        text += f"--- {server_log}\n" + server_log.read_text()[-1500:]
    return text


def test_distdgl_sage_two_partitions_learns_and_leaves_nothing(hosts, tmp_path):  # noqa: F811
    out = tmp_path / "job"
    procs = start_partitioned(hosts, out)
    codes = [p.wait(timeout=RUN_TIMEOUT_S) for p in procs]
    assert codes == [0, 0], logs(out)
    r0, r1 = result_of(out), result_of(out / "node1")
    assert r0["status"] == "ok" and r1["status"] == "ok", logs(out)
    assert r0["run_id"] == r1["run_id"] and "-dgl-part-metis-sage-d1x2-" in r0["run_id"]
    h0, h1 = hosts.hosts
    assert r0["env"]["network"]["ranks_by_host"] == {h0.hostname: [0], h1.hostname: [1]}
    # Each host served its own partition, and each trainer trained seeds of its host's partition.
    for r, h in ((r0, h0), (r1, h1)):
        part = r["env"]["partitioned"]
        assert part["partitions"] == 2 and part["part_method"] == "metis"
        assert part["hosts"][h.index]["address"] == h.address
        assert part["quality"]["edge_cut_fraction"] < 0.5
        assert r["config"]["adapter_choices"]["trainer_partition"] == h.index
        server = part["server"]
        assert server["host"] == h.hostname and server["exit_code"] == 0, server
        assert server["stopped_by"] == "shutdown request from the trainers", server
        mem = server["memory"]
        assert mem["host_peak_bytes"] > mem["server_peak_bytes"] > 0, server
        # beside it, the pre-flight model of a replicated run of the point: the whole graph on the host
        assert mem["replicated_model_dataset_bytes"] == r["preflight"]["memory_model"]["inputs"]["dataset_bytes"] > 0
        # this host's own model: its partition's files (not the whole graph), the server and trainer
        model = r["preflight"]["memory_model"]
        assert model["inputs"]["partition_source"].endswith(f"part{h.index} (manifest sizes)"), model["inputs"]
        assert mem["model_bytes"] == model["total_bytes"] == r["memory"]["model_bytes"]
        files = json.loads((Path(part["directory"]) / "manifest.json").read_text())["files"]
        assert mem["model_partition_bytes"] == sum(i["bytes"] for f, i in files.items()
                                                   if f.startswith(f"part{h.index}/")) > 0
        assert "dataset_shared" not in model["terms_bytes"] and model["terms_bytes"]["server_baseline"] > 0
        # close to the host's measured peak: the server's and trainer's PSS (the agent is not sampled)
        assert 0.7 < mem["model_sampled_bytes"] / mem["host_peak_bytes"] < 1.4, mem
        assert r["env"]["rank_env_vars"] is not None
    # Equal steps on both ranks (padded shares), every epoch covering the training split.
    s = r0["summary"]
    steps = json.loads((out / "rank0" / "rank.json").read_text())["steps_per_rank"]
    assert steps == [s["steps_per_rank_epoch"]] * 2, steps
    assert s["seed_nodes_per_epoch_all_ranks"] >= s["train_split_seed_nodes"]
    # It learns: above the features-only baseline on the same validation split.
    ref = r0["accuracy_reference"]
    assert s["final_val_acc"] > ref["baseline_val_acc"] and s["converged"] is True, (s["final_val_acc"], ref)
    # Nothing left running: no process in either host, the servers and trainers gone.
    assert node_pids(hosts) == {0: [], 1: []}
    pids = [r["env"]["partitioned"]["server"]["pid"] for r in (r0, r1)]
    pids += [json.loads(f.read_text())["pid"] for f in list(out.glob("rank*/rank.json")) +
             list((out / "node1").glob("rank*/rank.json"))]
    assert len(pids) == 4 and not [p for p in pids if alive(p)]


@pytest.mark.parametrize("extra,message", [
    (["--framework", "pyg"], "--strategy partitioned: not available for --framework pyg: PyG's distributed engine"),
    (["--workers", "1"], "--workers 1: the partitioned strategy samples in the trainer"),
    (["--nnodes", "2", "--master-port", "29999"], "--strategy partitioned --nnodes 2: needs --ip-config FILE"),
    (["--part-method", "kmeans"], "--part-method 'kmeans' is unknown; allowed: metis, random"),
])
def test_bad_requests_are_refused_before_launch(tmp_path, extra, message):
    base = ["--strategy", "partitioned", *extra]
    fw = "pyg" if "pyg" in extra else "dgl"
    res = run_config(tmp_path / "run", framework=fw, devices=1, epochs=1,
                     extra=[w for w in base if w not in ("--framework", "pyg")], timeout=120)
    assert res.returncode == 2 and message in res.stdout, res.stdout[-2000:]
    assert not (tmp_path / "run").exists()


def test_ip_config_must_name_this_host(hosts, tmp_path):  # noqa: F811
    """A node whose ip_config line is not its own address is refused, naming both."""
    h0, h1 = hosts.hosts
    ip_config = tmp_path / "ip_config.txt"
    ip_config.write_text(f"{h0.address} 30050\n{h0.address} 30050\n")  # node 1's line is host 0's address
    argv = runner_argv(tmp_path / "job", framework="dgl", devices=1, epochs=1, extra=[
        "--strategy", "partitioned", "--nnodes", "2", "--node-rank", "1", "--master-addr", h0.address,
        "--master-port", str(next(_ports)), "--ip-config", str(ip_config)])
    res = hosts.run(h1, ["env", f"PYTHONPATH={run_env()['PYTHONPATH']}", *argv], timeout=180, cwd=REPO)
    assert res.returncode == 2, res.stdout[-2000:]
    assert f"line 2 (node 1) says {h0.address}, but this host's address is {h1.address}" in res.stdout
    time.sleep(0.1)
    assert node_pids(hosts)[1] == []


def test_ip_config_from_slurm_refuses_unusable_addresses():
    """`--ip-config slurm` (runners.launch.slurm, the sweep's partitioned runs): outside a job step it
    says so; a NodeAddr that is or resolves to loopback here (a host's own 127.0.1.1 entry) or is
    no IPv4 address is refused naming the node and the value, never written into the list."""
    from runners.launch import slurm

    with pytest.raises(ConfigError, match="not inside a SLURM job step"):
        slurm.allocation({})
    assert slurm.address_of("n0", "10.231.7.10") == "10.231.7.10"
    # localhost from /etc/hosts, as a node's own name on 127.0.1.1 would resolve (no DNS query)
    with pytest.raises(ConfigError, match=r"SLURM node n0: NodeAddr localhost resolves to 127\.0\.0\.1 on this host"):
        slurm.address_of("n0", "localhost")
    with pytest.raises(ConfigError, match=r"SLURM node n1: NodeAddr 127\.0\.1\.1 is a loopback address"):
        slurm.address_of("n1", "127.0.1.1")
    with pytest.raises(ConfigError, match="SLURM node n1: NodeAddr fe80::1 is not an IPv4 address"):
        slurm.address_of("n1", "fe80::1")


@pytest.mark.parametrize("nodes, master, address, message", [
    ([("n0", "10.9.0.1")], "10.9.0.1", "10.9.0.1",
     r"the job has 1 nodes \(n0\) for --nnodes 2; one partition per node"),
    ([("n0", "10.9.0.1"), ("n1", "10.9.0.1")], "10.9.0.1", "10.9.0.1",
     r"nodes n0 and n1 both have the address 10\.9\.0\.1; each partition's host needs an address of its own"),
    ([("n0", "10.9.0.1"), ("n1", "10.9.0.2")], "10.9.0.2", "10.9.0.1",
     r"node 0 \(n0\) is at 10\.9\.0\.1, but --master-addr is 10\.9\.0\.2; start the run with scripts/slurm_node\.sh"),
    ([("n0", "10.9.0.1"), ("n1", "10.9.0.2")], "n0", "10.9.0.7",
     r"line 1 \(node 0\) says 10\.9\.0\.1, but this host's address is 10\.9\.0\.7"),
])
def test_slurm_allocation_that_cannot_serve_the_run_is_refused(nodes, master, address, message):
    """`--ip-config slurm`: an allocation that cannot serve the partitioned run is refused before
    anything starts, naming the nodes and values; one that can gives node k's address on line k."""
    import types

    from runners.partitioned.server import DGL_PORT, hosts_of_allocation

    cfg = types.SimpleNamespace(nodes=2, node_rank=0, master_addr=master)
    allocation = [{"name": n, "node_addr": n, "address": a} for n, a in nodes]
    with pytest.raises(ConfigError, match="--ip-config slurm: " + message):
        hosts_of_allocation(cfg, allocation, address)
    good = [{"name": "n0", "node_addr": "n0", "address": "10.9.0.1"},
            {"name": "n1", "node_addr": "n1", "address": "10.9.0.2"}]
    cfg.master_addr = "n0"  # node 0's NodeAddr, as scripts/slurm_node.sh gives it
    assert hosts_of_allocation(cfg, good, "10.9.0.1") == [("10.9.0.1", DGL_PORT), ("10.9.0.2", DGL_PORT)]


def _config(*extra, batch_size=8):
    argv = ["--framework", "dgl", "--model", "sage", "--devices", "1", "--batch-size", str(batch_size),
            "--workers", "0", "--dataset", "tiny", "--epochs", "1", "--data-root", str(DATA_ROOT), "--out", "/tmp/x",
            *extra]
    return config_from_args(build_parser().parse_args(argv), 0, 2)


def test_partitioned_memory_model_is_the_hosts_partition():
    """The pre-flight model of a partitioned host counts its partition, not the whole graph:
    from the partition's own files once made (tiny's real METIS partitions), from the graph's size
    over P before (an estimate within 2x of the files); where the graph outweighs the graph
    server (a graph of 2 million nodes x 602 features), the host's model is below the replicated
    run's, and a --memory-limit between them refuses the replicated point but not the partitioned."""
    from runners import datasets
    from runners.launch import preflight, dataset as run_dataset
    from runners.partitioned import server as partitioned, split as partitions

    point = ("--strategy", "partitioned", "--nnodes", "2", "--master-addr", "127.0.0.1",
             "--master-port", "29999", "--ip-config", "/dev/null")
    cfg = _config(*point, "--node-rank", "1", batch_size=128)
    meta = run_dataset.graph_meta(datasets.load(datasets.prepare("tiny", root=DATA_ROOT)))
    where = partitions.prepare("tiny", 2, "metis", data_root=DATA_ROOT, root=DATA_ROOT.parent / "partitions")
    files = partitions.read_manifest(where)["files"]
    model = preflight.memory_model(cfg, meta)
    assert model["inputs"]["partition_source"] == f"{where}/part1 (manifest sizes)"
    assert model["terms_bytes"]["partition"] == sum(i["bytes"] for f, i in files.items() if f.startswith("part1/"))
    replicated = model["replicated"]
    assert replicated["terms_bytes"]["dataset_shared"] == meta["dataset_bytes"]
    assert replicated["total_bytes"] == preflight.memory_model(_config(batch_size=128, *point[2:8]), meta)["total_bytes"]
    # before the partitions exist: the estimate (a dataset hash with no partitions under it)
    estimate = partitioned.model_peak(cfg, {**meta, "dataset_hash": "0" * 64})
    assert estimate["inputs"]["partition_source"].startswith("estimate")
    assert 0.5 < estimate["terms_bytes"]["partition"] / model["terms_bytes"]["partition"] < 2, (estimate, model)
    # a graph whose features dominate: the host's model is below the replicated run's
    n, e, feats = 2_000_000, 20_000_000, 602
    big = {**meta, "num_nodes": n, "num_edges": e, "num_features": feats, "num_train": n // 2,
           "dataset_bytes": (n + 1) * 8 + e * 8 + n * feats * 4 + n * 8, "adjacency_bytes": (n + 1) * 8 + e * 8,
           "dataset_hash": None}
    mine = partitioned.model_peak(cfg, big)
    assert mine["terms_bytes"]["partition"] < 0.6 * big["dataset_bytes"], mine["terms_bytes"]
    assert mine["total_bytes"] < mine["replicated"]["total_bytes"] - 0.2 * big["dataset_bytes"], mine
    limit = (mine["total_bytes"] + mine["replicated"]["total_bytes"]) // 2
    env = {"cpu_cores": 2, "memory_bytes": None}
    capped = ("--memory-limit", str(limit))
    assert preflight.impossible(_config(*point, *capped, batch_size=128), env, big) is None
    why = preflight.impossible(_config(*point[2:8], *capped, batch_size=128), env, big)
    assert why and why.startswith("the modelled peak host memory") and "exceeds the --memory-limit cap" in why


def test_replicated_keeps_a_runs_identity():
    """The default strategy stays out of a run's identity (run ids of earlier runs don't change);
    the partitioned strategy and its method are part of it, the hosts' addresses are not."""
    default, named = _config(), _config("--strategy", "replicated")
    assert default.identity("h") == named.identity("h")
    assert not {"strategy", "part_method", "ip_config"} & set(default.identity("h")["settings"])
    metis, rand = _config("--strategy", "partitioned"), _config("--strategy", "partitioned", "--part-method", "random")
    assert "-dgl-part-metis-sage-d1-" in metis.identity("h")["run_id"]
    assert len({default.identity("h")["digest"], metis.identity("h")["digest"], rand.identity("h")["digest"]}) == 3
    elsewhere = _config("--strategy", "partitioned", "--ip-config", "/elsewhere")
    assert elsewhere.identity("h") == metis.identity("h")
    with pytest.raises(ConfigError, match="--part-method random: partitions the graph for --strategy partitioned only"):
        _config("--part-method", "random")


def server_pid(hosts, host) -> int | None:  # noqa: F811
    import psutil

    for pid in hosts.pids(host):
        try:
            if "runners.adapters.dgl_dist" in " ".join(psutil.Process(pid).cmdline()):
                return pid
        except psutil.Error:
            continue
    return None


def run_until_host1_trains(hosts, out: Path, floors=(10, 10), victim_host=1) -> tuple:
    """A long partitioned run (stall limit `floors[k]` s on node k), started and waited on until
    node 1 has finished an epoch: (the nodes' launcher processes, host `victim_host`'s graph server pid)."""
    from tests.helpers import live_dir

    procs = start_partitioned(hosts, out, epochs=40,
                              node_extra={k: ["--stall-floor", str(f)] for k, f in enumerate(floors)})
    epochs = None
    for _ in range(600):  # until node 1 has finished an epoch: at most 600 polls, 120 s
        epochs = next(live_dir(out / "node1").glob("rank1/epochs.csv"), None)
        if epochs is not None and len(epochs.read_text().splitlines()) > 1:
            break
        time.sleep(0.2)
    assert epochs is not None, logs(out)
    victim = server_pid(hosts, hosts.hosts[victim_host])
    assert victim is not None, logs(out)
    return procs, victim


def test_killed_server_is_named_and_nothing_is_left(hosts, tmp_path):  # noqa: F811
    """Host 1's graph server is killed mid-run: node 1's run ends `crashed`, cause `lost_server`,
    naming the server, its host and the signal; node 0's run (its trainer lost the server and its
    peer) names the same server from node 1's result. Nothing is left running on either host."""
    import os
    import signal

    out = tmp_path / "job"
    procs, victim = run_until_host1_trains(hosts, out)
    h0, h1 = hosts.hosts
    os.kill(victim, signal.SIGKILL)
    assert [p.wait(timeout=RUN_TIMEOUT_S) for p in procs] == [0, 0], logs(out)
    r0, r1 = result_of(out), result_of(out / "node1")
    d1 = r1["diagnosis"]
    assert r1["status"] == "crashed" and d1["cause"] == "lost_server", d1
    assert d1["summary"].startswith(f"crashed: graph server 1 (partition 1, pid {victim}) on host {h1.hostname} "
                                    "died (SIGKILL)"), d1
    assert d1["lost_server"]["host"] == h1.hostname and d1["lost_server"]["signal"] == "SIGKILL"
    d0 = r0["diagnosis"]
    assert r0["status"] == "crashed" and d0["cause"] == "lost_server", d0
    assert d0["summary"].startswith(f"crashed: graph server 1 (partition 1, pid {victim}) on host {h1.hostname}"), d0
    assert r0["env"]["partitioned"]["server"]["stopped_by"] in ("the launcher", "shutdown request from the trainers")
    assert r0["epochs"] and not r0["summary"]  # what was measured is kept; no timing claimed
    assert node_pids(hosts) == {0: [], 1: []}
    assert not alive(r0["env"]["partitioned"]["server"]["pid"]) and not alive(victim)


def test_server_killed_on_node0_is_named_by_node1_too(hosts, tmp_path):  # noqa: F811
    """issue 56: host 0's graph server is killed mid-run (what the OOM killer does). Node 0 names it
    (`lost_server`); node 1's trainer, left waiting on it over RPC with no loader worker, adopts
    node 0's cause instead of blaming a loader worker the run does not have."""
    import os
    import signal

    out = tmp_path / "job"
    procs, victim = run_until_host1_trains(hosts, out, floors=(10, 5), victim_host=0)
    h0, _ = hosts.hosts
    os.kill(victim, signal.SIGKILL)
    assert [p.wait(timeout=RUN_TIMEOUT_S) for p in procs] == [0, 0], logs(out)
    r0, r1 = result_of(out), result_of(out / "node1")
    named = f"crashed: graph server 0 (partition 0, pid {victim}) on host {h0.hostname} died (SIGKILL)"
    d0, d1 = r0["diagnosis"], r1["diagnosis"]
    assert r0["status"] == "crashed" and d0["cause"] == "lost_server" and d0["summary"].startswith(named), d0
    assert r1["status"] == "crashed" and d1["cause"] == "lost_server", d1
    assert d1["summary"].startswith(named) and "node 0's result; node 1's trainers lost it" in d1["summary"], d1
    assert d1["lost_server"]["host"] == h0.hostname and d1["lost_server"]["pid"] == victim, d1
    assert "worker" not in (d1.get("previous_cause") or ""), d1
    assert node_pids(hosts) == {0: [], 1: []}
    assert not alive(victim) and not alive(r1["env"]["partitioned"]["server"]["pid"])


@pytest.mark.parametrize("floors", [(10, 10), (10, 40)], ids=["same-limit", "node0-first"])
def test_stopped_server_is_named_and_nothing_is_left(hosts, tmp_path, floors):  # noqa: F811
    """Host 1's graph server is stopped (SIGSTOP) mid-run, alive but serving nothing: the trainers
    wait until the watchdog's stall limit (10 s here). Node 1's run ends `hang`, cause
    `stalled_server`, naming the server, its partition, pid and host from its process state; node
    0's (its trainer waited for that server over RPC) names the same server from node 1's result.
    The stopped server is killed by its launcher: nothing is left running on either host.
    `node0-first`: node 0's watchdog fires long before node 1's, and node 1's trainer may crash
    on the peer it lost (CI found this race): node 1 still says `hang`, `stalled_server`."""
    import os
    import signal

    out = tmp_path / "job"
    procs, victim = run_until_host1_trains(hosts, out, floors)
    h0, h1 = hosts.hosts
    os.kill(victim, signal.SIGSTOP)
    try:
        assert [p.wait(timeout=RUN_TIMEOUT_S) for p in procs] == [0, 0], logs(out)
        r0, r1 = result_of(out), result_of(out / "node1")
        named = (f"hang: graph server 1 (partition 1, pid {victim}) on host {h1.hostname} stopped making progress "
                 "(stopped)")
        d1 = r1["diagnosis"]
        assert r1["status"] == "hang" and d1["cause"] == "stalled_server", d1
        assert d1["summary"].startswith(named), d1
        stalled = d1["stalled_server"]
        assert (stalled["node"], stalled["host"], stalled["pid"], stalled["state"]) == (1, h1.hostname, victim,
                                                                                       "stopped"), stalled
        assert "process state 'stopped'" in d1["evidence"][0], d1["evidence"]
        # the watchdog's limit when node 1's own watchdog found the hang; none when its trainer crashed first
        assert d1["previous_cause"] != "stalled_server"
        assert d1["previous_status"] == "crashed" or d1["threshold_s"] >= floors[1], d1
        server = r1["env"]["partitioned"]["server"]
        assert server["stopped_by"] == "the launcher (stalled)" and server["signal"] == "SIGKILL", server
        d0 = r0["diagnosis"]
        # Node 0's own watchdog usually fires first (`hang`); when node 1's launcher kills the
        # stopped server before it does, node 0's trainer may fail on the lost connection
        # (`crashed`). Either way node 1's result names the server, and node 0 adopts it.
        assert r0["status"] in ("hang", "crashed") and d0["cause"] == "stalled_server", d0
        assert d0["summary"].startswith(named) and "node 1's result" in d0["summary"], d0
        assert d0["stalled_server"]["pid"] == victim
        # node 0's own server kept running: stopped by its launcher, not diagnosed
        assert r0["env"]["partitioned"]["server"]["stopped_by"] in ("the launcher",
                                                                   "shutdown request from the trainers")
        assert r0["epochs"] and not r0["summary"]  # what was measured is kept; no timing claimed
        assert node_pids(hosts) == {0: [], 1: []}
        assert not alive(victim) and not alive(r0["env"]["partitioned"]["server"]["pid"])
    finally:
        if alive(victim):  # whatever failed above, no stopped process outlives the test
            os.kill(victim, signal.SIGKILL)


def _server_process(tmp_path, command: str):
    """A Server around a real process (`sh -c command`, in its own process group as the graph
    server is), whose trainers' starter is a process with no children (its trainers ended)."""
    import sys
    import types

    from runners.partitioned.server import Server

    proc = subprocess.Popen(["sh", "-c", command], start_new_session=True)
    starter = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    cfg = types.SimpleNamespace(node_rank=1, nodes=1)  # one node: no other node's result to read
    server = Server(cfg=cfg, proc=proc, log_path=tmp_path / "server1.log", started_t=time.time(), host="h1")
    server.trainers_root = starter.pid
    return server, proc, starter


@pytest.mark.parametrize("command, signal_name, died", [
    ("sleep 60", "SIGKILL", True),   # killed from outside after its trainers ended: still the cause
    ("sleep 60", "SIGTERM", True),
    ("exit 3", None, False),         # an error after its trainers ended may be their consequence
    ("kill -ABRT $$", None, False),  # so may an abort
])
def test_server_death_is_kept_though_its_trainers_ended_first(tmp_path, command, signal_name, died):
    """The launcher's sampler looks every 0.5 s: a server killed just after its trainers ended
    (they had lost it) is found by stop() all the same, and is the run's cause (`lost_server`)
    over the peers the trainers lost; the launcher stops nothing of its own first."""
    import os
    import signal

    from runners.partitioned.server import ServerFacts
    from runners.watch.diagnosis import Outcome, apply_overrides

    server, proc, starter = _server_process(tmp_path, command)
    try:
        if signal_name:
            os.kill(proc.pid, getattr(signal, signal_name))
        proc.wait(timeout=10)
        ended = server.stop(grace_s=1.0)
        assert (server.died is not None) is died, server.died
        assert ended["stopped_by"] == ("died mid-run" if died else "shutdown request from the trainers"), ended
        lost_node = {"summary": "crashed: lost node 0 (...)", "cause": "lost_node", "ranks": [], "evidence": []}
        outcome = Outcome("crashed", dict(lost_node))
        outcome.findings.server = ServerFacts(server, tmp_path, "")
        apply_overrides(outcome)
        assert outcome.diagnosis["cause"] == ("lost_server" if died else "lost_node"), outcome.diagnosis
        if died:
            assert outcome.diagnosis["lost_server"]["signal"] == signal_name
            finished = Outcome("ok", None)
            finished.findings.server = ServerFacts(server, tmp_path, "")
            apply_overrides(finished)  # a run that finished stands whatever its server did after
            assert finished.status == "ok" and finished.diagnosis is None
    finally:
        starter.kill()
        starter.wait()
