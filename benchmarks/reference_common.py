"""What the two example-style reference loops share: their options and how they report.

Kept apart from the loops themselves so that each reference reads like its framework's own
multi-GPU example, and the two cannot drift apart in what they accept or write.
"""

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Example-style DDP training loop (benchmark reference).")
    p.add_argument("--dataset", default="small")
    p.add_argument("--data-root", default="results/datasets")
    p.add_argument("--model", choices=("sage", "gat"), default="sage")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--fanouts", default="10,10,10", help="hop nearest the seeds first (reversed for DGL)")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--heads", type=int, default=1)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write the per-epoch times here (JSON)")
    p.add_argument("--graph-formats", choices=("all", "csc"), default="all",
                   help="DGL: every sparse format up front, as DGL's example (all), or CSC only, as the runner")
    return p.parse_args(argv)



def finish(framework: str, args, epoch_times: list, steps: int, startup_s: dict) -> None:
    """Gather every rank's epoch times to rank 0, which prints and writes them; then exit."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    mine = {"rank": rank, "epoch_times_s": epoch_times, "steps_per_epoch": steps,
            "threads": torch.get_num_threads(), "startup_s": startup_s}
    ranks = [None] * world_size
    dist.all_gather_object(ranks, mine)
    if rank == 0:
        report = {"framework": framework, "model": args.model, "world_size": world_size, "args": vars(args),
                  "ranks": ranks}
        print(json.dumps(report), flush=True)
        if args.out:
            with open(args.out, "w") as fh:
                json.dump(report, fh, indent=1)
    # No destroy_process_group(): gloo's destructor can deadlock a finished rank (see the
    # runner's harness); every collective has completed, so leave without teardown.
    sys.stdout.flush()
    os._exit(0)
