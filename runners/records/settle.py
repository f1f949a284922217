"""result.json of one run, and the files that let it be rerun: a skipped point's result, a
launched run's result settled into its point (runners.records.history), and the lines that summarise
it on the terminal."""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
import time
from pathlib import Path

from runners.config import RunConfig
from runners.launch.console import say
from runners.launch.dataset import Dataset
from runners.launch.ranks import (EXIT_SIGNAL_BASE, Launch, now_iso, rank_starter, report_disk_full, report_vanished,
                                  unwritable)
from runners.rank.probes import disk_full
from runners.records import envinfo, history, result
from runners.records.rank_rows import collect_measurements, summarise
from runners.records.rundir import RunDir


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


def record_skipped(cfg: RunConfig, env: dict, argv: list, cause: str = "not_enough_devices") -> int:
    """A grid point this node or lane cannot run (more GPUs than it has, a framework its torch
    cannot import): a result that says so, so the sweep goes on and the report shows the point
    as skipped, with the reason. A point that already has a result keeps it, untouched."""
    from runners.watch.diagnosis import skipped

    out = Path(cfg.out)
    say(f"SKIPPED {cfg.framework}/{cfg.model} devices={cfg.devices}: {cfg.skip_reason}")
    kept = history.current_result(out)
    if kept is not None:
        say(f"  {out} keeps its recorded run ({kept}); nothing was changed")
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
    say(f"  result: {RunDir(out).result}")
    return 0


def launched_result(cfg: RunConfig, argv: list, data: Dataset, env: dict, pre: dict, run: Launch) -> dict:
    """result.json of a run that was launched: the ranks' records, the summary (ok runs only)
    and everything the launcher and the watchdog saw (runners.records.result builds it)."""
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
    """Write result.json into the staging directory, settle the run into `out` (runners.records.history:
    it replaces the point's current run, or is filed under previous/ when it was interrupted
    and the point has a result) and print its summary; the run's exit code (the module's doc)."""
    from runners.watch.supervisor import missing_file

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


def print_summary(document: dict, where: Path, replaced: Path | None) -> None:
    """The run's outcome in a few lines; where its result went, and where the run it replaced went."""
    c, s = document["config"], document["summary"]
    say(f"{document['status'].upper()} {c['framework']}/{c['model']} devices={c['devices']} "
        f"batch={c['batch_size']} workers={c['workers']} dataset={c['dataset']}")
    if s:
        acc = f"{s['final_val_acc']:.4f}" if s["final_val_acc"] is not None else "n/a"
        steady = (f"steady-state epoch {s['steady_epoch_time_s']:.3f}s (warm-up epoch "
                  f"{s['warmup_epoch_time_s']:.3f}s)" if s.get("steady_epoch_time_s") is not None
                  else f"median epoch {s['median_epoch_time_s']:.3f}s (no epoch after the warm-up)")
        conv = {True: "", False: " NOT CONVERGED (not above the features-only baseline)", None: ""}[s.get("converged")]
        say(f"  train time (slowest rank) {s['train_time_s']:.2f}s, {steady}, start-up "
            f"{s['startup_s']:.1f}s, {s['throughput_seed_nodes_per_s']:.0f} seed nodes/s, val acc {acc}{conv}")
        if s.get("seed_nodes_per_rank_epoch") is not None:
            say(f"  {c['harness']} harness: each rank trained {s['steps_per_rank_epoch']} steps, "
                f"{s['seed_nodes_per_rank_epoch']:.0f} seed nodes per epoch; all ranks "
                f"{s['seed_nodes_per_epoch_all_ranks']:.0f} of a {s['train_split_seed_nodes']}-node "
                f"training split")
    if document["diagnosis"]:
        say(f"  {document['diagnosis']['summary']}")
    say(f"  result: {RunDir(where).result}")
    if replaced is not None:
        say(f"  the run it replaced: {replaced}")
    elif Path(where).parent.name == history.PREVIOUS:
        point = Path(where).parent.parent
        kept = (f"{point} keeps its recorded run" if history.current_result(point) is not None
                else f"{point} has no finished run: run the point again (a resumed sweep does)")
        say(f"  interrupted: filed under previous/; {kept}")
