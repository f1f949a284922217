"""Test-session settings: the `gpu` marker, whose tests run only where CUDA GPUs are visible, and
the `slurm` fixture (a private SLURM cluster)."""

import pytest

from runners.envinfo import visible_gpu_count


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs NVIDIA GPUs (NCCL, NVML); skipped without CUDA")


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items or visible_gpu_count() > 0:
        return
    skip = pytest.mark.skip(reason="no CUDA GPU visible on this machine (run `make gpu-check` on one)")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """A private single-node SLURM cluster (tests/slurm_cluster.py) for the whole session,
    stopped by PID at its end; skips with the reason where this machine cannot run one."""
    from tests import slurm_cluster

    reason = slurm_cluster.why_not()
    if reason:
        pytest.skip(reason)
    cluster = slurm_cluster.Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except slurm_cluster.Unavailable as exc:
        pytest.skip(f"could not start a private SLURM cluster: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()
