"""Run ONE configuration: validate, launch torchrun, supervise, write result.json.

    python -m runners.run --framework pyg --model sage --devices 2 --batch-size 1024 \
        --workers 0 --dataset small --epochs 3 --out results/runs/example

Exit codes: 0 whenever a result was recorded (ok, hang, timeout, crashed, killed), 2 for
invalid options or an unusable dataset/environment, too little free space to start the run
included (reported before anything is launched), 3 when a write failed for lack of
space during the run (the tree is stopped, one line names the path and the space left, no
result could be recorded), 128 + N when signal N (SIGINT 130, SIGTERM 143) stopped the run
(the result says `interrupted`, with everything measured so far; a non-zero code so that
Snakemake and schedulers redo the run), 1 only if the suite itself failed to record a result.
"""

from __future__ import annotations

import csv
import datetime as dt
import errno
import json
import math
import os
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from runners import envinfo
from runners.config import ConfigError, RunConfig, build_parser, config_from_args
from runners.probes import DISK_FULL_MARK, disk_full

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).resolve().parent / "schemas" / "result.schema.json"


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


def launch_command(cfg: RunConfig, config_path: Path) -> list:
    return [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", str(cfg.nodes), "--node-rank", str(cfg.node_rank),
        "--nproc-per-node", str(cfg.devices), "--master-addr", cfg.master_addr,
        "--master-port", str(cfg.master_port), "--max-restarts", "0", "--monitor-interval", "0.5",
        "-m", "runners.study_harness" if cfg.harness == "study" else "runners.harness",
        "--config", str(config_path),
    ]


EXIT_DISK_FULL = 3
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


def read_csv(path: Path) -> list:
    try:
        with open(path, newline="") as fh:
            return list(csv.DictReader(fh))
    except OSError:
        return []


def _num(v):
    if v in (None, ""):
        return None
    try:
        f = float(v)
    except ValueError:
        return None
    return int(f) if f.is_integer() and "." not in str(v) else f


def collect_measurements(out: Path, local_ranks: list) -> dict:
    """Everything the ranks wrote, assembled into result.json's sections."""
    epochs, ranks, seeds = [], [], []
    step_sums: dict = {}
    step_count = 0
    infos = {}
    for r in local_ranks:
        d = out / f"rank{r}"
        info = {}
        try:
            info = json.loads((d / "rank.json").read_text())
        except (OSError, ValueError):
            pass
        infos[r] = info
        for row in read_csv(d / "epochs.csv"):
            epochs.append({k: _num(v) for k, v in row.items()})
        for row in read_csv(d / "steps.csv"):
            if row["load_wait_s"] in ("", None):
                continue  # unsynchronised GPU steps carry no phase times (see the harness)
            step_count += 1
            for k in ("load_wait_s", "prepare_s", "copy_s", "forward_s", "backward_s", "optimizer_s", "step_s"):
                if row.get(k) not in (None, ""):  # prepare_s is absent from older harnesses' files
                    step_sums[k] = step_sums.get(k, 0.0) + float(row[k])
        startup = info.get("startup", {})
        ranks.append({"rank": r, "steps_per_epoch": info.get("steps_per_epoch"),
                      "startup_s": startup.get("training_started"), "startup_detail": startup,
                      "train_time_s": info.get("train_time_s"), "exit_code": None,
                      "pid": info.get("pid"), "host": info.get("host"), "threads": info.get("threads"),
                      "env_vars": info.get("env_vars"), "parameters": info.get("parameters"),
                      "lr_effective": info.get("lr_effective"), "nvml": info.get("nvml"),
                      "probe_cost_s": info.get("probe_cost_s"), "adapter_choices": info.get("adapter_choices")})
        if "seed" in info:
            seeds.append({"rank": r, "seed": info["seed"], "worker_seeds": info.get("worker_seeds", []),
                          "epoch_seed_digests": info.get("epoch_seed_digests", [])})
    epochs.sort(key=lambda e: (e["epoch"], e["rank"]))
    for entry in ranks:  # work per rank: what each rank actually trained in every epoch
        mine = [e for e in epochs if e["rank"] == entry["rank"]]
        entry["steps_per_epoch_done"] = [e.get("steps") for e in mine]
        entry["seed_nodes_per_epoch"] = [e.get("seed_nodes") for e in mine]
    validation = [{"epoch": int(v["epoch"]), "accuracy": float(v["accuracy"])}
                  for v in read_csv(out / f"rank{local_ranks[0]}" / "validation.csv")] if local_ranks else []
    breakdown = {k: v / step_count for k, v in step_sums.items()} if step_count else None
    return {"epochs": epochs, "ranks": ranks, "seeds": seeds, "validation": validation,
            "breakdown": breakdown, "infos": infos}


from runners.stopping import WARMUP_EPOCHS  # noqa: E402 (one definition of the warm-up)


def steady_state(epoch_times: list, warmup: int = WARMUP_EPOCHS) -> dict:
    """Steady-state epoch time: the median of the epochs after the warm-up, with its spread.

    The first epoch carries one-off costs (loader workers starting, first-touch of the
    memory-mapped graph, allocator growth, lazy initialisation in both frameworks), so it is
    reported separately as warm-up. With fewer than warmup + 1 epochs there is no steady state.
    """
    warm = epoch_times[:warmup]
    steady = epoch_times[warmup:]
    out = {"warmup_epochs": len(warm), "warmup_epoch_time_s": warm[0] if warm else None,
           "steady_epochs": len(steady), "steady_epoch_time_s": None, "steady_epoch_q1_s": None,
           "steady_epoch_q3_s": None, "steady_epoch_min_s": None, "steady_epoch_max_s": None,
           "steady_epoch_cv": None}
    if not steady:
        return out
    arr = np.asarray(steady, dtype=float)
    q1, med, q3 = np.percentile(arr, [25, 50, 75])
    out.update({"steady_epoch_time_s": float(med), "steady_epoch_q1_s": float(q1), "steady_epoch_q3_s": float(q3),
                "steady_epoch_min_s": float(arr.min()), "steady_epoch_max_s": float(arr.max()),
                "steady_epoch_cv": float(arr.std(ddof=1) / arr.mean()) if len(arr) > 1 and arr.mean() > 0 else None})
    return out


def summarise(m: dict, cfg: RunConfig, reference: dict | None = None) -> dict:
    """The headline numbers. train_time_s is the slowest rank's total training time (the seed
    study's metric); steady_epoch_time_s the median epoch after the warm-up (see steady_state).
    `reference` (runners.accuracy.reference) supplies the accuracy target and baseline."""
    from runners import accuracy

    reference = reference or {}
    infos = m["infos"]
    all_ranks = next((i["all_ranks"] for i in infos.values() if i.get("all_ranks")), None)
    times = [a["train_time_s"] for a in all_ranks] if all_ranks else [
        r["train_time_s"] for r in m["ranks"] if r["train_time_s"] is not None]
    train_time = max(times)
    per_epoch: dict = {}
    for e in m["epochs"]:
        per_epoch[e["epoch"]] = max(per_epoch.get(e["epoch"], 0.0), e["time_s"])
    epoch_times = [per_epoch[k] for k in sorted(per_epoch)]
    seeds_local = sum(e.get("seed_nodes") or 0 for e in m["epochs"])
    edges_local = sum(e.get("sampled_edges") or 0 for e in m["epochs"])
    scale = cfg.world_size / max(1, len(m["ranks"]))  # other nodes' ranks do the same work
    rank0 = [e for e in m["epochs"] if e["rank"] == min(r["rank"] for r in m["ranks"])]
    startups = [r["startup_s"] for r in m["ranks"] if r["startup_s"] is not None]
    startup = max(startups) if startups else None
    steps = [r["steps_per_epoch"] for r in m["ranks"] if r.get("steps_per_epoch") is not None]
    val = m["validation"]
    final_acc = val[-1]["accuracy"] if val else None
    target_acc = reference.get("target_val_acc")
    baseline = reference.get("baseline_val_acc")
    tta, epochs_to = accuracy.time_to_target(epoch_times, val, target_acc)
    return {
        "train_time_s": train_time,  # unrounded: it must equal the slowest rank's own figure
        "median_epoch_time_s": statistics.median(per_epoch.values()),
        **steady_state(epoch_times),
        "steps_per_epoch": min(steps) if steps else None,
        "timed_to_startup_ratio": round(train_time / startup, 3) if startup else None,
        "throughput_seed_nodes_per_s": round(seeds_local * scale / train_time, 3) if train_time else 0.0,
        "sampled_edges_per_s": round(edges_local * scale / train_time, 3) if train_time else None,
        "final_val_acc": final_acc,
        "best_val_acc": max(v["accuracy"] for v in val) if val else None,
        "target_val_acc": target_acc,
        "time_to_target_s": tta,
        "epochs_to_target": epochs_to,
        "baseline_val_acc": baseline,
        # Beating the features-only baseline is the least a GNN must do; below it, accuracy
        # comparisons between frameworks mean nothing. Judged for fixed schedules only: a
        # timing run stops when its epoch time is known, long before it could converge.
        "converged": ((final_acc > baseline) if (final_acc is not None and baseline is not None
                                                 and cfg.until == "epochs") else None),
        # What a timing run can show: it learnt (above the majority class, loss falling), so a
        # fast but broken run is caught.
        "learned": learned(final_acc, reference.get("chance_val_acc"), rank0),
        "startup_s": startup,
        "step_breakdown_s": m["breakdown"],
        "first_loss": rank0[0]["loss"] if rank0 else None,
        "last_loss": rank0[-1]["loss"] if rank0 else None,
        "rank_train_times_s": times,
        **work_per_rank(m, cfg),
        "precision": precision_record(epoch_times, cfg, infos),
    }


def learned(final_acc, chance, rank0_epochs: list):
    """Did training move at all: validation accuracy above the majority-class share and the
    last epoch's loss below the first's (None when either is unknown)."""
    losses = [e.get("loss") for e in rank0_epochs if e.get("loss") is not None]
    if final_acc is None or chance is None or len(losses) < 2:
        return None
    return bool(final_acc > chance and losses[-1] < losses[0])


def precision_record(epoch_times: list, cfg: RunConfig, infos: dict) -> dict:
    """How well the run pinned its steady-state epoch time down (runners.stopping): the rule and
    its settings, why it stopped (the ranks' own record), the epochs it used and the interval
    and drift reached. `stopped_by_cap` marks a run the caps stopped before it was precise."""
    from runners import stopping

    stop = next((i["stop"] for i in infos.values() if i.get("stop")), {})
    a = stopping.assess(epoch_times, cfg.precision)
    reason = stop.get("reason")
    return {**cfg.stop_rule().to_json(), "stopped_by": reason, "epochs_run": len(epoch_times),
            "stopped_by_cap": reason in ("epoch_cap", "time_cap"), **a}


def seed_work(epochs: list, world_size: int, split) -> dict:
    """Seed nodes one rank trained per epoch (mean over its epochs, then over ranks) and all
    ranks' seeds per epoch against the training split: 1.0 means the ranks shared one pass
    over the split, N means every one of N ranks went over all of it. `epochs` are the
    per-rank epoch records (result.json's `epochs`); analysis uses this for older results too."""
    per_rank: dict = {}
    for e in epochs:
        if e.get("seed_nodes") is not None:
            per_rank.setdefault(e["rank"], []).append(float(e["seed_nodes"]))
    means = [statistics.fmean(v) for v in per_rank.values()]
    per_rank_mean = statistics.fmean(means) if means else None
    total = per_rank_mean * world_size if means else None
    return {"seed_nodes_per_rank_epoch": per_rank_mean, "seed_nodes_per_epoch_all_ranks": total,
            "train_split_seed_nodes": split, "split_passes_per_epoch": total / split if total and split else None}


def work_per_rank(m: dict, cfg: RunConfig) -> dict:
    """Steps and seed nodes each rank trained per epoch (see seed_work), for the summary."""
    steps = [r["steps_per_epoch"] for r in m["ranks"] if r.get("steps_per_epoch") is not None]
    split = next((i.get("train_split_seed_nodes") for i in m["infos"].values()
                  if i.get("train_split_seed_nodes")), None)
    return {"harness": cfg.harness, "steps_per_rank_epoch": max(steps) if steps else None,
            **seed_work(m["epochs"], cfg.world_size, split)}


def shm_need(model: dict) -> int:
    """/dev/shm the run's loader workers use at most (from runners.memory's model): the batches
    each rank's workers have built and not yet handed over, and PyG's per-rank shared copy of
    the adjacency."""
    inp = model["inputs"]
    per_batch = inp["batch_bytes"] if inp["workers_gather_features"] else inp["batch_structure_bytes"]
    if not inp["workers_per_rank"]:
        return 0
    return inp["ranks"] * (inp["dataset_copy_per_rank_bytes"] + inp["batches_waiting_per_rank"] * per_batch)


def preflight(cfg: RunConfig, env: dict, graph_meta: dict) -> dict:
    """Shared-memory and open-files needs of loader workers and the modelled peak host memory
    of the whole process tree (runners.memory); warn, never refuse."""
    from runners import memory

    warnings = []
    model = memory.model_peak(cfg, graph_meta)
    if cfg.workers > 0:
        need_shm = shm_need(model)
        need_fds = 64 * cfg.workers * cfg.devices
        shm_free = env.get("shm_free_bytes")
        if shm_free is not None and need_shm > shm_free:
            size = memory.fmt_bytes(env.get("shm_bytes"))
            warnings.append(f"/dev/shm has {memory.fmt_bytes(shm_free)} free (of {size})"
                            f" but the loader workers may need about {memory.fmt_bytes(need_shm)} of it (upper "
                            "estimate): expect workers to die of SIGBUS or 'No space left on device'; enlarge "
                            "/dev/shm (docker --shm-size), or use fewer workers or smaller batches")
        elif env.get("shm_bytes") is not None and need_shm > env["shm_bytes"] * 0.5:
            warnings.append(f"/dev/shm is {env['shm_bytes'] / 2**20:.0f} MiB; workers may need about "
                            f"{need_shm / 2**20:.0f} MiB of it (upper estimate)")
        if env["open_files_limit"] < need_fds:
            warnings.append(f"open-files limit {env['open_files_limit']} is below an estimated {need_fds} "
                            "descriptors for shared tensors; raise `ulimit -n`")
        result = {"shm_bytes": env.get("shm_bytes"), "shm_free_bytes": shm_free,
                  "shm_needed_estimate_bytes": need_shm, "open_files_limit": env["open_files_limit"],
                  "fds_needed_estimate": need_fds}
    else:
        result = {"shm_bytes": env.get("shm_bytes"), "open_files_limit": env["open_files_limit"]}
    result["memory_model"] = model
    result["memory_model_bytes"] = model["total_bytes"]
    result["memory_limit_bytes"] = cfg.memory_limit_bytes or None
    print(f"[gnnscale] pre-flight: {memory.describe_model(model)}", flush=True)
    if cfg.memory_limit_bytes and model["total_bytes"] > cfg.memory_limit_bytes:
        warnings.append(f"the modelled peak {memory.fmt_bytes(model['total_bytes'])} exceeds --memory-limit "
                        f"{memory.fmt_bytes(cfg.memory_limit_bytes)}: expect the OOM killer")
    elif env.get("memory_bytes") and model["total_bytes"] > env["memory_bytes"]:
        warnings.append(f"the modelled peak {memory.fmt_bytes(model['total_bytes'])} exceeds this machine's "
                        f"{memory.fmt_bytes(env['memory_bytes'])} of memory")
    result["warnings"] = warnings
    for w in warnings:
        print(f"[gnnscale] pre-flight warning: {w}", flush=True)
    return result


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
    procs = 1 + cfg.devices * (1 + cfg.workers)  # the torchrun agent, ranks and loader workers
    lines_per_s = procs / cfg.cpu_sample_interval_s + cfg.devices * 2
    terms = {"fixed": OUTPUT_BYTES["fixed"], "processes": procs * OUTPUT_BYTES["per_process"],
             "epochs": cfg.devices * cfg.epochs * OUTPUT_BYTES["per_rank_epoch"],
             "steps": cfg.devices * steps * cfg.epochs * OUTPUT_BYTES["per_rank_step"],
             "samples": int(lines_per_s * cfg.time_limit_s * OUTPUT_BYTES["per_line"])}
    return {"expected_bytes": sum(terms.values()), "least_bytes": terms["fixed"] + terms["processes"],
            "terms_bytes": terms, "steps_per_epoch": steps}


def report_disk_full(out: Path, exc: OSError) -> int:
    """The one line a run ends with when a write failed for lack of space; EXIT_DISK_FULL."""
    from runners.memory import fmt_bytes

    try:
        u = shutil.disk_usage(out)
        space = f"{fmt_bytes(u.free)} free of {fmt_bytes(u.total)}"
    except OSError:
        space = "free space unknown"
    print(f"[gnnscale] error: {exc.strerror or exc}: could not write {exc.filename or out} ({space} on its "
          "filesystem); stopped the run, no result was recorded; free space or choose another --out, then "
          "rerun", file=sys.stderr, flush=True)
    return EXIT_DISK_FULL


def memory_section(out: Path, local_ranks: list, cfg: RunConfig, pre: dict, cgroup_stats, leftover) -> dict:
    """result.json's `memory`: the modelled peak next to the measured one, and the cap."""
    from runners.memory import measured_peak

    peak = measured_peak(out, local_ranks)
    cg_peak = (cgroup_stats or {}).get("peak_bytes")
    return {"limit_bytes": cfg.memory_limit_bytes or None,
            "model_bytes": pre.get("memory_model_bytes"),
            "peak_bytes": peak.get("pss_bytes") or peak.get("uss_bytes"),
            "peak_source": ("rank*/cpu.csv PSS (ranks + loader workers, worst sample)" if peak.get("pss_bytes")
                            else "rank*/cpu.csv USS (ranks + loader workers, worst sample)" if peak.get("uss_bytes")
                            else None),
            "measured": peak, "cgroup_peak_bytes": cg_peak, "cgroup": cgroup_stats,
            "cgroup_leftover_pids": leftover}


RUN_DIR_ENTRIES = ("result.json", "result.json.tmp", "config.json", "command.sh", "heartbeats", "logs",
                   "stacks", "workers")


def clear_run_dir(out: Path) -> None:
    """Remove a previous run's files (only the ones a run writes), so nothing stale mixes in."""
    import shutil

    if not out.exists():
        return
    for entry in list(out.iterdir()):
        if entry.name in RUN_DIR_ENTRIES or (entry.name.startswith("rank") and entry.name[4:].isdigit()):
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


def write_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


def record_skipped(cfg: RunConfig, env: dict, argv: list) -> int:
    """A grid point this node cannot run (more GPUs than it has): a result that says so, so
    the sweep goes on and the report shows the point as skipped, with the reason."""
    out = Path(cfg.out)
    clear_run_dir(out)
    out.mkdir(parents=True, exist_ok=True)
    rerun = ["python", "-m", "runners.run"] + argv
    stamp = now_iso()
    identity = cfg.identity(None)  # the dataset was never prepared: no hash to claim
    result = {
        "schema_version": SCHEMA_VERSION, "run_id": identity["run_id"], "run_name": out.name,
        "identity": identity, "status": "skipped",
        "started_at": stamp, "finished_at": stamp, "wall_time_s": 0.0,
        "command": {"argv": rerun, "shell": shlex.join(rerun)}, "config": cfg.to_json(), "env": env,
        "seeds": {"base": cfg.seed, "per_rank": []}, "ranks": [], "epochs": [], "validation": [],
        "summary": None,
        "diagnosis": {"summary": f"skipped: {cfg.skip_reason}", "cause": "not_enough_devices",
                      "cause_text": "the grid point asks for more GPUs than this node has",
                      "remedy": "run it on a node with enough GPUs, or drop it from the grid",
                      "evidence": [cfg.skip_reason], "ranks": [], "culprit_rank": None},
        "probes": {"nvml": {"available": False, "reason": "the run was skipped"},
                   "cpu": {"available": False, "interval_s": cfg.cpu_sample_interval_s, "cost_s": []}},
    }
    write_result(out, result)
    print(f"[gnnscale] SKIPPED {cfg.framework}/{cfg.model} devices={cfg.devices}: {cfg.skip_reason}", flush=True)
    return 0


def schema_problems(result: dict) -> list:
    """Where `result`, as it will read back from disk, breaks result.schema.json (empty: valid)."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text()))
    on_disk = json.loads(json.dumps(result, default=str))
    return [f"{'.'.join(str(x) for x in e.absolute_path) or '(top level)'}: {e.message[:300]}"
            for e in sorted(validator.iter_errors(on_disk), key=lambda e: list(e.absolute_path))]


def write_result(out: Path, result: dict) -> list:
    """Validate the result against its schema, then write result.json whatever the verdict.

    A violation is a bug of the suite, not of the run: the measurements are kept, the status
    is left as it was, and the errors go into `schema_errors` so that analysis lists the
    result as unusable with the reason instead of reading half-valid fields. Returns them."""
    errors = schema_problems(result)
    if errors:
        result["schema_errors"] = errors
        for e in errors:
            print(f"[gnnscale] error: result.json breaks its schema: {e}", file=sys.stderr, flush=True)
    write_atomic(out / "result.json", result)
    return errors


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    env = envinfo.collect()
    try:
        cfg = config_from_args(args, envinfo.visible_gpu_count(env), env["cpu_cores"])
        check_environment(cfg, env)
        if cfg.memory_limit_bytes:
            from runners.memory import MemoryCgroup, MemoryLimitError

            try:
                MemoryCgroup.check()
            except MemoryLimitError as exc:
                raise ConfigError(str(exc))
    except ConfigError as exc:
        parser.error(str(exc))  # exit 2, before anything runs

    if cfg.skip_reason:
        return record_skipped(cfg, env, argv)

    from runners import datasets

    try:
        graph_path = datasets.prepare(cfg.dataset, root=cfg.data_root)
        graph = datasets.load(graph_path)
        # The hash a result records must be that of the bytes the ranks will read.
        verification = datasets.verify_files(graph_path)
    except datasets.DatasetError as exc:
        print(f"error: dataset {cfg.dataset!r}: {exc}", file=sys.stderr)
        return 2
    env["dataset_hash"] = graph.content_hash
    env["dataset_verification"] = {k: verification[k] for k in ("hashed", "cached", "seconds")}
    identity = cfg.identity(graph.content_hash)
    graph_meta = {"num_nodes": graph.num_nodes, "num_edges": graph.num_edges,
                  "num_features": graph.num_features, "num_classes": graph.num_classes,
                  "num_train": len(graph.train_idx),
                  "dataset_bytes": int(sum(a.nbytes for a in (graph.indptr, graph.indices, graph.features,
                                                             graph.labels))),
                  "adjacency_bytes": int(graph.indptr.nbytes + graph.indices.nbytes)}
    from runners import accuracy

    reference = accuracy.reference(graph)  # cached per dataset; computed before the launch
    del graph

    out = Path(cfg.out)
    from runners.memory import fmt_bytes

    try:
        clear_run_dir(out)
        for sub in ("heartbeats", "logs", "stacks"):
            (out / sub).mkdir(parents=True, exist_ok=True)
        space = expected_output(cfg, graph_meta)
        space["free_bytes"] = shutil.disk_usage(out).free
        if space["free_bytes"] < space["least_bytes"]:
            print(f"error: --out {out}: its filesystem has {fmt_bytes(space['free_bytes'])} free but a run needs "
                  f"about {fmt_bytes(space['least_bytes'])} to start and record its result (this one up to about "
                  f"{fmt_bytes(space['expected_bytes'])}); free space or choose another --out", file=sys.stderr,
                  flush=True)
            return 2
        if cfg.master_port == 0:
            cfg.master_port = free_port()
        config_path = out / "config.json"
        cfg.save(config_path)
        rerun = ["python", "-m", "runners.run"] + argv
        (out / "command.sh").write_text("#!/bin/sh\n# reruns this configuration\ncd " + shlex.quote(
            str(envinfo.REPO_ROOT)) + " && " + shlex.join(rerun) + "\n")
        log = open(out / "logs" / "launcher.log", "w")
    except OSError as exc:
        if not disk_full(exc):
            raise
        return report_disk_full(out, exc)
    pre = preflight(cfg, env, graph_meta)
    pre["output"] = space
    if space["free_bytes"] < space["expected_bytes"]:
        pre["warnings"].append(
            f"--out's filesystem has {fmt_bytes(space['free_bytes'])} free; this run may write up to about "
            f"{fmt_bytes(space['expected_bytes'])} (upper estimate: " + ", ".join(
                f"{k} {fmt_bytes(v)}" for k, v in space["terms_bytes"].items()) + "); if it fills up, the run "
            "is stopped without a result (exit 3)")
        print(f"[gnnscale] pre-flight warning: {pre['warnings'][-1]}", flush=True)

    local_ranks = list(range(cfg.node_rank * cfg.devices, (cfg.node_rank + 1) * cfg.devices))
    child_env = dict(os.environ)
    child_env.update({
        "OMP_NUM_THREADS": str(cfg.threads_per_rank), "PYTHONUNBUFFERED": "1",
        "GNNSCALE_LAUNCH_TIME": repr(time.time()),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(envinfo.REPO_ROOT), os.environ.get("PYTHONPATH")])),
    })
    if cfg.device_type == "cpu":
        child_env["CUDA_VISIBLE_DEVICES"] = ""  # CPU runs must not touch a GPU by accident
    import psutil

    # Oversubscribed cores slow multi-threaded ranks many-fold (OpenMP threads wait for each
    # other): a run on a busy machine measures the load, not the framework. The load average
    # still remembers the previous run of a sweep, so look at what the CPUs do right now.
    busy_before = psutil.cpu_percent(interval=0.2)
    if busy_before > 25:
        print(f"[gnnscale] warning: the CPUs were {busy_before:.0f}% busy before launch; other work on "
              "this machine will distort the timings", flush=True)
    started_at, launch_t = now_iso(), time.time()
    child_env["GNNSCALE_LAUNCH_TIME"] = repr(launch_t)
    cmd = launch_command(cfg, config_path)
    print(f"[gnnscale] launching {cfg.framework}/{cfg.model} devices={cfg.devices} batch={cfg.batch_size} "
          f"workers={cfg.workers} dataset={cfg.dataset} epochs={cfg.epochs} -> {out}", flush=True)
    from runners.watchdog import Interruption, Outcome, Supervisor, process_tree, stop_tree

    cgroup = None
    interruption = Interruption().install()  # from here on a signal stops the run, keeping the result
    try:
        preexec = None
        if cfg.memory_limit_bytes:
            from runners.memory import MemoryCgroup, fmt_bytes

            cgroup = MemoryCgroup.create(f"gnnscale-{out.name}-{os.getpid()}", cfg.memory_limit_bytes)
            preexec = cgroup.enter  # in the child before exec: torchrun's first byte is already capped
            print(f"[gnnscale] memory cap {fmt_bytes(cfg.memory_limit_bytes)}: cgroup {cgroup.path}", flush=True)
        proc = subprocess.Popen(cmd, env=child_env, cwd=str(envinfo.REPO_ROOT), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True, bufsize=1,
                                preexec_fn=preexec)
    except Exception as exc:
        outcome = Outcome("error", {"summary": f"could not launch torchrun: {exc}", "cause": "launch",
                                    "ranks": [], "evidence": [str(exc)]})
        proc = None
    if proc is not None:
        write_errors: list = []
        mute = threading.Event()
        pump = threading.Thread(target=_pump, args=(proc.stdout, log, sys.stdout, write_errors, mute), daemon=True)
        pump.start()
        supervisor = None
        try:
            supervisor = Supervisor(cfg, out, proc, local_ranks, launch_t)
            supervisor.cgroup, supervisor.interruption = cgroup, interruption
            supervisor.write_errors, supervisor.mute = write_errors, mute
            outcome = supervisor.run()
        except OSError as exc:
            if not disk_full(exc):
                raise
            mute.set()
            seen = list(supervisor.seen.values()) if supervisor else []
            stop_tree(list({p.pid: p for p in process_tree(proc.pid) + seen}.values()), cfg.kill_grace_s)
            if cgroup is not None:
                cgroup.remove()
            # Closed now, unflushed writes are dropped; else they fail again, with a traceback each, at exit.
            for f in (log, getattr(supervisor, "timeline", None)):
                try:
                    f and f.close()
                except OSError:
                    pass
            return report_disk_full(out, exc)
        pump.join(timeout=5)
    log.close()
    cgroup_stats, cgroup_leftover = None, []
    if cgroup is not None:
        cgroup_stats = cgroup.stats()
        cgroup_leftover = cgroup.remove()  # anything that escaped the tree walk dies with the group

    # The ranks read the dataset after the pre-launch check: if a file changed meanwhile
    # (stat only, cheap), hash it again and say in the result whether it still matches.
    changed = datasets.changed_since(graph_path, verification)
    env["dataset_verification"]["changed_during_run"] = changed
    if changed:
        try:
            datasets.verify_files(graph_path)
            after = "files changed on disk during the run but still have the recorded hashes"
        except datasets.DatasetError as exc:
            after = f"MISMATCH after the run (dataset_hash is not that of the data read): {exc}"
        env["dataset_verification"]["after_run"] = after
        print(f"[gnnscale] warning: dataset {', '.join(changed)}: {after}", file=sys.stderr, flush=True)
    m = collect_measurements(out, local_ranks)
    codes = {}
    if outcome.diagnosis:
        codes = {x["rank"]: x.get("exit_code") for x in outcome.diagnosis.get("ranks", [])}
    for r in m["ranks"]:
        r["exit_code"] = codes.get(r["rank"], 0 if outcome.status == "ok" else None)
    summary = summarise(m, cfg, reference) if outcome.status == "ok" else None
    first_info = next(iter(m["infos"].values()), {})
    result = {
        "schema_version": SCHEMA_VERSION,
        "run_id": identity["run_id"],
        "run_name": out.name,
        "identity": identity,
        "status": outcome.status,
        "started_at": started_at,
        "finished_at": now_iso(),
        "wall_time_s": round(time.time() - launch_t, 3),
        "command": {"argv": rerun, "shell": shlex.join(rerun)},
        "config": {**cfg.to_json(), "adapter_choices": first_info.get("adapter_choices"),
                   "harness_settings": first_info.get("harness") or {"name": cfg.harness},
                   "lr_effective": first_info.get("lr_effective")},
        "env": {**env, "rank_env_vars": first_info.get("env_vars")},
        "seeds": {"base": cfg.seed, "per_rank": m["seeds"],
                  "rule": "rank: (seed*1000003 + rank*10007) mod 2^31; worker w: that + w + 1",
                  "split": first_info.get("seed_split")},
        "ranks": m["ranks"],
        "epochs": m["epochs"],
        "validation": m["validation"],
        "accuracy_reference": reference,
        "summary": summary,
        "diagnosis": outcome.diagnosis,
        "probes": {
            "nvml": (first_info.get("nvml") or {"available": False,
                                                 "reason": env["nvml"]["reason"] or "rank never started"}),
            "cpu": {"available": cfg.probes, "interval_s": cfg.cpu_sample_interval_s,
                    "cost_s": [r.get("probe_cost_s") for r in m["ranks"]]},
            "breakdown_synchronised": cfg.device_type == "cuda" and cfg.breakdown,
            # CUDA without breakdown: phase times would be CPU launch times, so none are kept.
            "phases_recorded": cfg.device_type != "cuda" or cfg.breakdown,
        },
        "preflight": pre,
        "memory": memory_section(out, local_ranks, cfg, pre, cgroup_stats, cgroup_leftover),
        "machine_load": {"cpu_busy_percent_before": busy_before, "loadavg_after": list(os.getloadavg()),
                         "cpu_cores": env["cpu_cores"]},
        "watchdog": {"returncode": outcome.returncode, "killed_by_watchdog": outcome.killed_by_watchdog,
                     "orphans_killed": outcome.orphans_killed, "survivors": outcome.survivors,
                     "detected_after_s": outcome.detected_after_s, "note": outcome.note},
        "files": {"config": "config.json", "command": "command.sh", "launcher_log": "logs/launcher.log",
                  "timeline": "heartbeats/timeline.jsonl",
                  "ranks": {r: {k: f"rank{r}/{k}.csv" for k in ("steps", "epochs", "cpu", "validation")}
                            for r in local_ranks}},
    }
    try:
        write_result(out, result)
    except OSError as exc:
        if not disk_full(exc):
            raise
        return report_disk_full(out, OSError(exc.errno, exc.strerror, str(out / "result.json")))
    try:
        print_summary(result)
    except BrokenPipeError:  # nobody reads our output any more (a Ctrl-C'd `| tee`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_SIGNAL_BASE + interruption.signum if outcome.status == "interrupted" else 0


def print_summary(result: dict) -> None:
    c, s = result["config"], result["summary"]
    head = (f"[gnnscale] {result['status'].upper()} {c['framework']}/{c['model']} devices={c['devices']} "
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
    if result["diagnosis"]:
        print(f"[gnnscale]   {result['diagnosis']['summary']}", flush=True)
    print(f"[gnnscale]   result: {Path(result['config']['out']) / 'result.json'}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
