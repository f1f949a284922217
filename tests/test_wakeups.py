"""The launcher's waits sleep until what they wait for happens instead of polling (a poll's
wakeup takes a core from a rank on a small machine): the one-node rank starter's wait
(runners.launch.spawn.Ranks.wait) ends at once on a rank's exit, a failing rank or a stop signal,
long before its sleep's bound would; the supervisor's sleep between polls
(runners.watch.supervisor.sleep_until_exit) ends at the exit of the tree it watches."""

import os
import signal
import subprocess
import threading
import time

import pytest

from runners.launch import spawn
from runners.watch.supervisor import sleep_until_exit

BOUND_S = 60.0  # a lost wakeup would show as a wait this long


@pytest.fixture
def long_bound(monkeypatch):
    monkeypatch.setattr(spawn, "SLEEP_BOUND_S", BOUND_S)


def ranks(script: str, nproc: int = 2) -> spawn.Ranks:
    return spawn.Ranks(["sh", "-c", script], nproc, "127.0.0.1", 29999, "/nonexistent-store")


def test_the_ranks_exit_ends_the_wait(long_bound):
    t0 = time.monotonic()
    r = ranks("sleep 0.3")
    assert r.wait() == []
    assert time.monotonic() - t0 < BOUND_S / 2
    assert [p.returncode for p in r.procs] == [0, 0]


def test_a_failing_rank_ends_the_wait_and_stops_the_others(long_bound):
    t0 = time.monotonic()
    r = ranks('if [ "$RANK" = 1 ]; then sleep 0.3; exit 3; fi; exec sleep 120')
    failures = r.wait()
    assert time.monotonic() - t0 < BOUND_S / 2
    assert failures[0][0] == 1 and failures[0][2] == 3
    assert r.procs[0].returncode == -signal.SIGTERM  # stopped, not left running


def test_a_stop_signal_ends_the_wait(long_bound):
    r = ranks("exec sleep 120")
    old = signal.signal(signal.SIGTERM, lambda signum, frame: setattr(r, "stop_signal", signum))
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM))
    try:
        t0 = time.monotonic()
        timer.start()
        r.wait()
        assert time.monotonic() - t0 < BOUND_S / 2
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, old)
    assert r.stop_signal == signal.SIGTERM
    assert [p.returncode for p in r.procs] == [-signal.SIGTERM] * 2


def test_the_supervisors_sleep_ends_at_the_exit_and_at_its_timeout():
    proc = subprocess.Popen(["sleep", "0.3"])
    t0 = time.monotonic()
    sleep_until_exit(proc, BOUND_S)
    assert time.monotonic() - t0 < BOUND_S / 2 and proc.wait(timeout=5) == 0
    proc = subprocess.Popen(["sleep", "120"])
    try:
        sleep_until_exit(proc, 0.2)
        assert proc.poll() is None  # the timeout ended it: the process runs on
    finally:
        proc.kill()
        proc.wait()
