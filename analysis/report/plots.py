"""Figures of the report (matplotlib, Agg backend). Each function returns a Figure that reads
on its own: title, axis labels with units, legend. A figure with nothing to show says why."""

from __future__ import annotations

import math
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.colors import BoundaryNorm, ListedColormap  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402

from analysis import (FRAMEWORK_COLOURS, FRAMEWORK_ORDER, MODEL_ORDER, PHASE_COLUMNS, PHASE_LABELS,  # noqa: E402
                      STATUS_COLOURS, STATUSES, framework_label, model_label)
from analysis import tables  # noqa: E402
from analysis.projection import speedup_gap  # noqa: E402
from analysis.formatting import fmt_si, worst_status  # noqa: E402
from analysis.grouping import paper_order  # noqa: E402

sns.set_theme(style="whitegrid", context="notebook", font_scale=0.85)
LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P")
PHASE_COLOURS = dict(zip(PHASE_COLUMNS, sns.color_palette("Set2", len(PHASE_COLUMNS))))
PANEL_W, PANEL_H = 3.8, 2.9


def placeholder(title: str, message: str):
    """A small figure that says why there is nothing to plot (the page repeats `message` as text)."""
    fig, ax = plt.subplots(figsize=(6, 1.6))
    fig.gnnscale_note = message
    ax.axis("off")
    ax.set_title(title, fontweight="bold")
    ax.text(0.5, 0.4, message, ha="center", va="center", fontsize=10, color="#555555", wrap=True)
    return fig


def _ordered(values, order):
    values = list(dict.fromkeys(values))
    return [v for v in order if v in values] + sorted(v for v in values if v not in order)


def _figure(nrows: int, ncols: int, w: float, h: float):
    return plt.subplots(nrows, ncols, figsize=(w * ncols, h * nrows + 0.8), squeeze=False, layout="constrained")


def _finish(fig, title: str, handles, ncol: int = 7) -> None:
    """Title on top, one legend below every panel."""
    fig.suptitle(title, fontweight="bold")
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), ncol), frameon=False)


def _facets(points: pd.DataFrame, col: str, w=PANEL_W, h=PANEL_H):
    """One row per experiment and model; that row's own values of `col` as columns."""
    rows = []
    for e in dict.fromkeys(points["experiment"]):
        pe = points[points["experiment"] == e]
        for m in _ordered(pe["model"], MODEL_ORDER):
            rows.append((e, m, sorted(pe.loc[pe["model"] == m, col].unique())))
    fig, axes = _figure(len(rows), max(len(r[2]) for r in rows), w, h)
    for i, (_, _, cols) in enumerate(rows):
        for ax in axes[i][len(cols):]:
            ax.set_visible(False)
    return fig, axes, rows


def _panel_title(exp: str, n_exps: int, text: str) -> str:
    return f"{exp}\n{text}" if n_exps > 1 else text


def _is_bottom(axes, i, j) -> bool:
    return i == len(axes) - 1 or not axes[i + 1][j].get_visible()


def _devices_axis(ax, devices):
    ax.set_xscale("log", base=2)
    ax.set_xticks(devices)
    ax.set_xticklabels([str(d) for d in devices])
    ax.minorticks_off()
    ax.set_xlim(min(devices) / 1.25, max(devices) * 1.25)


def _workers_label(label: str) -> str:
    if "/" in label:
        return f"workers {label} (by device count)"
    return f"{label} loader worker{'s' if label != '1' else ''}"


def _mark_failures(ax, failed):
    """Non-ok grid points: an X at the top of the panel in the status colour, with the status."""
    trans = blended_transform_factory(ax.transData, ax.transAxes)
    stacked = {}
    for p in failed:
        level = stacked.get(p["devices"], 0)
        stacked[p["devices"]] = level + 1
        y = 0.94 - 0.1 * level
        colour = STATUS_COLOURS.get(p["worst_status"], "k")
        ax.scatter([p["devices"]], [y], transform=trans, marker="X", s=55, color=colour, zorder=5, clip_on=False)
        ax.annotate(f"{framework_label(p['framework'])}, {p['workers']} wkr: {p['worst_status']}",
                    (p["devices"], y), xycoords=trans, xytext=(-7, 0), textcoords="offset points",
                    fontsize=7, va="center", ha="right", color=colour)


def _line_panels(points, value, ylabel, title, ideal=False):
    """Shared body of the runtime and speed-up figures: value vs devices per framework and workers."""
    points = points.assign(series_workers=tables.series_workers(points)) if "series_workers" not in points else points
    fig, axes, rows = _facets(points, "batch_size")
    frameworks = _ordered(points["framework"], FRAMEWORK_ORDER)
    series = sorted(points["series_workers"].unique(), key=lambda s: [int(x) for x in s.split("/")])
    n_exps = points["experiment"].nunique()
    for i, (exp, model, batches) in enumerate(rows):
        for j, batch in enumerate(batches):
            ax = axes[i][j]
            panel = points[(points["experiment"] == exp) & (points["model"] == model) & (points["batch_size"] == batch)]
            devices = sorted(panel["devices"].unique())
            for f in frameworks:
                for k, w in enumerate(series):
                    s = panel[(panel["framework"] == f) & (panel["series_workers"] == w)].sort_values("devices")
                    ok = s[(s["n_ok"] > 0) & s[value].notna()]
                    if ok.empty:
                        continue
                    err = ok[f"{value}_ci"] if f"{value}_ci" in ok else None
                    if f"{value}_low" in ok:  # an asymmetric interval (a ratio's); none at the base
                        err = np.vstack([(ok[value] - ok[f"{value}_low"]).fillna(0).to_numpy(),
                                         (ok[f"{value}_high"] - ok[value]).fillna(0).to_numpy()])
                    ax.errorbar(ok["devices"], ok[value], yerr=err, color=FRAMEWORK_COLOURS.get(f),
                                linestyle=LINESTYLES[k % len(LINESTYLES)], marker=MARKERS[k % len(MARKERS)],
                                capsize=3, markersize=5, linewidth=1.6)
            if ideal:
                ax.plot(devices, [d / min(devices) for d in devices], color="#888888", linestyle="--",
                        linewidth=1, zorder=0)
            _mark_failures(ax, panel[panel["n_ok"] == 0].to_dict("records"))
            _devices_axis(ax, devices)
            ax.set_ylim(bottom=0, top=ax.get_ylim()[1] * 1.12)  # headroom for failure marks
            if not panel[value].notna().any():  # only failures here: a y scale would mean nothing
                ax.set_yticks([])
                ax.text(0.5, 0.45, "no ok run", transform=ax.transAxes, ha="center", color="#777777")
            ax.set_title(_panel_title(exp, n_exps, f"{model_label(model)}, batch {batch} per process"), fontsize=9)
            ax.set_xlabel("devices (processes)" if _is_bottom(axes, i, j) else "")
            ax.set_ylabel(ylabel if j == 0 else "")
    handles = [Line2D([], [], color=FRAMEWORK_COLOURS.get(f, "k"), marker="o", label=framework_label(f))
               for f in frameworks]
    if len(series) > 1:
        handles += [Line2D([], [], color="#444444", linestyle=LINESTYLES[k % len(LINESTYLES)],
                           marker=MARKERS[k % len(MARKERS)], label=_workers_label(w)) for k, w in enumerate(series)]
    if ideal:
        handles.append(Line2D([], [], color="#888888", linestyle="--", label="ideal (linear)"))
    if (points["n_ok"] == 0).any():
        handles.append(Line2D([], [], color="#555555", marker="X", linestyle="none", label="no ok run (status)"))
    _finish(fig, title, handles)
    return fig


def runtime_vs_devices(points: pd.DataFrame):
    """Steady-state epoch time vs devices per framework (the seed study's Figure 1, per epoch)."""
    title = "Steady-state epoch time vs number of devices (slowest rank; error bars: 95% CI over repeats)"
    if points.empty or (points["n_ok"] == 0).all():
        return placeholder(title, "No configuration finished ok, so there is no epoch time to plot.")
    p = points.rename(columns={"steady_epoch_time_s_mean": "time", "steady_epoch_time_s_ci95": "time_ci"})
    return _line_panels(p, "time", "epoch time (s)", title)


def speedup_vs_devices(scaling: pd.DataFrame):
    """Speed-up over the fewest devices against the ideal linear speed-up."""
    title = "Speed-up over the fewest devices, against ideal linear scaling"
    if scaling.empty or (scaling["speedup"].notna() & (scaling["devices"] > scaling["base_devices"])).sum() == 0:
        return placeholder(title, "Needs ok runs at two or more device counts of the same configuration.")
    return _line_panels(scaling.rename(columns={"low": "speedup_low", "high": "speedup_high"}), "speedup",
                        "speed-up (×, 95% CI)", title, ideal=True)


def breakdown_bars(points: pd.DataFrame):
    """Stacked per-step time by phase for every configuration."""
    title = "Where a training step's time goes (mean per step; bars: framework, devices d, loader workers w)"
    ok = points[points["n_ok"] > 0] if not points.empty else points
    if ok.empty or ok[[f"step_{p}_mean" for p in PHASE_COLUMNS]].isna().all().all():
        return placeholder(title, "No ok run recorded a step breakdown.")
    nbars = ok.groupby(["experiment", "model", "batch_size"]).size().max()
    fig, axes, rows = _facets(ok, "batch_size", w=max(PANEL_W, 0.36 * nbars + 1.0), h=PANEL_H + 0.3)
    n_exps = ok["experiment"].nunique()
    for i, (exp, model, batches) in enumerate(rows):
        for j, batch in enumerate(batches):
            ax = axes[i][j]
            panel = ok[(ok["experiment"] == exp) & (ok["model"] == model) & (ok["batch_size"] == batch)]
            panel = paper_order(panel, ["framework", "devices", "workers"])
            x = np.arange(len(panel))
            bottom = np.zeros(len(panel))
            for ph in PHASE_COLUMNS:
                vals = 1000 * panel[f"step_{ph}_mean"].fillna(0).to_numpy()
                ax.bar(x, vals, bottom=bottom, color=PHASE_COLOURS[ph], width=0.75, edgecolor="white", linewidth=0.5)
                bottom += vals
            ax.set_xticks(x)
            ax.set_xticklabels([f"{framework_label(r.framework)}\n{r.devices}d w{r.workers}" for r in panel.itertuples()],
                               fontsize=7)
            for lbl, r in zip(ax.get_xticklabels(), panel.itertuples()):
                lbl.set_color(FRAMEWORK_COLOURS.get(r.framework, "k"))
            ax.set_title(_panel_title(exp, n_exps, f"{model_label(model)}, batch {batch} per process"), fontsize=9)
            ax.set_ylabel("time per step (ms)" if j == 0 else "")
            ax.grid(axis="x", visible=False)
    _finish(fig, title, [Patch(color=PHASE_COLOURS[p], label=PHASE_LABELS[p]) for p in PHASE_COLUMNS])
    return fig


def throughput_vs_batch(points: pd.DataFrame):
    """Seed nodes per second vs batch size, per framework and device count."""
    title = "Steady-state throughput vs batch size (seed nodes per second, all processes; 95% CI)"
    ok = points[points["n_ok"] > 0] if not points.empty else points
    if ok.empty:
        return placeholder(title, "No configuration finished ok.")
    row_keys = [(e, w) for e in dict.fromkeys(ok["experiment"])
                for w in sorted(ok.loc[ok["experiment"] == e, "workers"].unique())]
    models = _ordered(ok["model"], MODEL_ORDER)
    fig, axes = _figure(len(row_keys), len(models), PANEL_W * 1.2, PANEL_H)
    frameworks = _ordered(ok["framework"], FRAMEWORK_ORDER)
    devices = sorted(ok["devices"].unique())
    n_exps = ok["experiment"].nunique()
    for i, (exp, w) in enumerate(row_keys):
        for j, model in enumerate(models):
            ax = axes[i][j]
            panel = ok[(ok["experiment"] == exp) & (ok["workers"] == w) & (ok["model"] == model)]
            for f in frameworks:
                for k, d in enumerate(devices):
                    s = panel[(panel["framework"] == f) & (panel["devices"] == d)].sort_values("batch_size")
                    if s.empty:
                        continue
                    ax.errorbar(s["batch_size"], s["steady_seed_nodes_per_s_mean"],
                                yerr=s["steady_seed_nodes_per_s_ci95"], color=FRAMEWORK_COLOURS.get(f),
                                linestyle=LINESTYLES[k % len(LINESTYLES)], marker=MARKERS[k % len(MARKERS)],
                                capsize=3, markersize=5)
            batches = sorted(ok.loc[ok["experiment"] == exp, "batch_size"].unique())
            ax.set_xscale("log", base=2)
            ax.set_xticks(batches)
            ax.set_xticklabels([str(b) for b in batches])
            ax.minorticks_off()
            ax.set_xlim(min(batches) / 1.3, max(batches) * 1.3)
            ax.set_ylim(bottom=0)
            ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: fmt_si(v)))
            ax.set_title(_panel_title(exp, n_exps, f"{model_label(model)}, {_workers_label(str(w))}"), fontsize=9)
            ax.set_xlabel("batch size (seed nodes per process)" if i == len(row_keys) - 1 else "")
            ax.set_ylabel("seed nodes / s" if j == 0 else "")
            if panel.empty:
                ax.text(0.5, 0.5, "no ok run", transform=ax.transAxes, ha="center", color="#777777")
    handles = [Line2D([], [], color=FRAMEWORK_COLOURS.get(f), marker="o", label=framework_label(f)) for f in frameworks]
    handles += [Line2D([], [], color="#444444", linestyle=LINESTYLES[k % len(LINESTYLES)], marker=MARKERS[k % len(MARKERS)],
                       label=f"{d} device{'s' if d > 1 else ''}") for k, d in enumerate(devices)]
    _finish(fig, title, handles)
    return fig


def select_resource_runs(runs: pd.DataFrame, cpu: pd.DataFrame, nvml: pd.DataFrame, limit: int = 4) -> list:
    """Runs worth showing over time: per framework its largest ok configuration (GPU-sampled runs
    first), then failures."""
    # Only runs sampled long enough to show a curve (the sampler runs about once a second).
    samples = cpu.groupby("run_id")["t_s"].agg(lambda t: t.round().nunique()) if not cpu.empty else pd.Series(dtype=int)
    cand = runs[runs["run_id"].isin(samples[samples >= 3].index)]
    if cand.empty:
        return []
    chosen = []
    ok = cand[cand["status"] == "ok"].assign(gpu=lambda d: d["run_id"].isin(set(nvml["run_id"])))
    ok = ok.sort_values(["gpu", "devices", "workers", "batch_size"], ascending=False)
    for f in _ordered(ok["framework"], FRAMEWORK_ORDER):
        chosen.append(ok[ok["framework"] == f]["run_id"].iloc[0])
    bad = cand[cand["status"] != "ok"]
    chosen += list(bad["run_id"])
    return list(dict.fromkeys(chosen))[:limit]


def per_second(samples: pd.DataFrame) -> pd.DataFrame:
    """CPU use and resident memory of a group of processes per second (`sec`): each process's mean
    over its samples in that second, summed over the processes (a sampler faster than once a
    second, as on GPU checks, takes several samples of one process in a second)."""
    each = samples.groupby(["sec", "pid"]).agg(cpu=("cpu_percent", "mean"), rss=("rss_bytes", "mean"))
    return each.groupby(level="sec").sum()


def resources_over_time(runs: pd.DataFrame, cpu: pd.DataFrame, nvml: pd.DataFrame, run_ids: list):
    """CPU utilisation and memory per rank (and its loader workers) over time; GPU if sampled."""
    title = "CPU utilisation and memory over time (selected runs)"
    if not run_ids:
        return placeholder(title, "No run recorded CPU samples (rank*/cpu.csv).")
    with_gpu = not nvml.empty and nvml["run_id"].isin(run_ids).any()
    ncols = 3 if with_gpu else 2
    fig, axes = _figure(len(run_ids), ncols, 4.6, 2.6)
    info = runs.set_index("run_id")
    ranks_seen = []
    for i, rid in enumerate(run_ids):
        r = info.loc[rid]
        data = cpu[cpu["run_id"] == rid].copy()
        data["t"] = data["t_s"] - data["t_s"].min()
        data["sec"] = data["t"].round()
        for rank, g in data.groupby("rank"):
            colour = sns.color_palette("tab10")[int(rank) % 10]
            ranks_seen.append(int(rank))
            for role, style in (("rank", "-"), ("worker", "--")):
                s = per_second(g[g["role"] == role])
                if s.empty:
                    continue
                axes[i][0].plot(s.index, s["cpu"], color=colour, linestyle=style, linewidth=1.2)
                axes[i][1].plot(s.index, s["rss"] / 2**30, color=colour, linestyle=style, linewidth=1.2)
        label = (f"{framework_label(r['framework'])} {model_label(r['model'])}, {r['devices']} dev, "
                 f"batch {r['batch_size']}, {r['workers']} worker{'s' if r['workers'] != 1 else ''}: {r['status']}")
        axes[i][0].set_title(label, fontsize=9, loc="left",
                             color=STATUS_COLOURS.get(r["status"], "k") if r["status"] != "ok" else "k")
        axes[i][0].set_ylabel("CPU (% of one core)")
        axes[i][1].set_ylabel("resident memory (GiB)")
        for ax in axes[i][:2]:
            ax.set_ylim(bottom=0)
            ax.set_xlabel("time since the first sample (s)" if i == len(run_ids) - 1 else "")
        if with_gpu:
            g = nvml[nvml["run_id"] == rid]
            ax = axes[i][2]
            for (rank, gpu), s in g.groupby(["rank", "gpu"]):
                ax.plot(s["t_s"] - g["t_s"].min(), s["util_percent"], label=f"rank {rank} (NVML GPU {gpu})")
            ax.set_ylim(0, 105)
            ax.set_ylabel("GPU utilisation (%)")
            if g.empty:
                ax.text(0.5, 0.5, "no NVML samples", transform=ax.transAxes, ha="center", color="#777777")
            else:
                ax.legend(fontsize=7, loc="lower right")
    palette = sns.color_palette("tab10")
    handles = [Line2D([], [], color=palette[r % 10], label=f"rank {r}") for r in sorted(set(ranks_seen))]
    handles += [Line2D([], [], color="#444444", linestyle="-", label="rank process"),
                Line2D([], [], color="#444444", linestyle="--", label="its loader workers (sum)")]
    _finish(fig, title, handles)
    return fig


STATUS_CODES = {s: i for i, s in enumerate(list(STATUSES) + ["not run"])}


def _status_layouts(runs: pd.DataFrame) -> list:
    """Per experiment (exp, its runs, row keys (model, devices, workers), column keys (batch, framework))."""
    layouts = []
    for exp in dict.fromkeys(runs["experiment"]):
        g = runs[runs["experiment"] == exp]
        rkeys = sorted({(r.model, r.devices, r.workers) for r in g.itertuples()},
                       key=lambda k: (MODEL_ORDER.index(k[0]) if k[0] in MODEL_ORDER else 9, k[1], k[2]))
        ckeys = sorted({(r.batch_size, r.framework) for r in g.itertuples()},
                       key=lambda k: (k[0], FRAMEWORK_ORDER.index(k[1]) if k[1] in FRAMEWORK_ORDER else 9))
        layouts.append((exp, g, rkeys, ckeys))
    return layouts


def _status_panel(ax, exp: str, g: pd.DataFrame, rkeys: list, ckeys: list, max_cols: int, cmap, norm) -> None:
    """One experiment's grid, each cell the worst outcome over its repeats, as wide as in every panel."""
    grid = np.full((len(rkeys), len(ckeys)), STATUS_CODES["not run"])
    text = [["" for _ in ckeys] for _ in rkeys]
    for (i, rk), (j, ck) in ((a, b) for a in enumerate(rkeys) for b in enumerate(ckeys)):
        cell = g[(g["model"] == rk[0]) & (g["devices"] == rk[1]) & (g["workers"] == rk[2])
                 & (g["batch_size"] == ck[0]) & (g["framework"] == ck[1])]
        if cell.empty:
            continue
        st = worst_status(set(cell["status"]))
        grid[i, j] = STATUS_CODES[st]
        n_bad = (cell["status"] != "ok").sum()
        text[i][j] = st if n_bad in (0, len(cell)) else f"{n_bad}/{len(cell)} {st}"
    ax.imshow(grid, cmap=cmap, norm=norm, aspect="auto")
    for i in range(len(rkeys)):
        for j in range(len(ckeys)):
            ax.text(j, i, text[i][j], ha="center", va="center", fontsize=8,
                    color="white" if grid[i, j] not in (STATUS_CODES["not run"],) else "#999999")
    ax.set_xticks(range(len(ckeys)))
    ax.set_xticklabels([f"{framework_label(f)}\nbatch {b}" for b, f in ckeys], fontsize=8)
    ax.set_yticks(range(len(rkeys)))
    ax.set_yticklabels([f"{model_label(m)}, {d} dev, {w} wkr" for m, d, w in rkeys], fontsize=8)
    ax.set_xticks(np.arange(len(ckeys) + 1) - 0.5, minor=True)
    ax.set_yticks(np.arange(len(rkeys) + 1) - 0.5, minor=True)
    ax.grid(which="minor", color="white", linewidth=1.5)
    ax.grid(which="major", visible=False)
    ax.tick_params(which="minor", length=0)
    ax.set_xlim(-0.5, max_cols - 0.5)  # equal cell widths in every panel
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)
    ax.set_title(exp, fontsize=9, loc="left")


def status_map(runs: pd.DataFrame):
    """Outcome of every grid point: rows model x devices x workers, columns batch x framework."""
    title = "Outcome of every configuration"
    if runs.empty:
        return placeholder(title, "No valid results were found.")
    layouts = _status_layouts(runs)
    max_cols = max(4, max(len(c) for *_, c in layouts))  # at least 4 cell widths: no huge cells
    width = 0.9 * max_cols + 3.0
    heights = [0.32 * len(r) + 0.7 for _, _, r, _ in layouts]
    fig, axes = plt.subplots(len(layouts), 1, figsize=(width, sum(heights) + 1.5), squeeze=False,
                             gridspec_kw={"height_ratios": heights}, layout="constrained")
    colours = [STATUS_COLOURS[s] for s in STATUS_CODES]
    cmap = ListedColormap(colours)
    norm = BoundaryNorm(np.arange(len(colours) + 1) - 0.5, len(colours))
    for ax, (exp, g, rkeys, ckeys) in zip(axes[:, 0], layouts):
        _status_panel(ax, exp, g, rkeys, ckeys, max_cols, cmap, norm)
    handles = [Patch(color=STATUS_COLOURS[s], label=s) for s in STATUS_CODES]
    _finish(fig, "Outcome of every configuration\n(worst over repeats)" if width < 8 else title + " (worst outcome over repeats)",
            handles, ncol=max(2, int(width / 1.1)))
    return fig


GAP_COLOURS = {"ideal": "#c6dbef", "extra_steps": "#a6761d", "loader_wait": PHASE_COLOURS["load_wait_s"],
               "compute": PHASE_COLOURS["forward_s"], "allreduce_wait": PHASE_COLOURS["backward_s"],
               "unexplained": "#f0f0f0"}


def _gap_bar(ax, y: float, r: dict) -> None:
    """One point's bar, a waterfall: the ideal time, then the parts that cost time stacked to its
    right; the parts that gave time back run leftwards from there in a hatched strip below the bar,
    so the strip ends at the measured time (the black tick)."""
    ax.barh(y - 0.08, r["ideal_s"], color=GAP_COLOURS["ideal"], edgecolor="white", height=0.5)
    right = r["ideal_s"]
    for p in (p for p in speedup_gap.PARTS if r[f"{p}_s"] >= 0):
        ax.barh(y - 0.08, r[f"{p}_s"], left=right, color=GAP_COLOURS[p], height=0.5, linewidth=0.4,
                hatch="///" if p == "unexplained" else None, edgecolor="#777777" if p == "unexplained" else "white")
        right += r[f"{p}_s"]
    left = right
    for p in (p for p in speedup_gap.PARTS if r[f"{p}_s"] < 0):
        left += r[f"{p}_s"]
        ax.barh(y + 0.3, -r[f"{p}_s"], left=left, color=GAP_COLOURS[p], height=0.2, hatch="xxx",
                edgecolor="#777777", linewidth=0.4)
    ax.plot([r["epoch_s"]] * 2, [y - 0.38, y + 0.42], color="black", linewidth=2)
    ax.annotate(f"{r['speedup']:.2f}× of {r['ideal_speedup']:g}×", (max(right, r["epoch_s"]), y),
                xytext=(4, 0), textcoords="offset points", va="center", fontsize=7.5)


def gap_bars(gap: pd.DataFrame):
    """Per multi-device point: the ideal epoch time (base / N) and the measured gap to it, split
    into its parts (analysis.projection.speedup_gap), one horizontal stacked bar per point."""
    title = "Where the missing speed-up goes (seconds per epoch, slowest rank, steady epochs)"
    ok = gap[gap["reason"].isna()] if not gap.empty else gap
    if ok.empty:
        why = "; ".join(dict.fromkeys(gap["reason"].dropna())) if not gap.empty else ""
        return placeholder(title, "No multi-device point could be split" + (f": {why}" if why else
                                  " (needs ok runs at two device counts of the same configuration)."))
    exps = list(dict.fromkeys(ok["experiment"]))
    sizes = [(ok["experiment"] == e).sum() for e in exps]
    fig, axes = plt.subplots(len(exps), 1, figsize=(9.5, sum(0.5 * n + 0.9 for n in sizes) + 0.8), squeeze=False,
                             gridspec_kw={"height_ratios": [n + 1 for n in sizes]}, layout="constrained")
    for ax, exp in zip(axes[:, 0], exps):
        rows = paper_order(ok[ok["experiment"] == exp], ["model", "framework", "batch_size", "workers", "devices"])
        for y, r in enumerate(rows.to_dict("records")):
            _gap_bar(ax, y, r)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([f"{framework_label(r.framework)} {model_label(r.model)}, b{r.batch_size} w{r.workers}\n"
                            f"{r.base_devices:g} → {r.devices:g} devices" for r in rows.itertuples()], fontsize=7.5)
        for lbl, r in zip(ax.get_yticklabels(), rows.itertuples()):
            lbl.set_color(FRAMEWORK_COLOURS.get(r.framework, "k"))
        ax.invert_yaxis()
        ax.set_xlim(left=min(0, ax.get_xlim()[0]), right=ax.get_xlim()[1] * 1.12)  # room for the labels
        ax.set_title(exp if len(exps) > 1 else "", fontsize=9, loc="left")
        ax.set_xlabel("time per epoch (s)")
        ax.grid(axis="y", visible=False)
    handles = [Patch(facecolor=GAP_COLOURS["ideal"], label="ideal (base epoch / N)")]
    handles += [Patch(facecolor=GAP_COLOURS[p], edgecolor="#777777" if p == "unexplained" else GAP_COLOURS[p],
                      hatch="///" if p == "unexplained" else None, label=speedup_gap.PART_SHORT[p])
                for p in speedup_gap.PARTS]
    handles += [Patch(facecolor="white", edgecolor="#777777", hatch="xxx", label="gave time back (strip below)"),
                Line2D([], [], color="black", linewidth=2, label="measured epoch")]
    _finish(fig, title, handles, ncol=4)
    return fig


# Candidate ticks of a ratio axis, roundest first: spaced_ticks keeps those that leave room for
# their labels.
RATIO_TICKS = (1, 2, 0.5, 5, 10, 0.2, 3, 1.5, 0.67, 4, 1.25, 0.8, 0.25, 20, 0.1, 1.1, 0.9)


def spaced_ticks(lo: float, hi: float, most: int = 7) -> list:
    """Ticks of a log axis from lo to hi whose labels cannot overlap: at most about `most`,
    each at least 1/most of the axis's (log) span from the next, the roundest kept first."""
    gap = math.log(hi / lo) / most
    kept = []
    for t in RATIO_TICKS:
        if lo <= t <= hi and all(abs(math.log(t / k)) >= gap for k in kept):
            kept.append(t)
    return sorted(kept)


def _ratio_colour(r: dict) -> str:
    """The faster framework's colour where the interval says so, grey where it does not."""
    if pd.isna(r["low"]) or r["low"] <= 1 <= r["high"]:
        return "#888888"
    return FRAMEWORK_COLOURS.get(r["b"] if r["low"] > 1 else r["a"], "k")


def framework_ratios(speed: pd.DataFrame):
    """The summary figure: per configuration, one framework's epoch time over the other's with its
    95% interval (tables.speed_data rows of one experiment), a line at parity (1×)."""
    title = "Epoch time of one framework over the other (95% CI)"
    if speed.empty:
        return placeholder(title, "No configuration has ok runs of two frameworks.")
    rows = paper_order(speed, ["a", "b", "model", "devices", "batch_size", "workers"]).to_dict("records")
    pairs = len({(r["a"], r["b"]) for r in rows})
    fig, ax = plt.subplots(figsize=(5.6, 0.24 * len(rows) + 1.3), layout="constrained")
    for y, r in enumerate(rows):
        err = None if pd.isna(r["low"]) else [[r["estimate"] - r["low"]], [r["high"] - r["estimate"]]]
        ax.errorbar([r["estimate"]], [y], xerr=err, fmt="o", color=_ratio_colour(r), capsize=3, markersize=5)
    ax.axvline(1.0, color="#444444", linewidth=1)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    lo = min(0.8, *(r["low"] if not pd.isna(r["low"]) else r["estimate"] for r in rows))
    hi = max(1.25, *(r["high"] if not pd.isna(r["high"]) else r["estimate"] for r in rows))
    ax.set_xlim(lo / 1.15, hi * 1.15)
    ax.set_xticks(spaced_ticks(lo / 1.15, hi * 1.15))
    ax.set_ylim(len(rows) - 0.4, -0.6)
    if all(pd.isna(r["low"]) for r in rows):  # say so rather than let missing bars look like certainty
        ax.text(0.99, 0.02, "no intervals: 1 repeat per framework", transform=ax.transAxes, ha="right",
                va="bottom", fontsize=7, color="#777777")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([(f"{framework_label(r['a'])}/{framework_label(r['b'])} " if pairs > 1 else "")
                        + f"{model_label(r['model'])}, {r['devices']}d b{r['batch_size']} w{r['workers']}"
                        for r in rows], fontsize=7.5)
    ax.grid(axis="y", visible=False)
    a, b = framework_label(rows[0]["a"]) if pairs == 1 else "the framework", framework_label(rows[0]["b"])
    ax.set_xlabel(f"{a} epoch time / {b} epoch time  (← {a} faster · {b} faster →)", fontsize=8)
    ax.set_title(title, fontsize=9, fontweight="bold")
    return fig


def _median_config(rows: pd.DataFrame) -> tuple:
    """The configuration (batch, workers) at the middle of the projected speed-ups at the largest
    count (the lower middle for an even count), as the first-screen sentence quotes it."""
    top = rows[rows["devices"] == rows["devices"].max()].sort_values("speedup", kind="stable")
    r = top.iloc[(len(top) - 1) // 2]
    return r["batch_size"], r["workers"]


def _projected_line(ax, s: pd.DataFrame, val: pd.DataFrame, colour) -> None:
    """A configuration: projected speed-up and band, measured points, out-of-sample points (hollow)."""
    ax.plot(s["devices"], s["speedup"], color=colour, linewidth=1.4, linestyle="--")
    ax.fill_between(s["devices"], s["speedup_low"].fillna(s["speedup"]), s["speedup_high"].fillna(s["speedup"]),
                    color=colour, alpha=0.18, linewidth=0)
    t1 = s.loc[s["devices"] == 1, "measured_s"]
    t1 = float(t1.iloc[0]) if len(t1) else float("nan")
    m = s[s["measured_s"].notna()]
    ax.plot(m["devices"], t1 / m["measured_s"], color=colour, marker="o", linestyle="none", markersize=6)
    v = val[val["reason"].isna()] if len(val) else val
    if len(v):
        pred = t1 / v["predicted_s"]
        # clipped: a point estimate may sit just outside its bootstrap interval
        err = np.clip(np.vstack([(pred - t1 / v["high_s"]).to_numpy(), (t1 / v["low_s"] - pred).to_numpy()]),
                      0, None)
        ax.errorbar(v["devices"] * 1.06, pred, yerr=err, color=colour, marker="D", markersize=5,
                    markerfacecolor="white", linestyle="none", capsize=3)


def _projection_panel(ax, proj: pd.DataFrame, val: pd.DataFrame, model, frameworks: list, devices: list) -> None:
    """A model: each framework's median configuration, the ideal line, where the host is oversubscribed."""
    picked, over = [], []
    for fw in frameworks:
        rows = proj[(proj["model"] == model) & (proj["framework"] == fw)]
        if rows.empty:
            continue
        batch, workers = _median_config(rows)
        s = rows[(rows["batch_size"] == batch) & (rows["workers"] == workers)].sort_values("devices")
        picked.append(f"{framework_label(fw)} b{batch} w{workers}")
        over += list(s["oversubscribed_from"].dropna())
        v = val[(val["model"] == model) & (val["framework"] == fw) & (val["batch_size"] == batch)
                & (val["workers"] == workers)] if len(val) else val
        _projected_line(ax, s, v, FRAMEWORK_COLOURS.get(fw, "k"))
    ax.plot(devices, devices, color="#888888", linestyle=":", linewidth=1, zorder=0)
    # where the drawn configurations run more processes than the host has cores
    if over and min(over) <= max(devices):
        ax.axvspan(min(over) / 1.12, max(devices) * 1.25, color="#999999", alpha=0.12, linewidth=0)
        ax.text(min(over) / 1.1, 0.97, "oversubscribed", transform=blended_transform_factory(ax.transData,
                ax.transAxes), fontsize=7.5, color="#555555", va="top")
    _devices_axis(ax, devices)
    ax.set_ylim(bottom=0)
    ax.set_title(f"{model_label(model)}: {', '.join(picked)}", fontsize=9)
    ax.set_xlabel("devices (processes)")


def projection_bands(proj: pd.DataFrame, val: pd.DataFrame):
    """Speed-up over 1 device against devices (analysis.projection.predict), one panel per model, at each
    framework's median configuration: measured points, the projection's line and interval band, and
    the measured multi-device points as predicted out of sample (hollow, with their intervals)."""
    title = "What more devices would give: speed-up over 1 device, measured and projected"
    if proj.empty:
        return placeholder(title, "Nothing projected: needs ok timing runs at 1 and 2 devices.")
    models = _ordered(proj["model"], MODEL_ORDER)
    frameworks = _ordered(proj["framework"], FRAMEWORK_ORDER)
    fig, axes = _figure(1, len(models), 4.6, 3.2)
    devices = sorted(proj["devices"].unique())
    for ax, model in zip(axes[0], models):
        _projection_panel(ax, proj, val, model, frameworks, devices)
    axes[0][0].set_ylabel("speed-up over 1 device (×)")
    handles = [Patch(facecolor=FRAMEWORK_COLOURS.get(f, "k"), alpha=0.5, label=f"{framework_label(f)}: projected, "
                     "interval") for f in frameworks]
    handles += [Line2D([], [], color="#444444", marker="o", linestyle="none", label="measured"),
                Line2D([], [], color="#444444", marker="D", markerfacecolor="white", linestyle="none",
                       label="predicted out of sample"),
                Line2D([], [], color="#888888", linestyle=":", label="ideal (linear)")]
    _finish(fig, title, handles, ncol=5)
    return fig
