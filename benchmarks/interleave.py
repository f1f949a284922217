"""The timing rows' runs (benchmarks.measure rows 1, 2, 4, 6), interleaved: every variant once per
repeat, in an order rotated by the repeat, so that drift of a shared machine hits all variants
alike. The runs so far are kept after every run (work/timing-so-far.json), so that a measurement
cut off loses none of them and `--resume` continues it: a 2-core machine's speed moves in spells
of several seconds, and settling a ratio to 3 % there takes more repeats than one sitting holds.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from dataclasses import asdict
from pathlib import Path

from benchmarks.measure_runs import (REFERENCE_VARIANTS, REPO, MeasureError, Settings, log, run_reference, run_runner,
                                     timed)
from runners.records import envinfo

SO_FAR = "timing-so-far.json"
# What every run of a measurement shares: a measurement continues only with the same settings...
RUN_SETTINGS = ("dataset", "data_root", "devices", "batch_size", "workers", "fanouts", "epochs", "models", "timed",
                "only")
# ... and the same measured code (the runner and the reference loops), as committed or not.
MEASURED_CODE = ("runners", "benchmarks/reference_*.py")


# Every timed run starts on a quiet machine, so that no run's epochs share the cores with what
# the previous run leaves behind (processes still exiting, dirty pages written back), and a run
# that started on a busy machine says so. On an otherwise idle machine it moved no fidelity row
# beyond the noise (docs/history.md, at e46cdb9).
QUIET_PERCENT = 10.0  # other CPU work, in % of all cores, below which a window counts as quiet
WINDOW_S = 0.5
QUIET_WINDOWS = 4  # ... this many in a row (2 s)
SETTLE_WINDOWS = 40  # a machine that never quiets is measured anyway after 20 s, and the run says so


def busy_window() -> float:
    """% of all cores busy with other work (not this process or its children) over the next WINDOW_S."""
    from runners.launch.ranks import cpu_mark, other_cpu_busy_percent

    mark = cpu_mark()
    time.sleep(WINDOW_S)
    return other_cpu_busy_percent(mark)


def settle(window=busy_window) -> dict:
    """Flush dirty pages, then wait for QUIET_WINDOWS quiet windows in a row (`window`: the next
    window's busy %), at most SETTLE_WINDOWS: {"waited_s", "quiet", "busy_percent" (the last window)}."""
    os.sync()
    quiet = 0
    for n in range(1, SETTLE_WINDOWS + 1):
        busy = window()
        quiet = quiet + 1 if busy < QUIET_PERCENT else 0
        if quiet == QUIET_WINDOWS:
            break
    return {"waited_s": round(n * WINDOW_S, 1), "quiet": quiet == QUIET_WINDOWS, "busy_percent": busy}


def settle_summary(runs: dict) -> dict:
    """How the timed runs' starts settled: runs, those measured on a machine that never quieted, and
    the median wait."""
    got = [r["settle"] for recs in runs.values() for r in recs if "settle" in r]
    return {"runs": len(got), "not_quiet": sum(not g["quiet"] for g in got),
            "median_wait_s": statistics.median(g["waited_s"] for g in got) if got else None}


def run_settings(s: Settings) -> dict:
    settings = asdict(s)
    return {k: settings[k] for k in RUN_SETTINGS}


def framework_variants(fw: str, variants: tuple) -> tuple:
    """`variants` of `fw`, and its second references (REFERENCE_VARIANTS) where the reference is one."""
    return variants + (tuple(REFERENCE_VARIANTS.get(fw, {})) if "reference" in variants else ())


def cells(s: Settings, variants: tuple) -> dict:
    """(framework, model, variant) -> [] for every cell the timing rows run."""
    return {(fw, m, v): [] for fw in timed(s) for m in s.models for v in framework_variants(fw, variants)}


def code_changed_since(commit: str | None) -> list:
    """The measured code's files that differ between `commit` and this working tree; ["?"] where
    git cannot tell."""
    if not commit:
        return ["? (the measurement recorded no commit)"]
    proc = subprocess.run(["git", "diff", "--name-only", commit, "--", *MEASURED_CODE], cwd=REPO,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return [f"? (git diff {commit[:7]}: {proc.stderr.strip()[:200]})"]
    return proc.stdout.split()


def so_far(s: Settings, work: Path, variants: tuple) -> tuple:
    """(cells with the complete repeats of the measurement `--resume` continues, their number, its
    commit), read from the file `s.resume` names, else work/SO_FAR. MeasureError naming what differs
    where it ran other settings or other code."""
    path = Path(s.resume) if isinstance(s.resume, str) else work / SO_FAR
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise MeasureError(f"--resume: no measurement to continue in {path} ({exc}); run without --resume") from exc
    now = run_settings(s)
    differ = [f"{k} {now[k]!r} here, {saved['settings'].get(k)!r} there" for k in RUN_SETTINGS
              if saved["settings"].get(k) != now[k]]
    if differ:
        raise MeasureError(f"--resume: the measurement in {path} ran other settings: {'; '.join(differ)}")
    changed = code_changed_since(saved.get("git_commit"))
    if changed:
        raise MeasureError(f"--resume: the measured code changed since the measurement in {path} began at "
                           f"{(saved.get('git_commit') or '?')[:7]}: {', '.join(changed[:6])}; start afresh")
    runs = cells(s, variants)
    kept = {tuple(k.split("/")): v for k, v in saved["runs"].items()}
    if set(kept) != set(runs):
        raise MeasureError(f"--resume: the measurement in {path} ran other cells: {sorted(kept)}")
    done = min(map(len, kept.values()))
    return {k: kept[k][:done] for k in runs}, done, saved.get("git_commit")


def timing_runs(s: Settings, work: Path, variants: tuple, raw: dict) -> dict:
    """(framework, model, variant) -> its runs' records, `s.repeats` of each; with `s.resume`, the
    complete repeats kept in work/SO_FAR first (raw["resumed"] says how many, from which commit)."""
    runs, done, commit = cells(s, variants), 0, envinfo.git_state()["git_commit"]
    if s.resume:
        runs, done, commit = so_far(s, work, variants)
        raw["resumed"] = {"repeats": done, "git_commit": commit}
        log(f"resumed: {done} complete repeats of the measurement begun at {(commit or '?')[:7]}")
    total, settings = len(runs) * s.repeats, run_settings(s)
    for i in range(done, s.repeats):
        for fw in timed(s):
            fw_variants = framework_variants(fw, variants)
            order = fw_variants[i % len(fw_variants):] + fw_variants[:i % len(fw_variants)]
            for m in s.models:
                for v in order:
                    label = f"{fw}-{m}-{v}-r{i}"
                    log(f"{sum(map(len, runs.values())) + 1}/{total} {label}")
                    settled = settle()
                    if not settled["quiet"]:
                        log(f"    the machine did not quiet in {settled['waited_s']} s "
                            f"({settled['busy_percent']}% busy with other work); measuring anyway")
                    if v.startswith("reference"):
                        extra = tuple(REFERENCE_VARIANTS[fw][v][1]) if v != "reference" else ()
                        rec = run_reference(s, work, fw, m, label, extra)
                    else:
                        rec = run_runner(s, work, fw, m, label, probes=v == "probes-on")
                    log(f"    median epoch {rec['epoch_s']:.3f} s, command {rec['command_s']:.1f} s")
                    runs[(fw, m, v)].append({**rec, "settle": settled})
                    (work / SO_FAR).write_text(json.dumps({
                        "settings": settings, "git_commit": commit,
                        "runs": {"/".join(k): v for k, v in runs.items()}}))
    raw["settle"] = settle_summary(runs)
    return runs
