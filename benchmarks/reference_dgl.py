"""A minimal DGL DDP training loop: the yardstick the runner's DGL epoch time is compared with.

Written in the style of DGL's own multi-GPU example (examples/multigpu/node_classification_sage.py):
one graph with every format created up front (`g.create_formats_()`), features and labels in
`g.ndata`, `NeighborSampler(fanouts, prefetch_node_feats=["feat"], prefetch_labels=["label"])`
and `dgl.dataloading.DataLoader(..., use_ddp=True)`, blocks shrinking layer by layer. Only what
`benchmarks.measure` needs differs from the example: the canonical dataset
(`runners.datasets.load`), the runner's hyper-parameters from the command line, gloo on CPU,
no evaluation, and each epoch's training loop timed with perf_counter. `--graph-formats csc`
builds the graph as the runner does (CSC only) for benchmarks.measure's second DGL reference. `--fanouts` is given
hop nearest the seeds FIRST (as for the runner) and reversed for DGL's NeighborSampler.

    torchrun --standalone --nproc-per-node 2 -m benchmarks.reference_dgl \
        --dataset small --batch-size 1024 --fanouts 10,10,10 --epochs 3 --out times.json
"""

from __future__ import annotations

import os
import time

T_START = time.perf_counter()
os.environ.setdefault("DGLBACKEND", "pytorch")

import dgl  # noqa: E402
import dgl.nn as dglnn  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from dgl.dataloading import DataLoader, NeighborSampler  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from benchmarks.reference_common import finish, parse_args  # noqa: E402
from runners import datasets  # noqa: E402


class SAGE(nn.Module):
    def __init__(self, in_size, hid_size, out_size, num_layers, dropout):
        super().__init__()
        dims = [in_size] + [hid_size] * (num_layers - 1) + [out_size]
        self.layers = nn.ModuleList(dglnn.SAGEConv(dims[i], dims[i + 1], "mean") for i in range(num_layers))
        self.dropout = nn.Dropout(dropout)

    def forward(self, blocks, x):
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i != len(self.layers) - 1:
                h = F.relu(h)
                h = self.dropout(h)
        return h


class GAT(nn.Module):
    """GAT over blocks; each block gets one self-loop per destination node (PyG's GATConv
    adds self-loops by default and the runner does the same for DGL)."""

    def __init__(self, in_size, hid_size, out_size, num_layers, dropout, heads):
        super().__init__()
        self.layers = nn.ModuleList()
        for i in range(num_layers):
            last = i == num_layers - 1
            self.layers.append(dglnn.GATConv(in_size if i == 0 else hid_size * heads,
                                             out_size if last else hid_size, 1 if last else heads,
                                             attn_drop=dropout, allow_zero_in_degree=True))
        self.dropout = nn.Dropout(dropout)

    def forward(self, blocks, x):
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            src, dst = block.edges()
            loop = torch.arange(block.num_dst_nodes())
            block = dgl.create_block((torch.cat([src, loop]), torch.cat([dst, loop])),
                                     num_src_nodes=block.num_src_nodes(), num_dst_nodes=block.num_dst_nodes())
            h = layer(block, h).flatten(1)
            if i != len(self.layers) - 1:
                h = F.elu(h)
                h = self.dropout(h)
        return h


def load_graph(args):
    """The canonical dataset and the DGL graph over it, features and labels in `g.ndata`:
    every sparse format created up front, as DGL's example (--graph-formats all), or the
    runner's CSC only."""
    graph = datasets.load(args.dataset, root=args.data_root)
    if args.graph_formats == "all":
        src = torch.from_numpy(np.array(graph.indices))
        dst = torch.repeat_interleave(torch.arange(graph.num_nodes), torch.from_numpy(np.diff(graph.indptr)))
        g = dgl.graph((src, dst), num_nodes=graph.num_nodes)
    else:  # the runner's choice: the canonical CSC as it is, no other format made
        g = dgl.graph(("csc", (torch.from_numpy(np.array(graph.indptr)), torch.from_numpy(np.array(graph.indices)),
                               torch.empty(0, dtype=torch.long))), num_nodes=graph.num_nodes)
    g.ndata["feat"] = torch.from_numpy(np.array(graph.features))
    g.ndata["label"] = torch.from_numpy(np.array(graph.labels))
    if args.graph_formats == "all":
        g.create_formats_()
    return graph, g


def train(args, model, train_dataloader, opt):
    """The example's training loop, each epoch timed; returns the epoch times and the steps of
    an epoch."""
    epoch_times, steps = [], 0
    for _ in range(args.epochs):
        model.train()
        t0 = time.perf_counter()
        steps = 0
        for _, _, blocks in train_dataloader:
            x = blocks[0].srcdata["feat"]
            y = blocks[-1].dstdata["label"]
            y_hat = model(blocks, x)
            loss = F.cross_entropy(y_hat, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
        epoch_times.append(time.perf_counter() - t0)
        dist.barrier()
    return epoch_times, steps


def main(argv=None) -> None:
    args = parse_args(argv)
    dist.init_process_group("gloo")
    world_size = dist.get_world_size()
    t_ready = time.perf_counter()

    graph, g = load_graph(args)
    train_idx = torch.from_numpy(np.array(graph.train_idx))

    dgl.seed(args.seed)
    torch.manual_seed(args.seed)
    fanouts = [int(f) for f in reversed(args.fanouts.split(","))]
    sampler = NeighborSampler(fanouts, prefetch_node_feats=["feat"], prefetch_labels=["label"])
    kwargs = {"persistent_workers": True} if args.workers > 0 else {}
    train_dataloader = DataLoader(g, train_idx, sampler, device="cpu", batch_size=args.batch_size, shuffle=True,
                                  drop_last=False, num_workers=args.workers, use_ddp=world_size > 1,
                                  ddp_seed=args.seed, **kwargs)
    if args.model == "sage":
        model = SAGE(graph.num_features, args.hidden, graph.num_classes, args.layers, args.dropout)
    else:
        model = GAT(graph.num_features, args.hidden, graph.num_classes, args.layers, args.dropout, args.heads)
    model = DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    t_model = time.perf_counter()

    epoch_times, steps = train(args, model, train_dataloader, opt)

    finish("dgl", args, epoch_times, steps,
           {"imports_and_process_group": t_ready - T_START, "data_and_model": t_model - t_ready})


if __name__ == "__main__":
    main()
