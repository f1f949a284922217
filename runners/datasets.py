"""The canonical on-disk graph format and the named datasets of the benchmark.

Every run of both frameworks reads the same directory `<root>/<name>/`, so PyG and DGL are
measured on byte-identical graphs, features, labels and splits. The directory holds
`meta.json` and seven `.npy` arrays (see `FILES` and docs/datasets.md):

    indptr.npy    int64 [N+1]  CSC: indptr[v]:indptr[v+1] slices `indices`
    indices.npy   int64 [E]    SOURCE nodes of the edges into each destination v
    features.npy  float32 [N, F]
    labels.npy    int64 [N]
    train_idx.npy, val_idx.npy, test_idx.npy   int64, sorted node ids

Within a column the sources are sorted ascending; there are no self-loops and no duplicate
edges, and the graph is symmetric (every source here is undirected).

Names: `tiny`, `small`, `reddit-shape` are generated (deterministic from a seed);
`reddit` and `ogbn-products` are converted from raw files the user places (or downloads).

API: `prepare(name, root, raw_dir, download) -> Path`, `load(name_or_path, root,
verify_hash) -> Graph`, `verify_files(name_or_path, root) -> dict` (the check a run makes
before launch: re-hashes only files changed since `<dataset>/verified.json`),
`DatasetError`. CLI: `python -m runners.datasets {prepare,verify,info,list}`. Only numpy is
needed (pandas for ogbn-products), so importing this module is cheap and framework-free.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import math
import os
import shutil
import sys
import time
import uuid
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

import numpy as np

log = logging.getLogger("gnnscale.datasets")

FORMAT_VERSION = 1
DEFAULT_ROOT = "results/datasets"

SYNTHETIC_NAMES = ("tiny", "small", "reddit-shape")
CONVERTED_NAMES = ("reddit", "ogbn-products")
DATASET_NAMES = SYNTHETIC_NAMES + CONVERTED_NAMES

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
# Synthetic datasets: a degree-corrected stochastic block model with Gaussian features.
# --------------------------------------------------------------------------------------

GENERATOR = "dcsbm-gaussian"
GENERATOR_VERSION = 1  # bump whenever the same parameters would produce different arrays


@dataclass(frozen=True)
class SyntheticSpec:
    """Parameters of a generated graph; all of them are recorded in meta.json.

    num_edges is the target number of DIRECTED edges after symmetrising and removing
    self-loops and duplicates (each undirected edge counts twice); the result is within
    about 0.1% of it. homophily is the probability that an edge is drawn inside the class
    of its first endpoint (other edges pick the second endpoint from the whole graph, so the
    measured edge homophily is a little higher). degree_sigma is the sigma of the lognormal
    node weights that make degrees skewed. feature_snr sets the class-centroid separation
    relative to the feature noise: it fixes how well features alone predict the class.
    """

    num_nodes: int
    num_edges: int
    num_features: int
    num_classes: int
    seed: int = 0
    homophily: float = 0.75
    degree_sigma: float = 0.8
    class_size_sigma: float = 0.5
    feature_snr: float = 1.0
    split: tuple = (0.65, 0.10, 0.25)  # train/val/test, as in Reddit
    chunk_pairs: int = 1 << 22  # edge pairs drawn per chunk: bounds memory, part of the stream

    def params(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["split"] = list(self.split)
        return d


# `small` is the default CPU sweep graph: a 3-layer model trains for an epoch in seconds
# on 2 cores. With fan-outs 10,10,10 a step samples most of a graph this size whatever its
# size, so an epoch costs ~ nodes^2: 20,000 nodes took ~20-40 s per PyG epoch here, 6,000 a
# few seconds, which keeps the 32-run default sweep near 10 minutes. `reddit-shape` has Reddit's node, feature, class and edge counts.
SYNTHETIC = {
    "tiny": SyntheticSpec(num_nodes=2_000, num_edges=20_000, num_features=32, num_classes=5,
                          feature_snr=0.9),
    "small": SyntheticSpec(num_nodes=6_000, num_edges=60_000, num_features=64,
                           num_classes=10, feature_snr=1.2),
    "reddit-shape": SyntheticSpec(num_nodes=232_965, num_edges=114_615_892, num_features=602,
                                  num_classes=41, feature_snr=1.6, degree_sigma=1.0),
}


class _Sampler:
    """Draws nodes with probability proportional to their weight, globally or in a class.

    Nodes are laid out class by class (`order`); one cumulative-weight array serves both
    kinds of draw, so each draw is a single vectorised searchsorted.
    """

    def __init__(self, labels: np.ndarray, theta: np.ndarray, num_classes: int):
        self.order = np.argsort(labels, kind="stable")
        self.cum = np.cumsum(theta[self.order])
        counts = np.bincount(labels, minlength=num_classes)
        self.end = np.cumsum(counts)
        self.start = self.end - counts
        self.lo = np.where(self.start > 0, self.cum[np.maximum(self.start - 1, 0)], 0.0)
        self.mass = self.cum[self.end - 1] - self.lo
        self.labels = labels

    def draw_global(self, rng, n: int) -> np.ndarray:
        pos = np.searchsorted(self.cum, rng.random(n) * self.cum[-1], side="right")
        return self.order[np.minimum(pos, len(self.order) - 1)]

    def draw_in_class(self, rng, classes: np.ndarray) -> np.ndarray:
        r = self.lo[classes] + rng.random(len(classes)) * self.mass[classes]
        pos = np.searchsorted(self.cum, r, side="right")
        # Float rounding at a class boundary must not leak into the neighbouring class.
        pos = np.clip(pos, self.start[classes], self.end[classes] - 1)
        return self.order[pos]

    def partners(self, rng, u: np.ndarray, homophily: float) -> np.ndarray:
        intra = rng.random(len(u)) < homophily
        v = np.empty_like(u)
        v[intra] = self.draw_in_class(rng, self.labels[u[intra]])
        v[~intra] = self.draw_global(rng, int((~intra).sum()))
        return v


def _pair_keys(u: np.ndarray, v: np.ndarray, n: int) -> np.ndarray:
    """Both directions of each pair as CSC sort keys dst * n + src, self-loops dropped."""
    keep = u != v
    u, v = u[keep], v[keep]
    return np.concatenate([v * n + u, u * n + v])


def _sorted_unique(keys: np.ndarray, runs: bool = False) -> np.ndarray:
    """Sort in place and drop repeats (np.unique would hold an extra copy). With `runs`, keys
    is a concatenation of sorted runs: timsort merges those in linear time; otherwise the
    default (vectorised) quicksort is much faster."""
    keys.sort(kind="stable" if runs else "quicksort")
    if len(keys) == 0:
        return keys
    keep = np.empty(len(keys), dtype=bool)
    keep[0] = True
    np.not_equal(keys[1:], keys[:-1], out=keep[1:])
    return keys[keep]


def _count_unique_sorted(keys: np.ndarray) -> int:
    return int(len(keys) > 0) + int(np.count_nonzero(keys[1:] != keys[:-1]))


def _csc_from_keys(keys: np.ndarray, n: int):
    """Sorted unique keys dst * n + src -> (indptr, indices)."""
    indptr = np.searchsorted(keys, np.arange(n + 1, dtype=np.int64) * n).astype(np.int64)
    indices = keys % n
    return indptr, indices


def generate(spec: SyntheticSpec) -> dict:
    """The seven arrays of a synthetic dataset, deterministic from `spec` (see SyntheticSpec).

    Each node gets a class; edges come from a degree-corrected stochastic block model
    (lognormal node weights, a `homophily` share of edges inside the class); features are a
    class centroid plus Gaussian noise, so features alone are mediocre predictors and
    averaging over neighbours (what a GNN does) is clearly better.
    """
    n, c, f = spec.num_nodes, spec.num_classes, spec.num_features
    if n < 2 or c < 1 or f < 1 or spec.num_edges < 0:
        raise DatasetError(f"synthetic spec {spec}: needs num_nodes >= 2, num_classes >= 1, "
                           "num_features >= 1, num_edges >= 0")
    # Independent streams per component: changing e.g. the feature code keeps the graph.
    s_labels, s_theta, s_first, s_edges, s_feat, s_split = np.random.SeedSequence(
        [spec.seed, GENERATOR_VERSION]).spawn(6)

    rng = np.random.default_rng(s_labels)
    class_p = np.exp(spec.class_size_sigma * rng.standard_normal(c))
    class_p /= class_p.sum()
    counts = rng.multinomial(n - c, class_p) + 1  # every class has a node
    labels = rng.permutation(np.repeat(np.arange(c, dtype=np.int64), counts))

    theta = np.exp(spec.degree_sigma * np.random.default_rng(s_theta).standard_normal(n))
    sampler = _Sampler(labels, theta, c)

    # Every node proposes one edge first, so no node is isolated (DGL's GATConv, for one,
    # rejects nodes without in-edges). Redraw self-partners a few times; a class of one
    # node falls back to a global draw, and finally to the next node id.
    rng = np.random.default_rng(s_first)
    u0 = np.arange(n, dtype=np.int64)
    v0 = sampler.partners(rng, u0, spec.homophily)
    for attempt in range(12):
        bad = np.flatnonzero(v0 == u0)
        if len(bad) == 0:
            break
        v0[bad] = (sampler.partners(rng, u0[bad], spec.homophily) if attempt < 8
                   else sampler.draw_global(rng, len(bad)))
    bad = v0 == u0
    v0[bad] = (u0[bad] + 1) % n
    keys = _sorted_unique(_pair_keys(u0, v0, n))

    # Then weighted pairs until the target edge count is reached. Duplicates are dropped, so
    # top up in rounds sized by the observed rate of new edges (deterministic: each round's
    # size follows from the previous arrays, each chunk has its own spawned stream).
    target = spec.num_edges
    pairs = max(target // 2 - n, 0)
    for _ in range(8):
        if len(keys) >= target or pairs <= 0:
            break
        before = len(keys)
        new = np.empty(2 * pairs, dtype=np.int64)
        filled = 0
        for start in range(0, pairs, spec.chunk_pairs):
            rng = np.random.default_rng(s_edges.spawn(1)[0])  # next child stream
            m = min(spec.chunk_pairs, pairs - start)
            u = sampler.draw_global(rng, m)
            k = _pair_keys(u, sampler.partners(rng, u, spec.homophily), n)
            new[filled:filled + len(k)] = k
            filled += len(k)
        new = _sorted_unique(new[:filled])
        keys = _sorted_unique(np.concatenate([keys, new]), runs=True)
        del new
        gained = len(keys) - before
        log.info("  drew %d pairs: %d directed edges now (target %d)", pairs, len(keys), target)
        rate = max(gained / (2 * pairs), 1e-3)
        pairs = math.ceil((target - len(keys)) / (2 * rate))
    indptr, indices = _csc_from_keys(keys, n)
    del keys

    # Features: centroid + noise, scaled to unit variance per dimension. With centroids
    # ~N(0, I), two classes are 2 * feature_snr noise standard deviations apart along the
    # line joining them (a z-score of feature_snr for the nearest-centroid decision).
    rng = np.random.default_rng(s_feat)
    centroids = rng.standard_normal((c, f)).astype(np.float32)
    noise = math.sqrt(2 * f) / (2 * spec.feature_snr)
    scale = np.float32(1.0 / math.sqrt(1.0 + noise * noise))
    features = np.empty((n, f), dtype=np.float32)
    rows = max(1, (16 << 20) // (4 * f))  # ~16 MB of noise at a time
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        block = rng.standard_normal((stop - start, f), dtype=np.float32)
        block *= np.float32(noise)
        block += centroids[labels[start:stop]]
        block *= scale
        features[start:stop] = block

    rng = np.random.default_rng(s_split)
    perm = rng.permutation(n)
    n_train = int(round(spec.split[0] * n))
    n_val = int(round(spec.split[1] * n))
    return {
        "indptr": indptr, "indices": indices, "features": features, "labels": labels,
        "train_idx": np.sort(perm[:n_train]), "val_idx": np.sort(perm[n_train:n_train + n_val]),
        "test_idx": np.sort(perm[n_train + n_val:]),
    }


# --------------------------------------------------------------------------------------
# Edge lists -> canonical CSC (used by the converters)
# --------------------------------------------------------------------------------------

def csc_from_edges(src, dst, num_nodes: int, symmetrize: bool = True):
    """Edge list -> (indptr, indices, stats): CSC sorted by (dst, src), self-loops and
    duplicates removed, reverse edges added when `symmetrize`. stats counts what changed.

    src and dst may be any integer arrays (int32, strided views); the only large allocation
    is one int64 key array of 2E (E without `symmetrize`), filled in place.
    """
    n, e = int(num_nodes), len(src)
    halves = 2 if symmetrize else 1
    keys = np.empty(halves * e, dtype=np.int64)
    fwd, rev = keys[:e], keys[e:]
    # key = dst * n + src, computed in int64 even for int32 inputs (dtype= picks the loop).
    np.multiply(dst, n, out=fwd, dtype=np.int64)
    np.add(fwd, src, out=fwd, dtype=np.int64)
    if symmetrize:
        np.multiply(src, n, out=rev, dtype=np.int64)
        np.add(rev, dst, out=rev, dtype=np.int64)
    loops = np.asarray(src) == np.asarray(dst)
    n_loops = int(np.count_nonzero(loops))
    if n_loops:  # a sentinel sorts last and is cut off below: no compacting copy
        fwd[loops] = np.iinfo(np.int64).max
        if symmetrize:
            rev[loops] = np.iinfo(np.int64).max
    del loops
    fwd.sort()
    n_fwd = _count_unique_sorted(fwd) - (n_loops > 0)
    if symmetrize:
        rev.sort()
    keys = _sorted_unique(keys, runs=True)
    if n_loops:
        keys = keys[:-1]
    indptr, indices = _csc_from_keys(keys, n)
    del keys
    stats = {"raw_edges": e, "self_loops_removed": n_loops,
             "duplicates_removed": int(e - n_loops - n_fwd),
             "reverse_edges_added": int(len(indices) - n_fwd)}
    return indptr, indices, stats


# --------------------------------------------------------------------------------------
# Converters: Reddit (PyG/DGL raw files) and ogbn-products (OGB raw layout)
# --------------------------------------------------------------------------------------

RAW_SOURCES = {
    "reddit": {
        "url": "https://data.dgl.ai/dataset/reddit.zip",
        "files": ("reddit_data.npz", "reddit_graph.npz"),
        "origin": "GraphSAGE Reddit as distributed by DGL and PyG (torch_geometric.datasets.Reddit)",
    },
    "ogbn-products": {
        "url": "https://snap.stanford.edu/ogb/data/nodeproppred/products.zip",
        "files": ("raw/edge.csv.gz", "raw/node-feat.csv.gz", "raw/node-label.csv.gz",
                  "raw/num-node-list.csv.gz", "raw/num-edge-list.csv.gz",
                  "split/sales_ranking/train.csv.gz", "split/sales_ranking/valid.csv.gz",
                  "split/sales_ranking/test.csv.gz"),
        "origin": "OGB ogbn-products raw files (sales_ranking split; edges made undirected "
                  "as OGB's add_inverse_edge does)",
    },
}


def default_raw_dir(name: str, root) -> Path:
    return Path(root) / "raw" / name


def _require_raw(name: str, raw_dir: Path, download: bool) -> None:
    src = RAW_SOURCES[name]
    missing = [f for f in src["files"] if not (raw_dir / f).is_file()]
    if missing and download:
        download_raw(name, raw_dir)
        missing = [f for f in src["files"] if not (raw_dir / f).is_file()]
    if missing:
        lines = "\n".join(f"  {(raw_dir / f).resolve()}" for f in missing)
        raise DatasetError(
            f"{raw_dir.resolve()}: dataset {name!r} is converted from raw files; missing:\n"
            f"{lines}\n"
            f"They come from {src['url']} (unzip it so that the files above exist). Or rerun "
            f"with --download (python -m runners.datasets prepare {name} --download) to fetch "
            f"and unpack it there.")


def download_raw(name: str, raw_dir: Path) -> None:
    """Fetch the raw archive of `name` with urllib and unpack it into raw_dir."""
    import urllib.request

    url = RAW_SOURCES[name]["url"]
    raw_dir = Path(raw_dir)
    raw_dir.mkdir(parents=True, exist_ok=True)
    archive = raw_dir / Path(url).name
    part = archive.with_suffix(archive.suffix + ".part")
    log.info("downloading %s -> %s", url, archive)
    try:
        urllib.request.urlretrieve(url, part)
    except OSError as exc:
        raise DatasetError(f"{archive}: download of {url} failed: {exc}") from exc
    os.replace(part, archive)  # a complete archive only
    try:
        _unpack(archive, raw_dir)
    except zipfile.BadZipFile as exc:
        raise DatasetError(f"{archive}: not a valid zip archive ({exc}); delete it and "
                           "download again") from exc
    archive.unlink()


def _unpack(archive: Path, raw_dir: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        names = [m for m in zf.namelist()
                 if not m.endswith("/") and not m.startswith("__MACOSX/")]
        # OGB zips wrap everything in one folder (products/); place its contents in raw_dir.
        tops = {m.split("/", 1)[0] for m in names}
        strip = len(tops) == 1 and all("/" in m for m in names)
        base = raw_dir.resolve()
        for member in names:
            rel = member.split("/", 1)[1] if strip else member
            out = (raw_dir / rel).resolve()
            if base not in out.parents:
                raise DatasetError(f"{archive}: unsafe path {member!r} in archive")
            out.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(member) as fin, open(out, "wb") as fout:
                shutil.copyfileobj(fin, fout, 16 << 20)


def _open_npz(path: Path):
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise DatasetError(f"{path}: cannot read as an .npz archive: {exc}") from exc


def _npz_member(npz, key: str, path: Path) -> np.ndarray:
    if key not in npz.files:
        raise DatasetError(f"{path}: has no array {key!r} (has {', '.join(npz.files)})")
    return npz[key]


def convert_reddit(raw_dir: Path) -> tuple:
    """Reddit raw files -> (arrays, stats). node_types 1/2/3 = train/val/test."""
    data_path, graph_path = raw_dir / "reddit_data.npz", raw_dir / "reddit_graph.npz"
    data, graph = _open_npz(data_path), _open_npz(graph_path)
    features = np.ascontiguousarray(_npz_member(data, "feature", data_path), dtype=np.float32)
    labels = _npz_member(data, "label", data_path).astype(np.int64).reshape(-1)
    node_types = _npz_member(data, "node_types", data_path).reshape(-1)
    n = len(labels)
    _check_labels(data_path, labels)
    if features.ndim != 2 or len(features) != n or len(node_types) != n:
        raise DatasetError(f"{data_path}: shape mismatch: feature {features.shape}, label "
                           f"({n},), node_types ({len(node_types)},) must have the same rows")

    fmt = _npz_member(graph, "format", graph_path).item()
    fmt = fmt.decode() if isinstance(fmt, bytes) else str(fmt)
    shape = tuple(int(s) for s in _npz_member(graph, "shape", graph_path))
    if shape != (n, n):
        raise DatasetError(f"{graph_path}: adjacency is {shape[0]}x{shape[1]} but "
                           f"{data_path.name} has {n} nodes")
    if fmt == "coo":
        src = _npz_member(graph, "row", graph_path)
        dst = _npz_member(graph, "col", graph_path)
    elif fmt in ("csr", "csc"):
        ptr = _npz_member(graph, "indptr", graph_path).astype(np.int64)
        idx = _npz_member(graph, "indices", graph_path).astype(np.int64)
        major = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr))
        src, dst = (major, idx) if fmt == "csr" else (idx, major)
    else:
        raise DatasetError(f"{graph_path}: unsupported sparse format {fmt!r} (coo, csr, csc)")
    _check_node_ids(graph_path, "edge endpoints", src, n)
    _check_node_ids(graph_path, "edge endpoints", dst, n)
    indptr, indices, stats = csc_from_edges(src, dst, n, symmetrize=True)
    del src, dst
    splits = {k: np.flatnonzero(node_types == t).astype(np.int64)
              for k, t in (("train_idx", 1), ("val_idx", 2), ("test_idx", 3))}
    arrays = {"indptr": indptr, "indices": indices, "features": features, "labels": labels,
              **splits}
    return arrays, stats


def _read_csv(path: Path, dtype=None) -> np.ndarray:
    import pandas as pd

    try:
        return pd.read_csv(path, compression="gzip", header=None, dtype=dtype).to_numpy()
    except Exception as exc:  # pandas raises many types for bad files
        raise DatasetError(f"{path}: cannot read as a gzipped CSV: {exc}") from exc


def convert_ogbn_products(raw_dir: Path) -> tuple:
    """OGB raw layout (raw/*.csv.gz, split/sales_ranking/*.csv.gz) -> (arrays, stats)."""
    p = {"edge": raw_dir / "raw/edge.csv.gz", "node-feat": raw_dir / "raw/node-feat.csv.gz",
         "node-label": raw_dir / "raw/node-label.csv.gz",
         "num-node-list": raw_dir / "raw/num-node-list.csv.gz",
         "num-edge-list": raw_dir / "raw/num-edge-list.csv.gz"}
    for split in ("train", "valid", "test"):
        p[f"{split}_split"] = raw_dir / f"split/sales_ranking/{split}.csv.gz"
    n = int(_read_csv(p["num-node-list"], np.int64).sum())
    e = int(_read_csv(p["num-edge-list"], np.int64).sum())
    features = np.ascontiguousarray(_read_csv(p["node-feat"], np.float32), dtype=np.float32)
    if features.shape[0] != n:
        raise DatasetError(f"{p['node-feat']}: has {features.shape[0]} rows but "
                           f"{p['num-node-list'].name} says {n} nodes")
    raw_labels = _read_csv(p["node-label"]).reshape(-1)
    if len(raw_labels) != n:
        raise DatasetError(f"{p['node-label']}: has {len(raw_labels)} rows but "
                           f"{p['num-node-list'].name} says {n} nodes")
    if raw_labels.dtype.kind == "f" and np.isnan(raw_labels).any():
        raise DatasetError(f"{p['node-label']}: has missing (NaN) labels; every node needs one")
    labels = raw_labels.astype(np.int64)
    _check_labels(p["node-label"], labels)
    edges = _read_csv(p["edge"], np.int64)
    if edges.ndim != 2 or edges.shape[1] != 2 or len(edges) != e:
        raise DatasetError(f"{p['edge']}: expected {e} rows of 2 columns "
                           f"({p['num-edge-list'].name}), found shape {edges.shape}")
    src, dst = edges[:, 0], edges[:, 1]  # strided views: csc_from_edges copies nothing
    _check_node_ids(p["edge"], "edge endpoints", src, n)
    _check_node_ids(p["edge"], "edge endpoints", dst, n)
    indptr, indices, stats = csc_from_edges(src, dst, n, symmetrize=True)
    del src, dst, edges
    splits = {}
    for key, split in (("train_idx", "train"), ("val_idx", "valid"), ("test_idx", "test")):
        idx = _read_csv(p[f"{split}_split"], np.int64).reshape(-1)
        _check_node_ids(p[f"{split}_split"], "node ids", idx, n)
        splits[key] = np.sort(idx)
    arrays = {"indptr": indptr, "indices": indices, "features": features, "labels": labels,
              **splits}
    return arrays, stats


CONVERTERS = {"reddit": convert_reddit, "ogbn-products": convert_ogbn_products}


def _check_labels(path: Path, labels: np.ndarray) -> None:
    if len(labels) and labels.min() < 0:
        raise DatasetError(f"{path}: labels must be class numbers 0, 1, ...; found {labels.min()}")


def _check_node_ids(path: Path, what: str, ids: np.ndarray, n: int) -> None:
    if len(ids) and (ids.min() < 0 or ids.max() >= n):
        raise DatasetError(f"{path}: {what} out of range: min {ids.min()}, max {ids.max()}, "
                           f"but there are {n} nodes (0..{n - 1})")


# --------------------------------------------------------------------------------------
# Hashing, writing, reading
# --------------------------------------------------------------------------------------

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


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_dataset(root, name: str, arrays: dict, source: dict, stats: dict,
                  num_classes: Optional[int] = None) -> Path:
    """Write `<root>/<name>/` atomically: everything goes to a temporary sibling directory
    that is renamed into place only when complete, so a killed writer leaves no dataset
    that looks valid. Returns the final path."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / name
    tmp = root / f".{name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
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
        n = len(arrays["indptr"]) - 1
        labels = np.asarray(arrays["labels"])
        meta = {
            "format_version": FORMAT_VERSION,
            "name": name,
            "num_nodes": n,
            "num_edges": int(len(arrays["indices"])),
            "num_features": int(np.shape(arrays["features"])[1]),
            "num_classes": int(num_classes if num_classes is not None
                               else (labels.max() + 1 if len(labels) else 0)),
            "content_hash": combine_hash(files),
            "adjacency": {"layout": "csc", "sorted": True, "symmetric": True,
                          "self_loops": False, "duplicates": False},
            "source": source,
            "stats": stats,
            "files": files,
            "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "tool": "gnnscale runners.datasets",
        }
        with open(tmp / META_FILE, "w") as fh:
            fh.write(json.dumps(meta, indent=2) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        _fsync_dir(tmp)
        old = None
        if final.exists():
            old = root / f".{name}.old-{uuid.uuid4().hex[:8]}"
            os.rename(final, old)
        os.rename(tmp, final)
        _fsync_dir(root)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


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
    """A dataset name (a str in DATASET_NAMES) -> `<root>/<name>`; a Path, or a str that
    is not a name, is taken as the dataset directory itself."""
    if isinstance(name_or_path, str) and name_or_path in DATASET_NAMES:
        return Path(root) / str(name_or_path)
    path = Path(name_or_path)
    if path.is_dir():
        return path
    raise DatasetError(f"{(Path(root) / path).absolute()}: unknown dataset {str(name_or_path)!r};"
                       f" allowed names: {', '.join(DATASET_NAMES)} (or the directory of a "
                       "prepared dataset)")


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

    if verify_hash:
        _verify_contents(path, meta, arrays)

    return Graph(name=str(meta["name"]), path=path, num_nodes=n, num_edges=e, num_features=f,
                 num_classes=c, content_hash=str(meta["content_hash"]), meta=meta, **arrays)


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
        if (isinstance(prev, dict) and prev.get("sha256") == want
                and {k: prev.get(k) for k in before} == before):
            record[fname] = prev
            cached.append(fname)
            continue
        digest = array_sha256(arrays[key])
        hashed.append(fname)
        if digest != want:
            raise DatasetError(f"{path / fname}: hash mismatch: contents changed since they were "
                               f"written (sha256 {digest[:16]}..., meta.json {str(want)[:16]}...); "
                               f"prepare the dataset again (prepare --force)")
        after = _stat_key(path / fname)
        if after != before:
            raise DatasetError(f"{path / fname}: changed while it was being verified; "
                               "is another process writing the dataset?")
        if time.time_ns() - before["mtime_ns"] >= _RACY_S * 1e9:
            record[fname] = {**before, "sha256": digest}
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


# --------------------------------------------------------------------------------------
# prepare()
# --------------------------------------------------------------------------------------

@contextlib.contextmanager
def _lock(root: Path, name: str):
    """Serialise concurrent prepare() calls for one dataset (e.g. parallel Snakemake jobs)."""
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


def _expected_source(name: str) -> dict:
    if name in SYNTHETIC:
        return {"kind": "synthetic", "generator": GENERATOR, "generator_version": GENERATOR_VERSION,
                "params": SYNTHETIC[name].params()}
    return {"kind": "converted", "converter": name, "url": RAW_SOURCES[name]["url"]}


def _is_current(path: Path, name: str) -> bool:
    """A valid dataset made by the current generator/converter exists at path."""
    if not path.exists():
        return False
    try:
        graph = load(path)
    except DatasetError as exc:
        log.warning("existing %s is not usable, preparing it again: %s", path, exc)
        return False
    src, want = graph.meta.get("source", {}), _expected_source(name)
    if any(src.get(k) != v for k, v in want.items()):
        log.warning("existing %s was made with other settings (%s), preparing it again",
                    path, {k: src.get(k) for k in want})
        return False
    return True


def prepare(name: str, root=DEFAULT_ROOT, raw_dir=None, download: bool = False,
            force: bool = False) -> Path:
    """Make `<root>/<name>/` if it is missing, invalid or stale; idempotent. Returns its path.

    Synthetic names are generated; `reddit` and `ogbn-products` are converted from raw files
    in raw_dir (default `<root>/raw/<name>/`), downloaded first when `download` is set.
    """
    if name not in DATASET_NAMES:
        raise DatasetError(f"{(Path(root) / name).absolute()}: unknown dataset {name!r}; "
                           f"allowed names: {', '.join(DATASET_NAMES)}")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / name
    with _lock(root, name):
        # Leftovers of killed writers are never valid datasets; remove them.
        for stale in list(root.glob(f".{name}.tmp-*")) + list(root.glob(f".{name}.old-*")):
            shutil.rmtree(stale, ignore_errors=True)
        if not force and _is_current(final, name):
            return final
        t0 = time.perf_counter()
        source = _expected_source(name)
        num_classes = None
        if name in SYNTHETIC:
            log.info("generating %s ...", name)
            arrays = generate(SYNTHETIC[name])
            num_classes = SYNTHETIC[name].num_classes
            extra = {}
        else:
            raw = Path(raw_dir) if raw_dir is not None else default_raw_dir(name, root)
            _require_raw(name, raw, download)
            log.info("converting %s from %s ...", name, raw)
            arrays, extra = CONVERTERS[name](raw)
            source["origin"] = RAW_SOURCES[name]["origin"]
            source["raw_files"] = {f: (raw / f).stat().st_size for f in RAW_SOURCES[name]["files"]}
        stats = {**extra, **_stats(arrays), "build_seconds": round(time.perf_counter() - t0, 2)}
        path = write_dataset(root, name, arrays, source, stats, num_classes=num_classes)
        del arrays
        load(path)  # what was written passes the checks every reader makes
        log.info("wrote %s in %.1f s", path, time.perf_counter() - t0)
    return path


# --------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------

def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m runners.datasets", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pp = sub.add_parser("prepare", help="generate or convert a dataset (idempotent); "
                                        "prints its path and content hash")
    pp.add_argument("name", help=", ".join(DATASET_NAMES))
    pp.add_argument("--root", default=DEFAULT_ROOT)
    pp.add_argument("--raw-dir", default=None, help="raw files of reddit / ogbn-products "
                                                    "(default ROOT/raw/NAME)")
    pp.add_argument("--download", action="store_true", help="fetch missing raw files")
    pp.add_argument("--force", action="store_true", help="rebuild even if a valid copy exists")
    vp = sub.add_parser("verify", help="recompute the hashes and check the adjacency")
    vp.add_argument("name", help="dataset name or directory")
    vp.add_argument("--root", default=DEFAULT_ROOT)
    vp.add_argument("--files", action="store_true",
                    help="only the file hashes, re-hashing only files changed since the last "
                         "verification (what a run checks before launch)")
    vp.add_argument("--no-cache", action="store_true", help="with --files: re-hash every file")
    ip = sub.add_parser("info", help="print meta.json of a prepared dataset")
    ip.add_argument("name", help="dataset name or directory")
    ip.add_argument("--root", default=DEFAULT_ROOT)
    sub.add_parser("list", help="list the dataset names")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    try:
        if args.cmd == "prepare":
            path = prepare(args.name, args.root, args.raw_dir, args.download, args.force)
            print(f"{path} {read_meta(path)['content_hash']}")
        elif args.cmd == "verify" and args.files:
            done = verify_files(args.name, args.root, use_cache=not args.no_cache)
            log.info("hashed %d file(s), %d unchanged since the last verification, in %.3f s",
                     len(done["hashed"]), len(done["cached"]), done["seconds"])
            print(f"ok {resolve(args.name, args.root)} {done['content_hash']}")
        elif args.cmd == "verify":
            t0 = time.perf_counter()
            graph = load(args.name, args.root, verify_hash=True)
            log.info("verified in %.1f s", time.perf_counter() - t0)
            print(f"ok {graph.path} {graph.content_hash}")
        elif args.cmd == "info":
            print(json.dumps(read_meta(resolve(args.name, args.root)), indent=2))
        else:
            for name in DATASET_NAMES:
                kind = "synthetic" if name in SYNTHETIC else f"converted from {RAW_SOURCES[name]['url']}"
                print(f"{name}\t{kind}")
    except DatasetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
