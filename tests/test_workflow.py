"""The Snakemake workflow: every config parses, lint/format are clean, bad configs are
rejected by name, and a real minimal sweep runs, survives Ctrl-C and resumes.

Dry runs use a scratch --directory so that results/ of the checkout never changes the
job counts. The end-to-end test (test_slow_*, deselect with -k "not slow") runs in a
scratch copy of the project so that it can touch analysis code without touching ours.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from runners.records import history
from tests.helpers import live_dir

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SNAKEMAKE = str(BIN / "snakemake")
SNAKEFMT = str(BIN / "snakefmt")
CONFIGS = ROOT / "config"


def env(**extra):
    """Jobs call `python`: put this interpreter's environment first on PATH."""
    e = dict(os.environ)
    e["PATH"] = f"{BIN}{os.pathsep}{e.get('PATH', '')}"
    e.update(extra)
    return e


def snakemake(*args, cwd, snakefile=ROOT / "Snakefile", timeout=120, **extra_env):
    return subprocess.run(
        [SNAKEMAKE, "-s", str(snakefile), "--directory", str(cwd), *args],
        cwd=cwd,
        env=env(**extra_env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def job_counts(output):
    """Rule -> job count from the "Job stats" table of a (dry) run."""
    table = output.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}


def dry_run(cwd, *configfiles, args=(), snakefile=ROOT / "Snakefile", **extra_env):
    """Job counts of a dry run ({} when there is nothing to do).

    Targets go before --configfile, which takes every following word.
    """
    res = snakemake(
        "-n",
        *args,
        "--configfile",
        *map(str, configfiles),
        cwd=cwd,
        snakefile=snakefile,
        **extra_env,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout + res.stderr
    return {} if "Nothing to be done" in out else job_counts(out)


# --- every config parses, with the expected grid size ------------------------------------


@pytest.mark.parametrize(
    "config,runs",
    [
        # timing grid: frameworks x models x devices x batch x workers x repeats; convergence:
        # frameworks x models x repeats; study harness: frameworks x models x devices x repeats;
        # the deadlock demonstrations: one per framework
        # (the first round: the adaptive second round is planned once it has run)
        # (workers only at batch 1024: 3 batch x workers points, not 4)
        # + DGL's GraphBolt loader: models x devices x repeats; + PyG trimmed: models x devices x 2 repeats
        ("config.yaml", 2 * 2 * 2 * 3 * 3 + 2 * 2 * 2 + 2 * 2 * 2 * 1 + 2 + 2 * 2 * 3 + 2 * 2 * 2),  # + the current lane's 12 with LANES=current
        ("paper.yaml", 2 * 2 * 3 * 3 * 2),  # Reddit need not be present for -n
        ("minimal.yaml", 2),
        ("study.yaml", 2 * 2 * 2 * 2 * 2),  # harnesses x frameworks x models x devices x repeats
    ],
)
def test_dry_run_counts(tmp_path, config, runs):
    counts = dry_run(tmp_path, CONFIGS / config)
    assert counts["run"] == runs
    assert counts["dataset"] == counts["aggregate"] == counts["report"] == 1


def test_default_sweep_covers_every_axis():
    """The main job is a scaling study: at least two values on each of the five axes, repeats
    enough for intervals, and the seed study's harness at two device counts."""
    cfg = yaml.safe_load((CONFIGS / "config.yaml").read_text())
    grid = cfg["grid"]
    for axis in ("frameworks", "models", "devices", "batch_sizes", "workers"):
        assert len(grid[axis]) >= 2, axis
    # two repeats give every point an interval; the second round adds more where one is wide
    assert grid["repeats"] >= 2 and cfg["adaptive"]["max_repeats"] >= 3 and cfg["convergence"]["repeats"] >= 2
    assert len(cfg["study"]["devices"]) >= 2 and cfg["study"]["batch_size"] in grid["batch_sizes"]
    assert cfg["timing"]["until"] == "precise"


@pytest.mark.parametrize(
    "visible,extra,devices",
    [
        ("", {}, 2),  # no GPU: 1..max_cpu_devices
        # A mask cannot add GPUs: with none on the machine, still 1..max_cpu_devices
        # (the suite's one counter, runners.records.envinfo.visible_gpu_count, also for the runner).
        ("0,1,2,3", {}, 2),
        ("", {"node_gpus": 3}, 3),  # explicit node size wins
    ],
)
def test_scaling_devices_all(tmp_path, visible, extra, devices):
    configs = [CONFIGS / "scaling.yaml"]
    if extra:
        (tmp_path / "extra.yaml").write_text(yaml.safe_dump(extra))
        configs.append(tmp_path / "extra.yaml")
    counts = dry_run(tmp_path, *configs, CUDA_VISIBLE_DEVICES=visible)
    assert counts["run"] == 2 * 2 * devices * 1 * 2


def test_slurm_profile_dry_run(tmp_path):
    """The SLURM profile parses (nothing is submitted in a dry run)."""
    counts = dry_run(
        tmp_path,
        CONFIGS / "paper.yaml",
        args=("--workflow-profile", str(ROOT / "profiles" / "slurm")),
    )
    assert counts["run"] == 72


def test_harness_axis_run_ids(tmp_path):
    """Study-harness runs get a "study-" run id and --harness study; fair runs keep their ids
    and their command (no --harness flag), so adding the axis reruns nothing finished."""
    res = snakemake("-n", "-p", "--configfile", str(CONFIGS / "study.yaml"), cwd=tmp_path)
    out = res.stdout + res.stderr
    commands = [line for line in out.splitlines() if "runners.run" in line]
    study = [c for c in commands if "--harness study" in c]
    assert len(study) == len(commands) // 2 == 16, out[-3000:]
    assert all("/study-" in c for c in study)
    fair = [c for c in commands if c not in study]
    assert fair and all("--harness" not in c and "/study-" not in c for c in fair)
    assert any(re.search(r"results/runs/small/pyg-sage-d1-b512-w0-r0 ", c) for c in fair)


def test_default_sweep_run_kinds(tmp_path):
    """Timing runs stop by the rule and validate at the end; convergence runs ("conv-") train
    the full schedule, validated every epoch; study runs ("study-") the study's short schedule."""
    res = snakemake("-n", "-p", "--configfile", str(CONFIGS / "config.yaml"), cwd=tmp_path)
    commands = [c for c in (res.stdout + res.stderr).splitlines() if "runners.run" in c]
    kinds = {"conv": [c for c in commands if "/conv-" in c], "study": [c for c in commands if "/study-" in c],
             "lane": [c for c in commands if "/current-" in c], "hang": [c for c in commands if "/hang-" in c],
             "loader": [c for c in commands if "/graphbolt-" in c], "trim": [c for c in commands if "/trim-" in c]}
    timing = [c for c in commands if c not in sum(kinds.values(), [])]
    assert len(timing) == 72 and len(kinds["conv"]) == 8 and len(kinds["study"]) == 8
    # DGL's GraphBolt beside its classic loader: timing runs of DGL only, at both models x 1 and 2
    # devices; the classic runs name no loader, so adding loaders reruns none of them.
    assert len(kinds["loader"]) == 12 and all("--framework dgl" in c and "--loader graphbolt" in c
                                             and "--until precise" in c and "-b1024-w0-" in c
                                             for c in kinds["loader"])
    assert not any("--loader" in c for c in timing + kinds["conv"] + kinds["study"] + kinds["hang"])
    # PyG with trim_to_layer beside its untrimmed runs, at the same points; only those trim.
    assert len(kinds["trim"]) == 8 and all("--framework pyg" in c and "--pyg-trim" in c and "--until precise" in c
                                           and "-b1024-w0-" in c for c in kinds["trim"])
    assert not any("--pyg-trim" in c for c in commands if c not in kinds["trim"])
    # loader workers only at batch 1024 (grid.worker_batch_sizes), every other point at both
    assert not any("--workers 1" in c and "--batch-size 256" in c for c in timing)
    assert sum("--workers 1" in c for c in timing) == 24
    # The current lane is opt-in (`make report LANES=current` passes this --config): its timing
    # runs have the same stop rule, its own Python, --lane current; the pair's runs name no lane
    # (the runner records the Python's own), so adding the lane reruns none of them.
    assert kinds["lane"] == []
    with_lane = snakemake("-n", "-p", "--configfile", str(CONFIGS / "config.yaml"), "--config",
                          "lanes={compare: [current]}", cwd=tmp_path)
    lane_commands = [c for c in (with_lane.stdout + with_lane.stderr).splitlines() if "runners.run" in c]
    kinds["lane"] = [c for c in lane_commands if "/current-" in c]
    assert len(kinds["lane"]) == 12 and sorted(set(lane_commands) - set(kinds["lane"])) == sorted(set(commands))
    assert all("--until precise" in c and "--lane current" in c and ".venv-current/bin/python" in c
               for c in kinds["lane"])
    assert not any("--lane" in c for c in timing + kinds["conv"] + kinds["study"])
    assert all("--until precise" in c and "--eval-every end" in c and "--max-train-time" in c for c in timing)
    assert all("--until" not in c and "--eval-every 1" in c and "-b256-w0-" in c for c in kinds["conv"])
    assert {re.search(r"--epochs (\d+)", c)[1] for c in kinds["conv"]} == {"8", "40"}  # GraphSAGE, GAT
    assert all("--harness study" in c and "--epochs 3 " in c for c in kinds["study"])
    # The deadlock demonstrations: one per framework, the naive split, a short stall floor.
    assert sorted(re.search(r"--framework (\w+)", c)[1] for c in kinds["hang"]) == ["dgl", "pyg"]
    assert all("--uneven-batches" in c and "--stall-floor 5 " in c and "--epochs 1 " in c and "-d2-b1024-" in c
               for c in kinds["hang"])
    assert not any("--uneven-batches" in c for c in timing + kinds["conv"] + kinds["study"] + kinds["lane"])


def test_strategy_block_adds_partitioned_points(tmp_path):
    """config strategy (null by default) adds DGL's partitioned points on 2 nodes: each passes
    the strategy, the method and `--ip-config slurm` (each node's launcher makes it from the
    SLURM job's nodes), waits for its partitions (rule partitions,
    P = nodes) and starts one runner per node; PyG, without a partitioned engine, gets none.
    On one node the config is refused, naming why."""
    strategy = "strategy: {method: metis, devices: [1], batch_size: 128, repeats: 2}\n"
    (tmp_path / "two.yaml").write_text("nodes: 2\n" + strategy)
    (tmp_path / "one.yaml").write_text(strategy)
    res = snakemake("-n", "-p", "--configfile", str(CONFIGS / "minimal.yaml"), str(tmp_path / "two.yaml"),
                    cwd=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    commands = [c for c in out.splitlines() if "runners.run" in c]
    part = [c for c in commands if "/part-metis-" in c]
    assert len(part) == 2 and all("--framework dgl" in c and "--devices 1 " in c and "--batch-size 128" in c
                                  and "--strategy partitioned --part-method metis --ip-config slurm" in c
                                  and "srun --nodes=2" in c and "--workers 0" in c for c in part), part
    assert not any("--strategy" in c for c in commands if c not in part)
    assert job_counts(out).get("partitions") == 1
    assert "results/partitions/tiny-p2-metis.json" in out
    default = snakemake("-n", "-p", "--configfile", str(CONFIGS / "config.yaml"), cwd=tmp_path)
    assert default.returncode == 0 and "--strategy" not in default.stdout + default.stderr
    one = snakemake("-n", "--configfile", str(CONFIGS / "minimal.yaml"), str(tmp_path / "one.yaml"), cwd=tmp_path)
    assert one.returncode != 0
    assert "Invalid config: strategy: partitioned runs need nodes >= 2" in one.stdout + one.stderr


def test_run_message_numbers_runs(tmp_path):
    """Runs are numbered in their execution order (each framework once here)."""
    res = snakemake("-n", "--configfile", str(CONFIGS / "minimal.yaml"), cwd=tmp_path)
    out = res.stdout + res.stderr
    numbered = dict(re.findall(r"run (\d)/2: (pyg|dgl) sage devices=2 batch=64 workers=0", out))
    assert set(numbered) == {"1", "2"} and set(numbered.values()) == {"pyg", "dgl"}, out


def test_report_outputs_match_analysis(tmp_path):
    """The report job declares exactly the files analysis.report writes."""
    res = snakemake("-n", "--configfile", str(CONFIGS / "minimal.yaml"), cwd=tmp_path)
    out = res.stdout + res.stderr
    block = out.split("rule report:", 1)[1]
    declared = re.search(r"^\s+output: (.*)$", block, re.M)[1].split(", ")
    res = subprocess.run(
        [sys.executable, "-c", "from analysis.report.render import ASSETS; print(*ASSETS)"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr  # an analysis that cannot be imported is a failure, never a skip
    written = ["index.html", *res.stdout.split()]
    assert sorted(declared) == sorted(f"results/report/{name}" for name in written)


def test_dry_run_changes_no_file(tmp_path):
    """`snakemake -n` moves, writes and touches nothing, even with a stale adaptive plan in the
    project (its first round is gone): it says the plan is stale and that plan_repeats would
    make it again, and leaves setting it aside to that job (issue 54)."""
    cfg = minimal_with(adaptive={"precision": 0.05, "budget_min": 1, "max_repeats": 3})
    (tmp_path / "adaptive.yaml").write_text(yaml.safe_dump(cfg))
    plan = tmp_path / "results/plan/repeats.json"
    plan.parent.mkdir(parents=True)
    plan.write_text('{"runs": []}\n')

    def files():
        """Every file of the project, bytes and mtime (not Snakemake's own .snakemake/: its
        dry runs cache what they saw there)."""
        return {
            p: (p.read_bytes(), p.stat().st_mtime_ns)
            for p in tmp_path.rglob("*")
            if p.is_file() and ".snakemake" not in p.relative_to(tmp_path).parts
        }

    before = files()
    res = snakemake("-n", "--configfile", str(tmp_path / "adaptive.yaml"), cwd=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert f"the adaptive plan {plan.relative_to(tmp_path)} is stale" in out
    assert job_counts(out).get("plan_repeats") == 1, out
    after = files()
    assert after == before, sorted(set(after) ^ set(before))


# --- static checks ----------------------------------------------------------------------------


def test_lint_clean(tmp_path):
    res = snakemake("--lint", "--configfile", str(CONFIGS / "config.yaml"), cwd=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 0 and "Congratulations" in out, out


def test_snakefmt_clean():
    res = subprocess.run(
        [SNAKEFMT, "--check", "Snakefile", "workflows"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stdout + res.stderr


# --- bad configs fail at parse time, naming the key --------------------------------------


def minimal_with(**changes):
    cfg = yaml.safe_load((CONFIGS / "minimal.yaml").read_text())
    for key, value in changes.items():
        *parents, leaf = key.split(".")
        node = cfg
        for p in parents:
            node = node[p]
        node[leaf] = value
    return cfg


@pytest.mark.parametrize(
    "changes,expected",
    [
        ({"grid.frameworks": ["tensorflow"]}, ["grid.frameworks: 'tensorflow' is no registered framework", "pyg, dgl"]),
        ({"fanouts": [10, 10, 10]}, ["fanouts", "models.sage.layers is 2"]),
        ({"optimizer.lr_scaling": "sqrt"}, ["lr_scaling", "'none', 'linear'"]),
        ({"grid.devices": [0]}, ["devices"]),
        ({"epoch": 3}, ["'epoch' was unexpected"]),
    ],
)
def test_bad_config_rejected(tmp_path, changes, expected):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(minimal_with(**changes)))
    res = snakemake("-n", "--configfile", str(bad), cwd=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode != 0
    for text in expected:
        assert text in out, out


# --- a real minimal sweep ------------------------------------------------------------------


def tools_ready():
    """The runner and the analysis package are written by others; skip until both exist."""
    for module in ("runners.run", "analysis.aggregate", "analysis.report"):
        res = subprocess.run(
            [sys.executable, "-m", module, "--help"],
            cwd=ROOT,
            capture_output=True,
            timeout=120,
        )
        if res.returncode != 0:
            return f"`python -m {module} --help` does not work yet"
    return None


def copy_project(dst):
    for name in ("Snakefile", "environment.yml"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, dst / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("workflows", "config", "profiles", "runners", "analysis", "scripts"):
        shutil.copytree(ROOT / name, dst / name, ignore=ignore)


def project_copy(tmp_path):
    """A copy of the project to run a real sweep in (skips when the tools are missing)."""
    reason = tools_ready()
    if reason:
        pytest.skip(reason)
    proj = tmp_path / "proj"
    proj.mkdir()
    copy_project(proj)
    return proj


def start_sweep(proj, configfile, logfile) -> subprocess.Popen:
    """The sweep of `proj` started as from a terminal, in a process group of its own that a
    Ctrl-C (SIGINT to the group) reaches; its output goes to `logfile`."""
    return subprocess.Popen(
        [SNAKEMAKE, "-s", str(proj / "Snakefile"), "--configfile", str(configfile)],
        cwd=proj,
        env=env(),
        stdout=open(logfile, "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        # a shell's background job inherits SIGINT ignored; a terminal's Ctrl-C is not
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def test_slow_runs_start_interleaved_by_repeat(tmp_path):
    """With repeats, every configuration's repeat r starts before any repeat r + 1, in the
    shuffled order the run messages number (checked on the real runs' started_at); then the
    adaptive second round adds repeats where the interval is too wide."""
    proj = project_copy(tmp_path)
    cfg = minimal_with(**{"grid.repeats": 2, "max_steps_per_epoch": 2, "epochs": 2})  # a steady epoch to compare
    (proj / "order.yaml").write_text(yaml.safe_dump(cfg))
    res = snakemake(
        "--configfile",
        str(proj / "order.yaml"),
        "--until",
        "run",
        cwd=proj,
        snakefile=proj / "Snakefile",
        timeout=600,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    results = [
        json.loads(p.read_text()) for p in (proj / "results/runs/tiny").glob("*/result.json")
    ]
    assert len(results) == 4
    started = sorted(results, key=lambda r: (r["started_at"], r["finished_at"]))
    assert [r["config"]["repeat"] for r in started] == [0, 0, 1, 1]
    numbered = re.findall(
        r"run (\d)/4: (\w+) sage devices=2 batch=64 workers=0 repeat=(\d)",
        res.stdout + res.stderr,
    )
    by_number = [(fw, int(rep)) for _, fw, rep in sorted(numbered)]
    assert by_number == [(r["config"]["framework"], r["config"]["repeat"]) for r in started]
    # each repeat trains from its own seed, the same for both frameworks
    assert {(r["config"]["repeat"], r["config"]["seed"]) for r in results} == {(0, 0), (1, 1)}

    # The adaptive second round: the checkpoint reads these 4 runs and, since PyG over DGL is
    # wider than ±0.1%, adds repeats (at most 3 runs a point). A Ctrl-C (SIGINT to the group, as
    # a terminal sends it) as the second round starts; the same command then finishes it: the
    # aggregate waits for every added run and the report says which points got them and why.
    cfg["adaptive"] = {"precision": 0.001, "budget_min": 1, "max_repeats": 3}
    (proj / "order.yaml").write_text(yaml.safe_dump(cfg))
    logfile = tmp_path / "second-round.log"
    proc = start_sweep(proj, proj / "order.yaml", logfile)
    try:
        deadline = time.time() + 300
        while "repeat=2" not in logfile.read_text():
            assert proc.poll() is None, logfile.read_text()[-3000:]
            assert time.time() < deadline, "the second round did not start in time"
            time.sleep(0.2)
        time.sleep(1)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    res = snakemake("--configfile", str(proj / "order.yaml"), cwd=proj, snakefile=proj / "Snakefile", timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    plan = json.loads((proj / "results/plan/repeats.json").read_text())
    assert plan["first_round"] == 2 and plan["runs"] and all(r["repeat"] == 2 for r in plan["runs"])
    assert plan["comparisons"][0]["comparison"] == "PyG over DGL (sage d2 b64 w0)"
    added = sorted(f"{r['name']}-r{r['repeat']}" for r in plan["runs"])
    tiny = proj / "results/runs/tiny"
    statuses = {d.name: json.loads((d / "result.json").read_text())["status"]
                for d in tiny.iterdir() if (d / "result.json").exists()}
    assert len(statuses) == 4 + len(added) and set(statuses.values()) == {"ok"}, statuses
    runs = pd.read_csv(proj / "results/aggregate/runs.csv")
    assert len(runs) == 4 + len(added)
    page = (proj / "results/report/index.html").read_text()
    assert "Second round:" in page and "PyG over DGL, sage" in page
    assert dry_run(proj, proj / "order.yaml", snakefile=proj / "Snakefile") == {}

    # A first-round run redone after the plan (here its result rewritten) makes the plan stale:
    # the checkpoint sets it aside under previous/ as it makes the new one.
    time.sleep(1)
    first = next(p for p in tiny.glob("*-r0/result.json"))
    first.write_text(first.read_text() + "\n")
    old_plan = (proj / "results/plan/repeats.json").read_bytes()
    res = snakemake("--configfile", str(proj / "order.yaml"), "--until", "plan_repeats", cwd=proj,
                    snakefile=proj / "Snakefile", timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    (aside,) = (proj / "results/plan/previous").glob("repeats-*.json")
    assert aside.read_bytes() == old_plan and (proj / "results/plan/repeats.json").exists()

    # A deleted run of the second round is measured again, as is a deleted sweep: the plan made
    # from the deleted first round is stale, so plan_repeats makes it again; the dry run moves
    # nothing (the job sets the stale plan aside when it runs).
    shutil.rmtree(tiny / added[0])
    counts = dry_run(proj, proj / "order.yaml", snakefile=proj / "Snakefile")
    assert counts.get("run") == 1 and counts.get("aggregate") == 1, counts
    shutil.rmtree(tiny)
    counts = dry_run(proj, proj / "order.yaml", snakefile=proj / "Snakefile")
    assert counts.get("run") == 4 and counts.get("plan_repeats") == 1, counts
    assert (proj / "results/plan/repeats.json").exists()
    assert list((proj / "results/plan/previous").glob("repeats-*.json")) == [aside]


def test_slow_end_to_end_minimal_sweep(tmp_path):
    """Ctrl-C after the first finished run, resume, complete, then check what reruns."""
    proj = project_copy(tmp_path)
    snakefile = proj / "Snakefile"
    minimal = str(proj / "config" / "minimal.yaml")
    runs = sorted(
        proj / "results/runs/tiny" / f"{fw}-sage-d2-b64-w0-r0" / "result.json"
        for fw in ("pyg", "dgl")
    )

    # 1. Start the sweep and interrupt it like a terminal Ctrl-C (SIGINT to the group)
    #    as soon as the first run has finished.
    log = open(tmp_path / "interrupted.log", "w")
    proc = subprocess.Popen(
        [SNAKEMAKE, "-s", str(snakefile), "--configfile", minimal],
        cwd=proj,
        env=env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.time() + 300
    logfile = tmp_path / "interrupted.log"
    try:
        # finished = Snakemake has recorded the job, not merely result.json written
        while "(Rule: run)" not in logfile.read_text():
            assert proc.poll() is None, logfile.read_text()
            assert time.time() < deadline, "no run finished in time"
            time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
    # The run the Ctrl-C stopped may have recorded itself as interrupted (result.json is an
    # update() output: Snakemake keeps it, marked incomplete); it is redone below.
    finished = [
        p
        for p in runs
        if p.exists() and json.loads(p.read_text())["status"] != "interrupted"
    ]
    assert finished, "the finished result was lost"
    kept = {p: p.stat().st_mtime for p in finished}

    # 2. Resume: only what is missing runs; the finished result is kept as is.
    res = snakemake("--configfile", minimal, cwd=proj, snakefile=snakefile, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert all(p.exists() for p in runs)
    assert [json.loads(p.read_text())["status"] for p in runs] == ["ok", "ok"]  # none left interrupted
    assert {p: p.stat().st_mtime for p in finished} == kept
    for name in ("runs.csv", "epochs.csv", "steps.csv", "invalid.csv"):
        assert (proj / "results/aggregate" / name).exists(), name
    html = proj / "results/report/index.html"
    assert html.exists() and html.stat().st_size > 0

    # 3. Nothing left to do.
    assert dry_run(proj, minimal, snakefile=snakefile) == {}

    # 4. Editing analysis code reruns aggregate and report, never a training run.
    #    (A real edit: Snakemake ignores a newer mtime when the checksum is unchanged.)
    time.sleep(1)
    with open(proj / "analysis" / "aggregate.py", "a") as f:
        f.write("\n# edited\n")
    counts = dry_run(proj, minimal, snakefile=snakefile)
    assert counts.get("aggregate") == counts.get("report") == 1, counts
    assert "run" not in counts and "dataset" not in counts, counts

    # 5. The documented command reruns exactly one configuration (and the report).
    one = str(runs[0].relative_to(proj))
    counts = dry_run(proj, minimal, args=("--forcerun", one), snakefile=snakefile)
    assert counts.get("run") == 1, counts

    # 6. `snakemake --report` renders the report with the captions.
    res = snakemake(
        "--report", "report.html", "--configfile", minimal, cwd=proj, snakefile=snakefile
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert (proj / "report.html").stat().st_size > 0

    # 7. The rerun command the result carries, run as printed: the run is redone and the
    #    one it replaced is kept under previous/ (Snakemake must not remove it first).
    old = json.loads(runs[0].read_text())
    table = pd.read_csv(proj / "results/aggregate/runs.csv")
    printed = table.set_index("result_path").loc[str(runs[0]), "workflow_command"]
    # the snakemake beside the interpreter Snakemake ran in, by its absolute path: it lives
    # outside this copy (its venv's, which may be a link's target: not SNAKEMAKE's own path)
    first, rest = printed.split(" ", 1)
    assert os.path.isabs(first) and first.endswith("/bin/snakemake") and os.access(first, os.X_OK)
    assert rest == (
        "--cores all --profile profiles/default --configfile config/minimal.yaml"
        f" --forcerun {one}"
    )
    res = subprocess.run(
        printed + f" -s {snakefile}",
        shell=True, cwd=proj, env=env(), capture_output=True, text=True, timeout=600,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    new = json.loads(runs[0].read_text())
    assert new["status"] == "ok" and new["started_at"] > old["started_at"]
    # (previous/ may also hold what the Ctrl-C in step 1 left of the run it stopped)
    kept = [
        d
        for d in (runs[0].parent / "previous").iterdir()
        if (d / "result.json").exists()
        and json.loads((d / "result.json").read_text()) == old
    ]
    assert len(kept) == 1 and (kept[0] / "rank0" / "steps.csv").exists(), kept


def _rows(path):
    try:
        return len(path.read_text().splitlines()) - 1
    except OSError:
        return 0


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm-to-the-runner"])
def test_slow_interrupted_run_is_recorded_and_redone(tmp_path, how):
    """A run stopped mid-training, by a Ctrl-C of the sweep or by SIGTERM to the runner alone
    (kill, a scheduler): the runner records it as interrupted under previous/, never as the
    point's result, and exits non-zero, so the next `snakemake` redoes it."""
    import psutil

    proj = project_copy(tmp_path)
    cfg = minimal_with(**{"epochs": 10000, "max_steps_per_epoch": 2, "grid.frameworks": ["pyg"]})
    (proj / "long.yaml").write_text(yaml.safe_dump(cfg))
    run_dir = proj / "results/runs/tiny/pyg-sage-d2-b64-w0-r0"
    logfile = tmp_path / "sweep.log"
    proc = start_sweep(proj, proj / "long.yaml", logfile)
    try:
        deadline = time.time() + 300
        while _rows(live_dir(run_dir) / "rank0" / "epochs.csv") < 2:
            assert proc.poll() is None, logfile.read_text()[-3000:]
            assert time.time() < deadline, "the run did not start training in time"
            time.sleep(0.3)
        live = live_dir(run_dir)
        pids = {int(f.stem) for f in (live / "workers").glob("*.json")} | {
            json.loads(f.read_text())["pid"] for f in live.glob("rank*/rank.json")
        }
        if how == "ctrl-c":  # the terminal signals the whole foreground group
            os.killpg(proc.pid, signal.SIGINT)
        else:
            runner = next(  # the launcher itself, not the job's shell around it
                p
                for p in psutil.Process(proc.pid).children(recursive=True)
                if p.cmdline()[1:3] == ["-m", "runners.run"]
            )
            runner.terminate()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0
    out = logfile.read_text()
    result = run_dir / "result.json"
    # Either way no finished output: the interrupted run is kept under previous/ (runners.records.history),
    # so the next sweep redoes the point whatever Snakemake recorded of the job.
    assert not result.exists()
    (_, data), = history.history(run_dir)
    assert data["status"] == "interrupted"
    if how != "ctrl-c":
        assert "INTERRUPTED pyg/sage" in out, out[-3000:]
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    counts = dry_run(proj, proj / "long.yaml", snakefile=proj / "Snakefile")
    assert counts.get("run") == 1, counts
