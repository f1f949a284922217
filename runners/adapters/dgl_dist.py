"""DistDGL (`dgl.distributed`): partitioning, the graph server, and the partitioned trainer's adapter.

The framework-specific half of the `partitioned` strategy (the launcher's half is
runners/partitioned/server.py, the partition cache runners/partitioned/split.py):
- `partition`: `dgl.distributed.partition_graph` of the canonical graph into P partitions
  (METIS or random), with the mapping between the canonical node ids and DGL's reshuffled ones;
- `serve` (`python -m runners.adapters.dgl_dist serve`): one DistGraphServer, configured by the
  DGL_* variables the launcher sets (those DGL's tools/launch.py would set over ssh);
- `DistDglAdapter`: a trainer over DistGraph with DistNodeDataLoader: neighbours sampled by the
  partitions' servers over RPC (the loader wait phase), features and labels fetched from them
  (the prepare phase), the same model, fan-outs and start weights as the replicated DGL runs.

Node ids: DGL renumbers nodes so that each partition owns a contiguous range. The suite keeps
canonical ids everywhere it records them (seed shares, seed_id_sum, validation splits) and maps
them to DGL's ids only where DGL reads them (`new_ids.npy`: canonical -> DGL; `orig_ids.npy`:
DGL -> canonical, both beside the partitions).
"""

from __future__ import annotations

import os

os.environ.setdefault("DGLBACKEND", "pytorch")

import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import dgl  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from runners.adapters import Adapter, Batch, block_work, layer_choice  # noqa: E402

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


# -- the graph server ------------------------------------------------------------------------

def serve() -> None:
    """Run this host's DistGraphServer until the trainers shut it down (DGL's initialize in the
    server role never returns: it serves, then exits)."""
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    print(f"[gnnscale] DistGraphServer {os.environ.get('DGL_SERVER_ID')} pid {os.getpid()} on "
          f"{os.uname().nodename}: {os.environ.get('DGL_CONF_PATH')}, waiting for "
          f"{os.environ.get('DGL_NUM_CLIENT')} clients", flush=True)
    dgl.distributed.initialize(os.environ["DGL_IP_CONFIG"])


# -- the trainer -----------------------------------------------------------------------------

class DistDglAdapter(Adapter):
    """A trainer of the partitioned strategy: DistGraph + DistNodeDataLoader, DDP over gloo."""

    name = "dgl"

    @staticmethod
    def before_process_group(cfg) -> None:
        """DGL's client start (connect to every server) must come before init_process_group."""
        import atexit

        dgl.distributed.initialize(os.environ["DGL_IP_CONFIG"])
        # DGL registers exit_client at exit: a barrier with every other trainer. A rank that
        # failed must not wait in it for ranks that may be dead (close() calls it on success).
        atexit.unregister(dgl.distributed.exit_client)

    def __init__(self, cfg, graph, rank, world_size, device):
        super().__init__(cfg, graph, rank, world_size, device)
        if device.type != "cpu":
            raise RuntimeError("the partitioned strategy trains on CPU processes (DistNodeDataLoader is CPU-only)")
        part_config = Path(os.environ["DGL_CONF_PATH"])
        self.g = dgl.distributed.DistGraph(GRAPH_NAME, part_config=str(part_config))
        self.part = int(self.g.get_partition_book().partid)
        self.parts = int(self.g.get_partition_book().num_partitions())
        # canonical <-> DGL ids (memory-mapped: a node's entry is read when it is needed)
        self.new_ids = np.load(part_config.parent / NEW_IDS, mmap_mode="r")
        self.orig_ids = np.load(part_config.parent / ORIG_IDS, mmap_mode="r")
        train = np.asarray(graph.train_idx)
        owner = self.g.get_partition_book().nid2partid(torch.from_numpy(self.new_ids[train])).numpy()
        self.train_by_part = [train[owner == p] for p in range(self.parts)]
        self.trainers_per_part = cfg.devices  # one partition per host; --devices trainers on each
        self.local = rank % cfg.devices
        from runners.adapters.dgl import MODEL_BUILDERS
        from runners.adapters.registry import MODELS

        self.loops = MODELS[cfg.model].self_loops and cfg.self_loops
        self.choices = {
            "strategy": "partitioned: DistDGL, one partition per host served by a DistGraphServer",
            "partitions": self.parts, "part_method": cfg.part_method, "trainer_partition": self.part,
            "graph_input": "dgl.distributed.DistGraph over the host's partition (shared memory with its server)",
            "sampler": "dgl.dataloading.NeighborSampler + DistNodeDataLoader (sampling by the servers over RPC, "
                       "num_samplers 0)",
            "layer_compute": "blocks shrink layer by layer",
            "layer": layer_choice(MODEL_BUILDERS, cfg.model),
            "seed_split": ("per epoch each partition's training nodes permuted from (seed, epoch, partition) and "
                           "split between its trainers, every share padded by wrapping to the largest share "
                           "(equal steps on every rank); the epoch's seed set is the whole training split, as "
                           "replicated, but which rank trains a seed follows the partitioning"),
            "feature_gather": "DistGraph.ndata['feat'][input_nodes] in the prepare phase (remote rows over RPC)",
            "self_loops": MODEL_BUILDERS[cfg.model].self_loops if self.loops else "none",
            "batch_prepare": "features and labels fetched from the partitions' servers"
                             + (", self-loops added to every block" if self.loops else ""),
            "sampled_edges": "sum of the blocks' edges: a node's neighbours count once per layer they are sampled in",
            "train_nodes_per_partition": [int(len(t)) for t in self.train_by_part],
        }

    def epoch_share(self, epoch: int) -> np.ndarray:
        """This rank's canonical training seeds in `epoch` (see choices['seed_split'])."""
        per_trainer = max(-(-len(t) // self.trainers_per_part) for t in self.train_by_part)
        mine = self.train_by_part[self.part]
        if len(mine) == 0:  # a partition without training nodes: draw from the whole split
            mine = np.concatenate(self.train_by_part)
        order = np.random.default_rng([self.cfg.seed, epoch, self.part]).permutation(len(mine))
        padded = np.resize(mine[order], per_trainer * self.trainers_per_part)
        return padded[self.local * per_trainer:(self.local + 1) * per_trainer]

    def seed(self, seed: int) -> None:
        dgl.seed(seed)

    def build_model(self):
        from runners.adapters.dgl import DglModel

        c = self.cfg
        return DglModel(c.model, self.graph.num_features, c.hidden, self.graph.num_classes, c.layers, c.heads,
                        c.dropout)

    def _loader(self, canonical, batch_size: int):
        seeds = torch.from_numpy(np.ascontiguousarray(self.new_ids[np.asarray(canonical)]))
        sampler = dgl.dataloading.NeighborSampler(list(self.cfg.fanouts_framework), replace=self.cfg.replace)
        return dgl.dataloading.DistNodeDataLoader(self.g, seeds, sampler, batch_size=batch_size, shuffle=False,
                                                  drop_last=False)

    def train_loader(self, rank_seeds, worker_init_fn):
        return EpochLoader(self, rank_seeds)

    def eval_loader(self, seeds):
        return self._loader(seeds, self.cfg.eval_batch_size)

    def unpack(self, raw) -> Batch:
        from runners.adapters.dgl import add_self_loops

        input_nodes, output_nodes, blocks = raw
        x = self.g.ndata["feat"][input_nodes]
        y = self.g.ndata["label"][output_nodes]
        work = block_work(blocks)
        if self.loops:
            blocks = [add_self_loops(b) for b in blocks]
        seed_ids = torch.from_numpy(np.asarray(self.orig_ids[output_nodes.numpy()]))
        return Batch(inputs=(blocks, x), labels=y, seed_nodes=int(output_nodes.numel()),
                     sampled_nodes=int(input_nodes.numel()), sampled_edges=sum(w.edges for w in work),
                     seed_ids=seed_ids,
                     layers=work, feature_bytes=x.numel() * x.element_size())

    def to_device(self, batch: Batch) -> Batch:
        return batch

    def forward(self, model, inputs):
        blocks, x = inputs
        return model(blocks, x)

    def close(self) -> None:
        """Leave DGL's services: a barrier with every trainer, then rank 0 shuts the servers down."""
        dgl.distributed.exit_client()


class EpochLoader:
    """A DistNodeDataLoader per epoch over the harness's share as it is when the epoch starts
    (the harness rewrites it in place; DGL's loader would keep its own copy)."""

    def __init__(self, adapter: DistDglAdapter, rank_seeds):
        self.adapter, self.rank_seeds = adapter, rank_seeds

    def __iter__(self):
        return iter(self.adapter._loader(self.rank_seeds.numpy(), self.adapter.cfg.batch_size))

    def __len__(self) -> int:
        return -(-len(self.rank_seeds) // self.adapter.cfg.batch_size)


ADAPTER = DistDglAdapter

if __name__ == "__main__":
    if sys.argv[1:] != ["serve"]:
        sys.exit("usage: python -m runners.adapters.dgl_dist serve   (configured by the DGL_* variables)")
    serve()
