"""Run ONE configuration: validate, launch torchrun, supervise, write result.json.

    python -m runners.run --framework pyg --model sage --devices 2 --batch-size 1024 \
        --workers 0 --dataset small --epochs 3 --out results/runs/example

Exit codes: 0 whenever a result was recorded (ok, hang, timeout, crashed, killed, failed), 2 for
invalid options or an unusable dataset/environment, too little free space to start the run
included (reported before anything is launched), 3 when a write failed for lack of
space during the run (the tree is stopped, one line names the path and the space left, no
result could be recorded), 4 when the run directory was moved or deleted from outside and no
result could be written either (its parent is gone too, or cannot be written: the tree is
stopped, one line says what vanished; when a result can be written it says `failed`, cause
`run_dir_vanished`, exit 0), 128 + N when signal N (SIGINT 130, SIGTERM 143) stopped the run
(the result says `interrupted`, with everything measured so far; a non-zero code so that
Snakemake and schedulers redo the run), 1 only if the suite itself failed to record a result.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import errno
import math
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def outside_lanes(why: str) -> str:
    """The one line for a Python that is none of the project's lanes (it lacks a framework or
    the suite's own packages). Standard library only: it serves before any import can fail."""
    root = Path(__file__).resolve().parent.parent
    return (f"{why}. This Python ({sys.executable}) is not one of the project's lanes; nothing was run or "
            f"recorded. Use the lane's interpreter from {root}: .venv/bin/python -m runners.run ... (the pair "
            "lane carries both frameworks; `make setup` builds it; .venv-current/bin/python is the current lane)")


def _wrong_python(exc: ImportError) -> str:
    return "error: " + outside_lanes(f"this Python cannot import {exc.name or exc}")


try:
    from runners import envinfo, history, pointlock, result
    from runners.config import ConfigError, RunConfig, build_parser, config_from_args
    from runners.probes import DISK_FULL_MARK, disk_full
    from runners.record import collect_measurements, summarise
    from runners.rundir import RunDir
except ImportError as _exc:  # pragma: no cover (a bare interpreter: exercised by tests in a subprocess)
    if __name__ != "__main__":
        raise
    print(_wrong_python(_exc), file=sys.stderr)
    sys.exit(2)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def check_environment(cfg: RunConfig, env: dict) -> None:
    """Refuse runs that would silently benchmark something else (the framework's own checks,
    declared in its registry entry). Raises ConfigError."""
    from runners.adapters import registry

    refusal, note = registry.framework(cfg.framework).check_environment(cfg.device_type, env)
    if refusal:
        raise ConfigError(refusal)
    if note:
        print(f"[gnnscale] note: {note}", flush=True)


def rank_starter(cfg: RunConfig) -> str:
    """What starts the ranks: runners.spawn on one node (torchrun's agent would import torch
    before any rank starts), torchrun where nodes must meet (its rendezvous)."""
    if cfg.rank_starter == "torchrun" or (cfg.rank_starter == "auto" and cfg.nodes > 1):
        return "torchrun"
    return "runners.spawn"


def launch_command(cfg: RunConfig, config_path: Path) -> list:
    rank_module = ["-m", "runners.study_harness" if cfg.harness == "study" else "runners.harness",
                   "--config", str(config_path)]
    if rank_starter(cfg) == "runners.spawn":
        return [sys.executable, "-m", "runners.spawn", "--nproc-per-node", str(cfg.devices),
                "--master-addr", cfg.master_addr, "--master-port", str(cfg.master_port),
                "--store", str(RunDir(Path(config_path).parent).pg_store), *rank_module]
    return [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", str(cfg.nodes), "--node-rank", str(cfg.node_rank),
        "--nproc-per-node", str(cfg.devices), "--master-addr", cfg.master_addr,
        "--master-port", str(cfg.master_port), "--max-restarts", "0", "--monitor-interval", "0.5",
        *rank_module,
    ]


EXIT_DISK_FULL = 3
EXIT_VANISHED = 4
EXIT_SIGNAL_BASE = 128  # + the signal's number, as a shell reports a process a signal ended


def _pump(stream, sink, echo, failed: list, mute: threading.Event) -> None:
    """Copy torchrun's output to the log and the terminal. Never stop reading: torchrun would
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


def shm_need(model: dict) -> int:
    """/dev/shm the run's loader workers use at most (from runners.memory.model): the batches
    each rank's workers have built and not yet handed over, and PyG's per-rank shared copy of
    the adjacency."""
    inp = model["inputs"]
    per_batch = inp["batch_bytes"] if inp["workers_gather_features"] else inp["batch_structure_bytes"]
    if not inp["workers_per_rank"]:
        return 0
    return inp["ranks"] * (inp["dataset_copy_per_rank_bytes"] + inp["batches_waiting_per_rank"] * per_batch)


def memory_model(cfg: RunConfig, graph_meta: dict) -> dict:
    """The modelled peak host memory of this run on this node: runners.memory.model's; for the
    partitioned strategy this host's partition, graph server and trainers (runners.partitioned)."""
    from runners import partitioned
    from runners.memory.model import model_peak

    return partitioned.model_peak(cfg, graph_meta) if cfg.strategy == "partitioned" else model_peak(cfg, graph_meta)


def preflight(cfg: RunConfig, env: dict, graph_meta: dict) -> dict:
    """Shared-memory and open-files needs of loader workers and the modelled peak host memory
    of the whole process tree (runners.memory.model); warn, never refuse."""
    from runners import descriptors
    from runners.memory.model import describe_model
    from runners.memory.units import fmt_bytes

    warnings = []
    model = memory_model(cfg, graph_meta)
    if cfg.workers > 0:
        need_shm = shm_need(model)
        shm_free = env.get("shm_free_bytes")
        if shm_free is not None and need_shm > shm_free:
            size = fmt_bytes(env.get("shm_bytes"))
            warnings.append(f"/dev/shm has {fmt_bytes(shm_free)} free (of {size})"
                            f" but the loader workers may need about {fmt_bytes(need_shm)} of it (upper "
                            "estimate): expect workers to die of SIGBUS or 'No space left on device'; enlarge "
                            "/dev/shm (docker --shm-size), or use fewer workers or smaller batches")
        elif env.get("shm_bytes") is not None and need_shm > env["shm_bytes"] * 0.5:
            warnings.append(f"/dev/shm is {env['shm_bytes'] / 2**20:.0f} MiB; workers may need about "
                            f"{need_shm / 2**20:.0f} MiB of it (upper estimate)")
        checks = {"shm_bytes": env.get("shm_bytes"), "shm_free_bytes": shm_free,
                  "shm_needed_estimate_bytes": need_shm}
    else:
        checks = {"shm_bytes": env.get("shm_bytes")}
    checks["open_files_limit"] = env["open_files_limit"]
    checks["open_files"] = descriptors.preflight_check(cfg, env["open_files_limit"])
    warnings += [checks["open_files"]["warning"]] if checks["open_files"]["warning"] else []
    checks["memory_model"] = model
    checks["memory_model_bytes"] = model["total_bytes"]
    checks["memory_limit_bytes"] = cfg.memory_limit_bytes or None
    print(f"[gnnscale] pre-flight: {describe_model(model)}", flush=True)
    if cfg.memory_limit_bytes and model["total_bytes"] > cfg.memory_limit_bytes:
        warnings.append(f"the modelled peak {fmt_bytes(model['total_bytes'])} exceeds --memory-limit "
                        f"{fmt_bytes(cfg.memory_limit_bytes)}: expect the OOM killer")
    elif env.get("memory_bytes") and model["total_bytes"] > env["memory_bytes"]:
        warnings.append(f"the modelled peak {fmt_bytes(model['total_bytes'])} exceeds this machine's "
                        f"{fmt_bytes(env['memory_bytes'])} of memory")
    checks["warnings"] = warnings
    for w in warnings:
        print(f"[gnnscale] pre-flight warning: {w}", flush=True)
    return checks


# What a run writes into its directory, per unit, from tiny CPU runs' directories with about 2x
# to spare: a steps.csv row per step and rank; per epoch and rank its epochs.csv, validation.csv
# and result.json records and a progress line; per process its stack dumps and records; per
# second of the time limit a CPU sample per process (cpu.csv) and two timeline lines per rank
# (heartbeats/timeline.jsonl); and the fixed files (logs, config, result.json's body).
OUTPUT_BYTES = {"fixed": 2**20, "per_process": 2**15, "per_rank_epoch": 2**10, "per_rank_step": 2**9,
                "per_line": 2**7}


def expected_output(cfg: RunConfig, graph_meta: dict) -> dict:
    """An upper estimate of the bytes the run writes into its directory, with its terms, and
    the least any run needs to start and record a result (the fixed and per-process terms).
    Epochs cut short by the time limit make it an over-estimate: a warning, not a refusal."""
    steps = math.ceil(graph_meta.get("num_train", 0) / cfg.world_size / cfg.batch_size)
    if cfg.max_steps_per_epoch:
        steps = min(steps, cfg.max_steps_per_epoch)
    procs = 1 + cfg.devices * (1 + cfg.workers)  # the rank starter, ranks and loader workers
    lines_per_s = procs / cfg.cpu_sample_interval_s + cfg.devices * 2
    terms = {"fixed": OUTPUT_BYTES["fixed"], "processes": procs * OUTPUT_BYTES["per_process"],
             "epochs": cfg.devices * cfg.epochs * OUTPUT_BYTES["per_rank_epoch"],
             "steps": cfg.devices * steps * cfg.epochs * OUTPUT_BYTES["per_rank_step"],
             "samples": int(lines_per_s * cfg.time_limit_s * OUTPUT_BYTES["per_line"])}
    return {"expected_bytes": sum(terms.values()), "least_bytes": terms["fixed"] + terms["processes"],
            "terms_bytes": terms, "steps_per_epoch": steps}


def report_disk_full(out: Path, exc: OSError) -> int:
    """The one line a run ends with when a write failed for lack of space; EXIT_DISK_FULL."""
    from runners.memory.units import fmt_bytes

    try:
        u = shutil.disk_usage(out)
        space = f"{fmt_bytes(u.free)} free of {fmt_bytes(u.total)}"
    except OSError:
        space = "free space unknown"
    print(f"[gnnscale] error: {exc.strerror or exc}: could not write {exc.filename or out} ({space} on its "
          "filesystem); stopped the run, no result was recorded; free space or choose another --out, then "
          "rerun", file=sys.stderr, flush=True)
    return EXIT_DISK_FULL


def report_vanished(stage: Path, missing: Path, after_s: float | None, why: str) -> int:
    """The one line a run ends with when its directory vanished (`after_s` after launch; None:
    before it) and no result could be written either (`why`); EXIT_VANISHED."""
    from runners.diagnosis import vanished_line

    done = "nothing was launched" if after_s is None else "stopped the run"
    print(f"[gnnscale] error: {vanished_line(stage, missing, after_s)}; {done}, no result could be written ({why}); "
          "rerun the point", file=sys.stderr, flush=True)
    return EXIT_VANISHED


def unwritable(out: Path, exc: OSError) -> str:
    """Why a result could not be written after the run directory vanished, from `exc`."""
    if not out.parent.is_dir():
        return f"--out's directory {out.parent} is gone too"
    return f"{exc.strerror or exc}: {exc.filename or out.parent}"


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


# -- the steps of one run, in the order main() takes them --------------------------------------

def rerun_interpreter() -> str:
    """The interpreter a rerun command names: this one, relative to the repository root when it
    lives there (.venv/bin/python, .venv-current/bin/python), else its absolute path. Never a
    bare `python`: that is whatever a shell finds first on its PATH."""
    exe = os.path.abspath(sys.executable)  # not resolved: a venv's python is a link out of it
    root = os.path.abspath(envinfo.REPO_ROOT)
    return os.path.relpath(exe, root) if exe.startswith(root + os.sep) else exe


def rerun_command(argv: list) -> list:
    """The command that reruns this configuration directly (from the repository root)."""
    return [rerun_interpreter(), "-m", "runners.run"] + list(argv)


def check_lane(wanted, lane: dict) -> str:
    """The lane the run is in: that of this Python (its scripts/setup.sh manifest). A run that
    names another lane is refused: it would record one stack and measure another."""
    here = lane["lane"]
    if wanted is not None and wanted != here:
        raise ConfigError(f"--lane {wanted}: this Python ({sys.executable}) is lane {here}; run the point "
                          f"with the {wanted} lane's Python (make setup LANE={wanted}, then "
                          f"{envinfo.lane_interpreter(wanted)} -m runners.run ...)")
    return here


def check_out(out: Path) -> None:
    """Refuse an --out whose directory cannot be written (a read-only or virtual filesystem, no
    permission) before any work: a run writes beside it first (runners.history). ConfigError."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out.parent):
            pass
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot write into {out.parent} ({exc.strerror or exc}); choose a "
                          "directory on a writable filesystem")


def parse_and_check(argv: list) -> tuple:
    """(cfg, env, skip cause) from the options; invalid options or an unusable environment exit
    2 here, before anything runs (parser.error). A point this node or lane cannot run is not an
    error: its cause (runners.diagnosis.SKIP_CAUSES) comes back, with the reason in cfg.skip_reason."""
    parser = build_parser()
    args = parser.parse_args(argv)
    env = envinfo.collect()
    try:
        cfg = config_from_args(args, envinfo.visible_gpu_count(env), env["cpu_cores"])
        cfg = dataclasses.replace(cfg, lane=check_lane(cfg.lane, env["lane"]))
        check_out(Path(cfg.out))
        if cfg.skip_reason:  # more GPUs than this node has: recorded as skipped, never launched,
            return cfg, env, "not_enough_devices"  # so the framework's GPU checks do not apply
        unavailable = envinfo.framework_unavailable(cfg.framework, env)
        if unavailable and cfg.lane == "unmanaged":
            # `skipped` is for a lane that cannot carry the framework by design.
            raise ConfigError(outside_lanes(unavailable))
        if unavailable:
            return dataclasses.replace(cfg, skip_reason=unavailable), env, "framework_unavailable"
        check_environment(cfg, env)
        if cfg.nodes > 1:
            try:
                env["network"] = envinfo.network(cfg.master_addr, cfg.master_port)
            except envinfo.NoRoute as exc:
                raise ConfigError(str(exc))
        if cfg.memory_limit_bytes:
            from runners.memory.cgroup import MemoryCgroup
            from runners.memory.units import MemoryLimitError

            try:
                MemoryCgroup.check()
            except MemoryLimitError as exc:
                raise ConfigError(str(exc))
    except ConfigError as exc:
        parser.error(str(exc))
    return cfg, env, None


# A process per core is what a timing wants; past this many the run measures the scheduler
# (each process gets under 1/8 of a core between the collectives), and starting them alone
# costs about 3 CPU-seconds of imports each (torch and a framework), serialised on the cores.
MAX_PROCESSES_PER_CORE = 8


def impossible(cfg: RunConfig, env: dict, graph_meta: dict) -> str | None:
    """Why the pre-flight calls this run impossible on this machine, or None: a modelled peak
    above its memory or the --memory-limit cap, or far more processes than cores."""
    from runners.memory.units import fmt_bytes

    procs, cores = cfg.devices * (1 + cfg.workers), env["cpu_cores"]
    if cfg.device_type == "cpu" and procs > MAX_PROCESSES_PER_CORE * cores:
        return (f"{cfg.devices} ranks x (1 + {cfg.workers} loader workers) = {procs} processes on {cores} cores, "
                f"more than {MAX_PROCESSES_PER_CORE} per core: the run would measure the scheduler (start-up alone "
                f"about {3 * procs / cores:.0f} s of imports); use fewer --devices or --workers")
    peak = memory_model(cfg, graph_meta)["total_bytes"]
    cap, what = ((cfg.memory_limit_bytes, "the --memory-limit cap") if cfg.memory_limit_bytes
                 else (env.get("memory_bytes"), "this machine's memory"))
    if cap and peak > cap:
        return (f"the modelled peak host memory {fmt_bytes(peak)} exceeds {what} ({fmt_bytes(cap)}): "
                "the OOM killer would end the run; use fewer --devices, --workers or a smaller --batch-size")
    return None


def check_capacity(cfg: RunConfig, env: dict, argv: list, graph_meta: dict) -> int | None:
    """Refuse an impossible run before anything is written (exit 2, one line), record it as
    skipped in a sweep (--skip-unavailable), or launch it anyway with --force-launch (recorded);
    None: go on."""
    why = impossible(cfg, env, graph_meta)
    if why is None:
        return None
    if cfg.force_launch:
        print(f"[gnnscale] warning: launching anyway (--force-launch): {why}", flush=True)
        return None
    if cfg.skip_unavailable:
        return record_skipped(dataclasses.replace(cfg, skip_reason=why), env, argv, "over_capacity")
    print(f"error: {why}; or add --force-launch to run it anyway", file=sys.stderr, flush=True)
    return 2


@dataclass
class Dataset:
    """The run's dataset as checked before the launch."""

    path: Path
    verification: dict  # what datasets.verify_files found (compared again after the run)
    identity: dict  # the run's identity, which includes the dataset's content hash
    meta: dict  # sizes for the pre-flight models
    reference: dict  # accuracy target and baselines (runners.accuracy)


def graph_meta(graph) -> dict:
    """The sizes the pre-flight models read (runners.memory, runners.partitioned)."""
    return {"num_nodes": graph.num_nodes, "num_edges": graph.num_edges,
            "num_features": graph.num_features, "num_classes": graph.num_classes,
            "num_train": len(graph.train_idx),
            "dataset_bytes": int(sum(a.nbytes for a in (graph.indptr, graph.indices, graph.features,
                                                       graph.labels))),
            "adjacency_bytes": int(graph.indptr.nbytes + graph.indices.nbytes),
            "dataset_hash": graph.content_hash}


def prepare_dataset(cfg: RunConfig, env: dict) -> Dataset | None:
    """Prepare, load and verify the dataset, recording its hash in `env`; None (after saying
    why) when it is unusable."""
    from runners import accuracy, datasets

    try:
        graph_path = datasets.prepare(cfg.dataset, root=cfg.data_root)
        graph = datasets.load(graph_path)
        # The hash a result records must be that of the bytes the ranks will read.
        verification = datasets.verify_files(graph_path)
    except datasets.DatasetError as exc:
        print(f"error: dataset {cfg.dataset!r}: {exc}", file=sys.stderr)
        return None
    env["dataset_hash"] = graph.content_hash
    env["dataset_verification"] = {k: verification[k] for k in ("hashed", "cached", "seconds")}
    meta = graph_meta(graph)
    # The graph is dropped on return: the ranks load their own; the reference is cached per dataset.
    return Dataset(graph_path, verification, cfg.identity(graph.content_hash), meta, accuracy.reference(graph))


def prepare_run_dir(cfg: RunConfig, out: Path, argv: list, graph_meta: dict) -> dict | None:
    """Make the run's (fresh, staging) directory, check its free space, write config.json and
    command.sh. Returns the output estimate, or None (after saying why) when the space cannot
    hold a run. Raises OSError when a write fails."""
    from runners.memory.units import fmt_bytes

    RunDir(out).make()
    space = expected_output(cfg, graph_meta)
    space["free_bytes"] = shutil.disk_usage(out).free
    if space["free_bytes"] < space["least_bytes"]:
        print(f"error: --out {history.point_dir(out)}: its filesystem has {fmt_bytes(space['free_bytes'])} free but a run needs "
              f"about {fmt_bytes(space['least_bytes'])} to start and record its result (this one up to about "
              f"{fmt_bytes(space['expected_bytes'])}); free space or choose another --out", file=sys.stderr,
              flush=True)
        return None
    write_run_files(cfg, out, argv)
    return space


def write_run_files(cfg: RunConfig, out: Path, argv: list) -> None:
    """config.json and command.sh of the run in `out`. Raises OSError."""
    cfg.save(RunDir(out).config)
    RunDir(out).command.write_text("#!/bin/sh\n# reruns this configuration\ncd " + shlex.quote(
        str(envinfo.REPO_ROOT)) + " && " + shlex.join(rerun_command(argv)) + "\n")


def restage(cfg: RunConfig, out: Path, argv: list) -> tuple:
    """(cfg, a fresh staging directory with the run's config and command) for the result of a run
    whose own directory vanished. Its parent is not made again: a run does not rebuild a tree
    someone removed. Raises OSError."""
    stage = history.staging_dir(out)
    stage.mkdir()
    cfg = dataclasses.replace(cfg, out=str(stage))
    write_run_files(cfg, stage, argv)
    return cfg, stage


def preflight_with_output(cfg: RunConfig, env: dict, graph_meta: dict, space: dict) -> dict:
    """The pre-flight record (see preflight) with the output estimate and its warning."""
    from runners.memory.units import fmt_bytes

    pre = preflight(cfg, env, graph_meta)
    pre["output"] = space
    if space["free_bytes"] < space["expected_bytes"]:
        pre["warnings"].append(
            f"--out's filesystem has {fmt_bytes(space['free_bytes'])} free; this run may write up to about "
            f"{fmt_bytes(space['expected_bytes'])} (upper estimate: " + ", ".join(
                f"{k} {fmt_bytes(v)}" for k, v in space["terms_bytes"].items()) + "); if it fills up, the run "
            "is stopped without a result (exit 3)")
        print(f"[gnnscale] pre-flight warning: {pre['warnings'][-1]}", flush=True)
    return pre


@dataclass
class Launch:
    """One launch of torchrun and what the result records about it."""

    local_ranks: list
    busy_before: float  # CPU % just before the launch
    started_at: str
    launch_t: float
    interruption: Any  # runners.interruption.Interruption, installed at the launch
    proc: Any = None  # torchrun's process; None when it could not start
    cgroup: Any = None  # the memory cgroup of a capped run
    outcome: Any = None  # runners.diagnosis.Outcome, once known
    cgroup_stats: dict | None = None
    cgroup_leftover: list = field(default_factory=list)
    run_dir_id: tuple | None = None  # which directory the run was launched in (supervisor.dir_identity)
    marks: dict = field(default_factory=dict)  # the launcher's own moments, Unix time (see timeline())

    def timeline(self) -> dict:
        """The launcher's moments in seconds since torchrun was started (the ranks' start-up marks
        count from there too): its process created, main() reached (its imports done), the tree
        exited, the result assembled. What a launch costs beside training (benchmarks.measure)."""
        return {name: round(t - self.launch_t, 4) for name, t in self.marks.items()}


def child_environment(cfg: RunConfig, network: dict | None = None) -> dict:
    """torchrun's environment: threads per rank, unbuffered output, the repository importable;
    for a multi-node run, gloo and NCCL bound to the interface that reaches the master
    (envinfo.network)."""
    env = dict(os.environ)
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
           cpu_since: tuple | None = None) -> Launch:
    """Start torchrun (in its memory cgroup when capped) with the signal handling installed;
    a launch that fails is recorded in the Launch's outcome. `cpu_since` (cpu_mark, taken when
    the launcher started) is the window in which other work on the machine is looked for."""
    from runners.diagnosis import Outcome
    from runners.interruption import Interruption

    child_env = child_environment(cfg, network)
    # Oversubscribed cores slow multi-threaded ranks many-fold (OpenMP threads wait for each
    # other): a run on a busy machine measures the load, not the framework. The load average
    # still remembers the previous run of a sweep, so look at what the CPUs did while this
    # launcher started (no sleep spent sampling: a sweep launches a run every few seconds).
    busy_before = other_cpu_busy_percent(cpu_since or cpu_mark())
    if busy_before > 25:
        print(f"[gnnscale] warning: the CPUs were {busy_before:.0f}% busy before launch; other work on "
              "this machine will distort the timings", flush=True)
    run = Launch(list(range(cfg.node_rank * cfg.devices, (cfg.node_rank + 1) * cfg.devices)), busy_before,
                 now_iso(), time.time(), None)
    child_env["GNNSCALE_LAUNCH_TIME"] = repr(run.launch_t)
    print(f"[gnnscale] launching {cfg.framework}/{cfg.model} devices={cfg.devices} batch={cfg.batch_size} "
          f"workers={cfg.workers} dataset={cfg.dataset} epochs={cfg.epochs} -> {history.point_dir(out)}", flush=True)
    run.interruption = Interruption().install()  # from here on a signal stops the run, keeping the result
    try:
        preexec = None
        if cfg.memory_limit_bytes:
            from runners.memory.cgroup import MemoryCgroup
            from runners.memory.units import fmt_bytes

            name = f"gnnscale-{history.point_dir(out).name}-{os.getpid()}"
            run.cgroup = MemoryCgroup.create(name, cfg.memory_limit_bytes)
            preexec = run.cgroup.enter  # in the child before exec: torchrun's first byte is already capped
            print(f"[gnnscale] memory cap {fmt_bytes(cfg.memory_limit_bytes)}: cgroup {run.cgroup.path}", flush=True)
        run.proc = subprocess.Popen(launch_command(cfg, config_path), env=child_env, cwd=str(envinfo.REPO_ROOT),
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    start_new_session=True, bufsize=1, preexec_fn=preexec)
    except Exception as exc:
        run.outcome = Outcome("error", {"summary": f"could not start the ranks ({rank_starter(cfg)}): {exc}", "cause": "launch",
                                        "ranks": [], "evidence": [str(exc)]})
    return run


def supervise(cfg: RunConfig, out: Path, run: Launch, log) -> int | None:
    """Watch the launched tree to its end (runners.supervisor.Supervisor), its output pumped into
    `log`; then close the log and the cgroup. Returns EXIT_DISK_FULL's report when a write
    failed for lack of space (the tree stopped, no result), else None with run.outcome set (a
    run directory moved or deleted from outside: the tree stopped, status `failed`)."""
    from runners.supervisor import Supervisor, missing_file, process_tree, stop_tree

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
        pump.join(timeout=5)
    log.close()
    if run.cgroup is not None:
        run.cgroup_stats = run.cgroup.stats()
        run.cgroup_leftover = run.cgroup.remove()  # anything that escaped the tree walk dies with the group
    return None


def vanished_outcome(run: Launch, out: Path, gone: Path, after_s: float, where: str | None, survivors: list,
                     ranks: list):
    """The outcome of a run whose directory `out` vanished (`gone`: the first file found
    missing, `after_s` after launch), its tree stopped (`survivors`: pids that outlived it)."""
    from runners.diagnosis import Outcome, diagnose_vanished

    try:
        rc = run.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        rc = None
    return Outcome("failed", diagnose_vanished(out, gone, after_s, where, ranks), detected_after_s=after_s,
                   returncode=rc, killed_by_watchdog=True, survivors=survivors,
                   note="the run directory vanished: the launcher stopped the tree and wrote the result into a new one")


def recheck_dataset(data: Dataset, env: dict) -> None:
    """The ranks read the dataset after the pre-launch check: if a file changed meanwhile
    (stat only, cheap), hash it again and say in `env` whether it still matches."""
    from runners import datasets

    changed = datasets.changed_since(data.path, data.verification)
    env["dataset_verification"]["changed_during_run"] = changed
    if not changed:
        return
    try:
        datasets.verify_files(data.path)
        after = "files changed on disk during the run but still have the recorded hashes"
    except datasets.DatasetError as exc:
        after = f"MISMATCH after the run (dataset_hash is not that of the data read): {exc}"
    env["dataset_verification"]["after_run"] = after
    print(f"[gnnscale] warning: dataset {', '.join(changed)}: {after}", file=sys.stderr, flush=True)


# -- result.json -------------------------------------------------------------------------------

def record_skipped(cfg: RunConfig, env: dict, argv: list, cause: str = "not_enough_devices") -> int:
    """A grid point this node or lane cannot run (more GPUs than it has, a framework its torch
    cannot import): a result that says so, so the sweep goes on and the report shows the point
    as skipped, with the reason. A point that already has a result keeps it, untouched."""
    from runners.diagnosis import skipped

    out = Path(cfg.out)
    print(f"[gnnscale] SKIPPED {cfg.framework}/{cfg.model} devices={cfg.devices}: {cfg.skip_reason}", flush=True)
    kept = history.current_result(out)
    if kept is not None:
        print(f"[gnnscale]   {out} keeps its recorded run ({kept}); nothing was changed", flush=True)
        return 0
    stage = history.staging_dir(out)
    stage.mkdir(parents=True)
    cfg = dataclasses.replace(cfg, out=str(stage))
    stamp = now_iso()
    identity = cfg.identity(None)  # the dataset was never prepared: no hash to claim
    head = result.Head(identity["run_id"], history.point_dir(stage).name, identity, "skipped", stamp, stamp, 0.0,
                       rerun_command(argv))
    result.write(stage, result.build(head, result.skipped(cfg, env, skipped(cfg.skip_reason, cause))))
    history.promote(stage, out)
    print(f"[gnnscale]   result: {RunDir(out).result}", flush=True)
    return 0


def launched_result(cfg: RunConfig, argv: list, data: Dataset, env: dict, pre: dict, run: Launch) -> dict:
    """result.json of a run that was launched: the ranks' records, the summary (ok runs only)
    and everything the launcher and the watchdog saw (runners.result builds it)."""
    out, outcome = Path(cfg.out), run.outcome
    m = collect_measurements(out, run.local_ranks)
    codes = {x["rank"]: x.get("exit_code") for x in (outcome.diagnosis or {}).get("ranks", [])}
    for r in m["ranks"]:
        r["exit_code"] = codes.get(r["rank"], 0 if outcome.status == "ok" else None)
    run.marks["result_assembled"] = time.time()
    head = result.Head(data.identity["run_id"], history.point_dir(out).name, data.identity, outcome.status,
                       run.started_at, now_iso(), round(time.time() - run.launch_t, 3), rerun_command(argv))
    return result.build(head, result.launched(
        cfg, m, outcome, env, reference=data.reference, pre=pre,
        summary=summarise(m, cfg, data.reference) if outcome.status == "ok" else None,
        memory_section=result.memory(out, run.local_ranks, cfg, pre, run.cgroup_stats, run.cgroup_leftover),
        busy_before=run.busy_before, timeline=run.timeline(), rank_starter=rank_starter(cfg)))


def write_and_report(stage: Path, out: Path, document: dict, run: Launch) -> int:
    """Write result.json into the staging directory, settle the run into `out` (runners.history:
    it replaces the point's current run, or is filed under previous/ when it was interrupted
    and the point has a result) and print its summary; the run's exit code (the module's doc)."""
    from runners.supervisor import missing_file

    try:
        result.write(stage, document)
        where, replaced = history.settle(stage, out, document["status"])
    except OSError as exc:
        if disk_full(exc):
            return report_disk_full(stage, OSError(exc.errno, exc.strerror, str(RunDir(stage).result)))
        gone = missing_file(stage, run.run_dir_id) or (None if out.parent.is_dir() else out.parent)
        if gone is None:
            raise
        return report_vanished(stage, gone, time.time() - run.launch_t, unwritable(out, exc))
    try:
        print_summary(document, where, replaced)
    except BrokenPipeError:  # nobody reads our output any more (a Ctrl-C'd `| tee`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_SIGNAL_BASE + run.interruption.signum if run.outcome.status == "interrupted" else 0


def main(argv=None) -> int:
    """Check, pre-flight, launch, supervise and record one run (exit codes: the module's doc)."""
    main_t, cpu_since = time.time(), cpu_mark()
    argv = list(sys.argv[1:] if argv is None else argv)
    cfg, env, skip_cause = parse_and_check(argv)
    out = Path(cfg.out)
    try:
        # One runner of a point at a time, held until this process exits (runners.pointlock).
        pointlock.acquire(out, wait=cfg.wait)
    except pointlock.PointBusy as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    for line in history.salvage(out):  # what a killed earlier run of this point left
        print(f"[gnnscale] {line}", flush=True)
    if skip_cause:
        return record_skipped(cfg, env, argv, skip_cause)
    data = prepare_dataset(cfg, env)
    if data is None:
        return 2
    refused = check_capacity(cfg, env, argv, data.meta)
    if refused is not None:
        return refused
    from runners.supervisor import dir_identity

    # The run writes into a fresh directory; the point's current run stays until it is replaced.
    stage = history.staging_dir(out)
    # The run writes into `stage`; a single-node run picks its free port now (config.json has it).
    cfg = dataclasses.replace(cfg, out=str(stage), master_port=cfg.master_port or free_port())
    try:
        space = prepare_run_dir(cfg, stage, argv, data.meta)
        if space is None:
            shutil.rmtree(stage, ignore_errors=True)  # empty: refused before anything was written
            return 2
        log = open(RunDir(stage).launcher_log, "w")
        stage_id = dir_identity(stage)
    except OSError as exc:
        if disk_full(exc):
            return report_disk_full(stage, exc)
        if stage.is_dir():
            raise
        return report_vanished(stage, Path(exc.filename or stage), None, unwritable(out, exc))
    pre = preflight_with_output(cfg, env, data.meta, space)
    server = start_partitioned(cfg, env, stage)  # the partitioned strategy's graph server, or None
    if server is False:
        shutil.rmtree(stage, ignore_errors=True)  # refused before anything ran
        return 2
    if server is not None:  # the partitions exist now: the model from their own files
        pre["memory_model"] = memory_model(cfg, data.meta)
        pre["memory_model_bytes"] = pre["memory_model"]["total_bytes"]
    run = launch(cfg, stage, RunDir(stage).config, env.get("network"), cpu_since)
    run.run_dir_id = stage_id
    run.marks.update(launcher_created=envinfo.process_created(), launcher_main=main_t)
    if server is not None and run.proc is not None:
        server.watch(run.proc.pid)
    failed = supervise(cfg, stage, run, log)
    if server is not None:
        if not vanished(run.outcome):  # a hang (or a crash while it was stopped): its state, while it runs
            server.gather(run.outcome, run.launch_t)
        env["partitioned"]["server"] = server.stop(cfg.kill_grace_s, pre.get("memory_model"))
    if failed is not None:
        return failed
    run.marks["tree_exited"] = time.time()
    if vanished(run.outcome) or notice_vanished(stage, run):
        # What the ranks wrote went with the directory: the result, in a new one, says why it is empty.
        try:
            cfg, stage = restage(cfg, out, argv)
            run.run_dir_id = dir_identity(stage)
        except OSError as exc:
            d = run.outcome.diagnosis
            return report_vanished(stage, Path(d["missing_file"]), d["detected_after_s"], unwritable(out, exc))
    elif cfg.nodes > 1 and run.outcome.diagnosis:
        from runners import nodes

        # A node's watchdog sees its own processes only: name the hosts, and another node's part.
        detected = run.launch_t + (run.outcome.detected_after_s or 0.0)
        run.outcome.diagnosis = nodes.explain(cfg, stage, run.local_ranks, run.outcome.status,
                                              run.outcome.diagnosis, run.started_at, env.get("network"), detected)
        nodes.adopt_lost_culprit(cfg, stage, run.outcome, run.started_at)
    if server is not None and not vanished(run.outcome):
        # After nodes.explain: this host's own server, dead or stalled, outranks the peers its trainers
        # lost on the way (they were its victims); then another host's server, from that node's result.
        server.explain(run.outcome)
        server.adopt_remote(stage, run.outcome, run.started_at)
    recheck_dataset(data, env)
    return write_and_report(stage, out, launched_result(cfg, argv, data, env, pre, run), run)


def vanished(outcome) -> bool:
    """Whether the run's directory was moved or deleted from outside (cause run_dir_vanished)."""
    return outcome is not None and (outcome.diagnosis or {}).get("cause") == "run_dir_vanished"


def notice_vanished(stage: Path, run: Launch) -> bool:
    """A run directory that vanished after its tree had exited (the supervisor saw it whole):
    run.outcome becomes `failed`, cause run_dir_vanished, keeping what the run had ended as."""
    from runners.diagnosis import diagnose_vanished
    from runners.supervisor import missing_file

    gone = missing_file(stage, run.run_dir_id)
    if gone is None:
        return False
    after_s, o = time.time() - run.launch_t, run.outcome
    o.diagnosis = diagnose_vanished(stage, gone, after_s, None, [], {"status": o.status, "diagnosis": o.diagnosis})
    o.status, o.detected_after_s = "failed", after_s
    return True


def start_partitioned(cfg: RunConfig, env: dict, stage: Path):
    """--strategy partitioned: partitions made or verified, this host's graph server started and
    the trainers' DGL variables set (runners.partitioned); env["partitioned"] records it. None
    for a replicated run; False (after saying why) when the partitions or hosts are unusable."""
    if cfg.strategy != "partitioned":
        return None
    from runners import datasets, partitioned, partitions

    try:
        plan = partitioned.plan(cfg, env, stage)
    except (ConfigError, partitions.PartitionError, datasets.DatasetError) as exc:
        print(f"error: --strategy partitioned: {exc}", file=sys.stderr, flush=True)
        return False
    env["partitioned"] = plan.describe(cfg)
    os.environ.update(plan.trainer_env(cfg))  # child_environment() hands the launcher's variables on
    return partitioned.start_server(cfg, plan, stage)


def print_summary(document: dict, where: Path, replaced: Path | None) -> None:
    """The run's outcome in a few lines; where its result went, and where the run it replaced went."""
    c, s = document["config"], document["summary"]
    head = (f"[gnnscale] {document['status'].upper()} {c['framework']}/{c['model']} devices={c['devices']} "
            f"batch={c['batch_size']} workers={c['workers']} dataset={c['dataset']}")
    print(head, flush=True)
    if s:
        acc = f"{s['final_val_acc']:.4f}" if s["final_val_acc"] is not None else "n/a"
        steady = (f"steady-state epoch {s['steady_epoch_time_s']:.3f}s (warm-up epoch "
                  f"{s['warmup_epoch_time_s']:.3f}s)" if s.get("steady_epoch_time_s") is not None
                  else f"median epoch {s['median_epoch_time_s']:.3f}s (no epoch after the warm-up)")
        conv = {True: "", False: " NOT CONVERGED (not above the features-only baseline)", None: ""}[s.get("converged")]
        print(f"[gnnscale]   train time (slowest rank) {s['train_time_s']:.2f}s, {steady}, start-up "
              f"{s['startup_s']:.1f}s, {s['throughput_seed_nodes_per_s']:.0f} seed nodes/s, val acc {acc}{conv}",
              flush=True)
        if s.get("seed_nodes_per_rank_epoch") is not None:
            print(f"[gnnscale]   {c['harness']} harness: each rank trained {s['steps_per_rank_epoch']} steps, "
                  f"{s['seed_nodes_per_rank_epoch']:.0f} seed nodes per epoch; all ranks "
                  f"{s['seed_nodes_per_epoch_all_ranks']:.0f} of a {s['train_split_seed_nodes']}-node "
                  f"training split", flush=True)
    if document["diagnosis"]:
        print(f"[gnnscale]   {document['diagnosis']['summary']}", flush=True)
    print(f"[gnnscale]   result: {RunDir(where).result}", flush=True)
    if replaced is not None:
        print(f"[gnnscale]   the run it replaced: {replaced}", flush=True)
    elif Path(where).parent.name == history.PREVIOUS:
        point = Path(where).parent.parent
        kept = (f"{point} keeps its recorded run" if history.current_result(point) is not None
                else f"{point} has no finished run: run the point again (a resumed sweep does)")
        print(f"[gnnscale]   interrupted: filed under previous/; {kept}", flush=True)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ModuleNotFoundError as exc:  # a package the suite needs, missing from this Python
        print(_wrong_python(exc), file=sys.stderr)
        sys.exit(2)
