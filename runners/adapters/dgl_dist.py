"""DistDGL (`dgl.distributed`): partitioning the canonical graph for the partitioned strategy.

`partition`: `dgl.distributed.partition_graph` of the canonical graph into P partitions
(METIS or random), with the mapping between the canonical node ids and DGL's reshuffled ones
(`new_ids.npy`: canonical -> DGL; `orig_ids.npy`: DGL -> canonical, both beside the partitions).
The cache, hashing and quality are runners/partitions.py's.
"""

from __future__ import annotations

import os

os.environ.setdefault("DGLBACKEND", "pytorch")

import json  # noqa: E402
from pathlib import Path  # noqa: E402

import dgl  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402


GRAPH_NAME = "gnnscale"  # DGL's graph name: its partition config is GRAPH_NAME.json
PART_CONFIG = f"{GRAPH_NAME}.json"
NEW_IDS, ORIG_IDS = "new_ids.npy", "orig_ids.npy"


# -- partitioning ----------------------------------------------------------------------------

def partition(graph, parts: int, method: str, out: Path) -> dict:
    """Partition the canonical `graph` into `out` (DGL's files, plus the id maps); returns the
    canonical node -> partition assignment and each partition's inner and halo counts."""
    from runners.adapters.dgl_data import to_dgl_graph

    g = to_dgl_graph(graph)
    # partition_graph gathers features per partition (a copy each); the CSC graph has every
    # format allowed, and DGL makes the COO it partitions from.
    orig_nids, _ = dgl.distributed.partition_graph(
        g, GRAPH_NAME, parts, str(out), num_hops=1, part_method=method, return_mapping=True)
    orig = orig_nids.numpy().astype(np.int64)  # DGL id -> canonical id
    new = np.empty_like(orig)
    new[orig] = np.arange(len(orig), dtype=np.int64)
    np.save(out / ORIG_IDS, orig)
    np.save(out / NEW_IDS, new)
    conf = json.loads((out / PART_CONFIG).read_text())
    ranges = conf["node_map"]["_N"]  # per partition [start, end) of DGL ids
    assignment = np.empty(len(orig), dtype=np.int64)
    per_part = []
    for p, (start, end) in enumerate(ranges):
        assignment[orig[start:end]] = p
        part_g = dgl.load_graphs(str(out / f"part{p}" / "graph.dgl"))[0][0]
        inner = int(part_g.ndata["inner_node"].sum())
        per_part.append({"part": p, "inner_nodes": inner, "halo_nodes": int(part_g.num_nodes()) - inner,
                         "local_edges": int(part_g.num_edges()),
                         "inner_edges": int(part_g.edata["inner_edge"].sum())})
    return {"assignment": assignment, "per_part": per_part, "part_config": PART_CONFIG,
            "graph_name": GRAPH_NAME, "dgl_version": dgl.__version__}
