"""Partitions of the canonical graph for the partitioned strategy (runners.partitioned.split, made by
dgl.distributed.partition_graph): what they hold, their quality, the cache keyed by the
dataset's hash, P and the method, verification of every file, and bad requests refused first."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from runners import datasets
from runners.partitioned import split as partitions
from tests.helpers import DATA_ROOT, REPO, run_env


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("partitions")
    return root, {m: partitions.prepare("tiny", 2, m, data_root=DATA_ROOT, root=root) for m in partitions.METHODS}


def test_partitions_hold_the_graph_and_their_quality(made):
    import dgl

    root, dirs = made
    graph = datasets.load("tiny", root=DATA_ROOT)
    cut = {}
    for method, path in dirs.items():
        assert path.name == f"tiny-{graph.content_hash[:16]}-p2-{method}"
        manifest = partitions.verify(path, graph.content_hash)
        assert (manifest["parts"], manifest["method"]) == (2, method)
        orig, new = np.load(path / "orig_ids.npy"), np.load(path / "new_ids.npy")
        assert sorted(orig) == list(range(graph.num_nodes)) and (new[orig] == np.arange(graph.num_nodes)).all()
        q = json.loads((path / partitions.QUALITY).read_text())
        per = q["per_partition"]
        assert sum(p["nodes"] for p in per) == graph.num_nodes and sum(p["edges"] for p in per) == graph.num_edges
        assert sum(p["train_nodes"] for p in per) == len(graph.train_idx)
        assert [p["nodes"] for p in per] == [p["inner_nodes"] for p in per]  # DGL's inner nodes are ours
        assert all(p["halo_nodes"] > 0 for p in per)  # 1-hop halo: a cut graph has some
        assert 1.0 <= q["node_balance"] < 1.1 and q["edge_balance"] >= 1.0
        cut[method] = q["edge_cut_fraction"]
        # Each partition serves the canonical features and labels of its own nodes.
        start = 0
        for p in range(2):
            _, feats, _, gpb, _, _, _ = dgl.distributed.load_partition(str(path / "gnnscale.json"), p)
            rows = orig[start:start + len(feats["_N/feat"])]
            assert np.array_equal(feats["_N/feat"].numpy(), graph.features[rows])
            assert np.array_equal(feats["_N/label"].numpy(), graph.labels[rows])
            start += len(rows)
        assert start == graph.num_nodes
    # METIS keeps most edges inside a partition; a random split of 2 cuts about half of them.
    assert cut["metis"] < 0.5 * cut["random"] and 0.4 < cut["random"] < 0.6, cut


def test_cached_verified_and_remade_when_a_file_changes(made):
    root, dirs = made
    path = dirs["metis"]
    stamp = (path / partitions.MANIFEST).stat().st_mtime_ns
    assert partitions.prepare("tiny", 2, "metis", data_root=DATA_ROOT, root=root) == path
    assert (path / partitions.MANIFEST).stat().st_mtime_ns == stamp  # cached: not made again
    victim = path / "part1" / "graph.dgl"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))  # same size: only the hash can tell
    with pytest.raises(partitions.PartitionError, match=r"part1/graph\.dgl: hash mismatch"):
        partitions.verify(path)
    assert partitions.prepare("tiny", 2, "metis", data_root=DATA_ROOT, root=root) == path
    assert partitions.verify(path)["parts"] == 2  # made again, whole
    with pytest.raises(partitions.PartitionError, match="the dataset changed"):
        partitions.verify(path, "0" * 64)


@pytest.mark.parametrize("parts,method,message", [(2, "kmeans", "part_method 'kmeans' is unknown; allowed: metis, random"),
                                                  (0, "metis", "parts 0: must be a whole number of at least 1")])
def test_bad_requests_are_refused_before_any_work(tmp_path, parts, method, message):
    with pytest.raises(partitions.PartitionError, match=message):
        partitions.prepare("tiny", parts, method, data_root=tmp_path / "no-datasets", root=tmp_path / "p")
    assert not (tmp_path / "no-datasets").exists() and not (tmp_path / "p").exists()
    res = subprocess.run([sys.executable, "-m", "runners.partitioned.split", "prepare", "tiny", "--parts", str(parts),
                          "--method", method, "--root", str(tmp_path / "p")], cwd=REPO, env=run_env(),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and message in res.stderr, res.stderr


def test_cli_writes_the_marker_snakemake_wants(made, tmp_path):
    root, dirs = made
    marker = tmp_path / "tiny-p2-metis.json"
    res = subprocess.run([sys.executable, "-m", "runners.partitioned.split", "prepare", "tiny", "--parts", "2",
                          "--method", "metis", "--data-root", str(DATA_ROOT), "--root", str(root),
                          "--marker", str(marker)], cwd=REPO, env=run_env(), capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    assert json.loads(marker.read_text())["path"] == str(dirs["metis"].resolve())
    assert "edge cut" in res.stdout
