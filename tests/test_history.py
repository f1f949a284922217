"""A rerun never destroys a measured result (runners.records.history), and the printed rerun command
works as printed. Real runner processes on the tiny dataset, plus the moves on constructed
directories."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from analysis import aggregate
from runners.config import build_parser, config_from_args
from runners.records import envinfo, history
from runners.records.settle import record_skipped
from tests.helpers import REPO, live_dir, run_config, run_env, runner_argv

WAIT_S = 300


def _files(d: Path) -> dict:
    """Every file below `d` (previous/ and staging directories aside) -> its bytes."""
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(Path(d).rglob("*"))
            if p.is_file() and not history.in_history(p.relative_to(d))}


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> Path:
    """One ok run (PyG GraphSAGE, 1 process, tiny), made once; tests work on copies."""
    out = tmp_path_factory.mktemp("measured") / "pyg-sage-d1"
    res = run_config(out, devices=1, epochs=1)
    assert res.returncode == 0, res.stdout[-3000:]
    assert json.loads((out / "result.json").read_text())["status"] == "ok"
    return out


@pytest.fixture
def point(measured, tmp_path) -> Path:
    """A copy of the measured run, as a grid point with a recorded result."""
    out = tmp_path / "pyg-sage-d1"
    shutil.copytree(measured, out)
    for name in ("result.json", "config.json", "command.sh"):  # the copy's record names the copy
        (out / name).write_text((out / name).read_text().replace(str(measured), str(out)))
    return out


def _bare_python(tmp_path: Path, shadow: str | None = None) -> Path:
    """A Python that is none of the project's lanes: a venv of the base interpreter. With
    `shadow`, it sees the pair's packages except that module (importing it fails)."""
    venv = tmp_path / ("bare" if shadow is None else f"without-{shadow}")
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    if shadow:
        site = next((venv / "lib").glob("python3*/site-packages"))
        (site / shadow).mkdir()
        (site / shadow / "__init__.py").write_text(f"raise ImportError('{shadow} is not installed here')\n")
        pair_site = next(Path(sys.prefix, "lib").glob("python3*/site-packages"))
        (site / "pair.pth").write_text(f"{pair_site}\n")
    return venv / "bin" / "python"


def _printed_command(out: Path) -> str:
    return json.loads((out / "result.json").read_text())["command"]["shell"]


def test_the_printed_command_names_the_lanes_interpreter(point):
    command = _printed_command(point)
    here = os.path.abspath(sys.executable)
    expected = os.path.relpath(here, REPO) if here.startswith(str(REPO) + os.sep) else here
    assert command.split()[0] == expected and command.split()[0] != "python"
    assert " -m runners.run " in command and f"--out {point}" in command


def test_printed_rerun_in_a_plain_shell_replaces_the_run_and_keeps_the_old_one(point, tmp_path):
    """The report's command pasted into a shell whose `python` lacks the frameworks."""
    bare = _bare_python(tmp_path)
    path_first = tmp_path / "path"
    path_first.mkdir()
    (path_first / "python").symlink_to(bare)
    before = _files(point)
    old = json.loads((point / "result.json").read_text())
    res = subprocess.run(["sh", "-c", _printed_command(point)], cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=WAIT_S,
                         env={**run_env(), "PATH": f"{path_first}{os.pathsep}{os.environ['PATH']}"})
    assert res.returncode == 0, res.stdout[-3000:]
    new = json.loads((point / "result.json").read_text())
    assert new["status"] == "ok" and new["run_id"] == old["run_id"] and new["started_at"] > old["started_at"]
    assert new["config"]["out"] == str(point) and new["run_name"] == point.name
    (kept, data), = history.history(point)
    assert data == old and _files(kept) == before  # the replaced run, whole, under previous/
    assert kept.name.endswith("-ok") and "the run it replaced" in res.stdout
    assert history.stagings(point) == []

    # The aggregate reads the current run only and lists the earlier one.
    agg = aggregate.aggregate([point])
    assert list(agg.runs["status"]) == ["ok"] and list(agg.runs["previous_runs"]) == [1]
    assert list(agg.history["previous_dir"]) == [str(kept)] and agg.invalid.empty
    assert agg.runs["command"][0] == _printed_command(point)


@pytest.mark.parametrize("shadow", [None, "torch_geometric"], ids=["bare", "framework-missing"])
def test_a_python_outside_the_lanes_says_so_and_touches_nothing(point, tmp_path, shadow):
    python = _bare_python(tmp_path, shadow)
    before = _files(point)
    argv = json.loads((point / "result.json").read_text())["command"]["argv"][1:]
    res = subprocess.run([str(python), *argv], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=WAIT_S, env=run_env())
    assert res.returncode == 2, res.stdout[-3000:]
    assert str(python) in res.stdout and ".venv/bin/python -m runners.run" in res.stdout, res.stdout
    assert "Traceback" not in res.stdout and "SKIPPED" not in res.stdout
    assert _files(point) == before and not (point / history.PREVIOUS).exists()
    assert history.stagings(point) == []


def _start(argv, log: Path) -> subprocess.Popen:
    return subprocess.Popen(argv, cwd=REPO, env=run_env(), stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _wait_for_steps(out: Path, proc, log: Path) -> Path:
    """The staging directory of the rerun, once its rank 0 has finished an epoch."""
    deadline = time.time() + WAIT_S
    while True:
        stage = live_dir(out)
        epochs = stage / "rank0" / "epochs.csv"
        if stage != out and epochs.exists() and len(epochs.read_text().splitlines()) >= 2:
            return stage
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.time() < deadline, "the rerun did not finish an epoch in time"
        time.sleep(0.2)


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_rerun_stopped_midway_leaves_the_result_intact(point, tmp_path, how):
    before = _files(point)
    log = tmp_path / "rerun.log"
    proc = _start(runner_argv(point, devices=1, epochs=10000, extra=["--max-steps-per-epoch", "2"]), log)
    tree = []
    try:
        stage = _wait_for_steps(point, proc, log)
        assert _files(point) == before  # the point shows its recorded run while the rerun runs
        tree = psutil.Process(proc.pid).children(recursive=True)
        os.kill(proc.pid, getattr(signal, how))
        rc = proc.wait(timeout=60)
    finally:
        for p in [proc] + tree:  # SIGKILL leaves torchrun and the ranks to the test
            try:
                p.kill()
            except (psutil.Error, ProcessLookupError):
                pass
        psutil.wait_procs(tree, timeout=30)
    assert _files(point) == before
    if how == "SIGTERM":
        assert rc == 128 + signal.SIGTERM, log.read_text()[-3000:]
        (kept, data), = history.history(point)  # the interrupted rerun, filed with what it measured
        assert kept.name.endswith("-interrupted") and data["status"] == "interrupted"
        assert data["config"]["out"] == str(kept) and (kept / "rank0" / "steps.csv").exists()
        assert not stage.exists()
    else:
        assert rc == -signal.SIGKILL
        assert stage.exists() and not (stage / "result.json").exists()
        # What the killed rerun left is listed, not taken for the point's run.
        agg = aggregate.aggregate([point.parent])
        assert list(agg.runs["result_path"]) == [str(point / "result.json")] and agg.invalid.empty
        # The next run of the point files it under previous/ before it starts.
        res = run_config(point, devices=1, epochs=1)
        assert res.returncode == 0, res.stdout[-3000:]
        assert "filed the unfinished attempt" in res.stdout
        names = sorted(d.name for d, _ in history.history(point))
        assert len(names) == 2 and any(n.endswith("-unfinished") for n in names)
        assert any(n.endswith("-ok") for n in names) and not stage.exists()


def test_a_skipped_point_keeps_its_recorded_run(point):
    argv = ["--framework", "pyg", "--model", "sage", "--devices", "4", "--batch-size", "64", "--workers", "0",
            "--dataset", "tiny", "--epochs", "1", "--device", "cuda", "--skip-unavailable", "--out", str(point)]
    cfg = config_from_args(build_parser().parse_args(argv), visible_gpus=2, cpu_cores=2)
    before = _files(point)
    assert record_skipped(cfg, envinfo.collect(), argv) == 0
    assert _files(point) == before and not (point / history.PREVIOUS).exists()


# -- the moves, on constructed directories ---------------------------------------------------

def _fake_run(d: Path, status: str, started: str) -> None:
    (d / "rank0").mkdir(parents=True)
    (d / "rank0" / "steps.csv").write_text("epoch,step\n0,0\n")
    (d / "config.json").write_text(json.dumps({"out": str(d)}))
    (d / "result.json").write_text(json.dumps({"status": status, "started_at": started,
                                               "config": {"out": str(d)}}))


def test_promote_files_the_replaced_run_and_names_the_final_directory(tmp_path):
    out = tmp_path / "point"
    _fake_run(out, "ok", "2026-11-24T10:00:00+00:00")
    stage = history.staging_dir(out)
    _fake_run(stage, "hang", "2026-11-24T11:00:00+00:00")
    assert history.stagings(out) == [stage] and history.point_dir(stage) == out
    where, replaced = history.settle(stage, out, "hang")  # a hang is a finished measurement
    assert where == out and replaced == out / "previous" / "20261124T100000Z-ok"
    assert json.loads((out / "result.json").read_text())["config"]["out"] == str(out)
    assert json.loads((out / "config.json").read_text())["out"] == str(out)
    assert (replaced / "rank0" / "steps.csv").exists() and not stage.exists()


def test_an_interrupted_run_is_never_the_current_run(tmp_path):
    """Not even where the point has none: it is no finished output (a resumed sweep must redo the
    point, issue 43), so it goes under previous/ with what it measured; a measured run stays."""
    out = tmp_path / "point"
    first = history.staging_dir(out)
    _fake_run(first, "interrupted", "2026-11-24T10:00:00+00:00")
    where, replaced = history.settle(first, out, "interrupted")
    assert (where, replaced) == (out / "previous" / "20261124T100000Z-interrupted", None)
    assert history.current_result(out) is None and json.loads((where / "result.json").read_text())["status"] == \
        "interrupted"
    ok = out.parent / f".point.run-20990101T000000Z-{os.getpid()}"
    _fake_run(ok, "ok", "2026-11-24T11:00:00+00:00")
    history.settle(ok, out, "ok")
    third = out.parent / f".point.run-20990101T000001Z-{os.getpid()}"
    _fake_run(third, "interrupted", "2026-11-24T12:00:00+00:00")
    where, _ = history.settle(third, out, "interrupted")
    assert where == out / "previous" / "20261124T120000Z-interrupted"
    assert json.loads((out / "result.json").read_text())["started_at"] == "2026-11-24T11:00:00+00:00"


def test_salvage_promotes_a_recorded_stage_and_files_the_rest(tmp_path):
    out = tmp_path / "point"
    done = out.parent / ".point.run-20261124T100000Z-1"
    _fake_run(done, "ok", "2026-11-24T10:00:00+00:00")
    unfinished = out.parent / ".point.run-20261124T110000Z-2"
    (unfinished / "rank0").mkdir(parents=True)
    (unfinished / "rank0" / "steps.csv").write_text("epoch,step\n0,0\n")
    lines = history.salvage(out)
    assert len(lines) == 2 and history.stagings(out) == []
    assert json.loads((out / "result.json").read_text())["status"] == "ok"
    (kept, data), = history.history(out)
    assert kept.name.endswith("-unfinished") and data is None and (kept / "rank0" / "steps.csv").exists()
