"""`python -m runners.datasets {prepare,verify,info,list}`: the datasets' command line."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from runners.datasets import *  # noqa: F401,F403  (the commands call the package's API)
from runners.datasets import DATASET_NAMES, DEFAULT_ROOT, prepare

log = logging.getLogger("gnnscale.datasets")


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

