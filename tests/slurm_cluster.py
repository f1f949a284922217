"""A private SLURM cluster for the tests: munged, slurmctld and slurmd started by hand (no
systemd) in a scratch directory, on free ports, with its own munge key and socket, so that it
cannot meet a cluster already on the machine. Stopped by PID.

Two shapes: one node, this machine itself; or a cluster across the network-namespace hosts of
tests/netns_hosts.py, where the last host is the head (munged, slurmctld; clients and Snakemake
run there, as on a login node) and every other host a compute node with a slurmd of its own
(NodeName its hostname, NodeAddr its address). The hosts share this machine's filesystem, as a
cluster shares its home: one slurm.conf, munge's socket, the project and the runs' --out.

The slurm.conf is the smallest that runs the workflow: select/cons_tres (jobs share
the node by cores), proctrack/linuxproc and task/none (no cgroups needed, works in containers),
no accounting (there is no slurmdbd: `sacct` fails, so the executor polls `squeue`), a
DefMemPerCPU (without it every job takes the node's whole memory and jobs run one at a time)
a no-op MailProg, and no requeue (a job whose node failed ends, with the state NODE_FAIL).
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests import netns_hosts

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "squeue", "scancel", "scontrol", "sinfo")
_OURS: set = set()  # every daemon PID a Cluster of this process started: not "a cluster already here"


class Unavailable(Exception):
    """Why this machine cannot host the private cluster (the tests skip with it)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def why_not() -> str | None:
    """None when a private cluster can start here, else the reason."""
    if os.geteuid() != 0:
        return "the private SLURM cluster needs root (slurmd runs jobs as their users)"
    missing = [t for t in DAEMONS + CLIENTS if shutil.which(t, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None]
    if missing:
        return (f"SLURM/munge not installed ({', '.join(missing)} missing): "
                "`make slurm` installs slurm-wlm and munge with apt")
    running = [p for p in subprocess.run(["pgrep", "-x", "slurmctld|slurmd"], capture_output=True,
                                         text=True).stdout.split() if int(p) not in _OURS]
    if running:
        return f"a SLURM daemon is already running here (pid {', '.join(running)}); not starting a second cluster"
    return None


class Cluster:
    """munged + slurmctld + a slurmd per node in `root`; `env` is what clients and Snakemake
    need, `argv()` where they run. `hosts` (tests/netns_hosts.Hosts of 3 or more, not started):
    the cluster across them, which start() makes and stop() removes; else one node, this machine."""

    def __init__(self, root: Path, kill_wait_s: int = 30, min_job_age_s: int = 300, hosts=None,
                 slurmd_timeout_s: int = 300, private_shm: bool = False):
        self.root = Path(root)
        self.hosts = hosts
        # each compute host's slurmd (and so every job it starts) on a /dev/shm of its own
        # (netns_hosts.Hosts.argv): DistDGL's graph servers name their shared memory after the
        # graph, and two hosts sharing one /dev/shm would collide where real hosts cannot
        self.private_shm = private_shm
        self.head = None  # the host of slurmctld and the clients; None: this machine
        self.nodes = [None]  # the compute nodes' hosts
        self.host = socket.gethostname().split(".")[0]  # slurmctld's hostname
        self.node_names = [self.host]
        self.cpus = os.cpu_count() or 1
        self.kill_wait_s, self.min_job_age_s, self.slurmd_timeout_s = kill_wait_s, min_job_age_s, slurmd_timeout_s
        self.procs: dict[str, tuple] = {}  # running daemons: name -> (pid, start time), in start order
        self.started: dict[str, tuple] = {}  # every daemon ever started (leftovers() checks them)
        self.conf = self.root / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.socket"
        sbin = "/usr/sbin:/sbin"
        self.bin = self.root / "bin"
        self._which = lambda t: shutil.which(t, path=os.environ.get("PATH", "") + os.pathsep + sbin)
        # Clients find this cluster's slurm.conf through wrappers first on PATH: the SLURM
        # executor's job step drops every SLURM_* variable (SLURM_CONF too) before its srun,
        # and the machine's /etc/slurm must stay untouched.
        self.env = {**os.environ, "SLURM_CONF": str(self.conf),
                    "PATH": os.pathsep.join([str(self.bin), os.environ.get("PATH", ""), sbin])}

    def write_config(self) -> None:
        mem_mb = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20 * 0.8)
        for d in ("state", "spool", "log", "munge"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root / "munge", 0o700)
        self.bin.mkdir(exist_ok=True)
        for tool in CLIENTS + ("sacct", "scontrol"):
            real = self._which(tool)
            if real:
                wrapper = self.bin / tool
                wrapper.write_text(f'#!/bin/sh\nSLURM_CONF={self.conf} exec {real} "$@"\n')
                wrapper.chmod(0o755)
        user = getpass.getuser()
        # slurmd initialises a cgroup plugin whatever the other plugins; autodetection fails
        # in a network-namespace host, whose fresh /sys (ip netns exec) has no cgroup mounts.
        (self.root / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")
        self.node_names = [h.hostname if h else self.host for h in self.nodes]
        for name in self.node_names:
            (self.root / "spool" / name).mkdir(exist_ok=True)
        nodes = [f"NodeName={name}" + (f" NodeAddr={h.address}" if h else "") +
                 f" CPUs={self.cpus} RealMemory={mem_mb} State=UNKNOWN" for name, h in zip(self.node_names, self.nodes)]
        self.conf.write_text("\n".join([
            "ClusterName=gnnscale-test",
            f"SlurmctldHost={self.host}" + (f"({self.head.address})" if self.head else ""),
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            f"SlurmUser={user}",
            f"SlurmdUser={user}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={self.root / 'state'}",
            # %n: the node's name, so that the slurmds of one filesystem keep apart
            f"SlurmdSpoolDir={self.root / 'spool' / '%n'}",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={self.root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={self.root / 'log' / 'slurmd-%n.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "ReturnToService=2",
            "JobRequeue=0",
            "MailProg=/bin/true",
            f"KillWait={self.kill_wait_s}",
            # how long a silent slurmd takes to be declared DOWN (and its jobs NODE_FAIL)
            f"SlurmdTimeout={self.slurmd_timeout_s}",
            # The executor polls squeue; a finished job must stay visible to it for at least
            # 3 x its first status-check delay, or the executor falls back to sacct.
            f"MinJobAge={self.min_job_age_s}",
            f"DefMemPerCPU={mem_mb // self.cpus}",
            *nodes,
            f"PartitionName=test Nodes={','.join(self.node_names)} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]))

    def argv(self, argv: list, host=None, private_shm: bool = False) -> list:
        """`argv` as run on `host` (a netns host), by default where clients run: the head."""
        host = host or self.head
        return self.hosts.argv(host, argv, private_shm) if host else list(argv)

    def _start(self, name: str, argv: list, pidfile: Path, host=None, private_shm: bool = False) -> None:
        log = open(self.root / "log" / f"{name}.out", "w")
        # nice 19: the cluster's jobs inherit it and must not slow down other work on the machine.
        # The daemon forks into the background; it stays in the host's namespaces.
        subprocess.run(self.argv(["nice", "-n", "19", *argv], host, private_shm), env=self.env, stdout=log,
                       stderr=subprocess.STDOUT, check=True, timeout=30)
        deadline = time.time() + 15
        while not (pidfile.exists() and pidfile.read_text().strip()):
            if time.time() > deadline:
                raise Unavailable(f"{name} did not start: {self._tail(name)}")
            time.sleep(0.1)
        pid = int(pidfile.read_text().split()[0])
        self.procs[name] = self.started[name] = (pid, _start_time(pid))
        _OURS.add(pid)

    def _tail(self, name: str) -> str:
        text = ""
        for f in (self.root / "log").glob(f"{name}*"):
            text += f.read_text()[-1500:]
        return text

    def start(self) -> "Cluster":
        try:
            return self._start_all()
        except (OSError, subprocess.SubprocessError, Unavailable) as exc:
            self.stop()  # whatever did start
            raise exc if isinstance(exc, Unavailable) else Unavailable(f"{exc}: {self._tail('')}") from exc

    def _start_all(self) -> "Cluster":
        if self.hosts:
            try:
                self.hosts.start()
            except netns_hosts.Unavailable as exc:
                raise Unavailable(str(exc)) from exc
            *self.nodes, self.head = self.hosts.hosts
            self.host = self.head.hostname
        self.write_config()
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        # --force: root, and a key in a scratch directory under sticky /tmp.
        self._start("munged", [self._which("munged"), "--force", f"--socket={self.munge_socket}",
                               f"--key-file={key}", f"--pid-file={self.root / 'munge' / 'munged.pid'}",
                               f"--log-file={self.root / 'log' / 'munged.log'}",
                               f"--seed-file={self.root / 'munge' / 'munged.seed'}"],
                    self.root / "munge" / "munged.pid")
        self._start("slurmctld", [self._which("slurmctld"), "-f", str(self.conf)],
                    self.root / "slurmctld.pid")
        for name, host in zip(self.node_names, self.nodes):
            self._start(f"slurmd-{name}", [self._which("slurmd"), "-f", str(self.conf)],
                        self.root / f"slurmd-{name}.pid", host, private_shm=self.private_shm and host is not None)
        deadline = time.time() + 30
        while True:  # every node up: one line per node, each idle (at most 30 s)
            states = self.run("sinfo", "-h", "-N", "-o", "%t", check=False).stdout.split()
            if len(states) == len(self.nodes) and all(s in ("idle", "mix", "alloc") for s in states):
                return self
            if time.time() > deadline:
                raise Unavailable(f"the nodes did not come up (sinfo: {states!r}): "
                                  f"{self._tail('slurmctld')}{self._tail('slurmd')}")
            time.sleep(0.2)

    def run(self, *argv, check=True, timeout=60) -> subprocess.CompletedProcess:
        """A client command, where clients run."""
        return subprocess.run(self.argv([self._which(argv[0]), *argv[1:]]), env=self.env, capture_output=True,
                              text=True, check=check, timeout=timeout)

    def leftovers(self) -> list:
        """Every daemon this cluster started that is still alive (by PID), and what is left of
        its hosts (netns_hosts.Hosts.leftovers). Empty after stop()."""
        found = [f"{name} (pid {pid})" for name, (pid, start) in self.started.items() if _alive(pid, start)]
        return found + (self.hosts.leftovers() if self.hosts else [])

    def stop(self) -> None:
        """Cancel what is left, then stop the daemons by PID (slurmds, slurmctld, munged)."""
        if "slurmctld" in self.procs and any(n.startswith("slurmd-") for n in self.procs):
            self.run("scancel", "--user", getpass.getuser(), check=False)
            # the jobs' own processes end with their steps, which need slurmd to be told
            deadline = time.time() + self.kill_wait_s + 15
            while time.time() < deadline and self.run("squeue", "-h", check=False).stdout.strip():
                time.sleep(0.5)
        for name in reversed(list(self.procs)):  # the slurmds first, munged last
            pid, start = self.procs.pop(name)
            # a daemon a test killed is gone, and its PID may be another process's by now
            for sig, wait_s in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
                try:
                    if not _alive(pid, start):
                        break
                    os.kill(pid, sig)
                except ProcessLookupError:  # it ended between the two
                    break
                deadline = time.time() + wait_s
                while time.time() < deadline and _alive(pid, start):
                    time.sleep(0.1)
        if self.hosts:
            self.hosts.stop()  # whatever still runs in a host, then the namespaces and links


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot, /proc/PID/stat): with the PID, its identity."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields[19]  # a zombie is not alive


def _alive(pid: int, start: str | None) -> bool:
    """The process started as (pid, start) still runs (not a zombie, not a new process on its PID)."""
    return start is not None and _start_time(pid) == start
