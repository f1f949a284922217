"""The second round's points (analysis.repeats.second_round): one timing configuration each, with
its epoch times, their repeat blocks and what a repeat costs; read from the first round's results
(and the runs an earlier second round left there), or from the aggregate's runs for the report's
cost of settling an open answer."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from analysis.report.sections import DEFAULT_LOADER
from runners import sweep
from runners.adapters import registry
from runners.records.result import read as read_result
from runners.records.rundir import RunDir

# A point's key: its grid configuration and, last, its loader or trimming (the variant).
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
    repeats: list = field(default_factory=list)  # the repeat of each time (its block), where known

    @property
    def n(self) -> int:
        return len(self.times) + self.added

    @property
    def log_sd(self) -> float:
        logs = [math.log(t) for t in self.times]
        return statistics.stdev(logs) if len(logs) > 1 else float("nan")

    def blocks(self) -> list:
        """The block of each time (repeat x model, as analysis.repeats.noise fits them); one block for all
        where the repeats are not known, which leaves the plain pooled spread."""
        if len(self.repeats) != len(self.times):
            return [("all",)] * len(self.times)
        return [(str(r), str(self.key[1])) for r in self.repeats]

    @property
    def cost_s(self) -> float:
        return statistics.mean(self.walls) + JOB_OVERHEAD_S

    def label(self) -> str:
        fw, model, devices, batch, workers, loader = self.key
        return f"{fw} {model} d{devices} b{batch} w{workers}" + ("" if loader == DEFAULT_LOADER else f" {loader}")


def points_from_runs(runs) -> dict:
    """The plan's points from the aggregate's runs frame (both rounds; pandas), for the report:
    the ok timing runs of the fair harness, a run's time the report's (steady_epoch_time_s).
    The caller picks the experiment (its main one and its other loaders' runs)."""
    points: dict = {}
    for r in runs.to_dict("records"):
        t = r.get("steady_epoch_time_s")
        if r.get("status") != "ok" or r.get("until") != "precise" or not t or not t == t or t <= 0:
            continue
        variant = r.get("loader_variant")
        variant = trim_variant(r) or (variant if isinstance(variant, str) else DEFAULT_LOADER)
        key = (str(r["framework"]), str(r["model"]), int(r["devices"]), int(r["batch_size"]), int(r["workers"]),
               variant)
        p = points.setdefault(key, Point(key, [], [], {}))
        p.times.append(float(t))
        rep = r.get("repeat")
        p.repeats.append(int(rep) if rep == rep and rep is not None else 0)  # NaN: a result from before repeats
        wall = r.get("wall_time_s")
        p.walls.append(float(wall) if wall == wall and wall else 0.0)
    return points


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
        p.repeats.append(int(cfg.get("repeat") or 0))
        p.walls.append(float(data.get("wall_time_s") or 0.0))
        p.result_dir = run_dir.parent
    for p in points.values():
        keep_earlier_second_round(p, repeats)
    return points, repeats


def loader_variant(cfg: dict) -> str:
    """DEFAULT_LOADER for a run of its framework's first loader (results from before --loader
    ran that one), else the loader's name; a run with its layers trimmed is its own variant."""
    loader = cfg.get("loader")
    first = loader in (None, registry.framework(cfg["framework"]).loaders[0])
    return (trim_variant(cfg) or DEFAULT_LOADER) if first else loader


def trim_variant(cfg: dict) -> str | None:
    """registry.LAYER_TRIM for a run that trimmed its layers (the point key's last place holds
    it, as it holds another loader: both are variants of the framework's default), else None."""
    return registry.LAYER_TRIM if registry.trims_layers(cfg) else None


def keep_earlier_second_round(p: Point, first_round: int) -> None:
    """Repeats an earlier plan added to this point (`-rR` from the first round on, consecutive)
    are measurements: they count, and stay in the plan, so a replan never drops a result."""
    p.first_ok = len(p.times)
    rep = first_round
    while True:
        path = RunDir(p.result_dir / sweep.parse(p.run["name"], repeat=rep).name).result
        try:
            data = read_result(path)
        except (OSError, ValueError):
            return
        t = (data.get("summary") or {}).get("steady_epoch_time_s")
        p.kept.append(rep)
        if data.get("status") == "ok" and t and t > 0:
            p.times.append(float(t))
            p.repeats.append(rep)
            p.walls.append(float(data.get("wall_time_s") or 0.0))
        rep += 1


def run_wildcards(run_dir: Path) -> dict:
    """A point of the plan: its dataset and its runs' name without the repeat (runners.sweep's
    stem), from a run directory results/runs/DATASET/NAME."""
    run = sweep.parse_dir(run_dir)
    return {"dataset": run.dataset, "name": run.stem}
