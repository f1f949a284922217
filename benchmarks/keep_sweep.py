"""Keep a sweep's aggregate as test data for the projection row (benchmarks.measure --only projection).

    python -m benchmarks.keep_sweep results/aggregate tests/data/sweeps/NAME

Writes runs.csv, epochs.csv.gz and steps.csv.gz of the aggregate's fair-harness timing runs, with only
the columns analysis.projection.predict reads, and checks that the projection's out-of-sample check gives the
same rows on the kept copy as on the whole aggregate (so the copy is small and loses nothing the
projection uses).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from analysis import EXPERIMENT_KEYS, PHASE_COLUMNS
from analysis.projection import predict
from analysis.projection.inputs import CONFIG, SCHEDULE_KEYS

RUN_COLUMNS = ("run_id", "run_name", "status", "devices", "repeat", "dataset", "device_type", "harness", "inject",
               "strategy", "loader", "loader_variant", "train_split_seed_nodes", "max_steps_per_epoch", "parameters",
               "env_cpu_cores", "env_memory_bytes", "mem_limit_bytes", "mem_peak_bytes", "mem_model_bytes",
               "steady_epoch_mean_s", "steady_epoch_time_s", "started_at")
EPOCH_COLUMNS = ("run_id", "epoch", "rank", "time_s", "steps")
STEP_COLUMNS = ("run_id", "rank", "epoch", "step", "seed_nodes", *PHASE_COLUMNS)


def keep(agg: Path, out: Path) -> dict:
    """The kept copy of `agg` in `out`; returns its sizes in bytes."""
    runs = pd.read_csv(agg / "runs.csv", low_memory=False)
    timing = runs[(runs["harness"].fillna("fair") == "fair") & runs["inject"].isna()]
    wanted = dict.fromkeys([*RUN_COLUMNS, *CONFIG, *EXPERIMENT_KEYS, *SCHEDULE_KEYS])
    timing = timing[[c for c in wanted if c in timing]]
    ids = set(timing["run_id"])
    epochs = pd.read_csv(agg / "epochs.csv", low_memory=False)
    steps = pd.read_csv(agg / "steps.csv", low_memory=False)
    epochs = epochs.loc[epochs["run_id"].isin(ids), [c for c in EPOCH_COLUMNS if c in epochs]]
    steps = steps.loc[steps["run_id"].isin(ids), [c for c in STEP_COLUMNS if c in steps]]
    out.mkdir(parents=True, exist_ok=True)
    # the per-epoch and per-step tables gzipped (analysis.projection.predict.project_aggregate reads either)
    files = {"runs": "runs.csv", "epochs": "epochs.csv.gz", "steps": "steps.csv.gz"}
    for name, df in (("runs", timing), ("epochs", epochs), ("steps", steps)):
        df.to_csv(out / files[name], index=False)
    whole = predict.project_aggregate(agg, [4, 8], collectives=None, draws=50)["validation"]
    kept = predict.project_aggregate(out, [4, 8], collectives=None, draws=50)["validation"]
    cols = ["framework", "model", "batch_size", "workers", "devices", "predicted_s", "measured_s", "inside"]
    if len(whole) or len(kept):
        pd.testing.assert_frame_equal(whole[cols].reset_index(drop=True), kept[cols].reset_index(drop=True))
    return {f: (out / f).stat().st_size for f in files.values()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.keep_sweep", description=__doc__.split("\n")[0])
    p.add_argument("aggregate", help="an aggregate directory (python -m analysis.aggregate wrote it)")
    p.add_argument("out", help="where the kept copy goes, e.g. tests/data/sweeps/NAME")
    args = p.parse_args(argv)
    agg = Path(args.aggregate)
    if not (agg / "runs.csv").is_file():
        p.error(f"{agg}: no runs.csv there (python -m analysis.aggregate writes it)")
    sizes = keep(agg, Path(args.out))
    print(f"{args.out}: " + ", ".join(f"{k} {v / 1024:.0f} KiB" for k, v in sizes.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
