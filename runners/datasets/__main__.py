"""`python -m runners.datasets {prepare,import,twin,verify,info,list}`: the datasets' command line."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from runners.datasets import *  # noqa: F401,F403  (the commands call the package's API)
from runners.datasets import DATASET_NAMES, DEFAULT_ROOT, FORMATS, import_graph, prepare, twins
from runners.datasets.importers import parse_split
from runners.launch import console

log = logging.getLogger("gnnscale.datasets")


# --------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
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
    _add_import(sub)
    _add_twin(sub)
    vp = sub.add_parser("verify", help="recompute the hashes and check the adjacency")
    vp.add_argument("name", help="dataset name or directory")
    vp.add_argument("--root", default=DEFAULT_ROOT)
    vp.add_argument("--files", action="store_true",
                    help="only the file hashes, re-hashing only files changed since the last "
                         "verification (what a run checks before launch)")
    vp.add_argument("--no-cache", action="store_true", help="with --files: re-hash every file")
    ip = sub.add_parser("info", help="print meta.json of a prepared dataset; for a twin, then its statistics "
                                     "beside its source's")
    ip.add_argument("name", help="dataset name or directory")
    ip.add_argument("--root", default=DEFAULT_ROOT)
    ip.add_argument("--json", action="store_true", help="meta.json only")
    lp = sub.add_parser("list", help="list the dataset names, and the datasets imported under --root")
    lp.add_argument("--root", default=DEFAULT_ROOT)
    return p


def _add_import(sub) -> None:
    mp = sub.add_parser("import", help="import a graph saved by PyG, DGL, OGB or NumPy as dataset NAME "
                                       "(docs/datasets.md); prints its path and content hash")
    mp.add_argument("path", help="a torch.save'd PyG Data, a dgl.save_graphs file, an OGB node-property "
                                 "directory (raw/, split/) or an .npz")
    mp.add_argument("--name", required=True, help="the dataset's name, for --dataset NAME and a sweep's dataset:")
    mp.add_argument("--root", default=DEFAULT_ROOT)
    mp.add_argument("--format", choices=FORMATS, default=None, help="default: detected from the path")
    mp.add_argument("--feat", help="features field (default: x; DGL: feat)")
    mp.add_argument("--label", help="labels field (default: y; DGL: label)")
    for split in ("train", "val", "test"):
        mp.add_argument(f"--{split}", f"--{split}-mask", dest=split, metavar="FIELD",
                        help=f"{split} split field: a mask or node ids (default: {split}_mask, else {split}_idx)")
    mp.add_argument("--ogb-split", metavar="KIND", help="the split/KIND/ of an OGB directory holding several")
    mp.add_argument("--split", metavar="TRAIN,VAL,TEST",
                    help="a random split by these fractions (e.g. 0.65,0.1,0.25), replacing the file's")
    mp.add_argument("--seed", type=int, default=0, help="seed of --split (recorded)")
    mp.add_argument("--directed", action="store_true",
                    help="keep the edges as given (default: add the reverse edges, making the graph symmetric)")
    mp.add_argument("--force", action="store_true", help="replace an existing dataset NAME (the old one is "
                                                         "moved to ROOT/.replaced/, not deleted)")


def _add_twin(sub) -> None:
    tp = sub.add_parser("twin", help="generate a synthetic graph shaped like a dataset (nodes, degree "
                                     "distribution, features, classes and their sizes, homophily) to share in its "
                                     "place (docs/datasets.md); prints its path and content hash")
    tp.add_argument("source", help="the dataset to fit: a name under --root (one of the suite's, or imported) "
                                   "or a dataset directory")
    tp.add_argument("--name", required=True, help="the twin's name, for --dataset NAME and a sweep's dataset:")
    tp.add_argument("--root", default=DEFAULT_ROOT, help="where the source is looked up and the twin written")
    tp.add_argument("--seed", type=int, default=0, help="the generator's seed (recorded)")
    tp.add_argument("--rounds", type=int, default=6, help="most rounds of fitting (each generates the graph once)")
    tp.add_argument("--feature-snr", type=float, default=1.0,
                    help="class separation of the synthetic features (they are not fitted)")
    tp.add_argument("--force", action="store_true", help="make an existing twin NAME again")


def _prepare(args) -> None:
    path = prepare(args.name, args.root, args.raw_dir, args.download, args.force)
    print(f"{path} {read_meta(path)['content_hash']}")


def _import(args) -> None:
    names = {k: getattr(args, k) for k in ("feat", "label", "train", "val", "test") if getattr(args, k)}
    split = parse_split(args.split) if args.split is not None else None
    path = import_graph(args.path, args.name, args.root, args.format, args.directed, split, args.seed,
                        names, args.ogb_split, args.force)
    print(f"{path} {read_meta(path)['content_hash']}")


def _twin(args) -> None:
    path = twins.make_twin(args.source, args.name, args.root, args.seed, args.rounds, args.feature_snr,
                           args.force)
    print(f"{path} {read_meta(path)['content_hash']}")


def _verify(args) -> None:
    if args.files:
        done = verify_files(args.name, args.root, use_cache=not args.no_cache)
        log.info("hashed %d file(s), %d unchanged since the last verification, in %.3f s",
                 len(done["hashed"]), len(done["cached"]), done["seconds"])
        print(f"ok {resolve(args.name, args.root)} {done['content_hash']}")
        return
    t0 = time.perf_counter()
    graph = load(args.name, args.root, verify_hash=True)
    log.info("verified in %.1f s", time.perf_counter() - t0)
    print(f"ok {graph.path} {graph.content_hash}")


def _info(args) -> None:
    path = resolve(args.name, args.root)
    meta = read_meta(path)
    print(json.dumps(meta, indent=2))
    if not args.json and meta.get("source", {}).get("kind") == twins.TWIN_KIND:
        print()
        print(twins.info_text(meta, path))


def _list(args) -> None:
    for name in DATASET_NAMES:
        kind = "synthetic" if name in SYNTHETIC else f"converted from {RAW_SOURCES[name]['url']}"
        print(f"{name}\t{kind}")
    root = Path(args.root)
    for path in sorted(root.iterdir()) if root.is_dir() else []:
        source = user_source(path) if NAME_RE.fullmatch(path.name) else None
        if source and source.get("kind") == twins.TWIN_KIND:
            of = source.get("twin_of", {})
            print(f"{path.name}\ttwin of {of.get('name')} ({str(of.get('content_hash'))[:12]})")
        elif source:
            print(f"{path.name}\timported ({source.get('format')}) from {source.get('path')}")


COMMANDS = {"prepare": _prepare, "import": _import, "twin": _twin, "verify": _verify, "info": _info,
            "list": _list}


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    try:
        COMMANDS[args.cmd](args)
    except DatasetError as exc:
        console.error(str(exc))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
