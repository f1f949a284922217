"""Converters of raw files the user places (or downloads) into the canonical format:
Reddit (PyG/DGL raw files) and ogbn-products (OGB raw layout)."""

from __future__ import annotations

import logging
import os
import shutil
import zipfile
from pathlib import Path

import numpy as np

log = logging.getLogger("gnnscale.datasets")

from runners.datasets.format import DatasetError, check_finite  # noqa: E402
from runners.datasets.generators import csc_from_edges  # noqa: E402

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
    check_finite(data_path, features)

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
    check_finite(p["node-feat"], features)
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


