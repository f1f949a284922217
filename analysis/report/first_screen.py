"""The report's first screen: each declared section's answer (analysis.report.sections) from one
set of frames, in the sections' order; the answers still wider than the sweep's precision and
what would settle them; and the graph the answers come from (per graph when the runs read
several). The sentences themselves are analysis.report.answers'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import pandas as pd

from analysis.grouping import performance_runs
from analysis.repeats import plan_points, second_round
from analysis.report import sections
from analysis.report.answers import (DEFAULT_PRECISION, Answer, accuracy_answer, axis_answer, caveats, hang_answer,
                                     loader_answer, projection_answer, scaling_answer, speed_answer, step_answer,
                                     timing_only)
from analysis.report.context import Context, main_experiment
from analysis.variants.pairing import trimmed


def open_answers(answers: list, precision: float, repeats: float, run_s: float) -> list:
    """The stated intervals wider than ±`precision` (high / low above (1 + precision)^2), each with
    what settling it would take: `repeats` more per point scaled by the width's square (an interval
    narrows with the square root of the runs), times its points, at `run_s` seconds a run.
    Rows: what, half (relative half-width), runs, minutes."""
    out = []
    target = math.log1p(precision)
    for a in answers:
        for i in a.intervals:
            if not all(x == x and x and x > 0 for x in (i["low"], i["high"])):
                continue
            half = math.log(i["high"] / i["low"]) / 2
            if half <= target:
                continue
            more = math.ceil(repeats * ((half / target) ** 2 - 1)) * i["points"]
            out.append({"what": i["what"], "half": math.expm1(half), "runs": more, "answer": i.get("answer"),
                        "minutes": more * run_s / 60 if run_s == run_s else float("nan")})
    return out


def planned_cost(rows: list, runs: pd.DataFrame, exp, precision: float) -> dict | None:
    """What the second round's planner (analysis.repeats.second_round.settling_cost) projects would settle the
    open answers `rows` (open_answers), from the experiment's timing runs, its other loaders' and its
    trimmed runs':
    {"runs", "minutes", "settled"}; None where an open answer is not one the planner knows (another
    pair of device counts, say) or the planner already finds it within the precision."""
    keys = [r.get("answer") for r in rows]
    if not rows or None in keys or runs.empty or "loader_variant" not in runs:
        return None
    main = runs[runs["experiment"] == exp]
    same = [c for c in ("dataset", "device_type", "lane") if c in runs]
    other = runs[((runs["loader_variant"] != sections.DEFAULT_LOADER) | trimmed(runs))
                 & runs[same].isin({c: set(main[c]) for c in same}).all(axis=1)]
    cost = second_round.settling_cost(plan_points.points_from_runs(pd.concat([main, other])), precision, keys)
    if sorted(cost["answers"]) != sorted(keys) or not cost["runs"]:
        return None
    return {"runs": cost["runs"], "minutes": cost["seconds"] / 60, "settled": cost["settled"]}


def _open_caveat(rows: list, precision: float, planned: dict | None = None) -> list:
    """The caveat naming the answers still wider than the precision and what would settle them:
    the planner's projection where there is one (`planned`: planned_cost), else open_answers'."""
    if not rows:
        return []
    runs, minutes = sum(r["runs"] for r in rows), sum(r["minutes"] for r in rows)
    named = ", ".join(f"{r['what']} (±{100 * r['half']:.0f} %)" for r in rows)
    if planned is not None:
        runs, minutes = planned["runs"], planned["minutes"]
        if not planned["settled"]:
            return [(f"not settled to ±{100 * precision:.0f} %: {named}; even {runs} more runs ({minutes:.0f} min) "
                     "would not settle " + ("it" if len(rows) == 1 else "them all"), "#plan")]
    cost = f"about {runs} more runs" + (f" ({minutes:.0f} min)" if minutes == minutes else "")
    return [(f"not settled to ±{100 * precision:.0f} %: {named}; {cost} would settle "
             + ("it" if len(rows) == 1 else "them"), "#plan")]


@dataclass(frozen=True)
class Frames:
    """What the first screen's answers are computed from: the runs (all, or one graph's) and the
    tables of the render's context that the answers read."""
    runs: pd.DataFrame
    points: pd.DataFrame
    speed: pd.DataFrame
    scaling: pd.DataFrame
    gap: pd.DataFrame
    workers: pd.DataFrame
    batch: pd.DataFrame
    failures: list
    loaders: pd.DataFrame | None = None  # analysis.variants.loaders rows, where another loader ran
    projection: dict | None = None  # analysis.projection.predict.project's frames, where one was made
    trim: pd.DataFrame | None = None  # analysis.variants.trim rows, where a framework's trimmed runs ran

    @cached_property  # read by several answers: computed once per Frames
    def perf(self) -> pd.DataFrame:
        return performance_runs(self.runs)

    def of_graph(self, name: str, datasets_runs: pd.DataFrame) -> "Frames":
        """These frames cut to one graph's runs: its experiments, failures, loader and trim rows."""
        from analysis.variants.loaders import loader_rows
        from analysis.variants.trim import trim_rows

        exps = set(datasets_runs["experiment"])

        def only(frame):
            return frame[frame["experiment"].isin(exps)] if len(frame) and "experiment" in frame else frame

        projection = None if self.projection is None else {
            **self.projection, **{k: only(self.projection[k]) for k in ("projection", "validation")}}
        return Frames(datasets_runs, only(self.points), only(self.speed), only(self.scaling), only(self.gap),
                      only(self.workers), only(self.batch),
                      [f for f in self.failures if str((f.get("config") or {}).get("dataset")) == name],
                      loader_rows(datasets_runs), projection, trim_rows(datasets_runs))


# Each section's first-screen answer (analysis.report.sections names them): Frames and the main
# experiment in, an Answer out, or None where the section has nothing to answer from.
def answer_speed(f: Frames, exp) -> Answer:
    """Which framework is faster and why; with trimmed runs, how much of the gap trimming closes."""
    from analysis.variants.trim import trim_parts

    ans = speed_answer(f.speed, exp)
    if f.trim is not None and len(f.trim):
        ans.parts += trim_parts(f.trim, ans.intervals)
    return ans


def answer_loaders(f: Frames, exp) -> Answer | None:
    return loader_answer(f.loaders) if f.loaders is not None and len(f.loaders) else None


def answer_scaling(f: Frames, exp) -> Answer:
    return scaling_answer(f.scaling, f.gap, exp)


def answer_projection(f: Frames, exp) -> Answer | None:
    return None if f.projection is None else projection_answer(f.projection, timing_only(f.perf), exp)


def answer_workers(f: Frames, exp) -> Answer:
    return axis_answer(f.workers, f.perf, exp, "workers")


def answer_batch(f: Frames, exp) -> Answer:
    return axis_answer(f.batch, f.perf, exp, "batch_size")


def answer_breakdown(f: Frames, exp) -> Answer:
    return step_answer(f.points, exp, f.perf)


def answer_deadlocks(f: Frames, exp) -> Answer:
    return hang_answer(f.failures, len(f.runs))


def answer_accuracy(f: Frames, exp) -> Answer:
    return accuracy_answer(f.runs)


def all_answers(f: Frames, precision: float = DEFAULT_PRECISION) -> dict:
    """{'experiment', 'answers': [Answer], 'caveats': [(text, href)], 'open': open_answers rows} for
    the report's top: each declared section's answer (analysis.report.sections), in their order,
    where it has one; `precision`: the relative half-width an answer should reach (the sweep's
    adaptive.precision)."""
    exp = main_experiment(f.speed, f.points)
    perf = f.perf
    answers = [a for a in (sections.answer_function(s)(f, exp) for s in sections.SECTIONS if s.answer) if a]
    p = f.points[f.points["experiment"] == exp] if exp is not None and len(f.points) else f.points.iloc[0:0]
    e = perf[perf["experiment"] == exp] if exp is not None and len(perf) else perf.iloc[0:0]
    repeats = float(p["n_ok"].median()) if len(p) else float("nan")
    run_s = float(pd.to_numeric(e.get("wall_time_s"), errors="coerce").median()) if len(e) else float("nan")
    still_open = open_answers(answers, precision, repeats, run_s) if repeats == repeats else []
    planned = planned_cost(still_open, timing_only(perf), exp, precision)
    runs = f.runs
    return {"experiment": exp, "answers": answers,
            "caveats": _open_caveat(still_open, precision, planned) + caveats(runs, f.points, f.scaling, exp),
            "open": still_open, "n_runs": int((runs["experiment"] == exp).sum()) if exp is not None else 0}


# -- which graph ------------------------------------------------------------------------------

def graph_names(runs: pd.DataFrame, exp) -> list:
    """The graphs (dataset names) the runs read: the main experiment's first, then by run count."""
    if runs.empty or "dataset" not in runs:
        return []
    counts = runs["dataset"].dropna().astype(str).value_counts()
    main = [str(d) for d in runs.loc[runs["experiment"] == exp, "dataset"].dropna().unique()] if exp is not None else []
    return list(dict.fromkeys(main + sorted(counts.index, key=lambda d: (-counts[d], d))))


def with_graphs(top: dict, f: Frames, datasets: list, precision: float = DEFAULT_PRECISION) -> dict:
    """`top` (all_answers) with the graphs its answers come from: "graphs", one {"name", "line"}
    per graph (analysis.graphs.line; `datasets`: the aggregate's datasets.json records), the
    main experiment's first; and, when the runs read several graphs, "per_graph": all_answers
    of each graph's runs alone (Frames.of_graph), each with its line. Table rows are anchored
    by experiment, and an experiment holds one graph, so every link of a graph's answers lands
    on that graph's rows."""
    from analysis import graphs

    names = graph_names(f.runs, top["experiment"])
    lines = {n: graphs.line(n, [r for r in datasets or [] if r.get("name") == n]) for n in names}
    top = {**top, "graphs": [{"name": n, "line": lines[n]} for n in names], "per_graph": []}
    if len(names) < 2:
        return top
    for n in names:
        one = all_answers(f.of_graph(n, f.runs[f.runs["dataset"].astype(str) == n]), precision)
        top["per_graph"].append({**one, "name": n, "line": lines[n]})
    return top


def first_screen(ctx: Context, precision: float = DEFAULT_PRECISION) -> dict:
    """all_answers with its graphs (with_graphs) of the render's shared context, from the frames
    and tables it computes once for the whole page; `precision` as all_answers takes it."""
    tabs = ctx.tables
    f = Frames(ctx.runs, ctx.points, ctx.speed, ctx.scaling, ctx.gap, tabs["workers"].data, tabs["batch"].data,
               ctx.agg.failures, tabs["loaders"].data, ctx.projection, tabs["trim"].data)
    return with_graphs(all_answers(f, precision), f, ctx.agg.datasets, precision)


def from_aggregate(agg, collectives=None) -> dict:
    """first_screen of an analysis.aggregate.Aggregate, for a look at the answers alone;
    `collectives`: the all-reduce micro-benchmark's JSON or fit for the projection (None: its fallback)."""
    return first_screen(Context(agg, collectives))
