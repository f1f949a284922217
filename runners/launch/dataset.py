"""The run's dataset: prepared, loaded and verified before the launch (its sizes feed the
pre-flight models, its hash the run's identity), and checked again after the ranks read it."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from runners.config import RunConfig
from runners.launch.console import error, say


@dataclass
class Dataset:
    """The run's dataset as checked before the launch."""

    path: Path
    verification: dict  # what datasets.verify_files found (compared again after the run)
    identity: dict  # the run's identity, which includes the dataset's content hash
    meta: dict  # sizes for the pre-flight models
    reference: dict  # accuracy target and baselines (runners.rank.accuracy)


def graph_meta(graph) -> dict:
    """The sizes the pre-flight models read (runners.memory, runners.partitioned.server)."""
    return {"num_nodes": graph.num_nodes, "num_edges": graph.num_edges,
            "num_features": graph.num_features, "num_classes": graph.num_classes,
            "num_train": len(graph.train_idx),
            "dataset_bytes": int(sum(a.nbytes for a in (graph.indptr, graph.indices, graph.features,
                                                       graph.labels))),
            "adjacency_bytes": int(graph.indptr.nbytes + graph.indices.nbytes),
            "dataset_hash": graph.content_hash}


def prepare_dataset(cfg: RunConfig, env: dict) -> Dataset | None:
    """Prepare, load and verify the dataset, recording its hash in `env`; None (after saying
    why) when it is unusable."""
    from runners import datasets
    from runners.rank import accuracy

    try:
        graph_path = datasets.prepare(cfg.dataset, root=cfg.data_root)
        graph = datasets.load(graph_path)
        # The hash a result records must be that of the bytes the ranks will read.
        verification = datasets.verify_files(graph_path)
    except datasets.DatasetError as exc:
        error(f"dataset {cfg.dataset!r}: {exc}")
        return None
    env["dataset_hash"] = graph.content_hash
    env["dataset_verification"] = {k: verification[k] for k in ("hashed", "cached", "seconds")}
    meta = graph_meta(graph)
    # The graph is dropped on return: the ranks load their own; the reference is cached per dataset.
    return Dataset(graph_path, verification, cfg.identity(graph.content_hash), meta, accuracy.reference(graph))


def recheck_dataset(data: Dataset, env: dict) -> None:
    """The ranks read the dataset after the pre-launch check: if a file changed meanwhile
    (stat only, cheap), hash it again and say in `env` whether it still matches."""
    from runners import datasets

    changed = datasets.changed_since(data.path, data.verification)
    env["dataset_verification"]["changed_during_run"] = changed
    if not changed:
        return
    try:
        datasets.verify_files(data.path)
        after = "files changed on disk during the run but still have the recorded hashes"
    except datasets.DatasetError as exc:
        after = f"MISMATCH after the run (dataset_hash is not that of the data read): {exc}"
    env["dataset_verification"]["after_run"] = after
    say(f"warning: dataset {', '.join(changed)}: {after}", file=sys.stderr)

