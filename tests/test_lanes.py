"""Lanes (scripts/setup.sh): the `current` lane trains PyG on the newest torch PyG tests and
records DGL's grid points as skipped; the `own` lane reuses the torch its Python already has.

Real environments: `make test` builds .venv-current first (`make lanes`); the own-lane test
builds a third environment on top of a Python that can import the current lane's torch.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.helpers import REPO, run_env, runner_argv

CURRENT_PY = REPO / ".venv-current" / "bin" / "python"


def current_python() -> Path:
    if not CURRENT_PY.exists():
        pytest.fail(f"{CURRENT_PY} is missing: `make test` builds it (make lanes)")
    return CURRENT_PY


def run_in_lane(python: Path, out: Path, framework: str, model: str, devices: int = 1, **env) -> dict:
    """A short real run of `python -m runners.run` with the lane's Python; its result."""
    cmd = [str(python)] + runner_argv(out, framework, model, devices, batch_size=64,
                                      extra=["--max-steps-per-epoch", "2"])[1:]
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600,
                         env={**run_env(), **env})
    assert (out / "result.json").exists(), res.stdout[-3000:] + res.stderr[-3000:]
    return json.loads((out / "result.json").read_text())


@pytest.mark.parametrize("model", ["sage", "gat", "gcn"])
def test_current_lane_trains_pyg(tmp_path, model):
    python = current_python()
    result = run_in_lane(python, tmp_path / f"pyg-{model}", "pyg", model, devices=2 if model == "sage" else 1)
    assert result["status"] == "ok", result["diagnosis"]
    env = result["env"]
    assert env["lane"]["lane"] == "current"
    lock = (REPO / "requirements" / "current" / "lock.txt").read_text()
    assert f"torch=={env['torch'].split('+')[0]}" in lock
    assert env["torch"] != "2.2.1" and env["pyg_sampler_backend"] == "torch-sparse"
    assert env["lane"]["packages"]["torch"]["origin"] == "installed"
    assert result["summary"]["learned"] is not None


def test_dgl_is_skipped_in_current_lane(tmp_path):
    result = run_in_lane(current_python(), tmp_path / "dgl-sage", "dgl", "sage")
    assert result["status"] == "skipped"
    diagnosis = result["diagnosis"]
    assert diagnosis["cause"] == "framework_unavailable"
    assert "DGL" in diagnosis["summary"] and "lane current" in diagnosis["summary"]
    assert result["env"]["torch"] in diagnosis["summary"]
    assert result["identity"]["settings"]["lane"] == "current"


def test_doctor_names_the_lane_and_its_frameworks():
    res = subprocess.run([str(current_python()), "-m", "runners.checks.doctor", "--json"], cwd=REPO,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["lane"] == "current"
    assert list(report["frameworks"]) == ["pyg"] and report["frameworks"]["pyg"]["usable"]
    assert "not installed" in report["not_in_lane"]["dgl"]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def torch_closure(site: Path) -> list:
    """torch and every distribution it needs, as installed in `site`."""
    dists = {canonical(d.metadata["Name"]): d for d in md.distributions(path=[str(site)])}
    seen, todo = {}, ["torch"]
    while todo:
        name = todo.pop()
        if name in seen or name not in dists:
            continue
        seen[name] = dists[name]
        for text in dists[name].requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonical(req.name))
    return list(seen.values())


def python_with_torch(tmp_path: Path) -> dict:
    """Environment variables under which plain python3.11 imports a torch of its own (the
    current lane's, with nothing else of that lane): a user site whose .pth points at a
    directory holding torch and its dependencies only. Stands in for a GPU node's Python."""
    site = next((REPO / ".venv-current" / "lib").glob("python3.*/site-packages"))
    torch_only = tmp_path / "torch-only"
    torch_only.mkdir()
    for dist in torch_closure(site):
        for top in {Path(str(f)).parts[0] for f in dist.files or []} - {".."}:
            link = torch_only / top
            if not link.exists() and (site / top).exists():
                link.symlink_to(site / top)
    user_base = tmp_path / "userbase"
    user_site = user_base / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    user_site.mkdir(parents=True)
    (user_site / "torch-only.pth").write_text(str(torch_only) + "\n")
    return {"PYTHONUSERBASE": str(user_base)}


def test_own_lane_reuses_the_pythons_torch(tmp_path):
    current_python()
    # The Python this test's own virtualenv was made from (under `make test`, "python3.11" on
    # PATH is the pair's venv, whose torch is not the one to reuse).
    base = str(Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}")
    if not Path(base).exists():
        pytest.skip(f"{base} not found")
    env = {**os.environ, **python_with_torch(tmp_path)}
    probe = subprocess.run([base, "-c", "import importlib.metadata as m, torch; print(m.version('torch'))"], env=env,
                           capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr
    torch_version = probe.stdout.strip()
    venv = tmp_path / "own"
    res = subprocess.run(["scripts/setup.sh"], cwd=REPO, capture_output=True, text=True, timeout=1800,
                         env={**env, "LANE": "own", "PYTHON": base, "VENV": str(venv)})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    manifest = json.loads((venv / "gnnscale-lane.json").read_text())
    assert manifest["lane"] == "own" and manifest["system_site_packages"]
    assert manifest["packages"]["torch"] == {"version": torch_version, "origin": "reused"}
    assert "torch" in manifest["reused"]
    assert manifest["packages"]["torch-geometric"]["origin"] == "installed"
    assert manifest["packages"]["torch-sparse"]["origin"] == "installed"
    # The set-up installed no torch of its own: the one that imports is the Python's.
    own_site = next((venv / "lib").glob("python3.*/site-packages"))
    assert not (own_site / "torch").exists()
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import torch; print(torch.__file__)"],
                           env=env, capture_output=True, text=True)
    assert "torch-only" in where.stdout, where.stdout + where.stderr
    # ... and a real PyG run in that environment records what was reused.
    result = run_in_lane(venv / "bin" / "python", tmp_path / "run", "pyg", "sage",
                         PYTHONUSERBASE=env["PYTHONUSERBASE"])
    assert result["status"] == "ok", result["diagnosis"]
    assert result["env"]["lane"]["lane"] == "own"
    assert result["env"]["lane"]["packages"]["torch"]["origin"] == "reused"
    assert result["env"]["torch"] == torch_version



def test_own_lane_on_a_python_that_is_itself_a_virtualenv(tmp_path):
    """A GPU image's python3 is often a virtualenv (/opt/torch/.venv): its torch lives in that
    venv's site-packages, which --system-site-packages does not show. The own lane sees it anyway
    and installs nothing (with no package index, as on such a machine, an install would fail)."""
    python = current_python()  # a virtualenv holding every package of the current lane
    venv = tmp_path / "own"
    res = subprocess.run(["scripts/setup.sh"], cwd=REPO, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "LANE": "own", "PYTHON": str(python), "VENV": str(venv),
                              "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path / "no-wheels")})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    manifest = json.loads((venv / "gnnscale-lane.json").read_text())
    assert manifest["packages"]["torch"]["origin"] == "reused"
    # nothing installed but what `python -m venv` itself puts in a new environment
    assert not set(manifest["installed"]) - {"pip", "setuptools", "wheel"}, manifest["installed"]
    assert {"torch", "torch-geometric", "torch-sparse", "pandas"} <= set(manifest["reused"])
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import torch; print(torch.__file__)"],
                           capture_output=True, text=True)
    assert str(REPO / ".venv-current") in where.stdout, where.stdout + where.stderr


def test_sweep_report_shows_both_lanes(tmp_path):
    """A real sweep with the current lane beside the pair: runs.csv carries the lane, the
    DGL point in `current` is skipped with its reason, and the report's lanes table shows
    PyG on both torches."""
    import yaml

    from tests.test_workflow import CONFIGS, project_copy, snakemake

    current_python()
    proj = project_copy(tmp_path)
    (proj / ".venv-current").symlink_to(REPO / ".venv-current")
    cfg = yaml.safe_load((CONFIGS / "minimal.yaml").read_text())
    cfg.update(max_steps_per_epoch=2, lanes={"compare": ["current"], "devices": [2], "batch_size": 64,
                                             "workers": 0, "repeats": 1})
    (proj / "lanes.yaml").write_text(yaml.safe_dump(cfg))
    res = snakemake("--configfile", str(proj / "lanes.yaml"), "--cores", "2", cwd=proj,
                    snakefile=proj / "Snakefile", timeout=1200)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    import pandas as pd

    runs = pd.read_csv(proj / "results" / "aggregate" / "runs.csv")
    by = {(r.framework, r.lane): r for r in runs.itertuples()}
    assert by[("pyg", "pair")].status == "ok" and by[("pyg", "current")].status == "ok"
    assert by[("dgl", "pair")].status == "ok" and by[("dgl", "current")].status == "skipped"
    assert by[("pyg", "current")].env_torch != by[("pyg", "pair")].env_torch
    lanes = pd.read_csv(proj / "results" / "report" / "lanes.csv")
    assert set(lanes["lane"]) == {"pair", "current"}
    assert "not installed" in lanes[(lanes.framework == "dgl") & (lanes.lane == "current")]["reason"].iloc[0]
    page = (proj / "results" / "report" / "index.html").read_text()
    assert "Lanes: the same graph on another torch" in page and f"current ({by[('pyg', 'current')].env_torch})" in page


@pytest.mark.parametrize("tmpdir_elsewhere", [False, True])
def test_setup_refuses_a_lane_the_disk_cannot_hold(tmp_path, tmpdir_elsewhere):
    """A disk too full for the lane is refused before pip starts, naming the need, the place and
    what is free there (pip itself reports a full disk as "Connection interrupted"); nothing is made."""
    venv = tmp_path / "lanes" / "new"
    env = {**os.environ, "LANE": "pair", "VENV": str(venv), "GNNSCALE_SETUP_NEED_GB": "100000"}
    if tmpdir_elsewhere:  # pip's temp dir on another filesystem: checked on its own
        if os.stat("/dev/shm").st_dev == os.stat(tmp_path).st_dev:
            pytest.skip("/dev/shm is on the same filesystem as the test's directory")
        env["TMPDIR"] = "/dev/shm"
    res = subprocess.run(["scripts/setup.sh"], cwd=REPO, capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 1, res.stdout + res.stderr
    said = res.stderr
    assert re.search(r"lane pair needs about 1000\d\d GB free for the lane's environment " + re.escape(str(venv)), said), said
    assert f"{tmp_path} has " in said and "GB free" in said and "GNNSCALE_SETUP_NEED_GB" in said, said
    assert ("pip's downloads in" in said) is not tmpdir_elsewhere, said
    assert not (tmp_path / "lanes").exists()
