"""A grid point's run directory over time: a rerun never destroys a measured result.

A run writes into a fresh staging directory beside its `--out` (`.NAME.run-STAMP-PID`) and
becomes the point's current run only once it has written its own result.json; the run it
replaces moves to `--out`/previous/STARTED-STATUS/. A run that ends interrupted is filed under
previous/ instead, with what it measured: it is no finished output, so a resumed sweep redoes
the point (its result.json is missing), and an earlier result stays current.
What a killed attempt leaves behind (a staging directory, or a run directory without a
result) is filed under previous/ by the next run of the point. Nothing here deletes a
measurement. (The workflow marks result.json `update()`: Snakemake then neither removes it
before a forced rerun nor after a failed one; it restores it.)
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import time
from pathlib import Path

from runners.records import rank_rows, rundir
from runners.records.rundir import RunDir

PREVIOUS = "previous"
_STAGING = re.compile(r"^\.(?P<name>.+)\.run-(?P<stamp>\d{8}T\d{6}Z)-(?P<pid>\d+)$")


# -- names ---------------------------------------------------------------------------------------

def staging_dir(out: Path) -> Path:
    """A fresh staging directory for a new run of `out` (not created)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return Path(out).parent / f".{Path(out).name}.run-{stamp}-{os.getpid()}"


def is_staging(path: Path) -> bool:
    return bool(_STAGING.match(Path(path).name))


def point_dir(path: Path) -> Path:
    """The point's run directory of a staging directory (any other path: itself)."""
    m = _STAGING.match(Path(path).name)
    return Path(path).parent / m["name"] if m else Path(path)


def stagings(out: Path) -> list:
    """Staging directories of `out` that a run left behind (or is writing now), oldest first."""
    out = Path(out)
    found = out.parent.glob(f".{out.name}.run-*") if out.parent.is_dir() else []
    return sorted((d for d in found if d.is_dir() and point_dir(d) == out), key=lambda d: d.name)


def in_history(path: Path) -> bool:
    """Whether `path` lies in an earlier run (under some previous/) or a staging directory."""
    return any(part == PREVIOUS or is_staging(Path(part)) for part in Path(path).parts)


# -- what a directory holds ------------------------------------------------------------------

def run_entries(d: Path) -> list:
    """The entries of `d` that belong to one run (never previous/, node{K}/ or staging dirs)."""
    if not Path(d).is_dir():
        return []
    return sorted(e for e in Path(d).iterdir()
                  if rundir.is_run_entry(e.name))


def current_result(out: Path) -> Path | None:
    """result.json of the point's current run; None when the point has no recorded run."""
    path = RunDir(out).result
    return path if path.is_file() else None


def _label(d: Path) -> str:
    """previous/'s name for the run in `d`: its start (UTC) and status, from its result;
    'unfinished' (and the time of its newest file) when it never wrote one."""
    data = rank_rows.read_json(RunDir(d).result)
    if data and data.get("started_at"):
        try:
            started = dt.datetime.fromisoformat(data["started_at"]).astimezone(dt.timezone.utc)
            return f"{started:%Y%m%dT%H%M%SZ}-{data.get('status', 'unknown')}"
        except (TypeError, ValueError):
            pass
    newest = max((e.stat().st_mtime for e in run_entries(d)), default=time.time())
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(newest))}-unfinished"


def _free_slot(out: Path, label: str) -> Path:
    base = Path(out) / PREVIOUS / label
    slot, n = base, 1
    while slot.exists():
        n += 1
        slot = base.with_name(f"{label}.{n}")
    return slot


# -- moves -----------------------------------------------------------------------------------

def _rename_paths(src: Path, dest: Path) -> None:
    """result.json and config.json name the directory a run was written in; name `dest`."""
    for path in (RunDir(src).result, RunDir(src).config):
        try:
            text = path.read_text()
        except OSError:
            continue
        if str(src) in text:
            # Both are JSON: the paths appear as JSON strings, so escape them as JSON does.
            new = text.replace(json.dumps(str(src))[1:-1], json.dumps(str(dest))[1:-1])
            rank_rows.write_text_atomic(path, new)


def file_away(out: Path, src: Path | None = None) -> Path | None:
    """Move the run in `src` (default: `out`'s own run entries) to out/previous/LABEL/;
    where it went, or None when there was nothing to move. A whole staging directory moves
    in one rename."""
    out = Path(out)
    src = Path(src) if src is not None else out
    if src == out and not run_entries(out):
        return None
    slot = _free_slot(out, _label(src))
    slot.parent.mkdir(parents=True, exist_ok=True)
    if src == out:
        slot.mkdir()
        # result.json first: a reader of `out` never takes the old result for the new run's files.
        for e in sorted(run_entries(out), key=lambda e: e.name != rundir.RESULT):
            os.rename(e, slot / e.name)
    else:
        _rename_paths(src, slot)
        os.rename(src, slot)
    return slot


def promote(stage: Path, out: Path) -> Path | None:
    """Make the run recorded in `stage` the current run of `out`: the run it replaces moves
    to previous/ first. Returns where the replaced run went (None: there was none)."""
    out, stage = Path(out), Path(stage)
    _rename_paths(stage, out)
    out.mkdir(parents=True, exist_ok=True)
    replaced = file_away(out)
    for e in sorted(stage.iterdir(), key=lambda e: e.name == rundir.RESULT):
        os.rename(e, out / e.name)  # result.json last: the new run appears whole
    stage.rmdir()
    return replaced


def settle(stage: Path, out: Path, status: str) -> tuple:
    """Where a finished run in `stage` goes: it becomes current unless it was interrupted. An
    interrupted run goes under previous/: it must not replace a measurement, and it is no
    finished output of the point either (Snakemake would take its result.json for one, and a
    resumed sweep would keep a point with nothing measured). Returns (its directory now, where a
    replaced run went or None)."""
    if status == "interrupted":
        return file_away(out, stage), None
    return Path(out), promote(stage, out)


def owner_alive(stage: Path) -> bool:
    """Whether the process that made staging directory `stage` still runs on this host: the PID
    in its name is alive and was created no later than the directory's stamp (a PID reused by a
    later process is not its owner)."""
    import psutil

    m = _STAGING.match(Path(stage).name)
    if not m:
        return False
    stamp = dt.datetime.strptime(m["stamp"], "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc).timestamp()
    try:
        proc = psutil.Process(int(m["pid"]))
        return proc.status() != psutil.STATUS_ZOMBIE and proc.create_time() <= stamp + 1
    except psutil.Error:
        return False


def salvage(out: Path) -> list:
    """Before a new run of `out`, file away what killed earlier attempts left: a staging
    directory that holds a result (killed while being promoted) is promoted, any other goes
    under previous/, and so do run files in `out` without a result. A staging directory whose
    runner is alive is left alone. Returns what was done, one line each."""
    out, done = Path(out), []
    for stage in stagings(out):
        if owner_alive(stage):  # a live run of this point (another host on a shared filesystem)
            done.append(f"left {stage.name} alone: its runner (PID {_STAGING.match(stage.name)['pid']}) is alive")
            continue
        if RunDir(stage).result.is_file():
            promote(stage, out)
            done.append(f"promoted the finished run left in {stage.name}")
        else:
            done.append(f"filed the unfinished attempt {stage.name} under {file_away(out, stage)}")
    if run_entries(out) and current_result(out) is None:
        done.append(f"filed an unfinished run under {file_away(out)}")
    return done


def history(out: Path) -> list:
    """The earlier runs of `out`, oldest first: (directory, its result or None)."""
    prev = Path(out) / PREVIOUS
    dirs = sorted(d for d in prev.iterdir() if d.is_dir()) if prev.is_dir() else []
    return [(d, rank_rows.read_json(RunDir(d).result)) for d in dirs]
