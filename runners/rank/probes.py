"""Cheap probes used inside each rank: heartbeat, CPU/memory sampler, NVML sampler.

The heartbeat is a few bytes in a memory-mapped file that the rank overwrites in place at
every phase change (a struct pack, no system call), so the watchdog can read every rank's
progress without the rank paying for I/O. The samplers are background threads that wake
at a fixed interval; each records its own cost so that probe overhead is itself measured.
"""

from __future__ import annotations

import csv
import errno
import mmap
import os
import signal
import struct
import threading
import time
from pathlib import Path

# time, epoch, step, phase, steps_per_epoch, pid, beats
HEARTBEAT_FORMAT = "<diiiiiq"
HEARTBEAT_SIZE = struct.calcsize(HEARTBEAT_FORMAT)
HEARTBEAT_PHASES = ("starting", "loading", "copy", "forward", "backward", "optimizer", "evaluation",
          "epoch-sync", "done", "failed", "rendezvous", "data-load", "model-build")
# A rank's start-up before its first step, in order ('starting': the interpreter and imports);
# the watchdog holds each to a limit of its own (runners.watch.supervisor.startup_limits).
STARTUP_PHASES = ("starting", "rendezvous", "data-load", "model-build")
PHASE_CODE = {name: i for i, name in enumerate(HEARTBEAT_PHASES)}
# Where a rank blocks when it stops in a phase (used by the diagnosis).
PHASE_BLOCKED_IN = {
    "starting": "start-up: interpreter and imports",
    "rendezvous": "start-up: rendezvous and process-group set-up (waits for every rank)",
    "data-load": "start-up: loading the dataset",
    "model-build": "start-up: building the model and the loader",
    "loading": "loader (waiting for the next mini-batch)",
    "copy": "host-to-device copy",
    "forward": "forward computation",
    "backward": "collective (gradient all-reduce in backward)",
    "optimizer": "optimiser step",
    "evaluation": "evaluation (collective at its end)",
    "epoch-sync": "collective (end-of-epoch synchronisation)",
    "done": "finished",
    "failed": "raised an exception",
}


class Heartbeat:
    """A rank's progress record, overwritten in place."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "wb") as fh:
            fh.write(b"\0" * HEARTBEAT_SIZE)
        self._fh = open(self.path, "r+b")
        self._mm = mmap.mmap(self._fh.fileno(), HEARTBEAT_SIZE)
        self.epoch = -1
        self.step = -1
        self.steps_per_epoch = -1
        self._beats = 0
        self.beat("starting")

    def beat(self, phase: str, epoch: int | None = None, step: int | None = None) -> None:
        if epoch is not None:
            self.epoch = epoch
        if step is not None:
            self.step = step
        self._beats += 1
        self.phase = phase
        struct.pack_into(HEARTBEAT_FORMAT, self._mm, 0, time.time(), self.epoch, self.step,
                         PHASE_CODE[phase], self.steps_per_epoch, os.getpid(), self._beats)


def read_heartbeat(path: Path):
    """The last heartbeat of a rank as a dict, or None if it never wrote one."""
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return None
    if len(raw) < HEARTBEAT_SIZE:
        return None
    t, epoch, step, phase, spe, pid, beats = struct.unpack_from(HEARTBEAT_FORMAT, raw)
    if beats == 0:
        return None
    name = HEARTBEAT_PHASES[phase] if 0 <= phase < len(HEARTBEAT_PHASES) else "?"
    return {"t": t, "epoch": epoch, "step": step, "phase": name, "steps_per_epoch": spe, "pid": pid, "beats": beats}


# A rank that cannot write its records prints this line instead of a traceback; the launcher
# stops the run on it (runners.run, exit code 3).
DISK_FULL_MARK = "[gnnscale] disk full:"


def disk_full(exc: BaseException) -> bool:
    """A write failed for lack of space or quota: the run cannot record anything more."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


PF_EXITING = 0x4  # /proc/PID/stat flag of a process that is in the middle of exiting


def proc_stat(pid: int):
    """A process's state letter, flags, CPU seconds and wait status from /proc/PID/stat.

    `wait_status` is the kernel's exit_code field: meaningful once the process is a zombie
    (state 'Z'), readable by any process of the same user, not only by its parent. Returns
    None when the pid no longer exists (reaped).
    """
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()  # the command name may contain spaces
    tick = os.sysconf("SC_CLK_TCK")
    return {"state": fields[0], "exiting": bool(int(fields[6]) & PF_EXITING),
            "cpu_s": (int(fields[11]) + int(fields[12])) / tick,
            "wait_status": int(fields[49]) if len(fields) > 49 else None}


def descendant_pids(root: int) -> list:
    """`root` and every process below it, `root` first; [] once it is gone. Read from
    /proc/PID/task/TID/children, or by psutil (psutil_tree_pids) where the kernel has no such file
    (built without CONFIG_PROC_CHILDREN) or `root` has gone.

    psutil's children() reads /proc/PID/stat of every process on the machine, about 3.4 ms a
    call with 70 processes; this reads a few files per process of the tree, about 0.2 ms. A
    process that starts or exits during the walk may be missed: the next poll sees it.
    """
    if not os.path.exists(f"/proc/{root}/task/{root}/children"):
        return psutil_tree_pids(root)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in found:  # the kernel may list a child twice while the tree changes
            continue
        found.append(pid)
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as fh:
                    todo += map(int, fh.read().split())
        except OSError:  # it or one of its threads exited during the walk
            pass
    return found


def process_tree(root_pid: int) -> list:
    """The process and all its descendants now, as psutil.Process ([] once it is gone): psutil's
    walk, complete at the cost of reading every process's stat (the stop path's)."""
    import psutil

    try:
        root = psutil.Process(root_pid)
        return [root] + root.children(recursive=True)
    except psutil.Error:
        return []


def psutil_tree_pids(root: int) -> list:
    """descendant_pids by psutil's walk (process_tree)."""
    return [p.pid for p in process_tree(root)]


def describe_wait_status(status: int) -> dict:
    """{'signal': 'SIGKILL'} or {'exit_code': n} from a waitpid-style status."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            return {"signal": signal.Signals(sig).name}
        except ValueError:
            return {"signal": f"signal {sig}"}
    return {"exit_code": os.WEXITSTATUS(status)}


def exit_of(pid: int, wait_s: float = 5.0):
    """How process `pid` ended, waiting up to `wait_s` for one that is still exiting.

    Returns {'state': 'zombie', 'signal'/'exit_code': ...} for an unreaped process,
    {'state': 'gone'} once reaped (how it ended is then unknown here), or None while it runs.
    A process killed by a signal closes its sockets before it becomes a zombie, so a peer
    can see the connection reset while the process still looks alive: that is why a
    process flagged as exiting is waited for.
    """
    start = time.monotonic()
    while True:
        st = proc_stat(pid)
        waited = {"waited_s": round(time.monotonic() - start, 3)}
        if st is None:
            return {"state": "gone", **waited}
        if st["state"] in ("Z", "X"):
            return {"state": "zombie", **describe_wait_status(st["wait_status"] or 0), **waited}
        if not st["exiting"] or time.monotonic() - start > wait_s:
            return None
        time.sleep(0.01)


class _Sampler(threading.Thread):
    """A daemon thread that calls sample() every `interval` seconds and times itself."""

    def __init__(self, interval: float, name: str):
        super().__init__(daemon=True, name=name)
        self.interval = interval
        self.rows: list = []
        self.cost_s = 0.0
        self.samples = 0
        self._stop_event = threading.Event()
        self.t0 = time.time()

    def run(self) -> None:
        self._once()  # one sample at the start: a short run still gets a reading
        while not self._stop_event.wait(self.interval):
            self._once()

    def _once(self) -> None:
        # CPU time of this thread: wall time would also count waiting for the GIL.
        start = time.thread_time()
        try:
            self.sample()
        except Exception:  # a probe must never take a run down
            pass
        self.cost_s += time.thread_time() - start
        self.samples += 1

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=5)
        self._once()  # and one at the end

    def sample(self) -> None:
        raise NotImplementedError

    def drain(self) -> list:
        rows, self.rows = self.rows, []
        return rows


USS_EVERY = 10


class CpuSampler(_Sampler):
    """CPU % and memory (RSS, USS, PSS) of this rank and each of its child processes (loader workers)."""

    # pss_bytes (last, so older readers keep working) counts pages shared within the tree once.
    COLUMNS = ["t_s", "pid", "role", "cpu_percent", "rss_bytes", "uss_bytes", "pss_bytes"]

    def __init__(self, interval: float):
        super().__init__(interval, "gnnscale-cpu-probe")
        import psutil

        self.psutil = psutil
        self.me = psutil.Process()
        self.me.cpu_percent()
        self._known: dict = {}

    def _proc(self, pid):
        proc = self._known.get(pid)
        if proc is None:
            proc = self.psutil.Process(pid)
            proc.cpu_percent()  # first call primes the counter
            self._known[pid] = proc
        return proc

    def sample(self) -> None:
        t = time.time() - self.t0
        procs = [("rank", self.me)]
        for pid in descendant_pids(self.me.pid)[1:]:
            try:
                procs.append(("worker", self._proc(pid)))
            except self.psutil.Error:  # exited since the walk
                pass
        # USS needs /proc/PID/smaps_rollup (17-26 ms of CPU per process with torch and a framework
        # loaded), RSS is nearly free: read USS only every USS_EVERY-th sample so the probe stays cheap.
        full = self.samples % USS_EVERY == 0
        for role, proc in procs:
            try:
                with proc.oneshot():
                    cpu = proc.cpu_percent()
                    mem = proc.memory_full_info() if full else proc.memory_info()
                self.rows.append([round(t, 3), proc.pid, role, cpu, mem.rss, getattr(mem, "uss", ""),
                                  getattr(mem, "pss", "")])
            except self.psutil.Error:
                self._known.pop(proc.pid, None)


def cuda_pci_bus_id(cuda_index: int) -> str:
    """PCI bus id ("0000:3b:00.0") of CUDA device `cuda_index` as this process numbers it.

    The CUDA driver numbers devices after CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER, exactly
    as torch does; NVML numbers all GPUs in PCI order and ignores both. The bus id is the
    name both agree on. (torch 2.2 does not expose it, so ask the driver API directly.)
    """
    import ctypes

    cuda = ctypes.CDLL("libcuda.so.1")
    device = ctypes.c_int()
    buf = ctypes.create_string_buffer(64)
    for call, args in (("cuInit", (0,)), ("cuDeviceGet", (ctypes.byref(device), cuda_index)),
                       ("cuDeviceGetPCIBusId", (buf, 64, device))):
        err = getattr(cuda, call)(*args)
        if err != 0:
            raise RuntimeError(f"{call} failed with CUDA driver error {err}")
    return buf.value.decode()


def pci_key(bus_id: str) -> tuple:
    """(domain, bus, device, function) as integers: NVML and CUDA pad the domain differently."""
    domain, bus, rest = bus_id.strip().lower().split(":")
    dev, fn = rest.split(".")
    return int(domain, 16), int(bus, 16), int(dev, 16), int(fn, 16)


def nvml_index_of(pynvml, bus_id: str) -> int:
    """NVML's index of the GPU at PCI `bus_id`."""
    for i in range(pynvml.nvmlDeviceGetCount()):
        nvml_bus = pynvml.nvmlDeviceGetPciInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).busId
        if pci_key(nvml_bus if isinstance(nvml_bus, str) else nvml_bus.decode()) == pci_key(bus_id):
            return i
    raise RuntimeError(f"no GPU known to NVML has PCI bus id {bus_id}")


class NvmlSampler(_Sampler):
    """Utilisation, memory, power and SM clock of the GPU a rank trains on."""

    COLUMNS = ["t_s", "gpu", "pci_bus_id", "util_percent", "mem_used_bytes", "power_w", "sm_clock_mhz"]

    def __init__(self, interval: float, cuda_index: int):
        super().__init__(interval, "gnnscale-nvml-probe")
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.bus_id = cuda_pci_bus_id(cuda_index)
        self.gpu = nvml_index_of(pynvml, self.bus_id)
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(self.gpu)

    def sample(self) -> None:
        n, h = self.nvml, self.handle
        util = n.nvmlDeviceGetUtilizationRates(h).gpu
        mem = n.nvmlDeviceGetMemoryInfo(h).used
        power = n.nvmlDeviceGetPowerUsage(h) / 1000.0
        clock = n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)
        self.rows.append([round(time.time() - self.t0, 3), self.gpu, self.bus_id, util, mem, power, clock])


def start_nvml(interval: float, cuda_index: int):
    """An NVML sampler for CUDA device `cuda_index` (torch's numbering), or (None, reason)
    when NVML cannot run here. Never raises."""
    try:
        sampler = NvmlSampler(interval, cuda_index)
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"
    sampler.start()
    return sampler, None


class CsvAppender:
    """Appends rows to a CSV file, writing the header once; flushed so a hang loses nothing."""

    def __init__(self, path: Path, columns: list):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists()
        self._fh = open(self.path, "a", newline="")
        self._writer = csv.writer(self._fh)
        if new:
            self._writer.writerow(columns)
            self._fh.flush()

    def write(self, rows) -> None:
        self._writer.writerows(rows)
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()
