"""Synthetic graphs (a degree-corrected block model with Gaussian features) and the edge-list
to canonical-CSC conversion that the converters share."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

log = logging.getLogger("gnnscale.datasets")

from runners.datasets.format import DatasetError  # noqa: E402

# --------------------------------------------------------------------------------------
# Synthetic datasets: a degree-corrected stochastic block model with Gaussian features.
# --------------------------------------------------------------------------------------

GENERATOR = "dcsbm-gaussian"
GENERATOR_VERSION = 1  # bump whenever the same parameters would produce different arrays


@dataclass(frozen=True)
class SyntheticSpec:
    """Parameters of a generated graph; all of them are recorded in meta.json.

    num_edges is the target number of DIRECTED edges after symmetrising and removing
    self-loops and duplicates (each undirected edge counts twice); the result is within
    about 0.1% of it. homophily is the probability that an edge is drawn inside the class
    of its first endpoint (other edges pick the second endpoint from the whole graph, so the
    measured edge homophily is a little higher). degree_sigma is the sigma of the lognormal
    node weights that make degrees skewed. feature_snr sets the class-centroid separation
    relative to the feature noise: it fixes how well features alone predict the class.

    Three optional parameters let a graph be fitted to another one (runners/datasets/twins.py,
    `python -m runners.datasets twin`); left at None they change nothing, and params() leaves
    them out, so the suite's own datasets keep their arrays and their meta.json:
    - class_sizes: the exact number of nodes in each class (instead of lognormal sizes drawn
      with class_size_sigma);
    - node_weights: the node weights' quantile function as ((probability, weight), ...), rising
      in both, probability from 0 to 1: the nodes, in random order, take this function at
      (k + 0.5) / num_nodes, k = 0 .. num_nodes - 1 (instead of the lognormal weights of
      degree_sigma, which is then unused). A node's expected degree is about
      1 + (num_edges - num_nodes) * weight / sum of weights;
    - split_sizes: the exact (train, val, test) node counts, which may leave nodes in no split
      (instead of the fractions in split, which put every node in one).
    """

    num_nodes: int
    num_edges: int
    num_features: int
    num_classes: int
    seed: int = 0
    homophily: float = 0.75
    degree_sigma: float = 0.8
    class_size_sigma: float = 0.5
    feature_snr: float = 1.0
    split: tuple = (0.65, 0.10, 0.25)  # train/val/test, as in Reddit
    chunk_pairs: int = 1 << 22  # edge pairs drawn per chunk: bounds memory, part of the stream
    class_sizes: Optional[tuple] = None
    node_weights: Optional[tuple] = None
    split_sizes: Optional[tuple] = None

    def params(self) -> dict:
        """The parameters as JSON values; the fitting ones (FIT_FIELDS) only when set."""
        d = {k: getattr(self, k) for k in self.__dataclass_fields__
             if k not in FIT_FIELDS or getattr(self, k) is not None}
        d["split"] = list(self.split)
        if self.class_sizes is not None:
            d["class_sizes"] = [int(v) for v in self.class_sizes]
        if self.node_weights is not None:
            d["node_weights"] = [[float(p), float(w)] for p, w in self.node_weights]
        if self.split_sizes is not None:
            d["split_sizes"] = [int(v) for v in self.split_sizes]
        return d

    @classmethod
    def from_params(cls, params: dict) -> "SyntheticSpec":
        """The spec whose params() these are (meta.json's source.params): generate() of it
        makes the same arrays again."""
        d = dict(params)
        d["split"] = tuple(d.get("split", cls.split))
        for key in ("class_sizes", "split_sizes"):
            if d.get(key) is not None:
                d[key] = tuple(int(v) for v in d[key])
        if d.get("node_weights") is not None:
            d["node_weights"] = tuple((float(p), float(w)) for p, w in d["node_weights"])
        return cls(**d)


FIT_FIELDS = ("class_sizes", "node_weights", "split_sizes")


# `small` is the default CPU sweep graph: a 3-layer model trains for an epoch in seconds
# on 2 cores. With fan-outs 10,10,10 a step samples most of a graph this size whatever its
# size, so an epoch costs ~ nodes^2: 20,000 nodes took ~20-40 s per PyG epoch here, 6,000 a
# few seconds, which keeps the 32-run default sweep near 10 minutes. `reddit-shape` has Reddit's node, feature, class and edge counts.
SYNTHETIC = {
    "tiny": SyntheticSpec(num_nodes=2_000, num_edges=20_000, num_features=32, num_classes=5,
                          feature_snr=0.9),
    "small": SyntheticSpec(num_nodes=6_000, num_edges=60_000, num_features=64,
                           num_classes=10, feature_snr=1.2),
    "reddit-shape": SyntheticSpec(num_nodes=232_965, num_edges=114_615_892, num_features=602,
                                  num_classes=41, feature_snr=1.6, degree_sigma=1.0),
    # Reddit's feature width on a sparse graph: features are 96% of its 750 MB, so what a host holds
    # of it is mostly the feature rows it owns, the measure of the partitioned strategy
    # (benchmarks/partitioned_memory.py).
    "wide": SyntheticSpec(num_nodes=300_000, num_edges=3_000_000, num_features=602, num_classes=10,
                          feature_snr=1.2),
}


class _Sampler:
    """Draws nodes with probability proportional to their weight, globally or in a class.

    Nodes are laid out class by class (`order`); one cumulative-weight array serves both
    kinds of draw, so each draw is a single vectorised searchsorted.
    """

    def __init__(self, labels: np.ndarray, theta: np.ndarray, num_classes: int):
        self.order = np.argsort(labels, kind="stable")
        self.cum = np.cumsum(theta[self.order])
        counts = np.bincount(labels, minlength=num_classes)
        self.end = np.cumsum(counts)
        self.start = self.end - counts
        self.lo = np.where(self.start > 0, self.cum[np.maximum(self.start - 1, 0)], 0.0)
        self.mass = self.cum[self.end - 1] - self.lo
        self.labels = labels

    def draw_global(self, rng, n: int) -> np.ndarray:
        pos = np.searchsorted(self.cum, rng.random(n) * self.cum[-1], side="right")
        return self.order[np.minimum(pos, len(self.order) - 1)]

    def draw_in_class(self, rng, classes: np.ndarray) -> np.ndarray:
        r = self.lo[classes] + rng.random(len(classes)) * self.mass[classes]
        pos = np.searchsorted(self.cum, r, side="right")
        # Float rounding at a class boundary must not leak into the neighbouring class.
        pos = np.clip(pos, self.start[classes], self.end[classes] - 1)
        return self.order[pos]

    def partners(self, rng, u: np.ndarray, homophily: float) -> np.ndarray:
        intra = rng.random(len(u)) < homophily
        v = np.empty_like(u)
        v[intra] = self.draw_in_class(rng, self.labels[u[intra]])
        v[~intra] = self.draw_global(rng, int((~intra).sum()))
        return v


def _pair_keys(u: np.ndarray, v: np.ndarray, n: int) -> np.ndarray:
    """Both directions of each pair as CSC sort keys dst * n + src, self-loops dropped."""
    keep = u != v
    u, v = u[keep], v[keep]
    return np.concatenate([v * n + u, u * n + v])


def _sorted_unique(keys: np.ndarray, runs: bool = False) -> np.ndarray:
    """Sort in place and drop repeats (np.unique would hold an extra copy). With `runs`, keys
    is a concatenation of sorted runs: timsort merges those in linear time; otherwise the
    default (vectorised) quicksort is much faster."""
    keys.sort(kind="stable" if runs else "quicksort")
    if len(keys) == 0:
        return keys
    keep = np.empty(len(keys), dtype=bool)
    keep[0] = True
    np.not_equal(keys[1:], keys[:-1], out=keep[1:])
    return keys[keep]


def _count_unique_sorted(keys: np.ndarray) -> int:
    return int(len(keys) > 0) + int(np.count_nonzero(keys[1:] != keys[:-1]))


def _csc_from_keys(keys: np.ndarray, n: int):
    """Sorted unique keys dst * n + src -> (indptr, indices)."""
    indptr = np.searchsorted(keys, np.arange(n + 1, dtype=np.int64) * n).astype(np.int64)
    indices = keys % n
    return indptr, indices


def generate(spec: SyntheticSpec) -> dict:
    """The seven arrays of a synthetic dataset, deterministic from `spec` (see SyntheticSpec).

    Each node gets a class; edges come from a degree-corrected stochastic block model
    (lognormal node weights, a `homophily` share of edges inside the class); features are a
    class centroid plus Gaussian noise, so features alone are mediocre predictors and
    averaging over neighbours (what a GNN does) is clearly better.
    """
    streams = _streams(spec)
    labels, indptr, indices = _graph(spec, streams)
    features = _features(spec, labels, np.random.default_rng(streams["feat"]))
    return {"indptr": indptr, "indices": indices, "features": features, "labels": labels,
            **_split(spec, np.random.default_rng(streams["split"]))}


def generate_graph(spec: SyntheticSpec) -> tuple:
    """(labels, indptr, indices) of generate(spec), without features and splits: what fitting
    a twin measures in each round (runners/datasets/twins.py)."""
    return _graph(spec, _streams(spec))


def _streams(spec: SyntheticSpec) -> dict:
    n, c, f = spec.num_nodes, spec.num_classes, spec.num_features
    if n < 2 or c < 1 or f < 1 or spec.num_edges < 0:
        raise DatasetError(f"synthetic spec {spec}: needs num_nodes >= 2, num_classes >= 1, "
                           "num_features >= 1, num_edges >= 0")
    if spec.class_sizes is not None and (len(spec.class_sizes) != c or sum(spec.class_sizes) != n
                                         or min(spec.class_sizes) < 0):
        raise DatasetError(f"synthetic spec: class_sizes must be {c} counts >= 0 summing to {n}")
    if spec.split_sizes is not None and (len(spec.split_sizes) != 3 or sum(spec.split_sizes) > n
                                         or min(spec.split_sizes) < 0):
        raise DatasetError(f"synthetic spec: split_sizes must be 3 counts >= 0 summing to at most {n}")
    if spec.node_weights is not None:
        p, w = np.asarray(spec.node_weights, dtype=np.float64).reshape(-1, 2).T
        if (len(p) < 2 or p[0] != 0 or p[-1] != 1 or np.any(np.diff(p) <= 0) or np.any(np.diff(w) < 0)
                or w[0] <= 0 or not np.all(np.isfinite(w))):
            raise DatasetError("synthetic spec: node_weights must be (probability, weight) pairs, "
                               "probabilities rising from 0 to 1, weights positive and not falling")
    # Independent streams per component: changing e.g. the feature code keeps the graph.
    keys = ("labels", "theta", "first", "edges", "feat", "split")
    return dict(zip(keys, np.random.SeedSequence([spec.seed, GENERATOR_VERSION]).spawn(6)))


def _graph(spec: SyntheticSpec, streams: dict) -> tuple:
    n, c = spec.num_nodes, spec.num_classes
    labels = _labels(spec, np.random.default_rng(streams["labels"]))
    theta = _theta(spec, np.random.default_rng(streams["theta"]))
    sampler = _Sampler(labels, theta, c)
    keys = _first_edges(spec, sampler, np.random.default_rng(streams["first"]))
    keys = _weighted_edges(spec, sampler, keys, streams["edges"])
    indptr, indices = _csc_from_keys(keys, n)
    return labels, indptr, indices


def _theta(spec: SyntheticSpec, rng) -> np.ndarray:
    """Node weights: lognormal (degree_sigma), or drawn from the quantile function node_weights."""
    if spec.node_weights is None:
        return np.exp(spec.degree_sigma * rng.standard_normal(spec.num_nodes))
    # Stratified: the nodes, in random order, take the function at (k + 0.5) / n, so the
    # weights follow it without sampling noise (the top node always gets the top weight).
    n = spec.num_nodes
    p, w = np.asarray(spec.node_weights, dtype=np.float64).reshape(-1, 2).T
    return np.interp((rng.permutation(n) + 0.5) / n, p, w)


def _labels(spec: SyntheticSpec, rng) -> np.ndarray:
    """Each node's class: lognormal class sizes, every class with at least one node."""
    n, c = spec.num_nodes, spec.num_classes
    if spec.class_sizes is not None:
        return rng.permutation(np.repeat(np.arange(c, dtype=np.int64), spec.class_sizes))
    class_p = np.exp(spec.class_size_sigma * rng.standard_normal(c))
    class_p /= class_p.sum()
    counts = rng.multinomial(n - c, class_p) + 1
    return rng.permutation(np.repeat(np.arange(c, dtype=np.int64), counts))


def _first_edges(spec: SyntheticSpec, sampler: _Sampler, rng) -> np.ndarray:
    """One proposed edge per node, as sorted unique CSC keys, so that no node is isolated
    (DGL's GATConv, for one, rejects nodes without in-edges).

    Self-partners are redrawn a few times; a class of one node falls back to a global draw,
    and finally to the next node id.
    """
    n = spec.num_nodes
    u0 = np.arange(n, dtype=np.int64)
    v0 = sampler.partners(rng, u0, spec.homophily)
    for attempt in range(12):
        bad = np.flatnonzero(v0 == u0)
        if len(bad) == 0:
            break
        v0[bad] = (sampler.partners(rng, u0[bad], spec.homophily) if attempt < 8
                   else sampler.draw_global(rng, len(bad)))
    bad = v0 == u0
    v0[bad] = (u0[bad] + 1) % n
    return _sorted_unique(_pair_keys(u0, v0, n))


def _weighted_edges(spec: SyntheticSpec, sampler: _Sampler, keys: np.ndarray, streams) -> np.ndarray:
    """`keys` topped up with weighted pairs until the target edge count is reached.

    Duplicates are dropped, so pairs are drawn in rounds sized by the observed rate of new
    edges (deterministic: each round's size follows from the previous arrays, each chunk has
    its own stream spawned from `streams`).
    """
    target = spec.num_edges
    pairs = max(target // 2 - spec.num_nodes, 0)
    for _ in range(8):
        if len(keys) >= target or pairs <= 0:
            break
        before = len(keys)
        new = _draw_pairs(spec, sampler, pairs, streams)
        keys = _sorted_unique(np.concatenate([keys, new]), runs=True)
        del new
        gained = len(keys) - before
        log.info("  drew %d pairs: %d directed edges now (target %d)", pairs, len(keys), target)
        rate = max(gained / (2 * pairs), 1e-3)
        pairs = math.ceil((target - len(keys)) / (2 * rate))
    return keys


def _draw_pairs(spec: SyntheticSpec, sampler: _Sampler, pairs: int, streams) -> np.ndarray:
    """Sorted unique CSC keys of `pairs` weighted pairs, drawn chunk by chunk (bounded memory),
    each chunk from the next child stream of `streams`."""
    n = spec.num_nodes
    new = np.empty(2 * pairs, dtype=np.int64)
    filled = 0
    for start in range(0, pairs, spec.chunk_pairs):
        rng = np.random.default_rng(streams.spawn(1)[0])
        m = min(spec.chunk_pairs, pairs - start)
        u = sampler.draw_global(rng, m)
        k = _pair_keys(u, sampler.partners(rng, u, spec.homophily), n)
        new[filled:filled + len(k)] = k
        filled += len(k)
    return _sorted_unique(new[:filled])


def _features(spec: SyntheticSpec, labels: np.ndarray, rng) -> np.ndarray:
    """Features: class centroid + noise, scaled to unit variance per dimension.

    With centroids ~N(0, I), two classes are 2 * feature_snr noise standard deviations apart
    along the line joining them (a z-score of feature_snr for the nearest-centroid decision).
    """
    n, c, f = spec.num_nodes, spec.num_classes, spec.num_features
    centroids = rng.standard_normal((c, f)).astype(np.float32)
    noise = math.sqrt(2 * f) / (2 * spec.feature_snr)
    scale = np.float32(1.0 / math.sqrt(1.0 + noise * noise))
    features = np.empty((n, f), dtype=np.float32)
    rows = max(1, (16 << 20) // (4 * f))  # ~16 MB of noise at a time
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        block = rng.standard_normal((stop - start, f), dtype=np.float32)
        block *= np.float32(noise)
        block += centroids[labels[start:stop]]
        block *= scale
        features[start:stop] = block
    return features


def _split(spec: SyntheticSpec, rng) -> dict:
    """train_idx, val_idx and test_idx: a random split in spec.split's proportions, each sorted."""
    n = spec.num_nodes
    perm = rng.permutation(n)
    if spec.split_sizes is not None:
        n_train, n_val, n_test = spec.split_sizes
    else:
        n_train = int(round(spec.split[0] * n))
        n_val = int(round(spec.split[1] * n))
        n_test = n - n_train - n_val
    return {"train_idx": np.sort(perm[:n_train]), "val_idx": np.sort(perm[n_train:n_train + n_val]),
            "test_idx": np.sort(perm[n_train + n_val:n_train + n_val + n_test])}


# --------------------------------------------------------------------------------------
# Edge lists -> canonical CSC (used by the converters)
# --------------------------------------------------------------------------------------

def csc_from_edges(src, dst, num_nodes: int, symmetrize: bool = True):
    """Edge list -> (indptr, indices, stats): CSC sorted by (dst, src), self-loops and
    duplicates removed, reverse edges added when `symmetrize`. stats counts what changed.

    src and dst may be any integer arrays (int32, strided views); the only large allocation
    is one int64 key array of 2E (E without `symmetrize`), filled in place.
    """
    n, e = int(num_nodes), len(src)
    halves = 2 if symmetrize else 1
    keys = np.empty(halves * e, dtype=np.int64)
    fwd, rev = keys[:e], keys[e:]
    # key = dst * n + src, computed in int64 even for int32 inputs (dtype= picks the loop).
    np.multiply(dst, n, out=fwd, dtype=np.int64)
    np.add(fwd, src, out=fwd, dtype=np.int64)
    if symmetrize:
        np.multiply(src, n, out=rev, dtype=np.int64)
        np.add(rev, dst, out=rev, dtype=np.int64)
    loops = np.asarray(src) == np.asarray(dst)
    n_loops = int(np.count_nonzero(loops))
    if n_loops:  # a sentinel sorts last and is cut off below: no compacting copy
        fwd[loops] = np.iinfo(np.int64).max
        if symmetrize:
            rev[loops] = np.iinfo(np.int64).max
    del loops
    fwd.sort()
    n_fwd = _count_unique_sorted(fwd) - (n_loops > 0)
    if symmetrize:
        rev.sort()
    keys = _sorted_unique(keys, runs=True)
    if n_loops:
        keys = keys[:-1]
    indptr, indices = _csc_from_keys(keys, n)
    del keys
    stats = {"raw_edges": e, "self_loops_removed": n_loops,
             "duplicates_removed": int(e - n_loops - n_fwd),
             "reverse_edges_added": int(len(indices) - n_fwd)}
    return indptr, indices, stats


