"""Repeats where an answer is still open: plan a sweep's second round from its first.

    python -m analysis.adaptive --precision 0.05 --budget-min 4 --max-repeats 6 \
        --out results/plan/repeats.json results/runs/small/*/result.json

The report answers with ratios of timing runs' steady epoch times: PyG over DGL, 2 devices over
1, 1 loader worker over none, batch 1024 over 256, a framework's other loader over its first
(DGL's GraphBolt over its classic DataLoader), each with a 95% Welch t-interval on the log
scale over repeats (analysis.stats). The first round runs every point a few times. This plans
more repeats only for the comparisons whose interval is still wider than the precision asked
for, within a time budget, and says why each point got them.

It stops on the width of an interval, never on where the interval lies: a comparison that
already excludes 1x but is wider than the precision still gets repeats, and one that is narrow
gets none even if it straddles 1x. So the second round never depends on the estimate, and the
estimates stay unbiased.

How many repeats a comparison needs comes from the spread of its two points' log epoch times.
Two or three repeats estimate a spread poorly (two equal times would say zero), so a point's
spread is taken as at least the median spread of all points (pooled). The budget is spent
greedily: the comparison whose projected interval is widest, relative to the precision, gets
one more repeat at the point where it narrows the interval most per second, until every
comparison is projected narrow enough, the points reach --max-repeats, or the budget is spent.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from analysis import FRAMEWORK_ORDER, framework_label
from runners.adapters import registry
from runners.result import read as read_result
from runners.rundir import RunDir
from runners.stopping import t_quantile

# What the report compares (each a ratio of one point's epoch time over another's that differ
# in one key only): comparison -> (the key, numerator value, denominator value, how the report
# says it). A point's loader is "default" for its framework's first (aggregate's loader_variant).
_FIRST, _SECOND = FRAMEWORK_ORDER[:2]  # the report's order: the first framework's time over the second's
DEFAULT_LOADER = "default"
AXES = {
    "framework": ("framework", _FIRST, _SECOND, f"{framework_label(_FIRST)} over {framework_label(_SECOND)}"),
    "devices": ("devices", 2, 1, "2 devices over 1"),
    "workers": ("workers", 1, 0, "1 loader worker over none"),
    "batch_size": ("batch_size", 1024, 256, "batch 1024 over 256"),
} | {name: ("loader", name, DEFAULT_LOADER, f"{name} over the framework's first loader")
     for name in registry.OTHER_LOADERS}
POINT_KEYS = ("framework", "model", "devices", "batch_size", "workers", "loader")
JOB_OVERHEAD_S = 1.0  # a Snakemake job around each run, beside the run's own wall time


@dataclass
class Point:
    """One timing configuration of the first round: its epoch times and what a repeat costs."""

    key: tuple
    times: list
    walls: list
    run: dict  # the wildcards of its runs (repeat left out)
    added: int = 0
    why: list = field(default_factory=list)
    kept: list = field(default_factory=list)  # repeats of an earlier second round, already run
    result_dir: Path | None = None  # results/runs/DATASET
    first_ok: int = 0  # ok runs of the first round

    @property
    def n(self) -> int:
        return len(self.times) + self.added

    @property
    def log_sd(self) -> float:
        logs = [math.log(t) for t in self.times]
        return statistics.stdev(logs) if len(logs) > 1 else float("nan")

    @property
    def cost_s(self) -> float:
        return statistics.mean(self.walls) + JOB_OVERHEAD_S

    def label(self) -> str:
        fw, model, devices, batch, workers, loader = self.key
        return f"{fw} {model} d{devices} b{batch} w{workers}" + ("" if loader == DEFAULT_LOADER else f" {loader}")


@dataclass
class Comparison:
    axis: str
    num: Point
    den: Point

    def label(self) -> str:
        fw, model, devices, batch, workers, _ = self.den.key
        where = {"framework": f"{model} d{devices} b{batch} w{workers}",
                 "devices": f"{fw} {model} b{batch} w{workers}",
                 "workers": f"{fw} {model} d{devices} b{batch}",
                 "batch_size": f"{fw} {model} d{devices} w{workers}",
                 "loader": f"{fw} {model} d{devices} b{batch} w{workers}"}[AXES[self.axis][0]]
        return f"{AXES[self.axis][3]} ({where})"


def half_width(sd_a: float, n_a: int, sd_b: float, n_b: int) -> float:
    """Relative half-width of the 95% interval of a ratio of geometric means (Welch on logs):
    exp(t * se) - 1."""
    va, vb = sd_a ** 2 / n_a, sd_b ** 2 / n_b
    se2 = va + vb
    if se2 <= 0:
        return 0.0
    dof = se2 ** 2 / ((va ** 2 / (n_a - 1) if va else 0) + (vb ** 2 / (n_b - 1) if vb else 0))
    return math.exp(t_quantile(dof) * math.sqrt(se2)) - 1


def comparisons(points: dict) -> list:
    """Every pair of first-round points the report compares (same everything but one axis)."""
    out = []
    for axis, (key_name, num_value, den_value, _) in AXES.items():
        i = POINT_KEYS.index(key_name)
        for key, den in points.items():
            if key[i] != den_value:
                continue
            num = points.get(key[:i] + (num_value,) + key[i + 1:])
            if num is not None:
                out.append(Comparison(axis, num, den))
    return out


@dataclass
class Plan:
    precision: float
    budget_s: float
    max_repeats: int
    pooled_sd: float
    spent_s: float = 0.0
    comparisons: list = field(default_factory=list)  # rows for the report

    def to_json(self, points: dict, first_round: int) -> dict:
        runs = []
        for p in points.values():
            runs += [{**p.run, "repeat": rep} for rep in p.kept]
            runs += [{**p.run, "repeat": first_round + len(p.kept) + k} for k in range(p.added)]
        return {"precision": self.precision, "budget_s": self.budget_s, "max_repeats": self.max_repeats,
                "first_round": first_round, "pooled_log_sd": self.pooled_sd, "planned_s": round(self.spent_s, 1),
                "points": [{"point": p.label(), "first_round": p.first_ok,
                            "kept": len(p.kept), "added": p.added, "why": p.why}
                           for p in points.values() if p.added or p.kept],
                "comparisons": self.comparisons, "runs": runs}


def plan(points: dict, precision: float, budget_s: float, max_repeats: int) -> Plan:
    """Add repeats to `points` (their `added` and `why`) for the open comparisons."""
    sds = [p.log_sd for p in points.values() if not math.isnan(p.log_sd)]
    pooled = statistics.median(sds) if sds else 0.0
    sd = {key: max(p.log_sd if not math.isnan(p.log_sd) else pooled, pooled) for key, p in points.items()}
    result = Plan(precision, budget_s, max_repeats, pooled)
    comps = [c for c in comparisons(points) if len(c.num.times) > 1 and len(c.den.times) > 1]

    def projected(c: Comparison, extra_num: int = 0, extra_den: int = 0) -> float:
        return half_width(sd[c.num.key], c.num.n + extra_num, sd[c.den.key], c.den.n + extra_den)

    measured = {id(c): half_width(c.num.log_sd, len(c.num.times), c.den.log_sd, len(c.den.times)) for c in comps}
    open_ = [c for c in comps if measured[id(c)] > precision]
    while True:
        wanting = [c for c in open_ if projected(c) > precision
                   and (c.num.n < max_repeats or c.den.n < max_repeats)]
        if not wanting:
            break
        c = max(wanting, key=lambda c: projected(c) / precision)
        # the side whose repeat narrows the interval most per second spent
        options = [(projected(c) - projected(c, 1, 0)) / c.num.cost_s if c.num.n < max_repeats else -1,
                   (projected(c) - projected(c, 0, 1)) / c.den.cost_s if c.den.n < max_repeats else -1]
        p = c.num if options[0] >= options[1] else c.den
        if result.spent_s + p.cost_s > budget_s:
            open_.remove(c)  # the budget cannot pay for this one; the others may still fit
            continue
        p.added += 1
        result.spent_s += p.cost_s
        if c.label() not in p.why:
            p.why.append(c.label())
    for c in comps:
        result.comparisons.append({
            "comparison": c.label(), "runs": f"{len(c.num.times)}+{len(c.den.times)}",
            "measured_half_width": round(measured[id(c)], 4),
            "added": f"{c.num.added}+{c.den.added}",
            "projected_half_width": round(projected(c), 4),
            "status": ("narrow enough after round 1" if measured[id(c)] <= precision
                       else "repeats added" if c.num.added or c.den.added
                       else "open: over the budget or at --max-repeats")})
    return result


def first_round_points(result_paths: list) -> tuple:
    """(points, first_round): the ok timing runs of the first round, by configuration."""
    points: dict = {}
    repeats = 0
    for path in result_paths:
        try:
            data = read_result(path)  # a newer schema is a ValueError: no evidence here either
            data["config"], data["status"]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # the aggregate lists a malformed result as invalid; here it is no evidence
        cfg, summary = data["config"], data.get("summary") or {}
        repeats = max(repeats, int(cfg.get("repeat") or 0) + 1)
        t = summary.get("steady_epoch_time_s")
        if data["status"] != "ok" or not t or t <= 0:
            continue
        key = tuple(cfg[k] for k in POINT_KEYS[:-1]) + (loader_variant(cfg),)
        run_dir = Path(path).parent
        p = points.setdefault(key, Point(key, [], [], run_wildcards(run_dir)))
        p.times.append(float(t))
        p.walls.append(float(data.get("wall_time_s") or 0.0))
        p.result_dir = run_dir.parent
    for p in points.values():
        keep_earlier_second_round(p, repeats)
    return points, repeats


def loader_variant(cfg: dict) -> str:
    """DEFAULT_LOADER for a run of its framework's first loader (results from before --loader
    ran that one), else the loader's name."""
    loader = cfg.get("loader")
    return DEFAULT_LOADER if loader in (None, registry.framework(cfg["framework"]).loaders[0]) else loader


def keep_earlier_second_round(p: Point, first_round: int) -> None:
    """Repeats an earlier plan added to this point (`-rR` from the first round on, consecutive)
    are measurements: they count, and stay in the plan, so a replan never drops a result."""
    p.first_ok = len(p.times)
    rep = first_round
    while True:
        path = RunDir(p.result_dir / f"{p.run['name']}-r{rep}").result
        try:
            data = read_result(path)
        except (OSError, ValueError):
            return
        t = (data.get("summary") or {}).get("steady_epoch_time_s")
        p.kept.append(rep)
        if data.get("status") == "ok" and t and t > 0:
            p.times.append(float(t))
            p.walls.append(float(data.get("wall_time_s") or 0.0))
        rep += 1


def run_wildcards(run_dir: Path) -> dict:
    """The run rule's wildcards of a run directory results/runs/DATASET/NAME-rR (repeat left out)."""
    name = run_dir.name
    return {"dataset": run_dir.parent.name, "name": name[: name.rindex("-r")]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.adaptive", description=__doc__.split("\n")[0])
    p.add_argument("--precision", type=float, required=True, help="relative 95%% half-width wanted, e.g. 0.05")
    p.add_argument("--budget-min", type=float, required=True, help="minutes the second round may take")
    p.add_argument("--max-repeats", type=int, required=True, help="repeats per point at most, both rounds")
    p.add_argument("--out", required=True)
    p.add_argument("results", nargs="*")
    args = p.parse_args(argv)
    if not 0 < args.precision < 1:
        p.error(f"--precision {args.precision}: give a fraction between 0 and 1 (0.05 is ±5%)")
    if args.budget_min < 0 or args.max_repeats < 2:
        p.error(f"--budget-min {args.budget_min} must be >= 0 and --max-repeats {args.max_repeats} >= 2")
    points, first_round = first_round_points(args.results)
    planned = plan(points, args.precision, args.budget_min * 60, args.max_repeats)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = planned.to_json(points, first_round)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"adaptive: {len(doc['runs'])} more runs at {len(doc['points'])} points, about "
          f"{doc['planned_s'] / 60:.1f} of {args.budget_min:g} min; {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
