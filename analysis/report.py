"""The HTML report: findings in words, tables, plots, deadlock report, environment and fairness.

    python -m analysis.report --aggregate results/aggregate --out results/report/index.html \
        [--assets results/report]

The page is self-contained (inline CSS, images as data URIs, no script, nothing fetched), so it
opens offline and can be mailed. Every table (CSV + HTML fragment) and plot (PNG) is also
written to --assets under the fixed names in ASSETS, for Snakemake to declare and caption.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import functools
import json
import numbers
import sys
from collections import Counter
from pathlib import Path

import jinja2
import pandas as pd

from analysis import GRID_KEYS, STATUS_COLOURS, framework_label, model_label
from analysis import deadlocks, planning, plots, tables
from analysis.aggregate import Aggregate
from runners.adapters import registry

TEMPLATES = Path(__file__).resolve().parent / "templates"
TABLE_NAMES = ("table2", "paper_comparison", "study_work", "study_time", "scaling", "workers", "batch", "breakdown",
               "throughput", "accuracy", "plan", "deadlocks", "environment", "fairness", "runs", "invalid")
PLOT_NAMES = ("status_map", "runtime_vs_devices", "speedup", "breakdown", "throughput", "resources")
# Every file the report writes beside index.html (Snakemake declares these as outputs).
ASSETS = tuple(f"{t}.{ext}" for t in TABLE_NAMES for ext in ("csv", "html")) + tuple(f"{p}.png" for p in PLOT_NAMES)


# -- findings -------------------------------------------------------------------------------

def _describe(p) -> str:
    """'GraphSAGE, 2 devices, batch 512, 0 workers'."""
    return (f"{model_label(p['model'])}, {p['devices']} device{'s' if p['devices'] != 1 else ''}, "
            f"batch {p['batch_size']}, {p['workers']} worker{'s' if p['workers'] != 1 else ''}")


def _interval(r, unit="×", scale=1.0, digits=2) -> str:
    """'1.32× [1.20, 1.45]' or '1.32× (no interval: 1 repeat)'."""
    est = f"{scale * r['estimate']:.{digits}f}{unit}"
    if pd.isna(r["low"]):
        return f"{est} (no interval: fewer than 2 repeats per framework)"
    return f"{est} [95% CI {scale * r['low']:.{digits}f}, {scale * r['high']:.{digits}f}]"


def _comparison_list(cmp: pd.DataFrame, unit="×", scale=1.0, digits=2, limit=8) -> str:
    items = [f"{_describe(r)}: {_interval(r, unit, scale, digits)}, {r['verdict']}"
             for r in cmp.head(limit).to_dict("records")]
    more = f"; and {len(cmp) - limit} more (see the tables)" if len(cmp) > limit else ""
    return "; ".join(items) + more


def _verdict_counts(cmp: pd.DataFrame, labels) -> str:
    counts = Counter(cmp["verdict"])
    return ", ".join(f"{label} in {counts[label]}" for label in labels if counts[label]) + f" of {len(cmp)}"


def _pair_label(pair, sep=" / ") -> str:
    return sep.join(framework_label(f) for f in pair)


def speed_findings(runs: pd.DataFrame) -> list:
    """Which framework is faster, per configuration, with a 95% interval (one experiment; every
    pair of frameworks in the registry's order).

    The headline is the steady-state epoch time (warm-up excluded); the total training time
    follows for fixed-schedule runs only (timing runs stop after different numbers of epochs,
    so their totals are not comparable). A ratio whose interval includes 1× is "no clear difference"."""
    out = []
    pairs = tables.framework_pairs(runs)
    if not pairs:
        return ["No configuration has ok runs of two frameworks, so their speed cannot be compared."]
    fixed = "until" not in runs or (runs["until"].fillna("epochs") == "epochs").all()
    values = [("steady_epoch_time_s", "Steady-state epoch time (warm-up excluded)")]
    if fixed:
        values.append(("train_time_s", "Total training time (the seed study's metric, warm-up included)"))
    for pair in pairs:
        for value, what in values:
            cmp = tables.framework_comparison(runs, value, kind="ratio", pair=pair)
            if cmp.empty:
                continue
            labels = (*tables.comparison_labels(pair), tables.NO_CLEAR)
            text = (f"{what}, {_pair_label(pair)} ({tables.CI_METHOD_RATIO}; above 1× "
                    f"{framework_label(pair[1])} is faster): {_verdict_counts(cmp, labels)} configurations")
            if value == "steady_epoch_time_s" or len(cmp) <= 4:
                text += " — " + _comparison_list(cmp)
            out.append(text + ".")
    return out or ["No configuration has ok runs of two frameworks, so their speed cannot be compared."]


def steady_state_findings(runs: pd.DataFrame) -> list:
    """Warm-up cost and run-to-run noise of the steady-state epoch time, per framework."""
    ok = runs[runs["status"] == "ok"]
    if ok.empty or "steady_epoch_time_s" not in ok or ok["steady_epoch_time_s"].isna().all():
        return ["No run has an epoch after the warm-up epoch: run at least 2 epochs (better 5+) for a "
                "steady-state time."] if not ok.empty else []
    parts = []
    for fw in tables.FRAMEWORK_ORDER:
        g = ok[ok["framework"] == fw]
        if g.empty:
            continue
        within = pd.to_numeric(g["steady_epoch_cv"], errors="coerce").median()
        # between repeats: CV of each configuration's steady-state times across its repeats
        between = g.groupby(["model", "devices", "batch_size", "workers"])["steady_epoch_time_s"].agg(
            lambda v: v.std(ddof=1) / v.mean() if v.notna().sum() > 1 and v.mean() > 0 else float("nan")).median()
        warm = (g["warmup_epoch_time_s"] / g["steady_epoch_time_s"]).median()
        parts.append(f"{framework_label(fw)}: warm-up epoch {warm:.2f}× the steady-state epoch, CV of the "
                     f"steady epochs within a run {tables.fmt_pct(within)}, across repeats "
                     f"{tables.fmt_pct(between) if not pd.isna(between) else 'n/a (1 repeat)'}")
    out = ["Steady state (medians over configurations) — " + "; ".join(parts) + "."]
    ratio = pd.to_numeric(ok.get("timed_to_startup_ratio"), errors="coerce")
    if "until" in ok and (ok["until"] == "precise").all():
        ratio = ratio.iloc[0:0]  # timing runs' headline excludes start-up; their totals are not the point
    steps = pd.to_numeric(ok.get("steps_per_epoch"), errors="coerce")
    if ratio.notna().any():
        short = int((ratio < tables.TIMED_TO_STARTUP_WARN).sum())
        out.append(f"Timed part / start-up: {ratio.min():.1f}× to {ratio.max():.1f}× (median {ratio.median():.1f}×); "
                   f"steps per epoch {steps.min():.0f} to {steps.max():.0f}"
                   + (f". {short} run{'s' if short != 1 else ''} trained for less than "
                      f"{tables.TIMED_TO_STARTUP_WARN:.0f}× {'its' if short == 1 else 'their'} start-up: "
                      f"such totals are dominated by one-off costs." if short else "."))
    return out


def order_findings(runs: pd.DataFrame) -> list:
    """Did the runs execute interleaved (all of repeat r before any of repeat r + 1)?"""
    ok = runs.dropna(subset=["started_at"])
    if ok["repeat"].nunique() < 2:
        return []
    ordered = ok.assign(t=pd.to_datetime(ok["started_at"], utc=True, errors="coerce")).sort_values("t")
    rep = ordered["repeat"].astype(int).tolist()
    interleaved = all(a <= b for a, b in zip(rep, rep[1:]))
    if interleaved:
        return [f"Runs executed interleaved: every configuration's repeat r started before any repeat r + 1 "
                f"({ok['repeat'].nunique()} repeats, by each result's started_at), so drift over the sweep "
                f"affects both frameworks alike."]
    return [f"Runs did NOT execute interleaved by repeat (started_at order of repeats: "
            f"{''.join(str(r) for r in rep[:40])}{'...' if len(rep) > 40 else ''}): drift over the sweep may "
            f"favour one framework; compare with care."]


def scaling_findings(scaling: pd.DataFrame, runs: pd.DataFrame) -> list:
    """How far each framework scales (with intervals), and where efficiency drops below the threshold."""
    g = scaling[(scaling["devices"] > scaling["base_devices"]) & scaling["efficiency"].notna()] \
        if not scaling.empty else scaling
    if g.empty:
        return ["Scaling cannot be judged: no configuration has ok runs at two device counts."]
    per = []
    for (fw, d), s in tables.paper_order(g, ["framework", "devices"]).groupby(["framework", "devices"], sort=False):
        counts = Counter(s["verdict"])
        best = s.loc[s["speedup"].idxmax()]
        per.append(f"{framework_label(fw)} on {d} devices {s['speedup'].median():.2f}× "
                   f"({100 * s['efficiency'].median():.0f}% efficiency; faster than the base in {counts['faster']}, "
                   f"slower in {counts['slower']}, {tables.NO_CLEAR} in {counts[tables.NO_CLEAR]} of {len(s)}; "
                   f"best {_describe(best)} {_interval({**best, 'estimate': best['speedup']})})")
    out = ["Median speed-up of the steady-state epoch time over the fewest devices (each configuration's "
           f"interval: {tables.CI_METHOD_RATIO}): " + "; ".join(per) + "."]
    over = g[g["oversubscribed"].fillna(False).astype(bool)]
    if len(over):
        out.append(f"{len(over)} of these {len(g)} multi-device configurations are oversubscribed "
                   f"({tables.OVERSUBSCRIBED_MARK} in the tables): they run more processes than the machine has "
                   f"cores, so their speed-up measures CPU contention, not what more GPUs would give.")
    superlinear = g[g["efficiency"] > tables.SUPERLINEAR_WARN]
    if len(superlinear):
        out.append(f"{len(superlinear)} configuration{'s' if len(superlinear) != 1 else ''} scale better than "
                   f"ideal (efficiency up to {100 * superlinear['efficiency'].max():.0f}%): usually the run with "
                   f"fewer devices was disturbed (other load on the machine, oversubscribed CPU threads); "
                   f"rerun those alone before trusting the speed-up.")
    low = g[g["efficiency"] < tables.EFFICIENCY_WARN]
    warn = f"{100 * tables.EFFICIENCY_WARN:.0f}%"
    if low.empty:
        out.append(f"Parallel efficiency stays at or above {warn} in every multi-device configuration measured.")
    else:
        first = low.sort_values("devices").groupby(["framework", "model", "batch_size", "series_workers"]).head(1)
        examples = "; ".join(f"{framework_label(r['framework'])} {_describe(r)} ({100 * r['efficiency']:.0f}%)"
                             for r in first.head(4).to_dict("records"))
        more = f"; and {len(first) - 4} more series" if len(first) > 4 else ""
        out.append(f"Scaling stops paying off (efficiency below {warn}) in {len(low)} of {len(g)} multi-device "
                   f"configurations, first at: {examples}{more}.")
    return out


def _values(series) -> str:
    vals = sorted(set(series), key=lambda v: (str(type(v)), v))
    return ", ".join(str(v) for v in vals)


def _where(g: pd.DataFrame) -> str:
    """The configurations of a group of runs: listed when few, else the values of each axis."""
    configs = g.drop_duplicates(list(GRID_KEYS))
    if len(configs) <= 3:
        return "; ".join(f"{framework_label(r['framework'])} {_describe(r)}" for r in configs.to_dict("records"))
    labels = {"framework": framework_label, "model": model_label}
    return "; ".join(f"{k.replace('_', ' ')} {_values(g[k].map(labels[k]) if k in labels else g[k])}"
                     for k in GRID_KEYS)


def failure_findings(runs: pd.DataFrame) -> list:
    """Which settings hang or fail, with the diagnosed cause; injected faults said apart."""
    bad = runs[runs["status"] != "ok"]
    if bad.empty:
        return [f"All {len(runs)} runs ended ok: no hang, crash or timeout."] if len(runs) else []
    injected = ~bad["inject"].map(lambda v: pd.isna(v) or str(v) in ("", "None", "none"))
    out = []
    for (inj, status, cause), g in bad.groupby([injected, "status", bad["diag_cause"].fillna("unknown")], sort=False):
        n = f"{len(g)} run{'s' if len(g) != 1 else ''}"
        if inj:
            text = (f"{n} with a deliberately injected fault ({_values(g['inject'])}) ended '{status}', "
                    f"diagnosed as {cause}: {_where(g)}")
        else:
            text = f"{n} ended '{status}' (diagnosed cause: {cause}): {_where(g)}"
            remedy = g["diag_remedy"].dropna()
            if len(remedy):
                text += f". Remedy: {remedy.iloc[0]}"
        out.append(text + ".")
    return out


def accuracy_findings(runs: pd.DataFrame, points: pd.DataFrame) -> list:
    """Accuracy: convergence first (against the features-only baseline), then the frameworks'
    differences (every pair) with 95% intervals for configurations where both frameworks converged."""
    ok = runs[runs["status"] == "ok"]
    if ok.empty or ok["final_val_acc"].isna().all():
        return []
    if "until" in ok and (ok["until"] == "precise").all():
        return learning_findings(ok)
    if "harness" in ok and (ok["harness"] == "study").all():
        return []  # the study harness's short schedule is about time and work, not accuracy
    out = []
    conv = ok["converged"].map(tables._truthy) if "converged" in ok else pd.Series(None, index=ok.index)
    bad = ok[conv == False]  # noqa: E712
    if len(bad):
        base = pd.to_numeric(bad["baseline_val_acc"], errors="coerce").median()
        out.append(f"Not converged: {len(bad)} of {len(ok)} ok runs end at or below the features-only baseline "
                   f"({100 * base:.1f}% validation accuracy) — {_where(bad)}. Their accuracy says nothing about "
                   f"the frameworks; train longer (more epochs/steps) before comparing.")
    keys = ["model", "devices", "batch_size", "workers"]
    both_conv = ok.assign(_c=conv).groupby(keys)["_c"].transform(
        lambda c: bool((c == True).all())).astype(bool)  # noqa: E712
    target = pd.to_numeric(ok["target_val_acc"], errors="coerce").dropna()
    reached = int(ok["time_to_target_s"].notna().sum())
    if len(target):
        out.append(f"Time to {100 * target.iloc[0]:.0f}% validation accuracy (target of dataset "
                   f"{ok['dataset'].iloc[0]}): {reached} of {len(ok)} ok runs reached it.")
    for pair in tables.framework_pairs(ok):
        cmp = tables.framework_comparison(ok[both_conv], "final_val_acc", kind="diff", pair=pair)
        if not cmp.empty:
            labels = (*tables.comparison_labels(pair, "diff"), tables.NO_CLEAR)
            out.append(f"Final validation accuracy where both frameworks converged, {_pair_label(pair, ' − ')} "
                       f"({tables.CI_METHOD_DIFF}, percentage points): {_verdict_counts(cmp, labels)} "
                       "configurations — " + _comparison_list(cmp, unit=" pts", scale=100, digits=1) + ".")
        tta = tables.framework_comparison(ok, "time_to_target_s", kind="ratio", pair=pair)
        if not tta.empty:
            out.append(f"Time to the target, {_pair_label(pair)} over runs that reached it "
                       f"({tables.CI_METHOD_RATIO}): " + _comparison_list(tta) + ".")
    return out


def learning_findings(ok: pd.DataFrame) -> list:
    """Timing runs stop long before convergence; they are only checked for having learnt."""
    learned = ok["learned"].map(tables._truthy) if "learned" in ok else pd.Series(None, index=ok.index)
    known = learned.notna()
    if not known.any():
        return []
    bad = ok[learned == False]  # noqa: E712
    text = (f"Learning check of the timing runs (validated once, after their last epoch, outside the timed "
            f"region): {int((learned == True).sum())} of {int(known.sum())} ended above the majority-class "  # noqa: E712
            f"accuracy with a falling loss. Accuracy itself is judged by the convergence runs (full schedule).")
    if len(bad):
        text += f" These did NOT learn — their times may measure a broken run: {_where(bad)}."
    return [text]


def axis_findings(effect: pd.DataFrame, axis: str, what: str, table: str) -> list:
    """One finding per framework for an axis effect (tables.axis_effect): the median ratio, the
    best and worst configuration with their intervals, and the verdict counts."""
    g = effect.dropna(subset=["estimate"]) if not effect.empty else effect
    if g.empty:
        return []
    parts = []
    for fw, s in tables.paper_order(g, ["framework"]).groupby("framework", sort=False):
        counts = Counter(s["verdict"])
        lo, hi = s.loc[s["estimate"].idxmin()], s.loc[s["estimate"].idxmax()]
        parts.append(f"{framework_label(fw)} median {s['estimate'].median():.2f}× ("
                     + ", ".join(f"{v} in {n}" for v, n in counts.most_common()) + f" of {len(s)}; "
                     f"from {_describe(lo)} {_interval(lo)} to {_describe(hi)} {_interval(hi)})")
    levels = sorted({(b, v) for b, v in zip(g[f"base_{axis}"], g[axis])})
    steps = ", ".join(f"{b} → {v}" for b, v in levels)
    over = int(g["oversubscribed"].fillna(False).astype(bool).sum())
    text = f"{what} ({axis.replace('_', ' ')} {steps}; table '{table}'): " + "; ".join(parts) + "."
    if over:
        text += (f" {over} of {len(g)} of these comparisons involve oversubscribed points "
                 f"({tables.OVERSUBSCRIBED_MARK}): more processes than cores.")
    return [text]


def loader_findings(points: pd.DataFrame) -> list:
    ok = points[(points["n_ok"] > 0) & points["step_s_mean"].notna() & (points["step_s_mean"] > 0)]
    if ok.empty:
        return []
    share = ok["step_load_wait_s_mean"] / ok["step_s_mean"]
    top = ok.loc[share.idxmax()]
    by_fw = "; ".join(f"{framework_label(f)} {100 * share[ok['framework'] == f].median():.0f}%"
                      for f in tables.FRAMEWORK_ORDER if (ok["framework"] == f).any())
    return [f"Waiting for the data loader takes a median {100 * share.median():.0f}% of a training step "
            f"({by_fw}); the most is {100 * share.max():.0f}% ({framework_label(top['framework'])} {_describe(top)})."]


def paper_findings(comparison: pd.DataFrame) -> list:
    d = comparison.dropna(subset=["paper_s", "ours_s"])
    if d.empty:
        return []
    keys = ["model", "devices", "workers", "batch_size"]
    wide = d.pivot_table(index=keys, columns="framework", values=["paper_s", "ours_s"]).dropna()
    if wide.empty:
        return []
    # The fastest framework per configuration, in the paper and in ours.
    agree = int((wide["paper_s"].idxmin(axis=1) == wide["ours_s"].idxmin(axis=1)).sum())
    return [f"Against the seed study's Table 2: the faster framework agrees in {agree} of {len(wide)} "
            f"configurations measured by both."]


def _median_by(df: pd.DataFrame, value: str) -> dict:
    """(harness, framework) -> median of `value` over models, batch sizes and workers."""
    return {k: float(g[value].median()) for k, g in df.groupby(["harness", "framework"]) if g[value].notna().any()}


def study_findings(work: pd.DataFrame, time: pd.DataFrame, paper: pd.DataFrame, runs=None) -> list:
    """Why the seed study saw what it saw, in words; each sentence names the table it comes from.
    `runs` (optional) lets it say how many of the timed runs started on a busy machine."""
    if work.empty:
        return []
    out = []
    if runs is not None and "cpu_busy_before" in runs:
        busy = pd.to_numeric(runs["cpu_busy_before"], errors="coerce") > BUSY_WARN_PERCENT
        if busy.any():
            out.append(f"Caution: {int(busy.sum())} of {len(runs)} runs started while the CPUs were more than "
                       f"{BUSY_WARN_PERCENT}% busy with other work, so the times and speed-ups below are noisy "
                       f"(see the confidence intervals); the work per rank is counted, not timed, and does not "
                       f"depend on the load.")
    multi = work[work["devices"] > work["devices"].min()]
    if multi.empty:
        return ["Only one device count was measured, so work per rank cannot be compared across device counts."]
    d = int(multi["devices"].max())
    at_d = multi[multi["devices"] == d]
    passes = _median_by(at_d, "split_passes_per_epoch")
    seeds = _median_by(at_d, "seed_nodes_per_rank_epoch")
    split = at_d["train_split_seed_nodes"].dropna()
    split_text = f"the {split.iloc[0]:,.0f}-node training split" if len(split) else "the training split"

    def fw_work(h):
        parts = [f"each {framework_label(f)} rank trained {seeds[(h, f)]:,.0f} seed nodes per epoch "
                 f"(all ranks: {passes[(h, f)]:.2f}× {split_text})"
                 for f in tables.FRAMEWORK_ORDER if (h, f) in seeds and (h, f) in passes]
        return "; ".join(parts)

    for h in tables.HARNESS_ORDER:
        text = fw_work(h)
        if text:
            out.append(f"Work per rank, {tables.HARNESS_LABELS[h]}, {d} devices: {text} "
                       f"(table 'Work per rank').")
    whole = passes.get(("study", "dgl"))
    shared = passes.get(("study", "pyg"))
    if whole is not None and whole > 0.9 * d:
        out.append(f"So under the seed study's harness {d} DGL ranks did {whole:.1f}× the work of one pass per "
                   f"epoch: Lightning cannot shard DGL's loader (its dataset is iterable and the study did not "
                   f"set use_ddp), so every rank trains the whole split"
                   + (f", while PyG's loader, built in a DataModule hook, was split ({shared:.2f}×)." if shared is not None
                      else "."))
    speed = {}
    if not time.empty:
        t = time[(time["devices"] == d) & time["speedup"].notna()]
        speed = _median_by(t, "speedup")
    pap = tables.paper_study_speedups(paper)
    if not pap.empty:
        med = pap.groupby("framework")["speedup_1_to_2"].agg(["median", "min", "max"])
        out.append("The seed study's Table 2 (T4 GPUs, Reddit), 1 → 2 GPUs: " + "; ".join(
            f"{framework_label(f)} speed-up {med.loc[f, 'median']:.2f}× (range {med.loc[f, 'min']:.2f}–"
            f"{med.loc[f, 'max']:.2f}×)" for f in tables.FRAMEWORK_ORDER if f in med.index)
            + " (below 1×: slower with 2 GPUs).")
    if speed:
        out.append(f"Here, 1 → {d} devices, median speed-up of the steady-state epoch time: " + "; ".join(
            f"{tables.HARNESS_LABELS[h]}: " + ", ".join(
                f"{framework_label(f)} {speed[(h, f)]:.2f}×" for f in tables.FRAMEWORK_ORDER if (h, f) in speed)
            for h in tables.HARNESS_ORDER if any((h, f) in speed for f in tables.FRAMEWORK_ORDER))
            + " (table 'Time vs devices').")
    s_dgl, s_pyg, f_dgl = speed.get(("study", "dgl")), speed.get(("study", "pyg")), speed.get(("fair", "dgl"))
    if whole is not None and whole > 0.9 * d and None not in (s_dgl, s_pyg, f_dgl):
        if s_dgl < s_pyg and s_dgl < f_dgl:
            out.append(f"The shape of the seed study's result is reproduced by its harness: DGL gains less from "
                       f"more devices than PyG ({s_dgl:.2f}× vs {s_pyg:.2f}×), and with the seeds split across "
                       f"ranks (fair harness) DGL's speed-up is {f_dgl:.2f}×. That is what the work per rank "
                       f"predicts: with every DGL rank training the whole split, a rank's epoch cannot get shorter "
                       f"with more devices. 'Adding GPUs hurts DGL' describes the study's harness, not DGL.")
        else:
            out.append(f"The work difference is there, but these timings do not show the expected effect "
                       f"(DGL under the study's harness {s_dgl:.2f}×, PyG {s_pyg:.2f}×, DGL under the fair harness "
                       f"{f_dgl:.2f}×): the evidence here does not support explaining the time trend by the work "
                       f"alone (on shared CPU cores fixed costs and contention can dominate).")
    elif whole is not None:
        out.append("Not enough ok runs at two device counts of both harnesses to compare speed-ups.")
    out.append("Not separated here: the study harness's other differences (trainer.fit time includes validation, "
               "the sanity check and Lightning's set-up; DGL's graph has self-loops, so its sampler may draw a "
               "node as its own neighbour). Their share of the time is in the tables but no claim is made about "
               "it. These runs are CPU processes sharing the machine's cores, not GPUs: the work per rank carries "
               "over to GPUs, the absolute speed-ups do not.")
    if d < 4:
        out.append("The seed study's 4-GPU deadlocks are not addressed by these runs (no 4-device run); "
                   "see the memory model below.")
    return out


BUSY_WARN_PERCENT = 25  # CPU use by other work just before a run's launch (runners.run measures it)


def findings(runs, points, scaling, comparison, invalid, workers=None, batch=None, plan=None) -> list:
    """Sentences computed from the data, grouped: [{title, items}] (overall, then per experiment)."""
    counts = Counter(runs["status"])
    n_exp = runs["experiment"].nunique()
    overall = [f"{len(runs)} valid run{'s' if len(runs) != 1 else ''} in {n_exp} experiment{'s' if n_exp != 1 else ''}: "
               + (", ".join(f"{n} {s}" for s, n in counts.most_common()) or "none") + "."]
    if len(invalid):
        overall.append(f"{len(invalid)} result{'s' if len(invalid) != 1 else ''} could not be used "
                       f"(malformed or missing; see 'Malformed results').")
    overall += failure_findings(runs)
    overall += order_findings(tables.performance_runs(runs))
    busy = runs[pd.to_numeric(runs.get("cpu_busy_before"), errors="coerce") > BUSY_WARN_PERCENT] \
        if "cpu_busy_before" in runs else runs.iloc[0:0]
    if len(busy):
        overall.append(f"{len(busy)} run{'s' if len(busy) != 1 else ''} started while the CPUs were more than "
                       f"{BUSY_WARN_PERCENT}% busy with other work: their timings are not trustworthy "
                       f"({', '.join(busy['run_id'].head(5))}{', ...' if len(busy) > 5 else ''}).")
    groups = [{"title": "Overall", "items": overall}]
    empty = pd.DataFrame(columns=["experiment"])
    workers, batch, plan = (x if x is not None else empty for x in (workers, batch, plan))
    for exp in dict.fromkeys(points["experiment"]):
        p = points[points["experiment"] == exp]
        r = tables.performance_runs(runs[runs["experiment"] == exp])
        items = speed_findings(r) + precision_findings(r, plan[plan["experiment"] == exp]) \
            + steady_state_findings(r) + scaling_findings(scaling[scaling["experiment"] == exp], r) \
            + axis_findings(workers[workers["experiment"] == exp], "workers",
                            "Loader workers, speed-up of the steady-state epoch", "Loader workers") \
            + axis_findings(batch[batch["experiment"] == exp], "batch_size",
                            "Batch size, steady-state throughput gain", "Batch size") \
            + loader_findings(p) + accuracy_findings(r, p) \
            + paper_findings(comparison[comparison["experiment"] == exp])
        groups.append({"title": exp, "items": items})
    return groups


# -- environment, fairness and run list -----------------------------------------------------

def _distinct(series) -> str:
    """Distinct values, with counts when they differ between runs."""
    vals = series.dropna().astype(str)
    vals = vals[vals != ""]
    if vals.empty:
        return "—"
    c = Counter(vals)
    if len(c) == 1:
        return next(iter(c))
    return "; ".join(f"{v} ({n} runs)" for v, n in c.most_common())


ENV_ROWS = (
    ("hosts", "env_hostname"), ("batch scheduler", "scheduler"), ("CPU", "env_cpu_model"), ("CPU cores", "env_cpu_cores"),
    ("GPUs", "env_gpus"), ("device type", "device_type"), ("process-group backend", "backend"),
    ("NVML probe", "nvml_reason"), ("Python", "env_python"), ("torch", "env_torch"),
    ("torch_geometric", "env_torch_geometric"), ("PyG sampler backend", "env_pyg_sampler_backend"),
    ("pyg-lib", "env_pyg_lib"), ("torch-sparse", "env_torch_sparse"), ("DGL", "env_dgl"),
    ("DGL CUDA build", "env_dgl_cuda"), ("numpy", "env_numpy"), ("OMP_NUM_THREADS", "env_omp_num_threads"),
    ("/dev/shm size", "env_shm_bytes"), ("memory", "env_memory_bytes"), ("open-files limit", "env_open_files_limit"),
    ("git commit", "env_git_commit"), ("uncommitted changes", "env_git_dirty"),
    ("pre-flight warnings", "preflight_warnings"),
)


def _gib(v):
    return None if pd.isna(v) else f"{float(v) / 2**30:.1f} GiB"


def environment_frame(runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for label, col in ENV_ROWS:
        values = runs[col] if col in runs else pd.Series(dtype=object)
        if col in ("env_shm_bytes", "env_memory_bytes"):
            values = values.map(_gib)
        rows.append({"setting": label, "value": _distinct(values)})
    for ds, g in runs.groupby("dataset"):
        rows.append({"setting": f"dataset {ds} content hash", "value": _distinct(g["env_dataset_hash"])})
    return pd.DataFrame(rows, columns=["setting", "value"])


def _choices(runs, key) -> pd.Series:
    def get(text):
        try:
            return json.loads(text).get(key)
        except (TypeError, ValueError, AttributeError):
            return None
    return runs["adapter_choices"].map(get)


LOOP_MODELS = [m for m in registry.MODELS.values() if m.self_loops]  # models --no-self-loops changes

FAIRNESS_ROWS = (
    ("fan-outs as given (hop nearest the seeds first)", lambda r: r["fanouts"]),
    ("fan-outs as passed to the framework's sampler", lambda r: r["fanouts_framework"]),
    ("sampler", lambda r: _choices(r, "sampler")),
    ("PyG sampler backend (recorded per run)", lambda r: r["env_pyg_sampler_backend"].where(r["framework"] == "pyg")),
    (f"self-loops ({', '.join(m.label for m in LOOP_MODELS)})",
     lambda r: r["self_loops"].where(r["model"].isin([m.name for m in LOOP_MODELS]))),
    ("self-loop implementation", lambda r: _choices(r, "self_loops").where(r["model"].isin([m.name for m in LOOP_MODELS]))),
    ("sampling with replacement", lambda r: r["replace"]),
    ("PyG layer trimming", lambda r: r["pyg_trim"].where(r["framework"] == "pyg")),
    ("model layer (per model)", lambda r: _choices(r, "layer")),
    ("layer computation", lambda r: _choices(r, "layer_compute")),
    ("training harness (fair: the suite's DDP loop; study: the seed study's Lightning harness)",
     lambda r: r["harness"] if "harness" in r else None),
    ("seed split across ranks", lambda r: _choices(r, "seed_split")),
    ("uneven batches (naive split)", lambda r: r["uneven_batches"]),
    ("graph input", lambda r: _choices(r, "graph_input")),
    ("where node features are gathered", lambda r: _choices(r, "feature_gather")),
    ("batch preparation (timed as its own phase)", lambda r: _choices(r, "batch_prepare")),
    ("what a sampled-edge count counts", lambda r: _choices(r, "sampled_edges")),
    ("warm-up (outside the steady-state time)", lambda r: r["framework"].map(lambda _: "first epoch")),
    ("accuracy target / features-only baseline", lambda r: _accuracy_reference(r)),
    ("learning rate", lambda r: r["lr"]),
    ("LR scaling with processes", lambda r: r["lr_scaling"]),
    ("effective LR", lambda r: r["lr_effective"]),
    ("weight decay", lambda r: r["weight_decay"]),
    *((f"{m.label} {' / '.join(m.settings)}", lambda r, m=m: _model_arch(r, m)) for m in registry.MODELS.values()),
    ("threads per rank (by devices)", lambda r: r["devices"].astype(str) + " dev: " + r["threads_per_rank"].astype(str)),
    ("base seeds", lambda r: r["seed_base"]),
    ("per-phase step timing", lambda r: r["breakdown"]),
    ("probes (CPU/NVML samplers)", lambda r: r["probes"]),
)


def _accuracy_reference(runs):
    def pct(v):
        return "—" if pd.isna(v) else f"{100 * float(v):.1f}%"
    return pd.to_numeric(runs["target_val_acc"], errors="coerce").map(pct) + " / " + \
        pd.to_numeric(runs["baseline_val_acc"], errors="coerce").map(pct)


def _model_arch(runs, model):
    """'3 / 256 / 0.5': the settings `model` (a registry.Model) uses, for its runs only."""
    parts = [runs[k].astype(str) for k in model.settings]
    return functools.reduce(lambda x, y: x + " / " + y, parts).where(runs["model"] == model.name)


def fairness_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """Setting -> values per framework, so differences between the frameworks are visible."""
    fws = [f for f in tables.FRAMEWORK_ORDER if f in set(runs["framework"])]
    rows = []
    for label, fn in FAIRNESS_ROWS:
        try:
            values = fn(runs)
        except (KeyError, TypeError, AttributeError):
            continue
        row = {"setting": label}
        for f in fws:
            row[framework_label(f)] = _distinct(values[runs["framework"] == f])
        rows.append(row)
    return pd.DataFrame(rows, columns=["setting"] + [framework_label(f) for f in fws])


def frame_table(df: pd.DataFrame, name: str, title: str, description: str, code_cols=(), status_col=None,
                empty_text="Nothing to list.") -> tables.TableSet:
    """A plain frame as a TableSet (one grid, columns as they are)."""
    if df.empty:
        return tables.TableSet(name, title, description, df, [], empty_text=empty_text)
    header = [[(c, 1) for c in df.columns]]
    rows = []
    for rec in df.to_dict("records"):
        cells = []
        for c in df.columns:
            v = rec[c]
            text = "—" if v is None or (isinstance(v, float) and pd.isna(v)) else (
                tables.fmt_num(v) if isinstance(v, float) else str(v))
            css = "code" if c in code_cols else ("" if isinstance(v, numbers.Number) and not isinstance(v, bool) else "text")
            if c == status_col:
                css = f"status status-{v}"
            cells.append(tables.Cell(text, css=css))
        rows.append(cells)
    return tables.TableSet(name, title, description, df, [tables.GridTable("", header, rows, n_index=0)])


STOP_TEXT = {"precise": "precise", "schedule": "schedule", "epoch_cap": "CAP: epochs", "time_cap": "CAP: seconds"}


def _stop_text(r) -> str | None:
    """Why a run stopped; a cap (the epoch time not yet precise) is flagged, with drift if seen."""
    text = STOP_TEXT.get(r.get("stopped_by")) if isinstance(r.get("stopped_by"), str) else None
    if text and text.startswith("CAP") and tables._truthy(r.get("drifting")):
        text += " (drifting)"
    return text


def plan_frame(plan: pd.DataFrame) -> pd.DataFrame:
    """The plan (analysis.planning) with readable columns."""
    cols = {"experiment": "experiment", "framework": "framework", "model": "model", "devices": "devices",
            "batch_size": "batch", "workers": "workers", "runs": "repeats", "epochs_used": "epochs used (median)",
            "epoch_s": "epoch (s)", "within_cv": "CV within a run", "between_cv": "CV between launches",
            "launch_s": "launch cost (s)", "precision_now": "95% CI ± now (rel.)", "cost_now_s": "cost now (s)",
            "plan_epochs": "plan: epochs per run", "plan_repeats": "plan: repeats",
            "plan_cost_s": "plan: cost (s)"}
    df = plan.reindex(columns=list(cols)).rename(columns=cols)
    df["framework"] = df["framework"].map(framework_label)
    df["model"] = df["model"].map(model_label)
    for c in ("CV within a run", "CV between launches", "95% CI ± now (rel.)"):
        df[c] = df[c].map(lambda v: None if pd.isna(v) else tables.fmt_pct(v))
    return df


def precision_findings(runs: pd.DataFrame, plan: pd.DataFrame) -> list:
    """How many epochs the timing runs needed, what precision they reached, which a cap stopped,
    and what the measured variances say the next sweep needs."""
    ok = runs[(runs["status"] == "ok") & (runs.get("until") == "precise")] if "until" in runs else runs.iloc[0:0]
    if ok.empty:
        return []
    ep = pd.to_numeric(ok["epochs_run"], errors="coerce")
    prec = pd.to_numeric(ok["precision_reached"], errors="coerce")
    target = pd.to_numeric(ok["precision"], errors="coerce").median()
    capped = ok[ok["stopped_by_cap"].map(tables._truthy) == True]  # noqa: E712
    out = [f"Stop rule ({len(ok)} timing runs): each trained until its steady-state epoch time was known to "
           f"±{100 * target:.0f}% (95% interval) — epochs per run {ep.min():.0f} / {ep.median():.0f} / "
           f"{ep.max():.0f} (min / median / max, warm-up included), precision reached median "
           f"±{100 * prec.median():.1f}%. "
           + (f"{len(capped)} stopped at a cap before that (flagged 'CAP' in the run list"
              + (f", {int(capped['drifting'].map(tables._truthy).fillna(False).sum())} of them still drifting"
                 if "drifting" in capped else "") + f"): {_where(capped)}."
              if len(capped) else "No run needed a cap.")]
    if not plan.empty and plan["plan_cost_s"].notna().any():
        p = plan.dropna(subset=["plan_cost_s"])
        out.append(f"Plan for the next sweep (table 'Plan the next sweep'; Kalibera & Jones two-level design, "
                   f"±{100 * planning.PLAN_PRECISION:.0f}% per configuration): median {p['plan_repeats'].median():.0f} repeats of "
                   f"{p['plan_epochs'].median():.0f} steady epochs; {p['plan_cost_s'].sum() / 60:.1f} min of runs for "
                   f"these {len(p)} configurations, against {p['cost_now_s'].sum() / 60:.1f} min spent now. Variance "
                   f"estimates from {p['runs'].max():.0f} repeats or fewer are rough.")
    return out


def runs_frame(runs: pd.DataFrame) -> pd.DataFrame:
    cols = {"experiment": "experiment", "framework": "framework", "model": "model", "devices": "devices",
            "batch_size": "batch", "workers": "workers", "repeat": "repeat", "status": "status",
            "started_at": "started", "train_time_s": "train time (s)",
            "steady_epoch_time_s": "steady epoch (s)", "warmup_epoch_time_s": "warm-up epoch (s)",
            "epochs_run": "epochs", "stop": "stopped by", "precision_reached": "95% CI ± (rel.)",
            "final_val_acc": "val acc", "converged": "converged", "time_to_target_s": "time to target (s)",
            "scheduler_job": "job", "scheduler_nodes": "nodes", "command": "rerun command"}
    df = tables.paper_order(runs, ["experiment", "model", "framework", "devices", "batch_size", "workers", "repeat"])
    df = df.assign(stop=df.apply(_stop_text, axis=1) if not df.empty else None)
    if "scheduler" in df and not df.empty:
        # "slurm 123": which scheduler's job ran it; nothing for runs started by hand or locally
        df["scheduler_job"] = [f"{s} {j}" if isinstance(j, str) else None
                               for s, j in zip(df["scheduler"], df["scheduler_job"])]
    df = df.reindex(columns=list(cols)).rename(columns=cols)
    df["framework"] = df["framework"].map(framework_label)
    df["model"] = df["model"].map(model_label)
    return df


# -- assembling -----------------------------------------------------------------------------

def png_data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode()


def build_tables(agg: Aggregate, runs: pd.DataFrame) -> dict:
    out = tables.all_tables(runs)
    memory = tables.memory_model_table(runs)
    if not memory.empty:  # the pre-flight memory model against the measured peak
        out["memory_model"] = frame_table(
            memory, "memory_model", "Memory model vs measured peak",
            "Per configuration: the pre-flight model of peak host memory (runners/memory.py: ranks, "
            "loader workers, batches in flight, dataset copies), the highest measured peak (PSS of ranks "
            "and workers at the worst sample), the memory cgroup's own peak and which processes the "
            "out-of-memory killer took when the run had a --memory-limit (docs/memory.md).",
            )
    plan = planning.plan_data(tables.performance_runs(runs))
    out["plan"] = frame_table(
        plan_frame(plan), "plan", "Plan the next sweep",
        "Per timing configuration: the noise within a run (CV of the steady epochs) and between launches "
        "(CV of the run means beyond what the within-run noise explains), the cost of a launch (start-up, "
        "warm-up, validation) and of an epoch, the precision the repeats reached now (95% CI of the mean "
        f"epoch time over repeats, relative), and the cheapest plan for ±{100 * planning.PLAN_PRECISION:.0f}%: "
        "epochs per run "
        "sqrt(launch cost × within variance / (epoch cost × between variance)) within the caps, and the repeats "
        "that then reach it (Kalibera & Jones, ISMM 2013; analysis/planning.py).",
        empty_text="No timing run with the stop rule (--until precise) has finished ok.")
    out["plan"].data = plan  # the CSV keeps the raw numbers
    out["deadlocks"] = tables.TableSet(
        "deadlocks", "Deadlock and failure report", "Every run that did not end ok.",
        deadlocks.failures_frame(agg.failures), body=deadlocks.render_html(agg.failures))
    out["environment"] = frame_table(environment_frame(runs), "environment", "Environment",
                                     "What the runs ran on (distinct values; counts when they differ).")
    out["fairness"] = frame_table(fairness_frame(runs), "fairness", "Fairness settings",
                                  "What each framework was given; a value that differs between the "
                                  "columns is a deliberate, recorded framework difference.")
    out["runs"] = frame_table(runs_frame(runs), "runs", "All runs",
                              "Every valid run with the command that reruns it.",
                              code_cols=("rerun command",), status_col="status", empty_text="No valid runs.")
    out["invalid"] = frame_table(agg.invalid.reindex(columns=["path", "run_id", "reason"]), "invalid",
                                 "Malformed results", "Results that could not be used, and why.",
                                 code_cols=("path",), empty_text="Every result file was valid.")
    return out


def build_figures(agg: Aggregate, runs: pd.DataFrame, points: pd.DataFrame, scaling: pd.DataFrame) -> dict:
    """name -> (figure factory, caption). Factories so each figure is closed right after saving."""
    selected = plots.select_resource_runs(runs, agg.cpu, agg.nvml)
    return {
        "status_map": (lambda: plots.status_map(runs),
                       "Outcome of every configuration, including fault-injection demonstrations; the "
                       "colour is the worst outcome over repeats."),
        "runtime_vs_devices": (lambda: plots.runtime_vs_devices(points),
                               "Training time (slowest rank) against devices, one panel per model and batch "
                               "size, like the seed study's Figure 1. An X marks a configuration without an ok run."),
        "speedup": (lambda: plots.speedup_vs_devices(scaling),
                    "Speed-up over the fewest devices; the dashed line is ideal linear scaling."),
        "breakdown": (lambda: plots.breakdown_bars(points),
                      "Mean time per training step split into phases (backward includes the all-reduce)."),
        "throughput": (lambda: plots.throughput_vs_batch(points),
                       "Training seed nodes per second (all processes) against the per-process batch size."),
        "resources": (lambda: plots.resources_over_time(runs, agg.cpu, agg.nvml, selected),
                      "CPU use (100% = one core) and resident memory of each rank (solid) and its loader "
                      "workers (dashed, summed) for selected runs: per framework its largest ok "
                      "configuration, then failed runs." + (" GPU utilisation from NVML." if not agg.nvml.empty else "")),
    }


def render(agg: Aggregate, out: Path, assets: Path, source: str = "") -> Path:
    """Write every asset and the self-contained page; return the page's path."""
    out, assets = Path(out), Path(assets)
    out.parent.mkdir(parents=True, exist_ok=True)
    assets.mkdir(parents=True, exist_ok=True)
    runs = tables.add_experiment(agg.runs)
    points = tables.performance_points(runs)
    scaling = tables.scaling_data(points, runs)
    tabs = build_tables(agg, runs)
    for t in tabs.values():
        t.write(assets)
    figures = {}
    for name, (factory, caption) in build_figures(agg, runs, points, scaling).items():
        fig = factory()
        path = assets / f"{name}.png"
        fig.savefig(path, dpi=100, bbox_inches="tight")
        plots.plt.close(fig)
        note = getattr(fig, "gnnscale_note", None)  # an empty figure: say why in words too
        figures[name] = {"src": png_data_uri(path), "caption": f"{note} {caption}" if note else caption,
                         "file": path.name}
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    page = env.get_template("report.html.j2").render(
        generated=dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        source=source, counts=Counter(runs["status"]), n_runs=len(runs), n_invalid=len(agg.invalid),
        status_colours=STATUS_COLOURS,
        findings=findings(runs, points, scaling, tabs["paper_comparison"].data, agg.invalid,
                          workers=tabs["workers"].data, batch=tabs["batch"].data, plan=tabs["plan"].data),
        study_findings=study_findings(tabs["study_work"].data, tabs["study_time"].data, tables.load_paper(),
                                      tables.performance_runs(runs)),
        tables={k: {"title": t.title, "description": t.description, "html": t.html()} for k, t in tabs.items()},
        figures=figures, n_failures=len(agg.failures),
        experiments=list(dict.fromkeys(runs["experiment"])),
        excluded_faults=int(len(runs) - len(tables.performance_runs(runs))),
    )
    out.write_text(page)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.report", description=__doc__.split("\n")[0])
    p.add_argument("--aggregate", required=True, help="directory written by analysis.aggregate")
    p.add_argument("--out", required=True, help="the HTML page to write (e.g. results/report/index.html)")
    p.add_argument("--assets", default=None, help="directory for table CSV/HTML and plot PNG files "
                   "(default: the page's directory)")
    args = p.parse_args(argv)
    agg_dir = Path(args.aggregate)
    if not (agg_dir / "runs.csv").exists():
        p.error(f"--aggregate {agg_dir}: no runs.csv there; run `python -m analysis.aggregate --out-dir "
                f"{agg_dir} RUN_DIR...` first")
    out = Path(args.out)
    page = render(Aggregate.load(agg_dir), out, Path(args.assets) if args.assets else out.parent, source=str(agg_dir))
    print(f"[analysis] report: {page} ({page.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
