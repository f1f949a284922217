"""The workflow and the runner under a real SLURM scheduler: a private single-node cluster
(the `slurm` fixture, tests/slurm_cluster.py; skipped with the reason where it cannot start),
and a two-node one across network-namespace hosts (`slurm_hosts`, with tests/netns_hosts.py).

- a multi-node run as SLURM runs it (one job, 2 tasks, one torchrun agent per task);
- SLURM's limits (time limit, scancel) leave results;
- on two hosts: the sweep submitted job by job through profiles/slurm with the SLURM executor,
  its multi-node replicated run, one task per host, beside its partitioned (DistDGL) point with
  the ip_config made from the job's nodes, and the report naming each run's job; a node killed
  mid-run.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import jsonschema

from runners.records import history
from tests import netns_hosts, slurm_cluster
from tests.helpers import free_port, live_dir, runner_argv
from tests.test_workflow import SNAKEMAKE, job_counts, minimal_with, project_copy
from runners.records.result import schema as result_schema

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def proj(tmp_path):
    return project_copy(tmp_path)


def sweep(cluster, proj, cfg: dict, run_threads: int, *extra):
    """The sweep of `cfg` through profiles/slurm, run where the cluster's clients run.
    The profile as a user runs it, sized down to a CPU test cluster: no GPUs, `run_threads`
    CPUs and little memory per job, no whole-node allocation, and a quick first status check.
    (CompletedProcess, seconds)."""
    (proj / "sweep.yaml").write_text(yaml.safe_dump(cfg))
    t0 = time.time()
    res = subprocess.run(cluster.argv(
        [SNAKEMAKE, "-s", str(proj / "Snakefile"), "--directory", str(proj),
         "--workflow-profile", str(proj / "profiles" / "slurm"),
         "--slurm-init-seconds-before-status-checks", "1",
         "--set-threads", f"run={run_threads}", "dataset=1", "partitions=1",
         "--set-resources", "run:mem_mb=2000", "run:slurm_extra=''", "dataset:mem_mb=2000",
         "partitions:mem_mb=2000",
         "--configfile", str(proj / "sweep.yaml"), "--config", "request_gpus=False", *extra]),
        cwd=proj, env=cluster.env, capture_output=True, text=True, timeout=900)
    return res, time.time() - t0


SCHEMA = result_schema()


def submit(slurm, tmp_path, name, command, *sbatch_args):
    """sbatch a bash script that runs `command` (a list of shell words) from the checkout;
    returns the job id. Its output goes to NAME.out beside it."""
    script = tmp_path / f"{name}.sh"
    script.write_text(f"#!/bin/bash\ncd {ROOT}\nexport PYTHONPATH={ROOT}\n{' '.join(command)}\n")
    res = slurm.run("sbatch", "--parsable", "-J", name, "-o", str(tmp_path / f"{name}.out"), *sbatch_args,
                    str(script))
    return res.stdout.strip().split(";")[0]


def job_state(slurm, job_id):
    """The job's state while squeue still lists it (MinJobAge), else ""."""
    return slurm.run("squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T", check=False).stdout.strip()


# squeue's states of a job that has ended (job_state's "" too: squeue no longer lists it).
JOB_ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
             "DEADLINE", "PREEMPTED")


def wait_until(what, predicate, timeout=240):
    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def epochs_done(out, rank=0):
    """Epochs rank `rank` of the run of `out` has finished (in its staging directory while it runs)."""
    path = live_dir(out) / f"rank{rank}" / "epochs.csv"
    return max(0, len(path.read_text().splitlines()) - 1) if path.exists() else 0


def test_slurm_limits_leave_results(slurm, tmp_path):
    """SLURM's time limit and scancel SIGTERM the launcher (inside srun's step and in the batch
    step alike): each run stops within KillWait as `interrupted`, keeps every epoch it
    finished, and says which of the two it was (the job state slurmctld had already set)."""
    outs = {name: tmp_path / name for name in ("timelimit", "scancel")}
    long_run = ["--max-steps-per-epoch", "2", "--time-limit", "3600"]
    jobs = {
        # srun inside the batch script, as the SLURM executor runs a rule
        "timelimit": submit(slurm, tmp_path, "timelimit", ["srun"] + runner_argv(
            outs["timelimit"], devices=1, epochs=100000, extra=long_run), "-c1", "--time=10"),
        # the runner straight in the batch script
        "scancel": submit(slurm, tmp_path, "scancel", runner_argv(
            outs["scancel"], devices=1, epochs=100000, extra=long_run), "-c1", "--time=10"),
    }
    try:
        for name, out in outs.items():
            wait_until(f"{name}: two finished epochs", lambda: epochs_done(out) >= 2)
    except BaseException:
        slurm.run("scancel", *jobs.values(), check=False)  # a failure here must not hold the cluster for later tests
        raise
    # The limit becomes 1 minute once the run has measured something, so it has whatever the
    # machine's speed; slurmctld then ends the job as TIMEOUT at its next time-limit check.
    slurm.run("scontrol", "update", f"JobId={jobs['timelimit']}", "TimeLimit=1")
    slurm.run("scancel", jobs["scancel"])
    wait_until("both jobs to end", lambda: all(
        job_state(slurm, j) in ("", "TIMEOUT", "CANCELLED", "COMPLETED", "FAILED") for j in jobs.values()), 300)
    # the state may already read COMPLETING when the signal comes; the reason does not change
    expected = {"timelimit": ("job_reason", "TimeLimit", "time limit"),
                "scancel": ("job_state", "CANCELLED", "scancel")}
    for name, out in outs.items():
        log = (tmp_path / f"{name}.out").read_text()
        # interrupted: no finished output of the point; the run is kept under previous/
        assert not (out / "result.json").exists() and history.history(out), log[-3000:]
        (out, _), = history.history(out)
        r = json.loads((out / "result.json").read_text())
        jsonschema.validate(r, SCHEMA)
        assert r["status"] == "interrupted", (name, r["diagnosis"])
        d = r["diagnosis"]
        key, state, why = expected[name]
        assert d["signal"]["signal"] == "SIGTERM", d["signal"]
        assert d["signal"]["slurm"]["SLURM_JOB_ID"] == jobs[name] == r["env"]["scheduler"]["job_id"]
        assert d["signal"]["slurm"][key] == state and why in d["summary"], (d["summary"], d["signal"])
        assert len(r["epochs"]) >= 2 and len(r["epochs"]) == epochs_done(out)
        assert r["watchdog"]["survivors"] == [], r["watchdog"]
        assert f"result: {out / 'result.json'}" in log
        print(f"\n[slurm] {name}: {state}, {len(r['epochs'])} epochs kept, {r['wall_time_s']:.0f} s after launch")


def test_slurm_two_task_job_is_one_two_node_run(slurm, tmp_path):
    """A multi-node run the way SLURM starts it: one job of 2 tasks, one runner (torchrun agent)
    per task through scripts/slurm_node.sh (node rank = SLURM_PROCID, master = the job's first
    host). On one host here, but the code path of a 2-node job; the analysis merges the ranks."""
    out = tmp_path / "job"
    argv = runner_argv(out, framework="dgl", devices=1, epochs=2,
                       extra=["--max-steps-per-epoch", "3", "--nnodes", "2", "--master-port", str(free_port())])
    job = submit(slurm, tmp_path, "twonode", ["srun", str(ROOT / "scripts" / "slurm_node.sh")] + argv,
                 "-n2", "-c1", "--time=10")
    # Polled here rather than with `sbatch --wait`, whose checks come 2, 10 and 42 s after the
    # submission (its sleep grows 2, 8, 32 s): a job of about 20 s was seen to end at 42 s.
    wait_until("the two-task job to end", lambda: job_state(slurm, job) in ("",) + JOB_ENDED)
    log = (tmp_path / "twonode.out").read_text()
    r0 = json.loads((out / "result.json").read_text())
    r1 = json.loads((out / "node1" / "result.json").read_text())
    assert r0["status"] == r1["status"] == "ok", log[-3000:]
    assert [r["rank"] for r in r0["ranks"]] == [0] and [r["rank"] for r in r1["ranks"]] == [1]
    s0, s1 = r0["env"]["scheduler"], r1["env"]["scheduler"]
    assert s0["job_id"] == s1["job_id"] == job and (s0["procid"], s1["procid"]) == ("0", "1")
    assert s0["ntasks"] == "2" and s0["nodelist"] == slurm.host
    assert r0["config"]["master_addr"] == slurm.host and r0["config"]["nodes"] == 2
    assert len(r0["summary"]["rank_train_times_s"]) == 2  # node 0 knows the other node's rank
    agg = tmp_path / "aggregate"
    res = subprocess.run([sys.executable, "-m", "analysis.aggregate", "--out-dir", str(agg), str(out)],
                         cwd=ROOT, env={**slurm.env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    import pandas as pd

    runs = pd.read_csv(agg / "runs.csv")
    assert len(runs) == 1 and runs["status"][0] == "ok" and runs["world_size"][0] == 2
    assert sorted(set(pd.read_csv(agg / "epochs.csv")["rank"])) == [0, 1]
    assert len(pd.read_csv(agg / "invalid.csv")) == 0


# -- two nodes: a slurmd on each of two namespace hosts ----------------------------------------

@pytest.fixture(scope="module")
def slurm_hosts(tmp_path_factory):
    """A cluster across three namespace hosts (tests/netns_hosts.py): two compute nodes, each
    with its own slurmd, hostname and address, and a head node with munged and slurmctld,
    where the clients and Snakemake run. A silent slurmd is DOWN after 10 s, so that a lost
    node ends its job quickly. Each compute host has a /dev/shm of its own, as real hosts do
    (DistDGL's servers name their shared memory after the graph). Afterwards nothing may be
    left: no namespace, link, daemon or any process that ran in a host."""
    reason = netns_hosts.why_not() or slurm_cluster.why_not()
    if reason:
        pytest.skip(reason)
    cluster = slurm_cluster.Cluster(tmp_path_factory.mktemp("slurm-hosts"), slurmd_timeout_s=10, private_shm=True,
                                    hosts=netns_hosts.Hosts(3, prefix=f"{netns_hosts.Hosts().prefix}s"))
    try:
        try:
            cluster.start()
        except slurm_cluster.Unavailable as exc:
            pytest.skip(f"could not start a SLURM cluster across namespace hosts: {exc}")
        yield cluster
    finally:
        cluster.stop()
        left = cluster.leftovers()
        assert not left, f"the two-node cluster left {left}"


def check_two_node_run(cluster, run_dir, ranks_per_node: int) -> dict:
    """A replicated run of the sweep across the two hosts: one job of one task per node (srun +
    scripts/slurm_node.sh), each task a torchrun agent, both nodes ok; the results name both
    hosts, their addresses, the link's interface for gloo and NCCL (on node 0 too, where the
    master's name resolves to 127.0.1.1), and the job. Node 0's result."""
    h0, h1 = cluster.nodes
    r0, r1 = (json.loads(p.read_text()) for p in (run_dir / "result.json", run_dir / "node1" / "result.json"))
    assert r0["status"] == r1["status"] == "ok", (r0.get("diagnosis"), r1.get("diagnosis"))
    s0, s1 = r0["env"]["scheduler"], r1["env"]["scheduler"]
    assert s0["job_id"] == s1["job_id"] and s0["ntasks"] == s1["ntasks"] == "2", s0
    # one task per node: task k on node k, on host k
    assert [(s["procid"], s["nodeid"]) for s in (s0, s1)] == [("0", "0"), ("1", "1")]
    assert cluster.run("scontrol", "show", "hostnames", s0["nodelist"]).stdout.split() == [h0.hostname, h1.hostname]
    assert (r0["env"]["hostname"], r1["env"]["hostname"]) == (h0.hostname, h1.hostname)
    by_host = {h0.hostname: list(range(ranks_per_node)), h1.hostname: list(range(ranks_per_node, 2 * ranks_per_node))}
    for r, h in ((r0, h0), (r1, h1)):
        net = r["env"]["network"]
        assert (net["address"], net["interface"], net["master_addr"]) == (h.address, netns_hosts.IFNAME, h0.address), net
        assert net["ranks_by_host"] == by_host and net["all_ranks_known"], net
        rank_env = r["env"]["rank_env_vars"]
        assert (rank_env["GLOO_SOCKET_IFNAME"], rank_env["NCCL_SOCKET_IFNAME"]) == (
            netns_hosts.IFNAME, f"={netns_hosts.IFNAME}"), rank_env
    assert len(r0["summary"]["rank_train_times_s"]) == 2 * ranks_per_node
    return r0


def slurmd_pid(cluster, host) -> int:
    return cluster.procs[f"slurmd-{host.hostname}"][0]


def test_slurm_partitioned_sweep_across_two_hosts(slurm_hosts, proj):
    """The sweep through profiles/slurm, job by job, with the `strategy` block (DistDGL, 2 partitions by METIS,
    `nodes: 2`, 2 repeats) beside the grid's replicated point, which runs across both hosts as one
    job of one task per node (check_two_node_run): the `partitions` rule runs as a job
    of its own, each partitioned run as one job with one task per node, each node's launcher
    making DGL's ip_config from the job's nodes (their NodeAddr in node order: partition k on
    node k). The repeats follow each other on the same nodes and DGL port. Both nodes of each run
    `ok`, the runs learn, each host served its own partition, nothing is left on either host,
    the report's run list names each run's job and nodes, and its "replicated vs partitioned"
    section holds both strategies."""
    import pandas as pd

    cluster = slurm_hosts
    h0, h1 = cluster.nodes
    cfg = minimal_with(**{"grid.frameworks": ["dgl"], "grid.devices": [1], "nodes": 2, "epochs": 4,
                          "models.sage.hidden": 64, "time_limit_s": 240,
                          "strategy": {"method": "metis", "devices": [1], "batch_size": 64, "repeats": 2}})
    # Every CPU of a node per run: the runs take turns on the nodes, as the profile's
    # --exclusive (dropped here) would have them, instead of sharing node 0's master port.
    res, sweep_s = sweep(cluster, proj, cfg, cluster.cpus)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    assert job_counts(out).get("partitions") == 1 and job_counts(out).get("run") == 3, out[-3000:]
    assert (proj / "results/partitions/tiny-p2-metis.json").exists()
    runs = proj / "results/runs/tiny"
    jobs = [runs / f"part-metis-dgl-sage-d1-b64-w0-r{k}" for k in (0, 1)]
    # (each point's lock file, .NAME.lock, stays beside it: runners.launch.pointlock)
    assert sorted(p.name for p in runs.iterdir() if not p.name.endswith(".lock")) == \
        ["dgl-sage-d1-b64-w0-r0"] + [j.name for j in jobs]
    # The grid's replicated point runs across both hosts too (`nodes: 2`).
    check_two_node_run(cluster, runs / "dgl-sage-d1-b64-w0-r0", ranks_per_node=1)
    lines = [f"{h0.address} 30050", f"{h1.address} 30050"]
    pids, job_ids, accs = [], set(), []
    for job in jobs:
        r0, r1 = (json.loads(p.read_text()) for p in (job / "result.json", job / "node1" / "result.json"))
        assert r0["status"] == r1["status"] == "ok", (job.name, r0.get("diagnosis"), r1.get("diagnosis"))
        s0, s1 = r0["env"]["scheduler"], r1["env"]["scheduler"]
        assert s0["job_id"] == s1["job_id"] and s0["ntasks"] == s1["ntasks"] == "2", s0
        assert [(s["procid"], s["nodeid"]) for s in (s0, s1)] == [("0", "0"), ("1", "1")]
        assert (r0["env"]["hostname"], r1["env"]["hostname"]) == (h0.hostname, h1.hostname)
        job_ids.add(s0["job_id"])
        for r, h, d in ((r0, h0, job), (r1, h1, job / "node1")):
            part = r["env"]["partitioned"]
            # the ip_config each node made: both hosts' own addresses (never 127.0.1.1), in node order
            ipc = part["ip_config"]
            assert ipc["source"].startswith("slurm allocation") and ipc["job_id"] == s0["job_id"], ipc
            assert [(n["name"], n["address"]) for n in ipc["nodes"]] == [(h0.hostname, h0.address),
                                                                         (h1.hostname, h1.address)], ipc
            assert ipc["lines"] == lines and (d / ipc["copy"]).read_text().splitlines() == lines
            assert [x["address"] for x in part["hosts"]] == [h0.address, h1.address]
            assert r["config"]["ip_config"] == "slurm" and r["config"]["strategy"] == "partitioned"
            # each host served its own partition, and its trainer trained that partition's seeds
            assert r["config"]["adapter_choices"]["trainer_partition"] == h.index
            server = part["server"]
            assert server["host"] == h.hostname and server["exit_code"] == 0, server
            assert server["stopped_by"] == "shutdown request from the trainers", server
            pids.append(server["pid"])
        assert r0["env"]["network"]["ranks_by_host"] == {h0.hostname: [0], h1.hostname: [1]}
        # It learns: above the features-only baseline on the validation split.
        s, ref = r0["summary"], r0["accuracy_reference"]
        assert s["final_val_acc"] > ref["baseline_val_acc"] and s["converged"] is True, (s["final_val_acc"], ref)
        accs.append(f"{s['final_val_acc']:.3f} ({r0['wall_time_s']:.0f} s)")
        pids += [json.loads(f.read_text())["pid"] for f in [*job.glob("rank*/rank.json"),
                                                            *job.glob("node1/rank*/rank.json")]]
    assert len(job_ids) == 2 and len(pids) == 8
    # Nothing left: each host runs its slurmd only; the servers and trainers are gone, and so is
    # the servers' shared memory in each host's /dev/shm.
    for h in (h0, h1):
        wait_until(f"{h.hostname} to be idle", lambda h=h: cluster.hosts.pids(h) == [slurmd_pid(cluster, h)], 30)
        assert os.listdir(f"/proc/{slurmd_pid(cluster, h)}/root/dev/shm") == [], h.hostname
    assert not [p for p in pids if slurm_cluster._alive(p, slurm_cluster._start_time(p))]
    # The report's run list names each run's own job and its nodes; its environment, the scheduler.
    replicated = json.loads((runs / "dgl-sage-d1-b64-w0-r0" / "result.json").read_text())["env"]["scheduler"]
    listed = pd.read_csv(proj / "results/report/runs.csv", dtype=str)
    assert sorted(listed["job"]) == sorted(f"slurm {j}" for j in job_ids | {replicated["job_id"]})
    assert set(listed["nodes"]) == {s0["nodelist"]} == {replicated["nodelist"]}, listed["nodes"]
    env_table = pd.read_csv(proj / "results/report/environment.csv", dtype=str).set_index("setting")["value"]
    assert env_table["batch scheduler"] == "slurm"
    # The report's section: DGL replicated beside partitioned at the point, both measured.
    table = pd.read_csv(proj / "results/report/partitioned.csv")
    dgl = table[table["framework"] == "dgl"].set_index("strategy")
    assert list(dgl.index) == ["replicated", "partitioned (metis)"], table
    assert list(dgl["n_ok"]) == [1, 2] and (dgl["epoch_s"] > 0).all() and (dgl["host_bytes"] > 0).all(), dgl
    assert dgl.loc["partitioned (metis)", "epoch_ratio"] > 0 and dgl.loc["partitioned (metis)", "host_ratio"] > 0
    html = (proj / "results/report/index.html").read_text()
    section = html[html.index('<section id="partitioned">'):]
    assert "partitioned (metis) (2)" in section[:section.index("</section>")]
    print(f"\n[slurm] partitioned sweep (dataset, partitions, a replicated and two partitioned 2-node runs, "
          f"report): {sweep_s:.1f} s; partitioned runs' val acc (wall) {', '.join(accs)}, baseline "
          f"{ref['baseline_val_acc']:.3f}")


def test_slurm_node_killed_mid_run(slurm_hosts, tmp_path):
    """Node 1 of a running two-node job dies: its slurmd, step daemon, runner and rank, killed
    at once. Node 0's run ends `crashed`, cause `lost_node`, naming node 1's host and address;
    SLURM ends the job NODE_FAIL, and nothing of the job is left on node 0 (its slurmd only).
    Last in this module: node 1 stays down."""
    cluster = slurm_hosts
    h0, h1 = cluster.nodes
    out = tmp_path / "job"
    argv = runner_argv(out, framework="dgl", devices=1, epochs=40, extra=[
        "--stall-floor", "5", "--nnodes", "2", "--master-port", str(free_port())])
    job = submit(cluster, tmp_path, "lost", ["srun", "--nodes=2", "--ntasks-per-node=1",
                                            str(ROOT / "scripts" / "slurm_node.sh")] + argv,
                 "--nodes=2", "--ntasks-per-node=1", "-c1", "--time=10")
    try:
        wait_until("node 0's first epoch", lambda: epochs_done(out) >= 1)
    except BaseException:
        cluster.run("scancel", job, check=False)
        raise
    assert cluster.hosts.kill_all(h1) and not cluster.hosts.pids(h1)
    killed_t = time.time()
    wait_until("node 0's result", lambda: (out / "result.json").exists())
    result_s = time.time() - killed_t
    log = (tmp_path / "lost.out").read_text()
    r0 = json.loads((out / "result.json").read_text())
    jsonschema.validate(r0, SCHEMA)
    d = r0["diagnosis"]
    assert r0["status"] == "crashed" and d["cause"] == "lost_node", (d, log[-3000:])
    assert d["lost_nodes"] == [{"node": 1, "host": h1.hostname, "address": h1.address, "ranks": [1]}], d
    assert d["summary"].startswith(f"crashed: lost node 1 (host {h1.hostname}, {h1.address}, rank 1)"), d
    assert r0["env"]["scheduler"]["job_id"] == job
    wait_until("SLURM to end the job", lambda: job_state(cluster, job) not in ("RUNNING", "COMPLETING"), 120)
    assert job_state(cluster, job) == "NODE_FAIL", log[-3000:]
    ended_s = time.time() - killed_t
    # Nothing of the job is left on node 0: its ranks, torchrun, runner, srun and step daemons are gone.
    wait_until("node 0 to be idle", lambda: cluster.hosts.pids(h0) == [slurmd_pid(cluster, h0)], 30)
    print(f"\n[slurm] node 1 killed: node 0's result {result_s:.1f} s later, the job NODE_FAIL {ended_s:.1f} s later")
