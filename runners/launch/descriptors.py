"""Open file descriptors of a run: the pre-flight estimate per process, the open-files limits,
and the descriptors a live process holds.

Loader workers hand every tensor of a batch to their rank as a file descriptor (PyTorch's
'file_descriptor' sharing strategy, its default on Linux; the harness keeps it), and the rank
keeps one open per shared tensor while the batch lives. The limit (RLIMIT_NOFILE, `ulimit -n`)
holds per process, so the estimate is per process: the rank, which holds the most.
"""

from __future__ import annotations

import resource

import psutil

SHARING_STRATEGY = "file_descriptor"  # torch.multiprocessing's default on Linux; the harness keeps it
# Per process, measured here (torch 2.2.1 CPU, 2 ranks, tiny dataset): about 40 descriptors for
# the interpreter, torch, the dataset's files, the records and the rendezvous; 5 for each loader
# worker's queues and pipes (a worker inherits its rank's); one socket per peer rank.
FD_BASE = 40
FD_PER_WORKER = 5
FD_PER_PEER = 1
# The model with these constants and the frameworks' shared tensors per batch (registry) fits the
# least limit that ran, measured with `ulimit -n N` (tiny, fan-outs 6,5,4, batch 128): PyG 1x1
# 57-64, 2x2 65-80, 2x4 81-96; DGL 1x1 81-96, 2x2 97-112 (ranks x workers).


def fd_need(cfg) -> dict:
    """Descriptors the busiest process of the run (a rank) needs at once, with its terms."""
    from runners.adapters import MEMORY_TRAITS

    if not cfg.workers:
        return {"per_process": None, "terms": {}}
    per_batch = MEMORY_TRAITS[cfg.framework]["shared_tensors_per_batch"]
    # A rank holds the batch in use and up to one more per worker (prefetched or out of order).
    terms = {"base": FD_BASE, "worker_pipes": FD_PER_WORKER * cfg.workers,
             "peer_sockets": FD_PER_PEER * (cfg.world_size - 1),
             "batches": per_batch * (cfg.workers + 1)}
    return {"per_process": sum(terms.values()), "terms": terms, "shared_tensors_per_batch": per_batch}


def limits() -> tuple:
    """(soft, hard) open-files limits of this process; the run's processes inherit them."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return int(soft), int(hard)


def suggested_limit(need: int, hard: int | None) -> int:
    """A `ulimit -n` with room to spare: twice the need, at least 1024, within the hard limit
    when that is enough (raising the hard limit needs root)."""
    want = max(1024, 2 * need)
    infinite = hard is None or hard < 0 or hard == resource.RLIM_INFINITY
    return want if infinite or hard >= want or hard < need else hard


def in_use(pid: int) -> dict:
    """Descriptors a live process holds and its soft limit ({} when it cannot be read)."""
    try:
        p = psutil.Process(pid)
        return {"fds": p.num_fds(), "fd_limit": p.rlimit(psutil.RLIMIT_NOFILE)[0]}
    except (psutil.Error, OSError):
        return {}


def preflight_check(cfg, soft: int) -> dict:
    """The pre-flight's record of the soft limit against the estimate, with its warning (None
    when the limit is enough or no loader worker passes batches)."""
    need = fd_need(cfg)
    hard = limits()[1]
    warning = None
    if need["per_process"] is not None and soft < need["per_process"]:
        warning = (f"open-files limit (`ulimit -n`) {soft} is below the about {need['per_process']} descriptors a "
                   f"rank needs with {cfg.workers} loader worker(s) (each batch's tensors pass as file descriptors): "
                   "expect a hang or a crash with 'Too many open files'; raise it, e.g. "
                   f"`ulimit -n {suggested_limit(need['per_process'], hard)}`, or use fewer workers")
    return {"soft_limit": soft, "hard_limit": hard, "needed_per_process_estimate": need["per_process"],
            "terms": need["terms"], "sharing_strategy": SHARING_STRATEGY, "warning": warning}
