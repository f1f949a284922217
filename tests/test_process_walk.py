"""The cheap process-tree walk the supervisor and the CPU probe poll with (probes.descendant_pids):
the same tree as psutil's, and the probe's worker rows from it."""

import os
import subprocess
import time

import psutil
import pytest

from runners.rank.probes import CpuSampler, descendant_pids, psutil_tree_pids


@pytest.fixture
def tree():
    """sh -> (sleep, sh -> sleep): a child and a grandchild, removed at the end."""
    proc = subprocess.Popen(["sh", "-c", "sleep 30 & sh -c 'sleep 30 & wait' & wait"])
    deadline = time.monotonic() + 10
    while len(psutil.Process(proc.pid).children(recursive=True)) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    yield proc
    for p in psutil.Process(proc.pid).children(recursive=True):
        p.kill()
    proc.kill()
    proc.wait()


def test_walk_finds_the_tree_psutil_finds(tree):
    assert os.path.exists(f"/proc/{tree.pid}/task/{tree.pid}/children"), "this kernel has no children file"
    walked = descendant_pids(tree.pid)
    fallback = psutil_tree_pids(tree.pid)
    assert walked[0] == fallback[0] == tree.pid
    assert len(walked) == 4 and sorted(walked) == sorted(fallback)


def test_walk_of_a_gone_process_is_empty():
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert descendant_pids(proc.pid) == [] and psutil_tree_pids(proc.pid) == []


def test_cpu_probe_records_every_process_below_the_rank(tree):
    sampler = CpuSampler(interval=60.0)  # sampled by hand, never started
    sampler.sample()
    rows = {row[1]: row[2] for row in sampler.drain()}
    below = {tree.pid} | {p.pid for p in psutil.Process(tree.pid).children(recursive=True)}
    assert rows[psutil.Process().pid] == "rank"
    assert len(below) == 4 and below <= {pid for pid, role in rows.items() if role == "worker"}
