"""Checking a dataset's bytes against its meta.json: the full check (`load(verify_hash=True)`)
and the cheap one a run makes before launch (`verify_files`), cached in <dataset>/verified.json.

`verify_files` re-hashes only the array files whose size, mtime, ctime or inode changed since
they last matched, so an unchanged dataset costs a few stat calls.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import uuid
from pathlib import Path
from typing import Optional, Union

import numpy as np

from runners.datasets.format import (DEFAULT_ROOT, FILES, META_FILE, DatasetError, _column_chunks, _stat_key,
                                     array_sha256, check_finite, combine_hash, load)

log = logging.getLogger("gnnscale.datasets")


def verify_contents(path: Path, meta: dict, arrays: dict) -> None:
    """Every file's sha256 and the adjacency itself (sources in range, sorted, no duplicates
    or self-loops, symmetric unless imported as directed): reads every byte."""
    _check_hashes(path, meta, arrays, use_cache=False)
    n, indptr, indices = int(meta["num_nodes"]), arrays["indptr"], arrays["indices"]
    ipath = path / "indices.npy"
    if len(indices) == 0:
        return
    if indices.min() < 0 or indices.max() >= n:
        raise DatasetError(f"{ipath}: source ids out of range 0..{n - 1}")
    # Work in column chunks to bound memory on Reddit-sized graphs.
    for lo, hi in _column_chunks(indptr, 1 << 24):
        a, b = int(indptr[lo]), int(indptr[hi])
        dst = np.repeat(np.arange(lo, hi, dtype=np.int64), np.diff(indptr[lo:hi + 1]))
        src = np.asarray(indices[a:b])
        if np.any(src == dst):
            raise DatasetError(f"{ipath}: has self-loops")
        inc = np.diff(src) > 0
        same_col = dst[1:] == dst[:-1]
        if np.any(same_col & ~inc):
            raise DatasetError(f"{ipath}: sources within a column are not strictly increasing "
                               "(unsorted or duplicate edges)")
    if meta.get("adjacency", {}).get("symmetric") is False:  # imported with --directed
        return
    # Symmetric: the sorted reverse keys equal the forward keys.
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    rev = np.asarray(indices) * n + dst
    rev.sort()
    dst *= n
    dst += indices
    if not np.array_equal(rev, dst):
        raise DatasetError(f"{ipath}: adjacency is not symmetric")


VERIFIED_FILE = "verified.json"
# A file whose mtime is this recent is not cached: a later write within the same timestamp
# tick (1-2 s on some file systems) could leave its mtime unchanged ("racily clean").
_RACY_S = 2.0


def _read_record(path: Path) -> dict:
    try:
        rec = json.loads((path / VERIFIED_FILE).read_text())
    except (OSError, ValueError):
        return {}
    files = rec.get("files") if isinstance(rec, dict) else None
    return files if isinstance(files, dict) else {}


def _write_record(path: Path, meta: dict, files: dict) -> Optional[Path]:
    """Write verified.json atomically (a unique temporary name, then rename: concurrent runs
    never see half a file); None when the directory is read-only."""
    target = path / VERIFIED_FILE
    tmp = path / f".{VERIFIED_FILE}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    body = {"content_hash": meta["content_hash"], "files": files,
            "written_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "note": "written by gnnscale runners.datasets.verify_files; a cache of which files "
                    "were last seen with the sha256 meta.json records. Safe to delete."}
    try:
        tmp.write_text(json.dumps(body, indent=1) + "\n")
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        log.warning("%s: cannot record the verification (%s); every run will re-hash", target, exc)
        return None
    return target


def _check_hashes(path: Path, meta: dict, arrays: dict, use_cache: bool) -> dict:
    """Compare every array file's sha256 with meta.json, re-hashing only files whose size,
    mtime, ctime or inode differ from verified.json (all of them without use_cache).
    Raises DatasetError naming the first file that does not match."""
    t0 = time.perf_counter()
    if combine_hash(meta["files"]) != meta["content_hash"]:
        raise DatasetError(f"{path / META_FILE}: content_hash does not match its file hashes")
    old = _read_record(path) if use_cache else {}
    record, hashed, cached = {}, [], []
    for key, _ in FILES:
        fname = f"{key}.npy"
        want = meta["files"][fname].get("sha256")
        before = _stat_key(path / fname)
        prev = old.get(fname)
        # Features are checked for NaN/inf with the same read; a record from before that check
        # (no "finite") is not trusted.
        if (isinstance(prev, dict) and prev.get("sha256") == want
                and {k: prev.get(k) for k in before} == before and (key != "features" or prev.get("finite"))):
            record[fname] = prev
            cached.append(fname)
            continue
        digest = array_sha256(arrays[key])
        hashed.append(fname)
        if digest != want:
            kind = meta.get("source", {}).get("kind")
            again = ("import it again (python -m runners.datasets import ... --force)" if kind == "imported"
                     else "make the twin again (python -m runners.datasets twin ... --force)" if kind == "twin"
                     else "prepare the dataset again (prepare --force)")
            raise DatasetError(f"{path / fname}: hash mismatch: contents changed since they were "
                               f"written (sha256 {digest[:16]}..., meta.json {str(want)[:16]}...); "
                               + again)
        if key == "features":
            check_finite(path / fname, arrays[key])
        after = _stat_key(path / fname)
        if after != before:
            raise DatasetError(f"{path / fname}: changed while it was being verified; "
                               "is another process writing the dataset?")
        if time.time_ns() - before["mtime_ns"] >= _RACY_S * 1e9:
            record[fname] = {**before, "sha256": digest, **({"finite": True} if key == "features" else {})}
    # A full verification refreshes the record too, so the next run need not re-hash.
    written = _write_record(path, meta, record) if hashed else path / VERIFIED_FILE
    return {"content_hash": meta["content_hash"], "hashed": hashed, "cached": cached,
            "seconds": round(time.perf_counter() - t0, 4),
            "record": str(written) if written else None,
            "stats": {f"{key}.npy": _stat_key(path / f"{key}.npy") for key, _ in FILES}}


def changed_since(path: Union[str, Path], verification: dict) -> list:
    """Files whose size, mtime, ctime or inode differ from when `verification` (a
    verify_files result) was made: a few stat calls, for a check after a run."""
    changed = []
    for fname, before in verification["stats"].items():
        try:
            now = _stat_key(Path(path) / fname)
        except OSError:
            now = None
        if now != before:
            changed.append(fname)
    return changed


def verify_files(name_or_path: Union[str, Path], root=DEFAULT_ROOT, use_cache: bool = True) -> dict:
    """Check that the bytes a run will read have the content_hash it will record.

    Every array file's sha256 is compared with meta.json; with use_cache, a file whose size,
    mtime_ns, ctime_ns and inode equal those recorded in `<dataset>/verified.json` when it
    last matched is not read again (unchanged datasets cost a few stat calls). Raises
    DatasetError naming the file whose contents differ. Returns what was done:
    {"content_hash", "hashed": [files read], "cached": [files trusted from the record],
    "seconds", "record": path of verified.json or None, "stats": per-file stat at the end}.
    """
    graph = load(name_or_path, root)  # the fast checks first: headers, sizes, shapes
    arrays = {key: getattr(graph, key) for key, _ in FILES}
    return _check_hashes(graph.path, graph.meta, arrays, use_cache)

