"""What a rank of the training harness leaves behind when its run raised: its error record.

`record_failure` runs in runners.rank.harness.main's `except`, so the traceback is the one being
handled. The record names the exception, where the rank was (epoch, step, phase) and how its
loader workers ended, which is often the real cause.
"""

from __future__ import annotations

import json
import signal
import sys
import time
import traceback

from runners.rank.probes import DISK_FULL_MARK, disk_full


def record_failure(rank, exc: BaseException) -> int:
    """Write `rank`'s error record and rank.json for `exc`; returns the rank's exit status (1).
    On a full disk no record can be written: one line on stderr, which the launcher acts on."""
    if disk_full(exc):
        print(f"{DISK_FULL_MARK} rank {rank.rank} could not write its records: {exc}", file=sys.stderr, flush=True)
        return 1
    worker_failure, dead = _worker_failure(rank)
    phase = getattr(rank.hb, "phase", None)
    rank.hb.beat("failed")
    try:
        tb = traceback.format_exc()[-6000:]
    except BaseException:
        tb = repr(exc)
    err = {"rank": rank.rank, "time": time.time(), "type": type(exc).__name__, "message": str(exc)[:2000],
           "worker_failure": worker_failure, "dead_workers": dead, "traceback": tb,
           "epoch": rank.hb.epoch, "step": rank.hb.step, "phase": phase}
    try:
        rank.run_dir.rank_error(rank.rank).write_text(json.dumps(err, indent=1))
        rank.write_info()
    except OSError as werr:
        if not disk_full(werr):
            raise
        print(f"{DISK_FULL_MARK} rank {rank.rank} could not write its error record: {werr}", file=sys.stderr,
              flush=True)
        return 1
    print(tb, file=sys.stderr, flush=True)
    return 1


def _worker_failure(rank) -> tuple:
    """(the loader's own account of a failed worker, or one made from their exits, or None;
    the exits of `rank`'s loader workers that are no longer running)."""
    # A dead loader worker makes PyTorch's SIGCHLD handler raise again and again; stop it
    # so the error record gets written, and ask the loader for the worker failure itself.
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    worker_failure = None
    try:
        import torch

        torch._C._error_if_any_worker_fails()
    except Exception as werr:
        worker_failure = str(werr)
    dead = rank.worker_exits()
    # A reaped worker ('gone') may have ended normally; only a known bad end is a failure.
    failed = [d for d in dead if d.get("signal") or d.get("exit_code")]
    if failed and not worker_failure:
        worker_failure = "DataLoader worker " + ", ".join(
            f"(pid {d['pid']}, {d.get('signal') or 'exit code %s' % d['exit_code']})" for d in failed
        ) + " exited unexpectedly"
    return worker_failure, dead
