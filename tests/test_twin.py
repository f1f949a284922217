"""Synthetic twins (runners/datasets/twins.py, `python -m runners.datasets twin`): a twin of
`small` and of an imported heavy-tailed graph match them within the documented tolerances,
record what they were fitted to and nothing of the source's files, regenerate from their
recorded parameters, and can be named by a run; what the generator cannot match is flagged;
bad input is refused in one line; the suite's own datasets keep their content hashes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from runners import datasets as D
from runners.datasets import twins as T
from tests.helpers import run_env

REPO = Path(__file__).resolve().parent.parent
# The suite's own datasets as they were before twins existed: the generator's extension must
# not change them (their results compare across versions by this hash).
SUITE_HASHES = {"tiny": "374a5437867bdf629c065b810ebcc1f7819d43675718c3a67abcf6d41fcdf55a",
                "small": "074894c41190ff3f545369ee7aa3254c7b8f266593c97f6b195e5f0e11303a86"}


def cli(*args):
    return subprocess.run([sys.executable, "-m", "runners.datasets", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=120, env=run_env())


def heavy_tailed_npz(path: Path, n=4000, same=0.3, seed=1):
    """A power-law graph (Chung-Lu weights, exponent about 2.2) whose classes follow the
    degree, with a `same` share of edges rewired inside the class: unlike anything the
    generator makes by itself."""
    rng = np.random.default_rng(seed)
    w = np.minimum((1 - rng.random(n)) ** (-1 / 1.2), n ** 0.6)
    y = np.minimum((np.log(w) * 2).astype(int), 6)
    m = int(w.sum() * 3)
    src, dst = rng.choice(n, m, p=w / w.sum()), rng.choice(n, m, p=w / w.sum())
    inside = rng.random(m) < same
    for c in range(7):
        idx, pool = np.flatnonzero(inside & (y[src] == c)), np.flatnonzero(y == c)
        dst[idx] = rng.choice(pool, len(idx), p=w[pool] / w[pool].sum())
    np.savez(path, edge_index=np.stack([src, dst]), x=rng.normal(size=(n, 12)).astype(np.float32), y=y)
    return path


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """small prepared and its twin made once for the module."""
    root = tmp_path_factory.mktemp("twins")
    D.prepare("small", root)
    D.make_twin("small", "small-twin", root)
    return root


# ----------------------------------------------------------------------------- the suite's datasets

def test_suite_datasets_keep_their_hashes_and_params(tmp_path):
    for name, want in SUITE_HASHES.items():
        assert D.read_meta(D.prepare(name, tmp_path))["content_hash"] == want, name
    for name, spec in D.SYNTHETIC.items():
        params = spec.params()
        assert not set(params) & set(D.generators.FIT_FIELDS), name  # meta.json unchanged too
        assert D.SyntheticSpec.from_params(params) == spec, name


# ----------------------------------------------------------------------------- a twin of small

def test_twin_of_small_matches_within_the_tolerances(root):
    small, twin = D.load("small", root), D.load("small-twin", root)
    src, got = T.graph_summary(small), T.graph_summary(twin)
    rows = {r["stat"]: r for r in T.compare(src, got)}
    assert [r["label"] for r in rows.values() if r["ok"] is False] == []
    # What the issue asks of `small` in numbers, not only through TOLERANCES:
    assert abs(got["mean_degree"] - src["mean_degree"]) <= 0.05 * src["mean_degree"]
    for q in T.QUANTILES:
        assert abs(got[f"degree_p{q}"] - src[f"degree_p{q}"]) <= max(0.1 * src[f"degree_p{q}"], 1), q
    assert abs(got["homophily"] - src["homophily"]) <= 0.05
    assert got["class_sizes"] == src["class_sizes"] and got["split_sizes"] == src["split_sizes"]
    assert (twin.num_nodes, twin.num_features, twin.num_classes) == (small.num_nodes, small.num_features,
                                                                     small.num_classes)
    # The whole degree distribution, not three points of it: every percentile 1..99 within 10 % or 1.
    dq = np.percentile(np.diff(small.indptr), range(1, 100)), np.percentile(np.diff(twin.indptr), range(1, 100))
    assert np.all(np.abs(dq[1] - dq[0]) <= np.maximum(0.1 * dq[0], 1))
    # A twin, not a copy: other edges, other features.
    assert not np.array_equal(small.indices[:1000], twin.indices[:1000])
    assert not np.allclose(small.features[:10], twin.features[:10])


def test_twin_meta_records_the_fit_and_the_source_not_its_files(root):
    meta = D.read_meta(root / "small-twin")
    small = D.read_meta(root / "small")
    src = meta["source"]
    assert src["kind"] == "twin" and src["generator"] == D.GENERATOR
    assert src["twin_of"]["name"] == "small" and src["twin_of"]["content_hash"] == small["content_hash"]
    assert src["twin_of"]["summary"]["nodes"] == 6000
    assert {"class_sizes", "node_weights", "split_sizes", "homophily", "seed"} <= set(src["params"])
    fit = src["fit"]
    assert fit["rounds_run"] >= 1 and fit["history"][fit["kept_round"]]["loss"] == fit["loss"] <= 1
    assert fit["cannot_match"] == []  # small is within reach of its own generator
    text = (root / "small-twin" / "meta.json").read_text()
    assert str(root) not in text and "raw_files" not in text  # no path of the source, no copy of its record
    # The recorded parameters make the same arrays again: a twin can be regenerated where it is shared.
    again = D.generate(D.SyntheticSpec.from_params(src["params"]))
    twin = D.load(root / "small-twin", verify_hash=True)
    for key, _ in D.FILES:
        assert np.array_equal(again[key], getattr(twin, key)), key


def test_twin_is_deterministic_and_seeded(root, tmp_path):
    first = D.read_meta(root / "small-twin")["content_hash"]
    assert D.read_meta(D.make_twin(root / "small", "again", tmp_path))["content_hash"] == first
    assert D.read_meta(D.make_twin(root / "small", "other", tmp_path, seed=1))["content_hash"] != first


def test_a_run_may_name_a_twin(root):
    D.check_name("small-twin", root)  # what runners.config and the workflow call
    assert D.prepare("small-twin", root) == root / "small-twin"  # checked, never regenerated
    with pytest.raises(D.DatasetError, match="make it again with python -m runners.datasets twin small"):
        D.prepare("small-twin", root, force=True)
    listed = cli("list", "--root", root).stdout
    assert "small-twin\ttwin of small (074894c41190)" in listed


def test_info_sets_the_twin_beside_its_source(root):
    out = cli("info", "small-twin", "--root", root)
    assert out.returncode == 0, out.stderr
    meta_text, _, table = out.stdout.partition("\n\ntwin ")
    assert json.loads(meta_text)["name"] == "small-twin"
    lines = table.splitlines()
    assert lines[0].startswith("'small-twin' of 'small' (content hash 074894c4")
    for label in ("nodes", "edges", "mean degree", "degree p50", "degree p90", "degree p99", "max degree",
                  "features", "classes", "class sizes", "edge homophily"):
        row = next(line for line in lines if line.startswith(label + " "))
        assert row.rstrip().endswith("ok"), row
    assert "every required statistic is within its tolerance" in table
    only = cli("info", "small-twin", "--root", root, "--json")
    assert json.loads(only.stdout)["source"]["kind"] == "twin"


# ----------------------------------------------------------------------------- other graphs

def test_twin_of_an_imported_heavy_tailed_graph_by_path(tmp_path):
    src = D.import_graph(heavy_tailed_npz(tmp_path / "g.npz"), "pl", tmp_path / "data", split=(0.6, 0.2, 0.1))
    out = cli("twin", src, "--name", "pl-twin", "--root", tmp_path / "twins")
    assert out.returncode == 0, out.stderr
    path, digest = out.stdout.split()
    meta = D.read_meta(Path(path))
    assert meta["content_hash"] == digest and meta["source"]["twin_of"]["name"] == "pl"
    assert str(tmp_path / "g.npz") not in json.dumps(meta)  # the user's file is not named
    original, twin = T.graph_summary(D.load(src)), T.graph_summary(D.load(path))
    assert original["max_degree"] > 20 * original["degree_p50"]  # heavy-tailed indeed
    assert [r["label"] for r in T.compare(original, twin) if r["ok"] is False] == []
    assert twin["split_sizes"] == original["split_sizes"] == [2400, 800, 400]  # 10 % of nodes in no split
    if original["isolated_nodes"]:
        assert any("isolated" in n for n in meta["source"]["fit"]["cannot_match"])


def test_homophily_below_chance_is_flagged_not_hidden(tmp_path):
    src = D.import_graph(heavy_tailed_npz(tmp_path / "h.npz", n=2000, same=0.0), "het", tmp_path,
                         split=(0.6, 0.2, 0.2))
    meta = D.read_meta(D.make_twin("het", "het-twin", tmp_path))
    fit = meta["source"]["fit"]
    original = meta["source"]["twin_of"]["summary"]
    assert original["homophily"] < fit["chance_homophily"]
    assert any("below" in n and "chance" in n for n in fit["cannot_match"])
    assert meta["source"]["params"]["homophily"] == 0  # no intra-class draws: the least the generator makes
    text = T.info_text(meta, tmp_path / "het-twin")
    assert "edge homophily" in text and "OFF" in text and "outside tolerance: edge homophily" in text
    assert "cannot match: homophily" in text
    twin = T.graph_summary(D.load(tmp_path / "het-twin"))
    assert abs(twin["homophily"] - fit["chance_homophily"]) <= 0.05  # about chance, as close as it gets
    assert abs(twin["mean_degree"] - original["mean_degree"]) <= 0.05 * original["mean_degree"]
    del src


# ----------------------------------------------------------------------------- tolerances

def test_tolerances_at_their_bounds():
    assert T.within("mean_degree", 10.0, 10.5) and not T.within("mean_degree", 10.0, 10.51)
    assert T.within("degree_p50", 3, 4) and not T.within("degree_p50", 3, 5)  # floor of 1 edge
    assert T.within("degree_p99", 200, 220) and not T.within("degree_p99", 200, 221)  # 10 %
    assert T.within("homophily", 0.62, 0.67) and not T.within("homophily", 0.62, 0.671)
    assert T.within("class_sizes", [3, 4], [3, 4]) and not T.within("class_sizes", [3, 4], [4, 3])
    assert T.within("edges", 1000, 1005) and not T.within("edges", 1000, 1006)
    assert T.tolerance_text("degree_p90") == "within 10 % or 1" and T.tolerance_text("homophily") == "within 0.05"


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("args, says", [
    (["nope", "--name", "x"], ["'nope'", "no dataset", "allowed: tiny, small", "imported under", "directory"]),
    (["{tmp}", "--name", "x"], ["not a dataset (no meta.json)", "allowed:"]),
    (["tiny", "--name", "x"], ["tiny: not a dataset (no meta.json) (run: python -m runners.datasets prepare tiny"]),
    (["small", "--name", "small"], ["--name 'small' is one of the suite's own datasets"]),
    (["small", "--name", ".x"], ["--name '.x': a dataset name is letters"]),
    (["small", "--name", "small-twin"], ["a twin named 'small-twin' exists; add --force"]),
    (["small", "--name", "imp"], ["a dataset named 'imp' exists and is not a twin (it was imported)"]),
    (["small", "--name", "x", "--rounds", "0"], ["--rounds 0: at least 1 round"]),
    (["small", "--name", "x", "--seed", "-1"], ["--seed -1"]),
])
def test_bad_input_is_one_line_naming_it(root, tmp_path, args, says):
    if not (root / "imp").exists():
        D.import_graph(heavy_tailed_npz(tmp_path / "i.npz", n=300), "imp", root, split=(0.6, 0.2, 0.2))
    before = sorted(p.name for p in root.iterdir())
    out = cli("twin", *[a.format(tmp=tmp_path) for a in args], "--root", root)
    err = [line for line in out.stderr.splitlines() if not line[:2].isdigit()]  # log lines start with the date
    assert out.returncode == 1 and len(err) == 1 and err[0].startswith("error: "), out.stderr
    for s in says:
        assert s in err[0], (s, err[0])
    assert "Traceback" not in out.stderr and out.stdout == ""
    assert sorted(p.name for p in root.iterdir()) == before  # nothing written
