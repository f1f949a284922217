"""The canonical graph split into P partitions for the `partitioned` strategy: made once, cached,
hashed and verified like a dataset, with its quality recorded.

    python -m runners.partitioned.split prepare tiny --parts 2 --method metis
    python -m runners.partitioned.split verify results/partitions/tiny-<hash>-p2-metis

A partition directory `<root>/<dataset>-<dataset hash[:16]>-p<P>-<method>/` holds DGL's files
(made by runners.adapters.dgl_dist.partition: `gnnscale.json`, `part<k>/`, the id maps),
`manifest.json` (the dataset's content hash, P, the method, every file's size and sha256, and
a content hash over them) and `quality.json` (edge cut, node/edge/training-node balance and halo
nodes per partition). A changed dataset has another hash, so another directory: a partition is
never used with a dataset it was not made from. Writes are atomic (a temporary sibling renamed
into place); `verify` re-hashes every file whose size, mtime, ctime or inode changed since it
last matched (`verified.json`, as runners.datasets does).

Framework-free (numpy): DGL is imported only to make a partition.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

import numpy as np

from runners import datasets
from runners.datasets.format import _column_chunks, _stat_key  # chunked reads and stat keys, as datasets
from runners.launch import console

DEFAULT_ROOT = "results/partitions"
METHODS = ("metis", "random")
FORMAT_VERSION = 1
MANIFEST, QUALITY, VERIFIED = "manifest.json", "quality.json", "verified.json"
_HASH_CHUNK = 64 << 20


class PartitionError(ValueError):
    """A partition cannot be made or used; the message names the value or file and the problem."""


def check_request(parts: int, method: str) -> None:
    """Refuse a bad request before any work, naming the value and what is allowed."""
    if method not in METHODS:
        raise PartitionError(f"part_method {method!r} is unknown; allowed: {', '.join(METHODS)}")
    if not isinstance(parts, int) or parts < 1:
        raise PartitionError(f"parts {parts!r}: must be a whole number of at least 1 (one partition per host)")


def directory(root, dataset: str, dataset_hash: str, parts: int, method: str) -> Path:
    return Path(root) / f"{dataset}-{dataset_hash[:16]}-p{parts}-{method}"


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_HASH_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def content_hash(files: dict) -> str:
    h = hashlib.sha256(f"gnnscale-partitions-v{FORMAT_VERSION}\n".encode())
    for name in sorted(files):
        h.update(f"{name}:{files[name]['bytes']}:{files[name]['sha256']}\n".encode())
    return h.hexdigest()


def quality(graph, assignment: np.ndarray, per_part: list) -> dict:
    """Edge cut and balance of a node -> partition assignment on the canonical graph. An edge
    belongs to its destination's partition (as DGL assigns it); it is cut when its source lies
    in another partition (each direction of an undirected edge counts)."""
    parts = len(per_part)
    indptr, indices = graph.indptr, graph.indices
    cut = 0
    edges = np.zeros(parts, dtype=np.int64)
    for lo, hi in _column_chunks(indptr, 1 << 24):
        dst_part = np.repeat(assignment[lo:hi], np.diff(indptr[lo:hi + 1]))
        src_part = assignment[np.asarray(indices[indptr[lo]:indptr[hi]])]
        cut += int(np.count_nonzero(src_part != dst_part))
        edges += np.bincount(dst_part, minlength=parts)
    nodes = np.bincount(assignment, minlength=parts)
    train = np.bincount(assignment[np.asarray(graph.train_idx)], minlength=parts)

    def balance(counts):
        return round(float(counts.max() / counts.mean()), 4) if counts.sum() else None

    return {
        "edge_cut": cut, "edge_cut_fraction": round(cut / max(graph.num_edges, 1), 6),
        "node_balance": balance(nodes), "edge_balance": balance(edges), "train_node_balance": balance(train),
        "balance_rule": "largest partition / mean partition (1.0 = perfectly balanced)",
        "per_partition": [{**p, "nodes": int(nodes[i]), "edges": int(edges[i]), "train_nodes": int(train[i])}
                          for i, p in enumerate(per_part)],
    }


def _fsync_write(path: Path, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def prepare(dataset: str, parts: int, method: str, data_root=datasets.DEFAULT_ROOT, root=DEFAULT_ROOT,
            force: bool = False) -> Path:
    """The verified partition directory of `dataset` into `parts` by `method`, made if missing or
    invalid. Raises PartitionError (bad request, a file that fails its hash) or DatasetError."""
    check_request(parts, method)
    graph_path = datasets.prepare(dataset, root=data_root)
    datasets.verify_files(graph_path)  # the hash the partition is keyed by is that of these bytes
    graph = datasets.load(graph_path)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = directory(root, dataset, graph.content_hash, parts, method)
    with datasets._lock(root, final.name):  # every node of a run may ask for it at once
        for stale in root.glob(f".{final.name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        if final.exists() and not force:
            try:
                verify(final, graph.content_hash)
                return final
            except PartitionError as exc:
                console.say(f"{exc}; partitioning again", file=sys.stderr)
        tmp = root / f".{final.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            t0 = time.perf_counter()
            from runners.adapters.dgl_dist import partition  # DGL only to make one

            made = partition(graph, parts, method, tmp)
            seconds = round(time.perf_counter() - t0, 3)
            q = {"dataset": dataset, "dataset_hash": graph.content_hash, "parts": parts, "method": method,
                 **quality(graph, made["assignment"], made["per_part"])}
            _fsync_write(tmp / QUALITY, json.dumps(q, indent=1) + "\n")
            files = {str(p.relative_to(tmp)): {"bytes": p.stat().st_size, "sha256": file_sha256(p)}
                     for p in sorted(tmp.rglob("*")) if p.is_file()}
            manifest = {"format_version": FORMAT_VERSION, "dataset": dataset, "dataset_hash": graph.content_hash,
                        "parts": parts, "method": method, "part_config": made["part_config"],
                        "graph_name": made["graph_name"], "dgl_version": made["dgl_version"],
                        "build_seconds": seconds, "files": files, "content_hash": content_hash(files),
                        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            _fsync_write(tmp / MANIFEST, json.dumps(manifest, indent=1) + "\n")
            if final.exists():
                shutil.rmtree(final)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        verify(final, graph.content_hash)
    return final


def read_manifest(path: Path) -> dict:
    try:
        manifest = json.loads((Path(path) / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise PartitionError(f"{Path(path) / MANIFEST}: missing or unreadable ({exc}); make the partition again "
                             "(python -m runners.partitioned.split prepare ...)") from exc
    if manifest.get("format_version") != FORMAT_VERSION:
        raise PartitionError(f"{Path(path) / MANIFEST}: format_version {manifest.get('format_version')!r} is not "
                             f"the supported {FORMAT_VERSION}")
    return manifest


def verify(path, dataset_hash: str | None = None) -> dict:
    """Check every file of a partition directory against its manifest (sha256; a file unchanged
    since it last matched, by size, mtime, ctime and inode, is trusted), and that it was made
    from the dataset with `dataset_hash`. Returns the manifest; raises PartitionError naming the
    first file that differs."""
    path = Path(path)
    manifest = read_manifest(path)
    if dataset_hash is not None and manifest["dataset_hash"] != dataset_hash:
        raise PartitionError(f"{path / MANIFEST}: made from dataset hash {manifest['dataset_hash'][:16]}..., "
                             f"not {dataset_hash[:16]}... (the dataset changed)")
    files = manifest["files"]
    if content_hash(files) != manifest["content_hash"]:
        raise PartitionError(f"{path / MANIFEST}: content_hash does not match its file hashes")
    try:
        seen = json.loads((path / VERIFIED).read_text()).get("files", {})
    except (OSError, ValueError, AttributeError):
        seen = {}
    record = {}
    for name, info in files.items():
        f = path / name
        if not f.is_file():
            raise PartitionError(f"{f}: missing")
        stat = _stat_key(f)
        if stat["size"] != info["bytes"]:
            raise PartitionError(f"{f}: {stat['size']} bytes, the manifest says {info['bytes']}")
        if seen.get(name) == {**stat, "sha256": info["sha256"]}:
            record[name] = seen[name]
            continue
        digest = file_sha256(f)
        if digest != info["sha256"]:
            raise PartitionError(f"{f}: hash mismatch: contents changed since the partition was made (sha256 "
                                 f"{digest[:16]}..., manifest {info['sha256'][:16]}...); make it again (--force)")
        record[name] = {**stat, "sha256": digest}
    if record != seen:
        with contextlib.suppress(OSError):
            tmp = path / f".{VERIFIED}.tmp-{os.getpid()}"
            tmp.write_text(json.dumps({"files": record}, indent=1))
            os.replace(tmp, path / VERIFIED)
    return manifest


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m runners.partitioned.split", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    prep = sub.add_parser("prepare", help="make (or verify) the partitions of a dataset")
    prep.add_argument("dataset", help=", ".join(datasets.DATASET_NAMES) + ", or a dataset imported under --data-root")
    prep.add_argument("--parts", type=int, required=True)
    prep.add_argument("--method", default="metis", help=f"one of {', '.join(METHODS)}")
    prep.add_argument("--data-root", default=datasets.DEFAULT_ROOT)
    prep.add_argument("--root", default=DEFAULT_ROOT)
    prep.add_argument("--force", action="store_true")
    prep.add_argument("--marker", help="also write this JSON file naming the directory (Snakemake's output)")
    ver = sub.add_parser("verify", help="check a partition directory's files against its manifest")
    ver.add_argument("path")
    args = p.parse_args(argv)
    try:
        if args.cmd == "verify":
            m = verify(args.path)
            print(f"{args.path}: ok ({len(m['files'])} files, content hash {m['content_hash'][:16]}...)")
            return 0
        path = prepare(args.dataset, args.parts, args.method, args.data_root, args.root, args.force)
    except (PartitionError, datasets.DatasetError) as exc:
        console.error(str(exc))
        return 2
    q = json.loads((path / QUALITY).read_text())
    print(f"{path}: {q['parts']} partitions by {q['method']}, edge cut {q['edge_cut_fraction']:.1%}, node balance "
          f"{q['node_balance']}, edge balance {q['edge_balance']}")
    if args.marker:
        manifest = read_manifest(path)
        Path(args.marker).parent.mkdir(parents=True, exist_ok=True)
        Path(args.marker).write_text(json.dumps({"path": str(path.resolve()), "content_hash": manifest["content_hash"],
                                                 "dataset_hash": manifest["dataset_hash"]}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
