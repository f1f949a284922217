"""The seed study's Table 2: our epoch times in its layout, and ours projected to its schedule
beside the published seconds.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis import FRAMEWORK_ORDER, GRID_KEYS, framework_label, model_label
from analysis.display import Cell, GridTable, TableSet, index_cells
from analysis.formatting import fmt_duration, fmt_num
from analysis.grouping import paper_order
from analysis.tables.grids import table2_grids

PAPER_CSV = Path(__file__).resolve().parent / "paper_table2.csv"
PAPER_EPOCHS = 50
PAPER_SETUP = "Reddit, 50 epochs, 1/2/4 NVIDIA T4 GPUs on a Google Cloud N1 machine"
PAPER_DATASET = "reddit"


def training_time_table(points: pd.DataFrame) -> TableSet:
    """Steady-state epoch time in the seed study's Table 2 layout."""
    data = points[["experiment", *GRID_KEYS, "n_runs", "n_ok", "statuses", "steady_epoch_time_s_mean",
                   "steady_epoch_time_s_ci95", "train_time_s_mean", "command"]] if not points.empty else points
    return TableSet(
        "table2", "Epoch time (seed study's Table 2 layout)",
        "Slowest rank's steady-state epoch time (one pass over the training split, after the warm-up "
        "epoch), mean ± 95% CI over repeats: the seed study's total training time divided into what one epoch "
        "costs, since timing runs stop once that is known. Batch size is per process. The faster framework of "
        "each pair is bold; a cell without any ok run shows its status instead.",
        data, table2_grids(points, "steady_epoch_time_s", fmt=fmt_duration, best="min"))


def load_paper(path: Path = PAPER_CSV) -> pd.DataFrame:
    """The seed study's published Table 2 (model, gpus, workers, batch_size, framework, seconds)."""
    return pd.read_csv(path)


PAPER_COLUMNS = ["experiment", "model", "devices", "workers", "batch_size", "framework", "paper_s",
                 "ours_s", "ours_ci95", "ours_status", "paper_per_epoch_s", "ours_per_epoch_s", "ours_epochs"]
PAPER_KEYS = ["model", "devices", "workers", "batch_size", "framework"]


def paper_comparison(points: pd.DataFrame, paper: pd.DataFrame) -> TableSet:
    """Our Table 2 on the seed study's dataset next to the published numbers."""
    ours = points[points["dataset"] == PAPER_DATASET]
    if ours.empty:
        return _published_only(paper)
    rows, grids = [], []
    paper = paper.rename(columns={"gpus": "devices", "seconds": "paper_s"})
    for exp, g in ours.groupby("experiment", sort=False):
        exp_rows = _paper_rows(exp, g, paper)
        rows += exp_rows
        grids.append(_paper_grid(exp, pd.DataFrame(exp_rows)))
    return TableSet(
        "paper_comparison", "Our Table 2 beside the seed study's",
        f"Seed study: {PAPER_SETUP} (published Table 2, seconds). Ours: the same layout from our "
        f"runs on {PAPER_DATASET}, projected to {PAPER_EPOCHS} epochs (warm-up epoch + {PAPER_EPOCHS - 1} × the "
        f"steady-state epoch); absolute times differ with hardware, so compare which framework is faster "
        f"(bold, per source) and the trends. The CSV also has per-epoch times.",
        pd.DataFrame(rows, columns=PAPER_COLUMNS), grids)


def _published_only(paper: pd.DataFrame) -> TableSet:
    """The seed study's Table 2 alone, while no run is on its dataset."""
    published = paper.rename(columns={"gpus": "devices"}).assign(
        experiment=f"Seed study, published: {PAPER_SETUP}", n_ok=1, n_runs=1, statuses="ok",
        worst_status="ok", command="", train_time_s_mean=paper["seconds"], train_time_s_ci95=float("nan"))
    return TableSet("paper_comparison", "The seed study's Table 2",
                    f"No runs on the seed study's dataset ({PAPER_DATASET}) yet: run the paper profile to put "
                    f"ours beside it. Its published numbers (seconds, faster framework bold):",
                    pd.DataFrame(columns=PAPER_COLUMNS), table2_grids(published, "train_time_s", best="min"))


def _paper_rows(exp: str, g: pd.DataFrame, paper: pd.DataFrame) -> list:
    """One experiment's grid points beside the published seconds (outer join: either may be missing)."""
    epochs = int(g["epochs"].max())
    merged = paper.merge(g, on=PAPER_KEYS, how="outer")
    exp_rows = []
    for r in merged.itertuples():
        ok = not pd.isna(r.n_ok) and r.n_ok > 0
        # Ours projected to the study's 50 epochs: the warm-up epoch plus 49 steady ones.
        projected = r.warmup_epoch_time_s_mean + (PAPER_EPOCHS - 1) * r.steady_epoch_time_s_mean if ok else None
        exp_rows.append({"experiment": exp, **{k: getattr(r, k) for k in PAPER_KEYS}, "paper_s": r.paper_s,
                         "ours_s": projected if ok else float("nan"),
                         "ours_ci95": (PAPER_EPOCHS - 1) * r.steady_epoch_time_s_ci95 if ok else float("nan"),
                         "ours_status": "not run" if pd.isna(r.n_ok) else ("ok" if ok else r.statuses),
                         "paper_per_epoch_s": r.paper_s / PAPER_EPOCHS,
                         "ours_per_epoch_s": r.steady_epoch_time_s_mean if ok else float("nan"),
                         "ours_epochs": epochs})
    return exp_rows


def _paper_grid(exp: str, d: pd.DataFrame) -> GridTable:
    """Rows model x devices x workers; per batch size and framework the paper's seconds and ours."""
    batches = sorted(d["batch_size"].unique())
    header = [[("Model", 1), ("Devices", 1), ("Workers", 1)] + [(f"Batch size {b}", 2 * len(FRAMEWORK_ORDER)) for b in batches],
              [("", 1)] * 3 + [(framework_label(f), 2) for b in batches for f in FRAMEWORK_ORDER],
              [("", 1)] * 3 + [(s, 1) for b in batches for f in FRAMEWORK_ORDER
                               for s in ("paper", f"ours ({PAPER_EPOCHS} ep., projected)")]]
    body, prev = [], None
    for rk in paper_order(d[["model", "devices", "workers"]].drop_duplicates(), ["model", "devices", "workers"]).itertuples(index=False):
        labels = [model_label(rk.model), str(rk.devices), str(rk.workers)]
        cells = index_cells(labels, prev)
        prev = labels
        for b in batches:
            sel = d[(d.model == rk.model) & (d.devices == rk.devices) & (d.workers == rk.workers) & (d.batch_size == b)]
            cells += _paper_cells({r.framework: r for r in sel.itertuples()})
        body.append(cells)
    return GridTable(exp, header, body, n_index=3)


def _paper_cells(by_fw: dict) -> list:
    """One batch size's cells: paper then ours per framework, the faster framework of each source bold."""
    group = {}
    for src in ("paper_s", "ours_s"):
        vals = {f: getattr(by_fw[f], src) for f in FRAMEWORK_ORDER if f in by_fw and not pd.isna(getattr(by_fw[f], src))}
        winner = min(vals, key=vals.get) if len(vals) >= 2 and list(vals.values()).count(min(vals.values())) == 1 else None
        for f in FRAMEWORK_ORDER:
            r = by_fw.get(f)
            if r is None or (src == "paper_s" and pd.isna(r.paper_s)):
                group[(f, src)] = Cell("—", css="missing")
            elif src == "ours_s" and pd.isna(r.ours_s):
                st = r.ours_status  # most severe status first
                group[(f, src)] = Cell(st, css="missing" if st == "not run" else f"status status-{st.split()[0].rstrip(',')}")
            else:
                v = getattr(r, src)
                text = fmt_num(v) + ("" if src == "paper_s" or pd.isna(r.ours_ci95) else f" ± {fmt_num(r.ours_ci95, ref=v)}")
                group[(f, src)] = Cell(text, css=("best" if winner == f else "") + (" paper" if src == "paper_s" else ""))
    return [group[(f, src)] for f in FRAMEWORK_ORDER for src in ("paper_s", "ours_s")]
