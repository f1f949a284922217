"""The report's "replicated vs partitioned" section (analysis.variants.partitioned) from real runs: a
DistDGL run across the two test hosts (tests/test_partitioned.py's launch) and a replicated DGL
run of the same point, aggregated; their rows spread into repeats with known effects give the
intervals. PyG and GLT partitioned are rows skipped with the reason; without a partitioned run
the section is one line saying how to get one."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from analysis import aggregate
from analysis.report import render
from analysis.formatting import fmt_bytes
from analysis.variants.partitioned import GLT_REASON, partitioned_rows, partitioned_table
from analysis.tables.memory import memory_model_table
from runners.adapters import registry
from tests.helpers import run_config
from tests.test_hosts import hosts  # noqa: F401  (the fixture)
from tests.test_partitioned import RUN_TIMEOUT_S, logs, start_partitioned


@pytest.fixture(scope="module")
def agg(hosts, tmp_path_factory):  # noqa: F811
    """The aggregate (runs.csv rows) of a partitioned and a replicated DGL run at one point
    (GraphSAGE, 1 device per host, batch 128, 0 workers, tiny, 4 epochs)."""
    root = tmp_path_factory.mktemp("part-report")
    (root / "part").mkdir()
    procs = start_partitioned(hosts, root / "part" / "job")
    assert [p.wait(timeout=RUN_TIMEOUT_S) for p in procs] == [0, 0], logs(root / "part" / "job")
    res = run_config(root / "rep" / "job", framework="dgl", devices=1, epochs=4, timeout=RUN_TIMEOUT_S)
    assert res.returncode == 0, res.stdout[-3000:]
    agg = aggregate.aggregate([root / "part", root / "rep"])
    assert sorted(agg.runs["strategy"]) == ["partitioned", "replicated"] and set(agg.runs["status"]) == {"ok"}
    return agg


@pytest.fixture(scope="module")
def real(agg):
    return agg.runs


def spread(runs: pd.DataFrame, epoch_factor: float, host_factor: float) -> pd.DataFrame:
    """Each real row as 3 repeats (noise 0.97, 1.0, 1.03); the partitioned rows' epoch time and
    largest host's memory set to `epoch_factor` and `host_factor` x the replicated run's (every
    host's peak scaled alike)."""
    rep = runs[runs["strategy"] == "replicated"].iloc[0]
    rows = []
    for _, r in runs.iterrows():
        for k, noise in enumerate((0.97, 1.0, 1.03)):
            row = r.to_dict()
            part = row["strategy"] == "partitioned"
            row["steady_epoch_mean_s"] = rep["steady_epoch_mean_s"] * (epoch_factor if part else 1.0) * noise
            target = rep["mem_max_host_peak_bytes"] * (host_factor if part else 1.0) * noise
            scale = target / row["mem_max_host_peak_bytes"]
            row["mem_host_peaks"] = ",".join(str(int(float(v) * scale)) for v in row["mem_host_peaks"].split(","))
            row["mem_max_host_peak_bytes"] = max(int(v) for v in row["mem_host_peaks"].split(","))
            rows.append({**row, "repeat": k, "run_id": f"{r['run_id']}-r{k}"})
    return pd.DataFrame(rows)


def test_section_from_real_runs(real):
    rows = partitioned_rows(real).set_index(["framework", "strategy"])
    part, rep = rows.loc[("dgl", "partitioned (metis)")], rows.loc[("dgl", "replicated")]
    r_part, r_rep = (real[real["strategy"] == s].iloc[0] for s in ("partitioned", "replicated"))
    assert part["hosts"] == "2" and rep["hosts"] == "1" and part["n_ok"] == rep["n_ok"] == 1
    # the real values: the larger host (graph server + trainer), each host's beside it, against the
    # replicated run's ranks
    node1 = json.loads((Path(r_part["run_dir"]) / "node1" / "result.json").read_text())
    peak0, peak1 = r_part["mem_host_peak_bytes"], node1["env"]["partitioned"]["server"]["memory"]["host_peak_bytes"]
    assert peak0 > r_part["mem_peak_bytes"] > 0 and peak1 > 0 and node1["config"]["node_rank"] == 1
    assert r_part["mem_host_peaks"] == f"{int(peak0)},{int(peak1)}"
    assert part["host_bytes"] == r_part["mem_max_host_peak_bytes"] == max(peak0, peak1)
    assert part["per_host_bytes"] == f"0:{peak0:.0f},1:{peak1:.0f}"
    assert rep["host_bytes"] == r_rep["mem_peak_bytes"] == r_rep["mem_max_host_peak_bytes"] > 0
    assert rep["per_host_bytes"] == f"0:{r_rep['mem_peak_bytes']:.0f}"
    html = partitioned_table(real).html()
    assert f"host 0 {fmt_bytes(peak0)}, host 1 {fmt_bytes(peak1)}" in html, html
    assert part["epoch_s"] == pytest.approx(r_part["steady_epoch_mean_s"])
    assert part["epoch_ratio"] == pytest.approx(r_part["steady_epoch_mean_s"] / r_rep["steady_epoch_mean_s"])
    share = (r_part["step_load_wait_s"] + r_part["step_prepare_s"]) / r_part["step_s"]
    assert part["share"] == pytest.approx(share) and 0 < share < 1
    assert pd.isna(part["epoch_low"])  # one run a side: no interval claimed
    # the engines that cannot run partitioned here: skipped, with the reason
    assert rows.loc[("pyg", "partitioned"), "reason"] == registry.framework("pyg").partitioned_unavailable
    assert "pyg-lib" in rows.loc[("pyg", "partitioned"), "reason"]
    assert rows.loc[("glt", "partitioned"), "reason"] == GLT_REASON
    assert rows.loc[("glt", "partitioned"), "n_ok"] == 0


def test_section_intervals_on_repeats(real):
    """Three repeats a side, the partitioned 1.5x slower and 0.6x the memory: both ratios
    recovered, each interval around it and away from 1."""
    rows = partitioned_rows(spread(real, 1.5, 0.6)).set_index(["framework", "strategy"])
    part = rows.loc[("dgl", "partitioned (metis)")]
    assert part["n_ok"] == 3
    assert part["epoch_ratio"] == pytest.approx(1.5, rel=1e-6) and 1 < part["epoch_low"] < 1.5 < part["epoch_high"]
    assert part["host_ratio"] == pytest.approx(0.6, rel=1e-6) and part["host_low"] < 0.6 < part["host_high"] < 1
    assert part["epoch_ci_s"] > 0 and part["host_ci_bytes"] > 0
    # every host's peak with its own interval
    assert [k for k, c in (p.split(":") for p in part["per_host_ci_bytes"].split(",")) if float(c) > 0] == ["0", "1"]
    table = partitioned_table(spread(real, 1.5, 0.6))
    text = table.html()
    assert "1.50×" in text and "0.60×" in text and "pyg-lib" in text and "GraphLearn-for-PyTorch" in text


def test_report_has_the_section_and_says_how_to_get_one(agg, real, tmp_path):
    """The rendered report carries the section filled from the real runs; without a partitioned
    run the section is one line on how to get one."""
    page = render.render(agg, tmp_path / "report" / "index.html", tmp_path / "report")
    text = page.read_text()
    section = text[text.index('<section id="partitioned">'):]
    section = section[:section.index("</section>")]
    assert "Table: Replicated vs partitioned (DistDGL)" in section and "partitioned (metis) (2)" in section
    assert "pyg-lib" in section and "GraphLearn-for-PyTorch" in section
    assert (tmp_path / "report" / "partitioned.csv").exists()
    none = partitioned_table(real[real["strategy"] == "replicated"])
    assert none.data.empty and not none.grids
    assert none.html().count("<p") == 1 and "--strategy partitioned --nnodes 2 --ip-config FILE" in none.html()


def test_memory_model_table_sets_a_partitioned_host_against_its_model(real):
    """The memory-model table's measured peak of a partitioned run is its host's (graph server +
    trainer, sampled together), set against the model of the same processes; the replicated run
    keeps its ranks' peak against its own model, in a row of its own."""
    table = memory_model_table(real).set_index("strategy")
    r_part, r_rep = (real[real["strategy"] == s].iloc[0] for s in ("partitioned", "replicated"))
    part, rep = table.loc["partitioned"], table.loc["replicated"]
    assert part["mem_peak_bytes"] == r_part["mem_host_peak_bytes"] > r_part["mem_peak_bytes"]  # the server counted
    assert part["mem_model_bytes"] == r_part["mem_model_sampled_bytes"] < r_part["mem_model_bytes"]  # no agent
    assert 0.7 < part["peak_over_model"] < 1.4, part
    assert "graph server + trainers" in part["measured"] and rep["measured"] == "ranks + loader workers"
    assert rep["mem_peak_bytes"] == r_rep["mem_peak_bytes"] and rep["mem_model_bytes"] == r_rep["mem_model_bytes"]
    assert part["runs"] == rep["runs"] == 1
