"""Memory per host: the partitioned strategy (DistDGL, one partition per host) against the
replicated one (DDP, the whole graph on every host), across the two hosts of tests/netns_hosts.py.

    .venv/bin/python -m benchmarks.partitioned_memory --dataset wide --out results/bench/partitioned-memory.json

Four real runs, each 2 hosts x 1 trainer (DGL GraphSAGE, the same settings): replicated and
partitioned on DATASET, and both again on `tiny`, whose graph is negligible, so that what the
processes cost without a graph (torch, DGL, the graph server's own process) is known. Each
host's memory is sampled from outside every 0.5 s: the PSS of its trainer (runners.rank.harness) and
graph server (runners.adapters.dgl_dist serve) together, as the physical pages they have
resident, each counted once per host (HostSampler: the test hosts share one kernel and page
cache, where PSS would split a dataset page between the two hosts' ranks); its peak is the
worst sample. A host's graph memory is measured two ways: its peak on DATASET minus its peak on
tiny (everything the graph costs, batches and DistDGL's buffers included), and the pages of its
mappings of graph data alone (the dataset's files, the host's /dev/shm: DistDGL's partition). Needs root
(network namespaces, /proc/PID/pagemap).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil

from runners.adapters import registry
from runners.records.rundir import RunDir
from tests import netns_hosts
from tests.helpers import REPO, run_env

# The framework with a partitioned strategy (its registry entry names the adapter; DGL's DistDGL).
PARTITIONED = next(f.name for f in registry.FRAMEWORKS.values() if f.partitioned_adapter)
ROLES = ("runners.rank.harness", registry.framework(PARTITIONED).partitioned_adapter)


PAGE = 4096
PFN_MASK = (1 << 55) - 1
PRESENT = 1 << 63


def resident_frames(pid: int, graph_paths: tuple) -> tuple:
    """The physical page frames a process has resident (from /proc/PID/pagemap, root only):
    (all of them, those of its graph-data mappings: the dataset's files, DistDGL's shared memory)."""
    ranges = []
    with open(f"/proc/{pid}/smaps") as fh:
        current = None
        for line in fh:
            words = line.split(maxsplit=5)
            if len(words) >= 5 and "-" in words[0] and ":" in words[3]:  # a mapping's header
                lo, hi = (int(x, 16) for x in words[0].split("-"))
                current = (lo, hi, len(words) == 6 and words[5].strip().startswith(graph_paths))
            elif line.startswith("Rss:") and int(words[1]) > 0 and current is not None:
                ranges.append(current)
    every, graph = [], []
    with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for lo, hi, is_graph in ranges:
            pagemap.seek(lo // PAGE * 8)
            entries = np.frombuffer(pagemap.read((hi - lo) // PAGE * 8), dtype=np.uint64)
            frames = entries[(entries & np.uint64(PRESENT)) != 0] & np.uint64(PFN_MASK)
            every.append(frames)
            if is_graph:
                graph.append(frames)
    return every, graph


class HostSampler(threading.Thread):
    """One host's memory as a machine of its own would hold it: every physical page that its
    trainers and graph servers have resident, counted once (the test hosts share one kernel, so
    PSS would split a page cache page between the hosts' processes), and of them the pages of
    graph data. The worst sample of each."""

    def __init__(self, hosts, host, dataset_dir: str):
        super().__init__(daemon=True)
        self.hosts, self.host = hosts, host
        self.graph_paths = (dataset_dir, "/dev/shm/")  # DistDGL names shm files after the graph and its data
        self.peak = self.graph_peak = self.samples = 0
        self.stop = threading.Event()

    def run(self):
        while not self.stop.wait(0.5):
            every, graph = [], []
            for pid in self.hosts.pids(self.host):
                try:
                    if any(role in " ".join(psutil.Process(pid).cmdline()) for role in ROLES):
                        e, g = resident_frames(pid, self.graph_paths)
                        every += e
                        graph += g
                except (psutil.Error, OSError, ValueError):
                    continue
            total = len(np.unique(np.concatenate(every))) * PAGE if every else 0
            in_graph = len(np.unique(np.concatenate(graph))) * PAGE if graph else 0
            self.peak, self.graph_peak = max(self.peak, total), max(self.graph_peak, in_graph)
            self.samples += 1


def one_run(hosts, work: Path, strategy: str, dataset: str, args, port: int) -> dict:
    """Both hosts' launchers for one configuration; each host's peak and node 0's result."""
    out = work / f"{strategy}-{dataset}"
    h0 = hosts.hosts[0]
    ip_config = work / f"ip-{port}.txt"
    ip_config.write_text("".join(f"{h.address} {port + 1}\n" for h in hosts.hosts))
    samplers = [HostSampler(hosts, h, str(Path(args.data_root).resolve() / dataset)) for h in hosts.hosts]
    for s in samplers:
        s.start()
    procs = []
    for h in hosts.hosts:
        argv = [sys.executable, "-m", "runners.run", "--framework", PARTITIONED, "--model", "sage", "--devices", "1",
                "--batch-size", str(args.batch_size), "--workers", "0", "--dataset", dataset, "--epochs",
                str(args.epochs), "--fanouts", args.fanouts, "--layers", str(len(args.fanouts.split(","))),
                "--max-steps-per-epoch", str(args.max_steps), "--hidden", str(args.hidden), "--data-root", args.data_root, "--out", str(out),
                "--nnodes", "2", "--node-rank", str(h.index), "--master-addr", h0.address, "--master-port",
                str(port), "--strategy", strategy, "--force-launch"]
        argv += ["--ip-config", str(ip_config)] if strategy == "partitioned" else []
        log = open(work / f"{strategy}-{dataset}-node{h.index}.log", "w")
        procs.append(hosts.popen(h, ["env", f"PYTHONPATH={run_env()['PYTHONPATH']}", *argv], private_shm=True,
                                 cwd=REPO, stdout=log, stderr=subprocess.STDOUT))
        log.close()
    codes = [p.wait(timeout=args.timeout) for p in procs]
    for s in samplers:
        s.stop.set()
        s.join()
    result = json.loads(RunDir(out).result.read_text())
    return {"codes": codes, "status": result["status"], "run_id": result["run_id"],
            "peak_bytes_by_host": [s.peak for s in samplers], "samples": [s.samples for s in samplers],
            "graph_mapped_peak_bytes_by_host": [s.graph_peak for s in samplers],
            "result_memory": result.get("memory", {}).get("peak_bytes"),
            "launcher_host_peak_bytes": ((result["env"].get("partitioned") or {}).get("server") or {})
            .get("memory", {}).get("host_peak_bytes"),
            "final_val_acc": (result.get("summary") or {}).get("final_val_acc")}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="wide")
    p.add_argument("--data-root", default=str(REPO / "results" / "datasets"))
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--fanouts", default="5,5")
    p.add_argument("--max-steps", type=int, default=40,
                   help="steps per epoch at most (0: the whole split); 40 x 1024 seeds with fan-outs 5,5 reach "
                   "nearly every node of `wide`, so a replicated rank touches nearly all of its graph")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--out", required=True)
    return p.parse_args(argv)


def all_runs(hosts, args) -> dict:
    """STRATEGY/DATASET -> one_run's record, for both strategies on DATASET and on tiny."""
    runs = {}
    with tempfile.TemporaryDirectory(prefix="gn-partmem-") as tmp:
        port = 29700
        for dataset in (args.dataset, "tiny"):
            for strategy in ("replicated", "partitioned"):
                t0 = time.time()
                runs[f"{strategy}/{dataset}"] = r = one_run(hosts, Path(tmp), strategy, dataset, args, port)
                r["wall_s"] = round(time.time() - t0, 1)
                print(f"{strategy}/{dataset}: {r['status']}, host peaks "
                      f"{[round(b / 2**20) for b in r['peak_bytes_by_host']]} MiB, graph data mapped "
                      f"{[round(b / 2**20) for b in r['graph_mapped_peak_bytes_by_host']]} MiB ({r['wall_s']} s)",
                      flush=True)
                port += 2
    return runs


def memory_report(args, runs: dict) -> dict:
    """Each host's graph memory (its peak on DATASET less its peak on tiny) and the partitioned
    strategy's figures over the replicated one's."""
    graph = {s: [a - b for a, b in zip(runs[f"{s}/{args.dataset}"]["peak_bytes_by_host"],
                                        runs[f"{s}/tiny"]["peak_bytes_by_host"])]
             for s in ("replicated", "partitioned")}
    return {"dataset": args.dataset, "settings": vars(args), "runs": runs, "graph_bytes_by_host": graph,
            "ratio_by_host": [round(p / r, 3) if r > 0 else None
                              for p, r in zip(graph["partitioned"], graph["replicated"])],
            "total_ratio_by_host": [round(p / r, 3) for p, r in zip(
                runs[f"partitioned/{args.dataset}"]["peak_bytes_by_host"],
                runs[f"replicated/{args.dataset}"]["peak_bytes_by_host"])],
            "graph_mapped_ratio_by_host": [round(p / r, 3) for p, r in zip(
                runs[f"partitioned/{args.dataset}"]["graph_mapped_peak_bytes_by_host"],
                runs[f"replicated/{args.dataset}"]["graph_mapped_peak_bytes_by_host"])]}


def main(argv=None) -> int:
    args = parse_args(argv)
    reason = netns_hosts.why_not()
    if reason:
        print(f"cannot measure: {reason}", file=sys.stderr)
        return 2
    hosts = netns_hosts.Hosts(2).start()
    try:
        runs = all_runs(hosts, args)
    finally:
        hosts.stop()
    report = memory_report(args, runs)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("graph_bytes_by_host", "ratio_by_host", "total_ratio_by_host",
                                             "graph_mapped_ratio_by_host")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
