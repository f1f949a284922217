"""What this machine and Python environment are, without importing the frameworks.

The launcher records this in every result. Frameworks are NOT imported here: importing DGL
changes PYTORCH_CUDA_ALLOC_CONF, and a launcher that imported it would leak that change into
PyG's ranks. Versions come from package metadata instead; each rank records its own
environment variables after its framework is imported.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from runners.adapters import registry  # light: no torch, PyG or DGL
from runners.adapters.registry import package_version  # noqa: F401 (the one version reader)

REPO_ROOT = Path(__file__).resolve().parents[2]  # runners/records/envinfo.py: the repository
# CPU use (%) by other work just before a run's launch above which its timing is suspect: the
# launcher warns, and the report counts such runs (analysis re-exports it).
BUSY_WARN_PERCENT = 25

# Variables that change what a run measures; each rank records their values (each framework
# declares its own in the registry).
RECORDED_ENV_VARS = (
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTORCH_CUDA_ALLOC_CONF", "CUDA_VISIBLE_DEVICES",
    "NCCL_DEBUG", "NCCL_P2P_DISABLE", "NCCL_IB_DISABLE",
    "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
    "KMP_AFFINITY", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
) + tuple(v for f in registry.FRAMEWORKS.values() for v in f.env_vars)


def framework_packages() -> dict:
    """Each framework's packages (its registry entry's) and facts about its installation."""
    info = {key: package_version(*names) for f in registry.FRAMEWORKS.values() for key, names in f.packages.items()}
    info.update({key: probe() for f in registry.FRAMEWORKS.values() for key, probe in f.env_facts.items()})
    return info


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_cores() -> int:
    """Cores this process may run on (cgroup/affinity aware where the OS tells)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def memory_bytes():
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except Exception:
        return None


def shm_bytes(free: bool = False):
    """Size of /dev/shm (or what is free of it now), None without one."""
    try:
        u = shutil.disk_usage("/dev/shm")
        return int(u.free if free else u.total)
    except OSError:
        return None


def open_files_limit() -> int:
    return int(resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def nvml_status() -> dict:
    """GPUs seen by NVML, or why NVML is unavailable. Never raises."""
    try:
        import pynvml
    except Exception as exc:  # nvidia-ml-py not installed
        return {"available": False, "reason": f"nvidia-ml-py not importable: {exc}", "gpus": []}
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return {"available": False, "reason": f"nvmlInit failed: {type(exc).__name__}: {exc}", "gpus": []}
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            gpus.append({"index": i, "name": name if isinstance(name, str) else name.decode(),
                         "memory_bytes": int(mem.total)})
        driver = pynvml.nvmlSystemGetDriverVersion()
        return {"available": True, "reason": None, "gpus": gpus,
                "driver": driver if isinstance(driver, str) else driver.decode()}
    finally:
        pynvml.nvmlShutdown()


def visible_gpu_count(nvml: dict | None = None) -> int:
    """GPUs this process may use: the one GPU counter of the suite (runner, doctor, workflow).

    NVML's count narrowed by CUDA_VISIBLE_DEVICES; where NVML sees none (library missing,
    container without it) but the machine has an NVIDIA driver, torch's own count, which
    honours CUDA_VISIBLE_DEVICES itself. Machines without /dev/nvidiactl never import torch.
    """
    nvml = nvml_status() if nvml is None else nvml
    count = len(nvml.get("gpus", []))
    mask = os.environ.get("CUDA_VISIBLE_DEVICES")
    if mask is not None:
        entries = []
        for entry in mask.split(","):
            if entry.strip() in ("", "-1"):
                break  # CUDA ignores an invalid entry and everything after it
            entries.append(entry)
        count = min(count, len(entries))
    if count == 0 and os.path.exists("/dev/nvidiactl"):
        try:
            import torch

            count = torch.cuda.device_count()
        except Exception:
            count = 0
    return count


def git_state() -> dict:
    def run(*args):
        try:
            return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except Exception:
            return ""

    commit = run("rev-parse", "HEAD") or None
    dirty = bool(run("status", "--porcelain", "--untracked-files=no")) if commit else None
    return {"git_commit": commit, "git_dirty": dirty}


# What a SLURM job says about where it runs (srun/sbatch set these in every task's environment).
SLURM_VARS = {"job_id": "SLURM_JOB_ID", "job_name": "SLURM_JOB_NAME", "step_id": "SLURM_STEP_ID",
              "nodelist": "SLURM_JOB_NODELIST", "nnodes": "SLURM_JOB_NUM_NODES", "ntasks": "SLURM_NTASKS",
              "procid": "SLURM_PROCID", "nodeid": "SLURM_NODEID", "partition": "SLURM_JOB_PARTITION",
              "cpus_on_node": "SLURM_CPUS_ON_NODE", "cluster": "SLURM_CLUSTER_NAME",
              "array_job_id": "SLURM_ARRAY_JOB_ID", "array_task_id": "SLURM_ARRAY_TASK_ID",
              "restart_count": "SLURM_RESTART_COUNT"}


def scheduler() -> dict:
    """The batch scheduler the launcher runs under: SLURM's job, step and nodes, or none
    (the report shows them, and a result can be traced to its job's logs and limits)."""
    if "SLURM_JOB_ID" not in os.environ:
        return {"name": "none"}
    info = {"name": "slurm"}
    info.update({k: os.environ[v] for k, v in SLURM_VARS.items() if v in os.environ})
    return info


# Written by scripts/setup.sh into the environment it built (scripts/lane_manifest.py).
LANE_MANIFEST = "gnnscale-lane.json"
# Lanes installed from a lock that was tested to import every framework it lists.
LOCKED_LANES = ("pair", "current")


def lane_interpreter(lane: str) -> str | None:
    """The interpreter scripts/setup.sh makes for a lane, relative to the repository root
    (.venv/bin/python for the pair, .venv-LANE/bin/python for the others); None for a Python
    it did not build."""
    if lane not in ("pair", "current", "own"):
        return None
    return os.path.join(".venv" if lane == "pair" else f".venv-{lane}", "bin", "python")


def lane() -> dict:
    """The lane this Python is (pair, current, own) and where each of its packages came from:
    reused from the Python the lane was built on, or installed by the set-up. A Python that
    scripts/setup.sh did not build is 'unmanaged', with the reason."""
    path = Path(sys.prefix) / LANE_MANIFEST
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return {"lane": "unmanaged", "reason": f"{path} unreadable ({type(exc).__name__}): this Python was "
                "not set up by scripts/setup.sh", "packages": {}, "reused": [], "installed": []}


def framework_unavailable(name: str, env: dict) -> str | None:
    """Why framework `name` cannot run in this Python (not installed, or its import fails, as
    DGL's does on a torch newer than 2.4), naming the lane and the torch; None when it can.

    The import is tried in a subprocess (importing DGL changes process-wide settings), and only
    outside the locked lanes, whose locks were tested to import what they carry: a run launch
    there pays no extra interpreter start."""
    fw = registry.framework(name)
    where = f"lane {env['lane']['lane']}, torch {env['torch']}, Python {env['python']}"
    version = package_version(*fw.distributions)
    if version is None:
        return f"{fw.label} ({fw.distributions[-1]}) is not installed in this environment ({where})"
    if env["lane"]["lane"] in LOCKED_LANES:
        return None
    res = subprocess.run([sys.executable, "-c", f"import {fw.module}"], capture_output=True, text=True,
                         timeout=300, cwd=REPO_ROOT)
    if res.returncode != 0:
        lines = [line for line in res.stderr.splitlines() if line.strip()]
        return (f"import {fw.module} ({fw.distributions[-1]} {version}) fails ({where}): "
                f"{lines[-1] if lines else res.returncode}")
    return None


class NoRoute(Exception):
    """The master address of a multi-node run cannot be resolved or reached from this host."""


# The variables that bind a backend's sockets to one interface, and the value that names
# exactly that interface: gloo takes a list of names; NCCL prefixes ("eth1" also matches eth10),
# "=" makes its match exact.
SOCKET_IFNAMES = {"GLOO_SOCKET_IFNAME": "{}", "NCCL_SOCKET_IFNAME": "={}"}


def network(master_addr: str, master_port: int) -> dict:
    """How this node reaches a multi-node run's master: the local address the kernel routes
    from (a UDP connect: no packet is sent), its interface, and the interface gloo and NCCL are
    bound to. Gloo otherwise binds the address its hostname resolves to, on many hosts 127.0.1.1
    (Debian's /etc/hosts): the other nodes then cannot reach it ("Gloo connectFullMesh failed");
    NCCL picks the first interface that is not loopback or docker, which need not be the one the
    nodes share. A variable set by the user wins. Raises NoRoute naming the address."""
    import psutil

    try:
        family, _, _, _, where = socket.getaddrinfo(master_addr, master_port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect(where)
            local = s.getsockname()[0]
    except OSError as exc:
        raise NoRoute(f"--master-addr {master_addr}: not reachable from this host "
                      f"({exc.strerror or exc}); give the master node's address on a network this host shares") from exc
    interface = next((name for name, addrs in psutil.net_if_addrs().items()
                      if any(a.address.split("%")[0] == local for a in addrs)), None)
    found = {"master_addr": master_addr, "master_port": master_port, "master_ip": where[0],
             "address": local, "interface": interface}
    for var, form in SOCKET_IFNAMES.items():
        chosen = os.environ.get(var)
        found[var.lower()] = chosen or (form.format(interface) if interface else None)
        found[f"{var.lower()}_source"] = "environment" if chosen else "the interface that routes to the master"
    return found


def collect() -> dict:
    """Everything recorded in result.json's `env` (except the dataset hash)."""
    nvml = nvml_status()
    info = {
        "python": platform.python_version(),
        "torch": package_version("torch"),
        **framework_packages(),
        "numpy": package_version("numpy"),
        "lightning": package_version("lightning"),  # the seed-study harness (--harness study)
        "gpus": nvml["gpus"],
        "nvml": {"available": nvml["available"], "reason": nvml["reason"], "driver": nvml.get("driver")},
        "cpu_model": cpu_model(),
        "cpu_cores": cpu_cores(),
        "memory_bytes": memory_bytes(),
        "shm_bytes": shm_bytes(),
        "shm_free_bytes": shm_bytes(free=True),
        "open_files_limit": open_files_limit(),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "scheduler": scheduler(),
        "lane": lane(),
        "dataset_hash": None,
    }
    info.update(git_state())
    return info


def process_created() -> float:
    """When this process was created, on time.time()'s clock. Its age comes from two clocks
    that both count from boot (/proc/self/stat's start time, /proc/uptime), to 10 ms; psutil's
    create_time adds the boot time, which the kernel gives in whole seconds."""
    import time

    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - (uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        import psutil

        return psutil.Process().create_time()
