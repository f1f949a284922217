"""Import a user's node-classification graph as a named dataset in the canonical format
(`python -m runners.datasets import PATH --name NAME`; docs/datasets.md "Imported graphs").

Formats (`FORMATS`), detected from the path unless named:
- `pyg`: a torch_geometric `Data` (or a dict of tensors) saved with `torch.save`; read with
  torch's weights-only loading, PyG's classes allow-listed: no other object is unpickled;
- `dgl`: one homogeneous graph saved with `dgl.save_graphs` (node data `feat`, `label`);
- `ogb`: an OGB node-property directory (`raw/edge.csv.gz`, `raw/node-feat.csv.gz`,
  `raw/node-label.csv.gz`, `split/<kind>/{train,valid,test}.csv.gz`), as ogbn-arxiv ships;
- `npz`: NumPy arrays: `indptr` + `indices` (CSC, the sources into each node) or
  `edge_index` (2 x E, sources first), `x`, `y`.
Splits are the fields `<split>_mask` (bool or 0/1, one per node) or `<split>_idx` (node
ids), or a seeded random split (`split=`). Field names can be given (`names=`).

A reader returns what the file holds (`Given`); `canonical` checks it, each problem one
line naming the file, the field and the value, and makes the canonical arrays (edges made
symmetric unless `directed`; self-loops and duplicates removed; counted); `import_graph`
writes them atomically as `<root>/<name>/` with `source.kind` "imported". torch, PyG and
DGL are imported inside their readers only: importing this module needs numpy alone.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import time
import uuid
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from runners.datasets.converters import _check_labels, _check_node_ids, _open_npz, _read_csv
from runners.datasets.format import (DATASET_NAMES, DEFAULT_ROOT, NAME_RE, DatasetError, _stats, check_finite,
                                     imported_source, load, read_meta)
from runners.datasets.generators import csc_from_edges
from runners.datasets.writing import _lock, write_dataset

log = logging.getLogger("gnnscale.datasets")

FORMATS = ("pyg", "dgl", "ogb", "npz")
SPLITS = (("train_idx", "train"), ("val_idx", "val"), ("test_idx", "test"))
DEFAULT_FIELDS = {"pyg": {"feat": "x", "label": "y"}, "npz": {"feat": "x", "label": "y"},
                  "dgl": {"feat": "feat", "label": "label"}}
DGL_MAGIC = bytes.fromhex("3fa1b446f04f2edd")  # dgl.save_graphs' first 8 bytes (0xDD2E4FF046B4A13F)
OGB_FILES = ("raw/edge.csv.gz", "raw/node-feat.csv.gz", "raw/node-label.csv.gz")
REPLACED_DIR = ".replaced"  # <root>/.replaced/<name>-<time>/: what an import with force replaced


@dataclass
class Field:
    """One array of the input and where it came from (the file, the field's name there)."""

    file: Path
    name: str
    value: object  # an array, or for edges ("coo", src, dst) / ("csc", indptr, indices)

    @property
    def where(self) -> str:
        return f"{self.file}: {self.name}"


@dataclass
class Given:
    """What a file holds, before any check."""

    path: Path  # the file or directory imported
    features: Field
    labels: Field
    edges: Field
    splits: dict  # "train"/"val"/"test" -> Field; a split the file lacks is absent
    looked_for: dict  # "train"/"val"/"test" -> what was looked for (for the message)
    read: list = field(default_factory=list)  # every file read (hashed into meta.json)
    num_nodes: Optional[int] = None  # where the file states it (PyG num_nodes, OGB num-node-list)


def _one_line(exc) -> str:
    """An exception (or text) on one line: every run of whitespace, newlines too, one space."""
    return " ".join(str(exc).split()) or type(exc).__name__


def _pick(fields: dict, path: Path, wanted: Optional[str], default: str, option: str) -> Field:
    name = wanted or default
    if name not in fields:
        raise DatasetError(f"{path}: no field {name!r} (has {', '.join(sorted(fields)) or 'nothing'}); "
                           f"name the one to use with {option}")
    return Field(path, name, fields[name])


def _fields_given(fields: dict, path: Path, fmt: str, names: dict, edges: Field, num_nodes=None) -> Given:
    """A Given from a mapping of field name -> array (PyG, DGL, npz)."""
    names = names or {}
    features = _pick(fields, path, names.get("feat"), DEFAULT_FIELDS[fmt]["feat"], "--feat")
    labels = _pick(fields, path, names.get("label"), DEFAULT_FIELDS[fmt]["label"], "--label")
    splits, looked_for = {}, {}
    for _, split in SPLITS:
        wanted = names.get(split)
        candidates = [wanted] if wanted else [f"{split}_mask", f"{split}_idx"]
        looked_for[split] = " or ".join(candidates)
        found = next((c for c in candidates if c in fields), None)
        if found is not None:
            splits[split] = Field(path, found, fields[found])
    return Given(path, features, labels, edges, splits, looked_for, [path], num_nodes)


# --------------------------------------------------------------------------------------
# Readers
# --------------------------------------------------------------------------------------

def detect_format(path: Path) -> str:
    """The format of `path`: a directory with raw/ and split/ (or raw/edge.csv.gz) is OGB's; a file starting with
    DGL's magic number is DGL's; a zip archive holding .npy members is an .npz, one holding
    a data.pkl a torch.save file."""
    if path.is_dir():
        if (path / "raw").is_dir() and ((path / "split").is_dir() or (path / OGB_FILES[0]).is_file()):
            return "ogb"
        raise DatasetError(f"{path}: a directory, but not an OGB node-property directory (raw/ and "
                           f"split/); give a file, or the format with --format ({', '.join(FORMATS)})")
    with open(path, "rb") as fh:
        head = fh.read(8)
    if head == DGL_MAGIC:
        return "dgl"
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            members = zf.namelist()
        if any(m.endswith(".npy") for m in members):
            return "npz"
        if any(m.endswith("data.pkl") for m in members):
            return "pyg"
    if head[:1] == b"\x80":
        raise DatasetError(f"{path}: a pickle, not a zip-format torch.save file (torch < 1.6 or "
                           f"_use_new_zipfile_serialization=False): save it again with a current torch")
    raise DatasetError(f"{path}: format not recognised (not a torch.save file, a DGL graph, an .npz "
                       f"or an OGB directory); name it with --format ({', '.join(FORMATS)})")


def _restricted_pickle(classes: list):
    """A pickle module whose Unpickler resolves only torch's weights-only globals and
    `classes`: for a torch without torch.serialization.safe_globals / add_safe_globals
    (before 2.4). Any other global in the file is refused, so no code of the file's
    choosing runs."""
    import collections
    import pickle
    import types

    import torch

    allowed = {"collections.OrderedDict": collections.OrderedDict,
               "torch._utils._rebuild_tensor_v2": torch._utils._rebuild_tensor_v2}
    try:
        from torch._weights_only_unpickler import _get_allowed_globals

        allowed.update(_get_allowed_globals())
    except ImportError:
        pass
    allowed.update({f"{c.__module__}.{c.__qualname__}": c for c in classes})

    class Unpickler(pickle.Unpickler):
        def find_class(self, module, name):
            if f"{module}.{name}" in allowed:
                return allowed[f"{module}.{name}"]
            raise pickle.UnpicklingError(f"{module}.{name} is not allowed: only tensors and PyG's "
                                         "Data are read")

    mod = types.ModuleType("gnnscale_weights_only_pickle")
    mod.Unpickler = Unpickler
    mod.load = lambda fh, **kwargs: Unpickler(fh, **kwargs).load()
    mod.UnpicklingError = pickle.UnpicklingError
    return mod


def _torch_load(path: Path):
    """torch.load with weights only: tensors, containers and PyG's Data classes."""
    import torch

    classes = []
    try:
        from torch_geometric.data import Data
        from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
        from torch_geometric.data.storage import GlobalStorage

        classes = [Data, DataEdgeAttr, DataTensorAttr, GlobalStorage]
    except ImportError:  # no PyG here: plain dicts of tensors only
        pass
    ser = torch.serialization
    try:
        if hasattr(ser, "safe_globals"):
            with ser.safe_globals(classes):
                return torch.load(path, map_location="cpu", weights_only=True)
        if hasattr(ser, "add_safe_globals"):
            ser.add_safe_globals(classes)
            return torch.load(path, map_location="cpu", weights_only=True)
        return torch.load(path, map_location="cpu", pickle_module=_restricted_pickle(classes))
    except Exception as exc:  # torch raises many kinds for foreign or damaged files
        raise DatasetError(f"{path}: cannot be read as a torch.save file of tensors or a PyG Data "
                           f"(weights only, nothing else is unpickled): {_one_line(exc)}") from exc


def _numpy(value):
    """A tensor (or anything array-like) as a NumPy array; other values unchanged."""
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        return value.numpy() if not value.is_sparse else value
    return value


def read_pyg(path: Path, names: dict, **_) -> Given:
    obj = _torch_load(path)
    try:
        from torch_geometric.data import Data
    except ImportError:
        Data = ()  # noqa: N806 (no PyG: no Data can have been loaded)
    if isinstance(obj, Data):
        fields = obj.to_dict()
    elif isinstance(obj, dict):
        fields = dict(obj)
    else:
        raise DatasetError(f"{path}: holds a {type(obj).__module__}.{type(obj).__qualname__}, not a "
                           "torch_geometric Data of one homogeneous graph (nor a dict of tensors)")
    fields = {k: _numpy(v) for k, v in fields.items()}
    num_nodes = fields.pop("num_nodes", None)
    if "edge_index" not in fields:
        raise DatasetError(f"{path}: no field 'edge_index' (has {', '.join(sorted(fields))})")
    edges = Field(path, "edge_index", ("coo", fields["edge_index"]))
    return _fields_given(fields, path, "pyg", names, edges, num_nodes if isinstance(num_nodes, int) else None)


def read_dgl(path: Path, names: dict, **_) -> Given:
    with open(path, "rb") as fh:
        if fh.read(8) != DGL_MAGIC:
            raise DatasetError(f"{path}: not a file of dgl.save_graphs (it starts with DGL's magic number "
                               f"0x{DGL_MAGIC[::-1].hex().upper()})")
    import dgl

    try:
        graphs, _labels = dgl.load_graphs(str(path))
    except Exception as exc:  # DGL raises DGLError or RuntimeError (with a C++ stack trace) for damaged files
        raise DatasetError(f"{path}: cannot be read with dgl.load_graphs: "
                           f"{_one_line(str(exc).split('Stack trace')[0])}") from exc
    if len(graphs) != 1:
        raise DatasetError(f"{path}: holds {len(graphs)} graphs; node classification imports one")
    g = graphs[0]
    if len(g.ntypes) != 1 or len(g.canonical_etypes) != 1:
        raise DatasetError(f"{path}: a heterogeneous graph (node types {g.ntypes}, edge types "
                           f"{[e[1] for e in g.canonical_etypes]}); only homogeneous graphs can be imported")
    src, dst = g.edges()
    edges = Field(path, "edges", ("coo", np.stack([src.numpy(), dst.numpy()])))
    fields = {k: _numpy(v) for k, v in g.ndata.items()}
    return _fields_given(fields, path, "dgl", names, edges, int(g.num_nodes()))


def read_npz(path: Path, names: dict, **_) -> Given:
    npz = _open_npz(path)
    fields = {}
    for key in npz.files:
        try:
            fields[key] = npz[key]
        except (ValueError, OSError) as exc:  # object arrays (pickles) are never loaded
            raise DatasetError(f"{path}: {key}: cannot be read: {_one_line(exc)}") from exc
    if "indptr" in fields and "indices" in fields:
        edges = Field(path, "indptr/indices", ("csc", fields["indptr"], fields["indices"]))
    elif "edge_index" in fields:
        edges = Field(path, "edge_index", ("coo", fields["edge_index"]))
    else:
        raise DatasetError(f"{path}: no edges: neither 'indptr' and 'indices' (CSC) nor 'edge_index' "
                           f"(has {', '.join(sorted(fields))})")
    return _fields_given(fields, path, "npz", names, edges)


def read_ogb(path: Path, names: dict, ogb_split: Optional[str] = None, **_) -> Given:
    for rel in OGB_FILES:
        if not (path / rel).is_file():
            raise DatasetError(f"{path / rel}: missing; an OGB node-property directory holds "
                               f"{', '.join(OGB_FILES)} and split/<kind>/{{train,valid,test}}.csv.gz")
    kinds = sorted(p.name for p in (path / "split").iterdir() if p.is_dir()) if (path / "split").is_dir() else []
    if ogb_split is None and len(kinds) > 1:
        raise DatasetError(f"{path / 'split'}: holds the splits {', '.join(kinds)}; choose one with --ogb-split")
    kind = ogb_split or (kinds[0] if kinds else "<kind>")
    split_dir = path / "split" / kind
    read = [path / rel for rel in OGB_FILES]
    num_nodes = None
    if (path / "raw/num-node-list.csv.gz").is_file():
        read.append(path / "raw/num-node-list.csv.gz")
        num_nodes = int(_read_csv(read[-1], np.int64).sum())
    edges = _read_csv(path / OGB_FILES[0], np.int64)
    if edges.ndim != 2 or edges.shape[1] != 2:
        raise DatasetError(f"{path / OGB_FILES[0]}: edges: expected rows of 2 node ids, found shape "
                           f"{list(edges.shape)}")
    splits, looked_for = {}, {}
    for _, split in SPLITS:
        file = split_dir / f"{'valid' if split == 'val' else split}.csv.gz"
        looked_for[split] = str(file.relative_to(path))
        if file.is_file():
            splits[split] = Field(file, "node ids", _read_csv(file, np.int64).reshape(-1))
            read.append(file)
    return Given(path, Field(path / OGB_FILES[1], "features", _read_csv(path / OGB_FILES[1], np.float32)),
                 Field(path / OGB_FILES[2], "labels", _read_csv(path / OGB_FILES[2]).reshape(-1)),
                 Field(path / OGB_FILES[0], "edges", ("coo", edges.T)), splits, looked_for, read, num_nodes)


READERS = {"pyg": read_pyg, "dgl": read_dgl, "ogb": read_ogb, "npz": read_npz}


# --------------------------------------------------------------------------------------
# Checks and the canonical arrays
# --------------------------------------------------------------------------------------

def parse_split(text: str) -> tuple:
    """'0.65,0.1,0.25' -> (0.65, 0.1, 0.25): train, val, test fractions >= 0, summing to <= 1."""
    try:
        parts = tuple(float(v) for v in str(text).split(","))
    except ValueError:
        parts = ()
    if len(parts) != 3 or any(not 0 <= f <= 1 for f in parts) or sum(parts) > 1 + 1e-9 or parts[0] == 0:
        raise DatasetError(f"--split {text!r}: expected three fractions TRAIN,VAL,TEST, each 0..1, "
                           "train above 0, summing to at most 1, such as 0.65,0.1,0.25")
    return parts


def _features(f: Field, changes: dict) -> np.ndarray:
    x = np.asarray(f.value)
    if x.ndim == 1:
        x = x.reshape(-1, 1)
    if x.ndim != 2 or x.dtype.kind not in "biuf":
        raise DatasetError(f"{f.where}: features must be a numeric [nodes, features] matrix; found "
                           f"shape {list(x.shape)}, dtype {x.dtype}")
    if len(x) == 0:
        raise DatasetError(f"{f.where}: no nodes (0 rows)")
    if x.dtype != np.float32:
        changes["features_dtype"] = f"{x.dtype} -> float32"
    if x.dtype.kind == "f":
        check_finite(f.where, x)  # NaN or inf as given
    x = np.ascontiguousarray(x, dtype=np.float32)
    check_finite(f.where, x)  # float64 values past float32's range
    return x


def _labels(f: Field, n: int, nodes: str, changes: dict) -> np.ndarray:
    y = np.asarray(f.value)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise DatasetError(f"{f.where}: expected one class per node, found shape {list(y.shape)} "
                           "(multi-label or one-hot labels cannot be imported)")
    if len(y) != n:
        raise DatasetError(f"{f.where}: has {len(y)} labels but {nodes}")
    if y.dtype.kind == "f":
        missing = np.isnan(y)
        if missing.any():
            raise DatasetError(f"{f.where}: no label (NaN) for {int(missing.sum())} of {n} nodes, the first "
                               f"node {int(np.argmax(missing))}; every node needs a class 0, 1, ...")
        bad = ~np.isfinite(y) | (y != np.round(y))
        if bad.any():
            i = int(np.argmax(bad))
            raise DatasetError(f"{f.where}: labels must be class numbers 0, 1, ...; found {y[i]} at node {i}")
    elif y.dtype.kind not in "biu":
        raise DatasetError(f"{f.where}: labels must be class numbers 0, 1, ...; found dtype {y.dtype}")
    if y.dtype != np.int64:
        changes["labels_dtype"] = f"{y.dtype} -> int64"
    labels = y.astype(np.int64)
    _check_labels(f.where, labels)
    return labels


def _int_ids(f: Field, value, what: str) -> np.ndarray:
    a = np.asarray(value)
    if a.dtype.kind not in "iu":
        raise DatasetError(f"{f.where}: {what} must be integers; found dtype {a.dtype}")
    return a


def _edges(f: Field, n: int, nodes: str) -> tuple:
    """(src, dst) of the input's edges, checked against n nodes."""
    if f.value[0] == "coo":
        ei = _int_ids(f, f.value[1], "node ids")
        if ei.ndim != 2 or ei.shape[0] != 2:
            raise DatasetError(f"{f.where}: expected shape [2, E] (sources, then destinations); found "
                               f"{list(ei.shape)}")
        src, dst = ei[0], ei[1]
    else:
        indptr = _int_ids(f, f.value[1], "indptr").reshape(-1).astype(np.int64)
        src = _int_ids(f, f.value[2], "indices").reshape(-1)
        if len(indptr) != n + 1:
            raise DatasetError(f"{f.where}: indptr has {len(indptr)} entries but {nodes} (needs {n + 1})")
        if indptr[0] != 0 or indptr[-1] != len(src) or np.any(np.diff(indptr) < 0):
            raise DatasetError(f"{f.where}: indptr must rise from 0 to the {len(src)} entries of indices; "
                               f"runs from {indptr[0]} to {indptr[-1]}"
                               + (", falling somewhere" if np.any(np.diff(indptr) < 0) else ""))
        dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    _check_node_ids(f.where, "edge endpoints", src, n)
    _check_node_ids(f.where, "edge endpoints", dst, n)
    return src, dst


def _given_splits(given: Given, n: int, nodes: str, changes: dict) -> dict:
    missing = [s for _, s in SPLITS if s not in given.splits]
    if missing:
        found = [f.name if f.file == given.path else str(f.file.relative_to(given.path))
                 for f in (given.splits[s] for _, s in SPLITS if s in given.splits)]
        raise DatasetError(
            f"{given.path}: no {' and no '.join(f'{s} split ({given.looked_for[s]})' for s in missing)}"
            f"{'; found ' + ', '.join(found) if found else ''}; name the fields with --train/--val/--test, "
            "or split at random: --split 0.65,0.1,0.25 (seeded by --seed, recorded)")
    out, owner = {}, np.full(n, -1, dtype=np.int64)
    for i, (key, split) in enumerate(SPLITS):
        f = given.splits[split]
        v = np.asarray(f.value)
        if v.ndim == 2 and 1 in v.shape:
            v = v.reshape(-1)
        if v.ndim != 1:
            raise DatasetError(f"{f.where}: expected a mask or a list of node ids, found shape {list(v.shape)}")
        if v.dtype == bool or "mask" in f.name:
            if len(v) != n:
                raise DatasetError(f"{f.where}: a mask of {len(v)} entries but {nodes}")
            if v.dtype != bool and not np.isin(v, (0, 1)).all():
                bad = v[~np.isin(v, (0, 1))][0]
                raise DatasetError(f"{f.where}: a mask holds True/False or 1/0; found {bad}")
            idx = np.flatnonzero(v).astype(np.int64)
        else:
            v = _int_ids(f, v, "node ids")
            _check_node_ids(f.where, "node ids", v, n)
            idx = np.unique(v).astype(np.int64)
            if len(idx) != len(v):
                changes[f"{key}_repeats_removed"] = int(len(v) - len(idx))
        if key == "train_idx" and len(idx) == 0:
            raise DatasetError(f"{f.where}: the training split holds no node")
        taken = owner[idx] >= 0
        if taken.any():
            other = given.splits[SPLITS[int(owner[idx][taken][0])][1]]
            raise DatasetError(f"{f.where}: overlaps {other.name} in {int(taken.sum())} nodes, the first "
                               f"node {int(idx[taken][0])}; the splits must be disjoint")
        owner[idx] = i
        out[key] = idx
    return out


def random_split(n: int, fractions: tuple, seed: int) -> dict:
    """Disjoint sorted train/val/test node ids: a seeded permutation cut at the fractions."""
    perm = np.random.default_rng(seed).permutation(n)
    a = int(round(fractions[0] * n))
    b = min(int(round(fractions[1] * n)), n - a)
    c = min(int(round(fractions[2] * n)), n - a - b)
    return {"train_idx": np.sort(perm[:a]), "val_idx": np.sort(perm[a:a + b]),
            "test_idx": np.sort(perm[a + b:a + b + c])}


def canonical(given: Given, directed: bool = False, split: Optional[tuple] = None, seed: int = 0) -> tuple:
    """(arrays, changes, split record) from what a file holds; DatasetError (one line,
    naming the file, the field and the value) for anything that cannot be imported."""
    changes = {}
    features = _features(given.features, changes)
    n = len(features)
    nodes = f"{given.features.where} has {n} nodes"
    if given.num_nodes is not None and given.num_nodes != n:
        raise DatasetError(f"{given.features.where}: has {n} rows but the graph has {given.num_nodes} nodes")
    labels = _labels(given.labels, n, nodes, changes)
    src, dst = _edges(given.edges, n, nodes)
    if split is not None:
        splits = random_split(n, split, seed)
        if len(splits["train_idx"]) == 0:
            raise DatasetError(f"--split {','.join(map(str, split))}: leaves no training node of {n}")
        record = {"kind": "random", "fractions": list(split), "seed": int(seed),
                  "given_fields_ignored": [f.name for f in given.splits.values()]}
    else:
        splits = _given_splits(given, n, nodes, changes)
        record = {"kind": "given", "fields": {k: given.splits[s].where for k, s in SPLITS}}
    indptr, indices, edge_stats = csc_from_edges(src, dst, n, symmetrize=not directed)
    changes.update(edge_stats)
    arrays = {"indptr": indptr, "indices": indices, "features": features, "labels": labels, **splits}
    return arrays, changes, record


# --------------------------------------------------------------------------------------
# import_graph()
# --------------------------------------------------------------------------------------

def _file_record(path: Path, base: Path) -> dict:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(16 << 20), b""):
            h.update(block)
    st = path.stat()
    rel = str(path.relative_to(base)) if path != base else path.name
    return {rel: {"bytes": st.st_size, "sha256": h.hexdigest(),
                  "mtime_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(st.st_mtime))}}


def check_import_name(name: str, root) -> Path:
    """`<root>/<name>` when `name` may name an imported dataset; else DatasetError."""
    final = Path(root).absolute() / name
    if not NAME_RE.fullmatch(name or ""):
        raise DatasetError(f"{final}: --name {name!r}: a dataset name is letters, digits, '.', '_' and '-', "
                           "not starting with '.', '_' or '-'")
    if name in DATASET_NAMES:
        raise DatasetError(f"{final}: --name {name!r} is one of the suite's own datasets (it makes "
                           f"{', '.join(DATASET_NAMES)} itself); choose another name")
    if name == "raw":
        raise DatasetError(f"{final}: --name 'raw' is where the raw files of converted datasets go; "
                           "choose another name")
    return final


def import_graph(path, name: str, root=DEFAULT_ROOT, fmt: Optional[str] = None, directed: bool = False,
                 split: Optional[tuple] = None, seed: int = 0, names: Optional[dict] = None,
                 ogb_split: Optional[str] = None, force: bool = False) -> Path:
    """Read the graph at `path` and write it as `<root>/<name>/` (checked, hashed, atomic).

    fmt: one of FORMATS (default: detected). directed: keep the edges as given instead of
    adding the reverse ones (recorded). split: (train, val, test) fractions of a random split
    seeded by `seed`, replacing any split in the file. names: field names {"feat", "label",
    "train", "val", "test"} where they differ from the format's. An existing `<root>/<name>`
    is refused unless `force`; then it is moved to `<root>/.replaced/<name>-<time>/` (kept,
    recorded in the new meta.json) once the new one is complete. Nothing is written when the
    input is refused. Returns the dataset's path."""
    t0 = time.perf_counter()
    path = Path(path).absolute()
    root = Path(root)
    final = check_import_name(name, root)
    _check_import(path, final, root, fmt, force)
    fmt = fmt or detect_format(path)
    log.info("reading %s as %s ...", path, fmt)
    given = READERS[fmt](path, names or {}, ogb_split=ogb_split)
    arrays, changes, split_record = canonical(given, directed, split, seed)
    source = _import_source(path, fmt, given, directed, split_record, changes)
    stats = {**{k: v for k, v in changes.items() if isinstance(v, int)}, **_stats(arrays),
             "build_seconds": round(time.perf_counter() - t0, 2)}
    out, replaced_to = _write_import(root, name, arrays, source, stats, directed, force)
    load(out)  # what was written passes the checks every reader makes
    if replaced_to is not None:
        log.warning("the dataset %s was replaced; the earlier one is kept at %s (delete it when no longer "
                    "needed)", out, replaced_to)
    log.info("imported %s as %s in %.1f s", path, out, time.perf_counter() - t0)
    return out


def _check_import(path: Path, final: Path, root: Path, fmt: Optional[str], force: bool) -> None:
    """Refuse an import before reading anything: no input, a name taken (without force), an
    unknown format."""
    if not path.exists():
        raise DatasetError(f"{path}: no such file or directory")
    if final.exists() and not force:
        src = imported_source(final)
        what = f"imported from {src.get('path')}" if src else "not an imported dataset"
        raise DatasetError(f"{final}: a dataset named {final.name!r} exists ({what}); add --force to replace it "
                           f"(the existing one is then moved to {root.absolute() / REPLACED_DIR}/, not deleted)")
    if fmt is not None and fmt not in FORMATS:
        raise DatasetError(f"{path}: --format {fmt!r} is unknown; allowed: {', '.join(FORMATS)}")


def _import_source(path: Path, fmt: str, given: Given, directed: bool, split_record, changes: dict) -> dict:
    """meta.json's `source` of an imported graph: where it came from and what the import changed."""
    base = path if path.is_dir() else path.parent
    return {"kind": "imported", "format": fmt, "path": str(path),
            "files": {k: v for f in given.read for k, v in _file_record(f, base).items()},
            "fields": {"features": given.features.where, "labels": given.labels.where,
                       "edges": given.edges.where},
            "edges": "directed: kept as given" if directed else "made symmetric (reverse edges added)",
            "directed": bool(directed), "split": split_record, "changes": changes,
            "imported_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def _write_import(root: Path, name: str, arrays: dict, source: dict, stats: dict, directed: bool,
                  force: bool) -> tuple:
    """Write the imported dataset under the dataset's lock; an existing one (force) is moved
    aside and recorded in `source`. Returns (its path, where the old one went or None)."""
    final = root.absolute() / name
    root.mkdir(parents=True, exist_ok=True)
    with _lock(root, name):
        for stale in root.glob(f".{name}.tmp-*"):  # a killed writer's leftovers: never a dataset
            shutil.rmtree(stale, ignore_errors=True)
        replaced_to = None
        if final.exists():
            if not force:  # made while this import read its input
                raise DatasetError(f"{final}: a dataset named {name!r} appeared meanwhile; add --force to replace it")
            replaced_to = root.absolute() / REPLACED_DIR / f"{name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:6]}"
            try:
                old_hash = read_meta(final)["content_hash"]
            except DatasetError:
                old_hash = None
            source["replaced"] = {"moved_to": str(replaced_to), "content_hash": old_hash}
        out = write_dataset(root, name, arrays, source, stats, symmetric=not directed, replaced_to=replaced_to)
    return out, replaced_to
