"""A memory cgroup that caps one run's process tree, and the kernel's OOM kills.

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

from runners.memory.units import MemoryLimitError


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
