"""Test-session settings: the `gpu` marker, whose tests run only where CUDA GPUs are visible."""

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
