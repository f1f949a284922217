"""The pre-flight memory model against the measured peak, per configuration.
"""

from __future__ import annotations

from collections import Counter

import pandas as pd

from analysis.formatting import status_text

MEMORY_KEYS = ("harness", "framework", "model", "strategy", "dataset", "devices", "workers", "batch_size",
               "mem_limit_bytes")
# What the measured peak covers, by strategy: the same processes as the model it is set against.
MEASURED = {"replicated": "ranks + loader workers",
            "partitioned": "node 0's host: graph server + trainers (modelled without the torchrun agent)"}


def memory_model_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Modelled vs measured peak host memory per configuration (one row per configuration).

    mem_model_bytes is the pre-flight model (runners.memory.model); mem_peak_bytes the highest
    measured peak over the configuration's runs (PSS of ranks + loader workers at the worst
    sample of rank*/cpu.csv); mem_cgroup_peak_bytes the memory cgroup's own peak when the run
    was capped (--memory-limit). A run killed before its first epoch ended has no cpu.csv
    sample, so its measured peak is empty and the cgroup's peak is the evidence. A partitioned
    run's model counts its host's graph server, so its measured peak is the host's (runs.csv
    mem_host_peak_bytes: server + trainers sampled together) and its model that of the same
    processes (mem_model_sampled_bytes: without the torchrun agent, which is not sampled).
    """
    cols = [k for k in MEMORY_KEYS if k in runs.columns or k == "strategy"]
    out_cols = cols + ["runs", "statuses", "measured", "mem_model_bytes", "mem_peak_bytes", "mem_cgroup_peak_bytes",
                       "peak_over_model", "model_over_limit", "oom_killed"]
    if runs.empty or "mem_model_bytes" not in runs.columns:
        return pd.DataFrame(columns=out_cols)
    df = runs.copy()
    for c in ("mem_peak_bytes", "mem_cgroup_peak_bytes", "mem_limit_bytes", "oom_killed", "mem_host_peak_bytes",
              "mem_model_sampled_bytes"):
        if c not in df.columns:
            df[c] = None
    df["strategy"] = df["strategy"].fillna("replicated") if "strategy" in df.columns else "replicated"
    part = df["strategy"] == "partitioned"
    num = lambda c: pd.to_numeric(df[c], errors="coerce").astype(float)  # noqa: E731
    df["mem_peak_bytes"] = num("mem_peak_bytes").where(~part, num("mem_host_peak_bytes"))
    df["mem_model_bytes"] = num("mem_model_bytes").where(~part, num("mem_model_sampled_bytes"))
    keyed = df[cols].astype(object).where(df[cols].notna(), "none")
    rows = []
    for key, g in df.groupby([keyed[c] for c in cols], sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        num = lambda c: pd.to_numeric(g[c], errors="coerce")  # noqa: E731
        model = num("mem_model_bytes").max()
        peak = num("mem_peak_bytes").max()
        limit = num("mem_limit_bytes").max()
        killed = sorted({str(x) for x in g["oom_killed"].dropna() if str(x)})
        rows.append({**dict(zip(cols, key)), "runs": len(g),
                     "statuses": status_text(Counter(g["status"])),
                     "measured": MEASURED.get(g["strategy"].iloc[0], MEASURED["replicated"]),
                     "mem_model_bytes": model, "mem_peak_bytes": peak,
                     "mem_cgroup_peak_bytes": num("mem_cgroup_peak_bytes").max(),
                     "peak_over_model": peak / model if model and peak == peak else None,
                     "model_over_limit": model / limit if limit and limit == limit else None,
                     "oom_killed": "; ".join(killed) or None})
    return pd.DataFrame(rows, columns=out_cols)
