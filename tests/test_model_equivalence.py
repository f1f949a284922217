"""The PyG and DGL models are the same function: with copied weights, on the same sampled
subgraph, the seed-node outputs agree to 1e-5, and parameter counts are equal.

This is the fairness claim the whole comparison rests on (BRIEF, "Fairness"), so it is
proven here for every registered model and every layer rather than assumed.
"""

import os

import pytest
import torch

os.environ.setdefault("DGLBACKEND", "pytorch")
dgl = pytest.importorskip("dgl")
pytest.importorskip("torch_sparse")

from torch_geometric.data import Data  # noqa: E402
from torch_geometric.loader import NeighborLoader  # noqa: E402

from runners.adapters.dgl import DglModel, add_self_loops  # noqa: E402
from runners.adapters.pyg import PygModel, hop_counts  # noqa: E402
from runners.adapters import registry  # noqa: E402
from runners.config import MODEL_DEFAULTS  # noqa: E402

N, F_IN, CLASSES, SEEDS = 300, 12, 5, 24


def copy_weights(pyg: PygModel, dglm: DglModel, kind: str) -> None:
    """PyG -> DGL parameter mapping, layer by layer."""
    with torch.no_grad():
        for p, d in zip(pyg.convs, dglm.convs):
            if kind == "sage":
                # PyG: lin_l(mean of neighbours) + bias, lin_r(root); DGL: fc_neigh, fc_self(+bias).
                d.fc_neigh.weight.copy_(p.lin_l.weight)
                d.fc_self.weight.copy_(p.lin_r.weight)
                d.fc_self.bias.copy_(p.lin_l.bias)
            elif kind == "gat":
                d.fc.weight.copy_(p.lin.weight)
                d.attn_l.copy_(p.att_src)  # attention term of the source node
                d.attn_r.copy_(p.att_dst)  # attention term of the destination node
                d.bias.copy_(p.bias)
            elif kind == "gcn":
                d.weight.copy_(p.conv.lin.weight.t())  # GraphConv keeps (in, out); PyG's Linear (out, in)
                d.bias.copy_(p.conv.bias)
            else:
                raise AssertionError(f"no weight mapping for model {kind!r}")


def sampled_subgraph(seed: int = 0):
    """One PyG-sampled mini-batch (3 hops) of a random graph: x, edge_index, seed count."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, N, (N * 6,), generator=g)
    dst = torch.randint(0, N, (N * 6,), generator=g)
    keep = src != dst
    ei = torch.unique(torch.stack([src[keep], dst[keep]]), dim=1)
    data = Data(x=torch.randn(N, F_IN, generator=g), edge_index=ei, num_nodes=N)
    torch.manual_seed(seed)
    batch = next(iter(NeighborLoader(data, num_neighbors=[5, 4, 3], batch_size=SEEDS, shuffle=True)))
    return batch.x, batch.edge_index, batch.batch_size


def blocks_from_subgraph(edge_index, num_nodes: int, seeds: int, layers: int):
    """Message-flow blocks (input layer first) over the same subgraph, as DGL's sampler builds them."""
    g = dgl.graph((edge_index[0], edge_index[1]), num_nodes=num_nodes)
    dst = torch.arange(seeds)
    blocks = []
    for _ in range(layers):
        block = dgl.to_block(dgl.in_subgraph(g, dst), dst_nodes=dst)
        blocks.insert(0, block)
        dst = block.srcdata[dgl.NID]
    return blocks, dst  # dst: input node ids of the first block, in block order


@pytest.mark.parametrize("kind", registry.MODEL_NAMES)
def test_seed_outputs_agree_with_copied_weights(kind):
    d = MODEL_DEFAULTS[kind]
    hidden = min(32, d["hidden"])
    loops = registry.model(kind).self_loops
    torch.manual_seed(1)
    pyg = PygModel(kind, F_IN, hidden, CLASSES, d["layers"], d["heads"], d["dropout"], self_loops=True).eval()
    dglm = DglModel(kind, F_IN, hidden, CLASSES, d["layers"], d["heads"], d["dropout"]).eval()
    assert sum(p.numel() for p in pyg.parameters()) == sum(p.numel() for p in dglm.parameters())
    copy_weights(pyg, dglm, kind)

    x, edge_index, seeds = sampled_subgraph()
    with torch.no_grad():
        expected = pyg(x, edge_index)[:seeds]

        # (a) DGL on the whole sampled subgraph, the way PyG computes it.
        g = dgl.graph((edge_index[0], edge_index[1]), num_nodes=x.size(0))
        if loops:
            g = dgl.add_self_loop(g)
        whole = dglm([g] * d["layers"], x)[:seeds]

        # (b) DGL on shrinking blocks with the adapter's self-loop handling, as in training.
        blocks, input_ids = blocks_from_subgraph(edge_index, x.size(0), seeds, d["layers"])
        if loops:
            blocks = [add_self_loops(b) for b in blocks]
        by_blocks = dglm(blocks, x[input_ids])

    assert expected.shape == (seeds, CLASSES)
    torch.testing.assert_close(whole, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(by_blocks, expected, atol=1e-5, rtol=1e-5)


def adj_t_subgraph(seed: int = 0):
    """One mini-batch sampled as the PyG adapter samples it (NeighborLoader over an adj_t
    SparseTensor), in the adapter's edge_index: x, edge_index, seed count, the loader's batch."""
    from torch_sparse import SparseTensor

    g = torch.Generator().manual_seed(seed)
    src, dst = torch.randint(0, N, (N * 6,), generator=g), torch.randint(0, N, (N * 6,), generator=g)
    adj_t = SparseTensor(row=dst, col=src, sparse_sizes=(N, N)).coalesce()
    data = Data(x=torch.randn(N, F_IN, generator=g), adj_t=adj_t, num_nodes=N)
    torch.manual_seed(seed)
    raw = next(iter(NeighborLoader(data, num_neighbors=[5, 4, 3], batch_size=SEEDS, shuffle=True)))
    row, col, _ = raw.adj_t.coo()
    return raw.x, torch.stack([col, row]), raw.batch_size, raw


def test_hop_counts_by_hand():
    # seeds 0, 1; hop 1 finds 2, 3 (edges into 0 and 1), hop 2 finds 4, 5 (edges into 2 and 3)
    edge_index = torch.tensor([[2, 3, 1, 3, 4, 0, 5], [0, 0, 0, 1, 2, 3, 3]])
    assert hop_counts(edge_index, 2, 6, 2) == ([2, 2, 2], [4, 3])
    assert hop_counts(torch.tensor([[1], [0]]), 1, 2, 3) == ([1, 1, 0, 0], [1, 0, 0])  # hops that find nothing
    with pytest.raises(ValueError, match="not the 6 nodes and 7 edges of 2 hops"):
        hop_counts(edge_index, 2, 7, 2)
    with pytest.raises(ValueError, match="not sorted by destination"):
        hop_counts(torch.tensor([[2, 3, 4], [0, 2, 1]]), 2, 5, 2)


@pytest.mark.parametrize("kind", registry.MODEL_NAMES)
def test_trimming_with_derived_hop_counts_keeps_the_seed_outputs(kind):
    """--pyg-trim on the torch-sparse sampler: the per-hop counts derived from the subgraph let
    trim_to_layer drop, layer by layer, exactly the nodes and edges the seeds no longer need:
    the seeds' outputs are those of the untrimmed model, and the last layer runs on hop 1 only."""
    d = MODEL_DEFAULTS[kind]
    x, edge_index, seeds, raw = adj_t_subgraph(2)
    nodes, edges = hop_counts(edge_index, seeds, x.size(0), 3)
    assert sum(nodes) == x.size(0) and sum(edges) == edge_index.size(1) and nodes[0] == seeds
    if "num_sampled_nodes" in raw:  # pyg-lib's own counts, where it is installed
        assert (list(raw.num_sampled_nodes), list(raw.num_sampled_edges)) == (nodes, edges)
    # hop k's edges end at hop k-1's nodes
    ends = torch.cumsum(torch.tensor([0] + nodes), 0)
    for k, (lo, hi) in enumerate(zip(torch.cumsum(torch.tensor([0] + edges[:-1]), 0), torch.cumsum(torch.tensor(edges), 0))):
        assert bool(((edge_index[1, lo:hi] >= ends[k]) & (edge_index[1, lo:hi] < ends[k + 1])).all()), k
    torch.manual_seed(3)
    full = PygModel(kind, F_IN, 16, CLASSES, 3, d["heads"], 0.0, self_loops=True).eval()
    trimmed = PygModel(kind, F_IN, 16, CLASSES, 3, d["heads"], 0.0, self_loops=True, trim=True).eval()
    trimmed.load_state_dict(full.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(trimmed(x, edge_index, nodes, edges)[:seeds], full(x, edge_index)[:seeds],
                                   atol=1e-5, rtol=1e-5)
    assert edges[0] < edge_index.size(1) and nodes[0] < x.size(0)  # something was trimmed


@pytest.mark.parametrize("kind", registry.MODEL_NAMES)
def test_canonical_init_gives_identical_models(kind):
    """The harness's shared initialiser makes both frameworks start from the same weights."""
    from runners.adapters import init_canonical

    d = MODEL_DEFAULTS[kind]
    pyg = PygModel(kind, F_IN, 16, CLASSES, 3, d["heads"], d["dropout"], self_loops=True).eval()
    dglm = DglModel(kind, F_IN, 16, CLASSES, 3, d["heads"], d["dropout"]).eval()
    init_canonical(pyg.canonical_parameters(), seed=3)
    init_canonical(dglm.canonical_parameters(), seed=3)
    x, edge_index, seeds = sampled_subgraph()
    g = dgl.graph((edge_index[0], edge_index[1]), num_nodes=x.size(0))
    if registry.model(kind).self_loops:
        g = dgl.add_self_loop(g)
    with torch.no_grad():
        torch.testing.assert_close(dglm([g] * 3, x)[:seeds], pyg(x, edge_index)[:seeds], atol=1e-5, rtol=1e-5)


def test_models_differ_without_copied_weights():
    """Guard against a vacuous pass: independently initialised models disagree."""
    torch.manual_seed(1)
    pyg = PygModel("sage", F_IN, 16, CLASSES, 3, 1, 0.5, self_loops=True).eval()
    torch.manual_seed(2)
    dglm = DglModel("sage", F_IN, 16, CLASSES, 3, 1, 0.5).eval()
    x, edge_index, seeds = sampled_subgraph()
    g = dgl.graph((edge_index[0], edge_index[1]), num_nodes=x.size(0))
    with torch.no_grad():
        assert not torch.allclose(pyg(x, edge_index)[:seeds], dglm([g] * 3, x)[:seeds], atol=1e-3)


def test_symmetric_gcn_normalisations_are_not_the_same_function():
    """Why GCN averages: PyG's GCNConv (symmetric, in-degrees of the subgraph) and DGL's
    GraphConv(norm='both') (the source's out-degree) differ on a sampled subgraph even with
    copied weights and the same self-loops, so they could not be compared as one model."""
    from dgl.nn.pytorch import GraphConv
    from torch_geometric.nn import GCNConv

    torch.manual_seed(1)
    pyg, dglm = GCNConv(F_IN, CLASSES).eval(), GraphConv(F_IN, CLASSES, norm="both")
    with torch.no_grad():
        dglm.weight.copy_(pyg.lin.weight.t())
        dglm.bias.copy_(pyg.bias)
        x, edge_index, seeds = sampled_subgraph()
        g = dgl.add_self_loop(dgl.graph((edge_index[0], edge_index[1]), num_nodes=x.size(0)))
        assert not torch.allclose(pyg(x, edge_index)[:seeds], dglm(g, x)[:seeds], atol=1e-3)


def test_fanouts_translate_to_dgl_order():
    from runners.config import build_parser, config_from_args

    args = build_parser().parse_args(["--framework", "dgl", "--model", "sage", "--devices", "1", "--batch-size",
                                      "8", "--workers", "0", "--dataset", "tiny", "--epochs", "1",
                                      "--fanouts", "15,10,5", "--out", "/tmp/x"])
    cfg = config_from_args(args, visible_gpus=0, cpu_cores=2)
    assert cfg.fanouts == [15, 10, 5] and cfg.fanouts_framework == [5, 10, 15]
