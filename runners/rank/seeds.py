"""Seeds of a run's ranks and loader workers, and which training seed nodes each rank trains.

Used by the training harness (runners.rank.harness) for both frameworks, so that PyG and DGL ranks
draw the same numbers and train the same seed nodes in the same order.
"""

from __future__ import annotations

import hashlib

import numpy as np


def worker_seed(base: int, rank: int, worker_id: int) -> int:
    """Seed of loader worker `worker_id` of `rank`: distinct per rank and worker, reproducible."""
    return (base * 1_000_003 + rank * 10_007 + worker_id + 1) % (2**31)


def rank_seed(base: int, rank: int) -> int:
    """Seed of a rank's own generators (dropout, sampling in the main process)."""
    return (base * 1_000_003 + rank * 10_007) % (2**31)


def split_seeds(train_idx: np.ndarray, rank: int, world: int, seed: int, batch_size: int,
                uneven: bool, epoch: int = 0) -> np.ndarray:
    """This rank's share of the training seeds in `epoch`, in the order it trains them.

    Both frameworks train exactly this share, in this order: every epoch draws a fresh
    global permutation from (seed, epoch), as a DistributedSampler with set_epoch does, so
    ranks see new seed sets and a new order every epoch, reproducibly.
    Even (default): the permutation is padded by wrapping so every rank gets the same
    number of seeds and therefore the same number of batches. Uneven (`--uneven-batches`):
    the naive contiguous split, with the last rank one batch short, which is what leaves a
    rank waiting forever in the all-reduce.
    """
    order = np.random.default_rng([seed, epoch]).permutation(len(train_idx))
    shuffled = np.asarray(train_idx)[order]
    if not uneven:
        per_rank = -(-len(shuffled) // world)
        padded = np.resize(shuffled, per_rank * world)  # np.resize repeats from the start
        return padded[rank * per_rank:(rank + 1) * per_rank]
    per_rank = len(shuffled) // world
    share = shuffled[rank * per_rank:(rank + 1) * per_rank]
    if rank == world - 1 and world > 1:
        batches = -(-len(share) // batch_size)
        share = share[: max(1, (batches - 1)) * batch_size]
    return share


SEED_SPLIT_RULE = ("harness: per epoch one global permutation from (seed, epoch), padded to an equal "
                   "share per rank; both frameworks' loaders read the share in place, in order")


def seed_set_digest(seeds: np.ndarray) -> str:
    """A short fingerprint of a set of seed nodes (order-independent), for result records."""
    return hashlib.sha1(np.sort(np.asarray(seeds, dtype=np.int64)).tobytes()).hexdigest()[:16]
