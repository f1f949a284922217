"""The report's figures: which grid points each draws, which it leaves out for having nothing to
compare, their captions, and writing them (plots builds them; analysis.REPORT_PLOTS names them).

A section shows the panels of the experiment its answer speaks for, at a readable size; the
figure of every experiment's panels (NAME_all) is folded under it. A figure with nothing to
compare (one point, a baseline alone) is left out of the page with one line saying why; its PNG
is written all the same.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pandas as pd

from analysis import REPORT_PLOTS
from analysis.report import plots
from analysis.projection import speedup_gap

FULL_GRIDS = {"runtime_vs_devices": "runtime_vs_devices_all", "speedup": "speedup_all", "breakdown": "breakdown_all"}
CAPTIONS = {
    "summary": "One framework's steady-state epoch time over the other's per configuration, with its 95% "
               "interval; the line at 1× is parity, a coloured point's interval excludes it.",
    "status_map": "Outcome of every configuration, including fault-injection demonstrations; the "
                  "colour is the worst outcome over repeats.",
    "runtime_vs_devices": "Training time (slowest rank) against devices, one panel per model and batch "
                          "size, like the seed study's Figure 1. An X marks a configuration without an ok run.",
    "runtime_vs_devices_all": "The same for every experiment of the sweep (one row per experiment and model).",
    "work": "Per configuration, the epoch-time ratio of the two frameworks and the two factors it splits into: "
            "the ratio of their edge updates per step (work) and of their time per edge update (95% intervals "
            "on the time ratios).",
    "speedup": "Speed-up over the fewest devices; the dashed line is ideal linear scaling.",
    "speedup_all": "The same for every experiment of the sweep (one row per experiment and model).",
    "speedup_gap": "Per multi-device point: the ideal epoch time (the fewest devices' epoch time / N) and "
                   "the measured gap to it split into extra steps, loader wait, compute contention, gradient "
                   "all-reduce and waiting, and the unexplained rest; parts that gave time back run "
                   "leftwards in the hatched strip, which ends at the measured epoch time.",
    "breakdown": "Mean time per training step split into phases (backward includes the all-reduce).",
    "breakdown_all": "The same for every experiment of the sweep.",
    "throughput": "Training seed nodes per second (all processes) against the per-process batch size.",
    "projection": "Speed-up over 1 device against devices, per model at each framework's median configuration: "
                  "the measured points, the model's projection with its interval band (calibrated on the held-out errors where enough were measured), and each measured "
                  "multi-device point as the model predicts it without its own runs (out of sample). Past "
                  "the shaded line the host runs more processes than it has cores.",
    "resources": "CPU use (100% = one core) and resident memory of each rank (solid) and its loader "
                 "workers (dashed, summed) for selected runs: per framework its largest ok "
                 "configuration, then failed runs.",
}
NVML_CAPTION = " GPU utilisation from NVML."  # added to the resources caption where NVML was sampled


def png_data_uri(path: Path) -> str:
    """A PNG file as a data URI, so the page embeds its images."""
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode()


def _having(df: pd.DataFrame, keys: list, ok: pd.DataFrame) -> pd.DataFrame:
    """The rows of `df` whose `keys` occur in `ok`."""
    if df.empty or ok.empty:
        return df.iloc[0:0]
    keep = set(ok[keys].itertuples(index=False, name=None))
    return df[[k in keep for k in df[keys].itertuples(index=False, name=None)]]


def comparable(points: pd.DataFrame, keys=("experiment", "model", "batch_size"), axis=None) -> pd.DataFrame:
    """Grid points of the figure panels (`keys`) that compare something: two or more ok points,
    or with `axis`, two or more ok values of it. A one-point panel, or one of failures only, is
    left out (the failures have the deadlock section)."""
    ok = points[points["n_ok"] > 0] if len(points) else points
    keys = list(keys)
    n = ok.groupby(keys)[axis].nunique() if axis else ok.groupby(keys).size() if len(ok) else pd.Series(dtype=int)
    return _having(points, keys, n[n >= 2].reset_index()[keys] if len(n) else ok.iloc[0:0])


def breakdown_points(points: pd.DataFrame) -> pd.DataFrame:
    """The points the breakdown figure draws: its comparable panels; where there are none (one
    point per model, as a one-GPU check has), every ok point with phase times, since a step's
    split into phases says something on its own."""
    timed = points.dropna(subset=["step_s_mean"]) if len(points) else points
    drawn = comparable(timed)
    return drawn if len(drawn) or timed.empty else timed[timed["n_ok"] > 0]


def measured_series(scaling: pd.DataFrame) -> pd.DataFrame:
    """The scaling series with a speed-up beyond their base (a series of a baseline alone compares nothing)."""
    series = list(speedup_gap.SERIES)
    multi = scaling[(scaling["devices"] > scaling["base_devices"]) & scaling["speedup"].notna()] \
        if len(scaling) else scaling
    return _having(scaling, series, multi)


def not_drawn(runs: pd.DataFrame, figure_data: dict, gap: pd.DataFrame) -> dict:
    """name -> why the page leaves a figure out (nothing to compare in it); the PNG asset is
    written all the same. `figure_data`: the frames the figures draw (comparable panels only)."""
    reasons = {
        "runtime_vs_devices": "Not drawn: no model and batch size has two ok points to compare.",
        "speedup": "Not drawn: no configuration has ok runs at two device counts.",
        "breakdown": "Not drawn: fewer than two ok points with phase times in any panel.",
        "throughput": "Not drawn: one batch size per configuration, so there is no curve.",
    }
    out = {name: why for name, why in reasons.items() if figure_data[name].empty}
    for main, full in FULL_GRIDS.items():
        if figure_data[full].empty:
            out[full] = reasons[main]
        elif set(figure_data[full]["experiment"]) <= set(figure_data[main].get("experiment", ())):
            out[full] = "Not drawn again: the sweep has one experiment, shown above."
    if gap.empty or not gap["reason"].isna().any():
        out["speedup_gap"] = "Not drawn: no multi-device point could be split (the table says why)."
    if len(runs) and (runs["status"] == "ok").all():
        out["status_map"] = f"Not drawn: all {len(runs)} runs ended ok."
    return out


def drawn_data(points: pd.DataFrame, scaling: pd.DataFrame, experiment=None) -> dict:
    """Figure name -> the frame it draws, where it draws less than all points: the comparable
    panels, of `experiment` (the one the answers speak for; None: all) for the sections' figures."""
    main = points if experiment is None or not len(points) else points[points["experiment"] == experiment]
    main_scaling = scaling if experiment is None or not len(scaling) else \
        scaling[scaling["experiment"] == experiment]
    return {"runtime_vs_devices": comparable(main), "runtime_vs_devices_all": comparable(points),
            "speedup": measured_series(main_scaling), "speedup_all": measured_series(scaling),
            "breakdown": breakdown_points(main), "breakdown_all": breakdown_points(points),
            "throughput": comparable(points, ("experiment", "framework", "model", "devices", "workers"), "batch_size")}


def write_figures(ctx, assets: Path) -> dict:
    """Write every figure of analysis.REPORT_PLOTS as a PNG under `assets`; name -> {src, caption,
    file, why} (why: the line the page shows instead of a figure with nothing to compare, or None).
    `ctx`: the render's analysis.report.context.Context."""
    skip = not_drawn(ctx.runs, ctx.drawn, ctx.gap)
    figures = {}
    for name, asset in REPORT_PLOTS.items():
        fig = ctx.build(asset)
        path = assets / f"{name}.png"
        fig.savefig(path, dpi=100, bbox_inches="tight")
        plots.plt.close(fig)  # right after saving, so figures never pile up
        note = getattr(fig, "gnnscale_note", None)  # an empty figure: say why in words instead
        why = skip.get(name) or (f"Not drawn: {note}" if note else None)
        caption = CAPTIONS[name] + (NVML_CAPTION if name == "resources" and not ctx.agg.nvml.empty else "")
        figures[name] = {"src": None if why else png_data_uri(path), "caption": caption, "file": path.name,
                         "why": why}
    return figures
