"""scripts/device_check.sh, the lent GPU machine's one call, rehearsed on the CPU: its CPU-scaling
part puts every run, with its log, into the tar that comes back. The script appends each run as
it ends, since the first call on an H200 lost a part's runs when the call's limit cut it before
the part's end, where the script then packed them."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile

from tests._runs import DATA_ROOT, REPO


def test_the_device_script_keeps_each_cpu_run_in_what_comes_back(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OUT": str(out), "PY": sys.executable, "WORK": str(tmp_path / "work"),
           "DATA_ROOT": str(DATA_ROOT), "PARTS": "1", "CPU_DATASET": "tiny", "CPU_BATCH": "512", "COUNTS": "1",
           "REPEATS": "1"}
    proc = subprocess.run(["bash", "scripts/device_check.sh"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with tarfile.open(out / "cpu-scaling.tar") as tar:
        names = set(tar.getnames())
    for model in ("sage", "gat"):
        assert f"cpu-scaling/pyg-{model}-d1-r1/result.json" in names, sorted(names)[:20]
        assert f"cpu-scaling/pyg-{model}-d1-r1.log" in names
    log = (out / "log.txt").read_text()
    assert "pyg-sage-d1-r1: ok" in log and "pyg-gat-d1-r1: ok" in log, log
    assert "torch" in (out / "machine.txt").read_text()
