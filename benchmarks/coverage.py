"""Do the report's intervals cover? Many real launches of a few points, subsampled (issue 39).

    python -m benchmarks.coverage [--launches 10] [--draws 2000] [--dataset small]

Runs timing runs of the first framework and the reference (PyG and DGL; the default sweep's stop
rule) at two configurations, `--launches`
times each, interleaved so that a drift of the machine hits every cell alike. Then it draws
`--draws` subsamples of the default design's size (2 rounds of launches, every cell's launches of a
round together, as the sweep's repeat blocks are) and computes, for each framework comparison, the
report's 95% interval on the subsample (analysis.repeats.noise: configuration + block fit, the noise within
the blocks) and, beside it, the two earlier ones: launch noise pooled without blocks, and the
per-comparison Welch interval. The coverage is the
share of those intervals that contain the all-launch estimate (the ratio of geometric means
over every launch). A method that keeps its promise covers about 95%; the target is at least
90%. This is a benchmark: it prints its figures and asserts nothing. benchmarks.measure runs it
as its `coverage` row with --with-coverage.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pandas as pd

from analysis import stats
from analysis.repeats.noise import pooled_noise
from runners.adapters import registry

REPO = Path(__file__).resolve().parent.parent
CONFIGS = ({"model": "sage", "devices": 1, "batch_size": 1024, "workers": 0},
           {"model": "sage", "devices": 2, "batch_size": 1024, "workers": 0})
# The pair whose ratio's intervals are checked: the first framework over the reference, as the report's first pair.
FRAMEWORKS = registry.reference_pairs(registry.FRAMEWORK_NAMES)[0]
# The default sweep's timing runs (config/config.yaml `timing`).
TIMING = ["--until", "precise", "--precision", "0.05", "--min-steady-epochs", "4", "--epochs", "8",
          "--max-train-time", "8", "--eval-every", "end", "--threads-per-rank", "1", "--fanouts", "10,10,10"]


def collect(work: Path, launches: int, dataset: str) -> pd.DataFrame:
    """Timing runs of every framework x config, `launches` rounds, each round in a rotated order;
    one row per ok run (framework, config keys, launch, steady epoch time)."""
    cells = [(fw, c) for c in CONFIGS for fw in FRAMEWORKS]
    rows = []
    for i in range(launches):
        for fw, c in cells[i % len(cells):] + cells[:i % len(cells)]:
            out = work / f"{fw}-{c['model']}-d{c['devices']}-b{c['batch_size']}-w{c['workers']}-l{i}"
            argv = [sys.executable, "-m", "runners.run", "--framework", fw, "--model", c["model"], "--devices", str(c["devices"]),
                    "--batch-size", str(c["batch_size"]), "--workers", str(c["workers"]), "--dataset", dataset,
                    "--repeat", str(i), *TIMING, "--out", str(out)]
            with open(work / f"{out.name}.log", "w") as log:
                subprocess.run(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, check=True,
                               env={**os.environ, "PYTHONPATH": str(REPO)})
            res = json.loads((out / "result.json").read_text())
            t = (res.get("summary") or {}).get("steady_epoch_time_s")
            print(f"[coverage] {out.name}: {res['status']} {t}", file=sys.stderr, flush=True)
            if res["status"] == "ok" and t:
                rows.append({"experiment": "coverage", "framework": fw, **c, "launch": i, "repeat": i, "status": "ok",
                             "steady_epoch_time_s": float(t)})
    return pd.DataFrame(rows)


METHODS = ("blocks", "pooled", "welch")


def coverage(runs: pd.DataFrame, draws: int = 2000, per_cell: int = 2, seed: int = 0) -> dict:
    """Share of subsample intervals (`per_cell` rounds of launches drawn, each round's launches of
    every cell together) that contain the all-launch estimate, for the report's block fit, the
    pooled noise without blocks and the Welch interval; with their median widths (high / low)."""
    keys = ["model", "devices", "batch_size", "workers"]
    truth = {}
    for key, g in runs.groupby(keys):
        a = g.loc[g["framework"] == FRAMEWORKS[0], "steady_epoch_time_s"]
        b = g.loc[g["framework"] == FRAMEWORKS[1], "steady_epoch_time_s"]
        if len(a) >= per_cell + 1 and len(b) >= per_cell + 1:
            truth[key] = stats.ratio_interval(a, b)[0]
    rounds = sorted(set(runs["repeat"]))
    rng = random.Random(seed)
    hits = dict.fromkeys(METHODS, 0)
    widths = {m: [] for m in METHODS}
    total = 0
    for _ in range(draws):
        sub = runs[runs["repeat"].isin(rng.sample(rounds, per_cell))]
        blocks = pooled_noise(sub, "steady_epoch_time_s")
        pooled = pooled_noise(sub.drop(columns="repeat"), "steady_epoch_time_s")  # every run its own block
        for key, true in truth.items():
            cell = dict(zip(keys, key), experiment="coverage")
            g = sub[(sub[keys] == pd.Series(dict(zip(keys, key)))).all(axis=1)]
            a = g.loc[g["framework"] == FRAMEWORKS[0], "steady_epoch_time_s"]
            b = g.loc[g["framework"] == FRAMEWORKS[1], "steady_epoch_time_s"]
            if a.empty or b.empty:
                continue
            ka, kb = {**cell, "framework": FRAMEWORKS[0]}, {**cell, "framework": FRAMEWORKS[1]}
            for method, (_, lo, hi, _) in (("blocks", blocks.ratio(ka, kb, a, b)), ("pooled", pooled.ratio(ka, kb, a, b)),
                                           ("welch", stats.ratio_interval_dof(a, b))):
                hits[method] += int(lo <= true <= hi)
                widths[method].append(hi / lo)
            total += 1
    med = lambda xs: sorted(xs)[len(xs) // 2] if xs else float("nan")  # noqa: E731
    return {"comparisons": len(truth), "draws": draws, "per_cell": per_cell, "intervals": total,
            **{f"{m}_coverage": hits[m] / total if total else float("nan") for m in hits},
            **{f"{m}_median_width": med(widths[m]) for m in widths}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.coverage", description=__doc__.split("\n")[0])
    p.add_argument("--launches", type=int, default=10)
    p.add_argument("--draws", type=int, default=2000)
    p.add_argument("--dataset", default="small")
    p.add_argument("--out-dir", default="results/benchmarks/coverage")
    p.add_argument("--runs", help="a runs.csv of an earlier collection: subsample it instead of launching")
    args = p.parse_args(argv)
    out = REPO / args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    runs = pd.read_csv(args.runs) if args.runs else collect(out, args.launches, args.dataset)
    runs.to_csv(out / "runs.csv", index=False)
    figures = coverage(runs, args.draws)
    (out / "coverage.json").write_text(json.dumps(figures, indent=1) + "\n")
    print(f"| method | coverage of the all-launch ratio | median width (high/low) |\n|---|---|---|\n"
          f"| configuration + block fit (the report's) | {100 * figures['blocks_coverage']:.1f}% | "
          f"{figures['blocks_median_width']:.2f} |\n"
          f"| launch noise pooled without blocks | {100 * figures['pooled_coverage']:.1f}% | "
          f"{figures['pooled_median_width']:.2f} |\n"
          f"| Welch per comparison | {100 * figures['welch_coverage']:.1f}% | {figures['welch_median_width']:.2f} |\n"
          f"({figures['comparisons']} comparisons, {figures['draws']} draws of {figures['per_cell']} rounds; "
          f"{out / 'coverage.json'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
