"""All-reduce times on this machine, and the latency-bandwidth (alpha-beta) model fitted to them.

    python -m benchmarks.collectives --procs 2,4 --sizes 4K,64K,1M,4M,16M,25M --repeats 20 \
        --out results/benchmarks/collectives.json

For each process count p, p processes on this host (gloo between CPU processes; NCCL with
`--backend nccl`, one GPU each) all-reduce float32 tensors of each size: `--warmup` times, then
`--repeats` timed times. One timing is the slowest rank's, from leaving a barrier to the
all-reduce's return (a collective ends for the job when its last rank has it). The default sizes
run from a few kilobytes to 25 MiB: a GNN's gradient here is about 1 MB, DDP's default bucket
cap is 25 MiB.

The model is the ring all-reduce of Thakur, Rabenseifner and Gropp (IJHPCA 2005):

    t(p, n) = 2 (p - 1) alpha + 2 (p - 1) / p * n * beta

alpha: seconds per message step (latency), beta: seconds per byte (1 / bandwidth). It is fitted
to the medians by non-negative least squares, weighted so that every point counts by its
relative error; the result records the fit, each point's relative error and the largest, and
this machine's environment. With p processes on fewer cores than p, the processes share cores
and the fit describes that, which the result says (`oversubscribed`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import sys
import time
from pathlib import Path

DEFAULT_SIZES = ("4K", "64K", "1M", "4M", "16M", "25M")
UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def parse_size(text: str) -> int:
    """'64K' -> 65536 bytes (K, M, G are powers of 1024); a multiple of 4 (float32 elements)."""
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip().upper())
    if not m or int(m[1]) == 0:
        raise ValueError(f"size {text!r}: give a positive number of bytes, optionally with K, M or G (64K, 1M)")
    n = int(m[1]) * UNITS[m[2]]
    return max(4, n - n % 4)


def ring_steps(p: int) -> tuple:
    """The ring all-reduce's (latency term, bytes term per byte) coefficients at p processes."""
    return 2 * (p - 1), 2 * (p - 1) / p


def fit_alpha_beta(points: list) -> dict:
    """Fit t = 2(p-1) alpha + 2(p-1)/p n beta to [(p, bytes, seconds)] by non-negative least
    squares on relative errors; returns alpha, beta, bandwidth and each point's relative error."""
    import numpy as np
    from scipy.optimize import nnls

    rows = [(*ring_steps(p), n, t) for p, n, t in points if p > 1]
    if len(rows) < 2:
        raise ValueError("the alpha-beta fit needs at least two timings at more than one process")
    a = np.array([[lat / t, per * n / t] for lat, per, n, t in rows])  # each row divided by its time
    (alpha, beta), _ = nnls(a, np.ones(len(rows)))
    predicted = [lat * alpha + per * n * beta for lat, per, n, _ in rows]
    errors = [pr / t - 1 for pr, (*_, t) in zip(predicted, rows)]
    return {"alpha_s": float(alpha), "beta_s_per_byte": float(beta),
            "bandwidth_bytes_per_s": float(1 / beta) if beta > 0 else None,
            "points": [{"procs": p, "bytes": n, "seconds": t, "predicted_s": float(pr), "relative_error": float(e)}
                       for (p, n, t), pr, e in zip([pt for pt in points if pt[0] > 1], predicted, errors)],
            "max_abs_relative_error": float(max(abs(e) for e in errors)),
            "median_abs_relative_error": float(statistics.median(abs(e) for e in errors))}


def predict(fit: dict, procs: int, nbytes: int) -> float:
    """The fitted model's all-reduce time in seconds for `procs` processes and `nbytes` bytes."""
    lat, per = ring_steps(procs)
    return lat * fit["alpha_s"] + per * nbytes * fit["beta_s_per_byte"]


def _worker(rank: int, world: int, port: int, backend: str, sizes: list, warmup: int, repeats: int, out: str):
    """One process: time every size, then rank 0 writes the slowest rank's times to `out`."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(rank)
    times = {}
    warm = torch.ones(1024, device=device)
    for _ in range(10):  # the first collectives also open the connections between the ranks
        dist.all_reduce(warm)
    for n in sizes:
        x = torch.ones(n // 4, dtype=torch.float32, device=device)
        mine = []
        for i in range(warmup + repeats):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(x)
            if backend == "nccl":
                torch.cuda.synchronize()
            if i >= warmup:
                mine.append(time.perf_counter() - t0)
        slowest = torch.tensor(mine, dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # each repetition's slowest rank
        times[n] = slowest.cpu().tolist()
    if rank == 0:
        Path(out).write_text(json.dumps({str(n): ts for n, ts in times.items()}))
    dist.barrier()
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def time_all_reduce(procs: int, sizes: list, warmup: int, repeats: int, backend: str = "gloo",
                    timeout_s: float = 600) -> dict:
    """bytes -> the slowest rank's seconds of each timed repetition, for `procs` processes."""
    import tempfile

    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "times.json")
        ctx = mp.start_processes(_worker, args=(procs, free_port(), backend, sizes, warmup, repeats, out),
                                 nprocs=procs, join=False, start_method="spawn")
        deadline = time.time() + timeout_s
        while not ctx.join(timeout=1.0):
            if time.time() > deadline:
                for p in ctx.processes:
                    p.kill()
                raise TimeoutError(f"{procs} processes did not finish their all-reduces in {timeout_s:g} s")
        return {int(n): ts for n, ts in json.loads(Path(out).read_text()).items()}


def measure(procs: list, sizes: list, warmup: int, repeats: int, backend: str = "gloo") -> dict:
    """Every process count's timings, their medians, the alpha-beta fit and this machine."""
    from runners.records import envinfo

    cores = envinfo.cpu_cores()
    runs = []
    for p in procs:
        for n, ts in time_all_reduce(p, sizes, warmup, repeats, backend).items():
            runs.append({"procs": p, "bytes": n, "median_s": statistics.median(ts), "min_s": min(ts),
                         "max_s": max(ts), "repeats": len(ts), "oversubscribed": backend == "gloo" and p > cores})
    fit = fit_alpha_beta([(r["procs"], r["bytes"], r["median_s"]) for r in runs])
    return {"backend": backend, "procs": procs, "sizes_bytes": sizes, "warmup": warmup, "repeats": repeats,
            "timings": runs, "fit": fit, "model": "t = 2(p-1) alpha + 2(p-1)/p n beta (ring all-reduce)",
            "env": envinfo.collect()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.collectives", description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", default="2,4", help="process counts, comma-separated (each at least 2)")
    ap.add_argument("--sizes", default=",".join(DEFAULT_SIZES), help="message sizes in bytes, e.g. 4K,1M,25M")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    ap.add_argument("--out", default="results/benchmarks/collectives.json")
    args = ap.parse_args(argv)
    try:
        procs = [int(p) for p in args.procs.split(",")]
        if any(p < 2 for p in procs):
            raise ValueError
    except ValueError:
        ap.error(f"--procs {args.procs!r}: give process counts of at least 2, comma-separated (2,4)")
    try:
        sizes = [parse_size(s) for s in args.sizes.split(",")]
    except ValueError as exc:
        ap.error(f"--sizes: {exc}")
    if args.repeats < 1 or args.warmup < 0:
        ap.error(f"--repeats {args.repeats} must be at least 1 and --warmup {args.warmup} at least 0")
    doc = measure(procs, sizes, args.warmup, args.repeats, args.backend)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    f = doc["fit"]
    print("procs  bytes       median ms   model ms   error")
    for pt, r in zip(f["points"], doc["timings"]):
        print(f"{pt['procs']:>5}  {pt['bytes']:>10}  {r['median_s'] * 1e3:>9.3f}  {pt['predicted_s'] * 1e3:>9.3f}"
              f"  {pt['relative_error']:+6.0%}" + ("  (oversubscribed)" if r["oversubscribed"] else ""))
    bw = f["bandwidth_bytes_per_s"]
    bandwidth = f"{bw / 2**30:.2f} GiB/s" if bw else "not resolved (beta fitted as 0)"
    print(f"alpha {f['alpha_s'] * 1e6:.1f} us per step, bandwidth {bandwidth}; "
          f"largest error {f['max_abs_relative_error']:.0%}; {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
