"""The runner against the frameworks' own example loops, for the fairness table: the fidelity rows
of `python -m benchmarks.measure --only fidelity` (each framework's runner/reference epoch time, and
the gap the first screen states as the runner measures it over the same gap between the examples'
loops), from the last measurement in this checkout (results/benchmarks/fidelity.json) or else the
project's own record (benchmarks/fidelity.json), with where, when and how it was measured. A
report's ratios are only as fair as the loop that times both frameworks; these rows say how close
that loop is to what each framework's example would measure.
"""

from __future__ import annotations

import json
from pathlib import Path

from analysis import framework_label, model_label
from runners.adapters import registry

REPO = Path(__file__).resolve().parents[2]
# Where the rows come from, first found: this checkout's last measurement, then the project's record.
SOURCES = ((REPO / "results" / "benchmarks" / "fidelity.json", "this checkout's last measurement"),
           (REPO / "benchmarks" / "fidelity.json", "the project's record"))
# What settles it to within 3 % on a quiet 2-core machine: its speed moves in spells of several seconds, so each
# run samples about one spell, and only repeats narrow the interval (about 80 for a framework's row, 1.5 hours;
# --resume continues a measurement cut off, until its --repeats are done).
COMMAND = "python -m benchmarks.measure --only fidelity --timed pyg,dgl --repeats 80"
SETTING = "runner / the framework's example loop (epoch time, 95% CI)"
GAP_SETTING = "gap over {reference}: runner's / the example loops'"
MEASURED = "fidelity measured"


def read(sources=SOURCES) -> tuple:
    """(record, path, what it is) of the first readable fidelity record of `sources` ((path, what)
    pairs); (None, None, None) without one."""
    for path, what in sources:
        try:
            return json.loads(Path(path).read_text()), Path(path), what
        except (OSError, ValueError):
            continue
    return None, None, None


def _figure(r: dict) -> str:
    """'0.995 (0.918–1.077) UNSETTLED': the estimate as measured (a gap row's `value` is folded to
    >= 1 for its two-sided verdict), its interval and verdict."""
    lo, hi = (r.get("interval") or [None, None])[:2]
    ci = f" ({lo:.3f}–{hi:.3f})" if lo is not None and hi is not None else ""
    return f"{r.get('estimate', r['value']):.3f}{ci} {r['verdict']}"


def _where(record: dict, path: Path, what: str) -> str:
    """Where, when and how the record was measured, and the command that measures it afresh (its own,
    less `--resume`, which only continues the runs kept where it ran)."""
    s = record.get("settings") or {}
    commit = (record.get("git_commit") or "?")[:7]
    shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    return (f"{record.get('measured_at', '?')}, commit {commit}, {record.get('host', '?')} "
            f"({record.get('cpu_cores', '?')} cores), {s.get('dataset')} graph, {s.get('devices')} processes, "
            f"batch {s.get('batch_size')}, {s.get('epochs')} epochs, {s.get('repeats')} interleaved repeats: {what} "
            f"({shown}); rerun: {(record.get('command') or COMMAND).replace(' --resume', '')}")


def fidelity_rows(frameworks: list, sources=SOURCES) -> list:
    """Fairness-table rows ({"setting", <framework label>: text}) for `frameworks` (names, the
    table's columns): runner/reference per model and loader, the gap's ratio of ratios, and where
    it was measured; one row naming the command where no record is found."""
    record, path, what = read(sources)
    labels = {f: framework_label(f) for f in frameworks}
    if record is None:
        return [{"setting": SETTING, **{lab: f"not measured: {COMMAND}" for lab in labels.values()}}]
    rows = record.get("rows") or []
    own, gap = {}, {}
    for r in rows:
        fw = r.get("framework")
        if fw not in labels:
            continue
        measured = model_label(r.get("model", ""))
        if r.get("loader"):
            measured += f" with its {r['loader']} loader"
        if r.get("against"):
            measured += f", against {r['against']}"
        (gap if r.get("over") else own).setdefault(fw, []).append(f"{measured}: {_figure(r)}")
    reference = registry.REFERENCE_FRAMEWORK
    return [{"setting": SETTING, **{labels[f]: "; ".join(own.get(f, [])) or "—" for f in frameworks}},
            {"setting": GAP_SETTING.format(reference=framework_label(reference)),
             **{labels[f]: "; ".join(gap.get(f, [])) or "—" for f in frameworks}},
            {"setting": MEASURED, **{lab: _where(record, path, what) for lab in labels.values()}}]
