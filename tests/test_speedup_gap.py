"""The split of the missing speed-up (analysis/projection/speedup_gap.py): on constructed runs, epochs and
steps whose parts are known, and on the session's real runs (tests/_runs.py)."""

import random

import pandas as pd
import pytest

from analysis import PHASE_COLUMNS
from analysis.report import plots
from analysis.projection import speedup_gap
from analysis.aggregate import Aggregate
from tests import _runs

# The base: 20 steps per epoch of known phases and 0.1 s per epoch outside the steps.
BASE = {"load_wait_s": 0.010, "prepare_s": 0.002, "copy_s": 0.001, "forward_s": 0.020, "backward_s": 0.040,
        "optimizer_s": 0.005}
OUTSIDE_S = 0.1
CONTENTION = 1.25     # preparation, copy, forward, optimizer and the backward's compute, 25% slower
EXTRA_WAIT_S = 0.005  # more loader wait per step
ALLREDUCE_S = 0.010   # the all-reduce and waiting, per step
# The 2-device point: 11 steps per rank (one more than half the base's 20: padding).
POINT = {**{p: CONTENTION * v for p, v in BASE.items()}, "load_wait_s": BASE["load_wait_s"] + EXTRA_WAIT_S,
         "backward_s": CONTENTION * BASE["backward_s"] + ALLREDUCE_S}
T1 = 20 * sum(BASE.values()) + OUTSIDE_S
TN = 11 * sum(POINT.values()) + OUTSIDE_S
EXPECTED = {
    "extra_steps": (11 - 20 / 2) * sum(BASE.values()),
    "loader_wait": 11 * EXTRA_WAIT_S,
    "compute": 11 * (CONTENTION - 1) * sum(v for p, v in BASE.items() if p != "load_wait_s"),
    "allreduce_wait": 11 * ALLREDUCE_S,
    "unexplained": OUTSIDE_S - OUTSIDE_S / 2,  # the same time outside the steps, not divided by 2
}


def run_row(run_id, framework="pyg", devices=1, repeat=0, status="ok", **extra):
    return {"run_id": run_id, "status": status, "framework": framework, "model": "sage", "devices": devices,
            "batch_size": 128, "workers": 0, "repeat": repeat, "dataset": "synthetic", "device_type": "cpu",
            "epochs": 5, "harness": "fair", "inject": None, "steady_epoch_time_s": None,
            "command": f"python -m runners.run --out {run_id}", **extra}


def rank_rows(run_id, rank, phases, n_steps, outside_s, rng, epochs=5, phased=True):
    """(epoch rows, step rows) of one rank: 1% noise on every phase, a slow warm-up epoch."""
    ep, st = [], []
    for epoch in range(epochs):
        warm = 3.0 if epoch == 0 else 1.0  # the warm-up must not count
        steps = [{p: warm * v * rng.gauss(1, 0.01) for p, v in phases.items()} for _ in range(n_steps)]
        st += [{"run_id": run_id, "rank": rank, "epoch": epoch, "step": i,
                **{p: (s[p] if phased else None) for p in PHASE_COLUMNS}} for i, s in enumerate(steps)]
        ep.append({"run_id": run_id, "rank": rank, "epoch": epoch, "steps": n_steps,
                   "time_s": sum(sum(s.values()) for s in steps) + warm * outside_s})
    return ep, st


def frames(point_phased=True, seed=1):
    """runs, epochs, steps: PyG at 1 and 2 devices (2 repeats each) and DGL at 1 and 2 devices,
    whose 2-device run has no phase times when `point_phased` is False for DGL only."""
    rng = random.Random(seed)
    runs, epochs, steps = [], [], []

    def add(run_id, framework, devices, repeat, phased=True):
        runs.append(run_row(run_id, framework, devices, repeat))
        if devices == 1:
            parts = [rank_rows(run_id, 0, BASE, 20, OUTSIDE_S, rng)]
        else:  # rank 1 is the slowest; rank 0 waits less and has less outside the steps
            fast = {**POINT, "load_wait_s": 0.0}
            parts = [rank_rows(run_id, 0, fast, 11, OUTSIDE_S / 2, rng, phased=phased),
                     rank_rows(run_id, 1, POINT, 11, OUTSIDE_S, rng, phased=phased)]
        for ep, st in parts:
            epochs.extend(ep)
            steps.extend(st)

    for r in (0, 1):
        add(f"pyg-d1-r{r}", "pyg", 1, r)
        add(f"pyg-d2-r{r}", "pyg", 2, r)
    add("dgl-d1-r0", "dgl", 1, 0)
    add("dgl-d2-r0", "dgl", 2, 0, phased=point_phased)
    return pd.DataFrame(runs), pd.DataFrame(epochs), pd.DataFrame(steps)


def parts_sum(r) -> float:
    return sum(r[f"{p}_s"] for p in speedup_gap.PARTS)


def test_the_split_recovers_known_parts_and_sums_to_the_gap():
    gap = speedup_gap.gap_data(*frames())
    r = gap.set_index("framework").loc["pyg"]
    assert (r["devices"], r["base_devices"], r["n_runs"], r["base_n_runs"]) == (2, 1, 2, 2)
    assert r["reason"] is None
    assert r["base_epoch_s"] == pytest.approx(T1, rel=0.01) and r["epoch_s"] == pytest.approx(TN, rel=0.01)
    assert r["ideal_s"] == pytest.approx(r["base_epoch_s"] / 2)
    assert r["gap_s"] == pytest.approx(r["epoch_s"] - r["ideal_s"])
    for part, expected in EXPECTED.items():
        assert r[f"{part}_s"] == pytest.approx(expected, rel=0.05), part
    assert parts_sum(r) == pytest.approx(r["gap_s"], rel=1e-12, abs=1e-12)
    assert sum(r[f"{p}_share"] for p in speedup_gap.PARTS) == pytest.approx(1.0)
    assert (r["base_steps"], r["steps"]) == (20, 11)


def test_split_gap_identity_holds_for_any_profile():
    rng = random.Random(7)
    for _ in range(50):
        base = {"T": rng.uniform(1, 5), "S": rng.randint(5, 50), **{p: rng.uniform(1e-4, 0.1) for p in PHASE_COLUMNS}}
        point = {"T": rng.uniform(0.2, 5), "S": rng.randint(1, 50), **{p: rng.uniform(1e-4, 0.1) for p in PHASE_COLUMNS}}
        r = speedup_gap.split_gap(base, point, rng.choice([2, 4, 8]))
        assert parts_sum(r) == pytest.approx(r["gap_s"], rel=1e-12, abs=1e-12)


def test_a_point_without_phase_times_is_skipped_with_its_reason():
    gap = speedup_gap.gap_data(*frames(point_phased=False)).set_index("framework")
    assert gap.loc["pyg", "reason"] is None
    assert "no phase times" in gap.loc["dgl", "reason"] and pd.isna(gap.loc["dgl", "gap_s"])
    sentences = speedup_gap.gap_findings(gap.reset_index())
    assert any("DGL GraphSAGE" in s and "cannot be split" in s for s in sentences)
    fig = plots.gap_bars(gap.reset_index())  # the PyG bar is drawn, the DGL point left out
    assert getattr(fig, "gnnscale_note", None) is None
    plots.plt.close(fig)


def test_missing_data_gives_reasons_not_errors():
    runs, epochs, steps = frames()
    empty = speedup_gap.gap_data(runs.iloc[0:0], epochs.iloc[0:0], steps.iloc[0:0])
    assert empty.empty and list(empty.columns) == speedup_gap.COLUMNS
    no_steps = speedup_gap.gap_data(runs, epochs, steps.iloc[0:0])
    assert no_steps["reason"].str.contains("no step rows").all()
    warmup_only = speedup_gap.gap_data(runs, epochs[epochs["epoch"] == 0], steps)
    assert warmup_only["reason"].str.contains("no steady epoch").all()
    failed = runs.assign(status=runs["status"].where(runs["run_id"] != "dgl-d2-r0", "hang"))
    dgl = speedup_gap.gap_data(failed, epochs, steps).set_index("framework").loc["dgl"]
    assert dgl["reason"] == "no ok run at this point" and dgl["n_runs"] == 0
    fig = plots.gap_bars(empty)
    assert "No multi-device point" in fig.gnnscale_note
    plots.plt.close(fig)


def test_fault_injection_and_study_harness_runs_do_not_count():
    runs, epochs, steps = frames()
    runs = runs.assign(inject=runs["run_id"].map({"pyg-d2-r1": "stall-rank"}),
                       harness=runs["run_id"].map({"dgl-d2-r0": "study"}).fillna("fair"))
    gap = speedup_gap.gap_data(runs, epochs, steps)
    assert list(gap["framework"]) == ["pyg"] and gap["n_runs"].iloc[0] == 1


def test_sentence_and_table_in_human_units():
    gap = speedup_gap.gap_data(*frames())
    text = speedup_gap.gap_sentence(gap.set_index("framework").loc["pyg"].to_dict() | {"framework": "pyg"})
    assert text.startswith("PyG GraphSAGE, batch 128 per process, 0 loader workers: 2 devices are ")
    assert "faster than 1, not 2×: of the " in text and " ms missing per epoch, " in text
    assert "% is compute contention" in text and "% is gradient all-reduce and waiting for the slowest rank" in text
    table = speedup_gap.gap_table(gap)
    assert table.data is gap and " ms (" in table.html() and "%)" in table.html()
    assert speedup_gap.fmt_time(1.5) == "1.50 s" and speedup_gap.fmt_time(0.0412) == "41.2 ms"


# -- the session's real runs ----------------------------------------------------------------

@pytest.fixture(scope="module")
def real_gap(tmp_path_factory):
    agg = Aggregate.load(_runs.aggregate_dir(tmp_path_factory))
    return speedup_gap.gap_data(agg.runs, agg.epochs, agg.steps)


def test_real_runs_split_the_two_device_points(real_gap):
    split = real_gap[real_gap["reason"].isna()]
    assert sorted(split["framework"]) == ["dgl", "pyg"]
    assert set(split["devices"]) == {2} and set(split["base_devices"]) == {1}
    for r in split.to_dict("records"):
        assert r["gap_s"] == pytest.approx(r["epoch_s"] - r["base_epoch_s"] / 2)
        assert parts_sum(r) == pytest.approx(r["gap_s"], rel=1e-9, abs=1e-12)
        assert r["steps"] > 0 and r["base_steps"] > 0
    for s in speedup_gap.gap_findings(split):
        print(s)  # the example sentences, with -s


def test_real_report_has_the_table_figure_and_sentences(tmp_path_factory, real_gap):
    page = _runs.report_page(tmp_path_factory)
    for name in ("speedup_gap.csv", "speedup_gap.html", "speedup_gap.png"):
        assert (page.parent / name).exists(), name
    csv = pd.read_csv(page.parent / "speedup_gap.csv")
    assert set(speedup_gap.COLUMNS) <= set(csv.columns) and len(csv) == len(real_gap)
    text = page.read_text()
    assert '<section id="speedup-gap">' in text
    findings = text.split('<section id="findings">', 1)[1].split("</section>", 1)[0]
    assert "2 devices are " in findings or "2 devices against 1" in findings
