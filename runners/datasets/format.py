"""The canonical on-disk graph format: constants, hashing, loading and verification.

A dataset directory `<root>/<name>/` holds `meta.json` and seven `.npy` arrays (see `FILES`
and docs/datasets.md). Writes are atomic; loads are memory-mapped and read-only, so every
rank of a run shares one copy; `verify_files` is the cheap check a run makes before launch.
Writing a dataset: runners.datasets.writing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

import numpy as np

log = logging.getLogger("gnnscale.datasets")

FORMAT_VERSION = 1
DEFAULT_ROOT = "results/datasets"

SYNTHETIC_NAMES = ("tiny", "small", "reddit-shape", "wide")
CONVERTED_NAMES = ("reddit", "ogbn-products")
DATASET_NAMES = SYNTHETIC_NAMES + CONVERTED_NAMES
# What an imported dataset may be called: a directory name and a Snakemake wildcard value
# (workflows/rules/common.smk), never hidden (leftovers of writers start with a dot).
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")

# Array files in hashing order, with their canonical dtype (little-endian, C order).
FILES = (
    ("indptr", "<i8"),
    ("indices", "<i8"),
    ("features", "<f4"),
    ("labels", "<i8"),
    ("train_idx", "<i8"),
    ("val_idx", "<i8"),
    ("test_idx", "<i8"),
)
SPLITS = ("train_idx", "val_idx", "test_idx")
META_FILE = "meta.json"
_HASH_CHUNK = 64 << 20  # bytes hashed per update: bounded memory for memory-mapped arrays


class DatasetError(ValueError):
    """A dataset cannot be prepared or loaded. The message starts with the file concerned."""



# --------------------------------------------------------------------------------------
# Hashing, writing, reading
# --------------------------------------------------------------------------------------

def nonfinite(features: np.ndarray, chunk_rows: int = 1 << 16) -> dict | None:
    """NaN and infinite values in a feature matrix, read in row chunks (a memory map stays
    a memory map): None when every value is finite, else their counts and the first node."""
    nan = inf = rows = 0
    first = None
    for lo in range(0, len(features), chunk_rows):
        block = np.asarray(features[lo:lo + chunk_rows])
        bad = ~np.isfinite(block)
        if not bad.any():
            continue
        n_nan = int(np.isnan(block).sum())
        nan, inf = nan + n_nan, inf + int(bad.sum()) - n_nan
        bad_rows = np.flatnonzero(bad.any(axis=1))
        rows += len(bad_rows)
        first = lo + int(bad_rows[0]) if first is None else first
    return None if first is None else {"nan": nan, "inf": inf, "rows": rows, "first_node": first}


def check_finite(where, features: np.ndarray) -> None:
    """Refuse features with NaN or infinite values (a model trained on them measures nothing:
    its loss is NaN from the first step). `where` names the file they came from."""
    found = nonfinite(features)
    if found:
        raise DatasetError(f"{where}: features hold {found['nan']} NaN and {found['inf']} infinite values in "
                           f"{found['rows']} of {len(features)} nodes (the first at node {found['first_node']}); "
                           "every feature must be a finite number: fill or drop them at the source")


def array_sha256(arr: np.ndarray) -> str:
    """sha256 of the raw C-order bytes; memory-mapped arrays are read in bounded chunks."""
    h = hashlib.sha256()
    flat = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
    for start in range(0, len(flat), _HASH_CHUNK):
        h.update(memoryview(flat[start:start + _HASH_CHUNK]))
    return h.hexdigest()


def combine_hash(files: dict) -> str:
    """content_hash over per-file (name, dtype, shape, sha256) in the fixed FILES order.

    The dataset's name is deliberately not included: equal contents give equal hashes.
    """
    h = hashlib.sha256(f"gnnscale-dataset-v{FORMAT_VERSION}\n".encode())
    for key, _ in FILES:
        info = files[f"{key}.npy"]
        shape = "x".join(str(s) for s in info["shape"])
        h.update(f"{key}:{info['dtype']}:{shape}:{info['sha256']}\n".encode())
    return h.hexdigest()


@dataclass
class Graph:
    """A loaded dataset. Arrays are read-only memory maps: ranks on one machine share the
    page cache instead of each holding a copy. Pickling a Graph re-opens the files in the
    receiving process rather than copying the arrays."""

    name: str
    path: Path
    num_nodes: int
    num_edges: int
    num_features: int
    num_classes: int
    indptr: np.ndarray
    indices: np.ndarray
    features: np.ndarray
    labels: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    content_hash: str
    meta: dict = field(default_factory=dict, repr=False)

    def __reduce__(self):
        return (load, (Path(self.path),))

    def in_degrees(self) -> np.ndarray:
        return np.diff(self.indptr)

    def describe(self) -> dict:
        """What a result records about its dataset."""
        return {"name": self.name, "path": str(self.path), "content_hash": self.content_hash,
                "format_version": self.meta.get("format_version"),
                "num_nodes": self.num_nodes, "num_edges": self.num_edges,
                "num_features": self.num_features, "num_classes": self.num_classes,
                "num_train": len(self.train_idx), "num_val": len(self.val_idx),
                "num_test": len(self.test_idx), "source": self.meta.get("source", {})}


def resolve(name_or_path: Union[str, Path], root=DEFAULT_ROOT) -> Path:
    """A dataset name (a str in DATASET_NAMES, or the name of a directory under root, as an
    imported dataset has) -> `<root>/<name>`; a Path, or any other str, is taken as the
    dataset directory itself."""
    if isinstance(name_or_path, str) and (
            name_or_path in DATASET_NAMES
            or (NAME_RE.fullmatch(name_or_path) and (Path(root) / name_or_path).is_dir())):
        return Path(root) / str(name_or_path)
    path = Path(name_or_path)
    if path.is_dir():
        return path
    raise DatasetError(f"{(Path(root) / path).absolute()}: unknown dataset {str(name_or_path)!r};"
                       f" allowed names: {', '.join(DATASET_NAMES)}, or the name of an imported "
                       "dataset (python -m runners.datasets import), or the directory of a "
                       "prepared dataset")


def imported_source(path: Path) -> Optional[dict]:
    """meta.json's `source` when `path` holds a dataset made by `runners.datasets import`
    (readable meta.json, source.kind "imported"), else None."""
    try:
        source = read_meta(path).get("source")
    except DatasetError:
        return None
    return source if isinstance(source, dict) and source.get("kind") == "imported" else None


# Datasets a user made under a root, which a run or a sweep may name and the suite never
# regenerates: "imported" (runners.datasets import) and "twin" (runners.datasets twin).
USER_KINDS = ("imported", "twin")


def user_source(path: Path) -> Optional[dict]:
    """meta.json's `source` when `path` holds a dataset made by `runners.datasets import` or
    `runners.datasets twin` (source.kind in USER_KINDS), else None."""
    try:
        source = read_meta(path).get("source")
    except DatasetError:
        return None
    return source if isinstance(source, dict) and source.get("kind") in USER_KINDS else None


def check_name(name: str, root=DEFAULT_ROOT) -> None:
    """Raise DatasetError unless `name` is one of the suite's datasets or a directory under
    root that `runners.datasets import` or `twin` made (what a run or a sweep may name)."""
    if name in DATASET_NAMES:
        return
    path = Path(root).absolute() / name
    if not NAME_RE.fullmatch(name):
        why = "is not a dataset name (letters, digits, '.', '_', '-')"
    elif not path.exists():
        why = f"is not one of the suite's datasets and no dataset was imported as {path}"
    elif user_source(path) is None:
        why = (f"is not one of the suite's datasets and {path} was not made by runners.datasets import "
               "(or twin)")
    else:
        return
    raise DatasetError(f"{path}: {name!r} {why}; allowed: {', '.join(DATASET_NAMES)}, or import "
                       f"one first: python -m runners.datasets import PATH --name {name} --root {Path(root)}")


def read_meta(path: Path) -> dict:
    meta_path = Path(path) / META_FILE
    name = Path(path).name
    if not meta_path.is_file():
        hint = (f"; run: python -m runners.datasets prepare {name} --root {Path(path).parent}"
                if name in DATASET_NAMES else "")
        raise DatasetError(f"{meta_path}: missing (dataset not prepared or incomplete){hint}")
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{meta_path}: unreadable: {exc}") from exc
    if not isinstance(meta, dict) or meta.get("format_version") != FORMAT_VERSION:
        raise DatasetError(f"{meta_path}: format_version "
                           f"{meta.get('format_version') if isinstance(meta, dict) else None!r}"
                           f" is not the supported {FORMAT_VERSION}; prepare the dataset again")
    missing = [k for k in ("name", "num_nodes", "num_edges", "num_features", "num_classes",
                           "content_hash", "files") if k not in meta]
    if missing:
        raise DatasetError(f"{meta_path}: lacks {', '.join(missing)}")
    return meta


def _open_array(path: Path, info: dict, dtype: str) -> np.ndarray:
    """Check one .npy file against meta.json from its header, then memory-map it."""
    if not path.is_file():
        raise DatasetError(f"{path}: missing")
    size = path.stat().st_size
    try:
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, fortran, file_dtype = read_header(fh)
            offset = fh.tell()
    except (ValueError, OSError, EOFError) as exc:
        raise DatasetError(f"{path}: not a readable .npy file ({exc}); the file is damaged or "
                           f"truncated ({size} bytes, meta.json says {info.get('bytes')})") from exc
    if file_dtype.str != dtype or fortran:
        raise DatasetError(f"{path}: dtype {file_dtype.str}{' (Fortran order)' if fortran else ''}"
                           f", expected {dtype} in C order")
    if list(shape) != list(info["shape"]) or info["dtype"] != dtype:
        raise DatasetError(f"{path}: shape {list(shape)} dtype {file_dtype.str} differ from "
                           f"meta.json ({info['shape']} {info['dtype']})")
    expected = offset + int(np.prod(shape, dtype=np.int64)) * file_dtype.itemsize
    if size < expected or size < info["bytes"]:
        raise DatasetError(f"{path}: truncated: {size} bytes, expected {info['bytes']}")
    if size != expected or size != info["bytes"]:
        raise DatasetError(f"{path}: size {size} bytes differs from meta.json ({info['bytes']})")
    if expected == offset:  # numpy cannot memory-map an empty array
        return np.zeros(shape, dtype=file_dtype)
    return np.load(path, mmap_mode="r", allow_pickle=False)


def load(name_or_path: Union[str, Path], root=DEFAULT_ROOT, verify_hash: bool = False) -> Graph:
    """Open a prepared dataset.

    Always checks (fast, independent of the edge count): files present, sizes, dtypes and
    shapes against meta.json, shapes against each other, indptr monotone and ending at E,
    labels in range, split indices in range and disjoint. With verify_hash, also recomputes
    every file's sha256 and the content hash, and checks the adjacency itself (sources in
    range, sorted, no duplicates or self-loops, symmetric): this reads every byte.
    """
    path = resolve(name_or_path, root).absolute()  # absolute: a Graph pickles by path
    meta = read_meta(path)
    n, e, f = int(meta["num_nodes"]), int(meta["num_edges"]), int(meta["num_features"])
    c = int(meta["num_classes"])
    arrays = _open_arrays(path, meta, n, e, f)
    _check_arrays(path, arrays, n, e, c)
    if verify_hash:
        _verify_contents(path, meta, arrays)

    return Graph(name=str(meta["name"]), path=path, num_nodes=n, num_edges=e, num_features=f,
                 num_classes=c, content_hash=str(meta["content_hash"]), meta=meta, **arrays)


def _open_arrays(path: Path, meta: dict, n: int, e: int, f: int) -> dict:
    """Every array file, checked against meta.json and against the graph's size, memory-mapped."""
    expected_shapes = {"indptr": [n + 1], "indices": [e], "features": [n, f], "labels": [n]}
    arrays = {}
    for key, dtype in FILES:
        fname = f"{key}.npy"
        info = meta["files"].get(fname)
        if info is None:
            raise DatasetError(f"{path / META_FILE}: does not describe {fname}")
        arrays[key] = arr = _open_array(path / fname, info, dtype)
        want = expected_shapes.get(key)
        if want is not None and list(arr.shape) != want:
            what = {"indptr": f"{n} nodes (N+1 = {n + 1} entries)", "indices": f"{e} edges",
                    "features": f"{n} nodes x {f} features", "labels": f"{n} nodes"}[key]
            raise DatasetError(f"{path / fname}: shape {list(arr.shape)} does not match the "
                               f"graph: meta.json has {what}")
        if want is None and arr.ndim != 1:
            raise DatasetError(f"{path / fname}: must be 1-D, has shape {list(arr.shape)}")
    return arrays


def _check_arrays(path: Path, arrays: dict, n: int, e: int, c: int) -> None:
    """The checks of the arrays' values that cost no pass over the edges: indptr, labels, splits."""
    indptr = arrays["indptr"]
    if indptr[0] != 0 or indptr[-1] != e:
        raise DatasetError(f"{path / 'indptr.npy'}: must start at 0 and end at the edge count "
                           f"{e}; has {indptr[0]} .. {indptr[-1]}")
    if n and np.any(np.diff(indptr) < 0):
        raise DatasetError(f"{path / 'indptr.npy'}: not monotone (negative in-degree)")
    labels = arrays["labels"]
    if n and (labels.min() < 0 or labels.max() >= c):
        raise DatasetError(f"{path / 'labels.npy'}: labels must be in 0..{c - 1}, found "
                           f"{labels.min()} .. {labels.max()}")
    seen = np.zeros(n, dtype=bool)
    for key in SPLITS:
        idx = arrays[key]
        if len(idx) and (idx.min() < 0 or idx.max() >= n):
            raise DatasetError(f"{path / (key + '.npy')}: node ids must be in 0..{n - 1}, found "
                               f"{idx.min()} .. {idx.max()}")
        if len(idx) > 1 and not np.all(np.diff(idx) > 0):
            raise DatasetError(f"{path / (key + '.npy')}: must be sorted ascending without repeats")
        if seen[idx].any():
            raise DatasetError(f"{path / (key + '.npy')}: overlaps another split")
        seen[idx] = True


def _verify_contents(path: Path, meta: dict, arrays: dict) -> None:
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


# --------------------------------------------------------------------------------------
# Hash verification before a run, cached in <dataset>/verified.json
# --------------------------------------------------------------------------------------

VERIFIED_FILE = "verified.json"
# A file whose mtime is this recent is not cached: a later write within the same timestamp
# tick (1-2 s on some file systems) could leave its mtime unchanged ("racily clean").
_RACY_S = 2.0


def _stat_key(path: Path) -> dict:
    """What changes when a file's bytes may have changed. ctime cannot be set by users, so
    `touch -d` after an in-place write is still seen; a new inode means a replaced file."""
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns,
            "ino": st.st_ino}


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


def _column_chunks(indptr: np.ndarray, max_edges: int):
    """Column ranges [lo, hi) holding about max_edges edges each."""
    n = len(indptr) - 1
    lo = 0
    while lo < n:
        hi = int(np.searchsorted(indptr, indptr[lo] + max_edges, side="right")) - 1
        hi = min(max(hi, lo + 1), n)
        yield lo, hi
        lo = hi


def edge_homophily(indptr: np.ndarray, indices: np.ndarray, labels: np.ndarray) -> float:
    """Share of edges whose endpoints have the same label."""
    same = 0
    for lo, hi in _column_chunks(indptr, 1 << 24):
        dst_labels = np.repeat(labels[lo:hi], np.diff(indptr[lo:hi + 1]))
        same += int(np.count_nonzero(labels[indices[indptr[lo]:indptr[hi]]] == dst_labels))
    return same / max(len(indices), 1)


def _stats(arrays: dict) -> dict:
    deg = np.diff(arrays["indptr"])
    return {
        "in_degree": {"min": int(deg.min()), "median": float(np.median(deg)),
                      "mean": float(deg.mean()), "max": int(deg.max())},
        "isolated_nodes": int(np.count_nonzero(deg == 0)),
        "edge_homophily": round(edge_homophily(arrays["indptr"], arrays["indices"],
                                               arrays["labels"]), 6),
        "class_sizes": np.bincount(arrays["labels"]).tolist(),
        "split_sizes": {k: int(len(arrays[k])) for k in SPLITS},
    }


