"""The graphs the runs read, and the line the report's first screen gives each.

A run records its dataset's name and content hash (result.json config.dataset, config.data_root,
env.dataset_hash), not its shape. The aggregate (`collect`, `records`) reads the shape from the
dataset's meta.json under the data root the runs used, once per graph, and only where that
meta.json has the content hash the runs recorded: a graph changed, moved or prepared on another
machine is named with its hash and without a shape, never with another graph's. The records go
to the aggregate's datasets.json; the report turns each into one line (`line`):

    Graph: small — 6,000 nodes, 60,002 edges, mean degree 10 (max 150), 64 features, 10 classes,
    homophily 0.77 · content hash 074894c41190
"""

from __future__ import annotations

import json
from pathlib import Path

HASH_SHOWN = 12  # characters of a content hash in the line (the environment table has all of it)


def shape(meta: dict) -> dict:
    """A dataset's shape from its meta.json (runners/datasets/format.py write_dataset, stats)."""
    stats = meta.get("stats") or {}
    degree = stats.get("in_degree") or {}
    source = meta.get("source") or {}
    nodes, edges = int(meta["num_nodes"]), int(meta["num_edges"])
    return {
        "nodes": nodes, "edges": edges,
        "mean_degree": degree.get("mean", edges / nodes if nodes else None),
        "max_degree": degree.get("max"),
        "features": int(meta["num_features"]), "classes": int(meta["num_classes"]),
        "homophily": stats.get("edge_homophily"),
        "kind": source.get("kind"),
        "twin_of": (source.get("twin_of") or {}).get("name"),
        "directed": (meta.get("adjacency") or {}).get("symmetric") is False,
    }


def collect(seen: dict, data: dict) -> None:
    """Count one result's graph into `seen`: (name, content hash) -> {"runs", "data_roots"}."""
    cfg, env = data.get("config") or {}, data.get("env") or {}
    name = cfg.get("dataset")
    if not name:
        return
    entry = seen.setdefault((str(name), env.get("dataset_hash")), {"runs": 0, "data_roots": []})
    entry["runs"] += 1
    root = cfg.get("data_root")
    if root and root not in entry["data_roots"]:
        entry["data_roots"].append(root)


def _read_meta(path: Path):
    try:
        meta = json.loads((path / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def records(seen: dict) -> list:
    """datasets.json: one record per (name, content hash) the runs read, most runs first:
    {"name", "content_hash", "runs", "meta_path", "shape" or None, "why" (no shape) or None}.
    A data root recorded as a relative path is taken from the current directory (the sweep
    runs and aggregates from the repository root)."""
    out = []
    for (name, digest), entry in seen.items():
        rec = {"name": name, "content_hash": digest, "runs": entry["runs"], "meta_path": None, "shape": None,
               "why": None}
        other = None
        for root in entry["data_roots"] or ["results/datasets"]:
            path = Path(root) / name
            meta = _read_meta(path)
            if meta is None:
                continue
            if digest is not None and meta.get("content_hash") != digest:
                other = (path, meta.get("content_hash"))
                continue
            try:
                rec["shape"] = shape(meta)
            except (KeyError, TypeError, ValueError):
                continue
            rec["meta_path"] = str(path / "meta.json")
            break
        if rec["shape"] is None:
            where = " or ".join(str(Path(r) / name) for r in entry["data_roots"]) or f"results/datasets/{name}"
            rec["why"] = (f"{other[0] / 'meta.json'} has another content hash ({str(other[1])[:HASH_SHOWN]}): the "
                          "dataset changed since these runs" if other else
                          f"no readable meta.json in {where} (the dataset was moved, deleted or prepared elsewhere)")
        out.append(rec)
    return sorted(out, key=lambda r: (-r["runs"], r["name"], str(r["content_hash"])))


def _degree(v) -> str:
    return "n/a" if v is None else f"{v:,.0f}" if v >= 1000 else f"{v:.3g}"


def describe(s: dict) -> str:
    """'6,000 nodes, 60,002 edges, mean degree 10 (max 150), 64 features, 10 classes, homophily 0.77'."""
    parts = [f"{s['nodes']:,} nodes", f"{s['edges']:,} {'directed ' if s.get('directed') else ''}edges",
             f"mean degree {_degree(s.get('mean_degree'))}"
             + (f" (max {s['max_degree']:,})" if s.get("max_degree") is not None else ""),
             f"{s['features']:,} features", f"{s['classes']:,} classes"]
    if s.get("homophily") is not None:
        parts.append(f"homophily {s['homophily']:.2f}")
    return ", ".join(parts)


def line(name: str, recs: list) -> str:
    """The report's line for graph `name` from its records (one per content hash its runs read).
    Runs with no hash never read the graph (skipped, refused): they are no version of it."""
    recs = sorted(recs, key=lambda r: -r["runs"])
    if any(r["content_hash"] for r in recs):
        recs = [r for r in recs if r["content_hash"]]
    main = recs[0] if recs else {"shape": None, "content_hash": None, "why": "no record of it in the aggregate"}
    s = main["shape"]
    kind = ""
    if s and s.get("kind") == "twin":
        kind = f" (synthetic twin of {s['twin_of']})" if s.get("twin_of") else " (synthetic twin)"
    elif s and s.get("kind") == "imported":
        kind = " (imported)"
    text = f"Graph: {name}{kind} — " + (describe(s) if s else f"shape unknown: {main['why']}")
    if main["content_hash"]:
        text += f" · content hash {main['content_hash'][:HASH_SHOWN]}"
    if len(recs) > 1:
        text += ("; its runs read " + str(len(recs)) + " versions of it: "
                 + ", ".join(f"{str(r['content_hash'])[:HASH_SHOWN]} ({r['runs']} run{'' if r['runs'] == 1 else 's'})"
                             for r in recs))
    return text
