"""The report's answers: one short sentence (or two) per question of the study, computed from the
tables, each number linked to the table row or section it comes from.

The answers speak for one experiment, the main one: the performance experiment with the most
framework comparisons (timing runs in the default sweep); the rest of the report covers every
experiment. An experiment holds one graph (its label names the dataset); `with_graphs` names the
graph of each answer, and answers per graph when the runs read several. Where a table gives a
number per configuration, a sentence quotes the configuration at the middle of that number's
range (the lower of the two middle ones), so every number it states is in a table row, with that
row's 95% interval.
"""

from __future__ import annotations

import html
import math
from collections import Counter
from dataclasses import dataclass, field

import pandas as pd

from analysis import BUSY_WARN_PERCENT, FRAMEWORK_ORDER, PHASE_COLUMNS, PHASE_LABELS, framework_label, model_label
from analysis.report import deadlocks, sections
from analysis.projection import speedup_gap
from analysis.comparisons import comparison_labels, framework_comparison, framework_pairs
from analysis.display import row_anchor
from analysis.formatting import fmt_pct
from analysis.grouping import paper_order, performance_runs, truthy
from analysis.stats import NO_CLEAR, middle, over_configurations
from analysis.tables.scaling import SUPERLINEAR_WARN, scaling_anchor
from analysis.tables.speed import speed_anchor

# The relative half-width a first-screen answer should reach (config adaptive.precision).
DEFAULT_PRECISION = 0.10


@dataclass
class Answer:
    """One question's answer: `parts` are (text, href or None); `key` is its section's id, whose
    title (analysis.report.sections) is the question."""
    key: str
    parts: list = field(default_factory=list)
    # The geometric-mean intervals the sentence states: {"what", "low", "high", "points"}, so the
    # first screen can say which of them are still wider than the sweep's precision (open_answers).
    intervals: list = field(default_factory=list)

    @property
    def label(self) -> str:
        return sections.title(self.key)

    def text(self) -> str:
        return "".join(t for t, _ in self.parts)

    @property
    def measured(self) -> bool:
        """False when the answer says the question was not measured (its figure then says nothing)."""
        return not self.text().startswith("Not measured")

    def html(self) -> str:
        return "".join(f"<a href='{html.escape(h)}'>{html.escape(t)}</a>" if h else html.escape(t)
                       for t, h in self.parts)


NO_INTERVAL = " (1 repeat: no interval)"


def _ci(r, digits=2, scale=1.0, unit="") -> str:
    """' (95% CI 1.60–2.00)', or nothing without an interval (the sentence says so once)."""
    if pd.isna(r["low"]):
        return ""
    return f" (95% CI {scale * r['low']:.{digits}f}–{scale * r['high']:.{digits}f}{unit})"


def _no_interval(rows) -> str:
    """NO_INTERVAL when one of the quoted rows has no interval."""
    return NO_INTERVAL if any(pd.isna(r["low"]) for r in rows) else ""


# -- which framework is faster --------------------------------------------------------------

def _model_speed(g: pd.DataFrame, pair, exp, intervals: list) -> list:
    """The parts of one model's sentence (rows of tables.speed.speed_data for one pair and model): the
    geometric mean ratio over the configurations with its 95% interval (stats.over_configurations),
    the verdict that interval supports ("faster" only where it excludes 1×), and the range over
    the configurations."""
    a, b = pair
    model = model_label(g["model"].iloc[0])
    c = _combined(g, "estimate")
    # The second round's key where it plans this pair (a over the declared reference), else None.
    ratio = sections.framework_ratios().get(sections.framework_axis(a))
    planned = ratio is not None and (ratio.numerator, ratio.denominator) == (a, b)
    intervals.append({"what": f"{model} {framework_label(a)} / {framework_label(b)}", **c, "points": 2 * len(g),
                      "answer": (sections.framework_axis(a), g["model"].iloc[0]) if planned else None})
    lo_row, hi_row = g.loc[g["estimate"].idxmin()], g.loc[g["estimate"].idxmax()]
    hrefs = ["#" + speed_anchor(exp, a, b, r["model"], r["devices"], r["batch_size"], r["workers"])
             for r in (lo_row, hi_row)]
    n = len(g)
    if pd.isna(c["low"]) or c["low"] <= 1 <= c["high"]:
        # "not settled" is the first screen's word for an interval wider than the precision; an
        # interval that holds 1x says that neither framework is clearly faster.
        lead = "not settled" if pd.isna(c["low"]) else "neither is clearly faster"
        return [(f"{model}: {lead}; {framework_label(a)} / {framework_label(b)} epoch time ", None),
                (f"{c['estimate']:.2f}×", "#speed"),
                *_detail(c, lo_row["estimate"], hi_row["estimate"], hrefs, n, either=True), (". ", None),
                *_why(g, *((a, b) if c["estimate"] >= 1 else (b, a)))]
    win, lose = (b, a) if c["estimate"] > 1 else (a, b)
    # Said as "the slower one takes N× as long": the ratio inverted when the first framework wins.
    if win == b:
        slow, rng = c, (lo_row["estimate"], hi_row["estimate"], hrefs)
    else:
        slow = {"estimate": 1 / c["estimate"], "low": 1 / c["high"], "high": 1 / c["low"]}
        rng = (1 / hi_row["estimate"], 1 / lo_row["estimate"], hrefs[::-1])
    clear = int((g["verdict"] == f"{framework_label(win)} faster").sum())
    return [(f"{model}: {framework_label(win)} is faster; {framework_label(lose)} takes ", None),
            (f"{slow['estimate']:.2f}×", "#speed"), (" as long", None), *_detail(slow, *rng, n),
            ("; clear in ", None), (f"{clear} of {n}", "#speed"), (" configurations. ", None),
            *_why(g, lose, win)]


def _why(g: pd.DataFrame, slow: str, fast: str) -> list:
    """'Why: PyG computes 1.73× DGL's edge updates per step (1.70×–1.76×) at 1.80× its time per
    update (95% CI 1.71–1.90). ': the time ratio split into work and time per unit of work
    (tables.work), over the configurations as the time ratio is; nothing where no work was recorded."""
    g = g[g["edges_work"].notna() & (g["edges_work"] > 0)] if "edges_work" in g else g.iloc[0:0]
    if g.empty:
        return []
    flip = slow == g["b"].iloc[0]  # the rows hold a / b; the sentence speaks of the slower one
    work = g["edges_work"].map(lambda v: 1 / v if flip else v)
    per = g.assign(per_edge=1 / g["per_edge"], low=1 / g["per_edge_high"], high=1 / g["per_edge_low"]) if flip \
        else g.assign(low=g["per_edge_low"], high=g["per_edge_high"])
    c = _combined(per, "per_edge")
    gm = math.exp(sum(math.log(v) for v in work) / len(work))
    spread = f" ({work.min():.2f}×–{work.max():.2f}×)" if f"{work.min():.2f}" != f"{work.max():.2f}" else ""
    ci = "" if pd.isna(c["low"]) else f" (95% CI {c['low']:.2f}–{c['high']:.2f})"
    s, f = framework_label(slow), framework_label(fast)
    return [(f"Why: {s} computes ", None), (f"{gm:.2f}×", "#work"), (f" {f}'s edge updates per step{spread} at ", None),
            (f"{c['estimate']:.2f}×", "#work"), (f" its time per update{ci}. ", None)]


def speed_answer(speed: pd.DataFrame, exp) -> Answer:
    """Which framework is faster, by how much, per model (tables.speed.speed_data): per pair (each
    framework against the reference), each model's sentence naming both frameworks."""
    ans = Answer("speed")
    d = speed[speed["experiment"] == exp] if len(speed) else speed
    if d.empty:
        ans.parts = [("Not measured: no configuration has ok runs of two frameworks.", "#speed")]
        return ans
    for pair in dict.fromkeys(zip(d["a"], d["b"])):
        p = d[(d["a"] == pair[0]) & (d["b"] == pair[1])]
        for _, g in paper_order(p, ["model"]).groupby("model", sort=False):
            ans.parts += _model_speed(g, pair, exp, ans.intervals)
    return ans


# -- scaling and where the speed-up goes ----------------------------------------------------

def _largest(what: str, shares: list, noun: str = "part") -> str:
    """'mostly X' where every share the sentence quotes for X is above half as printed (51% and up),
    else 'the largest {noun} is X': a fifth of the gap can be its largest part, never most of it."""
    return f"mostly {what}" if all(round(100 * s) > 50 for s in shares) else f"the largest {noun} is {what}"


def _gap_part(gap: pd.DataFrame, fw: str):
    """(label, row) of the largest part of a framework's missing speed-up (by median share
    over its split points), or None when nothing is missing or nothing could be split."""
    g = gap[(gap["framework"] == fw) & gap["reason"].isna() & (gap["gap_s"] > 0)]
    if g.empty:
        return None
    shares = {p: g[f"{p}_share"].median() for p in speedup_gap.PARTS}
    top = max(shares, key=lambda p: shares[p])
    return top, middle(g, f"{top}_share")


def _gap_parts(gap: pd.DataFrame, fws: list) -> list:
    """'PyG and DGL: the largest part is compute contention (PyG 55%, DGL 48% of the gap).', frameworks
    grouped by their largest part; 'mostly' only where each of them loses more than half to it (_largest)."""
    found = {fw: _gap_part(gap, fw) for fw in fws}
    found = {fw: v for fw, v in found.items() if v}
    if not found:
        reasons = gap["reason"].dropna() if len(gap) else pd.Series(dtype=object)
        why = (f"The missing speed-up cannot be split: {reasons.iloc[0]}." if len(reasons)
               else "No speed-up is missing to split.")
        return [(why, "#speedup-gap")]
    out = []
    for top in dict.fromkeys(v[0] for v in found.values()):
        who = [fw for fw, v in found.items() if v[0] == top]
        shares = [found[fw][1][f"{top}_share"] for fw in who]
        out.append((f"{' and '.join(framework_label(f) for f in who)}: "
                    f"{_largest(speedup_gap.PART_SHORT[top], shares)} (", None))
        for i, fw in enumerate(who):
            r = found[fw][1]
            out += [(("" if i == 0 else ", ") + (f"{framework_label(fw)} " if len(who) > 1 else ""), None),
                    (f"{100 * r[f'{top}_share']:.0f}%", "#" + speedup_gap.gap_anchor(r))]
        over = any(found[fw][1][f"{top}_share"] > 1 for fw in who)  # the other parts gave time back
        # Short: with two frameworks each with a different largest part, this is said twice.
        out.append((" of the gap" + (", others gave time back" if over else "") + "). ", None))
    return out


def scaling_answer(scaling: pd.DataFrame, gap: pd.DataFrame, exp) -> Answer:
    """How far each framework scales from the fewest to the most devices, and where the rest goes."""
    ans = Answer("scaling")
    g = scaling[(scaling["experiment"] == exp) & (scaling["devices"] > scaling["base_devices"])
                & scaling["speedup"].notna()] if len(scaling) else scaling
    if g.empty:
        ans.parts = [("Not measured: no configuration has ok runs at two device counts.", "#scaling")]
        return ans
    top = g[g["devices"] == g["devices"].max()]
    base, n = int(top["base_devices"].min()), int(top["devices"].max())
    fws = [f for f in FRAMEWORK_ORDER if f in set(top["framework"])]
    ans.parts = [(f"From {base} to {n} devices (ideal {n / base:g}×), ", None)]
    for i, fw in enumerate(fws):
        rows = top[top["framework"] == fw]
        c = _combined(rows, "speedup")
        ans.intervals.append({"what": f"{framework_label(fw)} {base} → {n} devices", **c, "points": 2 * len(rows),
                              "answer": ("devices", fw) if (base, n) == (1, 2) else None})
        lo_r, hi_r = rows.loc[rows["speedup"].idxmin()], rows.loc[rows["speedup"].idxmax()]
        hrefs = ["#" + scaling_anchor(exp, r["model"], fw, r["batch_size"], r["series_workers"])
                 for r in (lo_r, hi_r)]
        settled = not pd.isna(c["low"]) and not c["low"] <= 1 <= c["high"]
        word = (" faster" if c["estimate"] >= 1 else " as fast (slower)") if settled else \
            "" if pd.isna(c["low"]) else ", no clear speed-up,"
        ans.parts += [(("; " if i else "") + f"{framework_label(fw)} runs ", None),
                      (f"{c['estimate']:.2f}×", "#scaling"), (word, None),
                      *_detail(c, lo_r["speedup"], hi_r["speedup"], hrefs, len(rows), either=not settled)]
    ans.parts.append((". ", None))
    gap = gap[(gap["experiment"] == exp) & (gap["devices"] == n)] if len(gap) else gap
    ans.parts += _gap_parts(gap, fws)
    return ans


# -- loader workers and batch size ----------------------------------------------------------

# The ratios the second round's planner plans for (analysis.report.sections): axis -> (from, to).
PLANNED = {axis: (r.denominator, r.numerator) for axis, r in sections.ratios().items() if axis in ("workers", "batch_size")}
AXES = {  # axis -> section, what the ratio is, verdict words, leads for yes / no / neither
    "workers": ("workers", "epoch speed-up", "faster", "slower", ("Yes", "No, they slow it down", "Not clearly")),
    "batch_size": ("batch", "throughput gain", "higher", "lower",
                   ("Larger batches raise throughput", "Larger batches lower throughput", "No clear effect")),
}


def axis_answer(data: pd.DataFrame, runs: pd.DataFrame, exp, axis: str) -> Answer:
    """Loader workers (speed-up of the epoch) or batch size (throughput gain): per framework the
    middle configuration's ratio with its interval, and how often the interval is clear."""
    key, what, yes, no, leads = AXES[axis]
    ans = Answer(key)
    d = data[(data["experiment"] == exp) & data["estimate"].notna()] if len(data) else data
    if d.empty:
        vals = sorted(set(runs.loc[runs["experiment"] == exp, axis])) if len(runs) else []
        unit = "loader workers per rank" if axis == "workers" else "seed nodes per process"
        ans.parts = [(f"Not measured: one setting only ({', '.join(map(str, vals)) or 'none'} {unit}).", f"#{key}")]
        return ans
    verdicts = Counter(d["verdict"])
    lo, hi = d[f"base_{axis}"].min(), d[axis].max()
    fws = [f for f in FRAMEWORK_ORDER if f in set(d["framework"])]
    combined = {fw: _combined(d[(d["framework"] == fw) & (d[axis] == hi)], "estimate") for fw in fws}
    # The lead follows the combined intervals: yes or no only where every framework's says so.
    above = [not pd.isna(c["low"]) and c["low"] > 1 for c in combined.values()]
    below = [not pd.isna(c["high"]) and c["high"] < 1 for c in combined.values()]
    lead = leads[0] if all(above) else leads[1] if all(below) else leads[2]
    if all(pd.isna(c["low"]) for c in combined.values()):
        lead = "Not settled"  # one repeat a side: no interval, so no effect can be ruled in or out
    ans.parts = [(f"{lead}: {axis.replace('_', ' ')} {lo} → {hi}, {what} ", None)]
    for i, fw in enumerate(fws):
        rows = d[(d["framework"] == fw) & (d[axis] == hi)]
        ans.intervals.append({"what": f"{framework_label(fw)} {axis.replace('_', ' ')} {lo} → {hi}", **combined[fw],
                              "points": 2 * len(rows), "answer": (axis, fw) if (lo, hi) == PLANNED[axis] else None})
        lo_r, hi_r = rows.loc[rows["estimate"].idxmin()], rows.loc[rows["estimate"].idxmax()]
        hrefs = ["#" + row_anchor(key, exp, *(r[k] for k in _effect_index(axis))) for r in (lo_r, hi_r)]
        # Each framework's own verdict, from its own interval: the lead speaks for all of them.
        word = "" if pd.isna(combined[fw]["low"]) else f" {yes}" if above[i] else f" {no}" if below[i] \
            else " no clear effect"
        ans.parts += [(("; " if i else "") + f"{framework_label(fw)}{word} ", None),
                      (f"{combined[fw]['estimate']:.2f}×", f"#{key}"),
                      *_detail(combined[fw], lo_r["estimate"], hi_r["estimate"], hrefs, len(rows),
                               either=not (above[i] or below[i]))]
    ans.parts += [("; clearly " + yes + " in ", None), (f"{verdicts[yes]} of {len(d)}", f"#{key}"), (". ", None)]
    return ans


def _combined(rows: pd.DataFrame, col: str) -> dict:
    """{estimate, low, high}: the geometric mean of `col` over the rows (configurations) with its
    95% interval (stats.over_configurations)."""
    est, lo, hi = over_configurations(rows[[col, "low", "high", "dof"]].itertuples(index=False, name=None))
    return {"estimate": est, "low": lo, "high": hi}


def _detail(c: dict, low: float, high: float, hrefs: list, n: int, either: bool = False) -> list:
    """' (95% CI 1.55–1.78; 8 configurations: 1.31×–1.92×)': the interval of a geometric mean over
    configurations (or why there is none) and the configurations' range, each end linked to its row."""
    ci = "1 repeat: no interval" if pd.isna(c["low"]) else \
        f"95% CI {c['low']:.2f}–{c['high']:.2f}" + (", which allows either" if either else "")
    if n < 2:
        return [(f" ({ci})", None)]
    return [(f" ({ci}; {n} configurations: ", None), (f"{low:.2f}×", hrefs[0]), ("–", None),
            (f"{high:.2f}×", hrefs[1]), (")", None)]


def _effect_index(axis: str) -> list:
    """The row keys of the loader-worker and batch-size tables (tables.axes)."""
    return ["model", "framework", "devices", "batch_size"] if axis == "workers" else \
        ["model", "framework", "devices", "workers"]


# -- where a step's time goes ---------------------------------------------------------------

def step_answer(points: pd.DataFrame, exp, runs: pd.DataFrame | None = None) -> Answer:
    """Per framework the largest phase of a step, and the loader's wait (median shares).
    `runs`: the experiment's runs, to say why GPU runs have no phases."""
    ans = Answer("breakdown")
    p = points[(points["experiment"] == exp) & (points["n_ok"] > 0) & (points["step_s_mean"] > 0)]
    p = p.dropna(subset=[f"step_{ph}_mean" for ph in PHASE_COLUMNS])
    if p.empty:
        gpu = runs is not None and len(runs) and "device_type" in runs and \
            (runs.loc[runs["experiment"] == exp, "device_type"] == "cuda").any()
        why = (" A GPU run times its phases only with --breakdown on, which synchronises the GPU at "
               "every phase edge (without it only each epoch's edges are synchronised)."
               if gpu else "")
        ans.parts = [("Not measured: no ok run recorded its phases." + why, "#breakdown")]
        return ans
    for i, fw in enumerate(f for f in FRAMEWORK_ORDER if f in set(p["framework"])):
        g = p[p["framework"] == fw]
        share = {ph: (g[f"step_{ph}_mean"] / g["step_s_mean"]).median() for ph in PHASE_COLUMNS}
        top = max(share, key=share.get)
        lead = _largest(PHASE_LABELS[top], [share[top]], "phase")
        ans.parts += [(("; " if i else "") + f"{framework_label(fw)}: {lead} (", None),
                      (f"{100 * share[top]:.0f}%", "#breakdown"), ("), loader wait ", None),
                      (f"{100 * share['load_wait_s']:.0f}%", "#breakdown")]
    ans.parts.append((" (median shares of a step).", None))
    return ans


# -- what hangs, and why --------------------------------------------------------------------

def hang_answer(failures: list, n_runs: int) -> Answer:
    """What hung or failed and why (analysis.report.deadlocks.hang_parts)."""
    return Answer("deadlocks", deadlocks.hang_parts(failures, n_runs))


# -- do both learn the same ----------------------------------------------------------------

def accuracy_answer(runs: pd.DataFrame) -> Answer:
    """Accuracy from the fixed-schedule runs (converged? the frameworks' difference with its
    interval), else the timing runs' learning check."""
    ans = Answer("accuracy")
    ok = performance_runs(runs)
    ok = ok[(ok["status"] == "ok") & ok["final_val_acc"].notna()] if len(ok) else ok
    fixed = ok[(ok.get("until", pd.Series("epochs", index=ok.index)).fillna("epochs") != "precise")
               & (ok.get("harness", pd.Series("fair", index=ok.index)).fillna("fair") != "study")]
    if not fixed.empty:
        ans.parts = _converged_parts(fixed)
    elif "learned" in ok and ok["learned"].map(truthy).notna().any():
        learned = ok["learned"].map(truthy)
        n_learned = int(learned.map(lambda v: v is True).sum())
        ans.parts = [("Only timing runs here: ", None), (f"{n_learned} of {int(learned.notna().sum())}", "#accuracy"),
                     (" learned (above the majority class, falling loss); accuracy needs the convergence runs.", None)]
    else:
        ans.parts = [("Not measured: no ok run recorded a validation accuracy.", "#accuracy")]
    return ans


def _converged_parts(fixed: pd.DataFrame) -> list:
    conv = fixed["converged"].map(truthy) if "converged" in fixed else pd.Series(None, index=fixed.index)
    bad = int((conv == False).sum())  # noqa: E712
    if bad:
        base = pd.to_numeric(fixed["baseline_val_acc"], errors="coerce").median()
        return [("Not yet known: ", None), (f"{bad} of {len(fixed)}", "#accuracy"),
                (f" runs end at or below the features-only baseline ({fmt_pct(base)}); train longer.", None)]
    parts = [("all ", None), (f"{len(fixed)}", "#accuracy"), (" runs beat the features-only baseline", None)]
    # one clause per pair (each framework against the reference)
    cmps = [(pair, framework_comparison(fixed, "final_val_acc", kind="diff", pair=pair))
            for pair in framework_pairs(fixed)]
    cmps = [(pair, cmp) for pair, cmp in cmps if not cmp.empty]
    learn = "Both learn" if len(cmps) <= 1 else "All learn"
    if not cmps:
        return [(f"{learn}: ", None), *parts, (".", None)]
    mids = [middle(cmp, "estimate") for _, cmp in cmps]
    clear = [int((cmp["verdict"] != NO_CLEAR).sum()) for _, cmp in cmps]
    lead = "Not quite" if any(clear) else learn if _no_interval(mids) else "Yes"
    out = [(f"{lead}: ", None), *parts]
    for (pair, cmp), r, n in zip(cmps, mids, clear):
        diff = f"{100 * r['estimate']:+.1f} pts".replace("-", "−")
        out += [(f"; final accuracy {' − '.join(map(framework_label, pair))} ", None), (diff, "#accuracy"),
                (f"{_ci(r, 1, 100, ' pts')} at the median configuration{_no_interval([r])}; "
                 f"a clear difference in {n} of {len(cmp)}", None)]
    return out + [(".", None)]


# -- caveats ------------------------------------------------------------------------------

def caveats(runs: pd.DataFrame, points: pd.DataFrame, scaling: pd.DataFrame, exp) -> list:
    """What limits the answers, as (text, href) parts of one line: repeats, CPU processes,
    oversubscribed points, a busy machine, runs stopped by a cap, speed-ups beyond ideal."""
    p = points[(points["experiment"] == exp) & (points["n_ok"] > 0)] if exp is not None else points.iloc[0:0]
    r = performance_runs(runs)
    items = []
    few = int((p["n_ok"] < 2).sum())
    if few:
        items.append((f"{few} of {len(p)} points have fewer than 2 ok repeats (no interval)", "#speed"))
    if len(r) and (r.get("device_type", pd.Series(dtype=object)) == "cpu").all():
        items.append(("CPU processes, not GPUs", "#environment"))
    over = int(p.get("oversubscribed", pd.Series(dtype=bool)).fillna(False).astype(bool).sum())
    if over:
        items.append((f"{over} of {len(p)} points oversubscribed (more processes than cores)", "#scaling"))
    busy = int((pd.to_numeric(r.get("cpu_busy_before"), errors="coerce") > BUSY_WARN_PERCENT).sum()) \
        if "cpu_busy_before" in r else 0
    if busy:
        items.append((f"{busy} of {len(r)} runs started on a busy machine (>{BUSY_WARN_PERCENT}% CPU)", "#runs"))
    capped = int(r["stopped_by_cap"].map(lambda v: truthy(v) is True).sum()) if "stopped_by_cap" in r else 0
    if capped:
        items.append((f"{capped} runs stopped by a cap before their time was precise", "#runs"))
    s = scaling[(scaling["experiment"] == exp) & (scaling["efficiency"] > SUPERLINEAR_WARN)] \
        if len(scaling) else scaling
    if len(s):
        items.append((f"{len(s)} speed-ups beyond ideal (a disturbed base run)", "#scaling"))
    return items


def loader_answer(loaders_data: pd.DataFrame) -> Answer:
    """Whether a framework's other loader (DGL's GraphBolt) is faster than its first, and whether
    it changes which framework is faster (analysis.variants.loaders)."""
    from analysis.variants.loaders import loader_answer_parts

    ans = Answer("loaders")
    ans.parts = loader_answer_parts(loaders_data, ans.intervals)
    return ans


def projection_answer(projection: dict | None, runs: pd.DataFrame, exp) -> Answer:
    """What more devices would give (analysis.projection.predict on the runs): the main experiment's median
    configuration's projected speed-up, where the host is oversubscribed and how the projection
    fared on the measured multi-device points. Its intervals are the model's, not a sweep's, so
    they stay out of the open answers (more repeats of the same points would not settle them)."""
    from analysis.projection import predict

    ans = Answer("projection")
    ok = runs[(runs["experiment"] == exp) & (runs["status"] == "ok")] if exp is not None and len(runs) else runs
    measured = sorted(int(d) for d in ok["devices"].dropna().unique()) if len(ok) else []
    ans.parts = predict.answer_parts(projection, exp, measured)
    return ans


def timing_only(perf: pd.DataFrame) -> pd.DataFrame:
    """The performance runs whose epochs the projection reads (the fair harness's)."""
    return speedup_gap.timing_runs(perf) if len(perf) else perf
