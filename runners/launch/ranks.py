"""The launch of one run's ranks and its supervision to the end (runners.run.main's middle).

launch() starts the rank starter (runners.launch.spawn on one node, torchrun where nodes must meet)
in the run's memory cgroup when capped, with the signal handling installed; supervise() pumps
its output into the launcher's log and the terminal while runners.watch.supervisor.Supervisor
watches the tree, and stops the tree when a write fails for lack of space or the run
directory vanishes. The lines a run ends with in those two cases live here too.
"""

from __future__ import annotations

import datetime as dt
import errno
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runners.config import RunConfig
from runners.launch.console import error, say
from runners.rank.probes import DISK_FULL_MARK, disk_full
from runners.records import envinfo, history
from runners.records.rundir import RunDir

EXIT_DISK_FULL = 3
EXIT_VANISHED = 4
EXIT_SIGNAL_BASE = 128  # + the signal's number, as a shell reports a process a signal ended


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


# What result.json records (env.rank_starter) for the one-node starter: its module's name from
# before runners/ was grouped into packages (now runners.launch.spawn), kept so that old and new
# results record the same value.
SPAWN = "runners.spawn"


def rank_starter(cfg: RunConfig) -> str:
    """What starts the ranks: runners.launch.spawn on one node (recorded as `SPAWN`; torchrun's
    agent would import torch before any rank starts), torchrun where nodes must meet (its
    rendezvous)."""
    if cfg.rank_starter == "torchrun" or (cfg.rank_starter == "auto" and cfg.nodes > 1):
        return "torchrun"
    return SPAWN


def launch_command(cfg: RunConfig, config_path: Path) -> list:
    rank_module = ["-m", "runners.rank.study" if cfg.harness == "study" else "runners.rank.harness",
                   "--config", str(config_path)]
    if rank_starter(cfg) == SPAWN:
        return [sys.executable, "-m", "runners.launch.spawn", "--nproc-per-node", str(cfg.devices),
                "--master-addr", cfg.master_addr, "--master-port", str(cfg.master_port),
                "--store", str(RunDir(Path(config_path).parent).pg_store), *rank_module]
    return [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", str(cfg.nodes), "--node-rank", str(cfg.node_rank),
        "--nproc-per-node", str(cfg.devices), "--master-addr", cfg.master_addr,
        "--master-port", str(cfg.master_port), "--max-restarts", "0", "--monitor-interval", "0.5",
        *rank_module,
    ]



@dataclass
class Launch:
    """One launch of the rank starter (rank_starter) and what the result records about it."""

    local_ranks: list
    busy_before: float  # CPU % just before the launch
    started_at: str
    launch_t: float
    interruption: Any  # runners.launch.interruption.Interruption, installed at the launch
    proc: Any = None  # the rank starter's process; None when it could not start
    cgroup: Any = None  # the memory cgroup of a capped run
    outcome: Any = None  # runners.watch.diagnosis.Outcome, once known
    cgroup_stats: dict | None = None
    cgroup_leftover: list = field(default_factory=list)
    run_dir_id: tuple | None = None  # which directory the run was launched in (supervisor.dir_identity)
    marks: dict = field(default_factory=dict)  # the launcher's own moments, Unix time (see timeline())

    def timeline(self) -> dict:
        """The launcher's moments in seconds since the rank starter was started (the ranks' start-up marks
        count from there too): its process created, main() reached (its imports done), the tree
        exited, the result assembled. What a launch costs beside training (benchmarks.measure)."""
        return {name: round(t - self.launch_t, 4) for name, t in self.marks.items()}


def child_environment(cfg: RunConfig, network: dict | None = None, strategy_env: dict | None = None) -> dict:
    """The rank starter's environment: the launcher's own with the strategy's variables for the
    trainers (runners.launch.strategy), threads per rank, unbuffered output, the repository importable;
    for a multi-node run, gloo and NCCL bound to the interface that reaches the master
    (envinfo.network)."""
    env = {**os.environ, **(strategy_env or {})}
    for var in envinfo.SOCKET_IFNAMES:
        if network and network.get(var.lower()):
            env[var] = network[var.lower()]
    if network:
        env["GNNSCALE_NODE_ADDRESS"] = network["address"]
    env.update({
        "OMP_NUM_THREADS": str(cfg.threads_per_rank), "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(envinfo.REPO_ROOT), os.environ.get("PYTHONPATH")])),
    })
    if cfg.device_type == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # CPU runs must not touch a GPU by accident
    return env


def cpu_mark() -> tuple:
    """The machine's and this process's CPU times now, for other_cpu_busy_percent."""
    import psutil

    own = psutil.Process().cpu_times()
    return psutil.cpu_times(), own.user + own.system + own.children_user + own.children_system


def other_cpu_busy_percent(since: tuple) -> float:
    """How busy the CPUs were since `since` (cpu_mark), in percent of all cores, counting
    everything but this process and its children: other work that would share the run's cores."""
    import psutil

    (t0, own0), (t1, own1) = since, cpu_mark()
    total = sum(t1) - sum(t0)
    idle = (t1.idle + getattr(t1, "iowait", 0.0)) - (t0.idle + getattr(t0, "iowait", 0.0))
    if total <= 0:
        return 0.0
    return round(max(0.0, min(100.0, 100.0 * (total - idle - (own1 - own0)) / total)), 1)


def launch(cfg: RunConfig, out: Path, config_path: Path, network: dict | None = None,
           cpu_since: tuple | None = None, strategy_env: dict | None = None) -> Launch:
    """Start the ranks (rank_starter; in the memory cgroup when capped) with the signal handling
    installed; a launch that fails is recorded in the Launch's outcome. `cpu_since` (cpu_mark,
    taken when the launcher started) is the window in which other work on the machine is looked
    for; `strategy_env`: the strategy's variables for the trainers (child_environment)."""
    from runners.launch.interruption import Interruption
    from runners.watch.diagnosis import Diagnosis, Outcome

    child_env = child_environment(cfg, network, strategy_env)
    # Oversubscribed cores slow multi-threaded ranks many-fold (OpenMP threads wait for each
    # other): a run on a busy machine measures the load, not the framework. The load average
    # still remembers the previous run of a sweep, so look at what the CPUs did while this
    # launcher started (no sleep spent sampling: a sweep launches a run every few seconds).
    busy_before = other_cpu_busy_percent(cpu_since or cpu_mark())
    if busy_before > envinfo.BUSY_WARN_PERCENT:
        say(f"warning: the CPUs were {busy_before:.0f}% busy before launch; other work on "
            "this machine will distort the timings")
    run = Launch(list(range(cfg.node_rank * cfg.devices, (cfg.node_rank + 1) * cfg.devices)), busy_before,
                 now_iso(), time.time(), None)
    child_env["GNNSCALE_LAUNCH_TIME"] = repr(run.launch_t)
    say(f"launching {cfg.framework}/{cfg.model} devices={cfg.devices} batch={cfg.batch_size} "
        f"workers={cfg.workers} dataset={cfg.dataset} epochs={cfg.epochs} -> {history.point_dir(out)}")
    run.interruption = Interruption().install()  # from here on a signal stops the run, keeping the result
    try:
        preexec = None
        if cfg.memory_limit_bytes:
            from runners.memory.cgroup import MemoryCgroup
            from runners.memory.units import fmt_bytes

            name = f"gnnscale-{history.point_dir(out).name}-{os.getpid()}"
            run.cgroup = MemoryCgroup.create(name, cfg.memory_limit_bytes)
            preexec = run.cgroup.enter  # in the child before exec: the rank starter's first byte is already capped
            say(f"memory cap {fmt_bytes(cfg.memory_limit_bytes)}: cgroup {run.cgroup.path}")
        run.proc = subprocess.Popen(launch_command(cfg, config_path), env=child_env, cwd=str(envinfo.REPO_ROOT),
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    start_new_session=True, bufsize=1, preexec_fn=preexec)
    except Exception as exc:
        starter = "runners.launch.spawn" if rank_starter(cfg) == SPAWN else rank_starter(cfg)
        run.outcome = Outcome("error", Diagnosis.of("launch", f"could not start the ranks ({starter}): {exc}",
                                                    [str(exc)], []))
    return run


def _pump(stream, sink, echo, failed: list, mute: threading.Event) -> None:
    """Copy the rank starter's output to the log and the terminal. Never stop reading: it would
    block on a full pipe. A log write that failed for lack of space, or a rank's line saying so
    (DISK_FULL_MARK), goes to `failed` (the supervisor stops the run on it) and ends the echo,
    so the ranks' errors about it are not spewed on the terminal. A closed terminal (a Ctrl-C'd
    `| tee`) only ends the echo. Once the launcher stops the tree for a signal or a full disk
    it sets `mute`: the dying processes' tracebacks go to the log only."""
    for line in iter(stream.readline, ""):
        if line.startswith(DISK_FULL_MARK):  # a rank's records hit a full disk
            failed.append(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
            echo = None
        if sink is not None:
            try:
                sink.write(line)
                sink.flush()
            except OSError as exc:
                if disk_full(exc):
                    failed.append(OSError(exc.errno, exc.strerror, sink.name))
                    echo = None
                sink = None
            except ValueError:  # closed by the launcher on its way out after a full disk
                sink = None
        if echo is not None and not mute.is_set():
            try:
                echo.write(line)
                echo.flush()
            except (OSError, ValueError):
                echo = None



def supervise(cfg: RunConfig, out: Path, run: Launch, log) -> int | None:
    """Watch the launched tree to its end (runners.watch.supervisor.Supervisor), its output pumped into
    `log`; then close the log and the cgroup. Returns EXIT_DISK_FULL's report when a write
    failed for lack of space (the tree stopped, no result), else None with run.outcome set (a
    run directory moved or deleted from outside: the tree stopped, status `failed`)."""
    from runners.watch.supervisor import Supervisor, missing_file

    if run.proc is not None:
        write_errors: list = []
        mute = threading.Event()
        pump = threading.Thread(target=_pump, args=(run.proc.stdout, log, sys.stdout, write_errors, mute),
                                daemon=True)
        pump.start()
        supervisor = None
        try:
            supervisor = Supervisor(cfg, out, run.proc, run.local_ranks, run.launch_t, cgroup=run.cgroup,
                                    interruption=run.interruption, write_errors=write_errors, mute=mute,
                                    run_dir_id=run.run_dir_id)
            run.outcome = supervisor.run()
        except OSError as exc:
            # A write that failed because the directory vanished, or the supervisor's finding that it did.
            gone = None if disk_full(exc) else (supervisor.missing() if supervisor
                                                else missing_file(out, run.run_dir_id))
            if gone is None and not disk_full(exc):
                raise
            mute.set()  # the dying ranks' complaints about their lost files go to the log only
            failed = _stop_after_write_error(cfg, out, run, log, supervisor, gone, exc)
            if failed is not None:
                return failed
        pump.join(timeout=5)
    log.close()
    if run.cgroup is not None:
        run.cgroup_stats = run.cgroup.stats()
        run.cgroup_leftover = run.cgroup.remove()  # anything that escaped the tree walk dies with the group
    return None


def _stop_after_write_error(cfg: RunConfig, out: Path, run: Launch, log, supervisor, gone: Path | None,
                            exc: OSError) -> int | None:
    """Stop the tree after a write failed: for lack of space (`gone` None: EXIT_DISK_FULL's
    report, the log and the cgroup closed), or because the run directory vanished (`gone`: the
    first file found missing; run.outcome says so, None returned)."""
    from runners.rank.probes import process_tree
    from runners.watch.supervisor import stop_tree

    after_s = time.time() - run.launch_t
    where = whereabouts(log, out) if gone is not None else None  # while the log is open in it
    seen = list(supervisor.seen.values()) if supervisor else []
    survivors = stop_tree(list({p.pid: p for p in process_tree(run.proc.pid) + seen}.values()),
                          cfg.kill_grace_s)
    if gone is None:
        if run.cgroup is not None:
            run.cgroup.remove()
        # Closed now, unflushed writes are dropped; else they fail again, with a traceback each, at exit.
        for f in (log, getattr(supervisor, "timeline", None)):
            try:
                f and f.close()
            except OSError:
                pass
        return report_disk_full(out, exc)
    if supervisor is not None:
        supervisor.timeline.close()
    run.outcome = vanished_outcome(run, out, gone, after_s, where, survivors,
                                   supervisor.last_progress() if supervisor else [])
    return None


def vanished_outcome(run: Launch, out: Path, gone: Path, after_s: float, where: str | None, survivors: list,
                     ranks: list):
    """The outcome of a run whose directory `out` vanished (`gone`: the first file found
    missing, `after_s` after launch), its tree stopped (`survivors`: pids that outlived it)."""
    from runners.watch.diagnosis import Outcome

    try:
        rc = run.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        rc = None
    outcome = Outcome("failed", None, detected_after_s=after_s, returncode=rc, killed_by_watchdog=True,
                      survivors=survivors, note="the run directory vanished: the launcher stopped the tree and "
                                                "wrote the result into a new one")
    # diagnosis.OVERRIDES' run_dir_vanished names it (the run had not ended by itself)
    outcome.findings.vanished = dict(run_dir=out, missing=gone, after_s=after_s, whereabouts=where, ranks=ranks,
                                     ended=False)
    return outcome


def whereabouts(fh, run_dir: Path) -> str | None:
    """Where a vanished run directory went, told by the kernel through `fh`, a file of the
    launcher's open in it (its log): deleted, or its new path; None when it cannot say."""
    try:
        now = os.readlink(f"/proc/self/fd/{fh.fileno()}")
    except (OSError, ValueError):
        return None
    if now.endswith(" (deleted)"):
        return "it was deleted, or moved to another filesystem"
    rel = Path(fh.name).relative_to(run_dir)
    if Path(now).parts[-len(rel.parts):] != rel.parts:
        return f"its {rel} is now at {now}"
    now = Path(now).parents[len(rel.parts) - 1]
    return None if now == Path(run_dir) else f"it is now at {now}"


def vanished(outcome) -> bool:
    """Whether the run's directory was moved or deleted from outside (cause run_dir_vanished, or
    found so for the overrides to name)."""
    return outcome is not None and (outcome.findings.vanished is not None
                                    or (outcome.diagnosis or {}).get("cause") == "run_dir_vanished")


def notice_vanished(stage: Path, run: Launch) -> bool:
    """A run directory that vanished after its tree had exited (the supervisor saw it whole):
    found for diagnosis.OVERRIDES' run_dir_vanished, which makes run.outcome `failed`, keeping
    what the run had ended as."""
    from runners.watch.supervisor import missing_file

    gone = missing_file(stage, run.run_dir_id)
    if gone is None:
        return False
    after_s = time.time() - run.launch_t
    run.outcome.detected_after_s = after_s
    run.outcome.findings.vanished = dict(run_dir=stage, missing=gone, after_s=after_s, whereabouts=None, ranks=[],
                                         ended=True)
    return True


def report_disk_full(out: Path, exc: OSError) -> int:
    """The one line a run ends with when a write failed for lack of space; EXIT_DISK_FULL."""
    from runners.memory.units import fmt_bytes

    try:
        u = shutil.disk_usage(out)
        space = f"{fmt_bytes(u.free)} free of {fmt_bytes(u.total)}"
    except OSError:
        space = "free space unknown"
    error(f"{exc.strerror or exc}: could not write {exc.filename or out} ({space} on its "
          "filesystem); stopped the run, no result was recorded; free space or choose another --out, then rerun")
    return EXIT_DISK_FULL


def report_vanished(stage: Path, missing: Path, after_s: float | None, why: str) -> int:
    """The one line a run ends with when its directory vanished (`after_s` after launch; None:
    before it) and no result could be written either (`why`); EXIT_VANISHED."""
    from runners.watch.diagnosis import vanished_line

    done = "nothing was launched" if after_s is None else "stopped the run"
    error(f"{vanished_line(stage, missing, after_s)}; {done}, no result could be written ({why}); rerun the point")
    return EXIT_VANISHED


def unwritable(out: Path, exc: OSError) -> str:
    """Why a result could not be written after the run directory vanished, from `exc`."""
    if not out.parent.is_dir():
        return f"--out's directory {out.parent} is gone too"
    return f"{exc.strerror or exc}: {exc.filename or out.parent}"

