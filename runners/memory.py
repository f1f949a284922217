"""Host memory of one run: a model of its peak, the measured peak, and a cgroup memory cap.

The model adds up what the process tree of a run holds at its worst moment:
- a per-process baseline (interpreter + torch + framework + process group), measured here
  (the framework's memory traits, runners/adapters/registry.py) for the torchrun agent, each rank and each loader worker;
- the dataset: memory-mapped and shared by every process (counted once), plus PyG's
  `share_memory_()` copy of the adjacency into /dev/shm, once per rank, when the rank has
  loader workers;
- mini-batches in flight: each loader worker builds one batch and the loader keeps
  prefetch_factor batches per worker waiting, each batch carrying the features of every
  sampled node (batch size x fan-outs, bounded by the graph's node count);
- the rank's own compute memory (activations and their gradients), a rough term, and its
  parameters five times over (weights, DDP's gradient buckets, gradients, Adam's moments);
  both are host memory only for CPU processes (on GPUs they live in device memory).
It is an estimate meant to show which term grows with which setting (ranks, workers,
batch size), not a byte-exact prediction; result.json carries it next to the measured peak.

`--memory-limit SIZE` runs the torchrun tree in a child memory cgroup of the launcher's own
(cgroup v1 memory.limit_in_bytes or v2 memory.max), so the kernel's OOM killer acts on the
run exactly as it would on a machine with that much memory.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

PREFETCH_FACTOR = 2  # torch.utils.data.DataLoader's default; neither adapter changes it

class MemoryLimitError(ValueError):
    """A bad --memory-limit value, or a machine where a memory cap cannot be enforced."""


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B)?\s*$", re.I)
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
# The one-node rank starter (runners.spawn, plain Python): PSS 7.1 MiB, RSS 12.5 MiB, measured
# here on 2026-11-24 while it waited for one rank. torchrun's agent (multi-node) imports torch:
# its baseline is the framework's ("agent" in the registry's memory traits).
SPAWN_BASELINE_BYTES = 8 * 2**20
MIN_LIMIT_BYTES = 64 * 2**20  # below this not even one rank importing torch starts


def parse_size(text) -> int:
    """'2G' / '512M' / '1.5GiB' / '1048576' -> bytes (binary units); raises MemoryLimitError."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise MemoryLimitError(
            f"--memory-limit {text!r}: expected a size such as 512M, 2G or 1.5G (units K, M, G, T "
            "in powers of 1024; a plain number is bytes)")
    value = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    if value < MIN_LIMIT_BYTES:
        raise MemoryLimitError(f"--memory-limit {text!r} is {value} bytes; the smallest allowed cap is "
                               f"{MIN_LIMIT_BYTES // 2**20}M (one rank importing torch alone needs more)")
    return value


def fmt_bytes(n) -> str:
    if n is None:
        return "n/a"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


# -- the model ---------------------------------------------------------------------------------
def hop_reach(batch_size: int, fanouts: list, num_nodes: int) -> list:
    """Nodes within 0, 1, .., L hops of a batch's seeds (upper bounds, capped at the graph's size)."""
    frontier, nodes, reach = batch_size, batch_size, [min(batch_size, num_nodes or batch_size)]
    for f in fanouts:
        frontier *= f if f > 0 else 50  # -1 = all neighbours: take a generous mean degree
        nodes += frontier
        reach.append(min(nodes, num_nodes or nodes))
    return reach


def batch_bounds(batch_size: int, fanouts: list, num_nodes: int, num_edges: int) -> tuple:
    """(nodes, edges) one mini-batch can reach: seeds x fan-outs, hop by hop, bounded by the graph."""
    reach = hop_reach(batch_size, fanouts, num_nodes)
    edges = sum(reach[k] * (f if f > 0 else 50) for k, f in enumerate(fanouts))
    return reach[-1], min(edges, num_edges or edges)


def model_peak(cfg, graph_meta: dict) -> dict:
    """Modelled peak host memory of the run's process tree on this node, with its terms."""
    from runners.adapters import MEMORY_TRAITS

    traits = MEMORY_TRAITS[cfg.framework]
    n, e = graph_meta.get("num_nodes", 0), graph_meta.get("num_edges", 0)
    feats = graph_meta.get("num_features", 0)
    nodes, edges = batch_bounds(cfg.batch_size, cfg.fanouts, n, e)
    # node ids and labels (int64) + the framework's edge structure; features are float32
    structure_bytes = nodes * 16 + edges * traits["edge_bytes"]
    batch_bytes = nodes * feats * 4 + structure_bytes
    ranks, workers = cfg.devices, cfg.workers
    base = traits["baseline_bytes"]
    dataset_bytes = graph_meta.get("dataset_bytes") or 0
    adjacency_bytes = graph_meta.get("adjacency_bytes") or 0
    copies_per_rank = adjacency_bytes if (traits["copies_adjacency_with_workers"] and workers > 0) else 0
    waiting, in_flight_per_rank = _batches_in_flight(traits, workers, batch_bytes, structure_bytes)
    compute_per_rank, params_per_rank = _compute_per_rank(cfg, traits, graph_meta, nodes)
    terms = {
        "agent_baseline": base["agent"] if cfg.nodes > 1 else SPAWN_BASELINE_BYTES,
        "rank_baseline": ranks * base["rank"],
        "worker_baseline": ranks * workers * base["worker"],
        "dataset_shared": dataset_bytes,
        "dataset_copies": ranks * copies_per_rank,
        "batches_in_flight": ranks * in_flight_per_rank,
        "compute": ranks * compute_per_rank,
        "parameters_optimizer": ranks * params_per_rank,
    }
    return {
        "total_bytes": int(sum(terms.values())),
        "terms_bytes": {k: int(v) for k, v in terms.items()},
        "inputs": {"ranks": ranks, "workers_per_rank": workers, "prefetch_factor": PREFETCH_FACTOR,
                   "batch_nodes_bound": int(nodes), "batch_edges_bound": int(edges),
                   "batch_bytes": int(batch_bytes), "batch_structure_bytes": int(structure_bytes),
                   "batches_waiting_per_rank": waiting,
                   "workers_gather_features": traits["workers_gather_features"],
                   "dataset_bytes": int(dataset_bytes), "compute_in": "gpu memory (not counted)"
                   if cfg.device_type == "cuda" else "host memory",
                   "dataset_copy_per_rank_bytes": int(copies_per_rank),
                   "dataset_copy_reason": (traits["adjacency_copy_reason"] if copies_per_rank else
                                           "memory-mapped, shared by every process"),
                   "baseline_bytes": dict(base)},
    }


def _batches_in_flight(traits: dict, workers: int, batch_bytes: int, structure_bytes: int) -> tuple:
    """(batches waiting in one rank's loader, bytes of all its batches in flight)."""
    # Each worker builds one batch while prefetch_factor finished ones wait; the rank holds the
    # one in use and receives/builds the next.
    waiting = workers * (PREFETCH_FACTOR + 1)
    if traits["workers_gather_features"]:
        return waiting, (waiting + 2) * batch_bytes
    # workers hand over structure only; the rank gathers features for the batch in use
    return waiting, waiting * structure_bytes + 2 * batch_bytes


def _compute_per_rank(cfg, traits: dict, graph_meta: dict, nodes: int) -> tuple:
    """(activation bytes, parameter + optimiser-state bytes) one rank holds in host memory;
    both 0 on GPUs, where they live in device memory."""
    from runners.adapters import layer_shapes

    feats = graph_meta.get("num_features", 0)
    shapes = layer_shapes(cfg.model, feats, cfg.hidden, graph_meta.get("num_classes", 0), cfg.layers, cfg.heads)
    reach = hop_reach(cfg.batch_size, cfg.fanouts, graph_meta.get("num_nodes", 0))
    L = len(shapes)
    # Layer i's outputs: every sampled node for PyG (unless trimmed), the nodes still needed
    # (within L-1-i hops) for DGL's shrinking blocks. Output, its gradient and one intermediate.
    rows = [nodes if (traits["all_nodes_every_layer"] and not cfg.pyg_trim) else reach[min(L - 1 - i, len(reach) - 1)]
            for i in range(L)]
    compute = sum(r * d_out * h for r, (_, d_out, h) in zip(rows, shapes)) * 4 * 3
    if cfg.model == "sage":  # neighbour + root weight, bias
        params = sum(2 * d_in * d_out + d_out for d_in, d_out, _ in shapes)
    else:  # weight, two attention vectors, bias per head
        params = sum(d_in * d_out * h + 3 * d_out * h for d_in, d_out, h in shapes)
    if cfg.device_type == "cuda":  # activations and optimiser state live in GPU memory
        return 0, 0
    # weights + DDP's gradient buckets + gradients + Adam's two moments, float32
    return compute, params * 4 * 5


def describe_model(model: dict) -> str:
    t = model["terms_bytes"]
    parts = ", ".join(f"{k} {fmt_bytes(v)}" for k, v in t.items() if v)
    return f"modelled peak host memory {fmt_bytes(model['total_bytes'])} ({parts})"


# -- the measured peak -------------------------------------------------------------------------
def measured_peak(out: Path, local_ranks: list) -> dict:
    """Peak memory of ranks + loader workers from rank*/cpu.csv.

    A rank writes one row per process per sample; PSS/USS are read on every USS_EVERY-th
    sample only ("full" samples). The tree's figure at the k-th full sample is the sum over
    ranks and their workers; the ranks start their samplers together (after a collective),
    so the k-th samples of different ranks are the same moment within a sample interval.
    PSS counts shared pages (memory-mapped dataset, /dev/shm batches) once across the tree;
    USS leaves them out. RSS counts them in every process (an over-estimate).
    """
    from runners.record import read_rank_rows

    per_rank = {}
    for r in local_ranks:
        samples: dict = {}
        rows = read_rank_rows(out, r, "cpu")
        if rows is None:
            continue
        try:
            for row in rows:
                s = samples.setdefault(row["t_s"], {"pss": 0, "uss": 0, "rss": 0, "full": False, "procs": 0})
                s["rss"] += int(float(row["rss_bytes"] or 0))
                s["procs"] += 1
                if row.get("uss_bytes"):
                    s["full"] = True
                    s["uss"] += int(float(row["uss_bytes"]))
                    s["pss"] += int(float(row.get("pss_bytes") or 0))
        except (KeyError, ValueError):
            continue
        per_rank[r] = [s for _, s in sorted(samples.items(), key=lambda kv: float(kv[0]))]
    if not per_rank:
        return {"available": False, "reason": "no rank wrote cpu.csv (probes off, or killed before its first epoch ended)"}
    full = {r: [s for s in v if s["full"]] for r, v in per_rank.items()}
    best = {"pss": 0, "uss": 0}
    for key in best:
        k = 0
        while any(k < len(v) for v in full.values()):
            best[key] = max(best[key], sum(v[k][key] for v in full.values() if k < len(v)))
            k += 1
    rss_peak = 0
    k = 0
    while any(k < len(v) for v in per_rank.values()):
        rss_peak = max(rss_peak, sum(v[k]["rss"] for v in per_rank.values() if k < len(v)))
        k += 1
    return {"available": True, "pss_bytes": best["pss"] or None, "uss_bytes": best["uss"] or None,
            "rss_bytes": rss_peak, "ranks": sorted(per_rank),
            "full_samples": min(len(v) for v in full.values()),
            "note": "sum over ranks and loader workers at the worst sample; the rank starter "
                    "and memory freed between samples are not included"}


# -- the cgroup cap ----------------------------------------------------------------------------
def _own_cgroup() -> tuple:
    """(version, directory) of this process's memory cgroup, or (None, reason)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError as exc:
        return None, f"cannot read /proc/self/cgroup ({exc})"
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            base = Path("/sys/fs/cgroup/memory")
            if not base.is_dir():
                base = Path("/sys/fs/cgroup")  # some hosts mount v1 controllers flat
            return 1, base / path.lstrip("/")
    for line in lines:
        if line.startswith("0::"):
            base = Path("/sys/fs/cgroup")
            if (base / "cgroup.controllers").exists() and "memory" in (base / "cgroup.controllers").read_text().split():
                return 2, base / line[3:].lstrip("/")
    return None, "no memory cgroup controller is mounted (neither v1 memory nor v2 with 'memory')"


class MemoryCgroup:
    """A child memory cgroup holding one run's process tree under a cap."""

    def __init__(self, version: int, path: Path, limit_bytes: int):
        self.version, self.path, self.limit_bytes = version, Path(path), limit_bytes

    @classmethod
    def check(cls) -> tuple:
        """(version, parent directory) where a capped child group can be made; raises
        MemoryLimitError saying why not."""
        if os.geteuid() != 0:
            raise MemoryLimitError("--memory-limit needs root here: creating a memory cgroup is "
                                   f"not permitted for uid {os.geteuid()} (no systemd delegation is used)")
        version, parent = _own_cgroup()
        if version is None:
            raise MemoryLimitError(f"--memory-limit cannot be enforced on this machine: {parent}")
        if version == 2:
            ctl = parent / "cgroup.subtree_control"
            if "memory" not in (ctl.read_text().split() if ctl.exists() else []):
                try:
                    ctl.write_text("+memory")
                except OSError as exc:
                    raise MemoryLimitError(f"--memory-limit: cannot enable the memory controller for "
                                           f"child groups of {parent} ({exc})")
        if not os.access(parent, os.W_OK):
            raise MemoryLimitError(f"--memory-limit: the memory cgroup {parent} is not writable")
        return version, parent

    @classmethod
    def create(cls, name: str, limit_bytes: int) -> "MemoryCgroup":
        version, parent = cls.check()
        path = parent / name
        try:
            path.mkdir()
            if version == 1:
                (path / "memory.limit_in_bytes").write_text(str(limit_bytes))
                # Without this, swap would let the tree exceed the cap instead of being killed.
                if (path / "memory.memsw.limit_in_bytes").exists():
                    (path / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
            else:
                (path / "memory.max").write_text(str(limit_bytes))
                if (path / "memory.swap.max").exists():
                    (path / "memory.swap.max").write_text("0")
        except OSError as exc:
            try:
                path.rmdir()
            except OSError:
                pass
            raise MemoryLimitError(f"--memory-limit: cannot create a capped memory cgroup at {path} ({exc})")
        return cls(version, path, limit_bytes)

    def enter(self) -> None:
        """Move the calling process into the group (used as the launched child's preexec_fn,
        so torchrun and everything it starts are inside before anything allocates)."""
        with open(self.path / "cgroup.procs", "w") as fh:
            fh.write(str(os.getpid()))

    def _read(self, name: str):
        try:
            return (self.path / name).read_text()
        except OSError:
            return None

    def stats(self) -> dict:
        """Limit, usage, peak and OOM-kill count as the kernel reports them."""
        def num(name):
            text = self._read(name)
            return int(text.split()[0]) if text and text.split()[0].isdigit() else None

        def keyed(name):
            return dict((k, int(v)) for k, v in (ln.split() for ln in (self._read(name) or "").splitlines()
                                                 if len(ln.split()) == 2 and ln.split()[1].isdigit()))

        stat = keyed("memory.stat")

        def minus(a, b):  # the kernel's page-cache figure includes shared memory (tmpfs)
            return a - (b or 0) if a is not None else None

        if self.version == 1:
            oom = keyed("memory.oom_control")
            return {"cgroup": str(self.path), "version": 1, "limit_bytes": num("memory.limit_in_bytes"),
                    "usage_bytes": num("memory.usage_in_bytes"),
                    "peak_bytes": num("memory.max_usage_in_bytes"), "failcnt": num("memory.failcnt"),
                    "oom_kill": oom.get("oom_kill"), "under_oom": oom.get("under_oom"),
                    "anon_bytes": stat.get("total_rss"),
                    "file_bytes": minus(stat.get("total_cache"), stat.get("total_shmem")),
                    "shmem_bytes": stat.get("total_shmem"), "major_faults": stat.get("total_pgmajfault")}
        events = keyed("memory.events")
        return {"cgroup": str(self.path), "version": 2, "limit_bytes": num("memory.max"),
                "usage_bytes": num("memory.current"), "peak_bytes": num("memory.peak"),
                "failcnt": events.get("max"), "oom_kill": events.get("oom_kill"), "under_oom": None,
                "anon_bytes": stat.get("anon"), "file_bytes": minus(stat.get("file"), stat.get("shmem")),
                "shmem_bytes": stat.get("shmem"),
                "major_faults": stat.get("pgmajfault")}

    def pids(self) -> list:
        return [int(p) for p in (self._read("cgroup.procs") or "").split()]

    def remove(self, timeout_s: float = 10.0) -> list:
        """SIGKILL anything still in the group, then delete it; returns the pids that had to be killed."""
        leftover = self.pids()
        for pid in leftover:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        deadline = time.time() + timeout_s
        while True:
            try:
                self.path.rmdir()
                return leftover
            except FileNotFoundError:
                return leftover
            except OSError:
                if time.time() > deadline:
                    return leftover
                time.sleep(0.1)


OOM_LINE = re.compile(r"Killed process (\d+) \(([^)]*)\)")
MEMCG_LINE = re.compile(r"oom-kill:.*?task_memcg=([^,]*),task=([^,]*),pid=(\d+)")


STAMP = re.compile(r"^\[\s*(\d+\.\d+)\]")


def uptime_s() -> float | None:
    """Seconds since boot: the clock of the kernel log's time stamps."""
    try:
        return float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def kernel_oom_kills(pids=None, cgroup_path: Path | None = None, since_uptime: float | None = None) -> tuple:
    """([{'pid', 'name', 'source'}], reason) of OOM kills in the kernel log that hit `pids` or a
    task of `cgroup_path`, logged after `since_uptime` (so an old kill of a reused pid is not
    taken for this run's); the reason says why the log could not be read (else None)."""
    try:
        res = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], f"dmesg unavailable ({exc})"
    if res.returncode != 0:
        return [], f"dmesg failed: {res.stderr.strip()[:200]}"
    rel = None
    if cgroup_path is not None:
        parts = Path(cgroup_path).parts
        rel = "/" + "/".join(parts[parts.index("memory") + 1:] if "memory" in parts else parts[4:])
    kills, seen = [], set()
    pids = set(pids or ())
    for line in res.stdout.splitlines():
        stamp = STAMP.match(line)
        if since_uptime is not None and stamp and float(stamp.group(1)) < since_uptime:
            continue
        m = MEMCG_LINE.search(line)
        if m and rel and m.group(1) == rel:
            pid = int(m.group(3))
            if pid not in seen:
                seen.add(pid)
                kills.append({"pid": pid, "name": m.group(2), "source": "kernel log (memory cgroup OOM)"})
            continue
        m = OOM_LINE.search(line)
        if m and int(m.group(1)) in pids and int(m.group(1)) not in seen:
            seen.add(int(m.group(1)))
            kills.append({"pid": int(m.group(1)), "name": m.group(2), "source": "kernel log (OOM killer)"})
    return kills, None
