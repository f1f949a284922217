"""The bookkeeping around a training loop, kept out of its body: phase times, progress marks,
step-breakdown synchronisation and fault hooks.

The fair harness's epoch (runners.rank.harness.Rank.train_epoch) reads like the frameworks' own
examples: one line or two per phase, each inside `with recorder.phase(NAME):`. Entering a
phase writes the heartbeat the supervisor watches and gives a deliberate fault its chance;
leaving it synchronises the device in breakdown mode and takes the phase's end time. Phases
are contiguous (one phase ends where the next begins), so a step's phase times add up to its
step time, and the hooks at a phase's entry count as that phase's time.
"""

from __future__ import annotations

import time
from typing import Callable

from runners.records import rank_rows
from runners.records.rank_rows import StepRow

# Phase -> (heartbeat phase written on entry, fault point offered on entry, device sync on
# exit in breakdown mode). The step's first phase has its entry hooks in StepRecorder.steps
# (they carry the step number). The loader and the adapter's unpacking queue no device work,
# so only the phases from the copy on need a synchronisation to be their own time.
PHASE_HOOKS = {
    "load_wait": (None, None, False),
    "prepare": (None, None, False),
    "copy": ("copy", None, True),
    "forward": ("forward", "forward", True),
    "backward": ("backward", "backward", True),
    "optimizer": ("optimizer", None, True),
}
assert tuple(f"{p}_s" for p in PHASE_HOOKS) == rank_rows.PHASE_COLUMNS  # steps.csv's phase columns, in order


class StepRecorder:
    """Times one rank's steps phase by phase and builds their StepRows.

    hb: the rank's Heartbeat; faults: its Faults (deliberate faults, usually inactive);
    sync: waits for the device's queue to drain; breakdown: synchronise at every phase edge;
    phases_valid: the phase times are measurements (False: recorded as empty);
    on_first_batch: called once the very first batch is unpacked (a start-up mark).
    """

    def __init__(self, hb, faults, sync: Callable, breakdown: bool, phases_valid: bool,
                 on_first_batch: Callable = lambda: None, clock: Callable = time.perf_counter):
        self.hb, self.faults, self.sync, self.clock = hb, faults, sync, clock
        self.breakdown, self.phases_valid = breakdown, phases_valid
        self.on_first_batch = on_first_batch
        self.epoch = self.step = 0
        self._name = None
        self._grad_of = None
        self._edges: list = []
        self._t_epoch = 0.0

    # -- epochs -------------------------------------------------------------------------------
    def start_epoch(self, epoch: int) -> None:
        """The epoch's progress mark, then its start time with the device queue empty."""
        self.epoch = epoch
        self.hb.beat("loading", epoch=epoch, step=0)
        self.sync()
        self._t_epoch = self.clock()

    def end_epoch(self) -> float:
        """The epoch's training time, up to the moment its last step's work is done."""
        self.sync()
        return self.clock() - self._t_epoch

    # -- steps --------------------------------------------------------------------------------
    def steps(self, count: int):
        """Step numbers 0..count-1; each step starts (fault point, progress mark, start time)
        before its number is handed out."""
        for step in range(count):
            self.step = step
            self.faults.at("before-load", self.epoch, step)
            self.hb.beat("loading", step=step)
            self._edges = [self.clock()]
            yield step

    def phase(self, name: str, grad_of=None) -> "StepRecorder":
        """The context of one phase of the step (a PHASE_HOOKS name). `grad_of`: the tensor
        whose gradient the phase computes (the backward phase's loss), where a freezing
        fault hooks in."""
        self._name, self._grad_of = name, grad_of
        return self

    def __enter__(self) -> "StepRecorder":
        beat, fault, _ = PHASE_HOOKS[self._name]
        if beat is not None:
            self.hb.beat(beat)
        if fault is not None:
            self.faults.at(fault, self.epoch, self.step, self._grad_of)
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None:
            return False  # no synchronisation on a failing device: the error goes up as it is
        if self.breakdown and PHASE_HOOKS[self._name][2]:
            self.sync()
        self._edges.append(self.clock())
        if self._name == "prepare" and self.epoch == 0 and self.step == 0:
            self.on_first_batch()
        return False

    def step_row(self, batch, loss) -> StepRow:
        """The finished step's steps.csv row (the loss stays on the device until written)."""
        edges = self._edges
        phases = ([b - a for a, b in zip(edges, edges[1:])] if self.phases_valid
                  else [None] * len(rank_rows.PHASE_COLUMNS))
        return StepRow(epoch=self.epoch, step=self.step, **batch.work(),
                       **dict(zip(rank_rows.PHASE_COLUMNS, phases)), step_s=edges[-1] - edges[0],
                       loss=loss.detach(), seed_id_sum=int(batch.seed_ids.sum()))
