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
edges, and the graph is symmetric (every source here is undirected; a graph imported with
`--directed` is not, and its meta.json's `adjacency.symmetric` says so).

Names: `tiny`, `small`, `reddit-shape`, `wide` are generated (deterministic from a seed);
`reddit` and `ogbn-products` are converted from raw files the user places (or downloads).
Any other name is a graph the user imported (`runners.datasets.importers`, the `import`
command): its files are the user's, checked before use but never regenerated.

API: `prepare(name, root, raw_dir, download) -> Path`, `load(name_or_path, root,
verify_hash) -> Graph`, `verify_files(name_or_path, root) -> dict` (the check a run makes
before launch: re-hashes only files changed since `<dataset>/verified.json`),
`DatasetError`, `import_graph(path, name, root, ...)`, `make_twin(source, name, root, ...)`.
CLI: `python -m runners.datasets {prepare,import,twin,verify,info,list}`. Only numpy is needed
(pandas for ogbn-products and OGB imports), so importing this module is cheap and framework-free.

Modules: `format` (the on-disk format, loading, verification), `writing` (atomic writes of a
dataset), `generators` (synthetic graphs), `converters` (raw files of real datasets),
`importers` (a user's graph saved by PyG, DGL, OGB or NumPy; framework code is imported
only when such a file is read), `twins` (a synthetic graph fitted to another one, to share in
its place); this package adds `prepare` and re-exports their public names, so callers import
`runners.datasets` only.
"""
from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

from runners.datasets.converters import (CONVERTERS, RAW_SOURCES, convert_ogbn_products,  # noqa: F401
                                         convert_reddit, default_raw_dir, download_raw, _require_raw)
from runners.datasets.format import *  # noqa: F401,F403  (the format is this package's API)
from runners.datasets.format import DatasetError, _stats, read_meta  # noqa: F401
from runners.datasets.generators import (GENERATOR, GENERATOR_VERSION, SYNTHETIC, SyntheticSpec,  # noqa: F401
                                         csc_from_edges, generate)
from runners.datasets.importers import FORMATS, import_graph  # noqa: F401,E402
from runners.datasets.twins import make_twin  # noqa: F401,E402
from runners.datasets.writing import _lock, write_dataset  # noqa: F401,E402

log = logging.getLogger("gnnscale.datasets")


# --------------------------------------------------------------------------------------
# prepare()
# --------------------------------------------------------------------------------------

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


def _imported(name: str, root: Path, force: bool) -> Path:
    """An imported dataset's (or a twin's) path once its fast checks pass. Its files are the
    user's: the suite never regenerates, repairs or deletes them; a damaged one is refused."""
    check_name(name, root)  # one of the suite's names, or imported: else say how to import
    path = root / name
    source = user_source(path)
    if source.get("kind") == "twin":
        of = source.get("twin_of", {}).get("name")
        again = (f"{name!r} is a twin of {of!r}; the suite never regenerates a twin: make it again with "
                 f"python -m runners.datasets twin {of} --name {name} --root {root} --force")
    else:
        again = (f"{name!r} was imported from {source.get('path')} ({source.get('format')}); the suite never "
                 f"regenerates an imported dataset: import it again with python -m runners.datasets import "
                 f"{source.get('path')} --name {name} --root {root} --force")
    if force:
        raise DatasetError(f"{path.absolute()}: {again}")
    try:
        load(path)
    except DatasetError as exc:
        raise DatasetError(f"{exc}; {again}") from exc
    return path


def prepare(name: str, root=DEFAULT_ROOT, raw_dir=None, download: bool = False,
            force: bool = False) -> Path:
    """Make `<root>/<name>/` if it is missing, invalid or stale; idempotent. Returns its path.

    Synthetic names are generated; `reddit` and `ogbn-products` are converted from raw files
    in raw_dir (default `<root>/raw/<name>/`), downloaded first when `download` is set. Any
    other name must be a dataset imported under root (`runners.datasets.importers`): it is
    checked and returned, never made again (DatasetError when it fails its checks).
    """
    if name not in DATASET_NAMES:
        return _imported(name, Path(root), force)
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


