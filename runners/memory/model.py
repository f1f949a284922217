"""The pre-flight model of one run's peak host memory.

The model adds up what the process tree of a run holds at its worst moment:
- a per-process baseline (interpreter + torch + framework + process group), measured here
  (the framework's memory traits, runners/adapters/registry.py) for the process that starts
  the ranks (torchrun's agent, or runners.launch.spawn, which imports torch too), each rank and
  each loader worker;
- the dataset: memory-mapped and shared by every process (counted once), plus PyG's
  `share_memory_()` copy of the adjacency into /dev/shm, once per rank, when the rank has
  loader workers;
- mini-batches in flight: each loader worker builds one batch and the loader keeps
  prefetch_factor batches per worker waiting, each batch carrying the features of every
  sampled node (batch size x fan-outs, bounded by the graph's node count);
- the rank's own compute memory (activations and their gradients), a rough term, and its
  parameters five times over (weights, DDP's gradient buckets, gradients, Adam's moments);
  both are host memory only for CPU processes (on GPUs they live in device memory).
It is an estimate meant to show which term grows with which setting (ranks, workers,
batch size), not a byte-exact prediction; result.json carries it next to the measured peak.
"""

from __future__ import annotations

from runners.memory.units import fmt_bytes

PREFETCH_FACTOR = 2  # torch.utils.data.DataLoader's default; neither adapter changes it


def hop_reach(batch_size: int, fanouts: list, num_nodes: int) -> list:
    """Nodes within 0, 1, .., L hops of a batch's seeds (upper bounds, capped at the graph's size)."""
    frontier, nodes, reach = batch_size, batch_size, [min(batch_size, num_nodes or batch_size)]
    for f in fanouts:
        frontier *= f if f > 0 else 50  # -1 = all neighbours: take a generous mean degree
        nodes += frontier
        reach.append(min(nodes, num_nodes or nodes))
    return reach


def batch_bounds(batch_size: int, fanouts: list, num_nodes: int, num_edges: int) -> tuple:
    """(nodes, edges) one mini-batch can reach: seeds x fan-outs, hop by hop, bounded by the graph."""
    reach = hop_reach(batch_size, fanouts, num_nodes)
    edges = sum(reach[k] * (f if f > 0 else 50) for k, f in enumerate(fanouts))
    return reach[-1], min(edges, num_edges or edges)


def model_peak(cfg, graph_meta: dict) -> dict:
    """Modelled peak host memory of the run's process tree on this node, with its terms."""
    from runners.adapters import MEMORY_TRAITS

    traits = MEMORY_TRAITS[cfg.framework]
    n, e = graph_meta.get("num_nodes", 0), graph_meta.get("num_edges", 0)
    feats = graph_meta.get("num_features", 0)
    nodes, edges = batch_bounds(cfg.batch_size, cfg.fanouts, n, e)
    # node ids and labels (int64) + the framework's edge structure; features are float32
    structure_bytes = nodes * 16 + edges * traits["edge_bytes"]
    batch_bytes = nodes * feats * 4 + structure_bytes
    ranks, workers = cfg.devices, cfg.workers
    base = traits["baseline_bytes"]
    dataset_bytes = graph_meta.get("dataset_bytes") or 0
    adjacency_bytes = graph_meta.get("adjacency_bytes") or 0
    copies_per_rank = adjacency_bytes if (traits["copies_adjacency_with_workers"] and workers > 0) else 0
    waiting, in_flight_per_rank = _batches_in_flight(traits, workers, batch_bytes, structure_bytes)
    compute_per_rank, params_per_rank = _compute_per_rank(cfg, traits, graph_meta, nodes)
    terms = {
        # the one-node starter (runners.launch.spawn) imports torch as torchrun's agent does
        "agent_baseline": base["agent"],
        "rank_baseline": ranks * base["rank"],
        "worker_baseline": ranks * workers * base["worker"],
        "dataset_shared": dataset_bytes,
        "dataset_copies": ranks * copies_per_rank,
        "batches_in_flight": ranks * in_flight_per_rank,
        "compute": ranks * compute_per_rank,
        "parameters_optimizer": ranks * params_per_rank,
    }
    return {
        "total_bytes": int(sum(terms.values())),
        "terms_bytes": {k: int(v) for k, v in terms.items()},
        "inputs": {"ranks": ranks, "workers_per_rank": workers, "prefetch_factor": PREFETCH_FACTOR,
                   "batch_nodes_bound": int(nodes), "batch_edges_bound": int(edges),
                   "batch_bytes": int(batch_bytes), "batch_structure_bytes": int(structure_bytes),
                   "batches_waiting_per_rank": waiting,
                   "workers_gather_features": traits["workers_gather_features"],
                   "dataset_bytes": int(dataset_bytes), "compute_in": "gpu memory (not counted)"
                   if cfg.device_type == "cuda" else "host memory",
                   "dataset_copy_per_rank_bytes": int(copies_per_rank),
                   "dataset_copy_reason": (traits["adjacency_copy_reason"] if copies_per_rank else
                                           "memory-mapped, shared by every process"),
                   "baseline_bytes": dict(base)},
    }


def _batches_in_flight(traits: dict, workers: int, batch_bytes: int, structure_bytes: int) -> tuple:
    """(batches waiting in one rank's loader, bytes of all its batches in flight)."""
    # Each worker builds one batch while prefetch_factor finished ones wait; the rank holds the
    # one in use and receives/builds the next.
    waiting = workers * (PREFETCH_FACTOR + 1)
    if traits["workers_gather_features"]:
        return waiting, (waiting + 2) * batch_bytes
    # workers hand over structure only; the rank gathers features for the batch in use
    return waiting, waiting * structure_bytes + 2 * batch_bytes


def _compute_per_rank(cfg, traits: dict, graph_meta: dict, nodes: int) -> tuple:
    """(activation bytes, parameter + optimiser-state bytes) one rank holds in host memory;
    both 0 on GPUs, where they live in device memory."""
    from runners.adapters import layer_shapes

    feats = graph_meta.get("num_features", 0)
    shapes = layer_shapes(cfg.model, feats, cfg.hidden, graph_meta.get("num_classes", 0), cfg.layers, cfg.heads)
    reach = hop_reach(cfg.batch_size, cfg.fanouts, graph_meta.get("num_nodes", 0))
    L = len(shapes)
    # Layer i's outputs: every sampled node for PyG (unless trimmed), the nodes still needed
    # (within L-1-i hops) for DGL's shrinking blocks. Output, its gradient and one intermediate.
    rows = [nodes if (traits["all_nodes_every_layer"] and not cfg.pyg_trim) else reach[min(L - 1 - i, len(reach) - 1)]
            for i in range(L)]
    compute = sum(r * d_out * h for r, (_, d_out, h) in zip(rows, shapes)) * 4 * 3
    if cfg.model == "sage":  # neighbour + root weight, bias
        params = sum(2 * d_in * d_out + d_out for d_in, d_out, _ in shapes)
    else:  # weight, two attention vectors, bias per head
        params = sum(d_in * d_out * h + 3 * d_out * h for d_in, d_out, h in shapes)
    if cfg.device_type == "cuda":  # activations and optimiser state live in GPU memory
        return 0, 0
    # weights + DDP's gradient buckets + gradients + Adam's two moments, float32
    return compute, params * 4 * 5


def describe_model(model: dict) -> str:
    t = model["terms_bytes"]
    parts = ", ".join(f"{k} {fmt_bytes(v)}" for k, v in t.items() if v)
    return f"modelled peak host memory {fmt_bytes(model['total_bytes'])} ({parts})"

