"""A minimal DGL GraphBolt DDP loop: the yardstick for the runner's `--loader graphbolt` epoch time.

Written in the style of DGL's multi-GPU GraphBolt example
(examples/multigpu/graphbolt/node_classification.py, DGL 2.1): an `ItemSet` of the training
seeds with their labels, `DistributedItemSampler(shuffle=True, drop_last=False,
drop_uneven_inputs=False)`, `sample_neighbor(graph, fanouts)`, `fetch_feature(features,
["feat"])`, `copy_to(device)`, `gb.DataLoader(num_workers=...)`, and the training loop inside
`Join([model])` (the example's answer to ranks with unequal batch counts). Only what
`benchmarks.measure` needs differs: the canonical dataset (`runners.datasets.load`, copied into
memory as the example's loaded dataset is) turned into `gb.fused_csc_sampling_graph` and a
`BasicFeatureStore`, the runner's hyper-parameters, gloo on CPU, no evaluation, each epoch
timed with perf_counter. `--fanouts` is given hop nearest the seeds FIRST and reversed for
GraphBolt, which, like the classic sampler, lists that hop last.

    torchrun --standalone --nproc-per-node 2 -m benchmarks.reference_graphbolt \
        --dataset small --batch-size 1024 --fanouts 10,10,10 --epochs 3 --out times.json
"""

from __future__ import annotations

import os
import time

T_START = time.perf_counter()
os.environ.setdefault("DGLBACKEND", "pytorch")

import dgl.graphbolt as gb  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.distributed.algorithms.join import Join  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from benchmarks.reference_common import finish, parse_args  # noqa: E402
from benchmarks.reference_dgl import GAT, SAGE  # noqa: E402  (the same models over blocks)
from runners import datasets  # noqa: E402


def create_dataloader(args, data):
    """The example's pipeline over the canonical dataset: seeds with their labels, sampled
    neighbours, fetched features, copied to the device."""
    graph = gb.fused_csc_sampling_graph(torch.from_numpy(np.array(data.indptr)),
                                        torch.from_numpy(np.array(data.indices)))
    features = gb.BasicFeatureStore(
        {("node", None, "feat"): gb.TorchBasedFeature(torch.from_numpy(np.array(data.features)))})
    train_idx = torch.from_numpy(np.array(data.train_idx))
    labels = torch.from_numpy(np.array(data.labels))
    train_set = gb.ItemSet((train_idx, labels[train_idx]), names=("seed_nodes", "labels"))

    gb.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cpu")
    fanouts = [int(f) for f in reversed(args.fanouts.split(","))]
    datapipe = gb.DistributedItemSampler(item_set=train_set, batch_size=args.batch_size, drop_last=False,
                                         shuffle=True, drop_uneven_inputs=False)
    datapipe = datapipe.sample_neighbor(graph, fanouts)
    datapipe = datapipe.fetch_feature(features, node_feature_keys=["feat"])
    datapipe = datapipe.copy_to(device)
    return gb.DataLoader(datapipe, num_workers=args.workers)


def train(args, model, train_dataloader, optimizer):
    """The example's training loop inside Join, each epoch timed; returns the epoch times and
    the steps of an epoch."""
    epoch_times, steps = [], 0
    for _ in range(args.epochs):
        model.train()
        t0 = time.perf_counter()
        steps = 0
        with Join([model]):
            for data_batch in train_dataloader:
                x = data_batch.node_features["feat"]
                y = data_batch.labels
                y_hat = model(data_batch.blocks, x)
                loss = F.cross_entropy(y_hat, y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                steps += 1
        epoch_times.append(time.perf_counter() - t0)
        dist.barrier()
    return epoch_times, steps


def main(argv=None) -> None:
    args = parse_args(argv)
    dist.init_process_group("gloo")
    t_ready = time.perf_counter()

    data = datasets.load(args.dataset, root=args.data_root)
    train_dataloader = create_dataloader(args, data)

    if args.model == "sage":
        model = SAGE(data.num_features, args.hidden, data.num_classes, args.layers, args.dropout)
    else:
        model = GAT(data.num_features, args.hidden, data.num_classes, args.layers, args.dropout, args.heads)
    model = DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    t_model = time.perf_counter()

    epoch_times, steps = train(args, model, train_dataloader, optimizer)

    finish("dgl-graphbolt", args, epoch_times, steps,
           {"imports_and_process_group": t_ready - T_START, "data_and_model": t_model - t_ready})


if __name__ == "__main__":
    main()
