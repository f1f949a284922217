"""Text of numbers, intervals, statuses and configurations as the tables and findings show them.
"""

from __future__ import annotations

import math
from collections import Counter

import pandas as pd

from analysis import STATUS_SEVERITY, model_label


def fmt_num(v, ref=None) -> str:
    """Three significant-ish digits, the precision chosen from `ref` (default: v itself)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    r = abs(ref if ref is not None else v)
    if r >= 100:
        return f"{v:,.0f}"
    if r >= 10:
        return f"{v:.1f}"
    if r >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def fmt_si(v) -> str:
    """Large rates: 1.2k, 3.4M."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.3g}{unit}"
    return f"{v:.3g}"


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA


def fmt_count(v) -> str:
    """A count for people: exact below 10,000 ('9,876'), else k/M/G ('12.3k', '785M')."""
    if _missing(v):
        return "n/a"
    return f"{v:,.0f}" if abs(v) < 10_000 else fmt_si(v)


def fmt_bytes(v) -> str:
    """Bytes in binary units, three significant digits: 784737244 -> '748 MiB'."""
    if _missing(v):
        return "n/a"
    size, unit = float(v), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            break
        size /= 1024
    return f"{size:.0f} {unit}" if unit == "B" else f"{fmt_num(size)} {unit}"


def fmt_duration(s) -> str:
    """Seconds in a human unit: '41.2 ms', '1.50 s', '95.0 s', '4.2 min', '1.5 h'."""
    if _missing(s):
        return "n/a"
    if abs(s) < 1:
        return f"{fmt_num(1000 * s)} ms"
    if abs(s) < 120:
        return f"{fmt_num(s)} s"
    return f"{s / 60:.1f} min" if abs(s) < 7200 else f"{s / 3600:.1f} h"


def fmt_duration_pm(mean, halfwidth) -> str:
    """A duration and its interval in one unit, chosen by the mean: '412 ± 12.3 ms', '1.23 ± 0.04 s'."""
    if _missing(mean):
        return "n/a"
    if _missing(halfwidth):
        return fmt_duration(mean)
    if abs(mean) < 1:
        return f"{fmt_num(1000 * mean)} ± {fmt_num(1000 * halfwidth, ref=1000 * mean)} ms"
    if abs(mean) < 120:
        return f"{fmt_num(mean)} ± {fmt_num(halfwidth, ref=mean)} s"
    return f"{mean / 60:.1f} ± {halfwidth / 60:.1f} min"


def fmt_pct(v) -> str:
    """A share as a percentage with one decimal: 0.123 -> '12.3%'."""
    return "n/a" if v is None or pd.isna(v) else f"{100 * v:.1f}%"


def status_text(statuses: Counter) -> str:
    """'hang', 'hang ×2', 'hang ×2, crashed' (most severe first)."""
    order = sorted(statuses, key=lambda s: STATUS_SEVERITY.index(s) if s in STATUS_SEVERITY else -1)
    return ", ".join(s if statuses[s] == 1 else f"{s} ×{statuses[s]}" for s in order)


def worst_status(statuses) -> str:
    """The most severe status present ('ok' when none is known)."""
    present = [s for s in STATUS_SEVERITY if s in statuses]
    return present[0] if present else "ok"


def config_text(p) -> str:
    """'GraphSAGE, 2 devices, batch 512, 0 workers'."""
    return (f"{model_label(p['model'])}, {p['devices']} device{'s' if p['devices'] != 1 else ''}, "
            f"batch {p['batch_size']}, {p['workers']} worker{'s' if p['workers'] != 1 else ''}")


def interval_text(r, unit="×", scale=1.0, digits=2) -> str:
    """'1.32× [1.20, 1.45]' or '1.32× (no interval: 1 repeat)'."""
    est = f"{scale * r['estimate']:.{digits}f}{unit}"
    if pd.isna(r["low"]):
        return f"{est} (no interval: fewer than 2 repeats per framework)"
    return f"{est} [95% CI {scale * r['low']:.{digits}f}, {scale * r['high']:.{digits}f}]"
