"""What a run's validation accuracy is judged against: a per-dataset target and a
features-only baseline.

- Target (MLPerf-style time-to-accuracy): the validation accuracy a run must reach; a run
  reports the training time until its first evaluation at or above it. Targets are fixed per
  dataset in TARGETS, with the reason for each value.
- Baseline: a multinomial logistic regression on the node features alone (no graph), fitted
  on the training split and scored on the validation split. A GNN that does not beat it has
  not learnt anything from the graph: the report calls such a run "not converged", never
  "at parity". It is computed once per dataset (content hash) and cached beside the dataset
  as baseline.json.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import numpy as np

BASELINE_FILE = "baseline.json"
BASELINE_METHOD = "logistic regression on features only (L2 1e-3, L-BFGS, standardised features)"
BASELINE_VERSION = 1  # bump when the method changes: cached values are then recomputed

# dataset -> (target validation accuracy, why this value). Synthetic targets sit above the
# features-only baseline (so reaching them needs the graph) and below what both models reach
# in the default sweep's budget (measured, see docs/sweep.md).
TARGETS = {
    "tiny": (0.60, "synthetic; features-only baseline 0.535"),
    "small": (0.92, "synthetic; features-only baseline 0.555; near what both models converge to (measured at 2 "
                    "processes x batch 256, lr 5e-3: GraphSAGE ~0.95, reaching 0.92 in its 3rd epoch; GAT 0.92-0.93, "
                    "reaching 0.92 after 25-30 epochs)"),
    "reddit": (0.93, "GraphSAGE reaches ~0.95 on Reddit (Hamilton et al., 2017)"),
    "ogbn-products": (0.89, "GraphSAGE reaches ~0.91 validation accuracy (OGB leaderboard)"),
}


def target(dataset: str):
    """(target accuracy, reason) for a dataset, or (None, reason) when none is defined."""
    if dataset in TARGETS:
        return TARGETS[dataset]
    return None, f"no target defined for dataset {dataset!r} (runners/rank/accuracy.py TARGETS)"


def _softmax_regression(x: np.ndarray, y: np.ndarray, classes: int, l2: float) -> np.ndarray:
    """Weights (features+1, classes) of an L2-regularised softmax regression (deterministic)."""
    from scipy.optimize import minimize

    n, f = x.shape
    xb = np.hstack([x, np.ones((n, 1), dtype=x.dtype)])
    onehot = np.zeros((n, classes))
    onehot[np.arange(n), y] = 1.0

    def loss_grad(w_flat):
        w = w_flat.reshape(f + 1, classes)
        z = xb @ w
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        loss = -np.sum(onehot * np.log(p + 1e-12)) / n + 0.5 * l2 * np.sum(w[:-1] ** 2)
        grad = xb.T @ (p - onehot) / n
        grad[:-1] += l2 * w[:-1]
        return loss, grad.ravel()

    res = minimize(loss_grad, np.zeros((f + 1) * classes), jac=True, method="L-BFGS-B",
                   options={"maxiter": 300})
    return res.x.reshape(f + 1, classes)


def compute_baseline(graph, max_train: int = 200_000) -> float:
    """Validation accuracy of the features-only logistic regression on `graph`'s splits."""
    train = np.asarray(graph.train_idx)
    if len(train) > max_train:  # bounded cost on large graphs; a fixed, reproducible subset
        train = np.sort(np.random.default_rng(0).choice(train, max_train, replace=False))
    val = np.asarray(graph.val_idx)
    x_train = np.asarray(graph.features[train], dtype=np.float64)
    mean, std = x_train.mean(axis=0), x_train.std(axis=0) + 1e-8
    x_train = (x_train - mean) / std
    x_val = (np.asarray(graph.features[val], dtype=np.float64) - mean) / std
    labels = np.asarray(graph.labels)
    w = _softmax_regression(x_train, labels[train], graph.num_classes, l2=1e-3)
    pred = (np.hstack([x_val, np.ones((len(val), 1))]) @ w).argmax(axis=1)
    return float(np.mean(pred == labels[val])) if len(val) else float("nan")


def reference(graph) -> dict:
    """Target and features-only baseline of a loaded dataset (baseline cached beside it)."""
    tgt, why = target(graph.name)
    cache = Path(graph.path) / BASELINE_FILE
    baseline = None
    try:
        cached = json.loads(cache.read_text())
        if cached.get("content_hash") == graph.content_hash and cached.get("version") == BASELINE_VERSION:
            baseline = cached["val_acc"]
    except (OSError, ValueError, KeyError):
        pass
    if baseline is None:
        baseline = round(compute_baseline(graph), 6)
        record = {"content_hash": graph.content_hash, "version": BASELINE_VERSION, "method": BASELINE_METHOD,
                  "val_acc": baseline}
        tmp = cache.with_name(f".{BASELINE_FILE}.{os.getpid()}-{uuid.uuid4().hex[:6]}")
        try:  # concurrent runs compute the same value; the last rename wins
            tmp.write_text(json.dumps(record, indent=1) + "\n")
            os.replace(tmp, cache)
        except OSError:
            tmp.unlink(missing_ok=True)  # a read-only dataset directory: recompute next time
    labels = np.asarray(graph.labels)[np.asarray(graph.val_idx)]
    chance = float(np.bincount(labels).max() / len(labels)) if len(labels) else None
    return {"target_val_acc": tgt, "target_reason": why, "baseline_val_acc": baseline,
            "baseline_method": BASELINE_METHOD, "chance_val_acc": chance}


def time_to_target(epoch_times: list, validation: list, target_acc):
    """(training seconds, epochs) until the first evaluation at or above `target_acc`.

    epoch_times[i] is epoch i's time (slowest rank); validation is [{epoch, accuracy}].
    Evaluation itself is not timed. (None, None) when the target is never reached or unknown.
    """
    if target_acc is None:
        return None, None
    for v in sorted(validation, key=lambda v: v["epoch"]):
        if v["accuracy"] >= target_acc and v["epoch"] < len(epoch_times):
            return float(sum(epoch_times[: v["epoch"] + 1])), int(v["epoch"]) + 1
    return None, None
