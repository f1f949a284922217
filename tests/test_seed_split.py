"""Both frameworks train the harness's per-rank seed shares, freshly drawn every epoch.

Real 2-process runs with one persistent loader worker per rank: the seeds each loader really
delivered (steps.csv `seed_id_sum`, summed from the batch's own seed ids) are compared with
the harness's split, between epochs and between the frameworks.
"""

import csv
import json

import numpy as np
import pytest

from runners import datasets
from runners.rank.seeds import seed_set_digest, split_seeds
from tests.helpers import DATA_ROOT, run_config

BATCH = 128
EPOCHS = 2


def _steps(out, rank):
    rows = list(csv.DictReader(open(out / f"rank{rank}" / "steps.csv")))
    return {e: [int(r["seed_id_sum"]) for r in rows if int(r["epoch"]) == e] for e in range(EPOCHS)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("seed-split")
    out = {}
    for framework in ("pyg", "dgl"):
        out[framework] = base / framework
        proc = run_config(out[framework], framework=framework, devices=2, workers=1, epochs=EPOCHS,
                          batch_size=BATCH, extra=["--eval-every", "0"])
        res = json.loads((out[framework] / "result.json").read_text())
        assert res["status"] == "ok", proc.stdout[-3000:]
    return out


def test_split_is_fresh_every_epoch_and_equal_per_rank():
    train = np.arange(1000, 2003)
    shares = {(e, r): split_seeds(train, r, 2, 0, BATCH, False, e) for e in range(2) for r in range(2)}
    assert len(shares[0, 0]) == len(shares[0, 1]) == len(shares[1, 0]) == 502  # padded to equal
    assert set(shares[0, 0]) != set(shares[1, 0])  # new seed sets every epoch
    assert set(shares[0, 0]) | set(shares[0, 1]) == set(train)  # every seed trained each epoch
    assert np.array_equal(shares[1, 1], split_seeds(train, 1, 2, 0, BATCH, False, 1))  # reproducible


@pytest.mark.parametrize("framework", ["pyg", "dgl"])
def test_loader_delivers_the_harness_share_in_order_with_a_fresh_shuffle(runs, framework):
    graph = datasets.load("tiny", root=DATA_ROOT)
    out = runs[framework]
    for rank in range(2):
        delivered = _steps(out, rank)
        assert delivered[0] != delivered[1], "epoch 1 replayed epoch 0's batches"
        for epoch in range(EPOCHS):
            share = split_seeds(graph.train_idx, rank, 2, 0, BATCH, False, epoch)
            expected = [int(share[i:i + BATCH].sum()) for i in range(0, len(share), BATCH)]
            assert delivered[epoch] == expected, f"rank {rank} epoch {epoch}"
        info = json.loads((out / f"rank{rank}" / "rank.json").read_text())
        assert info["epoch_seed_digests"] == [
            seed_set_digest(split_seeds(graph.train_idx, rank, 2, 0, BATCH, False, e)) for e in range(EPOCHS)]


def test_rank_r_trains_the_same_seeds_in_both_frameworks(runs):
    for rank in range(2):
        assert _steps(runs["pyg"], rank) == _steps(runs["dgl"], rank)
