"""One run of a grid point at a time: a lock file beside its `--out`.

Two runners of one point (a manual rerun while the sweep is at that point, two terminals) would
share its staging and history: the second would file the first's live run away as if it had
been killed. The launcher takes an exclusive `flock` on `.NAME.lock` beside `--out` before it
touches the point, and holds it until it exits; the kernel releases it when the holder dies,
however it dies, so a lock never outlives its run. The holder writes its PID, host and start
time into the file, so a refused runner can say who holds the point.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import socket
from pathlib import Path


class PointBusy(RuntimeError):
    """Another live runner holds the point."""


def lock_path(out: Path) -> Path:
    return Path(out).parent / f".{Path(out).name}.lock"


def holder(out: Path) -> dict:
    """What the lock file says of its holder ({} when it says nothing yet)."""
    try:
        return json.loads(lock_path(out).read_text() or "{}")
    except (OSError, ValueError):
        return {}


def describe(info: dict) -> str:
    if not info:
        return "another runner (it has not yet written who it is)"
    return f"the runner with PID {info.get('pid')} on host {info.get('host')}, started {info.get('started_at')}"


def acquire(out: Path, wait: bool = False) -> int:
    """Take the point's lock for this process; its file descriptor (kept open until exit, not
    inherited by children). Raises PointBusy naming the holder when it is held and not `wait`."""
    path = lock_path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        raise PointBusy(f"{out} is being run by {describe(holder(out))}; wait for it, or add --wait "
                        "to run after it") from None
    me = {"pid": os.getpid(), "host": socket.gethostname(),
          "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(me).encode(), 0)
    return fd
