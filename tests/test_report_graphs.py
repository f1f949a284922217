"""The report names the graph each answer comes from (issue 44, part 3; analysis/graphs.py,
analysis/report/first_screen.py with_graphs): the line built from a dataset's meta.json, the aggregate's
datasets.json (the shape read only where meta.json has the runs' content hash), and a report
on two graphs answering per graph, made from the saved schema-1 result (tests/data/schema1)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from analysis import aggregate, graphs
from analysis.report import first_screen, render
from runners import datasets as D

SCHEMA_1 = Path(__file__).resolve().parent / "data" / "schema1" / "result.json"


def meta(**over) -> dict:
    """A meta.json as runners.datasets writes it, with the fields the line reads."""
    m = {"format_version": 1, "name": "small", "num_nodes": 20_000, "num_edges": 400_000, "num_features": 64,
         "num_classes": 8, "content_hash": "0123456789abcdef" * 4,
         "adjacency": {"layout": "csc", "symmetric": True},
         "source": {"kind": "synthetic"},
         "stats": {"in_degree": {"min": 1, "median": 17.0, "mean": 20.0, "max": 131}, "edge_homophily": 0.6237}}
    for key, value in over.items():
        m[key] = value
    return m


def record(m: dict, runs=4) -> dict:
    return {"name": m["name"], "content_hash": m["content_hash"], "runs": runs, "shape": graphs.shape(m), "why": None}


# ----------------------------------------------------------------------------- the line

def test_the_line_from_a_meta_dict():
    assert graphs.line("small", [record(meta())]) == (
        "Graph: small — 20,000 nodes, 400,000 edges, mean degree 20 (max 131), 64 features, 8 classes, "
        "homophily 0.62 · content hash 0123456789ab")


def test_the_line_says_what_kind_of_graph_and_keeps_real_numbers():
    big = meta(name="reddit-shape", num_nodes=232_965, num_edges=114_615_892,
               stats={"in_degree": {"mean": 491.98, "max": 21_657}, "edge_homophily": 0.754})
    assert "232,965 nodes, 114,615,892 edges, mean degree 492 (max 21,657)" in graphs.line("reddit-shape", [record(big)])
    twin = meta(name="g-twin", source={"kind": "twin", "twin_of": {"name": "g", "content_hash": "f" * 64}},
                stats={"in_degree": {"mean": 2.5, "max": 9}, "edge_homophily": 0.1})
    assert graphs.line("g-twin", [record(twin)]).startswith(
        "Graph: g-twin (synthetic twin of g) — 20,000 nodes, 400,000 edges, mean degree 2.5 (max 9)")
    directed = meta(name="d", source={"kind": "imported"}, adjacency={"symmetric": False}, stats={})
    text = graphs.line("d", [record(directed)])
    assert text.startswith("Graph: d (imported) — 20,000 nodes, 400,000 directed edges, mean degree 20, 64 features")
    assert "homophily" not in text and "max" not in text  # not recorded: not invented


def test_without_a_shape_the_line_says_why_and_several_versions_are_named():
    gone = {"name": "g", "content_hash": "a" * 64, "runs": 3, "shape": None, "why": "no readable meta.json in x/g"}
    assert graphs.line("g", [gone]) == "Graph: g — shape unknown: no readable meta.json in x/g · content hash aaaaaaaaaaaa"
    newer = {**record(meta(name="g", content_hash="b" * 64)), "runs": 1}
    text = graphs.line("g", [newer, gone])
    assert text.startswith("Graph: g — shape unknown") and text.endswith(
        "its runs read 2 versions of it: aaaaaaaaaaaa (3 runs), bbbbbbbbbbbb (1 run)")
    assert graphs.line("g", []) == "Graph: g — shape unknown: no record of it in the aggregate"
    # skipped runs read no graph (no hash; seen in the first GPU sweep as "2 versions of it: None (14 runs)")
    unread = {"name": "g", "content_hash": None, "runs": 14, "shape": None, "why": "no readable meta.json in x/g"}
    assert graphs.line("g", [unread, newer]) == graphs.line("g", [newer])
    assert "versions" not in graphs.line("g", [unread, newer])


# ----------------------------------------------------------------------------- aggregate and report

@pytest.fixture(scope="module")
def two_graphs(tmp_path_factory):
    """The saved schema-1 result (PyG on small) as run on small, on small's twin, and on a graph
    whose files changed since (meta.json with another hash), aggregated."""
    tmp = tmp_path_factory.mktemp("graphs")
    data_root = tmp / "datasets"
    D.prepare("small", data_root)
    D.make_twin("small", "small-twin", data_root)
    D.make_twin("small", "changed", data_root, seed=3)
    base = json.loads(SCHEMA_1.read_text())
    assert base["env"]["dataset_hash"] == D.read_meta(data_root / "small")["content_hash"]
    runs = tmp / "runs"
    for name, digest in (("small", None), ("small-twin", None), ("changed", "e" * 64)):
        data = copy.deepcopy(base)
        data["config"].update(dataset=name, data_root=str(data_root))
        data["env"]["dataset_hash"] = digest or D.read_meta(data_root / name)["content_hash"]
        data["run_id"] = f"{name}-{base['run_id']}"
        (runs / name).mkdir(parents=True)
        (runs / name / "result.json").write_text(json.dumps(data))
    agg = aggregate.aggregate([runs])
    assert agg.invalid.empty, agg.invalid.to_dict("records")
    agg.write(tmp / "aggregate")
    return tmp, data_root, aggregate.Aggregate.load(tmp / "aggregate")


def test_datasets_json_has_each_graphs_shape_only_under_its_hash(two_graphs):
    tmp, data_root, agg = two_graphs
    recs = {r["name"]: r for r in agg.datasets}
    assert set(recs) == {"small", "small-twin", "changed"}
    small = D.read_meta(data_root / "small")
    assert recs["small"]["shape"] == graphs.shape(small) and recs["small"]["runs"] == 1
    assert recs["small"]["meta_path"] == str(data_root / "small" / "meta.json")
    assert recs["small-twin"]["shape"]["kind"] == "twin" and recs["small-twin"]["shape"]["twin_of"] == "small"
    assert recs["changed"]["shape"] is None
    assert "has another content hash" in recs["changed"]["why"] and "changed since these runs" in recs["changed"]["why"]


def test_answers_per_graph_and_a_line_each(two_graphs):
    _, data_root, agg = two_graphs
    top = first_screen.from_aggregate(agg)
    assert [g["name"] for g in top["graphs"]] == [g["name"] for g in top["per_graph"]]
    assert {g["name"] for g in top["per_graph"]} == {"small", "small-twin", "changed"}
    assert top["graphs"][0]["name"] in top["experiment"]  # the main experiment's graph first
    for g in top["per_graph"]:
        assert f"dataset {g['name']}" in g["experiment"] and g["n_runs"] == 1
        assert [a.key for a in g["answers"]] == [a.key for a in top["answers"]]
    small = D.read_meta(data_root / "small")
    line = next(g["line"] for g in top["graphs"] if g["name"] == "small")
    assert line == (f"Graph: small — 6,000 nodes, {small['num_edges']:,} edges, mean degree 10 "
                    f"(max {small['stats']['in_degree']['max']}), 64 features, 10 classes, "
                    f"homophily {small['stats']['edge_homophily']:.2f} · content hash {small['content_hash'][:12]}")


def test_the_report_page_names_every_graph_on_its_first_screen(two_graphs):
    tmp, _, agg = two_graphs
    page = render.render(agg, tmp / "report" / "index.html", tmp / "report").read_text()
    first = re.search(r'<section id="answers">(.*?)</section>', page, re.S).group(1)
    assert "These runs read 3 graphs:" in first and "each has its own answers" in first
    lines = re.findall(r'<p class="graph"><b>(.*?)</b></p>', first)
    assert len(lines) == 3 and all(t.startswith("Graph: ") for t in lines)
    assert any(t.startswith("Graph: small-twin (synthetic twin of small) — 6,000 nodes") for t in lines)
    assert any(t.startswith("Graph: changed — shape unknown: ") for t in lines)
    assert first.count('<dl class="qa">') == 3


def test_one_graph_gets_one_line_and_one_set_of_answers(two_graphs, tmp_path):
    tmp, _, _ = two_graphs
    agg = aggregate.aggregate([tmp / "runs" / "small"])
    page = render.render(agg, tmp_path / "index.html", tmp_path).read_text()
    first = re.search(r'<section id="answers">(.*?)</section>', page, re.S).group(1)
    assert "These runs read" not in first and first.count('<dl class="qa">') == 1
    assert re.search(r'</p>\s*<p class="graph">Graph: small — 6,000 nodes, [\d,]+ edges, mean degree 10 \(max \d+\), '
                     r'64 features, 10 classes, homophily 0\.\d\d · content hash 074894c41190</p>', first)
