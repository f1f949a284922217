"""The measured peak host memory of one run's process tree, from the ranks' cpu.csv."""

from __future__ import annotations

from pathlib import Path


def measured_peak(out: Path, local_ranks: list) -> dict:
    """Peak memory of ranks + loader workers from rank*/cpu.csv.

    A rank writes one row per process per sample; PSS/USS are read on every USS_EVERY-th
    sample only ("full" samples). The tree's figure at the k-th full sample is the sum over
    ranks and their workers; the ranks start their samplers together (after a collective),
    so the k-th samples of different ranks are the same moment within a sample interval.
    PSS counts shared pages (memory-mapped dataset, /dev/shm batches) once across the tree;
    USS leaves them out. RSS counts them in every process (an over-estimate).
    """
    from runners.records.rank_rows import read_rank_rows

    per_rank = {}
    for r in local_ranks:
        samples: dict = {}
        rows = read_rank_rows(out, r, "cpu")
        if rows is None:
            continue
        try:
            for row in rows:
                s = samples.setdefault(row["t_s"], {"pss": 0, "uss": 0, "rss": 0, "full": False, "procs": 0})
                s["rss"] += int(float(row["rss_bytes"] or 0))
                s["procs"] += 1
                if row.get("uss_bytes"):
                    s["full"] = True
                    s["uss"] += int(float(row["uss_bytes"]))
                    s["pss"] += int(float(row.get("pss_bytes") or 0))
        except (KeyError, ValueError):
            continue
        per_rank[r] = [s for _, s in sorted(samples.items(), key=lambda kv: float(kv[0]))]
    if not per_rank:
        return {"available": False, "reason": "no rank wrote cpu.csv (probes off, or killed before its first epoch ended)"}
    full = {r: [s for s in v if s["full"]] for r, v in per_rank.items()}
    best = {"pss": 0, "uss": 0}
    for key in best:
        k = 0
        while any(k < len(v) for v in full.values()):
            best[key] = max(best[key], sum(v[k][key] for v in full.values() if k < len(v)))
            k += 1
    rss_peak = 0
    k = 0
    while any(k < len(v) for v in per_rank.values()):
        rss_peak = max(rss_peak, sum(v[k]["rss"] for v in per_rank.values() if k < len(v)))
        k += 1
    return {"available": True, "pss_bytes": best["pss"] or None, "uss_bytes": best["uss"] or None,
            "rss_bytes": rss_peak, "ranks": sorted(per_rank),
            "full_samples": min(len(v) for v in full.values()),
            "note": "sum over ranks and loader workers at the worst sample; the rank starter "
                    "and memory freed between samples are not included"}

