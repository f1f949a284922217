"""Replicated vs partitioned: DistDGL's partitioned runs (runners.partitioned.server) beside the
replicated runs of the same point (model, devices per host, batch size, loader workers).

Per point a partitioned run reached: each strategy's steady-state epoch time, the peak memory
of a host (the largest over the run's hosts, each host's shown beside it: a partitioned run's
graph server plus its trainers on that host; a replicated run's ranks and workers) and the share
of a step spent sampling and fetching (the load_wait and prepare phases), each with its 95% interval over repeats, and the partitioned over the replicated with
its interval. The frameworks and engines that cannot run partitioned here are rows too, skipped
with the reason.
"""

from __future__ import annotations

import pandas as pd

from analysis import framework_label, model_label
from analysis.display import Cell, GridTable, TableSet
from analysis.formatting import fmt_bytes, fmt_num, fmt_pct
from analysis.grouping import performance_runs
from analysis.stats import CI_METHOD_WELCH, mean_ci, ratio_interval
from analysis.variants.pairing import ratio_text
from runners.adapters import registry

POINT_KEYS = ("model", "devices", "batch_size", "workers")
# What the two step phases cover in a partitioned run (runners.adapters.dgl_dist, num_samplers 0).
PHASES_TEXT = (
    "load_wait is DistNodeDataLoader's next batch: the trainer samples each layer's neighbours, its own "
    "host's partition from the server's shared memory and the other partitions' over RPC from their "
    "servers, and builds the blocks; prepare is DistGraph.ndata['feat'][input_nodes] and the labels of "
    "the seeds: local rows read from the shared memory, remote rows pulled from the other servers over "
    "RPC (plus GAT's self-loops). In a replicated run the same two phases are the local sampler and "
    "the feature gather")
# Engines that cannot run partitioned here (issue 31): a skipped row each, not a silent gap.
GLT = "glt"
GLT_REASON = ("GraphLearn-for-PyTorch 0.2.4's wheels are built against torch 2.3.0 with CUDA, for Python "
              "3.8-3.11; none installs on the pair's torch 2.2.1 CPU build")
COLUMNS = ["model", "devices", "batch_size", "workers", "framework", "strategy", "hosts", "n_ok", "statuses",
           "reason", "epoch_s", "epoch_ci_s", "epoch_ratio", "epoch_low", "epoch_high", "host_bytes",
           "host_ci_bytes", "host_ratio", "host_low", "host_high", "per_host_bytes", "per_host_ci_bytes", "share",
           "share_ci", "share_ratio", "share_low", "share_high"]


def engines() -> list:
    """The frameworks with a partitioned engine (the registry's partitioned_adapter)."""
    return [n for n, f in registry.FRAMEWORKS.items() if f.partitioned_adapter]


def _runs(runs: pd.DataFrame) -> pd.DataFrame:
    if runs.empty or "strategy" not in runs:
        return runs.iloc[0:0]
    r = performance_runs(runs)
    r = r[(r["harness"].fillna("fair") == "fair") & r["framework"].isin(engines())].copy()
    r["strategy"] = r["strategy"].fillna("replicated")
    return r


def _measures(g: pd.DataFrame) -> dict:
    """Per ok run: steady epoch time, the largest host peak over its hosts and the
    sampling-and-fetching share."""
    ok = g[g["status"] == "ok"]
    num = {c: pd.to_numeric(ok[c], errors="coerce") if c in ok else pd.Series(dtype=float)
           for c in ("steady_epoch_mean_s", "mem_max_host_peak_bytes", "step_load_wait_s", "step_prepare_s",
                     "step_s")}
    share = (num["step_load_wait_s"] + num["step_prepare_s"]) / num["step_s"]
    return {"epoch": num["steady_epoch_mean_s"].dropna(), "host": num["mem_max_host_peak_bytes"].dropna(),
            "share": share.dropna()}


def per_host(g: pd.DataFrame) -> dict:
    """node -> its host's peak per ok run (runs.csv mem_host_peaks, node order), hosts with none left out."""
    ok = g[g["status"] == "ok"]
    hosts: dict = {}
    for text in (ok["mem_host_peaks"] if "mem_host_peaks" in ok else []):
        if not isinstance(text, str):
            text = "" if pd.isna(text) else str(int(text))
        for k, v in enumerate(text.split(",")):
            if v.strip():
                hosts.setdefault(k, []).append(float(v))
    return {k: pd.Series(v) for k, v in sorted(hosts.items())}


def _skipped(key, framework: str, strategy: str, reason: str) -> dict:
    return {**dict(zip(POINT_KEYS, key)), "framework": framework, "strategy": strategy, "hosts": "",
            "n_ok": 0, "statuses": "skipped", "reason": reason}


def partitioned_rows(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per point a partitioned run reached, framework with a partitioned engine (DGL)
    and strategy (replicated, partitioned by each method), then the partitioned rows of the
    frameworks without one (PyG) and of GLT, skipped with the reason."""
    r = _runs(runs)
    part = r[r["strategy"] == "partitioned"]
    rows = []
    for (fw, *key), g in part.groupby(["framework", *POINT_KEYS], sort=True):
        key = tuple(key)
        here = r[(r[list(POINT_KEYS)] == pd.Series(dict(zip(POINT_KEYS, key)))).all(axis=1) & (r["framework"] == fw)]
        rep = here[here["strategy"] == "replicated"]
        base = _measures(rep)
        groups = [("replicated", rep)] + [(f"partitioned ({m})", pg) for m, pg in
                                          g.groupby(g["part_method"].fillna("?"), sort=True)]
        for name, rows_g in groups:
            if rows_g.empty:
                rows.append(_skipped(key, fw, "replicated", "no replicated run at this point"))
                continue
            m = _measures(rows_g)
            row = {**dict(zip(POINT_KEYS, key)), "framework": fw, "strategy": name,
                   "hosts": ", ".join(str(int(v)) for v in sorted(set(rows_g["nodes"].dropna()))),
                   "n_ok": len(m["epoch"]),
                   "statuses": ", ".join(f"{n} {s}" for s, n in rows_g["status"].value_counts().items()),
                   "reason": ""}
            hosts = {k: mean_ci(v) for k, v in per_host(rows_g).items()}
            row["per_host_bytes"] = ",".join(f"{k}:{m:.0f}" for k, (m, _) in hosts.items())
            row["per_host_ci_bytes"] = ",".join(f"{k}:{'' if pd.isna(c) else f'{c:.0f}'}"
                                                for k, (_, c) in hosts.items())
            for what in ("epoch", "host", "share"):
                mean, ci = mean_ci(m[what])
                row[{"epoch": "epoch_s", "host": "host_bytes", "share": "share"}[what]] = mean
                row[{"epoch": "epoch_ci_s", "host": "host_ci_bytes", "share": "share_ci"}[what]] = ci
                est, lo, hi = ratio_interval(m[what], base[what]) if name != "replicated" else (float("nan"),) * 3
                row.update({f"{what}_ratio": est, f"{what}_low": lo, f"{what}_high": hi})
            rows.append(row)
        rows += [_skipped(key, n, "partitioned", f.partitioned_unavailable) for n, f in registry.FRAMEWORKS.items()
                 if not f.partitioned_adapter]
        rows.append(_skipped(key, GLT, "partitioned", GLT_REASON))
    return pd.DataFrame(rows, columns=COLUMNS)


def _value(mean, ci, fmt) -> str:
    if pd.isna(mean):
        return "n/a"
    return fmt(mean) + ("" if pd.isna(ci) else f" ± {fmt(ci)}")


def _cells(row: dict) -> list:
    if not row["n_ok"]:
        return [Cell(row["reason"] or row["statuses"], css="text status status-skipped", span=3)]
    base = row["strategy"] == "replicated"

    def vs(what):
        return "" if base else f"; {ratio_text(row[f'{what}_ratio'], row[f'{what}_low'], row[f'{what}_high'])}"

    return [Cell(f"{_value(row['epoch_s'], row['epoch_ci_s'], fmt_num)} (n={row['n_ok']}){vs('epoch')}"),
            Cell(_value(row["host_bytes"], row["host_ci_bytes"], fmt_bytes) + vs("host") + _hosts_text(row)),
            Cell(_value(row["share"], row["share_ci"], fmt_pct) + vs("share"))]


def _hosts_text(row: dict) -> str:
    """Every host's peak ("host 0 1.10 GiB ± 3 MiB, host 1 ..."), after the largest."""
    def pairs(v) -> dict:
        return dict(p.split(":") for p in (v if isinstance(v, str) else "").split(",") if p)

    means, cis = pairs(row.get("per_host_bytes")), pairs(row.get("per_host_ci_bytes"))
    if not means:
        return ""
    parts = [f"host {k} " + _value(float(m), float(cis[k]) if cis.get(k) else float("nan"), fmt_bytes)
             for k, m in means.items()]
    return "; per host: " + ", ".join(parts)


def partitioned_table(runs: pd.DataFrame) -> TableSet:
    """The replicated vs partitioned table (partitioned_rows)."""
    data = partitioned_rows(runs)
    header = [[("Model", 1), ("Point", 1), ("Framework", 1), ("Strategy (hosts)", 1),
               ("Steady epoch time (s), 95% CI; partitioned / replicated", 1),
               ("Host memory peak (largest host), 95% CI; partitioned / replicated; each host's", 1),
               ("Sampling + fetching share of a step, 95% CI; partitioned / replicated", 1)]]
    rows = []
    for row in data.to_dict("records"):
        point = f"{row['devices']} dev/host, batch {row['batch_size']}, {row['workers']} workers"
        strategy = row["strategy"] + (f" ({row['hosts']})" if row["hosts"] else "")
        rows.append([Cell(model_label(row["model"])), Cell(point), Cell("GraphLearn-for-PyTorch" if row["framework"] == GLT else framework_label(row["framework"])),
                     Cell(strategy)] + _cells(row))
    grids = [GridTable("", header, rows, n_index=4)] if rows else []
    return TableSet(
        "partitioned", "Replicated vs partitioned (DistDGL)",
        "At each point a partitioned run reached (model, devices per host, batch size, loader workers): DGL's "
        "replicated runs (every rank holds the whole graph) beside its partitioned runs (one partition per "
        "host, served by a DistGraphServer; runners.partitioned.server). Per strategy the mean over repeats with its "
        "95% t-interval, and the partitioned over the replicated (" + CI_METHOD_WELCH + "): the steady-state "
        "epoch time; the peak memory of a host, the largest over the run's hosts with each host's beside it "
        "(partitioned: that host's graph server's PSS plus its trainers', as its launcher sampled them; "
        "replicated: the ranks' and loader workers'); the share of a step in the load_wait and "
        "prepare phases. " + PHASES_TEXT + ". Epoch times compare at equal devices per host; a partitioned "
        "run's trainers each take their partition's seeds (docs/partitioned.md's seeds note).",
        data, grids,
        empty_text="No partitioned run: run DGL with `--strategy partitioned --nnodes 2 --ip-config FILE` on two "
                   "hosts, or set config `strategy` with `nodes: 2` under SLURM (which makes the ip_config from the "
                   "job's nodes; docs/partitioned.md) to fill this section.")
