"""Writing a dataset in the canonical format (runners.datasets.format), atomically.

Everything goes to a temporary sibling directory that is renamed into place only when
complete, so a killed writer leaves no dataset that looks valid; `_lock` serialises writers
of one dataset (prepare, import, twin).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Optional

import numpy as np

from runners.datasets.format import FILES, FORMAT_VERSION, META_FILE, array_sha256, check_finite, combine_hash


@contextlib.contextmanager
def _lock(root: Path, name: str):
    """Serialise concurrent writers (prepare, import) of one dataset (e.g. parallel Snakemake jobs)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no locking
        yield
        return
    with open(root / f".{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_dataset(root, name: str, arrays: dict, source: dict, stats: dict,
                  num_classes: Optional[int] = None, symmetric: bool = True,
                  replaced_to: Optional[Path] = None) -> Path:
    """Write `<root>/<name>/` atomically: everything goes to a temporary sibling directory
    that is renamed into place only when complete, so a killed writer leaves no dataset
    that looks valid. Returns the final path. `symmetric` False records a directed graph
    (an import with --directed); `replaced_to`: where an existing `<root>/<name>` is moved
    (kept) instead of being deleted."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / name
    check_finite(f"dataset {name!r} ({source.get('origin') or source.get('kind') or 'source'})",
                 arrays["features"])
    tmp = root / f".{name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        files = _save_arrays(tmp, arrays)
        meta = _meta(name, arrays, files, source, stats, num_classes, symmetric)
        with open(tmp / META_FILE, "w") as fh:
            fh.write(json.dumps(meta, indent=2) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        _fsync_dir(tmp)
        _move_into_place(root, name, tmp, replaced_to)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _save_arrays(tmp: Path, arrays: dict) -> dict:
    """Each array in its canonical dtype as `tmp/<key>.npy`, on disk; returns meta.json's `files`."""
    files = {}
    for key, dtype in FILES:
        arr = np.ascontiguousarray(arrays[key], dtype=np.dtype(dtype))
        path = tmp / f"{key}.npy"
        with open(path, "wb") as fh:
            np.save(fh, arr, allow_pickle=False)
            fh.flush()
            os.fsync(fh.fileno())
        files[path.name] = {"dtype": arr.dtype.str, "shape": list(arr.shape),
                            "bytes": path.stat().st_size, "sha256": array_sha256(arr)}
    return files


def _meta(name: str, arrays: dict, files: dict, source: dict, stats: dict,
          num_classes: Optional[int], symmetric: bool) -> dict:
    """meta.json of a dataset whose saved files are `files`."""
    labels = np.asarray(arrays["labels"])
    return {
        "format_version": FORMAT_VERSION,
        "name": name,
        "num_nodes": len(arrays["indptr"]) - 1,
        "num_edges": int(len(arrays["indices"])),
        "num_features": int(np.shape(arrays["features"])[1]),
        "num_classes": int(num_classes if num_classes is not None
                           else (labels.max() + 1 if len(labels) else 0)),
        "content_hash": combine_hash(files),
        "adjacency": {"layout": "csc", "sorted": True, "symmetric": bool(symmetric),
                      "self_loops": False, "duplicates": False},
        "source": source,
        "stats": stats,
        "files": files,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tool": "gnnscale runners.datasets",
    }


def _move_into_place(root: Path, name: str, tmp: Path, replaced_to: Optional[Path]) -> None:
    """Rename the complete `tmp` to `<root>/<name>`. An existing dataset there is moved to
    `replaced_to`, or without it deleted, but only once the new one is in place."""
    final = root / name
    old = None
    if final.exists() and replaced_to is not None:
        Path(replaced_to).parent.mkdir(parents=True, exist_ok=True)
        os.rename(final, replaced_to)
    elif final.exists():
        old = root / f".{name}.old-{uuid.uuid4().hex[:8]}"
        os.rename(final, old)
    os.rename(tmp, final)
    _fsync_dir(root)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
