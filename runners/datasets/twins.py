"""Synthetic twins: a generated graph shaped like a user's (`python -m runners.datasets twin
SOURCE --name NAME`; docs/datasets.md "Synthetic twins").

A twin has the source's node count, edge count, degree distribution, feature width, class
count, class sizes, split sizes and edge homophily, and nothing else of it: it is made by the
suite's generator (generators.py, a degree-corrected block model) from a few fitted
parameters, so it can be shared where the graph itself cannot. Its meta.json records those
parameters (`source.params`: generate() of them makes the same arrays again), the source's
name and content hash and the source's summary statistics (`source.twin_of`), never the
source's files, paths or arrays.

Fitting (`fit`): class sizes, split sizes, node, edge, feature and class counts are copied.
The node weights are the source's degree quantile function (at `degree_grid`, dense in the
tail), minus the one edge every generated node proposes; the intra-class draw probability
starts from the homophily the class sizes give by chance. Each round generates the graph
(without features) and corrects both from what it measures: the weights by the ratio of
target to measured degree quantiles, the probability by the homophily missed. The round
closest to the source (`loss`) is kept.

`TOLERANCES` says how close each statistic must be; `compare` checks a twin against them
and `python -m runners.datasets info` shows the table. What the generator cannot match is
in `CANNOT_MATCH` (always) and in the twin's `source.fit.cannot_match` (for its source).
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import Optional

import numpy as np

from runners.datasets.format import (DATASET_NAMES, DEFAULT_ROOT, SPLITS, DatasetError, Graph, _stats,
                                     edge_homophily, load, read_meta, resolve)
from runners.datasets.generators import GENERATOR, GENERATOR_VERSION, SyntheticSpec, generate, generate_graph
from runners.datasets.importers import check_import_name
from runners.datasets.writing import _lock, write_dataset

log = logging.getLogger("gnnscale.datasets")

TWIN_KIND = "twin"
QUANTILES = (50, 90, 99)  # degree percentiles compared and shown

# How close a twin must be to its source. kind "exact": equal; "rel": |twin - source| within
# `rel` of the source, or `abs` whichever is larger; "abs": within `abs`. The degree quantiles
# are integers (a difference of 1 at a median of 3 is 33 %), hence their floor of 1.
TOLERANCES = {
    "nodes": {"kind": "exact"},
    "edges": {"kind": "rel", "rel": 0.005},
    "mean_degree": {"kind": "rel", "rel": 0.05},
    **{f"degree_p{q}": {"kind": "rel", "rel": 0.10, "abs": 1.0} for q in QUANTILES},
    "max_degree": {"kind": "rel", "rel": 0.25},
    "features": {"kind": "exact"},
    "classes": {"kind": "exact"},
    "class_sizes": {"kind": "exact"},
    "split_sizes": {"kind": "exact"},
    "homophily": {"kind": "abs", "abs": 0.05},
}

CANNOT_MATCH = (
    "features: values are synthetic (class centroid plus Gaussian noise, feature_snr), not the "
    "source's; only their width is matched",
    "degree and class are independent in the twin (in the source, hubs may sit in some classes)",
    "structure beyond degrees and classes: triangles and clustering, communities inside a class, "
    "which classes link to which (other-class edges go to any class), node order",
    "every twin node has at least one edge: isolated nodes become degree-1 nodes",
    "the twin is undirected: a directed source gives a symmetric twin with its in-degree distribution",
    "homophily below what random edges give for the class sizes (sum of squared class shares): "
    "the generator draws other-class partners from the whole graph, it cannot avoid a node's class",
    "the largest degree is one node: it is matched within 25 %, not exactly",
)


# ----------------------------------------------------------------------------- statistics

def degree_grid(num_nodes: int) -> np.ndarray:
    """Probabilities at which the degree quantile function is fitted and recorded: every
    percentile to 99, then four points per decade of 1 - p down to about 1 / num_nodes, then 1."""
    body = np.arange(100) / 100
    decades = max(int(np.ceil(np.log10(max(num_nodes, 100)))) - 2, 1)
    tail = 1 - 10.0 ** (-2 - np.arange(1, 4 * decades + 1) / 4)
    return np.unique(np.round(np.concatenate([body, tail, [1.0]]), 12))


def summary(indptr, labels, num_features: int, num_classes: int, homophily: float, splits: dict) -> dict:
    """The statistics a twin is fitted to and compared on (in-degrees: the CSC columns)."""
    deg = np.diff(np.asarray(indptr))
    n = len(deg)
    return {
        "nodes": int(n),
        "edges": int(deg.sum()),
        "mean_degree": round(float(deg.mean()), 4) if n else 0.0,
        "min_degree": int(deg.min()) if n else 0,
        **{f"degree_p{q}": round(float(np.percentile(deg, q)), 2) for q in QUANTILES},
        "max_degree": int(deg.max()) if n else 0,
        "isolated_nodes": int(np.count_nonzero(deg == 0)),
        "features": int(num_features),
        "classes": int(num_classes),
        "class_sizes": np.bincount(np.asarray(labels), minlength=num_classes).tolist(),
        "split_sizes": [int(len(splits[k])) for k in SPLITS],
        "homophily": round(float(homophily), 4),
    }


def graph_summary(graph: Graph, homophily: Optional[float] = None) -> dict:
    """summary() of a loaded dataset; homophily measured unless given."""
    if homophily is None:
        homophily = edge_homophily(graph.indptr, graph.indices, graph.labels)
    return summary(graph.indptr, graph.labels, graph.num_features, graph.num_classes, homophily,
                   {k: getattr(graph, k) for k in SPLITS})


def within(stat: str, source, twin) -> bool:
    """Whether the twin's value of `stat` is within TOLERANCES of the source's."""
    tol = TOLERANCES[stat]
    if tol["kind"] == "exact":
        return source == twin
    allowed = max(tol.get("rel", 0) * abs(source), tol.get("abs", 0))
    return abs(twin - source) <= allowed + 1e-9


def tolerance_text(stat: str) -> str:
    tol = TOLERANCES[stat]
    if tol["kind"] == "exact":
        return "exactly"
    if tol["kind"] == "abs":
        return f"within {tol['abs']:g}"
    rel = f"within {tol['rel'] * 100:g} %"
    return rel + (f" or {tol['abs']:g}" if tol.get("abs") else "")


LABELS = {"nodes": "nodes", "edges": "edges", "mean_degree": "mean degree",
          **{f"degree_p{q}": f"degree p{q}" for q in QUANTILES}, "max_degree": "max degree",
          "features": "features", "classes": "classes", "class_sizes": "class sizes",
          "split_sizes": "split sizes (train/val/test)", "homophily": "edge homophily"}
SHOWN = ("nodes", "edges", "mean_degree", *(f"degree_p{q}" for q in QUANTILES), "max_degree",
         "min_degree", "isolated_nodes", "features", "classes", "class_sizes", "split_sizes", "homophily")


def compare(source: dict, twin: dict) -> list:
    """One row per statistic: {stat, label, source, twin, tolerance, ok}; ok is None for the
    statistics shown but not required (min degree, isolated nodes)."""
    rows = []
    for stat in SHOWN:
        req = stat in TOLERANCES
        rows.append({"stat": stat, "label": LABELS.get(stat, stat.replace("_", " ")),
                     "source": source.get(stat), "twin": twin.get(stat),
                     "tolerance": tolerance_text(stat) if req else "shown only",
                     "ok": within(stat, source[stat], twin[stat]) if req and stat in source and stat in twin
                     else None})
    return rows


def _fmt(value) -> str:
    if isinstance(value, list):
        return "/".join(f"{v:,}" for v in value) if len(value) <= 3 else ",".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:,.4f}".rstrip("0").rstrip(".") if value != int(value) else f"{int(value):,}"
    if isinstance(value, int):
        return f"{value:,}"
    return "-" if value is None else str(value)


def comparison_table(source: dict, twin: dict) -> str:
    """compare() as aligned text; list-valued rows (class sizes) say whether they are equal."""
    lines = []
    for row in compare(source, twin):
        s, t = row["source"], row["twin"]
        if isinstance(s, list) and len(s) > 3:
            s, t = f"{len(s)} classes", ("the same" if s == t else f"differ: {_fmt(t)}")
        verdict = {True: "ok", False: "OFF", None: ""}[row["ok"]]
        lines.append((row["label"], _fmt(s), _fmt(t) if not isinstance(t, str) else t, row["tolerance"], verdict))
    head = ("statistic", "source", "twin", "must match", "")
    widths = [max(len(r[i]) for r in lines + [head]) for i in range(5)]
    out = []
    for r in [head] + lines:
        out.append(f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]:<{widths[3]}}  {r[4]}".rstrip())
    return "\n".join(out)


def info_text(meta: dict, path: Path) -> str:
    """The twin-vs-source table of a twin dataset (what `info` prints after meta.json): the
    twin's statistics measured from its files now, the source's as recorded when fitted."""
    twin_of = meta["source"]["twin_of"]
    graph = load(path)
    twin = graph_summary(graph, meta.get("stats", {}).get("edge_homophily"))
    head = (f"twin {meta['name']!r} of {twin_of.get('name')!r} (content hash {twin_of.get('content_hash')}), "
            f"fitted in {meta['source'].get('fit', {}).get('rounds_run')} round(s), seed {meta['source']['params'].get('seed')}")
    off = [r["label"] for r in compare(twin_of["summary"], twin) if r["ok"] is False]
    tail = ("every required statistic is within its tolerance" if not off
            else f"outside tolerance: {', '.join(off)} (see source.fit.cannot_match)")
    notes = meta["source"].get("fit", {}).get("cannot_match") or []
    return "\n".join([head, comparison_table(twin_of["summary"], twin), tail,
                      *(f"cannot match: {n}" for n in notes)])


# ----------------------------------------------------------------------------- fitting

def loss(target: dict, got: dict) -> float:
    """How far a round is from the source: the largest difference of the degree quantiles,
    the max degree, the mean degree and the homophily, each in units of its tolerance
    (<= 1: all within tolerance)."""
    worst = 0.0
    for stat in ("mean_degree", *(f"degree_p{q}" for q in QUANTILES), "max_degree", "homophily"):
        tol = TOLERANCES[stat]
        allowed = max(tol.get("rel", 0) * abs(target[stat]), tol.get("abs", 0), 1e-9)
        worst = max(worst, abs(got[stat] - target[stat]) / allowed)
    return round(worst, 4)


def _spec(graph: Graph, seed: int, feature_snr: float, homophily: float, grid, weights) -> SyntheticSpec:
    w = np.maximum.accumulate(np.maximum(weights, 1e-3))
    return SyntheticSpec(num_nodes=graph.num_nodes, num_edges=graph.num_edges, num_features=graph.num_features,
                         num_classes=graph.num_classes, seed=seed, homophily=round(float(homophily), 6),
                         feature_snr=feature_snr,
                         class_sizes=tuple(np.bincount(graph.labels, minlength=graph.num_classes).tolist()),
                         node_weights=tuple((float(p), round(float(v), 6)) for p, v in zip(grid, w)),
                         split_sizes=tuple(int(len(getattr(graph, k))) for k in SPLITS))


def fit(graph: Graph, seed: int = 0, rounds: int = 6, feature_snr: float = 1.0,
        target: Optional[dict] = None) -> tuple:
    """(spec, fit record) of the twin of `graph` (see the module's docstring). Deterministic
    from the graph, the seed and the number of rounds."""
    if rounds < 1:
        raise DatasetError(f"--rounds {rounds}: at least 1 round of fitting is needed")
    n = graph.num_nodes
    if n < 2 or graph.num_edges == 0:
        raise DatasetError(f"{graph.path}: a twin needs at least 2 nodes and one edge; "
                           f"{graph.name!r} has {n} nodes and {graph.num_edges} edges")
    target = target or graph_summary(graph)
    grid = degree_grid(n)
    want = np.quantile(np.diff(np.asarray(graph.indptr)), grid)
    shares = np.asarray(target["class_sizes"], dtype=np.float64) / n
    chance = float((shares ** 2).sum())  # homophily of edges that ignore the classes
    # Homophily below chance cannot be made (CANNOT_MATCH): the twin then gets the least the
    # generator makes (no intra-class draws), and the fit minds the degrees only.
    below_chance = target["homophily"] < chance
    p = 0.0 if below_chance else float(np.clip((target["homophily"] - chance) / max(1 - chance, 1e-9), 0, 1))
    weights = np.maximum(want - 1, 0.25)
    history, best = [], None
    for r in range(rounds):
        t0 = time.perf_counter()
        spec = _spec(graph, seed, feature_snr, p, grid, weights)
        got, d = _generate_round(graph, spec)
        step = {"round": r, "homophily_param": spec.homophily, **{k: got[k] for k in ROUND_STATS},
                "loss": loss({**target, "homophily": got["homophily"]} if below_chance else target, got),
                "seconds": round(time.perf_counter() - t0, 2)}
        history.append(step)
        log.info("  twin round %d: loss %.3f (%s)", r, step["loss"],
                 ", ".join(f"{k} {step[k]}" for k in ("mean_degree", "degree_p50", "degree_p90", "degree_p99",
                                                      "max_degree", "homophily")))
        if best is None or step["loss"] < best[0]["loss"]:
            best = (step, spec)
        if step["loss"] <= 0.5:  # well within every tolerance
            break
        got_q = np.quantile(d, grid)
        weights = np.maximum.accumulate(np.maximum(weights, 1e-3)) * (want + 1) / (got_q + 1)
        if not below_chance:
            p = float(np.clip(p + (target["homophily"] - step["homophily"]) / max(1 - chance, 1e-9), 0, 1))
    step, spec = best
    record = {"rounds": rounds, "rounds_run": len(history), "kept_round": step["round"], "loss": step["loss"],
              "chance_homophily": round(chance, 4), "history": history,
              "cannot_match": _cannot_match(graph, target, chance), "tolerances": TOLERANCES}
    return spec, record


# What each round of the fit records of the graph it generated.
ROUND_STATS = ("edges", "mean_degree", *(f"degree_p{q}" for q in QUANTILES), "max_degree", "homophily")


def _generate_round(graph: Graph, spec: SyntheticSpec) -> tuple:
    """One round's graph, generated from `spec`: (its summary, its in-degrees)."""
    labels, indptr, indices = generate_graph(spec)
    h = edge_homophily(indptr, indices, labels)
    got = summary(indptr, labels, graph.num_features, graph.num_classes, h,
                  {"train_idx": [], "val_idx": [], "test_idx": []})
    return got, np.diff(indptr)


def _cannot_match(graph: Graph, target: dict, chance: float) -> list:
    """What of the source no twin can have, in words (the fit record's `cannot_match`)."""
    cannot = []
    if target["homophily"] < chance:
        cannot.append(f"homophily {target['homophily']:.3f} is below the {chance:.3f} that the class sizes give "
                      "by chance: the twin gets the least the generator makes")
    if target["isolated_nodes"]:
        cannot.append(f"{target['isolated_nodes']} isolated node(s): every twin node has at least one edge")
    if graph.meta.get("adjacency", {}).get("symmetric") is False:
        cannot.append("the source is directed: the twin is symmetric, with the source's edge count and "
                      "in-degree distribution")
    return cannot


def _source_of(source, root) -> Graph:
    """The dataset a twin is fitted to, or DatasetError in one line naming it."""
    allowed = (f"allowed: {', '.join(DATASET_NAMES)} (prepared under {Path(root)}), the name of a dataset "
               f"imported under {Path(root)}, or the directory of a dataset (one holding meta.json)")
    try:
        path = resolve(str(source), root)
    except DatasetError:
        raise DatasetError(f"{Path(str(source)).absolute()}: no dataset {str(source)!r}; {allowed}") from None
    if not (path / "meta.json").is_file():
        hint = (f" (run: python -m runners.datasets prepare {path.name} --root {Path(root)})"
                if str(source) in DATASET_NAMES else "")
        raise DatasetError(f"{path.absolute()}: not a dataset (no meta.json){hint}; {allowed}")
    return load(path)


def make_twin(source, name: str, root=DEFAULT_ROOT, seed: int = 0, rounds: int = 6,
              feature_snr: float = 1.0, force: bool = False) -> Path:
    """Fit a twin to `source` (a dataset name under root or a dataset directory) and write it
    as `<root>/<name>/`. An existing `<root>/<name>` is refused, unless it is a twin and
    `force` is set; an imported dataset is never replaced. Returns the twin's path."""
    t0 = time.perf_counter()
    root = Path(root)
    final = check_import_name(name, root)
    if seed < 0:
        raise DatasetError(f"--seed {seed}: a seed is an integer >= 0")
    if not feature_snr > 0:
        raise DatasetError(f"--feature-snr {feature_snr}: must be above 0 (about 1: features alone predict "
                           "the class moderately)")
    graph = _source_of(source, root)
    if final.exists():
        kind = None
        try:
            kind = read_meta(final).get("source", {}).get("kind")
        except DatasetError:
            pass
        if kind != TWIN_KIND:
            raise DatasetError(f"{final}: a dataset named {name!r} exists and is not a twin"
                               f"{' (it was imported)' if kind == 'imported' else ''}; choose another name")
        if not force:
            raise DatasetError(f"{final}: a twin named {name!r} exists; add --force to make it again")
    if final.resolve() == graph.path.resolve():
        raise DatasetError(f"{final}: a twin cannot replace its own source; choose another name")
    target = graph_summary(graph)
    log.info("fitting a twin of %s (%d nodes, %d edges) ...", graph.path, graph.num_nodes, graph.num_edges)
    spec, record = fit(graph, seed, rounds, feature_snr, target)
    arrays = generate(spec)
    source_record = {"kind": TWIN_KIND, "generator": GENERATOR, "generator_version": GENERATOR_VERSION,
                     "params": spec.params(),
                     "twin_of": {"name": graph.name, "content_hash": graph.content_hash, "summary": target},
                     "fit": record}
    stats = {**_stats(arrays), "build_seconds": round(time.perf_counter() - t0, 2)}
    root.mkdir(parents=True, exist_ok=True)
    with _lock(root, name):
        for stale in root.glob(f".{name}.tmp-*"):  # a killed writer's leftovers: never a dataset
            shutil.rmtree(stale, ignore_errors=True)
        out = write_dataset(root, name, arrays, source_record, stats, num_classes=spec.num_classes)
    load(out)
    log.info("wrote the twin %s in %.1f s", out, time.perf_counter() - t0)
    return out
