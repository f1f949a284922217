"""Aggregation, tables, deadlock report and HTML report, checked against REAL result
directories (tests/_runs.py runs a small real grid once per session)."""

import csv
import html
import json
import re
import shutil

import pandas as pd
import pytest

from analysis import aggregate, grouping, stats
from analysis import display, formatting
from analysis.report import deadlocks, findings, sweep_record, render
from analysis.aggregate import Aggregate
from analysis.report.context import Context
from analysis.tables.accuracy import accuracy_table
from analysis.tables.paper import load_paper, paper_comparison
from tests import _runs


@pytest.fixture(scope="session")
def runs_dir(tmp_path_factory):
    return _runs.real_runs(tmp_path_factory)


@pytest.fixture(scope="session")
def agg_dir(tmp_path_factory):
    return _runs.aggregate_dir(tmp_path_factory)


@pytest.fixture(scope="session")
def page(tmp_path_factory):
    return _runs.report_page(tmp_path_factory)


@pytest.fixture(scope="session")
def results(runs_dir):
    return {rid: json.loads((runs_dir / rid / "result.json").read_text()) for rid in _runs.GRID}


@pytest.fixture(scope="session")
def agg(agg_dir):
    return Aggregate.load(agg_dir)


@pytest.fixture(scope="session")
def all_tables(agg):
    return Context(agg).tables


def test_every_status_has_a_colour_a_severity_and_a_place_in_the_schema():
    from analysis import STATUS_COLOURS, STATUS_SEVERITY, STATUSES

    schema = json.loads((_runs.REPO / "runners" / "records" / "result.schema.json").read_text())
    assert set(schema["properties"]["status"]["enum"]) == set(STATUSES) == set(STATUS_SEVERITY)
    assert set(STATUSES) <= set(STATUS_COLOURS)


def text_of(page_html: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page_html))


# -- aggregation ----------------------------------------------------------------------------

def test_grid_produced_the_expected_statuses(results):
    assert {rid: r["status"] for rid, r in results.items()} == {
        **{rid: "ok" for rid in _runs.OK_RUNS},
        "pyg-sage-d2-uneven": "hang",
        "dgl-sage-d2-uneven": "hang",
        "pyg-sage-d2-stall": "hang",
    }
    for fw in ("pyg", "dgl"):
        assert results[f"{fw}-sage-d2-uneven"]["diagnosis"]["cause"] == "uneven_batches"


def test_runs_csv_has_one_row_per_run_with_result_values(agg, results):
    runs = agg.runs.set_index("run_id")
    assert sorted(runs.index) == sorted(r["run_id"] for r in results.values())
    assert agg.invalid.empty
    for rid, r in results.items():
        row = runs.loc[r["run_id"]]
        assert row["run_name"] == rid and row["status"] == r["status"]
        for key in ("framework", "model", "devices", "batch_size", "workers", "dataset", "epochs", "repeat"):
            assert row[key] == r["config"][key], (rid, key)
        assert row["fanouts"] == ",".join(map(str, r["config"]["fanouts"]))
        assert row["fanouts_framework"] == ",".join(map(str, r["config"]["fanouts_framework"]))
        assert row["command"] == r["command"]["shell"]
        assert row["env_dgl"] == r["env"]["dgl"] and row["env_dataset_hash"] == r["env"]["dataset_hash"]
        assert row["env_pyg_sampler_backend"] == r["env"]["pyg_sampler_backend"]
        assert row["env_hostname"] == r["env"]["hostname"] and row["env_git_commit"] == r["env"]["git_commit"]
        if r["status"] == "ok":
            s = r["summary"]
            for key in ("train_time_s", "median_epoch_time_s", "throughput_seed_nodes_per_s", "final_val_acc"):
                assert row[key] == pytest.approx(s[key]), (rid, key)
            for phase, v in s["step_breakdown_s"].items():
                assert row[f"step_{phase}" if phase != "step_s" else "step_s"] == pytest.approx(v)
        else:
            assert pd.isna(row["train_time_s"])
            assert row["diag_cause"] == r["diagnosis"]["cause"]


def test_epochs_and_steps_tables(agg, results, runs_dir):
    for rid, r in results.items():
        ep = agg.epochs[agg.epochs["run_id"] == r["run_id"]]
        assert len(ep) == len(r["epochs"])
        if r["validation"]:
            acc = {v["epoch"]: v["accuracy"] for v in r["validation"]}
            for e in ep.itertuples():
                assert e.val_accuracy == pytest.approx(acc[e.epoch])
        for rank in range(r["config"]["devices"]):
            path = runs_dir / rid / f"rank{rank}" / "steps.csv"
            with open(path, newline="") as fh:
                n = sum(1 for _ in csv.DictReader(fh))
            got = agg.steps[(agg.steps["run_id"] == r["run_id"]) & (agg.steps["rank"] == rank)]
            assert len(got) == n, (rid, rank)
    assert {"t_s", "cpu_percent", "rss_bytes", "role"} <= set(agg.cpu.columns) and not agg.cpu.empty


def test_failures_json_has_diagnosis_and_real_stacks(agg, results):
    by_id = {f["run_id"]: f for f in agg.failures}
    assert set(by_id) == {r["run_id"] for r in results.values() if r["status"] != "ok"}
    stall = by_id[results["pyg-sage-d2-stall"]["run_id"]]
    assert stall["diagnosis"]["cause"] == results["pyg-sage-d2-stall"]["diagnosis"]["cause"]
    roles = {s["role"] for s in stall["stacks"]}
    assert roles == {"rank0", "rank1"}
    frames = [fr for s in stall["stacks"] for t in s["threads"] for fr in t["frames"]]
    assert any("runners/rank/harness.py" in fr for fr in frames)  # the real training loop's frames
    assert all(len(t["frames"]) <= deadlocks.TOP_FRAMES for s in stall["stacks"] for t in s["threads"])


def test_malformed_results_are_listed_not_dropped(runs_dir, results, tmp_path):
    root = tmp_path / "runs"
    shutil.copytree(runs_dir / "dgl-sage-d1", root / "good")
    shutil.copytree(runs_dir / "dgl-sage-d1", root / "broken")
    (root / "broken" / "result.json").write_text('{"schema_version": 1, "run_id": ')
    shutil.copytree(runs_dir / "dgl-sage-d1", root / "bad-schema")
    data = json.loads((root / "bad-schema" / "result.json").read_text())
    data["run_id"] = "bad-schema"
    data["status"] = "exploded"
    del data["config"]["framework"]
    (root / "bad-schema" / "result.json").write_text(json.dumps(data))
    shutil.copytree(runs_dir / "dgl-sage-d1", root / "unfinished")
    (root / "unfinished" / "result.json").unlink()

    agg = aggregate.aggregate([root])
    assert list(agg.runs["run_id"]) == [results["dgl-sage-d1"]["run_id"]]
    reasons = {r.run_id: r.reason for r in agg.invalid.itertuples()}
    assert set(reasons) == {"broken", "bad-schema", "unfinished"}
    assert reasons["broken"].startswith("not valid JSON")
    assert "status" in reasons["bad-schema"] and "framework" in reasons["bad-schema"]
    assert "without result.json" in reasons["unfinished"]

    out = tmp_path / "report" / "index.html"
    render.render(agg, out, out.parent)
    text = text_of(out.read_text())
    assert "3 results could not be used" in text
    for rid in ("broken", "bad-schema", "unfinished"):
        assert str(root / rid) in text
    assert (out.parent / "invalid.csv").read_text().count("\n") == 4


# -- tables ---------------------------------------------------------------------------------

def perf_experiment(all_tables, name):
    data = all_tables[name].data
    return data[~data["experiment"].str.contains("uneven")]


def test_table2_values_and_faster_framework(all_tables, results):
    t = all_tables["table2"]
    data = perf_experiment(all_tables, "table2").set_index(["framework", "devices"])
    for rid in _runs.OK_RUNS:
        c = results[rid]["config"]
        assert data.loc[(c["framework"], c["devices"]), "steady_epoch_time_s_mean"] == pytest.approx(
            results[rid]["summary"]["steady_epoch_time_s"])
    grid_html = next(g for g in t.grids if "uneven" not in g.caption).to_html()
    for devices in (1, 2):
        times = {fw: results[f"{fw}-sage-d{devices}"]["summary"]["steady_epoch_time_s"] for fw in ("pyg", "dgl")}
        fast = min(times, key=times.get)
        shown = formatting.fmt_duration(times[fast])  # one run: no interval, a human unit
        assert re.search(rf"class='[^']*best[^']*'[^>]*>{re.escape(shown)}<", grid_html), (devices, shown)
    # The fault-injected hang is a demonstration, not a measurement: it is not in Table 2.
    assert not t.data["experiment"].str.contains("fault injection").any()


def test_non_ok_cell_shows_status(all_tables, results):
    status = results["pyg-sage-d2-uneven"]["status"]
    grid = next(g for g in all_tables["table2"].grids if "uneven" in g.caption)
    assert f"status-{status}" in grid.to_html() and f">{status}<" in grid.to_html()


def test_scaling_matches_result_ratios(all_tables, results):
    data = perf_experiment(all_tables, "scaling").set_index(["framework", "devices"])
    for fw in ("pyg", "dgl"):
        t1 = results[f"{fw}-sage-d1"]["summary"]["steady_epoch_time_s"]
        t2 = results[f"{fw}-sage-d2"]["summary"]["steady_epoch_time_s"]
        assert data.loc[(fw, 2), "speedup"] == pytest.approx(t1 / t2)
        assert data.loc[(fw, 2), "efficiency"] == pytest.approx(t1 / t2 / 2)
        assert data.loc[(fw, 1), "speedup"] == pytest.approx(1.0)


def test_breakdown_throughput_and_accuracy_match_summary(all_tables, results):
    br = perf_experiment(all_tables, "breakdown").set_index(["framework", "devices"])
    th = perf_experiment(all_tables, "throughput").set_index(["framework", "devices"])
    acc = perf_experiment(all_tables, "accuracy").set_index(["framework", "devices"])
    for rid in _runs.OK_RUNS:
        s, c = results[rid]["summary"], results[rid]["config"]
        key = (c["framework"], c["devices"])
        for phase in ("load_wait_s", "prepare_s", "copy_s", "forward_s", "backward_s", "optimizer_s"):
            assert br.loc[key, f"step_{phase}_mean"] == pytest.approx(s["step_breakdown_s"][phase])
        assert th.loc[key, "throughput_seed_nodes_per_s_mean"] == pytest.approx(s["throughput_seed_nodes_per_s"])
        assert th.loc[key, "sampled_edges_per_s_mean"] == pytest.approx(s["sampled_edges_per_s"])
        assert acc.loc[key, "final_val_acc_mean"] == pytest.approx(s["final_val_acc"])
        shown = formatting.fmt_num(1000 * s["step_breakdown_s"]["forward_s"])
        assert f">{shown}<" in all_tables["breakdown"].html()


def test_mean_and_t_confidence_interval():
    m, ci = stats.mean_ci([1.0, 2.0, 3.0])
    assert m == 2.0 and ci == pytest.approx(4.302653 * 1.0 / 3 ** 0.5, rel=1e-5)
    m, ci = stats.mean_ci([5.0])
    assert m == 5.0 and pd.isna(ci)


def test_repeats_are_averaged_with_ci(agg):
    runs = grouping.add_experiment(agg.runs)
    ok = runs[runs["run_name"] == "dgl-sage-d1"]
    twice = pd.concat([ok, ok.assign(run_id="dgl-sage-d1-again", repeat=1,
                                     train_time_s=ok["train_time_s"] * 1.1)], ignore_index=True)
    p = grouping.grid_points(twice, ["train_time_s"]).iloc[0]
    assert p["n_ok"] == 2
    m, ci = stats.mean_ci([ok["train_time_s"].iloc[0], 1.1 * ok["train_time_s"].iloc[0]])
    assert p["train_time_s_mean"] == pytest.approx(m) and p["train_time_s_ci95"] == pytest.approx(ci)
    assert "±" in display.value_cell(p, "train_time_s").text


def test_paper_table_is_the_seed_studys():
    paper = load_paper()
    assert len(paper) == 36 and set(paper["framework"]) == {"pyg", "dgl"}
    cell = paper.set_index(["model", "gpus", "workers", "batch_size", "framework"])["seconds"]
    assert cell[("sage", 1, 8, 512, "pyg")] == 4758 and cell[("gat", 4, 1, 2048, "dgl")] == 2054
    assert cell[("sage", 2, 8, 1024, "dgl")] == 2866 and cell[("gat", 2, 8, 512, "pyg")] == 2624


def test_paper_comparison_side_by_side(agg):
    # Our runs relabelled as the seed study's dataset: the layout must carry both sources.
    runs = grouping.add_experiment(agg.runs.assign(dataset="reddit"))
    points = grouping.performance_points(runs)
    t = paper_comparison(points, load_paper())
    assert not t.data.empty and t.grids
    text = text_of(t.html())
    assert "4,758" in text and "paper" in text
    ours = t.data.dropna(subset=["ours_s"])
    assert len(ours) == len(_runs.OK_RUNS)
    empty = paper_comparison(grouping.performance_points(grouping.add_experiment(agg.runs)), load_paper())
    assert empty.data.empty and "No runs on the seed study's dataset" in empty.description
    assert "4,758" in text_of(empty.html())  # the published table is still shown


# -- the report -----------------------------------------------------------------------------

def test_report_is_self_contained_with_all_assets(page):
    text = page.read_text()
    assert "<script" not in text.lower()
    assert not re.search(r"""(src|href)\s*=\s*["'](?!data:|#)""", text)
    # Every figure drawn is embedded; one with nothing to compare is left out, and says why.
    drawn = text.count("<figure>")
    assert drawn >= 4 and text.count("data:image/png;base64,") == drawn
    for name in render.ASSETS:
        assert (page.parent / name).exists(), name


def test_report_findings_environment_and_rerun_commands(page, results):
    text = text_of(page.read_text())
    times = {fw: results[f"{fw}-sage-d1"]["summary"]["train_time_s"] for fw in ("pyg", "dgl")}
    assert times["pyg"] != times["dgl"]
    # One repeat per framework: no interval, so no framework is called faster.
    assert "Steady-state epoch time (warm-up excluded), PyG / DGL" in text
    assert "no clear difference in 2 of 2 configurations" in text
    assert "DGL faster in" not in text and "PyG faster in" not in text
    assert "Median speed-up of the steady-state epoch time over the fewest devices" in text
    assert "deliberately injected fault (stall-rank)" in text
    for r in results.values():
        assert r["command"]["shell"] in text  # next to its row in "All runs"
    env = results["dgl-sage-d1"]["env"]
    for value in (env["dgl"], env["torch"], env["torch_geometric"], env["pyg_sampler_backend"], env["dataset_hash"]):
        assert value in text
    assert "6,5,4" in text and "4,5,6" in text  # fan-outs as given and as DGL received them


def test_first_screen_names_the_graph_with_its_shape(page, results):
    """The answers' context line names the graph the runs read, with the shape its meta.json records."""
    meta = json.loads((_runs.DATA_ROOT / "tiny" / "meta.json").read_text())
    assert meta["content_hash"] == results["pyg-sage-d1"]["env"]["dataset_hash"]
    first = re.search(r'<section id="answers">(.*?)</section>', page.read_text(), re.S).group(1)
    deg = meta["stats"]["in_degree"]
    assert (f'<p class="graph">Graph: tiny — 2,000 nodes, {meta["num_edges"]:,} edges, mean degree '
            f'{deg["mean"]:.3g} (max {deg["max"]}), 32 features, 5 classes, homophily '
            f'{meta["stats"]["edge_homophily"]:.2f} · content hash {meta["content_hash"][:12]}</p>') in first


def test_deadlock_section(page, results):
    section = re.search(r'<section id="deadlocks">(.*?)</section>', page.read_text(), re.S).group(1)
    text = text_of(section)
    for rid in ("pyg-sage-d2-stall", "pyg-sage-d2-uneven", "dgl-sage-d2-uneven"):
        d = results[rid]["diagnosis"]
        assert d["summary"] in text and d["remedy"] in text and d["cause"] in text
        assert results[rid]["command"]["shell"] in text
        for rank in d["ranks"]:
            assert rank["blocked_in"] in text
    assert "Faults.at (runners/rank/harness.py" in text or "at (runners/rank/harness.py" in text  # the stalled rank's stack
    assert "class='culprit'" in section
    # each framework's genuine deadlock, with both ranks' stacks: one rank in DDP's forward inside the
    # framework's own model, the other in the epoch-end all-reduce
    for adapter, fw in (("PygAdapter", "PyG"), ("DglAdapter", "DGL")):
        cards = re.split(r"(?=\bhang (?:PyG|DGL) )", re.sub(r"\s+", " ", text))
        card = next(c for c in cards if c.startswith(f"hang {fw} ")
                    and "uneven batches" in c)
        assert "Stacks (innermost frame first)" in card and "rank0 pid" in card and "rank1 pid" in card
        assert f"{adapter}.forward" in card and "DistributedDataParallel" in card
        assert "all_reduce" in card and "Rank.slowest_epoch" in card


@pytest.mark.parametrize("subset", ["single", "all_failed"])
def test_report_works_with_one_run_or_only_failures(runs_dir, tmp_path, subset):
    picked = ["dgl-sage-d1"] if subset == "single" else ["pyg-sage-d2-uneven", "pyg-sage-d2-stall"]
    agg = aggregate.aggregate([runs_dir / rid for rid in picked])
    out = render.render(agg, tmp_path / "index.html", tmp_path)
    text = text_of(out.read_text())
    assert f"{len(picked)} valid run" in text
    if subset == "all_failed":
        assert "No configuration finished ok" in text
        assert "Every run ended" not in text
    else:
        assert "nothing to diagnose" in text


# -- trustworthy numbers: warm-up, intervals, convergence, phases ----------------------------

def test_steady_state_excludes_the_warmup_epoch(results):
    from runners.records.rank_rows import steady_state

    st = steady_state([9.0, 1.0, 3.0, 2.0, 100.0])
    assert st["warmup_epoch_time_s"] == 9.0 and st["steady_epochs"] == 4
    assert st["steady_epoch_time_s"] == 2.5  # median of 1, 3, 2, 100: the warm-up 9 is not in it
    assert st["steady_epoch_min_s"] == 1.0 and st["steady_epoch_max_s"] == 100.0
    assert st["steady_epoch_q1_s"] <= 2.5 <= st["steady_epoch_q3_s"]
    assert steady_state([4.0])["steady_epoch_time_s"] is None  # one epoch: no steady state
    for rid in _runs.OK_RUNS:  # the real runs: epoch 0 is the warm-up, epoch 1 the steady state
        r = results[rid]
        by_epoch = {}
        for e in r["epochs"]:
            by_epoch[e["epoch"]] = max(by_epoch.get(e["epoch"], 0.0), e["time_s"])
        s = r["summary"]
        assert s["warmup_epoch_time_s"] == pytest.approx(by_epoch[0])
        assert s["steady_epoch_time_s"] == pytest.approx(by_epoch[1])
        assert s["train_time_s"] >= s["steady_epoch_time_s"]  # the study's metric stays beside it
        assert s["steps_per_epoch"] == min(x["steps_per_epoch"] for x in r["ranks"])
        assert s["timed_to_startup_ratio"] == pytest.approx(s["train_time_s"] / s["startup_s"], rel=1e-2)


def test_prepare_phase_is_timed_apart_from_loader_wait(results, runs_dir):
    for rid in _runs.OK_RUNS:
        with open(runs_dir / rid / "rank0" / "steps.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))
        assert rows and all(float(r["prepare_s"]) > 0 for r in rows), rid
        for r in rows:
            phases = sum(float(r[k]) for k in ("load_wait_s", "prepare_s", "copy_s", "forward_s", "backward_s",
                                               "optimizer_s"))
            assert phases == pytest.approx(float(r["step_s"]), rel=1e-6, abs=1e-6)
        choices = results[rid]["config"]["adapter_choices"]
        assert choices["feature_gather"] and choices["batch_prepare"] and choices["sampled_edges"]
    gathers = {fw: results[f"{fw}-sage-d1"]["config"]["adapter_choices"]["feature_gather"] for fw in ("pyg", "dgl")}
    assert "prefetch_node_feats" in gathers["dgl"] and "prefetch_node_feats" not in gathers["pyg"]


def test_fairness_table_records_feature_gathering_and_edge_meaning(agg):
    fair = sweep_record.fairness_frame(grouping.add_experiment(agg.runs)).set_index("setting")
    assert "prefetch_node_feats" in fair.loc["where node features are gathered", "DGL"]
    assert fair.loc["what a sampled-edge count counts", "PyG"] != fair.loc["what a sampled-edge count counts", "DGL"]
    assert "first epoch" in fair.loc["warm-up (outside the steady-state time)", "PyG"]
    # how close the runner's loop is to each framework's example loop, with where it was measured
    from analysis.report import fidelity
    assert fair.loc[fidelity.SETTING, "PyG"].startswith("GraphSAGE: ")
    assert "commit " in fair.loc[fidelity.MEASURED, "DGL"]


def test_accuracy_reference_target_baseline_and_time_to_target(results, tmp_path):
    from runners import datasets
    from runners.rank import accuracy

    for rid in _runs.OK_RUNS:
        ref, s = results[rid]["accuracy_reference"], results[rid]["summary"]
        assert ref["target_val_acc"] == accuracy.TARGETS["tiny"][0]
        # 5 classes: a real features-only model is far above chance and below perfect
        assert 0.3 < ref["baseline_val_acc"] < 0.9
        assert s["baseline_val_acc"] == ref["baseline_val_acc"]
        assert s["converged"] == (s["final_val_acc"] > ref["baseline_val_acc"])
        assert s["target_val_acc"] == ref["target_val_acc"]
    graph = datasets.load("tiny", root=_runs.DATA_ROOT)
    assert accuracy.reference(graph)["baseline_val_acc"] == results["dgl-sage-d1"]["accuracy_reference"][
        "baseline_val_acc"]  # computed once per dataset, read back from its cache
    val = [{"epoch": 0, "accuracy": 0.5}, {"epoch": 1, "accuracy": 0.7}, {"epoch": 2, "accuracy": 0.9}]
    assert accuracy.time_to_target([1.0, 2.0, 4.0], val, 0.65) == (3.0, 2)
    assert accuracy.time_to_target([1.0, 2.0, 4.0], val, 0.95) == (None, None)
    assert accuracy.time_to_target([1.0, 2.0, 4.0], val, None) == (None, None)


def test_intervals_that_include_one_are_no_clear_difference():
    lo, hi = stats.ratio_interval([10.0, 11.0, 9.5], [10.5, 9.8, 10.9])[1:]
    assert lo < 1.0 < hi
    assert stats.verdict(lo, hi, 1.0, "DGL faster", "PyG faster") == stats.NO_CLEAR
    ratio, lo, hi = stats.ratio_interval([20.0, 20.5, 19.8], [10.0, 10.2, 9.9])
    assert ratio == pytest.approx(2.0, rel=0.03) and lo > 1.0
    assert stats.verdict(lo, hi, 1.0, "DGL faster", "PyG faster") == "DGL faster"
    assert stats.verdict(*stats.ratio_interval([5.0], [10.0])[1:], 1.0, "DGL faster", "PyG faster") == stats.NO_CLEAR
    d, lo, hi = stats.welch_interval([0.80, 0.82, 0.81], [0.70, 0.71, 0.69])
    assert d == pytest.approx(0.11) and lo > 0


def _repeated(agg, factor_pyg, factor_dgl, jitter=(1.0, 1.03, 0.97)):
    """The real d1 runs as three repeats each, their times scaled (to set a known difference).
    Each framework meets the jitter in another order: a factor shared by a repeat's runs is a
    drift the block fit (analysis.repeats.noise) takes out, not launch noise."""
    runs = grouping.add_experiment(agg.runs)
    base = runs[runs["run_name"].isin(["pyg-sage-d1", "dgl-sage-d1"])]
    base = base.assign(steady_epoch_time_s=1.0, train_time_s=5.0)
    out = []
    for rep in range(len(jitter)):
        for k, (_, row) in enumerate(base.iterrows()):
            f = (factor_pyg if row["framework"] == "pyg" else factor_dgl) * jitter[(rep + k) % len(jitter)]
            out.append(row.to_dict() | {"run_id": f"{row['run_id']}-r{rep}", "repeat": rep,
                                        "steady_epoch_time_s": f, "train_time_s": 5 * f})
    return pd.DataFrame(out)


def test_speed_finding_reports_interval_and_no_clear_difference(agg):
    overlapping = " ".join(findings.speed_findings(_repeated(agg, 1.0, 1.01)))
    assert "no clear difference in 1 of 1" in overlapping and "95% CI" in overlapping
    assert "DGL faster in" not in overlapping and "PyG faster in" not in overlapping
    clear = " ".join(findings.speed_findings(_repeated(agg, 2.0, 1.0)))
    assert "DGL faster in 1 of 1" in clear and "2.00×" in clear


def test_unconverged_runs_are_labelled_not_compared(agg):
    runs = _repeated(agg, 1.0, 1.0).assign(final_val_acc=0.2, baseline_val_acc=0.5, converged=False)
    text = " ".join(findings.accuracy_findings(runs, grouping.performance_points(runs)))
    assert "Not converged: 6 of 6" in text
    assert "parity" not in text.lower() and "PyG − DGL" not in text
    acc = accuracy_table(grouping.performance_points(runs))
    assert "not converged" in acc.html()
    good = runs.assign(final_val_acc=[0.9, 0.91, 0.92, 0.9, 0.89, 0.91], converged=True)
    text = " ".join(findings.accuracy_findings(good, grouping.performance_points(good)))
    assert "Not converged" not in text and "PyG − DGL" in text and stats.NO_CLEAR in text


def test_order_finding_checks_interleaving(agg):
    runs = _repeated(agg, 1.0, 1.0)
    t = pd.Timestamp("2026-01-01T00:00:00Z")
    interleaved = runs.assign(started_at=[(t + pd.Timedelta(seconds=10 * i)).isoformat() for i in range(len(runs))])
    assert "Runs executed interleaved" in findings.order_findings(interleaved)[0]
    blocked = interleaved.sort_values(["framework", "repeat"]).assign(started_at=interleaved["started_at"].values)
    assert "did NOT execute interleaved" in findings.order_findings(blocked)[0]


def test_per_model_epochs_keep_one_experiment(agg):
    runs = agg.runs[agg.runs["run_name"].isin(["pyg-sage-d1", "dgl-sage-d1"])]
    both = pd.concat([runs, runs.assign(model="gat", epochs=runs["epochs"] * 2,
                                        run_id=runs["run_id"] + "-gat")], ignore_index=True)
    labels = grouping.add_experiment(both)["experiment"].unique()
    assert len(labels) == 1 and "epochs GraphSAGE 2, GAT 4" in labels[0]


def test_cpu_per_second_is_each_process_mean_summed_over_processes():
    """Sampled four times a second (the GPU check does), a process at 100% stays at 100%, and two
    processes add up: the samples of one process in a second are averaged, not added."""
    from analysis.report.plots import per_second

    samples = pd.DataFrame({"sec": [0] * 8, "pid": [1, 1, 1, 1, 2, 2, 2, 2],
                            "cpu_percent": [100.0] * 4 + [50.0] * 4, "rss_bytes": [2**30] * 4 + [2**29] * 4})
    s = per_second(samples)
    assert s.loc[0, "cpu"] == 150.0
    assert s.loc[0, "rss"] == 2**30 + 2**29


def test_a_commit_that_reads_like_a_float_stays_text(tmp_path):
    """A git commit such as 82e2673948578c37... starts like 82 x 10^2673948578: pandas' C parser
    crashed the process on it (a segmentation fault, seen when the suite's HEAD was that commit).
    Read in a subprocess, so a crash fails this test instead of ending the session."""
    import subprocess
    import sys

    commit = "82e2673948578c377db97b064be4adeefda9b00c"
    (tmp_path / "runs.csv").write_text("run_id,env_git_commit,env_dataset_hash\n"
                                       f"1e5,{commit},9e99999999abc\n")
    code = ("import sys; from analysis.aggregate import Aggregate; a = Aggregate.load(sys.argv[1]); "
            "print(a.runs['env_git_commit'][0], a.runs['run_id'][0], a.runs['env_dataset_hash'][0])")
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split() == [commit, "1e5", "9e99999999abc"]


def test_ratio_axis_labels_leave_room_for_each_other():
    """The summary figure's ticks: the roundest ones that fit, none closer than 1/7 of the axis
    (0.67x to 6x once gave 1.25x and 1.5x on top of each other), and 1x whenever it is in range."""
    import math

    from analysis.report.plots import spaced_ticks

    for lo, hi in ((0.7, 6.2), (0.67, 1.5), (0.9, 1.2), (0.05, 25.0)):
        ticks = spaced_ticks(lo, hi)
        gaps = [math.log(b / a) for a, b in zip(ticks, ticks[1:])]
        assert 1 in ticks and len(ticks) >= 2 and min(gaps) >= math.log(hi / lo) / 7, (lo, hi, ticks)
    assert spaced_ticks(0.7, 6.2) == [1, 2, 3, 5]
