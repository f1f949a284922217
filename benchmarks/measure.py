"""Does the suite measure the frameworks, or itself? Numbers, side by side, in one run (issue 7).

    python -m benchmarks.measure [--quick] [--dataset small] [--repeats 5] [--with-sweep] [--only fidelity,cv]
                                 [--timed pyg,dgl]

Prints one markdown table (measurement, figure, target, verdict, detail) and writes it to
`results/benchmarks/measure.md` with every raw number in `measure.json`:

1. probe overhead  the runner with probes on vs `--no-probes`: median step time.
2. fidelity        the runner vs a minimal DDP loop in the style of each framework's own multi-GPU example
                   (benchmarks/reference_{pyg,dgl}.py; DGL with --loader graphbolt against
                   reference_graphbolt.py, its GraphBolt example): median epoch time of the slowest rank; with
                   the cost per step of the runner loop's bookkeeping (runners.rank.phase_timer.StepRecorder,
                   timed in-process); and the gap itself: PyG's epoch time over DGL's as the runner measures it,
                   over the same ratio between the references, per repeat (within 3% either way).
3. memory          PSS summed over ranks of the graph as the runner's adapters hold it, 2 ranks vs 1
                   (benchmarks/memory_probe.py), on a synthetic graph large enough to dominate.
4. start-up        launch to first step of the runner, and its split (result.json marks).
5. sweep           wall time of the default Snakemake sweep in a clean copy of the repo, and of a no-op rerun
                   (only with --with-sweep).
6. variation       coefficient of variation of the runner's epoch time over repeats.
7. launch          what one run costs beside its training, part by part (the launcher, the rank starter, each
                   rank's imports, process group, data, validation, records, exit), for each rank starter
                   (runners.launch.spawn, torchrun), against the floor: a bare `python -c "import torch,
                   FRAMEWORK"`, and that plus torch._dynamo, which torch 2.2's optimisers import on first use.
8. coverage        (only with --with-coverage) the share of the report's 95% intervals, on subsamples of 2
                   rounds of launches from 10 launches of PyG and DGL at two points, that miss the all-launch
                   ratio: the configuration + block fit, launch noise pooled without blocks, and the old
                   per-comparison Welch interval (benchmarks/coverage.py).
9. projection      the projection's out-of-sample check replayed on stored sweeps (their aggregates:
                   tests/data/sweeps/*, and results/aggregate when there is one): per sweep, the share of
                   held-out multi-device points inside their calibrated intervals
                   (analysis.projection.predict.calibrate), beside the sweep's launch noise.

The configurations of 1, 2, 4 and 6 run interleaved (repeat i runs every variant once, in an order rotated by i)
so that drift of a shared machine hits all variants alike; each figure is the median over repeats of a
per-repeat ratio, except fidelity's: the ratio of the cells as the report's first screen takes it (log epoch
time fitted as cell + repeat block over every cell of the run, its 95% interval on the noise pooled over the
cells), whose verdict is UNSETTLED while the interval spans the target (more repeats narrow it). Runner runs go
through `python -m runners.run`, exactly what users run. This is a benchmark, not a test: verdicts are reported,
never asserted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from benchmarks.fidelity import FIDELITY_FILE, block_ratio, fidelity_record, of
from benchmarks.interleave import SO_FAR, so_far, timing_runs
from benchmarks.measure_runs import (FRAMEWORKS, PY, REFERENCE_VARIANTS, REPO, TIMED, MeasureError, Settings, execute,
                                     gap_pairs, launch_parts, log, recorder_cost, run_torchrun, runner_argv, timed)
from runners import datasets
from runners.adapters import registry
from runners.records import envinfo
from runners.records.rundir import RunDir

VARIANTS = ("probes-on", "probes-off", "reference")

# (key prefix, measurement, target as text, limit): a figure passes when figure <= limit.
TARGETS = {
    "probe": ("probe overhead", "<= 1% of step time", 0.01),
    "fidelity": ("fidelity: runner / reference epoch", "<= 1.03", 1.03),
    # two-sided: a cost the runner adds to either framework's step moves the gap either way
    "fidelity_gap": ("fidelity: the runner's framework gap / the references'", "within 3% either way", 1.03),
    "memory": ("memory: PSS 2 ranks / 1 rank", "<= 1.3x", 1.3),
    "startup": ("start-up: command to first step", "<= 10 s", 10.0),
    "sweep": ("sweep wall time", "<= 600 s", 600.0),
    "noop": ("sweep wall time", "<= 5 s", 5.0),
    "cv": ("variation: CV of epoch time", "<= 5%", 0.05),
    "launch": ("launch: run minus training, over the import floor", "<= 1.5 s", 1.5),
    "coverage": ("coverage: 2 + 2 intervals missing the all-launch ratio", "<= 10% (covers >= 90%)", 0.10),
    "projection": ("projection: held-out points outside their intervals", "<= 10% (covers >= 90%)", 0.10),
}
# The stored sweeps the projection row replays by default: small aggregates kept as test data.
PROJECTION_SWEEPS = REPO / "tests" / "data" / "sweeps"
STARTERS = ("spawn", "torchrun")
FLOOR_MODULES = {f: registry.framework(f).module for f in FRAMEWORKS}  # what the import floor imports


QUICK = {"dataset": "tiny", "repeats": 2, "epochs": 2, "batch_size": 128, "fanouts": "6,5,4",
         "memory_graph": [50_000, 2_000_000, 128]}


# ---------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------

def ratio_median(pairs: list) -> float:
    return statistics.median(a / b for a, b in pairs)


def cv(values: list) -> float:
    return statistics.stdev(values) / statistics.mean(values) if len(values) > 1 else float("nan")


# ---------------------------------------------------------------------------------------
# Measurements
# ---------------------------------------------------------------------------------------

def row(key: str, figure: float, shown: str, detail: str, interval: tuple | None = None) -> dict:
    """One table row. With `interval` (low, high), the verdict is the interval's: PASS when all
    of it is within the limit, MISS when none of it is, UNSETTLED when it spans the limit (the
    repeats cannot tell the figure from the target)."""
    name, target, limit = TARGETS[key.split(":")[0]]
    if interval is None or any(v != v for v in interval):  # no interval (NaN): the figure's own verdict
        verdict = "PASS" if figure <= limit else "MISS"
    else:
        verdict = "PASS" if interval[1] <= limit else "MISS" if interval[0] > limit else "UNSETTLED"
    return {"key": key, "measurement": f"{name} ({key.split(':')[1]})", "figure": shown, "value": figure,
            "target": target, "verdict": verdict, "detail": detail,
            **({"interval": list(interval)} if interval is not None else {})}


def wanted(s: Settings, kind: str) -> bool:
    """Whether row kind `kind` (a TARGETS key) is measured in this invocation (--only); a kind
    named family_part (fidelity_gap) comes with its family."""
    return s.only is None or kind in s.only or kind.split("_")[0] in s.only


def timing_variants(s: Settings) -> tuple:
    """The runner variants the wanted timing rows need: probes-off only for probe overhead,
    the reference only for fidelity."""
    return tuple(v for v in VARIANTS if (v != "probes-off" or wanted(s, "probe"))
                 and (v != "reference" or wanted(s, "fidelity")))


def measure_timing(s: Settings, work: Path, raw: dict) -> list:
    """Rows 1, 2, 4, 6: runner with probes on, off, and the reference, interleaved."""
    variants = timing_variants(s)
    runs = timing_runs(s, work, variants, raw)
    raw["timing"] = {"/".join(k): v for k, v in runs.items()}

    rows = probe_rows(s, runs) if wanted(s, "probe") else []
    rows += fidelity_rows(s, work, runs, raw) if wanted(s, "fidelity") else []
    rows += startup_rows(s, runs, variants, raw) if wanted(s, "startup") else []
    for fw in timed(s):
        for m in s.models if wanted(s, "cv") else ():
            times = [r["epoch_s"] for r in runs[(fw, m, "probes-on")]]
            if len(times) < 2:
                rows.append(placeholder(f"cv:{fw}-{m}", "SKIP", "one repeat: variation needs two"))
                continue
            c = cv(times)
            rows.append(row(f"cv:{fw}-{m}", c, f"{c * 100:.1f}%",
                            f"{len(times)} repeats of the runner: median epoch "
                            + ", ".join(f"{t:.3f}" for t in times) + " s"))
    return rows


def probe_rows(s: Settings, runs: dict) -> list:
    """Row 1: the runner's step time with probes on over probes off."""
    rows = []
    for fw in timed(s):
        for m in s.models:
            on, off = runs[(fw, m, "probes-on")], runs[(fw, m, "probes-off")]
            step = ratio_median([(a["step_s"], b["step_s"]) for a, b in zip(on, off)]) - 1
            epoch = ratio_median([(a["epoch_s"], b["epoch_s"]) for a, b in zip(on, off)]) - 1
            cost = statistics.median(r["probe_cost_s"] / r["train_s"] for r in on)
            rows.append(row(f"probe:{fw}-{m}", step, f"{step * 100:+.2f}%",
                            f"median step {statistics.median(r['step_s'] for r in on) * 1e3:.1f} ms on vs "
                            f"{statistics.median(r['step_s'] for r in off) * 1e3:.1f} ms off; epoch time "
                            f"{epoch * 100:+.2f}%; CPU sampler self-timed (its thread CPU time) {cost * 100:.1f}% of training"))
    return rows


def startup_rows(s: Settings, runs: dict, variants: tuple, raw: dict) -> list:
    """Row 4: the runner's command to first step, split by phase (into raw["startup"])."""
    rows = []
    for fw in timed(s):
        recs = [r for m in s.models for v in variants if not v.startswith("reference") for r in runs[(fw, m, v)]]
        split = {k: statistics.median(r["startup"][k] for r in recs) for k in recs[0]["startup"]}
        raw.setdefault("startup", {})[fw] = split
        top = sorted(((v, k) for k, v in split.items() if k not in ("command to first step",
                                                                      "after training (eval, teardown)")), reverse=True)
        ref_cmd = statistics.median(r["command_s"] for m in s.models for r in runs[(fw, m, "reference")])
        run_cmd = statistics.median(r["command_s"] for r in recs)
        rows.append(row(f"startup:{fw}", split["command to first step"], f"{split['command to first step']:.1f} s",
                        "largest: " + ", ".join(f"{k} {v:.1f} s" for v, k in top[:3])
                        + f"; whole command {run_cmd:.1f} s runner vs {ref_cmd:.1f} s reference"))
    return rows


def fidelity_rows(s: Settings, work: Path, runs: dict, raw: dict) -> list:
    """Row 2: runner over reference epoch time (block_ratio's estimate and 95% interval, which give
    the verdict; the per-repeat ratios' median and range beside it), and what the
    runner's per-step bookkeeping (recorder_cost) is of its median step."""
    rec = raw["recorder"] = recorder_cost(s, work)
    rows = []
    for fw in timed(s):
        for m in s.models:
            on, ref = runs[(fw, m, "probes-on")], runs[(fw, m, "reference")]
            ratios = [a["epoch_s"] / b["epoch_s"] for a, b in zip(on, ref)]
            fid, lo, hi, dof = block_ratio(runs, m, {(fw, "probes-on"): 1, (fw, "reference"): -1})
            step = statistics.median(r["step_s"] for r in on)
            rows.append(row(f"fidelity:{fw}-{m}", fid, f"{fid:.3f} ({lo:.3f}-{hi:.3f})",
                            f"{len(ratios)} interleaved repeats, noise pooled over the run's cells ({dof} dof); "
                            f"per repeat: median {statistics.median(ratios):.3f}, "
                            f"range {min(ratios):.3f}-{max(ratios):.3f}; median epoch "
                            f"{statistics.median(r['epoch_s'] for r in on):.3f} s runner vs "
                            f"{statistics.median(r['epoch_s'] for r in ref):.3f} s reference; steps/epoch "
                            f"{on[0]['steps_per_epoch']} vs {ref[0]['steps_per_epoch']}; threads/rank "
                            f"{on[0]['threads']} vs {ref[0]['threads']}; loop bookkeeping (StepRecorder, "
                            f"{rec['calls_per_step']} calls) {rec['per_step_s'] * 1e6:.1f} us/step = "
                            f"{rec['per_step_s'] / step * 100:.3f}% of the median step", (lo, hi)) | of(fw, m))
            for v, (what, _) in REFERENCE_VARIANTS.get(fw, {}).items():
                other = runs[(fw, m, v)]
                ratios = [a["epoch_s"] / b["epoch_s"] for a, b in zip(on, other)]
                fid, lo, hi, _ = block_ratio(runs, m, {(fw, "probes-on"): 1, (fw, v): -1})
                rows.append(row(f"fidelity:{fw}-{m}-{v.removeprefix('reference-')}", fid,
                                f"{fid:.3f} ({lo:.3f}-{hi:.3f})",
                                f"against {what}: median {statistics.median(ratios):.3f}, range "
                                f"{min(ratios):.3f}-{max(ratios):.3f}; median epoch "
                                f"{statistics.median(r['epoch_s'] for r in other):.3f} s; the example as written "
                                f"(every format) {statistics.median(r['epoch_s'] for r in ref):.3f} s", (lo, hi))
                            | of(fw, m, against=what))
    return rows + gap_fidelity_rows(s, runs)


def gap_fidelity_rows(s: Settings, runs: dict) -> list:
    """Row 2b: a framework's epoch time over the reference's (GAP_PAIRS) as the runner measures it, over
    the same ratio between the examples' own loops, per repeat (all four ran in the same repeat):
    the gap the report's first screen states, and what the runner does to it. Its block-fit
    estimate and 95% interval (block_ratio); PASS when all of the interval lies within 3% either way of 1."""
    limit = TARGETS["fidelity_gap"][2]
    rows = []
    for (a, b), m in ((pair, m) for pair in gap_pairs(s) for m in s.models):
        quads = zip(*(runs[(fw, m, v)] for fw, v in ((a, "probes-on"), (b, "probes-on"), (a, "reference"),
                                                      (b, "reference"))))
        ratios = [(ra["epoch_s"] / rb["epoch_s"]) / (fa["epoch_s"] / fb["epoch_s"]) for ra, rb, fa, fb in quads]
        est, lo, hi, _ = block_ratio(runs, m, {(a, "probes-on"): 1, (b, "probes-on"): -1, (a, "reference"): -1,
                                               (b, "reference"): 1})
        r = row(f"fidelity_gap:{a}/{b}-{m}", max(est, 1 / est), f"{est:.3f} ({lo:.3f}-{hi:.3f})",
                f"{len(ratios)} repeats of all four; median {statistics.median(ratios):.3f}, range "
                f"{min(ratios):.3f}-{max(ratios):.3f}: above 1, the runner widens the gap") | of(a, m, over=b, estimate=est)
        if lo == lo and hi == hi:  # an interval: its verdict, two-sided
            r["interval"] = [lo, hi]
            r["verdict"] = ("PASS" if 1 / limit <= lo and hi <= limit else
                            "MISS" if hi < 1 / limit or lo > limit else "UNSETTLED")
        rows.append(r)
    return rows


def memory_dataset(s: Settings) -> Path:
    """A synthetic graph of s.memory_graph's size under s.memory_root (generated once)."""
    n, e, f = s.memory_graph
    spec = datasets.SyntheticSpec(num_nodes=n, num_edges=e, num_features=f, num_classes=16)
    name = f"memory-{n}-{e}-{f}"
    path = Path(s.memory_root) / name
    try:
        if datasets.read_meta(path).get("source", {}).get("params") == spec.params():
            return path
    except datasets.DatasetError:
        pass
    log(f"generating the memory graph {name} in {s.memory_root}")
    arrays = datasets.generate(spec)
    return datasets.write_dataset(s.memory_root, name, arrays, {"kind": "synthetic", "params": spec.params()},
                                  {}, num_classes=spec.num_classes)


def measure_memory(s: Settings, work: Path, raw: dict) -> list:
    """Row 3: summed PSS growth of 2 ranks vs 1 rank when the adapters hold the graph."""
    graph = memory_dataset(s)
    warmup = datasets.prepare("tiny", root=s.data_root)
    rows = []
    for fw in FRAMEWORKS:
        deltas = {}
        for nproc in (1, 2):
            label = f"memory-{fw}-{nproc}"
            log(f"{label}")
            run_torchrun("benchmarks.memory_probe", nproc, ["--framework", fw, "--dataset", str(graph),
                                                            "--warmup", str(warmup), "--out", str(work / f"{label}.json")],
                         work / f"{label}.log", threads=1)
            report = json.loads((work / f"{label}.json").read_text())
            raw.setdefault("memory", {})[label] = report
            deltas[nproc] = report["pss_delta_total"]
        mib = 2 ** 20
        ratio = deltas[2] / deltas[1] if deltas[1] > 0 else float("inf")
        rows.append(row(f"memory:{fw}", ratio, f"{ratio:.2f}x",
                        f"graph arrays {report['graph_bytes'] / mib:.0f} MiB; PSS growth summed over ranks "
                        f"{deltas[1] / mib:.0f} MiB (1 rank) vs {deltas[2] / mib:.0f} MiB (2 ranks)"))
    return rows


def measure_sweep(s: Settings, work: Path, raw: dict) -> list:
    """Row 5: the default sweep in a clean copy of the repository, then a no-op rerun."""
    copy = work / "sweep-repo"
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for rel in filter(None, files):
        if (REPO / rel).is_file():
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, copy / rel)
    snakemake = Path(PY).parent / "snakemake"
    argv = [str(snakemake), "--cores", "all", "--profile", "profiles/default"]
    env = {"PATH": f"{Path(PY).parent}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONPATH": str(copy)}
    log("default sweep (cold) in a clean copy of the repository")
    cold = execute(argv, work / "sweep-cold.log", env=env, cwd=copy)
    log("default sweep again (no-op)")
    noop = execute(argv, work / "sweep-noop.log", env=env, cwd=copy)
    nothing = "Nothing to be done" in (work / "sweep-noop.log").read_text()
    raw["sweep"] = {"cold_s": cold, "noop_s": noop, "noop_did_nothing": nothing}
    return [row("sweep:default, cold", cold, f"{cold:.0f} s", f"in {copy}; log {work / 'sweep-cold.log'}"),
            row("noop:no-op rerun", noop, f"{noop:.1f} s",
                ("snakemake reported nothing to do" if nothing else "the rerun DID run jobs")
                + f"; log {work / 'sweep-noop.log'}")]


# ---------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------

def launch_argv(s: Settings, framework: str, out: Path, starter: str) -> list:
    """A timing run as the sweep makes them (2 epochs, one validation at the end), so that what
    is not training is the part to cut."""
    return ["--framework", framework, "--model", s.models[0], "--devices", str(s.devices), "--batch-size",
            str(s.batch_size), "--workers", "0", "--dataset", s.dataset, "--epochs", "2", "--eval-every", "end",
            "--fanouts", s.fanouts, "--data-root", s.data_root, "--rank-starter", starter, "--out", str(out)]


def measure_launch(s: Settings, work: Path, raw: dict) -> list:
    """Row 7: each rank starter's run, and the import floors, interleaved."""
    variants = (*STARTERS, "floor", "floor+dynamo")
    recs = {(fw, v): [] for fw in FRAMEWORKS for v in variants}
    repeats = s.launch_repeats or s.repeats
    for i in range(repeats):
        order = variants[i % len(variants):] + variants[:i % len(variants)]
        for fw in FRAMEWORKS:
            for v in order:
                label = f"launch-{fw}-{v}-r{i}"
                if v.startswith("floor"):
                    imports = f"import torch, {FLOOR_MODULES[fw]}" + (", torch._dynamo" if v == "floor+dynamo" else "")
                    recs[(fw, v)].append({"command_s": execute([PY, "-c", imports], work / f"{label}.log")})
                    continue
                out = work / label
                wall = execute([PY, "-m", "runners.run", *launch_argv(s, fw, out, v)], work / f"{label}.log")
                result = json.loads(RunDir(out).result.read_text())
                if result["status"] != "ok":
                    raise MeasureError(f"{label}: runner status {result['status']}; see {out}")
                recs[(fw, v)].append(launch_parts(result, out, wall))
            log(f"launch repeat {i + 1}/{repeats} {fw}: " + ", ".join(
                f"{v} {recs[(fw, v)][-1].get('launch (command less training)', recs[(fw, v)][-1].get('command_s')):.2f} s"
                for v in variants))
    rows = []
    for fw in FRAMEWORKS:
        med = {v: {k: statistics.median(r[k] for r in recs[(fw, v)]) for k in recs[(fw, v)][0]} for v in variants}
        raw.setdefault("launch", {})[fw] = {v: med[v] for v in STARTERS}
        floor, floor_dyn = med["floor"]["command_s"], med["floor+dynamo"]["command_s"]
        raw["launch"][fw]["floor"] = {"import torch + framework": floor, "... + torch._dynamo": floor_dyn}
        over = {v: statistics.median(r["launch (command less training)"] - f["command_s"]
                                     for r, f in zip(recs[(fw, v)], recs[(fw, "floor")])) for v in STARTERS}
        spawn = med["spawn"]
        top = sorted(((v, k) for k, v in spawn.items() if not k.startswith(("launch", "training"))), reverse=True)
        rows.append(row(f"launch:{fw}", over["spawn"], f"{over['spawn']:.2f} s",
                        f"runners.launch.spawn: launch {spawn['launch (command less training)']:.2f} s over a floor of "
                        f"{floor:.2f} s (import torch, {FLOOR_MODULES[fw]}; {floor_dyn:.2f} s with torch._dynamo, "
                        f"which the optimiser imports); torchrun: {over['torchrun']:.2f} s over the floor; largest "
                        "parts (spawn): " + ", ".join(f"{k} {v:.2f} s" for v, k in top[:4])
                        + f"; training {spawn['training epochs']:.2f} s"))
    return rows


COVERAGE_ROWS = {"blocks": "configuration + block fit", "pooled": "pooled launch noise", "welch": "Welch per comparison"}


def measure_coverage(s: Settings, work: Path, raw: dict) -> list:
    """Row 8: the share of the report's 95% intervals, on subsamples of the default design's size,
    that miss the ratio over every launch; the pooled interval and the old Welch one side by side."""
    from benchmarks import coverage

    runs = coverage.collect(work / "coverage", s.coverage_launches, s.dataset)
    figures = coverage.coverage(runs)
    raw["coverage"] = figures
    detail = (f"{figures['comparisons']} PyG/DGL comparisons, {s.coverage_launches} launches a cell, "
              f"{figures['draws']} draws of 2 rounds; median width (high/low) ")
    return [row(f"coverage:{name}", 1 - figures[f"{m}_coverage"], f"{100 * figures[f'{m}_coverage']:.1f}% covered",
                detail + f"{figures[f'{m}_median_width']:.2f}") for m, name in COVERAGE_ROWS.items()]


def projection_sweeps(s: Settings) -> list:
    """The aggregate directories the projection row replays, each with a runs.csv."""
    if s.projection_sweeps:
        return [Path(d) for d in s.projection_sweeps]
    stored = sorted(d for d in PROJECTION_SWEEPS.glob("*") if (d / "runs.csv").is_file())
    own = REPO / "results" / "aggregate"
    return stored + ([own] if (own / "runs.csv").is_file() else [])


def projection_coverage(agg_dir: Path) -> dict:
    """The projection's out-of-sample check on one stored aggregate: held-out points, how many its
    calibrated intervals held, the median error, the calibration and the sweep's launch noise."""
    from analysis.projection import predict

    res = predict.project_aggregate(agg_dir, [4, 8], collectives=None)
    v = res["validation"]
    done = v[v["reason"].isna()] if len(v) and "reason" in v else v.iloc[0:0]
    cal = res["calibration"]
    return {"points": len(done), "inside": int(done["inside"].astype(bool).sum()) if len(done) else 0,
            "inside_noise": int(done["inside_noise"].astype(bool).sum()) if "inside_noise" in done else None,
            "median_error": float(done["error"].abs().median()) if len(done) else math.nan,
            "calibrated": cal["calibrated"], "q": cal["q"], "noise_sd": res["noise_sd"]}


def measure_projection(s: Settings, work: Path, raw: dict) -> list:
    """Row 9: per stored sweep, the share of held-out points outside their calibrated intervals."""
    rows, raw["projection"] = [], {}
    for d in projection_sweeps(s):
        f = raw["projection"][d.name] = projection_coverage(d)
        if not f["points"]:
            rows.append(placeholder(f"projection:{d.name}", "SKIP", "no multi-device point to hold out"))
            continue
        covered = f["inside"] / f["points"]
        q = f"±{100 * (math.exp(f['q']) - 1):.0f}%" if f["calibrated"] else "not calibrated (too few points)"
        rows.append(row(f"projection:{d.name}", 1 - covered, f"{100 * covered:.0f}% covered",
                        f"{f['inside']} of {f['points']} held-out points inside (inputs' noise alone: "
                        f"{f['inside_noise']}); launch noise SD {100 * f['noise_sd']:.1f}%; model error {q}; "
                        f"median error {100 * f['median_error']:.0f}%"))
    return rows


def expected_keys(s: Settings) -> list:
    keys = [f"probe:{fw}-{m}" for fw in timed(s) for m in s.models]
    keys += [f"fidelity:{fw}-{m}{suffix}" for fw in timed(s) for m in s.models
             for suffix in ["", *(f"-{v.removeprefix('reference-')}" for v in REFERENCE_VARIANTS.get(fw, {}))]]
    keys += [f"fidelity_gap:{a}/{b}-{m}" for a, b in gap_pairs(s) for m in s.models]
    keys += [f"memory:{fw}" for fw in FRAMEWORKS] + [f"startup:{fw}" for fw in timed(s)]
    keys += ["sweep:default, cold", "noop:no-op rerun"] + [f"cv:{fw}-{m}" for fw in timed(s) for m in s.models]
    keys += [f"launch:{fw}" for fw in FRAMEWORKS]
    keys += [f"coverage:{name}" for name in COVERAGE_ROWS.values()] if s.with_coverage else []
    keys += [f"projection:{d.name}" for d in projection_sweeps(s)]
    return [k for k in keys if wanted(s, k.split(":")[0])]


def placeholder(key: str, verdict: str, detail: str) -> dict:
    name, target, _ = TARGETS[key.split(":")[0]]
    return {"key": key, "measurement": f"{name} ({key.split(':')[1]})", "figure": "-", "value": None,
            "target": target, "verdict": verdict, "detail": detail}


def render(rows: list, raw: dict, s: Settings) -> str:
    cells = lambda r: [r["measurement"], r["figure"], r["target"], r["verdict"], r["detail"]]  # noqa: E731
    lines = ["| measurement | figure | target | verdict | detail |", "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(str(c).replace("|", "/") for c in cells(r)) + " |" for r in rows]
    if raw.get("startup"):
        names = list(next(iter(raw["startup"].values())))
        lines += ["", "Start-up split, seconds (median over runs, slowest rank):", "",
                  "| phase | " + " | ".join(raw["startup"]) + " |", "|---|" + "---|" * len(raw["startup"])]
        lines += [f"| {n} | " + " | ".join(f"{raw['startup'][fw][n]:.2f}" for fw in raw["startup"]) + " |"
                  for n in names]
    if raw.get("launch"):
        cols = [(fw, v) for fw in raw["launch"] for v in STARTERS]
        names = list(raw["launch"][cols[0][0]][cols[0][1]])
        lines += ["", "Launch, part by part, seconds (median over repeats; a rank part is the slowest rank's):", "",
                  "| part | " + " | ".join(f"{fw} {v}" for fw, v in cols) + " |", "|---|" + "---|" * len(cols)]
        lines += [f"| {n} | " + " | ".join(f"{raw['launch'][fw][v][n]:.2f}" for fw, v in cols) + " |" for n in names]
        floor_names = " / ".join(raw["launch"][cols[0][0]]["floor"])
        lines += [f"| floor: {floor_names} | " + " | ".join(
            " / ".join(f"{x:.2f}" for x in raw["launch"][fw]["floor"].values()) for fw, _ in cols) + " |"]
    lines += ["", f"Settings: dataset {s.dataset}, {s.devices} processes, batch {s.batch_size}, fan-outs "
              f"{s.fanouts}, workers {s.workers}, {s.epochs} epochs, {s.repeats} repeats"
              + (f" ({s.launch_repeats} of the launch row)" if s.launch_repeats else "") + ", models "
              f"{','.join(s.models)}; memory graph {s.memory_graph[0]} nodes, {s.memory_graph[1]} edges, "
              f"{s.memory_graph[2]} features."]
    return "\n".join(lines) + "\n"


def parse_args(argv=None) -> Settings:
    p = argparse.ArgumentParser(prog="python -m benchmarks.measure", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny dataset, 2 repeats, 2 epochs: a smoke run")
    p.add_argument("--dataset", help="dataset name (default small; --quick: tiny)")
    p.add_argument("--data-root", help="default results/datasets")
    p.add_argument("--repeats", type=int, help="interleaved repeats (default 5; --quick: 2)")
    p.add_argument("--epochs", type=int)
    p.add_argument("--devices", type=int)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--workers", type=int)
    p.add_argument("--fanouts")
    p.add_argument("--models", type=lambda t: t.split(","), help="comma-separated, default sage")
    p.add_argument("--memory-graph", type=lambda t: [int(v) for v in t.split(",")],
                   help="NODES,EDGES,FEATURES of the memory measurement's synthetic graph")
    p.add_argument("--memory-root")
    p.add_argument("--with-sweep", action="store_true", help="also time the default Snakemake sweep")
    p.add_argument("--with-coverage", action="store_true",
                   help="also check the intervals' coverage on many launches (benchmarks/coverage.py; minutes)")
    p.add_argument("--coverage-launches", type=int, help="launches per cell of the coverage row (default 10)")
    p.add_argument("--launch-repeats", type=int, help="repeats of the launch row (default: --repeats)")
    p.add_argument("--projection-sweeps", type=lambda t: t.split(","),
                   help="comma-separated aggregate directories the projection row replays (default: "
                        "tests/data/sweeps/* and results/aggregate)")
    p.add_argument("--timed", type=lambda t: t.split(","),
                   help=f"comma-separated frameworks and loaders the timing rows run ({', '.join(TIMED)}); default all")
    p.add_argument("--resume", nargs="?", const=True, metavar="FILE",
                   help=f"continue the timing runs kept in FILE (default OUT_DIR/work/{SO_FAR}: a copy of it kept "
                        "from an earlier sitting will do) with the same settings and measured code, up to --repeats "
                        "in all")
    p.add_argument("--out-dir")
    p.add_argument("--only", type=lambda t: t.split(","),
                   help=f"comma-separated row kinds to measure ({', '.join(TARGETS)}); default all")
    args = vars(p.parse_args(argv))
    values = {**(QUICK if args.pop("quick") else {}), **{k: v for k, v in args.items() if v is not None and v is not False}}
    s = Settings(**values)
    if s.repeats < 1:
        p.error(f"--repeats {s.repeats}: must be at least 1 (2 or more for the variation row and intervals)")
    if s.launch_repeats is not None and s.launch_repeats < 1:
        p.error("--launch-repeats must be at least 1")
    if s.only and set(s.only) - set(TARGETS):
        p.error(f"--only: unknown row kinds {sorted(set(s.only) - set(TARGETS))}; known: {', '.join(TARGETS)}")
    if s.timed and set(s.timed) - set(TIMED):
        p.error(f"--timed: unknown {sorted(set(s.timed) - set(TIMED))}; known: {', '.join(TIMED)}")
    return s


def main(argv=None) -> int:
    s = parse_args(argv)
    out_dir = Path(s.out_dir)
    work = out_dir / "work"
    if s.resume:  # refused before anything runs where it cannot continue
        try:
            so_far(s, work, timing_variants(s))
        except MeasureError as exc:
            print(f"python -m benchmarks.measure: error: {exc}", file=sys.stderr)
            return 2
    else:
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    datasets.prepare(s.dataset, root=s.data_root)
    t0 = time.perf_counter()
    raw: dict = {"settings": asdict(s), "host": socket.gethostname(), "cpu_cores": envinfo.cpu_cores()}
    rows: dict = {}
    steps = [(measure_timing, any(wanted(s, k) for k in ("probe", "fidelity", "startup", "cv"))),
             (measure_memory, wanted(s, "memory")),
             (measure_launch, wanted(s, "launch")),
             (measure_sweep, s.with_sweep and (wanted(s, "sweep") or wanted(s, "noop"))),
             (measure_coverage, s.with_coverage and wanted(s, "coverage")),
             (measure_projection, wanted(s, "projection"))]
    for fn, enabled in steps:
        if not enabled:
            continue
        try:
            rows.update({r["key"]: r for r in fn(s, work, raw)})
        except (MeasureError, OSError, ValueError, KeyError, subprocess.CalledProcessError) as exc:
            log(f"{fn.__name__} failed: {exc}")
            raw.setdefault("errors", {})[fn.__name__] = str(exc)
    errors = " ".join(raw.get("errors", {}).values())
    table = [rows.get(k) or (placeholder(k, "SKIP", "not run; add --with-sweep") if k.split(":")[0] in ("sweep", "noop")
                             and not s.with_sweep else placeholder(k, "ERROR", errors[:300]))
             for k in expected_keys(s)]
    raw["rows"] = table
    raw["measure_wall_s"] = time.perf_counter() - t0
    text = render(table, raw, s)
    (out_dir / "measure.md").write_text(text)
    (out_dir / "measure.json").write_text(json.dumps(raw, indent=1))
    record = fidelity_record(table, raw, s)
    if record is not None:
        (out_dir / FIDELITY_FILE).write_text(json.dumps(record, indent=1))
    print(text, end="")
    print(f"\n(measured in {raw['measure_wall_s']:.0f} s; {out_dir / 'measure.md'}, {out_dir / 'measure.json'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
