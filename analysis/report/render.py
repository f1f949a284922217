"""The HTML report: answers first, then one section per question of the study, the findings,
the deadlock report, environment and fairness.

This module renders: it writes every table and plot of analysis.REPORT_TABLES and REPORT_PLOTS
as an asset and the page from them, all from one analysis.report.context.Context, so what several
parts read (the scaling series, the framework comparisons, the projection) is computed once.
The answers on the first screen come from analysis.report.answers, the findings from
analysis.report.findings, the tables from analysis.tables and analysis.report.sweep_record, the
figures from analysis.report.figures. On the page every table is folded under <details>. Its
command line (`python -m analysis.report`) is analysis/report/__main__.py.

The page is self-contained (inline CSS, images as data URIs, no script, nothing fetched), so it
opens offline and can be mailed. Every table (CSV + HTML fragment) and plot (PNG) is also
written to --assets under the fixed names in ASSETS, for Snakemake to declare and caption.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path

import jinja2

from analysis import FRAMEWORK_ORDER, REPORT_PLOTS, REPORT_TABLES, STATUS_COLOURS, declared, framework_label
from analysis.aggregate import Aggregate
from analysis.projection import predict
from analysis.report import answers, first_screen, sections
from analysis.report.context import Context
from analysis.report.figures import write_figures
from analysis.report.findings import all_findings, precision_findings, study_findings
from analysis.report.sweep_record import adaptive_findings
from analysis.variants import lanes, loaders

TEMPLATES = Path(__file__).resolve().parent / "templates"
# Every file the report writes beside index.html (Snakemake declares these as outputs).
ASSETS = tuple(f"{t}.{ext}" for t in declared(REPORT_TABLES) for ext in ("csv", "html")) + tuple(
    f"{p}.png" for p in declared(REPORT_PLOTS))


def page_findings(ctx: Context) -> dict:
    """The page's findings, by where they stand: the per-experiment groups and those of the plan,
    the lanes, the loaders and the seed study."""
    tabs = ctx.tables
    return dict(
        findings=all_findings(ctx.runs, ctx.points, ctx.scaling, tabs["paper_comparison"].data, ctx.agg.invalid,
                              workers=tabs["workers"].data, batch=tabs["batch"].data, plan=tabs["plan"].data,
                              gap=ctx.gap, speed=ctx.speed),
        plan_findings=adaptive_findings(ctx.agg.plan) + precision_findings(ctx.perf, tabs["plan"].data),
        lane_findings=lanes.lanes_findings(tabs["lanes"].data),
        loader_findings=loaders.loaders_findings(tabs["loaders"].data),
        study_findings=study_findings(tabs["study_work"].data, tabs["study_time"].data, ctx.paper, ctx.perf),
    )


def page(ctx: Context, top: dict, figures: dict, source: str) -> str:
    """The page's HTML from the context, its first screen (`top`) and its written figures."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    runs = ctx.runs
    return env.get_template("report.html.j2").render(
        generated=dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        frameworks=" vs ".join(framework_label(f) for f in FRAMEWORK_ORDER),  # the title: every declared one
        source=source, counts=Counter(runs["status"]), n_runs=len(runs), n_invalid=len(ctx.agg.invalid),
        status_colours=STATUS_COLOURS, top=top, answer={a.key: a for a in top["answers"]},
        **page_findings(ctx),
        tables={k: {"title": t.title, "description": t.description, "html": t.html(), "empty": not t.grids
                    and t.body is None} for k, t in ctx.tables.items()},
        figures=figures, n_failures=len(ctx.agg.failures), sections=sections.SECTIONS, sections_by_key=sections.by_key(),
        nav_counts={"deadlocks": len(ctx.agg.failures), "invalid": len(ctx.agg.invalid)},
        projection=predict.page_notes(ctx.projection, answers.timing_only(ctx.perf), top["experiment"]),
        experiments=list(dict.fromkeys(runs["experiment"])),
        excluded_faults=int(len(runs) - len(ctx.perf)),
    )


def render(agg: Aggregate, out: Path, assets: Path, source: str = "", collectives=None) -> Path:
    """Write every asset and the self-contained page; return the page's path. `collectives`: the
    all-reduce micro-benchmark's JSON (or its fit) for the projection; None: the model's fallback."""
    out, assets = Path(out), Path(assets)
    out.parent.mkdir(parents=True, exist_ok=True)
    assets.mkdir(parents=True, exist_ok=True)
    # from the frames in memory: the report reads the aggregate it was given, nothing else
    ctx = Context(agg, collectives)
    for t in ctx.tables.values():
        t.write(assets)
    precision = (agg.plan or {}).get("precision") or answers.DEFAULT_PRECISION
    top = first_screen.first_screen(ctx, precision)
    figures = write_figures(ctx, assets)
    out.write_text(page(ctx, top, figures, source))
    return out
