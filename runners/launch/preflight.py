"""The pre-flight models of one run, from its configuration, the machine (envinfo.collect) and
the dataset's sizes (dataset.graph_meta), before anything is launched: the shared memory
and open files its loader workers need, its modelled peak host memory (the strategy's model),
the bytes it writes into its directory, and whether it is possible on this machine at all.
They warn; only `impossible` refuses (check_capacity)."""

from __future__ import annotations

import dataclasses
import math

from runners.config import RunConfig
from runners.launch import strategy
from runners.launch.console import error, say


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
    """The modelled peak host memory of this run on this node: its strategy's model
    (runners.launch.strategy: runners.memory.model's, or for the partitioned strategy this host's
    partition, graph server and trainers)."""
    return strategy.of(cfg).memory_model(cfg, graph_meta)


def _shm_checks(cfg: RunConfig, env: dict, model: dict, warnings: list) -> dict:
    """What preflight records about /dev/shm, appending its warning to `warnings`."""
    from runners.memory.units import fmt_bytes

    if cfg.workers <= 0:
        return {"shm_bytes": env.get("shm_bytes")}
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
    return {"shm_bytes": env.get("shm_bytes"), "shm_free_bytes": shm_free, "shm_needed_estimate_bytes": need_shm}


def preflight(cfg: RunConfig, env: dict, graph_meta: dict) -> dict:
    """Shared-memory and open-files needs of loader workers and the modelled peak host memory
    of the whole process tree (runners.memory.model); warn, never refuse."""
    from runners.launch import descriptors
    from runners.memory.model import describe_model
    from runners.memory.units import fmt_bytes

    warnings = []
    model = memory_model(cfg, graph_meta)
    checks = _shm_checks(cfg, env, model, warnings)
    checks["open_files_limit"] = env["open_files_limit"]
    checks["open_files"] = descriptors.preflight_check(cfg, env["open_files_limit"])
    warnings += [checks["open_files"]["warning"]] if checks["open_files"]["warning"] else []
    checks["memory_model"] = model
    checks["memory_model_bytes"] = model["total_bytes"]
    checks["memory_limit_bytes"] = cfg.memory_limit_bytes or None
    say(f"pre-flight: {describe_model(model)}")
    if cfg.memory_limit_bytes and model["total_bytes"] > cfg.memory_limit_bytes:
        warnings.append(f"the modelled peak {fmt_bytes(model['total_bytes'])} exceeds --memory-limit "
                        f"{fmt_bytes(cfg.memory_limit_bytes)}: expect the OOM killer")
    elif env.get("memory_bytes") and model["total_bytes"] > env["memory_bytes"]:
        warnings.append(f"the modelled peak {fmt_bytes(model['total_bytes'])} exceeds this machine's "
                        f"{fmt_bytes(env['memory_bytes'])} of memory")
    checks["warnings"] = warnings
    for w in warnings:
        say(f"pre-flight warning: {w}")
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
        say(f"pre-flight warning: {pre['warnings'][-1]}")
    return pre


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
    from runners.records.settle import record_skipped

    why = impossible(cfg, env, graph_meta)
    if why is None:
        return None
    if cfg.force_launch:
        say(f"warning: launching anyway (--force-launch): {why}")
        return None
    if cfg.skip_unavailable:
        return record_skipped(dataclasses.replace(cfg, skip_reason=why), env, argv, "over_capacity")
    error(f"{why}; or add --force-launch to run it anyway")
    return 2
