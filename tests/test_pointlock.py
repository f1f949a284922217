"""One runner of a grid point at a time (runners.launch.pointlock): a second runner of the same --out is
refused at once and names the first; the first ends ok with everything in place."""

import json
import os
import signal
import subprocess
import time

from runners.launch import pointlock
from runners.records import history
from tests.helpers import REPO, run_env, runner_argv


def test_a_second_runner_of_a_point_is_refused_and_the_first_keeps_its_run(tmp_path):
    out = tmp_path / "point"
    argv = runner_argv(out, devices=1, epochs=3)
    first = subprocess.Popen(argv, cwd=REPO, env=run_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 120
        while pointlock.holder(out).get("pid") != first.pid and first.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert pointlock.holder(out).get("pid") == first.pid, "the first runner never took the point"
        # Held still while the second tries: the first is certainly running then (its ranks, if
        # any, go on; its watchdog waits with it).
        os.kill(first.pid, signal.SIGSTOP)
        try:
            second = subprocess.run(argv, cwd=REPO, env=run_env(), capture_output=True, text=True, timeout=120)
        finally:
            os.kill(first.pid, signal.SIGCONT)
        assert second.returncode == 2, second.stdout[-2000:] + second.stderr[-2000:]
        assert f"PID {first.pid}" in second.stderr and "--wait" in second.stderr, second.stderr
        said, _ = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, said[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "ok", result["diagnosis"]
    assert not (out / history.PREVIOUS).exists() and not history.stagings(out)


def test_the_lock_names_its_holder_and_is_free_once_released(tmp_path):
    import pytest

    out = tmp_path / "point"
    fd = pointlock.acquire(out)
    with pytest.raises(pointlock.PointBusy, match=f"PID {os.getpid()} on host "):
        pointlock.acquire(out)
    os.close(fd)  # as the kernel does when the holder dies
    os.close(pointlock.acquire(out))


def test_salvage_leaves_a_live_runners_staging_alone(tmp_path):
    out = tmp_path / "point"
    live = history.staging_dir(out)  # named with this (live) process's PID
    live.mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    stamp = live.name.split(".run-")[1].split("-")[0]
    gone = tmp_path / f".point.run-{stamp}-{dead.pid}"
    gone.mkdir()
    said = history.salvage(out)
    assert live.is_dir() and any("left" in line and live.name in line for line in said), said
    assert not gone.exists() and (out / history.PREVIOUS).is_dir()
