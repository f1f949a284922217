"""A minimal PyG DDP training loop: the yardstick the runner's PyG epoch time is compared with.

Written in the style of PyG's own multi-GPU example (examples/multi_gpu/distributed_sampling.py):
an in-memory `Data(x, y, edge_index)`, the training seeds split by hand into one equal chunk
per rank, a `NeighborLoader` per rank over its chunk, and `model(x, edge_index)[:batch_size]`
with every layer on all sampled nodes. Only what `benchmarks.measure` needs differs from the
example: the canonical dataset (`runners.datasets.load`), the runner's hyper-parameters from
the command line, `drop_last=False` (the runner keeps the last partial batch, so both sides
do the same batches), gloo on CPU, no evaluation, and each epoch timed with perf_counter.

    torchrun --standalone --nproc-per-node 2 -m benchmarks.reference_pyg \
        --dataset small --batch-size 1024 --fanouts 10,10,10 --epochs 3 --out times.json
"""

from __future__ import annotations

import time

T_START = time.perf_counter()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch_geometric.data import Data  # noqa: E402
from torch_geometric.loader import NeighborLoader  # noqa: E402
from torch_geometric.nn import GATConv, SAGEConv  # noqa: E402

from benchmarks.reference_common import finish, parse_args  # noqa: E402
from runners import datasets  # noqa: E402


class SAGE(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels, num_layers, dropout):
        super().__init__()
        dims = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        self.convs = torch.nn.ModuleList(SAGEConv(dims[i], dims[i + 1]) for i in range(num_layers))
        self.dropout = dropout

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = x.relu_()
                x = F.dropout(x, p=self.dropout, training=self.training)
        return x


class GAT(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels, num_layers, dropout, heads):
        super().__init__()
        self.convs = torch.nn.ModuleList()
        for i in range(num_layers):
            last = i == num_layers - 1
            self.convs.append(GATConv(in_channels if i == 0 else hidden_channels * heads,
                                      out_channels if last else hidden_channels,
                                      heads=1 if last else heads, dropout=dropout))
        self.dropout = dropout

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = F.elu(x)
                x = F.dropout(x, p=self.dropout, training=self.training)
        return x


def main(argv=None) -> None:
    args = parse_args(argv)
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    t_ready = time.perf_counter()

    graph = datasets.load(args.dataset, root=args.data_root)
    src = torch.from_numpy(np.array(graph.indices))
    dst = torch.repeat_interleave(torch.arange(graph.num_nodes), torch.from_numpy(np.diff(graph.indptr)))
    data = Data(x=torch.from_numpy(np.array(graph.features)), y=torch.from_numpy(np.array(graph.labels)),
                edge_index=torch.stack([src, dst]), num_nodes=graph.num_nodes)

    # Split the training seeds into `world_size` equal chunks, one per rank.
    train_idx = torch.from_numpy(np.array(graph.train_idx))
    train_idx = train_idx.split(train_idx.size(0) // world_size)[rank]
    kwargs = dict(batch_size=args.batch_size, num_workers=args.workers, persistent_workers=args.workers > 0)
    train_loader = NeighborLoader(data, input_nodes=train_idx, num_neighbors=[int(f) for f in args.fanouts.split(",")],
                                  shuffle=True, drop_last=False, **kwargs)

    torch.manual_seed(args.seed)
    if args.model == "sage":
        model = SAGE(graph.num_features, args.hidden, graph.num_classes, args.layers, args.dropout)
    else:
        model = GAT(graph.num_features, args.hidden, graph.num_classes, args.layers, args.dropout, args.heads)
    model = DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    t_model = time.perf_counter()

    epoch_times, steps = [], 0
    for _ in range(args.epochs):
        model.train()
        t0 = time.perf_counter()
        steps = 0
        for batch in train_loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            steps += 1
        epoch_times.append(time.perf_counter() - t0)
        dist.barrier()

    finish("pyg", args, epoch_times, steps,
           {"imports_and_process_group": t_ready - T_START, "data_and_model": t_model - t_ready})


if __name__ == "__main__":
    main()
