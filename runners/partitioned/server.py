"""The partitioned strategy, the launcher's side: one DistGraphServer per host beside the trainers.

Each node's launcher (`python -m runners.run --strategy partitioned --nnodes P --node-rank K
--ip-config FILE|slurm ...`) makes sure the graph's P partitions exist and verify (runners.partitioned.split),
starts its host's graph server (partition K) with the variables DGL's tools/launch.py would set
over ssh (no ssh here: every role is started by the suite), gives its trainers theirs, and after
the run stops the server and records how it ended, with each host's memory: the server's PSS
plus its trainers', sampled together.

Variables (DGL 2.1.0, dgl/distributed/dist_context.py and tools/launch.py):
- server: DGL_ROLE=server, DGL_SERVER_ID, DGL_NUM_SERVER (per machine), DGL_NUM_CLIENT (the
  server waits for exactly that many: trainers x (1 + samplers) x machines), DGL_IP_CONFIG,
  DGL_CONF_PATH, DGL_NUM_SAMPLER, DGL_GRAPH_FORMAT;
- trainer: DGL_DIST_MODE=distributed, DGL_ROLE=client and the same counts and paths;
- both: OMP_NUM_THREADS (an OpenMP fork deadlock otherwise, DGL #1129); samplers 0 (sampler
  processes are unreliable, DGL #7753, #3887).
A process finds its machine as the first ip_config line whose address is local, so each host
needs an address of its own (the two-host test fixture gives each a network namespace). Under
SLURM (`--ip-config slurm`, as the sweep passes) each launcher writes the list itself from the
job's nodes (runners.launch.slurm), so no user has to know which nodes the scheduler will give.
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from runners.launch.console import say
from runners.records.rundir import RunDir
from runners.settings import ConfigError

SAMPLERS = 0
SERVERS_PER_HOST = 1
SAMPLE_INTERVAL_S = 0.5
# The server's state and CPU time kept for a stall's diagnosis: the last hour at SAMPLE_INTERVAL_S,
# more than any stall window (the watchdog's threshold, at most the start-up timeout).
STATE_SAMPLES = 7200


# DGL's default server port (dgl.distributed), for lines that name none and the generated list.
DGL_PORT = 30050
# --ip-config's value that asks for the list from the SLURM allocation (runners.launch.slurm).
FROM_SLURM = "slurm"


def read_ip_config(cfg, address: str | None) -> tuple:
    """([(address, port)] per host, where the list came from), checked against the run: one line
    per node, this node's line its own address. `--ip-config slurm`: the job's nodes in node order
    at their NodeAddr (runners.launch.slurm), node 0's the master's address. One node without a file
    (or with `slurm`): loopback and a free port."""
    if cfg.nodes == 1 and cfg.ip_config in (None, FROM_SLURM):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return [("127.0.0.1", s.getsockname()[1])], {"source": "loopback (one node)"}
    if cfg.ip_config == FROM_SLURM:
        return _from_slurm(cfg, address)
    path = Path(cfg.ip_config)
    try:
        lines = [line.split() for line in path.read_text().splitlines() if line.strip()]
    except OSError as exc:
        raise ConfigError(f"--ip-config {path}: cannot read it ({exc.strerror or exc})")
    hosts = []
    for i, words in enumerate(lines):
        if len(words) not in (1, 2) or (len(words) == 2 and not words[1].isdigit()):
            raise ConfigError(f"--ip-config {path}: line {i + 1} {' '.join(words)!r}: expected 'ADDRESS [PORT]'")
        hosts.append((words[0], int(words[1]) if len(words) == 2 else DGL_PORT))
    if len(hosts) != cfg.nodes:
        raise ConfigError(f"--ip-config {path}: {len(hosts)} hosts for --nnodes {cfg.nodes}; one line per node")
    _own_line(cfg, hosts, address, f"--ip-config {path}")
    return hosts, {"source": "file", "file": str(path.resolve())}


def _own_line(cfg, hosts: list, address: str | None, what: str) -> None:
    if address is not None and hosts[cfg.node_rank][0] != address:
        raise ConfigError(f"{what}: line {cfg.node_rank + 1} (node {cfg.node_rank}) says "
                          f"{hosts[cfg.node_rank][0]}, but this host's address is {address}: DGL finds a process's "
                          "machine as the first line whose address is local")


def _from_slurm(cfg, address: str | None) -> tuple:
    """The allocation's nodes in node order, partition k served on node k: every node's launcher
    writes the same list, as each reads it from slurmctld."""
    from runners.launch import slurm

    try:
        nodes = slurm.allocation()
    except ConfigError as exc:
        raise ConfigError(f"--ip-config {FROM_SLURM}: {exc}") from None
    return hosts_of_allocation(cfg, nodes, address), {
        "source": "slurm allocation (scontrol NodeAddr, node order)", "job_id": os.environ.get("SLURM_JOB_ID"),
        "nodes": nodes}


def hosts_of_allocation(cfg, nodes: list, address: str | None) -> list:
    """[(address, port)] of the allocation's nodes (runners.launch.slurm.allocation), refused naming the
    nodes when they cannot serve the run: another count than --nnodes, two nodes on one address,
    a master that is not node 0, or this host not at its node's line."""
    what = f"--ip-config {FROM_SLURM}"
    if len(nodes) != cfg.nodes:
        raise ConfigError(f"{what}: the job has {len(nodes)} nodes ({', '.join(n['name'] for n in nodes)}) for "
                          f"--nnodes {cfg.nodes}; one partition per node")
    seen = {}
    for n in nodes:
        if n["address"] in seen:
            raise ConfigError(f"{what}: nodes {seen[n['address']]} and {n['name']} both have the address "
                              f"{n['address']}; each partition's host needs an address of its own")
        seen[n["address"]] = n["name"]
    hosts = [(n["address"], DGL_PORT) for n in nodes]
    # scripts/slurm_node.sh gives node 0's NodeAddr as the master. A master elsewhere would not
    # host the rendezvous (node rank 0 does), and the nodes would wait there until its timeout.
    first = nodes[0]
    if cfg.master_addr not in (first["node_addr"], first["address"]):
        raise ConfigError(f"{what}: node 0 ({first['name']}) is at {first['address']}, but --master-addr is "
                          f"{cfg.master_addr}; start the run with scripts/slurm_node.sh, which gives node 0's NodeAddr")
    _own_line(cfg, hosts, address, what)
    return hosts


@dataclass
class Plan:
    """What the launcher starts for one node of a partitioned run."""

    partitions: Path  # the verified partition directory
    part_config: Path
    ip_config: Path  # the run's copy, in its directory
    hosts: list
    hosts_from: dict  # where the list came from (read_ip_config)
    manifest: dict
    quality: dict

    def common_env(self, cfg) -> dict:
        return {"DGL_NUM_SERVER": str(SERVERS_PER_HOST), "DGL_NUM_SAMPLER": str(SAMPLERS),
                "DGL_NUM_CLIENT": str(cfg.devices * (1 + SAMPLERS) * cfg.nodes),
                "DGL_IP_CONFIG": str(self.ip_config), "DGL_CONF_PATH": str(self.part_config),
                "DGL_GRAPH_FORMAT": "csc", "DGL_GROUP_ID": "0", "DGLBACKEND": "pytorch",
                "OMP_NUM_THREADS": str(cfg.threads_per_rank)}

    def trainer_env(self, cfg) -> dict:
        return {**self.common_env(cfg), "DGL_DIST_MODE": "distributed", "DGL_ROLE": "client"}

    def server_env(self, cfg) -> dict:
        return {**self.common_env(cfg), "DGL_DIST_MODE": "distributed", "DGL_ROLE": "server",
                "DGL_SERVER_ID": str(cfg.node_rank * SERVERS_PER_HOST)}

    def describe(self, cfg) -> dict:
        """What result.json records (env.partitioned)."""
        return {"strategy": "partitioned", "engine": "DistDGL (dgl.distributed)", "partitions": cfg.nodes,
                "part_method": cfg.part_method, "directory": str(self.partitions),
                "content_hash": self.manifest["content_hash"], "quality": self.quality,
                "hosts": [{"node": i, "address": a, "port": p} for i, (a, p) in enumerate(self.hosts)],
                # the copy's place in the run directory: `self.ip_config` is in the staging one
                "ip_config": {**self.hosts_from, "copy": str(RunDir(Path()).ip_config),
                              "lines": [f"{a} {p}" for a, p in self.hosts]},
                "servers_per_host": SERVERS_PER_HOST, "samplers": SAMPLERS,
                "trainer_env": self.trainer_env(cfg)}


def plan(cfg, env: dict, out: Path) -> Plan:
    """Check the hosts, make or verify the partitions and write the run's ip_config. Raises
    ConfigError (bad --ip-config), runners.partitioned.split.PartitionError or DatasetError."""
    from runners.partitioned import split as partitions

    hosts, hosts_from = read_ip_config(cfg, (env.get("network") or {}).get("address"))
    where = partitions.prepare(cfg.dataset, cfg.nodes, cfg.part_method, data_root=cfg.data_root,
                               root=Path(cfg.data_root).parent / "partitions")
    manifest = partitions.read_manifest(where)
    ip_config = RunDir(out).ip_config
    ip_config.write_text("".join(f"{a} {p}\n" for a, p in hosts))
    return Plan(where, where / manifest["part_config"], ip_config, hosts, hosts_from, manifest,
                json.loads((where / partitions.QUALITY).read_text()))


def pss(pid: int) -> int | None:
    import psutil

    try:
        return psutil.Process(pid).memory_full_info().pss
    except (psutil.Error, OSError):
        return None


# Signals a process does not raise itself (an abort or a segfault it may, on losing its clients)
EXTERNAL_SIGNALS = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
EXTERNAL_SIGNAL_NAMES = frozenset(s.name for s in EXTERNAL_SIGNALS)


def first_lost(theirs: dict, died: dict) -> bool:
    """Whether another node's server (`theirs`: that node's diagnosis) was lost before this
    host's ended by itself (`died`): killed from outside, stopped making progress (what its
    watchdog then did to the trainers ends the others' servers), or died earlier."""
    if theirs.get("cause") == "stalled_server":
        return True
    lost = theirs.get("lost_server") or {}
    if lost.get("signal") in EXTERNAL_SIGNAL_NAMES:
        return True
    return lost.get("at") is not None and died.get("at") is not None and lost["at"] < died["at"]


@dataclass
class Server:
    """This host's graph server, and this host's memory sampled while the run goes."""

    cfg: object
    proc: subprocess.Popen
    log_path: Path
    started_t: float
    host: str
    out: Path | None = None  # the run directory (the server's stack dump goes to its stacks/)
    trainers_root: int | None = None  # the rank starter's pid, once launched
    samples: list = field(default_factory=list)  # (t, server PSS, trainers' PSS, trainers)
    died: dict | None = None  # the server ended while its trainers ran (see _check_ended)
    # (time.time(), psutil status, CPU seconds) of the server at every sample: a stall's evidence
    states: collections.deque = field(default_factory=lambda: collections.deque(maxlen=STATE_SAMPLES))
    stall: object = None  # runners.watch.evidence.ServerEvidence of the stall the watchdog detected (gather)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    def watch(self, trainers_root: int) -> None:
        """Sample the server's and the trainers' PSS together until stop()."""
        self.trainers_root = trainers_root
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _trainer_pids(self) -> list:
        import psutil

        try:  # the ranks (and their workers) under the rank starter, not the starter itself
            return [p.pid for p in psutil.Process(self.trainers_root).children(recursive=True)]
        except psutil.Error:
            return []

    def _observe_state(self) -> None:
        import psutil

        try:
            p = psutil.Process(self.proc.pid)
            with p.oneshot():
                state = (time.time(), p.status(), sum(p.cpu_times()[:2]))
        except (psutil.Error, OSError):
            return
        with self._lock:
            self.states.append(state)

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_INTERVAL_S):
            if self.proc.poll() is None:
                self._observe_state()
            self._check_ended()
            server = pss(self.proc.pid) if self.proc.poll() is None else None
            trainers = [v for v in (pss(p) for p in self._trainer_pids()) if v is not None]
            if server is not None or trainers:
                self.samples.append((round(time.time() - self.started_t, 3), server, sum(trainers), len(trainers)))

    def _check_ended(self) -> None:
        """Keep (as `died`, for explain) a server that ended before the launcher stopped it: by a
        signal sent from outside at any time (nothing in a run sends one to its server; a person,
        the kernel's OOM killer or the scheduler does, and its trainers may have ended first, as
        its victims), or otherwise while its trainers still ran (an error or abort after they ended
        may be their consequence). Exit code 0 is the shutdown the trainers ask for at the end.
        Trainers still running would wait for it over RPC until the stall limit: stop them (SIGTERM)."""
        code = self.proc.poll()
        if self.died is not None or code in (None, 0):
            return
        trainers = self._trainer_pids()
        if not trainers and -code not in EXTERNAL_SIGNALS:
            return
        now = time.time()  # `at`: when, on the clock the other nodes' results are compared on (first_lost)
        self.died = {"t_s": round(now - self.started_t, 3), "at": round(now, 3),
                     "exit_code": code if code >= 0 else None, "signal": signal.Signals(-code).name if code < 0 else None}
        say(f"graph server {self.cfg.node_rank} (pid {self.proc.pid}) on {self.host} ended "
            f"({self.died['signal'] or 'exit code %s' % code}) "
            + ("while its trainers ran; stopping them" if trainers else "before the launcher stopped it"))
        if trainers:
            try:
                os.killpg(self.trainers_root, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass

    def gather(self, outcome, launch_t: float):
        """When the watchdog stopped the run as a hang, or its trainers crashed while this server
        was stopped: the server's evidence over the stall window (runners.watch.evidence.ServerEvidence,
        kept as `stall`), its stack dumped when its host's trainers waited for it over RPC and it
        was not stopped. Call before stop(), while it still runs."""
        from runners.adapters.registry import RPC_WAIT_FILES
        from runners.watch.diagnosis import FROZEN_STATES
        from runners.watch.evidence import ServerEvidence, py_spy_dump, py_spy_path, rpc_waiters
        from runners.watch.stacks import top_frames

        if outcome is None or self.died is not None or self.proc.poll() is not None:
            return None
        diag = outcome.diagnosis or {}
        if outcome.status == "hang" and outcome.detected_after_s is not None:
            end, window = launch_t + outcome.detected_after_s, float(diag.get("threshold_s") or 0.0)
        elif outcome.status == "crashed":
            # Another node's watchdog may stop its trainers first, and this node's then crash on
            # the peers they lost: a server stopped when they ended is the cause all the same.
            end, window = time.time(), float(self.cfg.stall_floor_s)  # what a hang would have needed
        else:
            return None
        self._observe_state()  # its state now, after the trainers were stopped
        with self._lock:
            seen = list(self.states)
        # Up to CPU_SAMPLE_S after the detection: the supervisor sampled the ranks' states until then.
        samples = [(round(t - end, 2), st, round(cpu, 3)) for t, st, cpu in seen
                   if end - window - SAMPLE_INTERVAL_S <= t <= end + 1.0]
        if len(samples) < 2:  # a stall window shorter than the sampling: the latest two samples
            samples = [(round(t - end, 2), st, round(cpu, 3)) for t, st, cpu in seen[-2:]]
        waiters = rpc_waiters(diag.get("ranks") or [], RPC_WAIT_FILES)
        stack, idle = [], None
        frozen = bool(samples) and samples[-1][1] in FROZEN_STATES
        if outcome.status == "crashed" and not frozen:
            return None  # a crash with a server that still runs: its trainers' own errors say why
        py_spy = py_spy_path() if waiters and not frozen and self.out is not None else None
        if py_spy is not None:
            text = py_spy_dump(py_spy, self.proc.pid, native=False)
            path = RunDir(self.out).stack_dump(f"graph-server{self.cfg.node_rank}", self.proc.pid)
            path.parent.mkdir(exist_ok=True)
            path.write_text(text)
            stack = top_frames(text)
            idle = bool(stack) and any(f in stack[0] for f in RPC_WAIT_FILES)
        self.stall = ServerEvidence(node=self.cfg.node_rank, host=self.host, pid=self.proc.pid, window_s=window,
                                    samples=samples, ranks_in_rpc=waiters, stack_top=stack,
                                    waiting_for_requests=idle if stack else None)
        return self.stall

    def explain(self, status: str, diag: dict | None):
        """When this host's server died mid-run: the run `crashed`, cause `lost_server`, the
        summary naming the server, its host and how it ended (the trainers were its victims).
        When it stopped making progress (gather): the hang's cause is `stalled_server`. A
        (status, diagnosis) verdict (diagnosis.OVERRIDES' `server`), or None."""
        if status in ("ok", "interrupted"):
            return None  # a finished run stands; an interrupted one was stopped from outside, server and all
        if self.died is None:
            from runners.watch.diagnosis import diagnose_stalled_server

            stalled = diagnose_stalled_server(status, diag, self.stall)
            # a crash on the peers it cost is still the hang it caused
            return ("hang", stalled) if stalled is not None else None
        from runners.watch.diagnosis import lost_server

        server = {"node": self.cfg.node_rank, "host": self.host, "pid": self.proc.pid}
        return "crashed", lost_server(status, diag, server, self.died)

    def killed_from_outside(self) -> bool:
        """This host's server died by a signal no run sends it: the cause, whatever other nodes say."""
        return self.died is not None and self.died["signal"] in EXTERNAL_SIGNAL_NAMES

    def adopt_remote(self, out: Path, started_at: str, status: str, diag: dict | None):
        """Any node whose own server kept going, or ended by itself (an abort: a DGL server
        aborts on a broken pipe to a client that another node's launcher stopped): a server that
        died first or stopped making progress on another node is the run's cause when that node's
        result says so (node 0's beside the job, node{K}/result.json for the others, as
        runners.watch.nodes reads them); this node's trainers, and its aborted server, only lost
        it or waited for it. A hang no result explains, while this node's trainers waited over
        RPC, points to another node's server (diagnosis.remote_server_stall). How long each node
        waits for the others' results: runners.watch.nodes.other_results. A (status, diagnosis)
        verdict (diagnosis.OVERRIDES' `remote_server`), or None."""
        from runners.watch.diagnosis import remote_server, remote_server_stall, server_stall

        if (self.cfg.nodes < 2 or status == "ok" or self.killed_from_outside()
                or (self.stall is not None and server_stall(self.stall) is not None)):
            return None
        from runners.watch import nodes

        results = nodes.other_results(self.cfg, out, started_at)
        for k, res in sorted(results.items()):
            theirs = res.get("diagnosis") or {}
            cause = theirs.get("cause")
            if cause not in ("lost_server", "stalled_server") or not (theirs.get(cause) or {}).get("host"):
                continue
            if self.died is not None and not first_lost(theirs, self.died):
                continue
            # A server lost is a crash (its trainers were victims); one that stopped is the hang it caused.
            return ("crashed" if cause == "lost_server" else status,
                    remote_server(status, diag, k, theirs, self.cfg.node_rank))
        if self.died is not None:
            return None  # no other node lost its server first: this host's own death stands
        if (diag or {}).get("culprit_node") or (diag or {}).get("cause") == "lost_node":
            return None  # another node's result or a lost connection already names where it stopped
        others = [{"node": k, "host": (results.get(k) or {}).get("env", {}).get("hostname")
                   or self.host_of(k)} for k in range(self.cfg.nodes) if k != self.cfg.node_rank]
        pointed = remote_server_stall(status, diag, self.stall, others)
        return (status, pointed) if pointed is not None else None

    def host_of(self, node: int) -> str | None:
        """Node `node`'s address in the run's ip_config (the host's name is in its own result)."""
        try:
            return RunDir(self.out).ip_config.read_text().split("\n")[node].split()[0]
        except (OSError, IndexError, TypeError):
            return None

    def stop(self, grace_s: float, replicated_model: dict | None = None) -> dict:
        """Wait up to `grace_s` for the server to leave (the trainers' rank 0 shuts every server
        down when training ends), then stop it (SIGTERM, then SIGKILL, its process group).
        Returns how it ended and the host's memory, next to what the pre-flight model says a
        replicated run of the same point holds on this host (`replicated_model`, runners.memory.model)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        # The sampler looks every SAMPLE_INTERVAL_S: a server killed since its last look, whose
        # trainers then ended at once, is seen here, before anything of the launcher's stops it.
        self._check_ended()
        stopped_by = "shutdown request from the trainers"
        # A server that stopped making progress never acts on a shutdown request, and continued it
        # could answer another node's waiting trainer: SIGKILL at once (it ends a stopped process too).
        stalled = self.stall is not None and self._stalled()
        try:
            self.proc.wait(timeout=0.1 if stalled else grace_s)
        except subprocess.TimeoutExpired:
            stopped_by = "the launcher"
            for sig, wait_s in ((signal.SIGKILL, 10.0),) if stalled else ((signal.SIGTERM, grace_s),
                                                                            (signal.SIGKILL, 10.0)):
                try:
                    if sig == signal.SIGTERM:  # a stopped process acts on SIGTERM only once continued
                        os.killpg(self.proc.pid, signal.SIGCONT)
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(timeout=wait_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
        code = self.proc.returncode
        if stalled:
            stopped_by = "the launcher (stalled)"
        return {"pid": self.proc.pid, "host": self.host, "node": self.cfg.node_rank,
                "exit_code": code if code is None or code >= 0 else None,
                "signal": signal.Signals(-code).name if code is not None and code < 0 else None,
                "stopped_by": "died mid-run" if self.died else stopped_by, "died": self.died,
                "log": str(self.log_path), "memory": {**self.memory(), **replicated(replicated_model)}}

    def _stalled(self) -> bool:
        from runners.watch.diagnosis import server_stall

        return server_stall(self.stall) is not None

    def memory(self) -> dict:
        """This host's peak: the server's PSS plus its trainers' at the worst sample."""
        if not self.samples:
            return {"host_peak_bytes": None, "samples": 0}
        worst = max(self.samples, key=lambda s: (s[1] or 0) + s[2])
        return {"host_peak_bytes": (worst[1] or 0) + worst[2], "server_bytes_at_peak": worst[1],
                "trainers_bytes_at_peak": worst[2], "peak_t_s": worst[0],
                "server_peak_bytes": max((s[1] or 0) for s in self.samples),
                "samples": len(self.samples), "interval_s": SAMPLE_INTERVAL_S,
                "rule": "PSS of this host's graph server plus its trainers, sampled together by the launcher"}


def replicated(model: dict | None) -> dict:
    """The pre-flight model of this host (model_peak) beside that of a replicated run of the
    same point, whose every host holds the whole dataset."""
    if not model:
        return {}
    rep = model.get("replicated", model)
    mine = {"model_bytes": model["total_bytes"], "model_sampled_bytes": model.get("sampled_bytes"),
            "model_partition_bytes": model["terms_bytes"].get("partition")} if "replicated" in model else {}
    return {**mine, "replicated_model_bytes": rep["total_bytes"],
            "replicated_model_dataset_bytes": rep["terms_bytes"].get("dataset_shared"),
            "replicated_rule": "runners.memory.model's pre-flight model of this point with the whole graph on the host"}


# The graph server before it loads a partition (interpreter, torch, DGL, its RPC services):
# about 270 MB PSS, measured on the two test hosts (benchmarks.partitioned_memory, 2026-11-25).
SERVER_BASELINE_BYTES = 270 * 2**20
# Without the partition's files: DGL keeps per local edge its two ends and an int64 edge id, per
# local node its int64 id and flags (about 24 bytes each in part*/graph.dgl on `wide`), and the
# 1-hop halo adds local nodes and edges (on `wide`, P=2: 0.67x more nodes, 0.16x more edges).
EST_BYTES_PER_LOCAL_EDGE, EST_BYTES_PER_LOCAL_NODE = 24, 24
EST_HALO_NODES, EST_HALO_EDGES = 1.0, 0.25  # more than `wide` showed: an estimate that errs high


def partition_files(cfg, graph_meta: dict) -> tuple:
    """(directory, this host's partition bytes from its manifest) when the run's partitions are
    already made (runners.partitioned.split caches them by dataset hash, P and method), else (None, None)."""
    from runners.partitioned import split as partitions

    if not graph_meta.get("dataset_hash"):
        return None, None
    where = partitions.directory(Path(cfg.data_root).parent / "partitions", cfg.dataset, graph_meta["dataset_hash"],
                                 cfg.nodes, cfg.part_method)
    try:
        files = partitions.read_manifest(where)["files"]
    except partitions.PartitionError:
        return None, None
    mine = {f: i["bytes"] for f, i in files.items() if f.startswith(f"part{cfg.node_rank}/")}
    return (where, sum(mine.values())) if mine else (None, None)


def model_peak(cfg, graph_meta: dict) -> dict:
    """Modelled peak memory of this host of a partitioned run: runners.memory's replicated model
    of the point with the whole dataset replaced by this host's partition (its own files when
    made: features of its inner nodes, structure with halo and int64 edge ids; else an estimate
    from the graph's size over P), plus the graph server (its baseline and the responses it
    builds for every trainer's requests). `sampled_bytes` leaves out the torchrun agent: the
    processes whose PSS the launcher samples as the host's peak (Server.memory)."""
    from runners.memory.model import model_peak as replicated_model

    rep = replicated_model(cfg, graph_meta)
    parts = max(cfg.nodes, 1)
    where, part_bytes = partition_files(cfg, graph_meta)
    if part_bytes is None:
        n, e, feats = (graph_meta.get(k, 0) for k in ("num_nodes", "num_edges", "num_features"))
        inner = n / parts
        part_bytes = (inner * (feats * 4 + 8) + inner * (1 + EST_HALO_NODES) * EST_BYTES_PER_LOCAL_NODE
                      + e / parts * (1 + EST_HALO_EDGES) * EST_BYTES_PER_LOCAL_EDGE)
    # The server answers every trainer's sampling and feature requests for its partition: about
    # 1/P of each trainer's batch, one being built and one being sent.
    responses = 2 * cfg.devices * cfg.nodes * rep["inputs"]["batch_bytes"] / parts
    terms = {k: v for k, v in rep["terms_bytes"].items() if k not in ("dataset_shared", "dataset_copies")}
    terms.update(partition=int(part_bytes), server_baseline=SERVER_BASELINE_BYTES, server_responses=int(responses))
    total = int(sum(terms.values()))
    return {"total_bytes": total, "terms_bytes": terms, "sampled_bytes": total - terms["agent_baseline"],
            "inputs": {**rep["inputs"], "partitions": parts, "partition_source":
                       f"{where}/part{cfg.node_rank} (manifest sizes)" if where else
                       "estimate: features and ids of N/P nodes, structure of E/P edges with a 1-hop halo",
                       "dataset_copy_per_rank_bytes": 0},
            "replicated": {"total_bytes": rep["total_bytes"], "terms_bytes": rep["terms_bytes"]}}


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


@dataclass
class ServerFacts:
    """This host's graph server as diagnosis.OVERRIDES reads it (Findings.server): the server, with
    the run directory and start the other nodes' results are found by."""

    server: Server
    out: Path
    started_at: str

    def explain(self, status: str, diag: dict | None):
        return self.server.explain(status, diag)

    def adopt_remote(self, status: str, diag: dict | None):
        return self.server.adopt_remote(self.out, self.started_at, status, diag)


def start_server(cfg, the_plan: Plan, out: Path) -> Server:
    """Start this host's DistGraphServer in a session of its own (stopped by its group)."""
    env = {**os.environ, **the_plan.server_env(cfg), "PYTHONUNBUFFERED": "1"}
    from runners.records import envinfo

    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(envinfo.REPO_ROOT), os.environ.get("PYTHONPATH")]))
    log_path = RunDir(out).server_log(cfg.node_rank)
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "runners.adapters.dgl_dist", "serve"], env=env,
                                cwd=str(envinfo.REPO_ROOT), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    atexit.register(_kill_group, proc)  # whatever happens to the launcher, no server outlives it
    say(f"graph server {cfg.node_rank} (partition {cfg.node_rank} of {cfg.nodes}, {the_plan.partitions.name}) "
        f"pid {proc.pid}")
    return Server(cfg, proc, log_path, time.time(), os.uname().nodename, out=out)
