"""The seed study's own harness, rebuilt: training through PyTorch Lightning's DDP strategy.

`python -m runners.rank.study --config RUN_DIR/config.json` (started by runners.run for
`--harness study`, under the same rank starter: runners.launch.spawn on one node, torchrun across
nodes; Lightning detects either's environment as torchelastic's).
It trains the same models on the same data as the fair harness (runners/rank/harness.py), but
builds the loaders the way the seed study did (semiluna/R244), which is what decides how
much work each rank does:

- PyG: the NeighborLoader over the whole training split is created inside a
  LightningDataModule.train_dataloader hook, so Lightning rebuilds it with a
  DistributedSampler and each rank trains 1/N of the seeds;
- DGL: the dgl.dataloading.DataLoader (no use_ddp) is created before fit and passed to
  trainer.fit; its dataset is iterable, so Lightning cannot shard it and every rank
  trains the whole split.

How each framework's loader is built lives in the adapters (study_train_loader,
study_eval_loader, study_loader_in_hook); this module is framework-agnostic. The training
time is the wall time of trainer.fit, validation (and Lightning's sanity check) included,
as the study timed it. Per-rank files are the fair harness's (rank.json, steps.csv,
epochs.csv, validation.csv, cpu.csv, heartbeats), so result.json, the watchdog and the
analysis read them unchanged.

Not reproduced, deliberately: the study's DGL GAT also applied dropout 0.6 to the raw input
features of the first layer (feat_drop on every layer); here both harnesses train the same
models, so a difference between harnesses comes from the harness alone. The study's
ModelCheckpoint callback and logger are left out (they write files; nothing measured here
depends on them).
"""

from __future__ import annotations

import sys
import time

from runners.rank.harness import Rank, main as harness_main
from runners.records.rank_rows import StepRow, ValidationRow

_now = time.perf_counter

# What result.json records about the study harness's own settings.
STUDY_CHOICES = {
    "trainer": "lightning Trainer(strategy=DDPStrategy, max_epochs, defaults otherwise: validation every "
               "epoch, 2 sanity-check validation steps); no checkpoint callback, no logger",
    "timing": "train_time_s = wall time of trainer.fit (validation and sanity check included), as the study "
              "timed it; epochs.csv time_s = the epoch's training batches only",
    "loaders": "adapters' study_train_loader / study_eval_loader; the training loader's workers are not "
               "persistent (PyTorch's default, as in the study); validation loaders use no workers",
    "model": "the fair harness's models and initial weights; the study's extra dropout on the DGL GAT's "
             "input features (feat_drop 0.6 on layer 1) is not reproduced",
}


class _StudySteps:
    """The study harness's LightningModule hooks: the adapter's forward and the fair harness's
    per-step records. A mixin rather than a LightningModule so that lightning is imported only
    when a rank builds its module (_lightning_module); the hooks override Lightning's defaults
    because this class comes first in StudyModule's bases."""

    def __init__(self, rank: "StudyRank", adapter, model, lr: float):
        import torch

        super().__init__()
        self.model = model
        self.study_rank, self.adapter, self.lr_effective = rank, adapter, lr
        self.rows: list = []
        self.t: dict = {}
        self.correct = torch.zeros(2, dtype=torch.float64)

    # -- set-up -------------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        self.study_rank.mark("process_group_ready")  # Lightning's strategy has initialised the group here

    def configure_optimizers(self):
        import torch

        return torch.optim.Adam(self.parameters(), lr=self.lr_effective,
                                weight_decay=self.study_rank.cfg.weight_decay)

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        return batch  # the adapter copies the unpacked batch itself (and times the copy)

    def on_train_start(self) -> None:
        rank = self.study_rank
        steps = int(self.trainer.num_training_batches)
        rank.hb.steps_per_epoch = steps
        rank.info["steps_per_epoch"] = steps
        rank.info["steps_per_rank"] = _all_ranks(steps)
        rank.start_probes()
        rank.mark("training_started")
        rank.write_info()

    # -- training -----------------------------------------------------------------------------
    def on_train_epoch_start(self) -> None:
        self.rows = []
        self.t = {"epoch": _now(), "last": _now()}
        self.study_rank.hb.beat("loading", epoch=self.current_epoch, step=0)

    def on_train_batch_start(self, batch, batch_idx) -> None:
        self.t["fetched"] = _now()
        if self.current_epoch == 0 and batch_idx == 0:
            self.study_rank.mark("first_batch")

    def training_step(self, raw, batch_idx):
        import torch

        hb, adapter = self.study_rank.hb, self.adapter
        hb.beat("copy", step=batch_idx)
        batch = adapter.unpack(raw)
        self.t["prepared"] = _now()
        batch = adapter.to_device(batch)
        self.t["copied"] = _now()
        hb.beat("forward")
        logits = adapter.forward(self.model, batch.inputs)
        loss = torch.nn.functional.cross_entropy(logits, batch.labels)
        self.t["forward"] = _now()
        self.t["batch"] = batch
        return loss

    def on_before_backward(self, loss) -> None:
        self.study_rank.hb.beat("backward")

    def on_after_backward(self) -> None:
        self.t["backward"] = _now()
        self.study_rank.hb.beat("optimizer")

    def on_train_batch_end(self, outputs, raw, batch_idx) -> None:
        end = _now()
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        self.rows.append(_step_row(self.current_epoch, batch_idx, self.t, end, loss))
        self.t["last"] = end
        self.study_rank.hb.beat("loading", step=batch_idx + 1)

    def on_train_epoch_end(self) -> None:
        # Validation (if any) ran before this hook; the epoch's time ends at its last batch.
        self.study_rank.hb.beat("epoch-sync")
        self.study_rank.end_epoch(self.current_epoch, self.rows, self.t["last"] - self.t["epoch"])

    # -- validation ---------------------------------------------------------------------------
    def on_validation_start(self) -> None:
        self.t["val"] = _now()
        self.correct.zero_()
        self.study_rank.hb.beat("evaluation")

    def validation_step(self, raw, batch_idx):
        self.study_rank.hb.beat("evaluation")
        batch = self.adapter.to_device(self.adapter.unpack(raw))
        pred = self.adapter.forward(self.model, batch.inputs).argmax(dim=-1)
        self.correct[0] += (pred == batch.labels).sum().item()
        self.correct[1] += batch.labels.numel()

    def on_validation_epoch_end(self) -> None:
        # NCCL reduces CUDA tensors only: the counts go to the module's device first.
        totals = self.trainer.strategy.reduce(self.correct.to(self.device), reduce_op="sum").cpu()
        if self.trainer.sanity_checking:
            return
        acc = float(totals[0] / max(float(totals[1]), 1.0))
        rank = self.study_rank
        rank.val_csv.write([ValidationRow(self.current_epoch, round(acc, 6), round(_now() - self.t["val"], 4))])
        rank.last_acc = acc


def _step_row(epoch: int, step: int, t: dict, end: float, loss) -> StepRow:
    """One step's steps.csv row from its phase edges `t` (the step ends at `end`); takes the
    step's batch out of `t`."""
    b = t.pop("batch")
    return StepRow(
        epoch=epoch, step=step, **b.work(), load_wait_s=t["fetched"] - t["last"],
        prepare_s=t["prepared"] - t["fetched"], copy_s=t["copied"] - t["prepared"],
        forward_s=t["forward"] - t["copied"], backward_s=t["backward"] - t["forward"],
        optimizer_s=end - t["backward"], step_s=end - t["last"], loss=float(loss.detach()),
        seed_id_sum=int(b.seed_ids.sum()))


def _all_ranks(value) -> list:
    """`value` from every rank, in rank order ([value] without a process group)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return [value]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def _lightning_module(rank: "StudyRank", adapter, model, lr: float):
    """The rank's LightningModule (_StudySteps's hooks on Lightning's base class)."""
    import lightning.pytorch as pl

    class StudyModule(_StudySteps, pl.LightningModule):
        pass

    return StudyModule(rank, adapter, model, lr)


class StudyRank(Rank):
    """One rank under the study harness; bookkeeping (marks, files, worker seeding) from Rank."""

    def end_epoch(self, epoch: int, rows: list, epoch_s: float) -> None:
        """The fair harness's steps.csv and epochs.csv rows for one epoch (`rows`: its StepRows)."""
        self.train_loop_s += epoch_s
        seeds = int(sum(r.seed_nodes for r in rows))
        self.write_epoch(epoch, rows, epoch_s)
        self.seeds_per_epoch.append(seeds)
        if self.rank == 0:
            print(f"[gnnscale] study harness epoch {epoch + 1}/{self.cfg.epochs} rank0 {epoch_s:.3f}s "
                  f"steps {len(rows)} seeds {seeds}", flush=True)

    def run(self) -> None:
        """Train under Lightning's DDP strategy and write this rank's files (rank.json etc.)."""
        torch, device, seed = self.set_up_process()
        import lightning

        self.info["harness"] = {"name": "study", "lightning": lightning.__version__, **STUDY_CHOICES}
        # Lightning's DDP strategy sets up the process group itself, inside trainer.fit: here the
        # data comes before the rendezvous.
        self.hb.beat("data-load")
        graph, adapter, model = self.load_data_and_model(device, seed)
        module = _lightning_module(self, adapter, model, self.info["lr_effective"])
        self.open_records()
        self.train_loop_s, self.seeds_per_epoch, self.last_acc = 0.0, [], None
        self.cpu = self.nvml = None
        trainer = _trainer(self.cfg)
        self.mark("model_ready")
        self.write_info()
        self.hb.beat("rendezvous")
        fit_s = self.fit(trainer, module, adapter)
        self.stop_probes()
        self.record_finish(fit_s)

    def fit(self, trainer, module, adapter) -> float:
        """trainer.fit with the loaders built where the study built them; its wall time."""
        import lightning.pytorch as pl

        validate = self.cfg.eval_every != 0
        worker_init = self.worker_init if self.cfg.workers > 0 else None
        if adapter.study_loader_in_hook:
            class HookData(pl.LightningDataModule):
                """Loaders created inside Lightning's hooks, where Lightning may re-create them."""

                def train_dataloader(self):
                    return adapter.study_train_loader(worker_init)

                def val_dataloader(self):
                    return adapter.study_eval_loader() if validate else []

            t0 = time.perf_counter()
            trainer.fit(module, datamodule=HookData())
        else:
            # Created before fit and handed over, as the study did with DGL's loader.
            train_loader = adapter.study_train_loader(worker_init)
            val_loader = adapter.study_eval_loader() if validate else None
            t0 = time.perf_counter()
            trainer.fit(module, train_dataloaders=train_loader, val_dataloaders=val_loader)
        return time.perf_counter() - t0

    def record_finish(self, fit_s: float) -> None:
        """rank.json's closing fields: times, seeds, the stop, and every rank's time and host."""
        self.info["train_time_s"] = fit_s
        self.info["train_loop_time_s"] = self.train_loop_s
        self.info["seed_nodes_per_epoch"] = self.seeds_per_epoch
        # Lightning trains its fixed schedule (max_epochs); recorded like the fair harness's stop.
        self.info["stop"] = {"reason": "schedule", "epochs": len(self.seeds_per_epoch),
                             **self.cfg.stop_rule().to_json()}
        self.hb.beat("epoch-sync")
        import torch.distributed as dist

        mine = {"rank": self.rank, "train_time_s": fit_s, "host": self.info["host"]}
        if dist.is_available() and dist.is_initialized():
            gathered = [None] * self.world
            dist.all_gather_object(gathered, mine)
        else:
            gathered = [mine] if self.world == 1 else None
        self.info["all_ranks"] = gathered
        self.info["finished"] = True
        self.write_info()
        self.hb.beat("done")


def _trainer(cfg):
    """Lightning's Trainer as the study configured it, without checkpoints, logger or progress bar."""
    import lightning.pytorch as pl
    from lightning.pytorch.strategies import DDPStrategy

    validate = cfg.eval_every != 0
    # "end": Lightning validates every n-th epoch; n = epochs validates after the last only.
    every = cfg.epochs if cfg.eval_every == "end" else cfg.eval_every or 1
    return pl.Trainer(
        accelerator="gpu" if cfg.device_type == "cuda" else "cpu", devices=cfg.devices, num_nodes=cfg.nodes,
        strategy=DDPStrategy(process_group_backend=cfg.backend), max_epochs=cfg.epochs,
        limit_train_batches=cfg.max_steps_per_epoch or 1.0, limit_val_batches=1.0 if validate else 0,
        check_val_every_n_epoch=every, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False)


def main(argv=None) -> int:
    return harness_main(argv, rank_class=StudyRank)


if __name__ == "__main__":
    sys.exit(main())
