"""Importing a user's graph (runners/datasets/importers.py, `python -m runners.datasets import`):
files written by PyG, DGL, OGB's layout and NumPy themselves, read back into the canonical
format and compared with what was given; every bad input refused in one line with nothing
left behind; an imported dataset is never regenerated; it trains in both frameworks through
the real runner and a sweep names it without making it."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from runners import datasets as D
from tests.helpers import run_env, runner_argv

REPO = Path(__file__).resolve().parent.parent
N, F, C = 240, 8, 4


# ----------------------------------------------------------------------------- the graph given

def make_graph(seed=0, n=N, edges=1400):
    """A small node-classification graph as a user would hold it: directed edges with some
    self-loops and repeated edges, class-correlated features, a train/val/test split."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, C, n)
    x = (rng.normal(size=(C, F))[y] + rng.normal(size=(n, F))).astype(np.float32)
    src, dst = rng.integers(0, n, edges), rng.integers(0, n, edges)
    src[:6] = dst[:6]  # self-loops
    src, dst = np.concatenate([src, src[10:30]]), np.concatenate([dst, dst[10:30]])  # repeats
    perm = rng.permutation(n)
    split = {"train": np.sort(perm[:150]), "val": np.sort(perm[150:190]), "test": np.sort(perm[190:])}
    return {"x": x, "y": y, "src": src, "dst": dst, "split": split}


def mask(idx, n=N):
    m = np.zeros(n, dtype=bool)
    m[idx] = True
    return m


def expected_csc(src, dst, n, symmetric=True):
    """The canonical CSC of an edge list, computed the plain way (Python sets)."""
    pairs = {(int(s), int(d)) for s, d in zip(src, dst) if s != d}
    if symmetric:
        pairs |= {(d, s) for s, d in pairs}
    cols = [[] for _ in range(n)]
    for s, d in pairs:
        cols[d].append(s)
    indptr = np.cumsum([0] + [len(c) for c in cols]).astype(np.int64)
    indices = np.array([s for c in cols for s in sorted(c)], dtype=np.int64)
    return indptr, indices


def assert_imported(path, x, y, src, dst, split, symmetric=True):
    """The dataset at path holds exactly what was given (edges canonicalised) and passes
    the full verification."""
    g = D.load(path, verify_hash=True)
    indptr, indices = expected_csc(src, dst, len(x), symmetric)
    assert np.array_equal(g.indptr, indptr) and np.array_equal(g.indices, indices)
    assert g.features.dtype == np.float32 and np.array_equal(g.features, np.asarray(x, dtype=np.float32))
    assert g.labels.dtype == np.int64 and np.array_equal(g.labels, np.asarray(y).reshape(-1))
    for key, s in (("train_idx", "train"), ("val_idx", "val"), ("test_idx", "test")):
        assert np.array_equal(getattr(g, key), np.unique(split[s])), key
    assert g.meta["source"]["kind"] == "imported" and g.meta["adjacency"]["symmetric"] == symmetric
    return g


def cli(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "runners.datasets", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120, env=run_env())


def save_npz(path, g, csc=False, splits="idx", **override):
    arrays = {"x": g["x"], "y": g["y"]}
    if csc:
        arrays["indptr"], arrays["indices"] = expected_csc(g["src"], g["dst"], len(g["x"]), symmetric=False)
    else:
        arrays["edge_index"] = np.stack([g["src"], g["dst"]])
    if splits == "idx":
        arrays.update({f"{s}_idx": v for s, v in g["split"].items()})
    elif splits == "mask":
        arrays.update({f"{s}_mask": mask(v, len(g["x"])) for s, v in g["split"].items()})
    arrays.update(override)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


# ----------------------------------------------------------------------------- each format

def test_pyg_fake_dataset_with_masks(tmp_path):
    import torch
    from torch_geometric.datasets import FakeDataset

    torch.manual_seed(0)
    data = FakeDataset(num_graphs=1, avg_num_nodes=N, avg_degree=5, num_channels=F, num_classes=C)[0]
    n = data.num_nodes
    perm = torch.randperm(n)
    split = {"train": perm[: n // 2], "val": perm[n // 2: 3 * n // 4], "test": perm[3 * n // 4:]}
    for s, idx in split.items():
        data[f"{s}_mask"] = torch.zeros(n, dtype=torch.bool).index_fill_(0, idx, True)
    torch.save(data, tmp_path / "fake.pt")
    path = D.import_graph(tmp_path / "fake.pt", "fake", tmp_path / "root")
    ei = data.edge_index.numpy()
    g = assert_imported(path, data.x.numpy(), data.y.numpy(), ei[0], ei[1],
                        {s: v.numpy() for s, v in split.items()})
    src = g.meta["source"]
    assert src["format"] == "pyg" and src["path"] == str(tmp_path / "fake.pt")
    assert src["files"]["fake.pt"]["bytes"] == (tmp_path / "fake.pt").stat().st_size
    assert len(src["files"]["fake.pt"]["sha256"]) == 64
    assert src["split"]["kind"] == "given" and src["split"]["fields"]["train_idx"].endswith("fake.pt: train_mask")


def test_pyg_data_with_index_tensors_counts_what_changed(tmp_path):
    import torch
    from torch_geometric.data import Data

    gv = make_graph(1)
    data = Data(x=torch.from_numpy(gv["x"]).double(), edge_index=torch.from_numpy(np.stack([gv["src"], gv["dst"]])),
                y=torch.from_numpy(gv["y"]).view(-1, 1),
                **{f"{s}_idx": torch.from_numpy(v) for s, v in gv["split"].items()})
    torch.save(data, tmp_path / "data.pt")
    path = D.import_graph(tmp_path / "data.pt", "byhand", tmp_path / "root")
    g = assert_imported(path, gv["x"], gv["y"], gv["src"], gv["dst"], gv["split"])
    changes = g.meta["source"]["changes"]
    pairs = {(int(s), int(d)) for s, d in zip(gv["src"], gv["dst"])}
    loops = sum(1 for s, d in pairs if s == d)
    assert changes["raw_edges"] == len(gv["src"])
    assert changes["self_loops_removed"] == int(np.sum(gv["src"] == gv["dst"]))
    assert changes["duplicates_removed"] == len(gv["src"]) - changes["self_loops_removed"] - (len(pairs) - loops)
    assert changes["reverse_edges_added"] == g.num_edges - (len(pairs) - loops)
    assert changes["features_dtype"] == "float64 -> float32"
    assert g.meta["source"]["edges"].startswith("made symmetric") and g.meta["stats"]["self_loops_removed"] == changes["self_loops_removed"] >= 6


def test_pyg_file_runs_no_code_of_its_own(tmp_path):
    """A torch.save file whose pickle calls a function is refused before anything runs."""
    import torch

    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.mkdir, (str(marker),))

    torch.save({"x": Payload()}, tmp_path / "evil.pt")
    msg = error_of(D.import_graph, tmp_path / "evil.pt", "evil", tmp_path / "root")
    assert msg.startswith(f"{tmp_path / 'evil.pt'}: cannot be read as a torch.save file of tensors or a PyG Data")
    assert not marker.exists() and not (tmp_path / "root").exists()


def test_dgl_graph_with_masks_and_named_fields_through_the_cli(tmp_path):
    import dgl
    import torch

    gv = make_graph(2)
    g = dgl.graph((torch.from_numpy(gv["src"]), torch.from_numpy(gv["dst"])), num_nodes=N)
    g.ndata["features"] = torch.from_numpy(gv["x"])
    g.ndata["label"] = torch.from_numpy(gv["y"])
    for s, idx in gv["split"].items():
        g.ndata[f"{s}_mask"] = torch.from_numpy(mask(idx))  # DGL stores bool masks as uint8
    dgl.save_graphs(str(tmp_path / "graph.bin"), [g])
    proc = cli("import", tmp_path / "graph.bin", "--name", "from-dgl", "--root", tmp_path / "root",
               "--feat", "features")
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "root" / "from-dgl"
    assert proc.stdout.split() == [str(path), D.read_meta(path)["content_hash"]]
    meta = assert_imported(path, gv["x"], gv["y"], gv["src"], gv["dst"], gv["split"]).meta
    assert meta["source"]["format"] == "dgl" and meta["source"]["fields"]["features"].endswith("graph.bin: features")
    # a graph straight from dgl.rand_graph, with the default field names
    r = dgl.rand_graph(150, 700)
    r.ndata["feat"], r.ndata["label"] = torch.randn(150, 5), torch.randint(0, 3, (150,))
    for s, (lo, hi) in {"train": (0, 100), "val": (100, 120), "test": (120, 150)}.items():
        r.ndata[f"{s}_mask"] = (torch.arange(150) >= lo) & (torch.arange(150) < hi)
    dgl.save_graphs(str(tmp_path / "rand.bin"), [r])
    src, dst = r.edges()
    assert_imported(D.import_graph(tmp_path / "rand.bin", "rand", tmp_path / "root"), r.ndata["feat"].numpy(),
                    r.ndata["label"].numpy(), src.numpy(), dst.numpy(),
                    {"train": np.arange(100), "val": np.arange(100, 120), "test": np.arange(120, 150)})


def write_ogb(base, gv, kind="time", drop=()):
    """An OGB node-property directory as ogbn-arxiv ships it (gzipped CSVs without header)."""
    def csv(rel, rows):
        path = base / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(path, "wt") as fh:
            for row in rows:
                fh.write(",".join(map(str, np.atleast_1d(row))) + "\n")

    csv("raw/edge.csv.gz", np.stack([gv["src"], gv["dst"]], axis=1))
    csv("raw/node-feat.csv.gz", [[repr(float(v)) for v in row] for row in gv["x"]])
    csv("raw/node-label.csv.gz", gv["y"])
    csv("raw/num-node-list.csv.gz", [len(gv["x"])])
    csv("raw/num-edge-list.csv.gz", [len(gv["src"])])
    for s, name in (("train", "train"), ("val", "valid"), ("test", "test")):
        if s not in drop:
            csv(f"split/{kind}/{name}.csv.gz", gv["split"][s])
    return base


def test_ogb_directory(tmp_path):
    gv = make_graph(3)
    src_dir = write_ogb(tmp_path / "arxiv", gv)
    path = D.import_graph(src_dir, "arxiv", tmp_path / "root")
    g = assert_imported(path, gv["x"], gv["y"], gv["src"], gv["dst"], gv["split"])
    assert g.meta["source"]["format"] == "ogb"
    assert set(g.meta["source"]["files"]) >= {"raw/edge.csv.gz", "raw/node-feat.csv.gz", "raw/node-label.csv.gz",
                                               "split/time/train.csv.gz", "split/time/valid.csv.gz"}
    # two split kinds: one must be chosen
    write_ogb(src_dir, gv, kind="random")
    assert error_of(D.import_graph, src_dir, "arxiv2", tmp_path / "root") == (
        f"{src_dir / 'split'}: holds the splits random, time; choose one with --ogb-split")
    D.import_graph(src_dir, "arxiv2", tmp_path / "root", ogb_split="random")
    # a split file missing
    partial = write_ogb(tmp_path / "partial", gv, drop=("val",))
    assert error_of(D.import_graph, partial, "partial", tmp_path / "root2") == (
        f"{partial}: no val split (split/time/valid.csv.gz); found split/time/train.csv.gz, split/time/test.csv.gz; "
        "name the fields with --train/--val/--test, or split at random: --split 0.65,0.1,0.25 (seeded by --seed, "
        "recorded)")
    assert not (tmp_path / "root2").exists()
    D.import_graph(partial, "partial", tmp_path / "root2", split=(0.65, 0.1, 0.25))


@pytest.mark.parametrize("csc", [True, False], ids=["csc", "edge_index"])
def test_npz(tmp_path, csc):
    gv = make_graph(4)
    path = D.import_graph(save_npz(tmp_path / "g.npz", gv, csc=csc, splits="mask"), "np", tmp_path / "root")
    assert_imported(path, gv["x"], gv["y"], gv["src"], gv["dst"], gv["split"])


def test_directed_keeps_the_edges_as_given(tmp_path):
    gv = make_graph(5)
    path = D.import_graph(save_npz(tmp_path / "g.npz", gv), "dir", tmp_path / "root", directed=True)
    g = assert_imported(path, gv["x"], gv["y"], gv["src"], gv["dst"], gv["split"], symmetric=False)
    assert g.meta["source"]["directed"] is True and g.meta["source"]["changes"]["reverse_edges_added"] == 0


def test_random_split_is_seeded_and_recorded(tmp_path):
    gv = make_graph(6)
    npz = save_npz(tmp_path / "g.npz", gv, splits=None)
    proc = cli("import", npz, "--name", "r1", "--root", tmp_path / "root", "--split", "0.6,0.2,0.2", "--seed", "3")
    assert proc.returncode == 0, proc.stderr
    a = D.load("r1", tmp_path / "root")
    b = D.load(D.import_graph(npz, "r2", tmp_path / "root", split=(0.6, 0.2, 0.2), seed=3))
    c = D.load(D.import_graph(npz, "r3", tmp_path / "root", split=(0.6, 0.2, 0.2), seed=4))
    assert (len(a.train_idx), len(a.val_idx), len(a.test_idx)) == (144, 48, 48)
    assert np.array_equal(a.train_idx, b.train_idx) and not np.array_equal(a.train_idx, c.train_idx)
    assert a.meta["source"]["split"] == {"kind": "random", "fractions": [0.6, 0.2, 0.2], "seed": 3,
                                         "given_fields_ignored": []}


# ----------------------------------------------------------------------------- bad input

def error_of(fn, *args, **kwargs) -> str:
    with pytest.raises(D.DatasetError) as info:
        fn(*args, **kwargs)
    msg = str(info.value)
    assert "\n" not in msg, msg
    return msg


def bad_cases():
    """(id, npz overrides, import kwargs, expected message with {f} for the file)."""
    gv = make_graph(7)
    nan_x = gv["x"].copy()
    nan_x[5, 2] = np.nan
    inf_x = gv["x"].copy()
    inf_x[[9, 11], 0] = np.inf
    neg_y = gv["y"].copy()
    neg_y[3] = -1
    nan_y = gv["y"].astype(np.float64)
    nan_y[[7, 8]] = np.nan
    far = np.stack([gv["src"], gv["dst"]])
    far[1, 4] = N + 5
    overlap = gv["split"]["val"].copy()
    overlap[0] = gv["split"]["train"][0]
    first_shared = min(int(v) for v in set(overlap) & set(gv["split"]["train"]))
    return [
        ("no-splits", dict(train_idx=None, val_idx=None, test_idx=None), {},
         "{f}: no train split (train_mask or train_idx) and no val split (val_mask or val_idx) and no test split "
         "(test_mask or test_idx); name the fields with --train/--val/--test, or split at random: "
         "--split 0.65,0.1,0.25 (seeded by --seed, recorded)"),
        ("no-val", dict(val_idx=None), {},
         "{f}: no val split (val_mask or val_idx); found train_idx, test_idx; name the fields with "
         "--train/--val/--test, or split at random: --split 0.65,0.1,0.25 (seeded by --seed, recorded)"),
        ("nan-features", dict(x=nan_x), {},
         f"{{f}}: x: features hold 1 NaN and 0 infinite values in 1 of {N} nodes (the first at node 5); "
         "every feature must be a finite number: fill or drop them at the source"),
        ("inf-features", dict(x=inf_x), {},
         f"{{f}}: x: features hold 0 NaN and 2 infinite values in 2 of {N} nodes (the first at node 9); "
         "every feature must be a finite number: fill or drop them at the source"),
        ("negative-label", dict(y=neg_y), {}, "{f}: y: labels must be class numbers 0, 1, ...; found -1"),
        ("missing-label", dict(y=nan_y), {},
         f"{{f}}: y: no label (NaN) for 2 of {N} nodes, the first node 7; every node needs a class 0, 1, ..."),
        ("edge-past-nodes", dict(edge_index=far), {},
         f"{{f}}: edge_index: edge endpoints out of range: min 0, max {N + 5}, but there are {N} nodes (0..{N - 1})"),
        ("split-past-nodes", dict(test_idx=np.append(gv["split"]["test"], N)), {},
         f"{{f}}: test_idx: node ids out of range: min {gv['split']['test'].min()}, max {N}, "
         f"but there are {N} nodes (0..{N - 1})"),
        ("short-labels", dict(y=gv["y"][:-1]), {}, f"{{f}}: y: has {N - 1} labels but {{f}}: x has {N} nodes"),
        ("short-mask", dict(train_idx=None, train_mask=mask(gv["split"]["train"])[:-2]), {},
         f"{{f}}: train_mask: a mask of {N - 2} entries but {{f}}: x has {N} nodes"),
        ("short-indptr", dict(edge_index=None, indptr=np.zeros(N - 1, dtype=np.int64),
                              indices=np.zeros(0, dtype=np.int64)), {},
         f"{{f}}: indptr/indices: indptr has {N - 1} entries but {{f}}: x has {N} nodes (needs {N + 1})"),
        ("overlapping-splits", dict(val_idx=overlap), {},
         f"{{f}}: val_idx: overlaps train_idx in 1 nodes, the first node {first_shared}; the splits must be disjoint"),
        ("no-features", dict(x=None, feat=gv["x"]), {},
         "{f}: no field 'x' (has edge_index, feat, test_idx, train_idx, val_idx, y); name the one to use with --feat"),
        ("suite-name", {}, dict(name="small"),
         "{root}/small: --name 'small' is one of the suite's own datasets (it makes tiny, small, reddit-shape, "
         "wide, reddit, ogbn-products itself); choose another name"),
    ]


@pytest.mark.parametrize("case", bad_cases(), ids=lambda c: c[0])
def test_bad_input_is_one_line_and_leaves_nothing(tmp_path, case):
    _, override, kwargs, expected = case
    gv = make_graph(7)
    f = save_npz(tmp_path / "bad.npz", gv, **override)
    root = tmp_path / "root"
    name = kwargs.pop("name", "bad")
    msg = error_of(D.import_graph, f, name, root, **kwargs)
    assert msg == expected.format(f=f, root=root.absolute())
    assert not root.exists()  # nothing written: no dataset, no temporary directory, no lock


def test_a_file_of_another_format_is_refused(tmp_path):
    f = save_npz(tmp_path / "g.npz", make_graph(7))
    assert error_of(D.import_graph, f, "x", tmp_path / "root", fmt="dgl") == (
        f"{f}: not a file of dgl.save_graphs (it starts with DGL's magic number 0xDD2E4FF046B4A13F)")
    (tmp_path / "notes.txt").write_text("hello\n")
    assert error_of(D.import_graph, tmp_path / "notes.txt", "x", tmp_path / "root") == (
        f"{tmp_path / 'notes.txt'}: format not recognised (not a torch.save file, a DGL graph, an .npz or an OGB "
        "directory); name it with --format (pyg, dgl, ogb, npz)")
    np.savez(tmp_path / "objects.npz", x=np.array([{"a": 1}], dtype=object))
    assert error_of(D.import_graph, tmp_path / "objects.npz", "x", tmp_path / "root").startswith(
        f"{tmp_path / 'objects.npz'}: x: cannot be read: ")
    assert not (tmp_path / "root").exists()


def test_bad_input_on_the_command_line(tmp_path):
    """The CLI prints the one line after `error:` and exits 1; a bad --split is refused too."""
    gv = make_graph(7)
    y = gv["y"].copy()
    y[0] = -2
    f = save_npz(tmp_path / "bad.npz", gv, y=y)
    proc = cli("import", f, "--name", "bad", "--root", tmp_path / "root")
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 1 and errors == [f"error: {f}: y: labels must be class numbers 0, 1, ...; found -2"]
    proc = cli("import", f, "--name", "bad", "--root", tmp_path / "root", "--split", "0.7,0.5")
    assert proc.returncode == 1 and proc.stderr.strip() == (
        "error: --split '0.7,0.5': expected three fractions TRAIN,VAL,TEST, each 0..1, train above 0, "
        "summing to at most 1, such as 0.65,0.1,0.25")
    assert not (tmp_path / "root").exists()


# ----------------------------------------------------------------------------- the user's files

def test_existing_name_is_refused_and_force_keeps_the_old_one(tmp_path):
    gv = make_graph(8)
    root = tmp_path / "root"
    npz = save_npz(tmp_path / "g.npz", gv)
    first = D.load(D.import_graph(npz, "mine", root))
    msg = error_of(D.import_graph, npz, "mine", root, split=(0.5, 0.25, 0.25))
    assert msg == (f"{root.absolute() / 'mine'}: a dataset named 'mine' exists (imported from {npz}); add --force to "
                   f"replace it (the existing one is then moved to {root.absolute() / '.replaced'}/, not deleted)")
    second = D.load(D.import_graph(npz, "mine", root, split=(0.5, 0.25, 0.25), force=True))
    kept = Path(second.meta["source"]["replaced"]["moved_to"])
    assert kept.parent == root.absolute() / ".replaced" and kept.name.startswith("mine-")
    assert D.load(kept, verify_hash=True).content_hash == first.content_hash
    assert second.meta["source"]["replaced"]["content_hash"] == first.content_hash != second.content_hash
    assert [p.name for p in root.iterdir() if p.name.startswith(".mine.")] == [".mine.lock"]  # no temporary left


def test_an_imported_dataset_is_never_regenerated(tmp_path):
    gv = make_graph(9)
    root = tmp_path / "root"
    npz = save_npz(tmp_path / "g.npz", gv)
    path = D.import_graph(npz, "mine", root)
    assert D.prepare("mine", root) == path  # checked and returned as it is
    labels = path / "labels.npy"
    labels.write_bytes(labels.read_bytes()[:-16])  # damaged
    damaged = labels.read_bytes()
    msg = error_of(D.prepare, "mine", root)
    assert msg == (f"{path / 'labels.npy'}: truncated: {len(damaged)} bytes, expected {len(damaged) + 16}; 'mine' was "
                   f"imported from {npz} (npz); the suite never regenerates an imported dataset: import it again with "
                   f"python -m runners.datasets import {npz} --name mine --root {root} --force")
    assert "never regenerates" in error_of(D.prepare, "mine", root, force=True)
    assert labels.read_bytes() == damaged  # untouched
    # the runner refuses it the same way, before launching anything (exit 2)
    out = tmp_path / "run"
    proc = subprocess.run(runner_argv(out, devices=1, epochs=1, dataset="mine", extra=["--data-root", str(root)]),
                          cwd=REPO, capture_output=True, text=True, timeout=120, env=run_env())
    assert proc.returncode == 2 and "the suite never regenerates an imported dataset" in proc.stderr
    assert not (out / "result.json").exists()
    # a name that is neither the suite's nor imported: refused with how to import it
    proc = subprocess.run(runner_argv(out, devices=1, epochs=1, dataset="cora", extra=["--data-root", str(root)]),
                          cwd=REPO, capture_output=True, text=True, timeout=120, env=run_env())
    assert proc.returncode == 2 and f"--dataset 'cora' is unknown: {root.absolute() / 'cora'}: 'cora' is not one of" \
        in proc.stdout + proc.stderr and "python -m runners.datasets import PATH --name cora" in proc.stdout + proc.stderr


def save_as(fmt: str, base: Path, gv: dict) -> Path:
    """`gv` saved the way a user of `fmt` keeps a graph: the file or directory to import."""
    import torch

    base.mkdir(parents=True, exist_ok=True)
    if fmt == "npz":
        return save_npz(base / "graph.npz", gv)
    if fmt == "ogb":
        return write_ogb(base / "ogb", gv)
    if fmt == "pyg":
        from torch_geometric.data import Data

        data = Data(x=torch.from_numpy(gv["x"]), y=torch.from_numpy(gv["y"]),
                    edge_index=torch.from_numpy(np.stack([gv["src"], gv["dst"]])),
                    **{f"{s}_mask": torch.from_numpy(mask(v)) for s, v in gv["split"].items()})
        torch.save(data, base / "graph.pt")
        return base / "graph.pt"
    import dgl

    g = dgl.graph((torch.from_numpy(gv["src"]), torch.from_numpy(gv["dst"])), num_nodes=N)
    g.ndata["feat"], g.ndata["label"] = torch.from_numpy(gv["x"]), torch.from_numpy(gv["y"])
    for s, v in gv["split"].items():
        g.ndata[f"{s}_mask"] = torch.from_numpy(mask(v))
    dgl.save_graphs(str(base / "graph.bin"), [g])
    return base / "graph.bin"


@pytest.mark.e2e  # real runs
@pytest.mark.parametrize("fmt", ["pyg", "dgl", "ogb", "npz"])
@pytest.mark.parametrize("framework", ["pyg", "dgl"])
def test_an_imported_graph_of_each_format_trains_in_both_frameworks(tmp_path_factory, fmt, framework):
    root = tmp_path_factory.getbasetemp() / "trained-root"
    name = f"user-{fmt}"
    if not (root / name).exists():
        D.import_graph(save_as(fmt, tmp_path_factory.getbasetemp() / f"user-{fmt}", make_graph(10)), name, root)
    out = tmp_path_factory.mktemp(framework) / "run"
    proc = subprocess.run(runner_argv(out, framework=framework, devices=1, epochs=1, batch_size=64,
                                      dataset=name, extra=["--data-root", str(root)]),
                          cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
                          env=run_env())
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "ok", proc.stdout[-3000:]
    assert result["config"]["dataset"] == name
    assert result["env"]["dataset_hash"] == D.read_meta(root / name)["content_hash"]
    assert D.read_meta(root / name)["source"]["format"] == fmt


@pytest.mark.e2e  # Snakemake dry runs
def test_a_sweep_names_an_imported_dataset_and_never_makes_it(tmp_path):
    """The sweep's dataset rule makes only the suite's own datasets: an imported one is an
    input no rule writes, not even with --forceall; an unknown name fails at parse time."""
    import yaml

    snakemake = str(Path(sys.executable).parent / "snakemake")
    D.import_graph(save_npz(tmp_path / "g.npz", make_graph(11)), "user-graph", tmp_path / "results" / "datasets")
    config = yaml.safe_load((REPO / "config" / "minimal.yaml").read_text())
    for name in ("user-graph", "nope"):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump({**config, "dataset": name}))

    def dry(name, *args):
        env = {**run_env(), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        res = subprocess.run([snakemake, "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path), "-n", *args,
                              "--configfile", str(tmp_path / f"{name}.yaml")], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
        return res.returncode, res.stdout + res.stderr

    for args in ((), ("--forceall",)):
        rc, out = dry("user-graph", *args)
        assert rc == 0, out
        stats = out.split("Job stats:", 1)[1].split("\n\n", 1)[0]
        assert "run              2" in stats and "dataset" not in stats, stats
    rc, out = dry("nope")
    assert rc != 0 and "Invalid config: dataset:" in out and "import one first: python -m runners.datasets import" in out
