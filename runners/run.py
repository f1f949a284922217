"""Run ONE configuration: check it, pre-flight it, launch its ranks, supervise them and write
its result.json.

    python -m runners.run --framework pyg --model sage --devices 2 --batch-size 1024 \
        --workers 0 --dataset small --epochs 3 --out results/runs/example

main() takes the run's steps in this order (a step that ends the run returns its exit code):

    main
    ├── parse_and_check                 options, lane, --out, framework, network, memory cap
    ├── claim_point                     runners.launch.pointlock; what a killed earlier run left
    ├── recording.record_skipped        a point this node or lane cannot run
    ├── dataset.prepare_dataset         prepared, loaded, verified; its sizes
    ├── preflight.check_capacity        an impossible run: refused, skipped or forced
    ├── stage_run                       staging directory, config.json, command.sh, launcher log
    ├── preflight.preflight_with_output shared memory, open files, memory model, output
    ├── strategy.of(cfg).prepare        partitioned: partitions and this host's graph server
    ├── ranks.launch                    runners.launch.spawn on one node, torchrun across nodes
    ├── strategy.watch
    ├── ranks.supervise                 runners.watch.supervisor.Supervisor; output into the log
    ├── strategy.stop
    └── conclude
        ├── ranks.notice_vanished       a directory moved or deleted (evidence for the overrides)
        ├── gather_across_nodes         runners.watch.nodes.NodeFacts (evidence for the overrides)
        ├── strategy.explain            the graph server's (evidence for the overrides)
        ├── diagnosis.apply_overrides   runners.watch.diagnosis.OVERRIDES, in their order
        ├── recording.restage           a run directory that vanished: the result in a new one
        ├── dataset.recheck_dataset
        └── recording.write_and_report  recording.launched_result, settled into the point

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
import shutil
import sys
import tempfile
import time
from pathlib import Path


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
    from runners.config import ConfigError, RunConfig, build_parser, config_from_args
    from runners.launch import pointlock, strategy as strategies
    from runners.launch.console import error, say
    from runners.launch.dataset import prepare_dataset, recheck_dataset
    from runners.launch.preflight import check_capacity, expected_output, preflight_with_output
    from runners.launch.ranks import (cpu_mark, free_port, launch, notice_vanished, report_disk_full, report_vanished,
                                      supervise, unwritable, vanished)
    from runners.rank.probes import disk_full
    from runners.records import envinfo, history
    from runners.records.rundir import RunDir
    from runners.records.settle import launched_result, record_skipped, restage, write_and_report, write_run_files
except ImportError as _exc:  # pragma: no cover (a bare interpreter: exercised by tests in a subprocess)
    if __name__ != "__main__":
        raise
    print(_wrong_python(_exc), file=sys.stderr)
    sys.exit(2)


def check_environment(cfg: RunConfig, env: dict) -> None:
    """Refuse runs that would silently benchmark something else (the framework's own checks,
    declared in its registry entry). Raises ConfigError."""
    from runners.adapters import registry

    refusal, note = registry.framework(cfg.framework).check_environment(cfg.device_type, env)
    if refusal:
        raise ConfigError(refusal)
    if note:
        say(f"note: {note}")


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
    permission) before any work: a run writes beside it first (runners.records.history). ConfigError."""
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
    error: its cause (runners.watch.diagnosis.SKIP_CAUSES) comes back, with the reason in cfg.skip_reason."""
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


def claim_point(out: Path, wait) -> int | None:
    """Hold the point until this process exits (one runner of a point at a time:
    runners.launch.pointlock) and salvage what a killed earlier run of it left; 2 when it is busy."""
    try:
        pointlock.acquire(out, wait=wait)
    except pointlock.PointBusy as exc:
        error(str(exc))
        return 2
    for line in history.salvage(out):
        say(line)
    return None


def prepare_run_dir(cfg: RunConfig, out: Path, argv: list, graph_meta: dict) -> dict | None:
    """Make the run's (fresh, staging) directory, check its free space, write config.json and
    command.sh. Returns the output estimate, or None (after saying why) when the space cannot
    hold a run. Raises OSError when a write fails."""
    from runners.memory.units import fmt_bytes

    RunDir(out).make()
    space = expected_output(cfg, graph_meta)
    space["free_bytes"] = shutil.disk_usage(out).free
    if space["free_bytes"] < space["least_bytes"]:
        error(f"--out {history.point_dir(out)}: its filesystem has {fmt_bytes(space['free_bytes'])} free but a run "
              f"needs about {fmt_bytes(space['least_bytes'])} to start and record its result (this one up to about "
              f"{fmt_bytes(space['expected_bytes'])}); free space or choose another --out")
        return None
    write_run_files(cfg, out, argv)
    return space



def stage_run(cfg: RunConfig, out: Path, argv: list, graph_meta: dict):
    """The run's fresh staging directory, with its files and the launcher's log open in it:
    (cfg that writes there, stage, output estimate, log, the stage's identity); else the exit
    code of a refusal (2: too little space), a full disk (3) or a vanished --out (4)."""
    from runners.watch.supervisor import dir_identity

    # The run writes into a fresh directory; the point's current run stays until it is replaced.
    stage = history.staging_dir(out)
    # A single-node run picks its free port now (config.json has it).
    cfg = dataclasses.replace(cfg, out=str(stage), master_port=cfg.master_port or free_port())
    try:
        space = prepare_run_dir(cfg, stage, argv, graph_meta)
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
    return cfg, stage, space, log, stage_id


def main(argv=None) -> int:
    """Check, pre-flight, launch, supervise and record one run (the steps and the exit codes:
    the module's doc)."""
    main_t, cpu_since = time.time(), cpu_mark()
    argv = list(sys.argv[1:] if argv is None else argv)
    cfg, env, skip_cause = parse_and_check(argv)
    out = Path(cfg.out)
    refused = claim_point(out, cfg.wait)
    if refused is not None:
        return refused
    if skip_cause:
        return record_skipped(cfg, env, argv, skip_cause)
    data = prepare_dataset(cfg, env)
    if data is None:
        return 2
    refused = check_capacity(cfg, env, argv, data.meta)
    if refused is not None:
        return refused
    staged = stage_run(cfg, out, argv, data.meta)
    if isinstance(staged, int):
        return staged
    cfg, stage, space, log, stage_id = staged
    pre = preflight_with_output(cfg, env, data.meta, space)
    strategy = strategies.of(cfg)
    if not strategy.prepare(cfg, env, stage, pre, data.meta):
        shutil.rmtree(stage, ignore_errors=True)  # refused before anything ran
        return 2
    run = launch(cfg, stage, RunDir(stage).config, env.get("network"), cpu_since, strategy.trainer_env)
    run.run_dir_id = stage_id
    run.marks.update(launcher_created=envinfo.process_created(), launcher_main=main_t)
    strategy.watch(run)
    failed = supervise(cfg, stage, run, log)
    strategy.stop(cfg, env, pre, run)
    if failed is not None:
        return failed
    run.marks["tree_exited"] = time.time()
    return conclude(cfg, out, argv, data, env, pre, stage, run, strategy)


def conclude(cfg: RunConfig, out: Path, argv: list, data, env: dict, pre: dict, stage: Path, run, strategy) -> int:
    """Explain the ended run and record it into its point `out`; the run's exit code. A run
    whose directory vanished is recorded in a fresh one, as `failed` (nothing to explain)."""
    from runners.watch.diagnosis import apply_overrides
    from runners.watch.supervisor import dir_identity

    if not vanished(run.outcome):
        notice_vanished(stage, run)
    if cfg.nodes > 1 and run.outcome.diagnosis:
        gather_across_nodes(cfg, stage, run, env)
    strategy.explain(stage, run)
    apply_overrides(run.outcome)  # the one place runners.watch.diagnosis.OVERRIDES are applied
    if vanished(run.outcome):
        # What the ranks wrote went with the directory: the result, in a new one, says why it is empty.
        try:
            cfg, stage = restage(cfg, out, argv)
            run.run_dir_id = dir_identity(stage)
        except OSError as exc:
            d = run.outcome.diagnosis
            return report_vanished(stage, Path(d["missing_file"]), d["detected_after_s"], unwritable(out, exc))
    recheck_dataset(data, env)
    return write_and_report(stage, out, launched_result(cfg, argv, data, env, pre, run), run)


def gather_across_nodes(cfg: RunConfig, stage: Path, run, env: dict) -> None:
    """A node's watchdog sees its own processes only: what names the hosts, and another node's
    part (runners.watch.nodes.NodeFacts), for the overrides."""
    from runners.watch import nodes

    detected = run.launch_t + (run.outcome.detected_after_s or 0.0)
    run.outcome.findings.nodes = nodes.NodeFacts(cfg, stage, run.local_ranks, run.started_at, env.get("network"),
                                                 detected)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ModuleNotFoundError as exc:  # a package the suite needs, missing from this Python
        print(_wrong_python(exc), file=sys.stderr)
        sys.exit(2)
