"""The shared training harness: what every rank runs, for either framework (started by
runners.launch.spawn on one node, torchrun across nodes).

`python -m runners.rank.harness --config RUN_DIR/config.json` (started by runners.run). It sets
up the process group, loads the canonical dataset, asks the framework adapter for the loader
and model, and runs DDP training with the same timing and probes for both frameworks.
Everything it measures is appended to files in the run directory as it goes (per step, per
epoch), so a hang or a kill loses nothing already measured.
"""

from __future__ import annotations

import argparse
import datetime
import faulthandler
import json
import math
import os
import random
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

T_PROCESS_START = time.time()

import numpy as np  # noqa: E402

from runners.config import RunConfig  # noqa: E402
from runners.rank import stopping  # noqa: E402
from runners.rank.failure import record_failure  # noqa: E402
from runners.rank.phase_timer import StepRecorder  # noqa: E402
from runners.rank.probes import CpuSampler, CsvAppender, Heartbeat, NvmlSampler, start_nvml  # noqa: E402
from runners.rank.seeds import SEED_SPLIT_RULE, rank_seed, seed_set_digest, split_seeds, worker_seed  # noqa: E402
from runners.records import rank_rows  # noqa: E402
from runners.records.envinfo import RECORDED_ENV_VARS, process_created  # noqa: E402
from runners.records.rank_rows import EpochRow, RowAppender, StepRow, ValidationRow  # noqa: E402
from runners.records.rundir import RunDir  # noqa: E402


class Faults:
    """Deliberate faults for the watchdog's tests (off unless --inject and --allow-fault-injection)."""

    def __init__(self, cfg: RunConfig, rank: int):
        self.kind = cfg.inject
        self.active = cfg.inject is not None and rank == cfg.fault_rank
        self.epoch, self.step = cfg.inject_epoch, cfg.inject_step
        self.fired = False

    def at(self, point: str, epoch: int, step: int, tensor=None) -> None:
        if not self.active or self.fired or (epoch, step) != (self.epoch, self.step):
            return
        if point == "forward" and self.kind == "stall-rank":
            self.fired = True
            while True:  # a rank that stops making progress (a straggler that never returns)
                time.sleep(3600)
        if point == "backward" and self.kind == "freeze-rank":
            self.fired = True
            # Freeze the whole process inside autograd, before its first gradient, so this
            # rank never joins the all-reduce the others wait in: the state of a rank stopped
            # from outside (SIGSTOP, a debugger, a hung driver call) in the same phase as they.
            tensor.register_hook(_freeze_self)
        if point == "forward" and self.kind == "crash-rank":
            self.fired = True
            raise RuntimeError(f"injected fault crash-rank at epoch {epoch} step {step}")
        if point == "before-load" and self.kind in ("hang-worker", "kill-worker"):
            import psutil

            workers = psutil.Process().children(recursive=False)
            if not workers:
                return
            self.fired = True
            victim = workers[0].pid
            # SIGSTOP freezes a worker mid-work (it is alive, so the loader waits forever);
            # SIGKILL is what the out-of-memory killer does to a worker.
            os.kill(victim, signal.SIGSTOP if self.kind == "hang-worker" else signal.SIGKILL)
            print(f"[gnnscale] injected fault {self.kind}: signalled loader worker pid {victim}", flush=True)


def _freeze_self(grad):
    os.kill(os.getpid(), signal.SIGSTOP)  # every thread stops; nothing of this rank runs on
    return grad


@dataclass
class Training:
    """What one rank's epochs need (built by Rank.set_up_training)."""

    torch: Any
    device: Any
    graph: Any
    adapter: Any
    ddp: Any
    optimizer: Any
    scheduler: Any
    loader: Any
    steps: int
    rank_seeds: Any
    epoch_share: Callable
    recorder: StepRecorder
    phases_valid: bool


class Rank:
    """One DDP rank's run: set-up, training, evaluation and the files it writes."""

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        self.out = Path(cfg.out)
        self.run_dir = RunDir(self.out)
        self.dir = self.run_dir.rank(self.rank)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.hb = Heartbeat(self.run_dir.heartbeat(self.rank))
        self.info: dict = {"rank": self.rank, "pid": os.getpid(), "host": os.uname().nodename,
                           "local_rank": self.local_rank, "startup": {}, "workers": []}
        self.launch_t = float(os.environ.get("GNNSCALE_LAUNCH_TIME", T_PROCESS_START))
        self.faults = Faults(cfg, self.rank)
        self.adapter = None
        self.run_dir.stacks.mkdir(exist_ok=True)
        # SIGUSR1 dumps every thread's Python stack: the watchdog's fallback when py-spy can't attach.
        self._fh_stacks = open(self.run_dir.faulthandler_dump(self.rank, os.getpid()), "w")
        faulthandler.register(signal.SIGUSR1, file=self._fh_stacks, all_threads=True)
        # SIGUSR2: the launcher is stopping the run (it was interrupted); keep the steps of the
        # epoch in progress, then leave. Not SIGTERM: a rank hung in a C call could not act on
        # it, and its SIGTERM must still end it at once.
        self.pending_rows = None
        self.rows_lock = threading.Lock()
        self._listen_for_stop()

    # -- bookkeeping --------------------------------------------------------------------
    def _listen_for_stop(self) -> None:
        """Act on SIGUSR2 in a thread of its own. A Python signal handler runs only between the
        main thread's bytecodes, so a rank waiting in backward's all-reduce for a peer that has
        already left would never run it; the wakeup fd is written by the C-level handler at
        once, and this thread gets the GIL because backward releases it."""
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        signal.signal(signal.SIGUSR2, lambda signum, frame: None)  # the thread below acts
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        threading.Thread(target=self._await_stop, args=(read_fd,), name="gnnscale-stop", daemon=True).start()

    def _await_stop(self, read_fd: int) -> None:
        while data := os.read(read_fd, 64):  # other signals' bytes land here too: skipped
            if signal.SIGUSR2 in data:
                self._keep_partial_epoch()

    def _keep_partial_epoch(self) -> None:
        with self.rows_lock:  # not while the epoch's end writes the same rows
            rows, self.pending_rows = self.pending_rows, None
            if rows:
                for r in rows:
                    r.settle_loss()
                self.step_csv.write(rows)
            self.hb.beat("failed")
            os._exit(128 + signal.SIGUSR2)

    def mark(self, name: str) -> None:
        self.info["startup"][name] = round(time.time() - self.launch_t, 4)

    def write_info(self) -> None:
        rank_rows.write_rank_info(self.out, self.rank, self.info)

    def worker_init(self, worker_id: int) -> None:
        """Runs in each loader worker: seeds, one thread, and a stack dump on SIGUSR1."""
        import torch

        seed = worker_seed(self.cfg.seed, self.rank, worker_id)
        torch.manual_seed(seed)
        np.random.seed(seed)
        random.seed(seed)
        if self.adapter is not None:  # the framework's own generators (DGL's sampler)
            self.adapter.seed(seed)
        signal.set_wakeup_fd(-1)  # the rank's stop listener is not in this process: SIGUSR2 is the rank's
        # Workers share the rank's cores; oversubscribing them would slow the trainer.
        torch.set_num_threads(1)
        fh = open(self.run_dir.faulthandler_dump(self.rank, os.getpid(), worker_id), "w")
        faulthandler.register(signal.SIGUSR1, file=fh, all_threads=True)
        self.run_dir.workers.mkdir(exist_ok=True)
        self.run_dir.worker(os.getpid()).write_text(
            json.dumps({"pid": os.getpid(), "rank": self.rank, "worker_id": worker_id, "seed": seed}))

    def worker_exits(self) -> list:
        """How each of this rank's loader workers that is no longer running ended.

        The rank is their parent, so an unreaped worker's exit signal is still readable; a
        worker that is still exiting (it reset the batch channel on its way out) is waited for.
        """
        from runners.rank.probes import exit_of

        dead = []
        for f in self.run_dir.worker_files():
            try:
                rec = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            if rec.get("rank") != self.rank:
                continue
            how = exit_of(rec["pid"])
            if how is not None:
                dead.append({"pid": rec["pid"], "worker_id": rec.get("worker_id"), "seen_t": time.time(), **how})
        return dead

    # -- the run ------------------------------------------------------------------------
    # -- set-up shared by both harnesses -----------------------------------------------------
    def set_up_process(self):
        """Imports, recorded environment, threads and seeds; returns (torch, device, seed)."""
        cfg = self.cfg
        self.info["startup"]["process_started"] = round(T_PROCESS_START - self.launch_t, 4)
        self.info["startup"]["process_created"] = round(process_created() - self.launch_t, 4)
        import torch

        self.mark("torch_imported")
        from runners.adapters import get_adapter_class

        self.adapter_cls = get_adapter_class(cfg.framework, cfg.strategy)
        self.mark("framework_imported")
        import torch._dynamo  # noqa: F401  (the first optimiser imports it: ~1 s that belongs to imports)

        self.mark("imports_done")
        self.info["env_vars"] = {k: os.environ.get(k) for k in RECORDED_ENV_VARS}
        torch.set_num_threads(cfg.threads_per_rank)
        self.info["threads"] = torch.get_num_threads()
        seed = rank_seed(cfg.seed, self.rank)
        torch.manual_seed(seed)
        np.random.seed(seed)
        random.seed(seed)
        self.info["seed"] = seed
        self.info["worker_seeds"] = [worker_seed(cfg.seed, self.rank, w) for w in range(cfg.workers)]
        if cfg.device_type == "cuda":
            torch.cuda.set_device(self.local_rank)
            return torch, torch.device("cuda", self.local_rank), seed
        return torch, torch.device("cpu"), seed

    def load_data_and_model(self, device, seed: int):
        """The canonical graph, the framework adapter over it and the model with the canonical
        start weights (the same in both frameworks); returns (graph, adapter, model)."""
        from runners import datasets
        from runners.adapters import init_canonical

        cfg = self.cfg
        graph = datasets.load(cfg.dataset, root=cfg.data_root)
        self.info["dataset_hash"] = graph.content_hash
        self.info["train_split_seed_nodes"] = int(len(graph.train_idx))
        adapter = self.adapter_cls(cfg, graph, self.rank, self.world, device)
        adapter.seed(seed)
        self.adapter = adapter  # loader workers, forked later, seed the framework through it
        self.info["adapter_choices"] = adapter.choices
        self.mark("dataset_loaded")
        self.hb.beat("model-build")
        model = adapter.build_model()
        init_canonical(model.canonical_parameters(), cfg.seed)
        self.info["parameters"] = int(sum(p.numel() for p in model.parameters()))
        self.info["lr_effective"] = cfg.lr * (self.world if cfg.lr_scaling == "linear" else 1)
        return graph, adapter, model

    def start_probes(self) -> None:
        """NVML (the rank's own GPU) and CPU samplers, and the per-rank CSV files."""
        cfg = self.cfg
        self.nvml, reason = None, "probes switched off"
        if cfg.probes and cfg.device_type == "cuda":
            self.nvml, reason = start_nvml(cfg.nvml_sample_interval_s, self.local_rank)
        elif cfg.probes:
            reason = "no GPU in this run (CPU processes); NVML not sampled"
        self.info["nvml"] = {"available": self.nvml is not None, "reason": reason}
        if self.nvml is not None:
            self.info["nvml"].update(gpu=self.nvml.gpu, pci_bus_id=self.nvml.bus_id)
        self.cpu = CpuSampler(cfg.cpu_sample_interval_s) if cfg.probes else None
        if self.cpu:
            self.cpu.start()
        cpu_path, nvml_path = (self.run_dir.rank_file(self.rank, name) for name in ("cpu", "nvml"))
        self.cpu_csv = CsvAppender(cpu_path, CpuSampler.COLUMNS) if self.cpu else None
        self.nvml_csv = CsvAppender(nvml_path, NvmlSampler.COLUMNS) if self.nvml else None

    def open_records(self) -> None:
        """The per-rank steps, epochs and validation CSVs (appended as training goes)."""
        self.step_csv = RowAppender(self.run_dir.rank_file(self.rank, "steps"), StepRow)
        self.epoch_csv = RowAppender(self.run_dir.rank_file(self.rank, "epochs"), EpochRow)
        self.val_csv = RowAppender(self.run_dir.rank_file(self.rank, "validation"), ValidationRow)

    def drain_probes(self) -> None:
        if self.cpu:
            self.cpu_csv.write(self.cpu.drain())
        if self.nvml:
            self.nvml_csv.write(self.nvml.drain())

    def stop_probes(self) -> None:
        for sampler in (self.cpu, self.nvml):
            if sampler:
                sampler.stop()
        self.info["probe_cost_s"] = {"cpu": self.cpu.cost_s if self.cpu else 0.0,
                                     "nvml": self.nvml.cost_s if self.nvml else 0.0,
                                     "cpu_samples": self.cpu.samples if self.cpu else 0}
        self.drain_probes()

    def write_epoch(self, epoch: int, rows: list, epoch_s: float, phases_valid: bool = True) -> float:
        """steps.csv and epochs.csv rows of one epoch (`rows`: its StepRows); returns the
        epoch's mean loss."""
        for r in rows:
            r.settle_loss()  # the losses stay on the device until here: no sync per step
        self.note_divergence(epoch, rows)
        self.step_csv.write(rows)
        row = EpochRow.of_steps(epoch, self.rank, rows, epoch_s, phases_valid)
        self.epoch_csv.write([row])
        self.drain_probes()
        return row.loss

    def note_divergence(self, epoch: int, rows: list) -> None:
        """Keep the first step whose loss is not a finite number in rank.json: from there on
        the run trains on NaN and its times measure nothing."""
        bad = next((r for r in rows if not math.isfinite(r.loss)), None)
        if bad is not None and not self.info.get("diverged"):
            self.info["diverged"] = {"epoch": epoch, "step": bad.step, "loss": repr(bad.loss)}

    def finish(self, train_time: float) -> None:
        """Every rank's training time to every rank (a multi-node run's slowest rank is known on
        the first node too), then the final records."""
        import torch.distributed as dist

        self.info["train_time_s"] = train_time
        self.hb.beat("epoch-sync")
        gathered = [None] * self.world
        dist.all_gather_object(gathered, {"rank": self.rank, "train_time_s": train_time,
                                          "host": self.info["host"]})
        self.info["all_ranks"] = gathered
        if hasattr(self.adapter, "close"):  # DistDGL: a barrier of all trainers, then the servers stop
            self.hb.beat("epoch-sync")
            self.adapter.close()
        self.info["finished"] = True
        self.mark("records_written")  # the write below is the last; os._exit follows
        self.write_info()
        # No destroy_process_group(): gloo's destructor joins its worker thread while holding
        # the GIL, and that thread may need the GIL to free a finished collective's tensors, a
        # deadlock seen here (py-spy: ~ProcessGroupGloo -> thread::join). main() leaves with
        # os._exit once everything is written; the collective above has completed on every rank.
        self.hb.beat("done")

    # -- the fair harness ------------------------------------------------------------------
    def run(self) -> None:
        """Set-up, the epochs, and the final records of one DDP rank."""
        cfg = self.cfg
        self.mark("process_started")
        torch, device, seed = self.set_up_process()
        import torch.distributed as dist

        # PyTorch's own collective timeout outlasts the watchdog's limits, so a hang stays a
        # hang (caught, with stacks) instead of a timeout crash; under NCCL the default would
        # otherwise abort the waiting ranks first.
        self.info["collective_timeout_s"] = cfg.collective_timeout_s
        timeout = datetime.timedelta(seconds=cfg.collective_timeout_s)
        self.hb.beat("rendezvous")
        if hasattr(self.adapter_cls, "before_process_group"):  # DistDGL: its services first
            self.adapter_cls.before_process_group(cfg)
            self.mark("framework_services_ready")
        init_method = os.environ.get("GNNSCALE_INIT_METHOD")  # runners.launch.spawn: a file store (its doc)
        if init_method:
            dist.init_process_group(cfg.backend, init_method=init_method, rank=self.rank, world_size=self.world,
                                    timeout=timeout)
        else:
            dist.init_process_group(cfg.backend, timeout=timeout)
        self.mark("process_group_ready")
        if cfg.nodes > 1:
            # Every rank's host and address, known to every node from the start: a node that
            # loses another (its ranks see only a reset connection) can name it.
            peers = [None] * self.world
            dist.all_gather_object(peers, {"rank": self.rank, "host": self.info["host"],
                                           "address": os.environ.get("GNNSCALE_NODE_ADDRESS")})
            self.info["peers"] = peers
        self.hb.beat("data-load")
        graph, adapter, model = self.load_data_and_model(device, seed)
        t = self.set_up_training(torch, device, graph, adapter, model)
        self.mark("model_ready")
        self.write_info()
        self.open_records()
        self.start_probes()
        self.info["phases_recorded"] = t.phases_valid
        self.mark("training_started")
        self.write_info()
        train_time = self.train(t)
        self.mark("training_done")  # the epochs and their validations
        self.stop_probes()
        self.finish(train_time)

    def train(self, t: "Training") -> float:
        """Epochs until the stop rule says the epoch time is known (or the schedule is done);
        returns this rank's training time. Every rank applies the rule to the same numbers
        (each epoch's slowest-rank time), so all ranks stop after the same epoch."""
        rule = self.cfg.stop_rule()
        slowest, reason, train_time = [], None, 0.0
        while reason is None:
            epoch = len(slowest)
            epoch_s = self.train_epoch(t, epoch)
            train_time += epoch_s
            epoch_slowest, diverged = self.slowest_epoch(t, epoch_s)
            slowest.append(epoch_slowest)
            if diverged:  # on some rank: every rank knows it from the same all-reduce, and stops
                reason = "diverged"
                break
            reason = stopping.decide(slowest, rule)
            self.validate(t, epoch, last=reason is not None)
        self.info["stop"] = {"reason": reason, "epochs": len(slowest), **rule.to_json()}
        return train_time

    def slowest_epoch(self, t: "Training", epoch_s: float) -> tuple:
        """The slowest rank's time of this epoch and whether any rank's loss diverged, known to
        every rank (one all-reduce, outside the timed region)."""
        import torch.distributed as dist

        self.hb.beat("epoch-sync")
        x = t.torch.tensor([epoch_s, 1.0 if self.info.get("diverged") else 0.0], dtype=t.torch.float64,
                           device=t.device)  # NCCL: device tensors only
        dist.all_reduce(x, op=dist.ReduceOp.MAX)
        slowest, diverged = x.tolist()
        return slowest, diverged > 0

    def validate(self, t: "Training", epoch: int, last: bool) -> None:
        """Validation accuracy (untimed) when due: every eval_every epochs and after the last
        epoch, or only after the last with eval_every "end"; never with 0."""
        every = self.cfg.eval_every
        periodic = isinstance(every, int) and every > 0 and (epoch + 1) % every == 0
        if not (periodic or (last and every != 0)):
            return
        t_eval = time.perf_counter()
        acc = self.evaluate(t.adapter, t.ddp.module, t.graph, t.device)
        self.val_csv.write([ValidationRow(epoch, round(acc, 6), round(time.perf_counter() - t_eval, 4))])
        if self.rank == 0:
            print(f"[gnnscale] epoch {epoch + 1} val_acc {acc:.4f}", flush=True)

    def set_up_training(self, torch, device, graph, adapter, model) -> "Training":
        """DDP model, optimiser, the rank's seed share in shared memory and the loader over it."""
        import torch.distributed as dist

        cfg = self.cfg
        ddp = torch.nn.parallel.DistributedDataParallel(
            model.to(device), device_ids=[self.local_rank] if device.type == "cuda" else None)
        optimizer = torch.optim.Adam(ddp.parameters(), lr=self.info["lr_effective"], weight_decay=cfg.weight_decay)

        def epoch_share(epoch: int) -> np.ndarray:
            return split_seeds(graph.train_idx, self.rank, self.world, cfg.seed, cfg.batch_size,
                               cfg.uneven_batches, epoch)

        if hasattr(adapter, "epoch_share"):  # partitioned: a rank trains its partition's seeds
            epoch_share = adapter.epoch_share

        # The loaders index this tensor in place (shuffle off); it lives in shared memory so
        # that persistent loader workers, forked once, see each epoch's new share.
        rank_seeds = torch.tensor(epoch_share(0), dtype=torch.long).share_memory_()
        self.info["seed_split"] = adapter.choices.get("seed_split") if hasattr(adapter, "epoch_share") else SEED_SPLIT_RULE
        self.info["epoch_seed_digests"] = []
        loader = adapter.train_loader(rank_seeds, self.worker_init if cfg.workers > 0 else None)
        steps = len(loader)
        if cfg.max_steps_per_epoch:
            steps = min(steps, cfg.max_steps_per_epoch)
        self.hb.steps_per_epoch = steps
        self.info["steps_per_epoch"] = steps
        counts = [None] * self.world
        dist.all_gather_object(counts, steps)
        self.info["steps_per_rank"] = counts
        if len(set(counts)) > 1 and not cfg.uneven_batches:
            raise RuntimeError(f"ranks would take different numbers of steps per epoch {counts}: "
                               "the rank that finishes first would leave the others waiting in the all-reduce")
        scheduler = None
        if cfg.lr_scaling == "linear" and cfg.warmup_epochs > 0 and self.world > 1:
            scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=1.0 / self.world,
                                                          total_iters=cfg.warmup_epochs * steps)
        cuda = device.type == "cuda"
        # CUDA work is asynchronous: an epoch's time is only its own once the queue is empty at
        # both of its edges. Phase times need a synchronisation at every phase edge (breakdown
        # mode); without it they are CPU launch times, so they are not recorded at all.
        sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
        phases_valid = cfg.breakdown or not cuda
        recorder = StepRecorder(self.hb, self.faults, sync, breakdown=cfg.breakdown, phases_valid=phases_valid,
                                on_first_batch=lambda: self.mark("first_batch"))
        return Training(torch=torch, device=device, graph=graph, adapter=adapter, ddp=ddp, optimizer=optimizer,
                        scheduler=scheduler, loader=loader, steps=steps, rank_seeds=rank_seeds,
                        epoch_share=epoch_share, recorder=recorder, phases_valid=phases_valid)

    def train_epoch(self, t: "Training", epoch: int) -> float:
        """One epoch over this rank's new seed share, step by step as the frameworks' examples
        train; returns its training time. The recorder does the bookkeeping around each phase
        (times, progress marks, breakdown synchronisation, fault hooks)."""
        rec, cross_entropy = t.recorder, t.torch.nn.functional.cross_entropy
        t.ddp.train()
        self.new_seed_share(t, epoch)
        rec.start_epoch(epoch)
        it = iter(t.loader)
        rows = self.pending_rows = []  # kept by _keep_partial_epoch if the run is interrupted
        for _ in rec.steps(t.steps):
            with rec.phase("load_wait"):
                raw = next(it)
            with rec.phase("prepare"):
                batch = t.adapter.unpack(raw)
            with rec.phase("copy"):
                batch = t.adapter.to_device(batch)
            with rec.phase("forward"):
                loss = cross_entropy(t.adapter.forward(t.ddp, batch.inputs), batch.labels)
            with rec.phase("backward", grad_of=loss):
                t.optimizer.zero_grad(set_to_none=True)
                loss.backward()  # DDP all-reduces the gradients here
            with rec.phase("optimizer"):
                t.optimizer.step()
                if t.scheduler is not None:
                    t.scheduler.step()
            rows.append(rec.step_row(batch, loss))
        epoch_s = rec.end_epoch()
        del it
        with self.rows_lock:  # an interruption from here on waits for these rows, then leaves
            self.pending_rows = None
            self.close_epoch(epoch, rows, epoch_s, t.phases_valid)
        return epoch_s

    def new_seed_share(self, t: "Training", epoch: int) -> None:
        """This epoch's seed share, written in place where the loader (and its persistent
        workers) read it; its digest goes to rank.json."""
        share = t.epoch_share(epoch)
        if epoch > 0:
            t.rank_seeds.copy_(t.torch.from_numpy(share))
        self.info["epoch_seed_digests"].append(seed_set_digest(share))

    def close_epoch(self, epoch: int, rows: list, epoch_s: float, phases_valid: bool) -> None:
        """The epoch's records (outside its timed region) and rank 0's progress line."""
        self.hb.beat("epoch-sync")
        mean_loss = self.write_epoch(epoch, rows, epoch_s, phases_valid)
        if self.rank == 0:
            cfg = self.cfg
            of = f"/{cfg.epochs}" if cfg.until == "epochs" else f" (at most {cfg.epochs})"
            print(f"[gnnscale] epoch {epoch + 1}{of} rank0 {epoch_s:.3f}s steps {len(rows)} "
                  f"loss {mean_loss if mean_loss is not None else float('nan'):.4f}", flush=True)

    def evaluate(self, adapter, model, graph, device) -> float:
        """Validation accuracy over all ranks' shares of the validation split (not timed)."""
        import torch
        import torch.distributed as dist

        model.eval()
        share = np.asarray(graph.val_idx)[self.rank::self.world]
        # On the run's device: NCCL all-reduces CUDA tensors only.
        correct = torch.zeros(2, dtype=torch.float64, device=device)
        self.hb.beat("evaluation")
        with torch.no_grad():
            if len(share):
                for raw in adapter.eval_loader(share):
                    self.hb.beat("evaluation")
                    batch = adapter.to_device(adapter.unpack(raw))
                    pred = adapter.forward(model, batch.inputs).argmax(dim=-1)
                    correct[0] += (pred == batch.labels).sum()
                    correct[1] += batch.labels.numel()
        dist.all_reduce(correct)  # every rank evaluates: no rank-0-only barrier to hang on
        model.train()
        hits, total = correct.tolist()
        return hits / max(total, 1.0)


def main(argv=None, rank_class=None) -> int:
    """Run one rank; `rank_class` (default Rank) lets runners.rank.study reuse the error record."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True)
    args = parser.parse_args(argv)
    cfg = RunConfig.load(Path(args.config))
    rank = (rank_class or Rank)(cfg)
    try:
        rank.run()
    except BaseException as exc:
        return record_failure(rank, exc)
    # Everything is on disk. Skip interpreter teardown: destructors of the process group and
    # loader threads have been seen to block a finished rank forever (gloo, 2 ranks).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
