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
SOURCES = (REPO / "results" / "benchmarks" / "fidelity.json", REPO / "benchmarks" / "fidelity.json")
COMMAND = "python -m benchmarks.measure --dataset small --repeats 10 --only fidelity"
SETTING = "runner / the framework's example loop (epoch time, 95% CI)"
GAP_SETTING = "gap over {reference}: runner's / the example loops'"
MEASURED = "fidelity measured"


def read(sources=SOURCES) -> tuple:
    """(record, path) of the first readable fidelity record; (None, None) without one."""
    for path in sources:
        try:
            return json.loads(Path(path).read_text()), Path(path)
        except (OSError, ValueError):
            continue
    return None, None


def _figure(r: dict) -> str:
    lo, hi = (r.get("interval") or [None, None])[:2]
    ci = f" ({lo:.3f}–{hi:.3f})" if lo is not None and hi is not None else ""
    return f"{r['value']:.3f}{ci} {r['verdict']}" if not r.get("over") else f"{_gap(r):.3f}{ci} {r['verdict']}"


def _gap(r: dict) -> float:
    """The gap row's estimate as measured (its `value` is folded to >= 1 for the verdict); the
    shown figure's first number."""
    return float(str(r["figure"]).split()[0])


def _where(record: dict, path: Path) -> str:
    s = record.get("settings") or {}
    commit = (record.get("git_commit") or "?")[:7]
    own = "this checkout's last measurement" if path.parent.name == "benchmarks" and path.parent.parent.name == "results" \
        else "the project's record"
    return (f"{record.get('measured_at', '?')}, commit {commit}, {record.get('host', '?')} "
            f"({record.get('cpu_cores', '?')} cores), {s.get('dataset')} graph, {s.get('devices')} processes, "
            f"batch {s.get('batch_size')}, {s.get('repeats')} interleaved repeats: {own} ({path.name} under "
            f"{path.parent.relative_to(REPO) if path.is_relative_to(REPO) else path.parent}); rerun: {COMMAND}")


def fidelity_rows(frameworks: list, sources=SOURCES) -> list:
    """Fairness-table rows ({"setting", <framework label>: text}) for `frameworks` (names, the
    table's columns): runner/reference per model and loader, the gap's ratio of ratios, and where
    it was measured; one row naming the command where no record is found."""
    record, path = read(sources)
    labels = {f: framework_label(f) for f in frameworks}
    if record is None:
        return [{"setting": SETTING, **{lab: f"not measured: {COMMAND}" for lab in labels.values()}}]
    rows = record.get("rows") or []
    own, gap = {}, {}
    for r in rows:
        fw = r.get("framework")
        if fw not in labels:
            continue
        what = model_label(r.get("model", ""))
        if r.get("loader"):
            what += f" with its {r['loader']} loader"
        if r.get("against"):
            what += f", against {r['against']}"
        (gap if r.get("over") else own).setdefault(fw, []).append(f"{what}: {_figure(r)}")
    reference = registry.REFERENCE_FRAMEWORK
    return [{"setting": SETTING, **{labels[f]: "; ".join(own.get(f, [])) or "—" for f in frameworks}},
            {"setting": GAP_SETTING.format(reference=framework_label(reference)),
             **{labels[f]: "; ".join(gap.get(f, [])) or "—" for f in frameworks}},
            {"setting": MEASURED, **{lab: _where(record, path) for lab in labels.values()}}]
