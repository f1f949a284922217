"""Tests of the canonical dataset format, the synthetic graphs, the converters and the
framework conversions (runners/datasets/, runners/adapters/{pyg,dgl}_data.py)."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from runners import datasets as D

REPO = Path(__file__).resolve().parent.parent


# ----------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """tiny and small prepared once for the module; timings printed (not asserted)."""
    root = tmp_path_factory.mktemp("datasets")
    for name in ("tiny", "small"):
        t0 = time.perf_counter()
        D.prepare(name, root)
        print(f"\n{name}: prepared in {time.perf_counter() - t0:.2f} s")
    return root


@pytest.fixture
def tiny_copy(built, tmp_path):
    """A private copy of tiny that a test may damage."""
    root = tmp_path / "root"
    shutil.copytree(built / "tiny", root / "tiny")
    return root, root / "tiny"


def error_of(fn, *args, **kwargs) -> str:
    with pytest.raises(D.DatasetError) as info:
        fn(*args, **kwargs)
    assert isinstance(info.value, ValueError)
    return str(info.value)


# ----------------------------------------------------------------------------- format

def test_same_hash_twice(built, tmp_path):
    again = D.prepare("tiny", tmp_path)
    assert D.load(again).content_hash == D.load("tiny", built).content_hash
    a, b = D.generate(D.SYNTHETIC["small"]), D.generate(D.SYNTHETIC["small"])
    for key, _ in D.FILES:
        assert np.array_equal(a[key], b[key]), key


def test_different_seed_different_graph():
    import dataclasses
    spec = dataclasses.replace(D.SYNTHETIC["tiny"], seed=1)
    a, b = D.generate(D.SYNTHETIC["tiny"]), D.generate(spec)
    assert not np.array_equal(a["indices"][:100], b["indices"][:100])


@pytest.mark.parametrize("name", ["tiny", "small"])
def test_layout_and_invariants(built, name):
    g = D.load(name, built, verify_hash=True)  # also checks symmetry, order, no loops
    spec = D.SYNTHETIC[name]
    meta = json.loads((built / name / "meta.json").read_text())
    assert meta["format_version"] == D.FORMAT_VERSION and meta["name"] == name
    assert meta["source"]["params"] == spec.params()
    assert sorted(meta["files"]) == sorted(f"{k}.npy" for k, _ in D.FILES)
    for key, dtype in D.FILES:
        arr = getattr(g, key)
        assert isinstance(arr, np.memmap) and not arr.flags.writeable, key
        assert arr.dtype.str == dtype
        info = meta["files"][f"{key}.npy"]
        assert info["shape"] == list(arr.shape)
        assert info["bytes"] == (built / name / f"{key}.npy").stat().st_size
    assert (g.num_nodes, g.num_features, g.num_classes) == (
        spec.num_nodes, spec.num_features, spec.num_classes)
    assert abs(g.num_edges - spec.num_edges) <= 0.001 * spec.num_edges
    assert g.indptr.shape == (g.num_nodes + 1,) and g.indptr[-1] == g.num_edges
    assert g.features.shape == (g.num_nodes, g.num_features)
    deg = g.in_degrees()
    assert deg.min() >= 1, "no isolated nodes"
    assert deg.max() > 5 * np.median(deg), "degrees should be skewed"
    assert set(np.unique(g.labels)) == set(range(g.num_classes))
    splits = np.concatenate([g.train_idx, g.val_idx, g.test_idx])
    assert np.array_equal(np.sort(splits), np.arange(g.num_nodes))
    assert len(g.train_idx) == round(0.65 * g.num_nodes)
    assert 0.7 < meta["stats"]["edge_homophily"] < 0.9
    assert g.describe()["content_hash"] == g.content_hash


def test_prepare_is_idempotent_and_regenerates_stale(built, tmp_path):
    root = tmp_path
    path = D.prepare("tiny", root)
    meta = path / "meta.json"
    stamp = meta.stat().st_mtime_ns
    assert D.prepare("tiny", root) == path and meta.stat().st_mtime_ns == stamp
    # Made with other generator settings: prepared again.
    m = json.loads(meta.read_text())
    m["source"]["params"]["seed"] = 99
    meta.write_text(json.dumps(m))
    D.prepare("tiny", root)
    assert json.loads(meta.read_text())["source"]["params"]["seed"] == 0
    # Damaged: prepared again.
    (path / "labels.npy").unlink()
    D.prepare("tiny", root)
    assert D.load("tiny", root).content_hash == D.load("tiny", built).content_hash


def test_killed_writer_leaves_no_valid_dataset(tmp_path, monkeypatch):
    real_save = np.save
    calls = []

    def dying_save(fh, arr, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt("killed")
        real_save(fh, arr, **kw)

    monkeypatch.setattr(D.np, "save", dying_save)
    with pytest.raises(KeyboardInterrupt):
        D.prepare("tiny", tmp_path)
    monkeypatch.setattr(D.np, "save", real_save)
    assert not (tmp_path / "tiny").exists()
    assert not list(tmp_path.glob(".tiny.tmp-*"))
    # A SIGKILLed writer cannot clean up: its temporary directory is ignored and removed.
    stale = tmp_path / ".tiny.tmp-1-deadbeef"
    stale.mkdir()
    (stale / "indptr.npy").write_bytes(b"partial")
    assert "meta.json: missing" in error_of(D.load, "tiny", tmp_path)
    D.prepare("tiny", tmp_path)
    assert not stale.exists()
    D.load("tiny", tmp_path, verify_hash=True)


def test_empty_target_directory_is_replaced(tmp_path):
    # Snakemake creates an output's parent directory before the job runs.
    (tmp_path / "tiny").mkdir()
    assert D.prepare("tiny", tmp_path) == tmp_path / "tiny"
    assert (tmp_path / "tiny" / "meta.json").exists()
    assert D.load("tiny", tmp_path, verify_hash=True).content_hash == D.read_meta(tmp_path / "tiny")["content_hash"]


def test_graph_pickles_by_path(built):
    g = D.load("tiny", built)
    blob = pickle.dumps(g)
    assert len(blob) < 10_000  # the arrays are not in the pickle
    h = pickle.loads(blob)
    assert isinstance(h.features, np.memmap) and h.content_hash == g.content_hash
    assert np.array_equal(h.indices, g.indices)


# ----------------------------------------------------------------------------- community

def _nearest_centroid_accuracy(x, g) -> float:
    y, tr, te = np.asarray(g.labels), g.train_idx, g.test_idx
    centroids = np.stack([x[tr][y[tr] == k].mean(0) for k in range(g.num_classes)])
    d = ((x[te][:, None, :] - centroids[None]) ** 2).sum(-1)
    return float((d.argmin(1) == y[te]).mean())


def _self_and_neighbour_mean(g) -> np.ndarray:
    x = np.asarray(g.features, dtype=np.float64)
    deg = g.in_degrees()
    sums = np.add.reduceat(x[g.indices], g.indptr[:-1], axis=0)  # every node has an edge
    return (x + sums) / (1 + deg)[:, None]


@pytest.mark.parametrize("name", ["tiny", "small"])
def test_neighbourhood_beats_features_alone(built, name):
    g = D.load(name, built)
    feat = _nearest_centroid_accuracy(np.asarray(g.features), g)
    agg = _nearest_centroid_accuracy(_self_and_neighbour_mean(g), g)
    print(f"\n{name}: nearest centroid on features {feat:.3f}, on self+neighbour mean {agg:.3f}")
    assert 1.0 / g.num_classes + 0.1 < feat < 0.75, "features alone: informative but mediocre"
    assert agg > feat + 0.15, "neighbourhood aggregation must help clearly"


@pytest.mark.e2e  # a real run
def test_logistic_regression_features_vs_aggregated(built):
    torch = pytest.importorskip("torch")
    g = D.load("tiny", built)
    torch.manual_seed(0)

    def fit(x):
        x = torch.tensor(np.array(x), dtype=torch.float32)
        y = torch.tensor(np.array(g.labels))
        tr, te = torch.tensor(np.array(g.train_idx)), torch.tensor(np.array(g.test_idx))
        lin = torch.nn.Linear(x.shape[1], g.num_classes)
        opt = torch.optim.Adam(lin.parameters(), lr=0.05)
        for _ in range(150):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(lin(x[tr]), y[tr]).backward()
            opt.step()
        return (lin(x[te]).argmax(1) == y[te]).float().mean().item()

    feat = fit(g.features)
    agg = fit(np.hstack([g.features, _self_and_neighbour_mean(g)]))
    print(f"\ntiny logistic regression: features {feat:.3f}, features+aggregated {agg:.3f}")
    assert agg > feat + 0.1


# ----------------------------------------------------------------------------- bad input

def test_unknown_name(tmp_path):
    for fn in (D.load, D.prepare):
        msg = error_of(fn, "nope", tmp_path)
        assert "nope" in msg and all(n in msg for n in D.DATASET_NAMES)


def test_not_prepared(tmp_path):
    msg = error_of(D.load, "small", tmp_path)
    assert str(tmp_path.absolute() / "small" / "meta.json") in msg and "prepare small" in msg


def test_missing_file(tiny_copy):
    root, path = tiny_copy
    (path / "labels.npy").unlink()
    msg = error_of(D.load, "tiny", root)
    assert str(path / "labels.npy") in msg and "missing" in msg


def test_truncated_file(tiny_copy):
    root, path = tiny_copy
    f = path / "features.npy"
    with open(f, "r+b") as fh:
        fh.truncate(f.stat().st_size - 100)
    msg = error_of(D.load, "tiny", root)
    assert str(f) in msg and "truncated" in msg
    with open(f, "r+b") as fh:  # cut inside the header
        fh.truncate(20)
    assert str(f) in error_of(D.load, "tiny", root)


def test_hash_mismatch(tiny_copy):
    root, path = tiny_copy
    f = path / "indices.npy"
    with open(f, "r+b") as fh:  # same size, different contents
        fh.seek(-3, os.SEEK_END)
        byte = fh.read(1)
        fh.seek(-3, os.SEEK_END)
        fh.write(bytes([byte[0] ^ 0xFF]))
    D.load("tiny", root)  # the fast checks cannot see it
    msg = error_of(D.load, "tiny", root, verify_hash=True)
    assert str(f) in msg and "hash mismatch" in msg


def _flip_in_place(f: Path) -> None:
    """Overwrite one byte near the end of `f` with a different value: same size, new bytes."""
    with open(f, "r+b") as fh:
        fh.seek(-3, os.SEEK_END)
        byte = fh.read(1)
        fh.seek(-3, os.SEEK_END)
        fh.write(bytes([byte[0] ^ 0xFF]))


def _age(path: Path) -> None:
    """Give every file of the dataset an mtime an hour ago, as a dataset prepared earlier has
    (a file modified in the last 2 s is deliberately never trusted from the record)."""
    old = time.time_ns() - 3600 * 10**9
    for f in path.iterdir():
        os.utime(f, ns=(old, old))


def test_verify_files_rehashes_only_changed_files(tiny_copy):
    root, path = tiny_copy
    (path / D.VERIFIED_FILE).unlink(missing_ok=True)
    _age(path)
    first = D.verify_files("tiny", root)
    assert sorted(first["hashed"]) == sorted(f"{k}.npy" for k, _ in D.FILES) and first["cached"] == []
    assert first["content_hash"] == D.load("tiny", root).content_hash
    record = json.loads((path / D.VERIFIED_FILE).read_text())
    assert set(record["files"]) == set(first["hashed"])
    assert record["files"]["indices.npy"]["size"] == (path / "indices.npy").stat().st_size

    # Unchanged: nothing is read again and the record is not rewritten.
    stamp = (path / D.VERIFIED_FILE).stat().st_mtime_ns
    again = D.verify_files("tiny", root)
    assert again["hashed"] == [] and len(again["cached"]) == len(D.FILES)
    assert (path / D.VERIFIED_FILE).stat().st_mtime_ns == stamp

    # A harmless change of one file's inode metadata re-hashes that file only.
    os.chmod(path / "labels.npy", 0o644)
    assert D.verify_files("tiny", root)["hashed"] == ["labels.npy"]

    # Same-size overwrite in place: refused, naming the file, with or without the record.
    done = D.verify_files("tiny", root)
    assert D.changed_since(path, done) == []
    _flip_in_place(path / "indices.npy")
    assert D.changed_since(path, done) == ["indices.npy"]  # the runner's after-run check
    msg = error_of(D.verify_files, "tiny", root)
    assert str(path / "indices.npy") in msg and "hash mismatch" in msg
    assert str(path / "indices.npy") in error_of(D.verify_files, "tiny", root)  # not cached as good


def test_verify_files_sees_a_restored_mtime(tiny_copy):
    # `touch -d` after the overwrite restores size and mtime; the ctime (not settable by a
    # user) still moves, so the file is read again.
    root, path = tiny_copy
    _age(path)
    D.verify_files("tiny", root)
    f = path / "indices.npy"
    st = f.stat()
    _flip_in_place(f)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert f.stat().st_mtime_ns == st.st_mtime_ns and f.stat().st_size == st.st_size
    assert str(f) in error_of(D.verify_files, "tiny", root)


def test_full_verify_refreshes_the_record(tiny_copy):
    root, path = tiny_copy
    _age(path)
    D.load("tiny", root, verify_hash=True)
    assert D.verify_files("tiny", root)["hashed"] == []
    # A recently written file is not trusted from the record (its next write could keep
    # the same mtime): hashed again until it is older than the threshold.
    os.utime(path / "val_idx.npy")
    assert D.verify_files("tiny", root)["hashed"] == ["val_idx.npy"]
    assert D.verify_files("tiny", root)["hashed"] == ["val_idx.npy"]


def test_runner_refuses_a_dataset_whose_bytes_changed(tiny_copy, tmp_path):
    from tests.helpers import run_config

    root, path = tiny_copy
    _flip_in_place(path / "indices.npy")
    out = tmp_path / "run"
    proc = run_config(out, framework="dgl", devices=1, epochs=1, extra=["--data-root", str(root)],
                      timeout=120)
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert str(path / "indices.npy") in proc.stdout and "hash mismatch" in proc.stdout
    assert not out.exists()  # refused before anything was launched or written


def _rewrite(path: Path, key: str, arr: np.ndarray, meta_too: bool = True) -> None:
    np.save(path / f"{key}.npy", arr)
    if meta_too:  # keep meta.json consistent so that only the cross-file check can fail
        meta = json.loads((path / "meta.json").read_text())
        meta["files"][f"{key}.npy"].update(
            shape=list(arr.shape), dtype=arr.dtype.str,
            bytes=(path / f"{key}.npy").stat().st_size)
        (path / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("key", ["labels", "features"])
def test_shape_mismatch_with_graph(tiny_copy, key):
    root, path = tiny_copy
    arr = np.load(path / f"{key}.npy")
    _rewrite(path, key, arr[:-1].copy())
    msg = error_of(D.load, "tiny", root)
    assert str(path / f"{key}.npy") in msg and "does not match the graph" in msg


def test_file_replaced_without_meta(tiny_copy):
    root, path = tiny_copy
    arr = np.load(path / "labels.npy")
    _rewrite(path, "labels", arr[:-5].copy(), meta_too=False)
    msg = error_of(D.load, "tiny", root)
    assert str(path / "labels.npy") in msg and "meta.json" in msg


def test_wrong_dtype(tiny_copy):
    root, path = tiny_copy
    _rewrite(path, "features", np.load(path / "features.npy").astype(np.float64))
    msg = error_of(D.load, "tiny", root)
    assert str(path / "features.npy") in msg and "<f4" in msg


def test_bad_indptr_and_splits(tiny_copy):
    root, path = tiny_copy
    indptr = np.load(path / "indptr.npy")
    bad = indptr.copy()
    bad[5], bad[6] = bad[6], bad[5] - 1
    _rewrite(path, "indptr", bad)
    assert str(path / "indptr.npy") in error_of(D.load, "tiny", root)
    _rewrite(path, "indptr", indptr)
    val = np.load(path / "val_idx.npy")
    _rewrite(path, "val_idx", np.append(val, 10**6))
    msg = error_of(D.load, "tiny", root)
    assert str(path / "val_idx.npy") in msg and "0..1999" in msg
    _rewrite(path, "val_idx", np.sort(np.append(val, np.load(path / "train_idx.npy")[0])))
    assert "overlaps" in error_of(D.load, "tiny", root)


def test_corrupt_meta(tiny_copy):
    root, path = tiny_copy
    (path / "meta.json").write_text("{not json")
    assert str(path / "meta.json") in error_of(D.load, "tiny", root)


@pytest.mark.parametrize("name", ["reddit", "ogbn-products"])
def test_missing_raw_files_say_what_to_place_where(tmp_path, name):
    msg = error_of(D.prepare, name, tmp_path)
    raw = (tmp_path / "raw" / name).resolve()
    for f in D.RAW_SOURCES[name]["files"]:
        assert str(raw / f) in msg
    assert D.RAW_SOURCES[name]["url"] in msg and "--download" in msg
    assert not (tmp_path / name).exists()


# ----------------------------------------------------------------------------- converters

def _fake_reddit(raw: Path, n=40, f=6, c=3, seed=0, fmt="coo"):
    """Reddit-format raw files: data npz + scipy sparse adjacency with a self-loop, a
    duplicate and one-directional edges (the converter must fix all three)."""
    sp = pytest.importorskip("scipy.sparse")
    rng = np.random.default_rng(seed)
    raw.mkdir(parents=True, exist_ok=True)
    feature = rng.standard_normal((n, f)).astype(np.float32)
    label = rng.integers(0, c, n)
    label[:c] = np.arange(c)
    node_types = rng.integers(1, 4, n)
    np.savez(raw / "reddit_data.npz", feature=feature, label=label, node_types=node_types,
             node_ids=np.arange(n))
    src = np.concatenate([rng.integers(0, n, 100), [3, 3, 5]])
    dst = np.concatenate([rng.integers(0, n, 100), [3, 7, 7]])
    src = np.concatenate([src, [3]])  # duplicate of 3 -> 7
    dst = np.concatenate([dst, [7]])
    adj = sp.coo_matrix((np.ones(len(src), np.float32), (src, dst)), shape=(n, n))
    if fmt == "csr":
        adj = sp.csr_matrix((np.ones(len(src), np.float32), (src, dst)), shape=(n, n))
    sp.save_npz(raw / "reddit_graph.npz", adj)
    return feature, label, node_types, src, dst


def _expected_edges(src, dst, n):
    pairs = {(int(s), int(d)) for s, d in zip(src, dst) if s != d}
    pairs |= {(d, s) for s, d in pairs}
    return pairs


def _edges_of(g):
    dst = np.repeat(np.arange(g.num_nodes), g.in_degrees())
    return set(zip(np.asarray(g.indices).tolist(), dst.tolist()))


@pytest.mark.parametrize("fmt", ["coo", "csr"])
def test_reddit_converter_round_trip(tmp_path, fmt):
    feature, label, node_types, src, dst = _fake_reddit(tmp_path / "raw" / "reddit", fmt=fmt)
    path = D.prepare("reddit", tmp_path)
    g = D.load("reddit", tmp_path, verify_hash=True)
    assert g.path == path.absolute()
    assert np.array_equal(g.features, feature) and np.array_equal(g.labels, label)
    for key, t in (("train_idx", 1), ("val_idx", 2), ("test_idx", 3)):
        assert np.array_equal(getattr(g, key), np.flatnonzero(node_types == t))
    assert _edges_of(g) == _expected_edges(src, dst, g.num_nodes)
    assert g.num_classes == 3
    stats = g.meta["stats"]
    if fmt == "coo":  # scipy merges the duplicates when it builds a CSR matrix
        assert stats["raw_edges"] == len(src)
        assert stats["duplicates_removed"] >= 1
    assert stats["self_loops_removed"] == int((src == dst).sum())
    assert g.meta["source"]["converter"] == "reddit"


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_csc_from_edges(dtype):
    n = 100_000  # n * n overflows int32: keys must be computed in int64
    src = np.array([99_999, 5, 5, 7, 3, 99_999], dtype=dtype)
    dst = np.array([99_998, 5, 7, 5, 9, 99_998], dtype=dtype)
    indptr, indices, stats = D.csc_from_edges(src, dst, n)
    assert indptr.dtype == indices.dtype == np.int64 and indptr[-1] == len(indices)
    got = set(zip(indices.tolist(), np.repeat(np.arange(n), np.diff(indptr)).tolist()))
    assert got == {(99_999, 99_998), (99_998, 99_999), (5, 7), (7, 5), (3, 9), (9, 3)}
    assert stats == {"raw_edges": 6, "self_loops_removed": 1, "duplicates_removed": 1,
                     "reverse_edges_added": 2}
    indptr, indices, stats = D.csc_from_edges(src[2:4], dst[2:4], 10, symmetrize=False)
    assert indices.tolist() == [7, 5] and indptr.tolist() == [0] * 6 + [1] * 2 + [2] * 3
    assert stats["reverse_edges_added"] == 0


def test_reddit_converter_custom_raw_dir_and_bad_shapes(tmp_path):
    raw = tmp_path / "elsewhere"
    _fake_reddit(raw)
    D.prepare("reddit", tmp_path / "root", raw_dir=raw)
    D.load("reddit", tmp_path / "root")
    # An adjacency of another size than the node data.
    sp = pytest.importorskip("scipy.sparse")
    sp.save_npz(raw / "reddit_graph.npz", sp.coo_matrix((3, 3), dtype=np.float32))
    msg = error_of(D.prepare, "reddit", tmp_path / "root2", raw_dir=raw)
    assert str(raw / "reddit_graph.npz") in msg
    # Features with fewer rows than labels.
    data = dict(np.load(raw / "reddit_data.npz"))
    data["feature"] = data["feature"][:-1]
    np.savez(raw / "reddit_data.npz", **data)
    assert str(raw / "reddit_data.npz") in error_of(D.prepare, "reddit", tmp_path / "r3",
                                                   raw_dir=raw)


def _write_csv_gz(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as fh:
        for row in rows:
            fh.write(",".join(str(v) for v in np.atleast_1d(row)) + "\n")


def _fake_products(raw: Path, n=30, f=4, c=5, seed=0):
    """OGB raw layout: each undirected edge once, one header-less CSV per array."""
    rng = np.random.default_rng(seed)
    feat = rng.standard_normal((n, f)).astype(np.float32)
    label = rng.integers(0, c, n)
    edges = np.stack([rng.integers(0, n, 60), rng.integers(0, n, 60)], axis=1)
    _write_csv_gz(raw / "raw/edge.csv.gz", edges)
    _write_csv_gz(raw / "raw/node-feat.csv.gz", [[repr(float(v)) for v in r] for r in feat])
    _write_csv_gz(raw / "raw/node-label.csv.gz", label)
    _write_csv_gz(raw / "raw/num-node-list.csv.gz", [n])
    _write_csv_gz(raw / "raw/num-edge-list.csv.gz", [len(edges)])
    perm = rng.permutation(n)
    parts = {"train": perm[:15], "valid": perm[15:20], "test": perm[20:]}
    for split, idx in parts.items():
        _write_csv_gz(raw / f"split/sales_ranking/{split}.csv.gz", idx)
    return feat, label, edges, parts


def test_ogbn_products_converter_round_trip(tmp_path):
    pytest.importorskip("pandas")
    feat, label, edges, parts = _fake_products(tmp_path / "raw" / "ogbn-products")
    D.prepare("ogbn-products", tmp_path)
    g = D.load("ogbn-products", tmp_path, verify_hash=True)
    assert np.array_equal(g.features, feat) and np.array_equal(g.labels, label)
    assert np.array_equal(g.train_idx, np.sort(parts["train"]))
    assert np.array_equal(g.val_idx, np.sort(parts["valid"]))
    assert np.array_equal(g.test_idx, np.sort(parts["test"]))
    assert _edges_of(g) == _expected_edges(edges[:, 0], edges[:, 1], g.num_nodes)


def test_ogbn_products_bad_raw(tmp_path):
    pytest.importorskip("pandas")
    raw = tmp_path / "raw" / "ogbn-products"
    _fake_products(raw)
    _write_csv_gz(raw / "raw/num-node-list.csv.gz", [31])
    msg = error_of(D.prepare, "ogbn-products", tmp_path)
    assert str(raw / "raw/node-feat.csv.gz") in msg
    _write_csv_gz(raw / "raw/num-node-list.csv.gz", [30])
    _write_csv_gz(raw / "split/sales_ranking/valid.csv.gz", [3, 99])
    msg = error_of(D.prepare, "ogbn-products", tmp_path)
    assert str(raw / "split/sales_ranking/valid.csv.gz") in msg and "out of range" in msg


@pytest.mark.parametrize("name", ["reddit", "ogbn-products"])
def test_download_unpacks_archive(tmp_path, monkeypatch, name):
    """--download on a file:// URL (no network here): the archive layouts of DGL's
    reddit.zip (files at the top) and OGB's products.zip (one products/ folder)."""
    pytest.importorskip("pandas")
    staging = tmp_path / "staging"
    (_fake_reddit if name == "reddit" else _fake_products)(staging)
    archive = tmp_path / ("reddit.zip" if name == "reddit" else "products.zip")
    prefix = "" if name == "reddit" else "products/"
    with zipfile.ZipFile(archive, "w") as zf:
        for f in D.RAW_SOURCES[name]["files"]:
            zf.write(staging / f, prefix + f)
    monkeypatch.setitem(D.RAW_SOURCES[name], "url", archive.as_uri())
    root = tmp_path / "root"
    D.prepare(name, root, download=True)
    D.load(name, root, verify_hash=True)
    raw = root / "raw" / name
    assert all((raw / f).is_file() for f in D.RAW_SOURCES[name]["files"])
    assert not (raw / archive.name).exists()


# ----------------------------------------------------------------------------- frameworks

def test_pyg_and_dgl_train_on_the_same_graph(built):
    """The graph objects the two adapters train on: same edges in the same order, the same
    features and labels, and no copies of the memory-mapped dataset."""
    pytest.importorskip("torch_sparse")
    pytest.importorskip("dgl")
    from runners.adapters.dgl_data import to_dgl_graph
    from runners.adapters.pyg_data import to_pyg_data

    g = D.load("tiny", built)
    data = to_pyg_data(g)
    dg = to_dgl_graph(g)
    assert data.num_nodes == dg.num_nodes() == g.num_nodes
    assert data.adj_t.nnz() == dg.num_edges() == g.num_edges
    dst, src, _ = data.adj_t.coo()  # adj_t rows are destinations
    dgl_src, dgl_dst = dg.edges()
    assert set(zip(src.tolist(), dst.tolist())) == set(zip(dgl_src.tolist(), dgl_dst.tolist())) == _edges_of(g)
    # Same edge order too (CSC order: by destination, then source).
    assert np.array_equal(dgl_src.numpy(), src.numpy()) and np.array_equal(dgl_dst.numpy(), dst.numpy())
    assert np.array_equal(dg.in_degrees().numpy(), g.in_degrees())
    assert data.adj_t.storage.col().data_ptr() == g.indices.ctypes.data  # PyG's adjacency is the file
    for pyg_t, dgl_t, ref in ((data.x, dg.ndata["feat"], g.features),
                              (data.y, dg.ndata["label"], g.labels)):
        assert np.array_equal(pyg_t.numpy(), ref) and np.array_equal(dgl_t.numpy(), ref)
        assert pyg_t.data_ptr() == dgl_t.data_ptr() == ref.ctypes.data  # no copies
    assert "csc" in dg.formats()["created"]
    assert "train_idx" not in data  # splits are never shipped with every mini-batch


# ----------------------------------------------------------------------------- CLI

def _cli(*args, cwd=REPO):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "runners.datasets", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_cli_prepare_verify(built, tmp_path):
    out = _cli("prepare", "tiny", "--root", str(tmp_path))
    assert out.returncode == 0, out.stderr
    path, digest = out.stdout.split()
    assert Path(path) == tmp_path / "tiny" and digest == D.load("tiny", built).content_hash
    out = _cli("verify", "tiny", "--root", str(tmp_path))
    assert out.returncode == 0 and out.stdout.startswith("ok ") and digest in out.stdout
    (tmp_path / "tiny" / "labels.npy").unlink()
    out = _cli("verify", "tiny", "--root", str(tmp_path))
    assert out.returncode == 1 and str(tmp_path / "tiny" / "labels.npy") in out.stderr
    out = _cli("prepare", "reddit", "--root", str(tmp_path))
    assert out.returncode == 1 and "--download" in out.stderr


def test_import_is_light():
    # config.py imports this module in the launcher, which must not load any framework.
    code = ("import sys, runners.datasets; "
            "print(sorted(m for m in ('torch', 'dgl', 'torch_geometric', 'pandas', 'scipy') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


# ----------------------------------------------------------------------------- non-finite features

def _poison_features(path: Path, cells) -> None:
    """NaN/inf written into features.npy with meta.json's hashes made consistent again, as a
    user's own converted graph would be: only the values are wrong."""
    feats = np.load(path / "features.npy").copy()
    for (row, col), value in cells:
        feats[row, col] = value
    np.save(path / "features.npy", feats)
    meta = json.loads((path / "meta.json").read_text())
    meta["files"]["features.npy"]["sha256"] = D.format.array_sha256(feats)
    meta["content_hash"] = D.format.combine_hash(meta["files"])
    (path / "meta.json").write_text(json.dumps(meta))


def test_verification_refuses_nan_features_naming_file_and_count(tiny_copy):
    root, path = tiny_copy
    D.verify_files(path)  # a record that trusts the good bytes: the check must not rely on it
    _poison_features(path, [((7, 0), np.nan), ((7, 1), np.nan), ((11, 3), np.inf)])
    msg = error_of(D.verify_files, path)
    assert str(path / "features.npy") in msg
    assert "2 NaN and 1 infinite values in 2 of 2000 nodes (the first at node 7)" in msg


def test_writing_or_converting_nan_features_is_refused(tmp_path):
    arrays = D.generate(D.SYNTHETIC["tiny"])
    arrays["features"][3, 2] = np.nan
    msg = error_of(D.writing.write_dataset, tmp_path, "bad", arrays, {"kind": "test"}, {})
    assert "1 NaN and 0 infinite values" in msg and not (tmp_path / "bad").exists()
    _fake_reddit(tmp_path / "raw" / "reddit")
    data = dict(np.load(tmp_path / "raw" / "reddit" / "reddit_data.npz"))
    data["feature"] = data["feature"].astype(np.float32)
    data["feature"][0, 0] = np.inf
    np.savez(tmp_path / "raw" / "reddit" / "reddit_data.npz", **data)
    msg = error_of(D.prepare, "reddit", tmp_path)
    assert str(tmp_path / "raw" / "reddit" / "reddit_data.npz") in msg and "1 infinite" in msg


def test_runner_refuses_nan_features_before_launch(tiny_copy, tmp_path):
    from tests.helpers import run_config

    root, path = tiny_copy
    _poison_features(path, [((0, 0), np.nan)])
    out = tmp_path / "run"
    proc = run_config(out, framework="pyg", devices=1, epochs=1, extra=["--data-root", str(root)], timeout=120)
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert "features hold 1 NaN" in proc.stdout and "Traceback" not in proc.stdout
    assert not out.exists() and not list(tmp_path.glob(".run.run-*"))  # nothing launched or written
