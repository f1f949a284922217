"""The settings of `benchmarks.measure`, launching the runs it times, and reading what they recorded.

One helper runs any command to completion, one a runner configuration (`python -m
runners.run`, exactly what users run), one a torchrun script (the example-style reference
loops, the memory probe); the rest turn a run's result.json into the figures the
measurements compare.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from runners.adapters import registry
from runners.config import build_parser as runner_parser, config_from_args
from runners.records import envinfo, rank_rows
from runners.records.rundir import RunDir

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
# Timed like a framework, run as a framework with another loader: label -> (framework, loader),
# and its reference loop is benchmarks/reference_<loader>.py (DGL's GraphBolt: dgl-graphbolt).
LOADER_VARIANTS = {f"{f.name}-{loader}": (f.name, loader) for f in registry.FRAMEWORKS.values()
                   for loader in f.loaders[1:] if (REPO / "benchmarks" / f"reference_{loader}.py").is_file()}

# The frameworks with an example-shaped reference loop (benchmarks/reference_<name>.py), in the registry's order.
FRAMEWORKS = tuple(f for f in registry.FRAMEWORK_NAMES if (REPO / "benchmarks" / f"reference_{f}.py").is_file())
# The gaps row 2b checks: each framework over the reference (as the report's first screen states them).
GAP_PAIRS = registry.reference_pairs(FRAMEWORKS)
TIMED = FRAMEWORKS + tuple(LOADER_VARIANTS)  # the timing rows' "frameworks"
# Second references of a framework: the example's loop with one of its choices set as the
# runner sets it, to tell a cost of the runner's loop from a choice both can make. DGL's example
# creates every sparse format of the graph (create_formats_); the runner builds CSC only.
REFERENCE_VARIANTS = {"dgl": {"reference-csc": ("the example's loop on the runner's CSC-only graph",
                                                ["--graph-formats", "csc"])}}


def timed(s: Settings) -> tuple:
    """The TIMED names this measurement times (--timed; all by default)."""
    return tuple(fw for fw in TIMED if s.timed is None or fw in s.timed)


def gap_pairs(s: Settings) -> tuple:
    return tuple((a, b) for a, b in GAP_PAIRS if {a, b} <= set(timed(s)))


@dataclass
class Settings:
    """What one invocation of benchmarks.measure measures, and on what (its command line)."""

    dataset: str = "small"
    data_root: str = "results/datasets"
    repeats: int = 5
    epochs: int = 5
    devices: int = 2
    batch_size: int = 512
    workers: int = 0
    fanouts: str = "10,10,10"
    models: list = field(default_factory=lambda: ["sage"])
    memory_graph: list = field(default_factory=lambda: [200_000, 10_000_000, 256])  # nodes, edges, features
    memory_root: str = "/tmp/gnnscale-bench/datasets"
    with_sweep: bool = False
    with_coverage: bool = False
    coverage_launches: int = 10
    launch_repeats: int | None = None  # repeats of the launch row (None: `repeats`)
    # aggregate directories whose projection the projection row replays (None: PROJECTION_SWEEPS)
    projection_sweeps: list | None = None
    timed: list | None = None  # frameworks and loaders the timing rows run (measure.TIMED names); None: all
    resume: bool | str = False  # continue the timing runs kept in out_dir/work, or in this file (benchmarks.interleave)
    out_dir: str = "results/benchmarks"
    only: list | None = None  # row kinds (TARGETS keys) to measure; None: all


class MeasureError(RuntimeError):
    pass


def log(msg: str) -> None:
    print(f"[measure] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# Launching: one helper for runner configurations, one for torchrun scripts.
# ---------------------------------------------------------------------------------------

def execute(argv: list, log_path: Path, env: dict | None = None, cwd: Path = REPO) -> float:
    """Run a command to completion, output to log_path; its wall time in seconds."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    t0 = time.perf_counter()
    with open(log_path, "w") as fh:
        proc = subprocess.run(argv, cwd=cwd, env=full_env, stdout=fh, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise MeasureError(f"`{' '.join(map(str, argv[:6]))} ...` exited {proc.returncode}; see {log_path}")
    return wall


def runner_argv(s: Settings, framework: str, model: str, out: Path, probes: bool = True) -> list:
    framework, loader = LOADER_VARIANTS.get(framework, (framework, None))
    argv = ["--loader", loader] if loader else []
    argv += ["--framework", framework, "--model", model, "--devices", str(s.devices),
            "--batch-size", str(s.batch_size), "--workers", str(s.workers), "--dataset", s.dataset,
            "--epochs", str(s.epochs), "--fanouts", s.fanouts, "--data-root", s.data_root, "--out", str(out)]
    return argv + ([] if probes else ["--no-probes"])


def run_runner(s: Settings, work: Path, framework: str, model: str, label: str, probes: bool) -> dict:
    """One runner configuration via `python -m runners.run`; its result.json and step times."""
    out = work / label
    wall = execute([PY, "-m", "runners.run", *runner_argv(s, framework, model, out, probes)], work / f"{label}.log")
    result = json.loads(RunDir(out).result.read_text())
    if result["status"] != "ok":
        raise MeasureError(f"{label}: runner status {result['status']}: "
                           f"{(result.get('diagnosis') or {}).get('summary')}; see {out}")
    steps = []
    for r in result["ranks"]:
        # The first epoch warms caches up; with more than one epoch it is left out.
        steps += [float(row["step_s"]) for row in rank_rows.read_rank_rows(out, r["rank"], "steps") or []
                  if int(row["epoch"]) > 0 or s.epochs == 1]
    per_rank: dict = {}
    for e in result["epochs"]:
        per_rank.setdefault(e["rank"], []).append(e["time_s"])
    return {"epoch_s": slowest_rank_epoch(list(per_rank.values())), "step_s": statistics.median(steps),
            "command_s": wall, "wall_s": result["wall_time_s"], "steps_per_epoch": result["ranks"][0]["steps_per_epoch"],
            "startup": startup_split(result, wall), "threads": result["ranks"][0]["threads"],
            "probe_cost_s": sum((r.get("probe_cost_s") or {}).get("cpu", 0.0) for r in result["ranks"]),
            "train_s": sum(result["summary"]["rank_train_times_s"])}


def run_torchrun(module: str, nproc: int, args: list, log_path: Path, threads: int) -> float:
    """`torchrun --standalone --nproc-per-node nproc -m module args` on CPU processes."""
    argv = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), "-m", module, *args]
    return execute(argv, log_path, env={"OMP_NUM_THREADS": str(threads), "CUDA_VISIBLE_DEVICES": ""})


def run_reference(s: Settings, work: Path, framework: str, model: str, label: str, extra: tuple = ()) -> dict:
    """The framework's minimal DDP loop with the runner's resolved settings (`extra`: options of
    a second reference, REFERENCE_VARIANTS)."""
    cfg = config_from_args(runner_parser().parse_args(runner_argv(s, framework, model, work / label)),
                           0, envinfo.cpu_cores())
    out = work / f"{label}.json"
    args = ["--dataset", s.dataset, "--data-root", s.data_root, "--model", model,
            "--batch-size", str(cfg.batch_size), "--fanouts", ",".join(map(str, cfg.fanouts)),
            "--workers", str(cfg.workers), "--epochs", str(cfg.epochs), "--hidden", str(cfg.hidden),
            "--layers", str(cfg.layers), "--heads", str(cfg.heads), "--dropout", str(cfg.dropout),
            "--lr", str(cfg.lr), "--weight-decay", str(cfg.weight_decay), "--seed", str(cfg.seed), "--out", str(out),
            *extra]
    module = f"benchmarks.reference_{LOADER_VARIANTS[framework][1] if framework in LOADER_VARIANTS else framework}"
    wall = run_torchrun(module, s.devices, args, work / f"{label}.log", cfg.threads_per_rank)
    report = json.loads(out.read_text())
    return {"epoch_s": slowest_rank_epoch([r["epoch_times_s"] for r in report["ranks"]]), "command_s": wall,
            "steps_per_epoch": report["ranks"][0]["steps_per_epoch"], "threads": report["ranks"][0]["threads"]}


# ---------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------

def slowest_rank_epoch(per_rank: list) -> float:
    """Median over epochs of the slowest rank's epoch time (the runner's summary rule)."""
    return statistics.median(max(times) for times in zip(*per_rank))


def startup_split(result: dict, command_s: float) -> dict:
    """Seconds per start-up phase, slowest rank, from the harness's marks (since launch)."""
    marks = ("process_started", "imports_done", "process_group_ready", "dataset_loaded", "model_ready",
             "training_started", "first_batch")
    at = {m: max(r["startup_detail"].get(m, 0.0) for r in result["ranks"]) for m in marks}
    launcher = command_s - result["wall_time_s"]  # runners.run before torchrun starts (and its exit)
    split = {"launcher (before torchrun)": launcher, "torchrun + interpreter": at["process_started"]}
    for prev, name in zip(marks, marks[1:]):
        split[{"imports_done": "imports", "process_group_ready": "process group",
               "dataset_loaded": "dataset + adapter", "model_ready": "model + loader",
               "training_started": "probes start", "first_batch": "first batch"}[name]] = at[name] - at[prev]
    split["command to first step"] = launcher + at["first_batch"]
    train = max(result["summary"]["rank_train_times_s"])
    split["after training (eval, teardown)"] = result["wall_time_s"] - at["training_started"] - train
    return split


def launch_parts(result: dict, out: Path, command_s: float) -> dict:
    """Seconds of each part of one run from the launcher's start to its exit (result.json's
    `timeline` and the ranks' start-up marks, all counted from the rank starter's start; a
    rank part is the slowest rank's); `launch` is the whole command less the training epochs."""
    tl = result["timeline"]
    marks = [r["startup_detail"] for r in result["ranks"]]
    at = lambda name: max(m[name] for m in marks)  # noqa: E731  (the slowest rank reaches it last)
    validation_s = max(sum(float(v["eval_s"]) for v in rank_rows.read_rank_rows(out, r["rank"], "validation") or [])
                       for r in result["ranks"])
    parts = {
        "launcher: interpreter + imports": tl["launcher_main"] - tl["launcher_created"],
        "launcher: checks, dataset, pre-flight": -tl["launcher_main"],
        "rank starter, until the ranks exist": at("process_created"),
        "rank: interpreter + harness modules": at("process_started") - at("process_created"),
        "rank: import torch": at("torch_imported") - at("process_started"),
        "rank: import the framework": at("framework_imported") - at("torch_imported"),
        "rank: import torch._dynamo": at("imports_done") - at("framework_imported"),
        "process group": at("process_group_ready") - at("imports_done"),
        "data, model, loader": at("model_ready") - at("process_group_ready"),
        "probes start": at("training_started") - at("model_ready"),
        "validation": validation_s,
        "final records": at("records_written") - at("training_done"),
        "ranks exit, starter notices": tl["tree_exited"] - at("records_written"),
        "result assembled": tl["result_assembled"] - tl["tree_exited"],
        "result written, launcher exits": command_s - (tl["result_assembled"] - tl["launcher_created"]),
    }
    training = at("training_done") - at("training_started") - validation_s
    parts["launch (command less training)"] = command_s - training
    parts["training epochs"] = training
    return {k: round(v, 4) for k, v in parts.items()}


def recorder_cost(s: Settings, work: Path, steps: int = 5000, rounds: int = 5) -> dict:
    """Seconds per training step of the runner loop's bookkeeping: runners.rank.phase_timer.StepRecorder
    over a step whose phases do nothing (a real heartbeat file, the harness's faults switched
    off, a CPU run's no-op synchronisation, a real StepRow per step); median of `rounds`, in
    this process. What the bookkeeping adds to one step of a run, without the step's work."""
    import torch

    from runners.adapters import Batch
    from runners.rank.harness import Faults
    from runners.rank.phase_timer import PHASE_HOOKS, StepRecorder
    from runners.rank.probes import Heartbeat

    argv = runner_argv(s, registry.FRAMEWORK_NAMES[0], "sage", work / "recorder")  # any framework would do
    cfg = config_from_args(runner_parser().parse_args(argv), 0, envinfo.cpu_cores())
    hb = Heartbeat(RunDir(work / "recorder").heartbeat(0))
    rec = StepRecorder(hb, Faults(cfg, 0), lambda: None, breakdown=True, phases_valid=True)
    batch = Batch(inputs=None, labels=None, seed_nodes=s.batch_size, sampled_nodes=0, sampled_edges=0,
                  seed_ids=torch.arange(s.batch_size))
    loss = (torch.ones(1, requires_grad=True) * 2).sum()  # a loss in an autograd graph, as in training
    per_step = []
    for _ in range(rounds):
        rec.start_epoch(0)
        t0 = time.perf_counter()
        for _ in rec.steps(steps):
            for name in PHASE_HOOKS:
                with rec.phase(name):
                    pass
            rec.step_row(batch, loss)
        per_step.append((time.perf_counter() - t0) / steps)
    calls = 2 + len(PHASE_HOOKS)  # steps(), one phase() per phase, step_row()
    return {"per_step_s": statistics.median(per_step), "calls_per_step": calls, "rounds_s": per_step}
