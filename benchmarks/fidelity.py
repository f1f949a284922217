"""The fidelity rows' arithmetic and record (benchmarks.measure, row 2): ratios of the runner's and
the references' epoch times as the report's first screen takes its ratios (a block fit with the
noise pooled over every cell), what each row measured, and the record the report's fairness table
reads (analysis/report/fidelity.py).
"""

from __future__ import annotations

import math
import statistics
import sys
import time

from benchmarks.measure_runs import LOADER_VARIANTS, Settings
from runners.records import envinfo


def block_ratio(runs: dict, model: str, weights: dict) -> tuple:
    """(estimate, low, high, dof) of the product of epoch-time ratios {(fw, variant): power}
    (runner/reference: {(fw, "probes-on"): 1, (fw, "reference"): -1}) at `model`, as the report's
    first screen takes its ratios: log epoch time fitted as cell + block over every cell this run
    measured at the model (a block: one repeat, which ran every cell once, interleaved), its 95%
    interval on the noise left within the blocks, pooled over all cells
    (analysis.repeats.noise.fit_blocks). NaN bounds where the fit leaves no degrees of freedom."""
    from analysis.repeats.noise import fit_blocks

    cells = {(fw, v): ([math.log(r["epoch_s"]) for r in recs], [str(i) for i in range(len(recs))])
             for (fw, m, v), recs in runs.items() if m == model and recs}
    fit = fit_blocks(cells)
    got = fit.ratio(weights) if fit is not None else None
    if got is None:  # one repeat: the combination of the cells' means, no interval
        est = math.exp(sum(w * statistics.mean(cells[c][0]) for c, w in weights.items()))
        return est, float("nan"), float("nan"), 0
    return got


def of(name: str, model: str, **more) -> dict:
    """What a fidelity row measured, for the report (fidelity_record): the framework and its loader
    (a TIMED name: a framework, or a framework's other loader), the model, and `against` (a second
    reference of the framework's) or `over` and `estimate` (the gap's other framework, and its ratio
    as measured: the row's value is folded to >= 1 for the two-sided verdict)."""
    framework, loader = LOADER_VARIANTS.get(name, (name, None))
    return {"framework": framework, "loader": loader, "model": model, **more}


# The fidelity rows of the last measurement, with where and how they were measured, for the report's
# fairness table (analysis.report.fidelity reads this file under results/benchmarks,
# else the project's own record, benchmarks/fidelity.json).
FIDELITY_FILE = "fidelity.json"


def fidelity_record(rows: list, raw: dict, s: Settings) -> dict | None:
    """The fidelity rows that measured (runner/reference per framework, and the gap's ratio of
    ratios), with the commit, host, cores, settings and time of the measurement; None without any."""
    kept = [{k: r[k] for k in ("key", "measurement", "figure", "value", "estimate", "interval", "verdict", "target",
                                "framework", "loader", "model", "against", "over") if k in r}
            for r in rows if r["key"].split(":")[0] in ("fidelity", "fidelity_gap") and r["verdict"] != "ERROR"]
    if not kept:
        return None
    return {"measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **envinfo.git_state(),
            "host": raw["host"], "cpu_cores": raw["cpu_cores"], "cpu_model": envinfo.cpu_model(),
            "command": "python -m benchmarks.measure " + " ".join(sys.argv[1:]),
            "settings": {k: raw["settings"][k] for k in ("dataset", "devices", "batch_size", "fanouts", "workers",
                                                           "epochs", "repeats", "models", "timed")},
            **{k: raw[k] for k in ("resumed", "settle") if k in raw}, "rows": kept}
