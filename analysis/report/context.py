"""What one render of the report computes once and every table, figure, answer and finding reads:
the runs labelled with their experiment, their grid points, the scaling series, the framework
comparisons, the speed-up gap, the projection and the seed study's Table 2. Each is computed the
first time it is asked for, so a caller that needs only the tables pays only for them.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import cached_property

import pandas as pd

from analysis.aggregate import Aggregate
from analysis.grouping import add_experiment, performance_points, performance_runs


def main_experiment(speed: pd.DataFrame, points: pd.DataFrame):
    """The experiment the answers speak for: most framework comparisons, else most ok points;
    demonstrations (uneven batches) never."""
    for frame in (speed, points[points["n_ok"] > 0] if "n_ok" in points else points):
        f = frame[~frame["experiment"].str.contains("uneven batches|demonstration", regex=True)] \
            if len(frame) else frame
        if len(f):
            return f["experiment"].value_counts(sort=True).index[0]
    return None


@dataclass
class Context:
    """One aggregate's shared frames; `collectives`: the all-reduce micro-benchmark's JSON (or its
    fit) for the projection, None for the model's fallback."""
    agg: Aggregate
    collectives: object = None
    _built: dict = field(default_factory=dict, init=False, repr=False)  # (builder, inputs) -> its parts

    @cached_property
    def runs(self) -> pd.DataFrame:
        """Every valid run, labelled with its experiment."""
        return add_experiment(self.agg.runs)

    @cached_property
    def perf(self) -> pd.DataFrame:
        """The runs that measure performance (fault-injection demonstrations left out)."""
        return performance_runs(self.runs)

    @cached_property
    def points(self) -> pd.DataFrame:
        """Grid-point statistics of the performance runs."""
        return performance_points(self.runs)

    @cached_property
    def scaling(self) -> pd.DataFrame:
        """tables.scaling.scaling_data: the scaling series of every experiment."""
        from analysis.tables.scaling import scaling_data
        return scaling_data(self.points, self.runs)

    @cached_property
    def speed(self) -> pd.DataFrame:
        """tables.speed.speed_data: each framework against the reference per configuration."""
        from analysis.tables.speed import speed_data
        return speed_data(self.runs)

    @cached_property
    def work(self) -> pd.DataFrame:
        """tables.work.work_data: each pair's time ratio split into work and time per unit of work."""
        from analysis.tables.work import work_data
        return work_data(self.speed, self.perf)

    @cached_property
    def gap(self) -> pd.DataFrame:
        """speedup_gap.gap_data: where each multi-device point's missing speed-up went."""
        from analysis.projection import speedup_gap
        return speedup_gap.gap_data(self.runs, self.agg.epochs, self.agg.steps, self.scaling)

    @cached_property
    def projection(self) -> dict:
        """analysis.projection.predict.project's frames at the report's device counts."""
        from analysis.projection import predict
        return predict.project(self.runs, self.agg.epochs, self.agg.steps, predict.REPORT_DEVICES, self.collectives)

    @cached_property
    def paper(self) -> pd.DataFrame:
        """The seed study's published Table 2."""
        from analysis.tables.paper import load_paper
        return load_paper()

    @cached_property
    def plan(self) -> pd.DataFrame:
        """analysis.repeats.next_sweep.plan_data of the performance runs: noise, cost and the next sweep's plan."""
        from analysis.repeats import next_sweep
        return next_sweep.plan_data(self.perf)

    @cached_property
    def experiment(self):
        """The experiment the first screen speaks for (main_experiment)."""
        return main_experiment(self.speed, self.points)

    @cached_property
    def main_speed(self) -> pd.DataFrame:
        """The framework comparisons of the main experiment (the summary figure's)."""
        speed = self.speed
        return speed[speed["experiment"] == self.experiment] if len(speed) else speed

    @cached_property
    def main_projection(self) -> tuple:
        """The projection's frames of the main experiment (predict.of_experiment)."""
        from analysis.projection import predict
        return predict.of_experiment(self.projection, self.experiment)

    @cached_property
    def resource_runs(self):
        """The runs the resources figure follows (plots.select_resource_runs)."""
        from analysis.report import plots
        return plots.select_resource_runs(self.runs, self.agg.cpu, self.agg.nvml)

    @cached_property
    def drawn(self) -> dict:
        """Figure name -> the grid points it draws (analysis.report.figures.drawn_data)."""
        from analysis.report.figures import drawn_data
        return drawn_data(self.points, self.scaling, self.experiment)

    @cached_property
    def tables(self) -> dict:
        """name -> TableSet: every table of analysis.REPORT_TABLES, in its order; an optional one only
        when it has rows."""
        from analysis import REPORT_TABLES
        built = {name: self.build(asset) for name, asset in REPORT_TABLES.items()}
        return {name: table for name, table in built.items() if table is not None}

    def build(self, asset):
        """What `asset` (an analysis.Asset) builds from this context: its builder called with the
        context's attributes it names; where the builder builds several, its part of them (the
        builder runs once for all its parts)."""
        if not asset.part:
            return self._call(asset)
        key = (asset.builder, asset.inputs)
        if key not in self._built:
            self._built[key] = self._call(asset)
        return self._built[key][asset.part]

    def _call(self, asset):
        module, function = asset.builder.split(":")
        args = []
        for name in asset.inputs:
            args += list(self.get(name[1:])) if name.startswith("*") else [self.get(name)]
        return getattr(importlib.import_module(f"analysis.{module}"), function)(*args)

    def get(self, name: str):
        """The context's attribute `name`; "agg.failures": the aggregate's, "drawn.speedup": one figure's points."""
        head, _, rest = name.partition(".")
        value = getattr(self, head)
        return (value[rest] if isinstance(value, dict) else getattr(value, rest)) if rest else value
