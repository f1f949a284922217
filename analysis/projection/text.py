"""The projection in words: its tables as text (python -m analysis.projection), the out-of-sample
check's verdict, and on the report's page the first-screen answer, the section's tables and
what the projection rests on (analysis.projection.predict makes the frames these read)."""

from __future__ import annotations

import math

import pandas as pd

from analysis.display import frame_table, row_anchor
from analysis.projection.inputs import CONFIG


def _ms(v) -> str:
    return "—" if v is None or pd.isna(v) else f"{1e3 * v:.1f}"


def _who(r, common: str = "", labels: bool = False) -> str:
    """'pyg sage b1024 w0' ('PyG GraphSAGE b1024 w0' with `labels`), with what sets its experiment
    apart from the `common` one."""
    from analysis import framework_label, model_label

    mine = [p for p in str(r["experiment"]).split(" · ") if p not in common.split(" · ")]
    fw, model = (framework_label(r["framework"]), model_label(r["model"])) if labels else (r["framework"], r["model"])
    return f"{fw} {model} b{r['batch_size']} w{r['workers']}" + (f" ({', '.join(mine)})" if mine else "")


def _common(*frames) -> str:
    """The experiment most rows belong to: the others are named by how they differ from it."""
    exps = pd.concat([f["experiment"] for f in frames if len(f)]) if any(len(f) for f in frames) else pd.Series()
    return str(exps.mode().iloc[0]) if len(exps) else ""


def _interval(r) -> str:
    return "[" + _ms(r["low_s"]) + ", " + _ms(r["high_s"]) + "]"


def _projection_lines(res: dict, common: str) -> list:
    """The projection table as text, then where each configuration stops and the all-reduce's source."""
    p = res["projection"]
    lines = ["Projection (slowest rank's steady epoch, ms; interval 2.5-97.5%; "
             "! past a stop: c = CPU oversubscribed, m = host memory)",
             f"{'configuration':<46}{'N':>4}{'predicted':>11}{'interval':>21}{'measured':>10}{'speed-up':>10}"
             f"{'steps':>6}{'local':>9}{'wait':>8}{'allred':>8}{'outside':>9}  stop"]
    for r in p.to_dict("records"):
        stop = ("c" if r["beyond_cpu"] else "") + ("m" if r["beyond_memory"] else "")
        lines.append(f"{_who(r, common):<46}{r['devices']:>4}{_ms(r['predicted_s']):>11}"
                     f"{_interval(r):>21}{_ms(r['measured_s']):>10}"
                     f"{r['speedup']:>9.2f}x{r['steps']:>6}{_ms(r['local_s']):>9}{_ms(r['wait_s']):>8}"
                     f"{_ms(r['allreduce_s']):>8}{_ms(r['outside_s']):>9}  {('!' + stop) if stop else ''}")
    if len(p):
        first = p.drop_duplicates(subset=list(CONFIG))
        lines.append("Where it stops: " + "; ".join(
            f"{_who(r, common)}: oversubscribed from N={r['oversubscribed_from']}, host memory from "
            f"N={r.get('memory_measured_from', math.nan):.0f} (measured peaks), "
            f"{r.get('memory_modelled_from', math.nan):.0f} (runners' memory model)"
            for r in first.to_dict("records")))
        lines.append(f"All-reduce: {p['allreduce_source'].iloc[0]}"
                     + (f" ({res['collectives']['source']})" if res.get("collectives") else ""))
    return lines


def _validation_lines(v: pd.DataFrame, common: str) -> list:
    """The validation table as text, then its verdict."""
    lines = ["Validation: each multi-device point predicted without its own multi-device runs "
             "(its 1-device runs, the all-reduce model, the other configurations' 1->2 contention); "
             "ideal: T(1) / N, the naive prediction",
             f"{'configuration':<46}{'N':>4}{'runs':>5}{'measured':>10}{'predicted':>11}{'interval':>21}"
             f"{'error':>8}  inside{'ideal':>9}{'error':>8}"]
    for r in v.to_dict("records"):
        if r.get("reason"):
            lines.append(f"{_who(r, common):<46}{r['devices']:>4}  not predicted: {r['reason']}")
            continue
        lines.append(f"{_who(r, common):<46}{r['devices']:>4}{int(r['n_runs']):>5}{_ms(r['measured_s']):>10}"
                     f"{_ms(r['predicted_s']):>11}{_interval(r):>21}"
                     f"{100 * r['error']:>+7.0f}%  {'yes' if r['inside'] else 'NO ':<6}{_ms(r['ideal_s']):>9}"
                     f"{100 * r['ideal_error']:>+7.0f}%")
    return [*lines, verdict(v, common)]


def _terms_lines(t: pd.DataFrame | None, common: str) -> list:
    """In sample, what the model makes of the 2-device step beside what was measured (none without terms)."""
    if t is None or not len(t):
        return []
    lines = ["", "In sample, per step at 2 devices (ms): the backward beyond its compute as measured, beside the "
             "model's waiting and all-reduce; the contention factors measured 1->2",
             f"{'configuration':<46}{'measured':>9}{'wait':>7}{'allred':>8}{'  r_load':>8}{'r_fwd':>7}"
             f"{'r_opt':>7}{'r_out':>7}"]
    for r in t.to_dict("records"):
        lines.append(f"{_who(r, common):<46}{_ms(r['residual_step_s']):>9}{_ms(r['wait_step_s']):>7}"
                     f"{_ms(r['allreduce_step_s']):>8}{r['r_load_wait_s']:>8.2f}{r['r_forward_s']:>7.2f}"
                     f"{r['r_optimizer_s']:>7.2f}{r['r_outside_s']:>7.2f}")
    return lines


def _usl_lines(u: pd.DataFrame, common: str) -> list:
    """Each USL fit in a line, or that none was fitted."""
    if not len(u):
        return ["USL: not fitted (no configuration has 3 or more device counts measured)"]
    return [f"USL {_who(r, common)} ({r['device_counts']}): sigma {r['sigma']:.3f}, kappa {r['kappa']:.4f}"
            + (f", retrograde past N = {r['peak_devices']:.1f}" if r["retrograde"] else "")
            for r in u.to_dict("records")]


def _beyond_lines(res: dict, common: str) -> list:
    """The measured points past the fitted device counts (predict.beyond_fit), and how many the
    projection's intervals held; or where such points come from when there are none."""
    from analysis.projection.inputs import FIT_DEVICES, beyond_fit

    past = beyond_fit(res)
    fitted = " and ".join(map(str, FIT_DEVICES))
    if past.empty:
        return [f"Past the fitted {fitted} devices: no measured point; runs at more processes (a machine with "
                "the cores for 4 and 8) put them here."]
    lines = [f"Past the fitted {fitted} devices: each measured point as projected from the {fitted}-device runs alone",
             f"{'configuration':<46}{'N':>4}{'measured':>10}{'predicted':>11}{'interval':>21}{'error':>8}  inside"]
    for r in past.to_dict("records"):
        lines.append(f"{_who(r, common):<46}{r['devices']:>4}{_ms(r['measured_s']):>10}{_ms(r['predicted_s']):>11}"
                     f"{_interval(r):>21}{100 * r['error']:>+7.0f}%  {'yes' if r['inside'] else 'NO'}")
    lines.append(f"{int(past['inside'].sum())} of {len(past)} measured points past {max(FIT_DEVICES)} devices inside "
                 f"their intervals; median absolute error {100 * past['error'].abs().median():.0f}%.")
    return lines


def format_tables(res: dict) -> str:
    """The projection and validation tables as text, the check past the fitted device counts, where
    it stops, the USL and the assumptions."""
    common = _common(res["projection"], res["validation"])
    lines = [f"Experiment: {common} (others named beside their rows)", *_projection_lines(res, common), "",
             *_validation_lines(res["validation"], common), "", *_beyond_lines(res, common),
             *_terms_lines(res.get("terms"), common), "", *_usl_lines(res["usl"], common)]
    lines += [f"Note: {note}." for note in res.get("notes") or []]
    lines.append(f"Intervals: {interval_text(res.get('calibration'))}; pooled launch noise SD "
                 f"{100 * res['noise_sd']:.1f}% of one launch's epoch time.")
    lines.append("Assumptions: " + "; ".join(res["assumptions"]) + ".")
    return "\n".join(lines)


# The out-of-sample check fails where fewer points than about a 95% interval's rate fall inside
# (with a dozen points, 2 misses are chance, 3 are not) or the typical error is too large to plan on.
FAIL_INSIDE = 0.8
FAIL_ERROR = 0.15


def check(v: pd.DataFrame) -> dict | None:
    """The validation rows that were predicted, summed up: n, inside, median_error (absolute,
    relative) and fails (FAIL_INSIDE, FAIL_ERROR); None where no point was predicted."""
    ok = v[v["reason"].isna()] if len(v) and "reason" in v else v
    if ok.empty:
        return None
    n, inside = len(ok), int(ok["inside"].astype(bool).sum())
    med = float(ok["error"].abs().median())
    return {"rows": ok, "n": n, "inside": inside, "median_error": med,
            "fails": inside < FAIL_INSIDE * n or med > FAIL_ERROR}


def verdict(v: pd.DataFrame, common: str = "") -> str:
    """The validation in one sentence; it says so when the model fails."""
    c = check(v)
    if c is None:
        return "No multi-device point could be predicted out of sample."
    ok, inside, med = c["rows"], c["inside"], c["median_error"]
    missed = ok[~ok["inside"].astype(bool)]
    text = (f"{inside} of {len(ok)} measured points inside their interval; median absolute error "
            f"{100 * med:.0f}%" + (f" (ideal scaling T(1)/N: {100 * ok['ideal_error'].abs().median():.0f}%)"
                                   if "ideal_error" in ok else "") + ".")
    if c["fails"]:
        text += " The model FAILS this check: " + (", ".join(
            f"{_who(r, common)} N={r['devices']} ({100 * r['error']:+.0f}%)" for r in missed.to_dict("records"))
            if len(missed) else f"a median error above {100 * FAIL_ERROR:.0f}%") + "."
    elif len(missed):
        text += " Outside: " + ", ".join(f"{_who(r, common)} N={r['devices']}" for r in missed.to_dict("records")) + "."
    return text


# -- on the report's page --------------------------------------------------------------------------

REPORT_DEVICES = (4, 8)  # the device counts the report projects to (besides those measured)
VALIDATION_ANCHOR = "#table-projection_validation"


def projection_anchor(r) -> str:
    """The id of a projection table row, so the first-screen sentence links to the row it quotes."""
    return row_anchor("projection", r["experiment"], r["framework"], r["model"], r["batch_size"], r["workers"],
                      r["devices"])


def of_experiment(res: dict | None, exp) -> tuple:
    """(projection, validation) rows of one experiment: the timing configurations the answers speak for."""
    out = []
    for name in ("projection", "validation"):
        df = (res or {}).get(name, pd.DataFrame())
        out.append(df[df["experiment"] == exp] if len(df) and exp is not None else df.iloc[0:0])
    return tuple(out)


def _oversubscribed(p: pd.DataFrame) -> str:
    """'a 2-core host is oversubscribed from 3 ranks (2 with a loader worker)', or '' where no
    projected count reaches it (or the cores are unknown)."""
    if p.empty:
        return ""
    first = p.drop_duplicates(subset=list(CONFIG)).dropna(subset=["oversubscribed_from"])
    if first.empty or not p["beyond_cpu"].astype(bool).any():
        return ""
    by = first.groupby("workers")["oversubscribed_from"].min().sort_index()
    cores = set(first["cpu_cores"].dropna().astype(int)) if "cpu_cores" in first else set()
    host = f"a {cores.pop()}-core host" if len(cores) == 1 else "the host"
    f0 = by.iloc[0]
    more = [f"{int(f)} with {'a' if w == 1 else w} loader worker{'s' if w != 1 else ''}"
            for w, f in list(by.items())[1:]]
    return f"{host} is oversubscribed from {int(f0)} ranks" + (f" ({', '.join(more)})" if more else "")


def _checked_counts(c: dict) -> str:
    """'2/4': the device counts the out-of-sample check predicted."""
    return "/".join(map(str, sorted(c["rows"]["devices"].unique())))


def _doubt_parts(c: dict | None, v: pd.DataFrame, cal: dict | None) -> list:
    """What the answer opens with where the check could not run, or too few points calibrate the
    intervals (nothing where it passed; a failed check is failed_parts)."""
    if c is None:
        reason = v["reason"].dropna().iloc[0] if len(v) and "reason" in v and v["reason"].notna().any() \
            else "no multi-device point of its own"
        return [(f"Unchecked ({reason}): ", None)]
    if cal is not None and not cal["calibrated"]:
        return [(f"Uncalibrated ({cal['n']} held-out point{'s' if cal['n'] != 1 else ''}; "
                 f"{cal['needed']} calibrate a {100 * cal['level']:.0f} % interval): ", None)]
    return []


MISSES_SAID = 2  # the largest misses a failed check names


def failed_parts(c: dict, top: int, common: str = "") -> list:
    """A failed check, and no number past the measured device counts: how many points its intervals
    held, the median error and the largest misses (the configurations the model gets most wrong)."""
    rows = c["rows"].assign(miss=c["rows"]["error"].abs()).sort_values("miss", ascending=False, kind="stable")
    worst = ", ".join(f"{_who(r, common, labels=True)} N={r['devices']} {100 * r['error']:+.0f} %"
                      for r in rows.head(MISSES_SAID).to_dict("records"))
    return [("Not reliable: ", None), (f"{c['inside']} of {c['n']}", VALIDATION_ANCHOR),
            (f" measured {_checked_counts(c)}-device points inside their intervals, median error "
             f"{100 * c['median_error']:.0f} % (largest misses: {worst}); no projection past {top} "
             f"device{'s' if top != 1 else ''}.", None)]


def _speedup_parts(p: pd.DataFrame, n: int, level: str = "95%") -> list:
    """At n devices, per framework its median configuration's speed-up (linked to its row) and interval."""
    from analysis import FRAMEWORK_ORDER, framework_label
    from analysis.stats import middle

    fws = [f for f in FRAMEWORK_ORDER if f in set(p["framework"])] + sorted(set(p["framework"]) - set(FRAMEWORK_ORDER))
    parts = [(f"{n} devices: ", None)]
    for i, fw in enumerate(f for f in fws if ((p["framework"] == f) & (p["devices"] == n)).any()):
        r = middle(p[(p["framework"] == fw) & (p["devices"] == n)], "speedup")
        parts += [(("" if i == 0 else ", ") + f"{framework_label(fw)} ", None),
                  (f"{r['speedup']:.1f}×", "#" + projection_anchor(r))]
        if pd.notna(r.get("speedup_low")):
            parts.append((f" ({level + ' ' if i == 0 else ''}{r['speedup_low']:.1f}–{r['speedup_high']:.1f})", None))
    return parts


def answer_parts(res: dict | None, exp, measured: list) -> list:
    """The first-screen answer as (text, href) parts: per framework the median configuration's
    projected speed-up over 1 device, with its interval, at the first of REPORT_DEVICES beyond
    those measured, where the host is oversubscribed, and the out-of-sample check; it says
    plainly when that check fails. `measured`: the experiment's ok timing device counts."""
    p, v = of_experiment(res, exp)
    if p.empty:
        if not measured:
            return [("Not measured: no ok timing run to project from.", "#projection")]
        said = ", ".join(map(str, sorted(measured)))
        return [(f"Not measured: ok timing runs at {said} device{'s' if said != '1' else ''} only; a projection "
                 "needs runs at 1 and 2 devices.", "#projection")]
    top = max(measured) if measured else 1
    ns = [n for n in sorted(p["devices"].unique()) if n > top] or [int(p["devices"].max())]
    c = check(v)
    if c is not None and c["fails"]:
        return failed_parts(c, top, _common(p, v))
    cal = (res or {}).get("calibration")
    level = f"{100 * cal['level']:.0f}%" if cal and cal["calibrated"] else "95%"
    # the first count beyond those measured only: the sentence stays short, the table has the rest
    parts = [*_doubt_parts(c, v, cal), *_speedup_parts(p, ns[0], level), (" over 1 (median configuration)", None)]
    over = _oversubscribed(p)
    if over:
        parts.append((f"; {over}", None))
    if c is not None and not c["fails"]:
        parts += [(f"; checked on the measured {_checked_counts(c)}-device points: ", None),
                  (f"{c['inside']} of {c['n']}", VALIDATION_ANCHOR),
                  (f" inside their intervals, median error {100 * c['median_error']:.0f} %", None)]
    parts.append((".", None))
    return parts


def _ms_text(v) -> str | None:
    from analysis.formatting import fmt_duration

    return None if v is None or pd.isna(v) else fmt_duration(float(v))


def _stop_text(r) -> str:
    stops = [w for w, hit in (("CPU oversubscribed", r.get("beyond_cpu")), ("host memory", r.get("beyond_memory")))
             if hit is True or hit == 1]
    return ", ".join(stops) or ""


def projection_frame(p: pd.DataFrame) -> pd.DataFrame:
    """The projection rows with readable columns, times in ms/s."""
    from analysis import framework_label, model_label

    if p.empty:
        return pd.DataFrame()
    rows = []
    for r in p.to_dict("records"):
        rows.append({"experiment": r["experiment"], "framework": framework_label(r["framework"]),
                     "model": model_label(r["model"]), "batch": r["batch_size"], "workers": r["workers"],
                     "devices": r["devices"], "epoch time (model)": _ms_text(r["predicted_s"]),
                     "interval": f"{_ms_text(r['low_s'])} – {_ms_text(r['high_s'])}",
                     "measured": _ms_text(r["measured_s"]), "speed-up": f"{r['speedup']:.2f}×",
                     "speed-up interval": (f"{r['speedup_low']:.2f}–{r['speedup_high']:.2f}×"
                                      if r["devices"] != 1 and pd.notna(r.get("speedup_low")) else None),
                     "steps": r["steps"], "local": _ms_text(r["local_s"]), "waiting": _ms_text(r["wait_s"]),
                     "all-reduce": _ms_text(r["allreduce_s"]), "outside steps": _ms_text(r["outside_s"]),
                     "contention from": r["contention_from"], "past": _stop_text(r)})
    return pd.DataFrame(rows)


MISS_PARTS = (("miss_loader_s", "loader"), ("miss_steps_s", "rest of the steps"), ("miss_outside_s", "outside"))


def _miss_text(r) -> str | None:
    """'loader +12 ms, rest of the steps -3 ms, outside +40 ms': predicted minus measured per part
    of the epoch, largest first (what the model misses, where)."""
    parts = [(r.get(k), name) for k, name in MISS_PARTS if r.get(k) is not None and pd.notna(r.get(k))]
    if not parts:
        return None
    parts.sort(key=lambda x: -abs(x[0]))
    return ", ".join(f"{name} {1e3 * v:+.0f} ms" for v, name in parts)


def validation_frame(v: pd.DataFrame) -> pd.DataFrame:
    """The validation rows with readable columns: measured beside predicted without its own runs."""
    from analysis import framework_label, model_label

    if v.empty:
        return pd.DataFrame()
    rows = []
    for r in v.to_dict("records"):
        done = pd.isna(r.get("reason"))
        rows.append({"experiment": r["experiment"], "framework": framework_label(r["framework"]),
                     "model": model_label(r["model"]), "batch": r["batch_size"], "workers": r["workers"],
                     "devices": r["devices"], "runs": r.get("n_runs") if done else None,
                     "measured": _ms_text(r.get("measured_s")), "predicted": _ms_text(r.get("predicted_s")),
                     "interval": f"{_ms_text(r['low_s'])} – {_ms_text(r['high_s'])}" if done else None,
                     "error": f"{100 * r['error']:+.0f}%" if done else None,
                     "inside": ("yes" if r["inside"] else "NO") if done else None,
                     "ideal T(1)/N error": f"{100 * r['ideal_error']:+.0f}%" if done else None,
                     "error by part": _miss_text(r) if done else None,
                     "from": r.get("base") if done else None,
                     "not predicted": None if done else r["reason"]})
    return pd.DataFrame(rows)


def interval_text(cal: dict | None) -> str:
    """How the projection's intervals were made, for the captions and the page's notes."""
    boot = "the 95% bootstrap over runs, contention pool, all-reduce fit and launch noise"
    if not cal:
        return boot
    if not cal["calibrated"]:
        return (f"{boot}; not calibrated on the model's own error: {cal['n']} held-out points, "
                f"{cal['needed']} calibrate a {100 * cal['level']:.0f}% interval")
    return (f"{boot}, widened to the model's own error where that is larger: a split-conformal "
            f"{100 * cal['level']:.0f}% quantile of the {cal['n']} held-out points' absolute log errors "
            f"({100 * (math.exp(cal['q']) - 1):.0f}%), times N - 1 at N devices")


def report_tables(res: dict | None) -> dict:
    """name -> TableSet: the projection (every experiment) and its out-of-sample validation."""
    res = res or {}
    p, v = res.get("projection", pd.DataFrame()), res.get("validation", pd.DataFrame())
    n = ", ".join(map(str, REPORT_DEVICES))
    proj = frame_table(
        projection_frame(p), "projection", "Projected epoch time and speed-up at more devices",
        f"Per timing configuration and device count (measured ones and {n}): the slowest rank's steady epoch "
        "time as the model gives it (analysis/projection/predict.py: the 1-device runs' phases per step, slowed per rank as "
        "the second rank slowed them, waiting for the slowest rank, the ring all-reduce), its interval "
        f"({interval_text(res.get('calibration'))}), the measured mean where there "
        "is one, the speed-up over 1 device with its paired interval, and the model's parts per epoch. 'past': "
        "a count beyond which the model no longer holds (more processes than cores, host memory).",
        empty_text="Nothing projected: no configuration has ok timing runs at 1 device with a 1 -> 2 contention "
                   "measured anywhere.", group_col="experiment",
        row_id=[projection_anchor(r) for r in p.to_dict("records")] if len(p) else None)
    proj.data = p
    val = frame_table(
        validation_frame(v), "projection_validation", "The projection checked on the measured points",
        "Every measured multi-device point predicted out of sample, without its own multi-device runs (from "
        "its 1-device runs, the all-reduce model and the other configurations' 1 -> 2 contention), beside the "
        "measured mean; 'inside': the measured mean lies in its interval (the same kind as the projection's, "
        "widened by the other configurations' held-out errors only); 'error by part': predicted minus measured "
        "per epoch in the steps' loader part (wait and unpacking), the rest of the steps (compute, all-reduce "
        "and waiting) and the time outside the steps, largest first; the ideal T(1)/N is the naive "
        "prediction the model has to beat. " + verdict(v, _common(p, v)),
        empty_text="No multi-device point to check against.", group_col="experiment")
    val.data = v
    return {"projection": proj, "projection_validation": val}


def page_notes(res: dict | None, runs: pd.DataFrame, exp) -> dict:
    """What the section says besides the answer: `line` (nothing measured beyond the largest
    count on this host, where it is oversubscribed, where the all-reduce cost comes from) and
    `assumptions` (the model's, its interval's and its notes)."""
    res = res or {}
    p, _ = of_experiment(res, exp)
    ok = runs[(runs["experiment"] == exp) & (runs["status"] == "ok")] if exp is not None and len(runs) else runs
    top = int(ok["devices"].max()) if len(ok) else 0
    hosts = sorted({str(h) for h in ok.get("env_hostname", pd.Series(dtype=object)).dropna()})
    where = f"host {hosts[0]}" if len(hosts) == 1 else "this host" if not hosts else f"hosts {', '.join(hosts)}"
    coll = res.get("collectives")
    source = (f"all-reduce from the micro-benchmark {coll['source']}" if coll else
              "all-reduce from the 2-device runs (no micro-benchmark beside the aggregate)")
    # short: where the host is oversubscribed (and the model stops holding), the answer says
    line = (f"Projected: nothing beyond {top} device{'s' if top != 1 else ''} ran on {where}; {source}."
            if len(p) else "")
    sd = res.get("noise_sd")
    extra = [f"interval: {interval_text(res.get('calibration'))}; launch noise SD {100 * sd:.1f}% of an epoch"] \
        if sd is not None else []
    return {"line": line, "assumptions": [*res.get("assumptions", []), *extra, *(res.get("notes") or [])]}
