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
from runners.adapters.pyg import PygModel  # noqa: E402
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
