"""A private single-node SLURM cluster for the tests: munged, slurmctld and slurmd started by
hand (no systemd) in a scratch directory, on free ports, with its own munge key and socket, so
that it cannot meet a cluster already on the machine. Stopped by PID.

The one-node slurm.conf is the smallest that runs the workflow: select/cons_tres (jobs share
the node by cores), proctrack/linuxproc and task/none (no cgroups needed, works in containers),
no accounting (there is no slurmdbd: `sacct` fails, so the executor polls `squeue`), a
DefMemPerCPU (without it every job takes the node's whole memory and jobs run one at a time)
and a no-op MailProg.
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

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "squeue", "scancel", "scontrol", "sinfo")


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
    running = subprocess.run(["pgrep", "-x", "slurmctld|slurmd"], capture_output=True, text=True).stdout.split()
    if running:
        return f"a SLURM daemon is already running here (pid {', '.join(running)}); not starting a second cluster"
    return None


class Cluster:
    """One munged + slurmctld + slurmd in `root`; `env` is what clients and Snakemake need."""

    def __init__(self, root: Path, kill_wait_s: int = 30, min_job_age_s: int = 300):
        self.root = Path(root)
        self.host = socket.gethostname().split(".")[0]
        self.cpus = os.cpu_count() or 1
        self.kill_wait_s, self.min_job_age_s = kill_wait_s, min_job_age_s
        self.procs: dict[str, int] = {}
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
        self.conf.write_text("\n".join([
            "ClusterName=gnnscale-test",
            f"SlurmctldHost={self.host}",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            f"SlurmUser={user}",
            f"SlurmdUser={user}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={self.root / 'state'}",
            f"SlurmdSpoolDir={self.root / 'spool'}",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'slurmd.pid'}",
            f"SlurmctldLogFile={self.root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={self.root / 'log' / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "ReturnToService=2",
            "MailProg=/bin/true",
            f"KillWait={self.kill_wait_s}",
            # The executor polls squeue; a finished job must stay visible to it for at least
            # 3 x its first status-check delay, or the executor falls back to sacct.
            f"MinJobAge={self.min_job_age_s}",
            f"DefMemPerCPU={mem_mb // self.cpus}",
            f"NodeName={self.host} CPUs={self.cpus} RealMemory={mem_mb} State=UNKNOWN",
            f"PartitionName=test Nodes={self.host} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]))

    def _start(self, name: str, argv: list, pidfile: Path | None) -> None:
        log = open(self.root / "log" / f"{name}.out", "w")
        # nice 19: the cluster's jobs inherit it and must not slow down other work on the machine.
        subprocess.run(["nice", "-n", "19", *argv], env=self.env, stdout=log, stderr=subprocess.STDOUT,
                       check=True, timeout=30)
        deadline = time.time() + 15
        while pidfile is not None and not (pidfile.exists() and pidfile.read_text().strip()):
            if time.time() > deadline:
                raise Unavailable(f"{name} did not start: {self._tail(name)}")
            time.sleep(0.1)
        self.procs[name] = int(pidfile.read_text().split()[0])

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
        self._start("slurmd", [self._which("slurmd"), "-f", str(self.conf)], self.root / "slurmd.pid")
        deadline = time.time() + 30
        while True:
            out = self.run("sinfo", "-h", "-N", "-o", "%t", check=False).stdout.strip()
            if out in ("idle", "mix", "alloc"):
                return self
            if time.time() > deadline:
                raise Unavailable(f"the node did not come up (sinfo: {out!r}): "
                                  f"{self._tail('slurmctld')}{self._tail('slurmd')}")
            time.sleep(0.2)

    def run(self, *argv, check=True, timeout=60) -> subprocess.CompletedProcess:
        return subprocess.run([self._which(argv[0]), *argv[1:]], env=self.env, capture_output=True,
                              text=True, check=check, timeout=timeout)

    def stop(self) -> None:
        """Cancel what is left, then stop the daemons by PID (slurmd, slurmctld, munged)."""
        if "slurmctld" in self.procs and "slurmd" in self.procs:
            self.run("scancel", "--user", getpass.getuser(), check=False)
            # the jobs' own processes end with their steps, which need slurmd to be told
            deadline = time.time() + self.kill_wait_s + 15
            while time.time() < deadline and self.run("squeue", "-h", check=False).stdout.strip():
                time.sleep(0.5)
        for name in ("slurmd", "slurmctld", "munged"):
            pid = self.procs.pop(name, None)
            if pid is None:
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.time() + 15
            while time.time() < deadline and _alive(pid):
                time.sleep(0.1)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is not alive; our daemons are not our children, so this is rare but cheap
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
