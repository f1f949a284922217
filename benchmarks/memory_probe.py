"""One rank of the memory measurement of `benchmarks.measure`: what the graph costs in memory.

Each rank builds the graph exactly as the runner does (`datasets.load`, then the runner's own
adapter and its training loader, one mini-batch drawn), reads every page of the dataset's
arrays, and reports its proportional set size (PSS: shared pages divided among the processes
that map them) before and after. Everything else a rank needs (imports, the framework's lazy
initialisation, the process group) is done first on a warm-up dataset, so the difference is
the graph. On one machine the memory-mapped arrays are shared, so the sum of the differences
over 2 ranks should equal that of 1 rank; a private copy per rank shows up as a larger sum.

    torchrun --standalone --nproc-per-node 2 -m benchmarks.memory_probe --framework dgl \
        --dataset /tmp/graph --warmup results/datasets/tiny --out pss.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile

import numpy as np
import psutil
import torch
import torch.distributed as dist

from runners import datasets
from runners.adapters import get_adapter_class, registry
from runners.config import build_parser, config_from_args
from runners.rank.seeds import split_seeds

PAGE = 4096


def pss_bytes() -> int:
    """PSS of this process and its children (loader workers)."""
    me = psutil.Process()
    return sum(p.memory_full_info().pss for p in [me, *me.children(recursive=True)])


def touch(arr: np.ndarray) -> None:
    """Read one byte of every page, so every page of a memory map is mapped."""
    flat = np.asarray(arr).reshape(-1).view(np.uint8)
    int(flat[::PAGE].sum())


def build(framework: str, path, workers: int, rank: int, world: int):
    """The runner's adapter and training loader over the graph at `path`, one batch drawn."""
    graph = datasets.load(path)
    argv = ["--framework", framework, "--model", "sage", "--devices", str(world), "--batch-size", "64",
            "--workers", str(workers), "--dataset", "tiny", "--epochs", "1", "--fanouts", "5,5,5",
            "--out", tempfile.gettempdir(), "--device", "cpu"]
    cfg = config_from_args(build_parser().parse_args(argv), 0, psutil.cpu_count())
    adapter = get_adapter_class(framework)(cfg, graph, rank, world, torch.device("cpu"))
    seeds = torch.tensor(split_seeds(graph.train_idx, rank, world, cfg.seed, cfg.batch_size, False),
                         dtype=torch.long).share_memory_()  # as the harness hands it to both frameworks
    loader = adapter.train_loader(seeds, None)
    it = iter(loader)
    adapter.unpack(next(it))
    for key, _ in datasets.FILES:
        touch(getattr(graph, key))
    return graph, adapter, loader, it


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--framework", choices=registry.FRAMEWORK_NAMES, required=True)
    p.add_argument("--dataset", required=True, help="directory of the measured dataset")
    p.add_argument("--warmup", required=True, help="directory of a small dataset for the warm-up")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    warm = build(args.framework, args.warmup, args.workers, rank, world)
    del warm
    gc.collect()
    dist.barrier()
    before = pss_bytes()
    dist.barrier()
    kept = build(args.framework, args.dataset, args.workers, rank, world)  # noqa: F841 (held while measured)
    dist.barrier()
    after = pss_bytes()
    dist.barrier()

    ranks = [None] * world
    dist.all_gather_object(ranks, {"rank": rank, "pss_before": before, "pss_after": after})
    if rank == 0:
        graph_bytes = sum(getattr(kept[0], key).nbytes for key, _ in datasets.FILES)
        report = {"framework": args.framework, "world_size": world, "workers": args.workers,
                  "dataset": args.dataset, "graph_bytes": graph_bytes, "ranks": ranks,
                  "pss_delta_total": sum(r["pss_after"] - r["pss_before"] for r in ranks)}
        with open(args.out, "w") as fh:
            json.dump(report, fh, indent=1)
        print(json.dumps(report), flush=True)
    del kept  # stops loader workers
    gc.collect()
    # No destroy_process_group(): gloo's destructor can deadlock a finished rank (seen here
    # with loader workers; the runner's harness avoids it the same way).
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
