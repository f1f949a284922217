"""The work a step records (runners.adapters.Batch.work) is what each layer really computes on.

A fixed 8-node graph with every neighbour sampled (fan-outs -1,-1) makes the sampled subgraph
known by hand, so the counts each framework's adapter records from its own batch objects are
checked against numbers worked out here, for PyG untrimmed and trimmed, DGL's classic loader and
GraphBolt; a step through the real trimmed model checks that the recorded layers are the ones
trim_to_layer gives it.
"""

import os

import numpy as np
import pytest
import torch

os.environ.setdefault("DGLBACKEND", "pytorch")
pytest.importorskip("dgl")
pytest.importorskip("torch_sparse")

from runners.adapters import LayerWork, get_adapter_class  # noqa: E402
from runners.config import build_parser, config_from_args  # noqa: E402
from runners.datasets.format import Graph  # noqa: E402

FEATURES = 3
# Each node's in-neighbours (message sources): 0 <- 1, 2; 1 <- 3; 2 <- 3, 4; 3 <- 5; 4 <- 6; 5 <- 7; 7 <- 0
IN_NEIGHBOURS = {0: [1, 2], 1: [3], 2: [3, 4], 3: [5], 4: [6], 5: [7], 6: [], 7: [0]}

# Seed 0, two layers, all neighbours. Hop 1 reaches 1 and 2 over 2 edges; hop 2 reaches 3 and 4
# over the 3 edges into 1 and 2 (3->1, 3->2, 4->2). The subgraph: 5 nodes, 5 edges.
# PyG untrimmed: both layers run on all of it. Trimmed: the second layer drops hop 2 (3 nodes,
# the 2 hop-1 edges). DGL: the first block reads nodes 0-4 and writes 0, 1, 2 over 5 edges; the
# second reads 0, 1, 2 and writes the seed over 2 edges.
EXPECTED = {
    ("pyg", False): (LayerWork(5, 5, 5), LayerWork(5, 5, 5)),
    ("pyg", True): (LayerWork(5, 5, 5), LayerWork(3, 3, 2)),
    ("dgl", "classic"): (LayerWork(5, 3, 5), LayerWork(3, 1, 2)),
    ("dgl", "graphbolt"): (LayerWork(5, 3, 5), LayerWork(3, 1, 2)),
}


def tiny_graph() -> Graph:
    indptr = np.cumsum([0] + [len(IN_NEIGHBOURS[v]) for v in range(8)]).astype(np.int64)
    indices = np.array([u for v in range(8) for u in IN_NEIGHBOURS[v]], dtype=np.int64)
    features = np.arange(8 * FEATURES, dtype=np.float32).reshape(8, FEATURES)
    return Graph(name="work8", path=None, num_nodes=8, num_edges=len(indices), num_features=FEATURES,
                 num_classes=2, indptr=indptr, indices=indices, features=features,
                 labels=np.zeros(8, dtype=np.int64), train_idx=np.array([0]), val_idx=np.array([6]),
                 test_idx=np.array([7]), content_hash="0" * 64)


def one_batch(framework: str, tmp_path, *options):
    argv = ["--framework", framework, "--model", "sage", "--devices", "1", "--batch-size", "1", "--workers", "0",
            "--dataset", "tiny", "--epochs", "1", "--layers", "2", "--fanouts", "-1,-1", "--out", str(tmp_path),
            "--device", "cpu", *options]
    cfg = config_from_args(build_parser().parse_args(argv), 0, 2)
    adapter = get_adapter_class(framework)(cfg, tiny_graph(), 0, 1, torch.device("cpu"))
    loader = adapter.train_loader(torch.tensor([0], dtype=torch.long).share_memory_(), None)
    return adapter, adapter.unpack(next(iter(loader)))


@pytest.mark.parametrize("trim", [False, True])
def test_pyg_records_the_nodes_and_edges_each_layer_computes_on(trim, tmp_path):
    adapter, batch = one_batch("pyg", tmp_path, *(["--pyg-trim"] if trim else []))
    assert batch.layers == EXPECTED["pyg", trim]
    work = batch.work()
    assert (work["seed_nodes"], work["sampled_nodes"], work["sampled_edges"]) == (1, 5, 5)
    assert work["feature_bytes"] == 5 * FEATURES * 4  # float32 features of the 5 sampled nodes
    assert work["layer_edges"] == sum(w.edges for w in EXPECTED["pyg", trim])
    assert work["dst_nodes_by_layer"] == ";".join(str(w.dst_nodes) for w in EXPECTED["pyg", trim])
    # what the model's layers are handed is what was recorded
    model = adapter.build_model().eval()
    seen = []
    for conv in model.convs:
        conv.register_forward_pre_hook(lambda m, args: seen.append(LayerWork(args[0].size(0), args[0].size(0),
                                                                             args[1].size(1))))
    with torch.no_grad():
        adapter.forward(model, batch.inputs)
    assert tuple(seen) == EXPECTED["pyg", trim]


@pytest.mark.parametrize("loader", ["classic", "graphbolt"])
def test_dgl_records_each_blocks_own_counts(loader, tmp_path):
    adapter, batch = one_batch("dgl", tmp_path, "--loader", loader)
    assert batch.layers == EXPECTED["dgl", loader]
    work = batch.work()
    assert (work["seed_nodes"], work["sampled_nodes"], work["sampled_edges"]) == (1, 5, 7)
    assert (work["layer_src_nodes"], work["layer_dst_nodes"], work["layer_edges"]) == (8, 4, 7)
    assert work["feature_bytes"] == 5 * FEATURES * 4
    assert work["src_nodes_by_layer"] == "5;3"
