"""The report's findings in words: each sentence computed from the runs, grid points and
tables (speed, steady state, scaling, the loader-worker and batch-size axes, failures,
accuracy, the stop rule's precision, the seed study's Table 2 and why its harness saw what it
saw), with its 95% interval where it states a difference.
"""

from __future__ import annotations

from collections import Counter

import pandas as pd

from analysis import BUSY_WARN_PERCENT, FRAMEWORK_ORDER, GRID_KEYS, framework_label, model_label
from analysis.repeats import next_sweep
from analysis.projection import speedup_gap
from analysis.comparisons import comparison_labels, framework_comparison, framework_pairs
from analysis.formatting import config_text, fmt_pct, interval_text
from analysis.grouping import paper_order, performance_runs, truthy
from analysis.stats import CI_METHOD_DIFF, CI_METHOD_RATIO, NO_CLEAR
from analysis.tables.scaling import EFFICIENCY_WARN, OVERSUBSCRIBED_MARK, SCALING_VALUE, SUPERLINEAR_WARN
from analysis.tables.steps import TIMED_TO_STARTUP_WARN
from analysis.tables.study import HARNESS_LABELS, HARNESS_ORDER


def _comparison_items(cmp: pd.DataFrame, what: str, unit="×", scale=1.0, digits=2, limit=8) -> list:
    """One short sentence per configuration (at most `limit`), then how many more the table has."""
    items = [f"{config_text(r)}: {what} {interval_text(r, unit, scale, digits)}"
             + ("" if r["verdict"] == NO_CLEAR else f", {r['verdict']}") + "."
             for r in cmp.head(limit).to_dict("records")]
    return items + ([f"And {len(cmp) - limit} more configurations (see the tables)."] if len(cmp) > limit else [])


def _verdict_counts(cmp: pd.DataFrame, labels) -> str:
    counts = Counter(cmp["verdict"])
    return ", ".join(f"{label} in {counts[label]}" for label in labels if counts[label]) + f" of {len(cmp)}"


def _pair_label(pair, sep=" / ") -> str:
    return sep.join(framework_label(f) for f in pair)


def speed_findings(runs: pd.DataFrame, speed: pd.DataFrame | None = None) -> list:
    """Which framework is faster, per configuration, with a 95% interval (one experiment; each
    framework against the reference, in the registry's order).

    The headline is the steady-state epoch time (warm-up excluded); the total training time
    follows for fixed-schedule runs only (timing runs stop after different numbers of epochs,
    so their totals are not comparable). A ratio whose interval includes 1× is "no clear difference".
    `speed`: this experiment's rows of tables.speed.speed_data, the epoch-time ratios the speed table
    and the first screen state (computed here where not given)."""
    out = []
    pairs = framework_pairs(runs)
    if not pairs:
        return ["No configuration has ok runs of two frameworks, so their speed cannot be compared."]
    fixed = "until" not in runs or (runs["until"].fillna("epochs") == "epochs").all()
    values = [("steady_epoch_time_s", "Steady-state epoch time (warm-up excluded)")]
    if fixed:
        values.append(("train_time_s", "Total training time (the seed study's metric, warm-up included)"))
    for pair in pairs:
        for value, what in values:
            cmp = _ratios(runs, speed, value, pair)
            if cmp.empty:
                continue
            labels = (*comparison_labels(pair), NO_CLEAR)
            out.append(f"{what}, {_pair_label(pair)}: {_verdict_counts(cmp, labels)} configurations "
                       f"(above 1× {framework_label(pair[1])} is faster).")
            if value == "steady_epoch_time_s" or len(cmp) <= 4:
                out += _comparison_items(cmp, _pair_label(pair))
    if out:
        out.append(f"Intervals of these ratios: {CI_METHOD_RATIO}.")
    return out or ["No configuration has ok runs of two frameworks, so their speed cannot be compared."]


def _ratios(runs: pd.DataFrame, speed: pd.DataFrame | None, value: str, pair) -> pd.DataFrame:
    """Framework a over b (`pair`) of `value` per configuration; the steady-state epoch time's from
    `speed` (speed_data's rows) where given."""
    if value == SCALING_VALUE and speed is not None:
        return speed[(speed["a"] == pair[0]) & (speed["b"] == pair[1])]
    return framework_comparison(runs, value, kind="ratio", pair=pair)


def steady_state_findings(runs: pd.DataFrame) -> list:
    """Warm-up cost and run-to-run noise of the steady-state epoch time, per framework."""
    ok = runs[runs["status"] == "ok"]
    if ok.empty or "steady_epoch_time_s" not in ok or ok["steady_epoch_time_s"].isna().all():
        return ["No run has an epoch after the warm-up epoch: run at least 2 epochs (better 5+) for a "
                "steady-state time."] if not ok.empty else []
    parts = []
    for fw in FRAMEWORK_ORDER:
        g = ok[ok["framework"] == fw]
        if g.empty:
            continue
        within = pd.to_numeric(g["steady_epoch_cv"], errors="coerce").median()
        # between repeats: CV of each configuration's steady-state times across its repeats
        between = g.groupby(["model", "devices", "batch_size", "workers"])["steady_epoch_time_s"].agg(
            lambda v: v.std(ddof=1) / v.mean() if v.notna().sum() > 1 and v.mean() > 0 else float("nan")).median()
        warm = (g["warmup_epoch_time_s"] / g["steady_epoch_time_s"]).median()
        parts.append(f"{framework_label(fw)} steady state (medians over configurations): warm-up epoch "
                     f"{warm:.2f}× the steady-state epoch; CV of the steady epochs {fmt_pct(within)} within a run, "
                     f"{fmt_pct(between) if not pd.isna(between) else 'n/a (1 repeat)'} across repeats.")
    out = parts
    ratio = pd.to_numeric(ok.get("timed_to_startup_ratio"), errors="coerce")
    if "until" in ok and (ok["until"] == "precise").all():
        ratio = ratio.iloc[0:0]  # timing runs' headline excludes start-up; their totals are not the point
    steps = pd.to_numeric(ok.get("steps_per_epoch"), errors="coerce")
    if ratio.notna().any():
        short = int((ratio < TIMED_TO_STARTUP_WARN).sum())
        out.append(f"Timed part / start-up: {ratio.min():.1f}× to {ratio.max():.1f}× (median {ratio.median():.1f}×); "
                   f"steps per epoch {steps.min():.0f} to {steps.max():.0f}.")
        if short:
            out.append(f"{short} run{'s' if short != 1 else ''} trained for less than "
                       f"{TIMED_TO_STARTUP_WARN:.0f}× {'its' if short == 1 else 'their'} start-up: "
                       f"such totals are dominated by one-off costs.")
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
    head, per = [], []
    for (fw, d), s in paper_order(g, ["framework", "devices"]).groupby(["framework", "devices"], sort=False):
        counts = Counter(s["verdict"])
        best = s.loc[s["speedup"].idxmax()]
        head.append(f"{framework_label(fw)} on {d} devices {s['speedup'].median():.2f}× "
                    f"({100 * s['efficiency'].median():.0f}% efficiency)")
        per.append(f"{framework_label(fw)} on {d} devices: faster than the base in {counts['faster']}, slower in "
                   f"{counts['slower']}, {NO_CLEAR} in {counts[NO_CLEAR]} of {len(s)}; best {config_text(best)}, "
                   f"{interval_text({**best, 'estimate': best['speedup']})}.")
    out = ["Median speed-up of the steady-state epoch time over the fewest devices: " + "; ".join(head) + ".",
           *per, f"Intervals of the speed-ups: {CI_METHOD_RATIO}."]
    over = g[g["oversubscribed"].fillna(False).astype(bool)]
    if len(over):
        out.append(f"{len(over)} of these {len(g)} multi-device configurations are oversubscribed "
                   f"({OVERSUBSCRIBED_MARK} in the tables): they run more processes than the machine has "
                   f"cores, so their speed-up measures CPU contention, not what more GPUs would give.")
    superlinear = g[g["efficiency"] > SUPERLINEAR_WARN]
    if len(superlinear):
        out.append(f"{len(superlinear)} configuration{'s' if len(superlinear) != 1 else ''} scale better than "
                   f"ideal (efficiency up to {100 * superlinear['efficiency'].max():.0f}%): usually the run with "
                   f"fewer devices was disturbed (other load on the machine, oversubscribed CPU threads); "
                   f"rerun those alone before trusting the speed-up.")
    low = g[g["efficiency"] < EFFICIENCY_WARN]
    warn = f"{100 * EFFICIENCY_WARN:.0f}%"
    if low.empty:
        out.append(f"Parallel efficiency stays at or above {warn} in every multi-device configuration measured.")
    else:
        first = low.sort_values("devices").groupby(["framework", "model", "batch_size", "series_workers"]).head(1)
        out.append(f"Scaling stops paying off (efficiency below {warn}) in {len(low)} of {len(g)} multi-device "
                   f"configurations.")
        out += [f"Below {warn} first at {framework_label(r['framework'])} {config_text(r)} "
                f"({100 * r['efficiency']:.0f}%)." for r in first.head(4).to_dict("records")]
        if len(first) > 4:
            out.append(f"And {len(first) - 4} more series (see the scaling table).")
    return out


def _values(series) -> str:
    vals = sorted(set(series), key=lambda v: (str(type(v)), v))
    return ", ".join(str(v) for v in vals)


def _where(g: pd.DataFrame) -> str:
    """The configurations of a group of runs: listed when few, else the values of each axis."""
    configs = g.drop_duplicates(list(GRID_KEYS))
    if len(configs) <= 3:
        return "; ".join(f"{framework_label(r['framework'])} {config_text(r)}" for r in configs.to_dict("records"))
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
        out.append(text + ".")
        if not inj and len(remedy):
            out.append(f"Remedy for {cause}: {remedy.iloc[0]}.")
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
    conv = ok["converged"].map(truthy) if "converged" in ok else pd.Series(None, index=ok.index)
    bad = ok[conv == False]  # noqa: E712
    if len(bad):
        base = pd.to_numeric(bad["baseline_val_acc"], errors="coerce").median()
        out.append(f"Not converged: {len(bad)} of {len(ok)} ok runs end at or below the features-only baseline "
                   f"({100 * base:.1f}% validation accuracy): {_where(bad)}.")
        out.append("Their accuracy says nothing about the frameworks; train longer (more epochs/steps) before "
                   "comparing.")
    keys = ["model", "devices", "batch_size", "workers"]
    both_conv = ok.assign(_c=conv).groupby(keys)["_c"].transform(
        lambda c: bool((c == True).all())).astype(bool)  # noqa: E712
    target = pd.to_numeric(ok["target_val_acc"], errors="coerce").dropna()
    reached = int(ok["time_to_target_s"].notna().sum())
    if len(target):
        out.append(f"Time to {100 * target.iloc[0]:.0f}% validation accuracy (target of dataset "
                   f"{ok['dataset'].iloc[0]}): {reached} of {len(ok)} ok runs reached it.")
    for pair in framework_pairs(ok):
        cmp = framework_comparison(ok[both_conv], "final_val_acc", kind="diff", pair=pair)
        if not cmp.empty:
            labels = (*comparison_labels(pair, "diff"), NO_CLEAR)
            out.append(f"Final validation accuracy where both frameworks converged, {_pair_label(pair, ' − ')} "
                       f"(percentage points; {CI_METHOD_DIFF}): {_verdict_counts(cmp, labels)} configurations.")
            out += _comparison_items(cmp, _pair_label(pair, " − "), unit=" pts", scale=100, digits=1)
        tta = framework_comparison(ok, "time_to_target_s", kind="ratio", pair=pair)
        if not tta.empty:
            out.append(f"Time to the target, {_pair_label(pair)}, over the runs that reached it:")
            out += _comparison_items(tta, _pair_label(pair))
    return out


def learning_findings(ok: pd.DataFrame) -> list:
    """Timing runs stop long before convergence; they are only checked for having learnt."""
    learned = ok["learned"].map(truthy) if "learned" in ok else pd.Series(None, index=ok.index)
    known = learned.notna()
    if not known.any():
        return []
    bad = ok[learned == False]  # noqa: E712
    text = (f"Learning check of the timing runs (validated once, after their last epoch, outside the timed "
            f"region): {int((learned == True).sum())} of {int(known.sum())} ended above the majority-class "  # noqa: E712
            f"accuracy with a falling loss. Accuracy itself is judged by the convergence runs (full schedule).")
    out = [text]
    if len(bad):
        out.append(f"These did NOT learn — their times may measure a broken run: {_where(bad)}.")
    return out


def axis_findings(effect: pd.DataFrame, axis: str, what: str, table: str) -> list:
    """One finding per framework for an axis effect (tables.axes.axis_effect): the median ratio, the
    best and worst configuration with their intervals, and the verdict counts."""
    g = effect.dropna(subset=["estimate"]) if not effect.empty else effect
    if g.empty:
        return []
    heads, ranges = [], []
    for fw, s in paper_order(g, ["framework"]).groupby("framework", sort=False):
        counts = Counter(s["verdict"])
        lo, hi = s.loc[s["estimate"].idxmin()], s.loc[s["estimate"].idxmax()]
        heads.append(f"{framework_label(fw)} median {s['estimate'].median():.2f}×, "
                     + ", ".join(f"{v} in {n}" for v, n in counts.most_common()) + f" of {len(s)}")
        ranges.append(f"{framework_label(fw)}: from {interval_text(lo)} ({config_text(lo)}) to "
                      f"{interval_text(hi)} ({config_text(hi)}).")
    levels = sorted({(b, v) for b, v in zip(g[f"base_{axis}"], g[axis])})
    steps = ", ".join(f"{b} → {v}" for b, v in levels)
    over = int(g["oversubscribed"].fillna(False).astype(bool).sum())
    out = [f"{what} ({axis.replace('_', ' ')} {steps}; table '{table}'): " + "; ".join(heads) + ".", *ranges]
    if over:
        out.append(f"{over} of {len(g)} of these comparisons involve oversubscribed points "
                   f"({OVERSUBSCRIBED_MARK}): more processes than cores.")
    return out


def loader_findings(points: pd.DataFrame) -> list:
    """How much of a training step goes to waiting for the data loader, per framework."""
    ok = points[(points["n_ok"] > 0) & points["step_s_mean"].notna() & (points["step_s_mean"] > 0)]
    if ok.empty:
        return []
    share = ok["step_load_wait_s_mean"] / ok["step_s_mean"]
    top = ok.loc[share.idxmax()]
    by_fw = "; ".join(f"{framework_label(f)} {100 * share[ok['framework'] == f].median():.0f}%"
                      for f in FRAMEWORK_ORDER if (ok["framework"] == f).any())
    return [f"Waiting for the data loader takes a median {100 * share.median():.0f}% of a training step "
            f"({by_fw}); the most is {100 * share.max():.0f}% ({framework_label(top['framework'])} {config_text(top)})."]


def paper_findings(comparison: pd.DataFrame) -> list:
    """How often the faster framework agrees with the seed study's Table 2."""
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
    multi = work[work["devices"] > work["devices"].min()]
    if multi.empty:
        return ["Only one device count was measured, so work per rank cannot be compared across device counts."]
    d = int(multi["devices"].max())
    at_d = multi[multi["devices"] == d]
    passes = _median_by(at_d, "split_passes_per_epoch")
    speed = {}
    if not time.empty:
        speed = _median_by(time[(time["devices"] == d) & time["speedup"].notna()], "speedup")
    return (_busy_caution(runs) + _study_work_findings(at_d, passes, d) + _study_speed_findings(speed, paper, d)
            + _study_verdict(passes.get(("study", "dgl")), speed, d) + _study_caveats(d))


def _busy_caution(runs) -> list:
    """A caution when timed runs started while other work kept the CPUs busy."""
    if runs is None or "cpu_busy_before" not in runs:
        return []
    busy = pd.to_numeric(runs["cpu_busy_before"], errors="coerce") > BUSY_WARN_PERCENT
    if not busy.any():
        return []
    return [f"Caution: {int(busy.sum())} of {len(runs)} runs started while the CPUs were more than "
            f"{BUSY_WARN_PERCENT}% busy with other work, so the times and speed-ups below are noisy "
            f"(see the confidence intervals).",
            "The work per rank is counted, not timed, and does not depend on the load."]


def _study_work_findings(at_d: pd.DataFrame, passes: dict, d: int) -> list:
    """Work per rank at `d` devices per harness, and whether the study's DGL ranks each trained the whole split."""
    out = []
    seeds = _median_by(at_d, "seed_nodes_per_rank_epoch")
    split = at_d["train_split_seed_nodes"].dropna()
    split_text = f"the {split.iloc[0]:,.0f}-node training split" if len(split) else "the training split"
    for h in HARNESS_ORDER:
        out += [f"Work per rank, {HARNESS_LABELS[h]}, {d} devices: each {framework_label(f)} rank trained "
                f"{seeds[(h, f)]:,.0f} seed nodes per epoch (all ranks: {passes[(h, f)]:.2f}× {split_text}; "
                f"table 'Work per rank')."
                for f in FRAMEWORK_ORDER if (h, f) in seeds and (h, f) in passes]
    whole = passes.get(("study", "dgl"))
    shared = passes.get(("study", "pyg"))
    if whole is not None and whole > 0.9 * d:
        out.append(f"So under the seed study's harness {d} DGL ranks did {whole:.1f}× the work of one pass per "
                   f"epoch: every rank trains the whole split.")
        out.append("Lightning cannot shard DGL's loader: its dataset is iterable and the study did not set use_ddp"
                   + (f"; PyG's loader, built in a DataModule hook, was split ({shared:.2f}×)." if shared is not None
                      else "."))
    return out


def _study_speed_findings(speed: dict, paper: pd.DataFrame, d: int) -> list:
    """The seed study's published 1 -> 2 GPU speed-ups, then ours at `d` devices per harness."""
    out = []
    pap = paper_study_speedups(paper)
    if not pap.empty:
        med = pap.groupby("framework")["speedup_1_to_2"].agg(["median", "min", "max"])
        out.append("The seed study's Table 2 (T4 GPUs, Reddit), 1 → 2 GPUs: " + "; ".join(
            f"{framework_label(f)} speed-up {med.loc[f, 'median']:.2f}× (range {med.loc[f, 'min']:.2f}–"
            f"{med.loc[f, 'max']:.2f}×)" for f in FRAMEWORK_ORDER if f in med.index)
            + " (below 1×: slower with 2 GPUs).")
    if speed:
        out.append(f"Here, 1 → {d} devices, median speed-up of the steady-state epoch time: " + "; ".join(
            f"{HARNESS_LABELS[h]}: " + ", ".join(
                f"{framework_label(f)} {speed[(h, f)]:.2f}×" for f in FRAMEWORK_ORDER if (h, f) in speed)
            for h in HARNESS_ORDER if any((h, f) in speed for f in FRAMEWORK_ORDER))
            + " (table 'Time vs devices').")
    return out


def _study_verdict(whole, speed: dict, d: int) -> list:
    """Whether the timings bear out the work per rank: the study's DGL gaining least from more devices."""
    s_dgl, s_pyg, f_dgl = speed.get(("study", "dgl")), speed.get(("study", "pyg")), speed.get(("fair", "dgl"))
    if whole is not None and whole > 0.9 * d and None not in (s_dgl, s_pyg, f_dgl):
        if s_dgl < s_pyg and s_dgl < f_dgl:
            return [f"The shape of the seed study's result is reproduced by its harness: DGL gains less from "
                    f"more devices than PyG ({s_dgl:.2f}× vs {s_pyg:.2f}×).",
                    f"With the seeds split across ranks (fair harness) DGL's speed-up is {f_dgl:.2f}×.",
                    "That is what the work per rank predicts: with every DGL rank training the whole split, a "
                    "rank's epoch cannot get shorter with more devices.",
                    "'Adding GPUs hurts DGL' describes the study's harness, not DGL."]
        return [f"The work difference is there, but these timings do not show the expected effect "
                f"(DGL under the study's harness {s_dgl:.2f}×, PyG {s_pyg:.2f}×, DGL under the fair harness "
                f"{f_dgl:.2f}×).",
                "So the evidence here does not explain the time trend by the work alone (on shared CPU cores "
                "fixed costs and contention can dominate)."]
    if whole is not None:
        return ["Not enough ok runs at two device counts of both harnesses to compare speed-ups."]
    return []


def _study_caveats(d: int) -> list:
    """What the study-harness comparison does not separate or address."""
    out = ["Not separated here: the study harness's other differences (trainer.fit time includes validation, "
           "the sanity check and Lightning's set-up; DGL's graph has self-loops).",
           "Their share of the time is in the tables, but no claim is made about it.",
           "These runs are CPU processes sharing the machine's cores, not GPUs: the work per rank carries "
           "over to GPUs, the absolute speed-ups do not."]
    if d < 4:
        out.append("The seed study's 4-GPU deadlocks are not addressed by these runs (no 4-device run); "
                   "see the memory model under 'CPU and memory'.")
    return out


def precision_findings(runs: pd.DataFrame, plan: pd.DataFrame) -> list:
    """How many epochs the timing runs needed, what precision they reached, which a cap stopped,
    and what the measured variances say the next sweep needs."""
    ok = runs[(runs["status"] == "ok") & (runs.get("until") == "precise")] if "until" in runs else runs.iloc[0:0]
    if ok.empty:
        return []
    ep = pd.to_numeric(ok["epochs_run"], errors="coerce")
    prec = pd.to_numeric(ok["precision_reached"], errors="coerce")
    target = pd.to_numeric(ok["precision"], errors="coerce").median()
    capped = ok[ok["stopped_by_cap"].map(truthy) == True]  # noqa: E712
    out = [f"Stop rule ({len(ok)} timing runs): each trained until its steady-state epoch time was known to "
           f"±{100 * target:.0f}% (95% interval).",
           f"Timing runs: epochs per run {ep.min():.0f} / {ep.median():.0f} / {ep.max():.0f} (min / median / max, "
           f"warm-up included); precision reached median ±{100 * prec.median():.1f}%."]
    if len(capped):
        drifting = int(capped["drifting"].map(truthy).fillna(False).sum()) if "drifting" in capped else 0
        out.append(f"{len(capped)} stopped at a cap before that (flagged 'CAP' in the run list, {drifting} still "
                   f"drifting): {_where(capped)}.")
    else:
        out.append("No run needed a cap.")
    if not plan.empty and plan["plan_cost_s"].notna().any():
        p = plan.dropna(subset=["plan_cost_s"])
        out.append(f"Plan for the next sweep (Kalibera & Jones two-level design, ±{100 * next_sweep.PLAN_PRECISION:.0f}% "
                   f"per configuration): median {p['plan_repeats'].median():.0f} repeats of "
                   f"{p['plan_epochs'].median():.0f} steady epochs.")
        out.append(f"That is {p['plan_cost_s'].sum() / 60:.1f} min of runs for these {len(p)} configurations, against "
                   f"{p['cost_now_s'].sum() / 60:.1f} min spent now; variance estimates from "
                   f"{p['runs'].max():.0f} repeats or fewer are rough.")
    return out


def paper_study_speedups(paper: pd.DataFrame) -> pd.DataFrame:
    """The seed study's own speed-ups from 1 to 2 GPUs (Table 2), per model, batch size and framework."""
    p = paper.pivot_table(index=["model", "batch_size", "framework"], columns="gpus", values="seconds")
    if 1 not in p.columns or 2 not in p.columns:
        return pd.DataFrame(columns=["model", "batch_size", "framework", "speedup_1_to_2"])
    return (p[1] / p[2]).rename("speedup_1_to_2").reset_index()


def all_findings(runs, points, scaling, comparison, invalid, workers=None, batch=None, plan=None, gap=None,
                 speed=None) -> list:
    """Sentences computed from the data, grouped: [{title, items}] (overall, then per experiment);
    `gap`: speedup_gap.gap_data, where the missing speed-up of each multi-device point went; `speed`:
    tables.speed.speed_data, the framework comparisons of every experiment."""
    counts = Counter(runs["status"])
    n_exp = runs["experiment"].nunique()
    overall = [f"{len(runs)} valid run{'s' if len(runs) != 1 else ''} in {n_exp} experiment{'s' if n_exp != 1 else ''}: "
               + (", ".join(f"{n} {s}" for s, n in counts.most_common()) or "none") + "."]
    if len(invalid):
        overall.append(f"{len(invalid)} result{'s' if len(invalid) != 1 else ''} could not be used "
                       f"(malformed or missing; see 'Malformed results').")
    overall += failure_findings(runs)
    overall += order_findings(performance_runs(runs))
    busy = runs[pd.to_numeric(runs.get("cpu_busy_before"), errors="coerce") > BUSY_WARN_PERCENT] \
        if "cpu_busy_before" in runs else runs.iloc[0:0]
    if len(busy):
        overall.append(f"{len(busy)} of {len(runs)} run{'s' if len(runs) != 1 else ''} started while the CPUs "
                       f"were more than {BUSY_WARN_PERCENT}% busy with other work: their timings are not "
                       "trustworthy (the run list has the commands that rerun them).")
    groups = [{"title": "Overall", "items": overall}]
    empty = pd.DataFrame(columns=["experiment"])
    workers, batch, plan, gap = (x if x is not None else empty for x in (workers, batch, plan, gap))
    for exp in dict.fromkeys(points["experiment"]):
        p = points[points["experiment"] == exp]
        r = performance_runs(runs[runs["experiment"] == exp])
        if not (r["status"] == "ok").any():  # nothing measured: its failures are in the overall group
            groups.append({"title": exp, "items": ["No run of this experiment ended ok: nothing to compare here "
                                                   "(its failures are above and in 'What hangs, and why?')."]})
            continue
        items = speed_findings(r, None if speed is None else speed[speed["experiment"] == exp]) \
            + precision_findings(r, plan[plan["experiment"] == exp]) \
            + steady_state_findings(r) + scaling_findings(scaling[scaling["experiment"] == exp], r) \
            + speedup_gap.gap_findings(gap[gap["experiment"] == exp]) \
            + axis_findings(workers[workers["experiment"] == exp], "workers",
                            "Loader workers, speed-up of the steady-state epoch", "Loader workers") \
            + axis_findings(batch[batch["experiment"] == exp], "batch_size",
                            "Batch size, steady-state throughput gain", "Batch size") \
            + loader_findings(p) + accuracy_findings(r, p) \
            + paper_findings(comparison[comparison["experiment"] == exp])
        groups.append({"title": exp, "items": items})
    return groups
