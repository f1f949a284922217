"""The run record: the per-rank records of a run directory, how they are written and read, and
the figures result.json's summary derives from them.

Its paths come from runners.records.rundir (RunDir); result.json itself is runners.records.result's to build.
Functions taking `cfg` take the run's runners.config.RunConfig (not imported: the settings
import this module's neighbours, and the record stays below them). This module owns the per-rank record columns (named rows: StepRow, EpochRow, ValidationRow),
the writers the harnesses append with, the readers the launcher, the watchdog, the benchmarks
and the analysis use, and the summary statistics (steady state, work per rank, steps per epoch).
Light on purpose (no torch, no pandas): analysis imports it.
"""

from __future__ import annotations

import csv
import json
import os
import statistics
from dataclasses import dataclass, fields, make_dataclass
from pathlib import Path

import numpy as np

from runners.rank.probes import CpuSampler, CsvAppender, NvmlSampler
from runners.rank.stopping import WARMUP_EPOCHS
from runners.records.rundir import RunDir



# The timed phases of one training step: steps.csv's phase columns, in order (see StepRow). Not
# the heartbeat's phases (runners.rank.probes.HEARTBEAT_PHASES): those say where a rank is.
PHASE_COLUMNS = ("load_wait_s", "prepare_s", "copy_s", "forward_s", "backward_s", "optimizer_s")


# -- the per-rank records ----------------------------------------------------------------------

class Row:
    """A named record row; its fields, in order, are its CSV file's columns."""

    __slots__ = ()

    @classmethod
    def columns(cls) -> tuple:
        return tuple(f.name for f in fields(cls))

    def values(self) -> list:
        return [getattr(self, c) for c in self.columns()]


# Columns the step and epoch records share: the batches' work and the phase times (None where
# they are not measurements: CUDA without synchronisation). The work, from the frameworks' own
# batch objects (runners.adapters.Batch.work): seeds, distinct sampled nodes and edges, the bytes
# of input features gathered, and summed over the model's layers what each layer reads (source
# nodes), writes (destination nodes) and passes messages over (edges); a step also lists them
# layer by layer (LAYER_FIELDS, ';'-joined, first layer first). docs/records.md has the units.
WORK_FIELDS = [("seed_nodes", int), ("sampled_nodes", int), ("sampled_edges", int), ("feature_bytes", int),
               ("layer_src_nodes", int), ("layer_dst_nodes", int), ("layer_edges", int)]
LAYER_FIELDS = [("src_nodes_by_layer", str), ("dst_nodes_by_layer", str), ("edges_by_layer", str)]
PHASE_FIELDS = [(p, "float | None") for p in PHASE_COLUMNS]


class _Step(Row):
    """One training step (rank{R}/steps.csv). seed_id_sum: the sum of the batch's seed node
    ids, a cheap fingerprint of which seeds the loader really delivered. prepare_s: the adapter
    turning the loader's output into model inputs (framework work, not waiting for the loader).
    `loss` may stay a device tensor until the epoch is written (no sync per step)."""

    __slots__ = ()

    def settle_loss(self) -> None:
        """The loss as a number (one device sync, at write time)."""
        self.loss = float(self.loss)


class _Epoch(Row):
    """One epoch of one rank (rank{R}/epochs.csv): its time, step count, mean loss, summed
    work and summed phase times."""

    __slots__ = ()

    @classmethod
    def of_steps(cls, epoch: int, rank: int, steps: list, epoch_s: float, phases_valid: bool) -> "EpochRow":
        """The epoch's row from its step rows (losses already settled)."""
        work = {k: int(sum(getattr(s, k) for s in steps)) for k, _ in WORK_FIELDS}
        phases = {p: round(sum(getattr(s, p) for s in steps), 6) if phases_valid else None for p in PHASE_COLUMNS}
        mean_loss = float(np.mean([s.loss for s in steps])) if steps else None
        return cls(epoch=epoch, rank=rank, time_s=round(epoch_s, 6), steps=len(steps), loss=mean_loss,
                   **work, **phases)


StepRow = make_dataclass("StepRow", [("epoch", int), ("step", int), *WORK_FIELDS, *PHASE_FIELDS, ("step_s", float),
                                     ("loss", object), ("seed_id_sum", int), *LAYER_FIELDS],
                          bases=(_Step,), slots=True)
EpochRow = make_dataclass("EpochRow", [("epoch", int), ("rank", int), ("time_s", float), ("steps", int),
                                       ("loss", "float | None"), *WORK_FIELDS, *PHASE_FIELDS],
                          bases=(_Epoch,), slots=True)
StepRow.__doc__, EpochRow.__doc__ = _Step.__doc__, _Epoch.__doc__


@dataclass(slots=True)
class ValidationRow(Row):
    """One evaluation (rank{R}/validation.csv): accuracy over the validation split, its time."""

    epoch: int
    accuracy: float
    eval_s: float


STEP_COLUMNS = StepRow.columns()
EPOCH_COLUMNS = EpochRow.columns()
# Every per-rank CSV file and its columns (cpu.csv and nvml.csv are the samplers' own rows).
RANK_TABLES = {"steps": STEP_COLUMNS, "epochs": EPOCH_COLUMNS, "validation": ValidationRow.columns(),
               "cpu": tuple(CpuSampler.COLUMNS), "nvml": tuple(NvmlSampler.COLUMNS)}


# -- writing -------------------------------------------------------------------------------------

class RowAppender(CsvAppender):
    """Appends named rows (a Row type) to a per-rank CSV file, header from the row's fields."""

    def __init__(self, path: Path, row_type: type):
        super().__init__(path, list(row_type.columns()))

    def write(self, rows) -> None:
        super().write([r.values() for r in rows])


def write_text_atomic(path: Path, text: str) -> None:
    """`text` at `path`, replaced in one step (a reader never sees half a file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_atomic(path: Path, data: dict) -> None:
    """`data` as JSON at `path`, replaced in one step."""
    write_text_atomic(path, json.dumps(data, indent=1, default=str))


def write_rank_info(out: Path, rank: int, info: dict) -> None:
    """rank{R}/rank.json: the rank's start-up marks, seeds, environment and final figures."""
    write_atomic(RunDir(out).rank_info(rank), info)


# -- reading -------------------------------------------------------------------------------------

def read_json(path: Path):
    """A JSON file's content, or None when it is missing or unreadable (a run cut short)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def read_rank_info(out: Path, rank: int) -> dict | None:
    """rank{R}/rank.json of run directory `out`, or None when missing or unreadable."""
    return read_json(RunDir(out).rank_info(rank))


def read_rank_rows(out: Path, rank: int, name: str) -> list | None:
    """rank{R}/NAME.csv as dicts of text (column -> cell), or None when it cannot be read."""
    try:
        with open(RunDir(out).rank_file(rank, name), newline="") as fh:
            return list(csv.DictReader(fh))
    except OSError:
        return None


def count_rows(out: Path, rank: int, name: str = "steps") -> int:
    """How many rows rank{R}/NAME.csv holds (0 when missing), without parsing them."""
    try:
        with open(RunDir(out).rank_file(rank, name)) as fh:
            return max(0, sum(1 for _ in fh) - 1)
    except OSError:
        return 0


# -- the measurements, assembled -----------------------------------------------------------------

def _num(v):
    if v in (None, ""):
        return None
    try:
        f = float(v)
    except ValueError:
        return None
    return int(f) if f.is_integer() and "." not in str(v) else f


def _rank_entry(r: int, info: dict) -> dict:
    """result.json's `ranks` entry of one rank, from its rank.json."""
    startup = info.get("startup", {})
    return {"rank": r, "steps_per_epoch": info.get("steps_per_epoch"),
            "startup_s": startup.get("training_started"), "startup_detail": startup,
            "train_time_s": info.get("train_time_s"), "exit_code": None,
            "pid": info.get("pid"), "host": info.get("host"), "threads": info.get("threads"),
            "env_vars": info.get("env_vars"), "parameters": info.get("parameters"),
            "lr_effective": info.get("lr_effective"), "nvml": info.get("nvml"),
            "probe_cost_s": info.get("probe_cost_s"), "adapter_choices": info.get("adapter_choices")}


def _step_breakdown(rows: list):
    """Mean time per phase over every synchronised step of the ranks (None: no such step)."""
    sums: dict = {}
    count = 0
    for row in rows:
        if row["load_wait_s"] in ("", None):
            continue  # unsynchronised GPU steps carry no phase times (see the harness)
        count += 1
        for k in PHASE_COLUMNS + ("step_s",):
            if row.get(k) not in (None, ""):  # prepare_s is absent from older harnesses' files
                sums[k] = sums.get(k, 0.0) + float(row[k])
    return {k: v / count for k, v in sums.items()} if count else None


def layer_work(rows: list) -> list | None:
    """The mean work of each layer per step over steps.csv `rows` (LAYER_FIELDS): [{layer,
    src_nodes, dst_nodes, edges}], first layer first; None when the rows list no layers (older
    files, or a batch type that does not say)."""
    names = [name for name, _ in LAYER_FIELDS]
    per = [[[int(v) for v in row[n].split(";")] for n in names] for row in rows if row.get(names[0])]
    if not per:
        return None
    sums = np.asarray(per, dtype=float).mean(axis=0)  # (field, layer)
    return [{"layer": i, **{n.removesuffix("_by_layer"): round(float(sums[j][i]), 3) for j, n in enumerate(names)}}
            for i in range(sums.shape[1])]


def work_per_step(epochs: list) -> dict | None:
    """The mean work of one step (WORK_FIELDS) over every rank's epochs; None without steps."""
    steps = sum(e.get("steps") or 0 for e in epochs)
    if not steps:
        return None
    return {k: (round(sum(e[k] for e in epochs) / steps, 3) if all(e.get(k) is not None for e in epochs)
                else None) for k, _ in WORK_FIELDS}


def collect_measurements(out: Path, local_ranks: list) -> dict:
    """Everything the ranks wrote, assembled into result.json's sections."""
    epochs, ranks, seeds, infos = [], [], [], {}
    for r in local_ranks:
        info = infos[r] = read_rank_info(out, r) or {}
        epochs += [{k: _num(v) for k, v in row.items()} for row in read_rank_rows(out, r, "epochs") or []]
        ranks.append(_rank_entry(r, info))
        if "seed" in info:
            seeds.append({"rank": r, "seed": info["seed"], "worker_seeds": info.get("worker_seeds", []),
                          "epoch_seed_digests": info.get("epoch_seed_digests", [])})
    epochs.sort(key=lambda e: (e["epoch"], e["rank"]))
    for entry in ranks:  # work per rank: what each rank actually trained in every epoch
        mine = [e for e in epochs if e["rank"] == entry["rank"]]
        entry["steps_per_epoch_done"] = [e.get("steps") for e in mine]
        entry["seed_nodes_per_epoch"] = [e.get("seed_nodes") for e in mine]
    validation = [{"epoch": int(v["epoch"]), "accuracy": float(v["accuracy"])}
                  for v in read_rank_rows(out, local_ranks[0], "validation") or []] if local_ranks else []
    steps = [row for r in local_ranks for row in read_rank_rows(out, r, "steps") or []]
    return {"epochs": epochs, "ranks": ranks, "seeds": seeds, "validation": validation,
            "breakdown": _step_breakdown(steps), "layer_work": layer_work(steps), "infos": infos}


# -- derived figures -----------------------------------------------------------------------------

def steady_state(epoch_times: list, warmup: int = WARMUP_EPOCHS) -> dict:
    """Steady-state epoch time: the median of the epochs after the warm-up, with its spread.

    The first epoch carries one-off costs (loader workers starting, first-touch of the
    memory-mapped graph, allocator growth, lazy initialisation in both frameworks), so it is
    reported separately as warm-up. With fewer than warmup + 1 epochs there is no steady state.
    """
    warm = epoch_times[:warmup]
    steady = epoch_times[warmup:]
    out = {"warmup_epochs": len(warm), "warmup_epoch_time_s": warm[0] if warm else None,
           "steady_epochs": len(steady), "steady_epoch_time_s": None, "steady_epoch_q1_s": None,
           "steady_epoch_q3_s": None, "steady_epoch_min_s": None, "steady_epoch_max_s": None,
           "steady_epoch_cv": None}
    if not steady:
        return out
    arr = np.asarray(steady, dtype=float)
    q1, med, q3 = np.percentile(arr, [25, 50, 75])
    out.update({"steady_epoch_time_s": float(med), "steady_epoch_q1_s": float(q1), "steady_epoch_q3_s": float(q3),
                "steady_epoch_min_s": float(arr.min()), "steady_epoch_max_s": float(arr.max()),
                "steady_epoch_cv": float(arr.std(ddof=1) / arr.mean()) if len(arr) > 1 and arr.mean() > 0 else None})
    return out


def steps_per_epoch(ranks: list):
    """A run's steps per epoch: the most steps any rank takes per epoch (result.json `ranks`).

    The one definition for the summary (steps_per_epoch, steps_per_rank_epoch) and runs.csv.
    Ranks differ only with --uneven-batches, and the epoch lasts until the rank with the most
    steps is done; None when no rank recorded its count."""
    steps = [r["steps_per_epoch"] for r in ranks if r.get("steps_per_epoch") is not None]
    return max(steps) if steps else None


def slowest_epoch_times(epochs: list) -> list:
    """Each epoch's time as the slowest rank took it, in epoch order."""
    per_epoch: dict = {}
    for e in epochs:
        per_epoch[e["epoch"]] = max(per_epoch.get(e["epoch"], 0.0), e["time_s"])
    return [per_epoch[k] for k in sorted(per_epoch)]


def _accuracy_figures(m: dict, cfg, reference: dict, epoch_times: list, rank0: list) -> dict:
    """The summary's accuracy figures against the dataset's target and baselines."""
    from runners.rank import accuracy

    val = m["validation"]
    final_acc = val[-1]["accuracy"] if val else None
    target_acc, baseline = reference.get("target_val_acc"), reference.get("baseline_val_acc")
    tta, epochs_to = accuracy.time_to_target(epoch_times, val, target_acc)
    return {
        "final_val_acc": final_acc,
        "best_val_acc": max(v["accuracy"] for v in val) if val else None,
        "target_val_acc": target_acc, "time_to_target_s": tta, "epochs_to_target": epochs_to,
        "baseline_val_acc": baseline,
        # Beating the features-only baseline is the least a GNN must do; below it, accuracy
        # comparisons between frameworks mean nothing. Judged for fixed schedules only: a
        # timing run stops when its epoch time is known, long before it could converge.
        "converged": ((final_acc > baseline) if (final_acc is not None and baseline is not None
                                                 and cfg.until == "epochs") else None),
        # What a timing run can show: it learnt (above the majority class, loss falling), so a
        # fast but broken run is caught.
        "learned": learned(final_acc, reference.get("chance_val_acc"), rank0),
    }


def summarise(m: dict, cfg, reference: dict | None = None) -> dict:
    """The headline numbers. train_time_s is the slowest rank's total training time (the seed
    study's metric); steady_epoch_time_s the median epoch after the warm-up (see steady_state).
    `reference` (runners.rank.accuracy.reference) supplies the accuracy target and baseline."""
    reference = reference or {}
    infos = m["infos"]
    all_ranks = next((i["all_ranks"] for i in infos.values() if i.get("all_ranks")), None)
    times = [a["train_time_s"] for a in all_ranks] if all_ranks else [
        r["train_time_s"] for r in m["ranks"] if r["train_time_s"] is not None]
    train_time = max(times)
    epoch_times = slowest_epoch_times(m["epochs"])
    seeds_local = sum(e.get("seed_nodes") or 0 for e in m["epochs"])
    edges_local = sum(e.get("sampled_edges") or 0 for e in m["epochs"])
    scale = cfg.world_size / max(1, len(m["ranks"]))  # other nodes' ranks do the same work
    rank0 = [e for e in m["epochs"] if e["rank"] == min(r["rank"] for r in m["ranks"])]
    startups = [r["startup_s"] for r in m["ranks"] if r["startup_s"] is not None]
    startup = max(startups) if startups else None
    return {
        "train_time_s": train_time,  # unrounded: it must equal the slowest rank's own figure
        "median_epoch_time_s": statistics.median(epoch_times),
        **steady_state(epoch_times),
        "steps_per_epoch": steps_per_epoch(m["ranks"]),
        "timed_to_startup_ratio": round(train_time / startup, 3) if startup else None,
        "throughput_seed_nodes_per_s": round(seeds_local * scale / train_time, 3) if train_time else 0.0,
        "sampled_edges_per_s": round(edges_local * scale / train_time, 3) if train_time else None,
        **_accuracy_figures(m, cfg, reference, epoch_times, rank0),
        "startup_s": startup,
        "step_breakdown_s": m["breakdown"],
        "work_per_step": work_per_step(m["epochs"]),
        "work_per_layer": m.get("layer_work"),
        "first_loss": rank0[0]["loss"] if rank0 else None,
        "last_loss": rank0[-1]["loss"] if rank0 else None,
        "rank_train_times_s": times,
        **work_per_rank(m, cfg),
        "precision": precision_record(epoch_times, cfg, infos),
    }


def learned(final_acc, chance, rank0_epochs: list):
    """Did training move at all: validation accuracy above the majority-class share and the
    last epoch's loss below the first's (None when either is unknown)."""
    losses = [e.get("loss") for e in rank0_epochs if e.get("loss") is not None]
    if final_acc is None or chance is None or len(losses) < 2:
        return None
    return bool(final_acc > chance and losses[-1] < losses[0])


def precision_record(epoch_times: list, cfg, infos: dict) -> dict:
    """How well the run pinned its steady-state epoch time down (runners.rank.stopping): the rule and
    its settings, why it stopped (the ranks' own record), the epochs it used and the interval
    and drift reached. `stopped_by_cap` marks a run the caps stopped before it was precise."""
    from runners.rank import stopping

    stop = next((i["stop"] for i in infos.values() if i.get("stop")), {})
    a = stopping.assess(epoch_times, cfg.precision)
    reason = stop.get("reason")
    return {**cfg.stop_rule().to_json(), "stopped_by": reason, "epochs_run": len(epoch_times),
            "stopped_by_cap": reason in ("epoch_cap", "time_cap"), **a}


def seed_work(epochs: list, world_size: int, split) -> dict:
    """Seed nodes one rank trained per epoch (mean over its epochs, then over ranks) and all
    ranks' seeds per epoch against the training split: 1.0 means the ranks shared one pass
    over the split, N means every one of N ranks went over all of it. `epochs` are the
    per-rank epoch records (result.json's `epochs`); analysis uses this for older results too."""
    per_rank: dict = {}
    for e in epochs:
        if e.get("seed_nodes") is not None:
            per_rank.setdefault(e["rank"], []).append(float(e["seed_nodes"]))
    means = [statistics.fmean(v) for v in per_rank.values()]
    per_rank_mean = statistics.fmean(means) if means else None
    total = per_rank_mean * world_size if means else None
    return {"seed_nodes_per_rank_epoch": per_rank_mean, "seed_nodes_per_epoch_all_ranks": total,
            "train_split_seed_nodes": split, "split_passes_per_epoch": total / split if total and split else None}


def work_per_rank(m: dict, cfg) -> dict:
    """Steps and seed nodes each rank trained per epoch (see seed_work), for the summary."""
    split = next((i.get("train_split_seed_nodes") for i in m["infos"].values()
                  if i.get("train_split_seed_nodes")), None)
    return {"harness": cfg.harness, "steps_per_rank_epoch": steps_per_epoch(m["ranks"]),
            **seed_work(m["epochs"], cfg.world_size, split)}
