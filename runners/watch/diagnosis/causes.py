"""The closed vocabulary of a diagnosis: every cause a result can name (`Cause`, in `CAUSES`),
the diagnosis record a result carries (`Diagnosis`) and how a supervised run ended (`Outcome`).

A cause's key is what result.json's `diagnosis.cause` holds (the schema enumerates the keys);
its label is how a summary line names it, its text the full explanation, its remedy what to do,
its status what a run that ended by itself with this cause is recorded as."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Cause:
    """One known cause: `text` is `label` followed by `detail`."""

    key: str
    label: str
    detail: str
    remedy: str
    status: str = "crashed"

    @property
    def text(self) -> str:
        return self.label + self.detail


def _causes(*causes: Cause) -> dict:
    return {c.key: c for c in causes}


# Causes the rulebook and the overrides name; the diagnosis lists the evidence for one of them.
RUN_CAUSES = _causes(
    Cause("uneven_batches", "unequal numbers of batches per rank",
          ": a rank that ran out of batches left the others waiting in their next collective (DDP's gradient "
          "all-reduce, or its bucket set-up in forward)",
          "give every rank the same number of batches (pad the seed split as DGL's use_ddp=True "
          "does, or drop the remainder); never use a naive split"),
    Cause("stalled_worker",
          "a loader worker stopped making progress, so its rank waits for the next mini-batch while "
          "the other ranks wait for it in the all-reduce", "",
          "look at the worker's stack; common roots are fork after CUDA/OpenMP initialisation, a "
          "full /dev/shm, or too many open file descriptors; try fewer workers, "
          "multiprocessing start method 'spawn', a larger /dev/shm or a higher `ulimit -n`", "hang"),
    Cause("stalled_pipeline",
          "a stage of the rank's loader pipeline stopped making progress (GraphBolt runs sampling and "
          "feature fetching up to copy_to in a prefetch thread of the rank), so the rank waits for "
          "its next mini-batch while the other ranks wait for it in the all-reduce", "",
          "look at the prefetch thread's stack (stacks/rankN-*.txt): the stage it is in never returned "
          "(a custom transform, a feature store or sampler call that blocks); with --workers N the "
          "sampling stages run in worker processes instead, whose stacks are dumped too", "hang"),
    Cause("dead_worker", "a loader worker died (killed by a signal, often the out-of-memory killer)", "",
          "check memory and /dev/shm size (`df -h /dev/shm`), reduce workers or batch size"),
    Cause("stalled_rank",
          "one rank stopped making progress (frozen, stuck in a call, or behind the others) while "
          "the others wait for it in a collective", "",
          "look at that rank's stack and process state: a stopped process (SIGSTOP, a debugger), "
          "a straggler, an infinite loop, or a blocking call in the training step", "hang"),
    Cause("stalled_server", "a graph server of the partitioned strategy stopped making progress",
          " (stopped by a signal or a debugger, or stuck), so the trainers that sample and fetch features from "
          "it waited for its answers over RPC until the watchdog's stall limit",
          "look at the server's process state and stack (logs/server<K>.log, stacks/graph-server*): a "
          "SIGSTOP or a debugger attached to it, a host that swaps, a request it never finished; then rerun",
          "hang"),
    Cause("lost_server", "a graph server of the partitioned strategy died mid-run", "",
          "see the server's log (logs/server<K>.log) and the host's kernel log (OOM killer?)"),
    Cause("dead_rank", "a rank failed and the remaining ranks were left waiting in a collective", "",
          "fix the failing rank's error (see its excerpt); the rank starter then stops the others"),
    Cause("lost_node",
          "another node of a multi-node run was lost (its processes died, or the host or network went away)",
          ": this node's ranks saw their connections to it reset",
          "look at the lost node: its own result (node{K}/result.json), its kernel log (OOM killer), "
          "the scheduler's record of it; then rerun the job"),
    Cause("lost_contact",
          "another node of a multi-node run stopped answering over the network (a link down, a cable "
          "or switch port, a host that froze) while every process stayed alive", ": this node's ranks waited for it",
          "check the named host's network link and the switch between the hosts (`ip link`, the "
          "interface's carrier), and that the host itself still runs; then rerun the job", "hang"),
    Cause("collective_mismatch", "every rank is blocked in a collective",
          ": the ranks issued collectives that do not match (different counts or order)",
          "make every rank run the same sequence of collectives (same number of steps, evaluation "
          "on every rank rather than on rank 0 followed by a barrier)", "hang"),
    Cause("startup_hang",
          "the run never reached its first training step (rendezvous, process-group set-up, "
          "dataset loading or loader start-up)", "",
          "check the rendezvous address/port and firewall, that every node started, and the "
          "dataset path; raise --startup-timeout for very large datasets", "hang"),
    Cause("shm_exhausted", "shared memory (/dev/shm) ran out",
          ": loader workers hand every batch to their rank through /dev/shm, and a worker writing into a full one "
          "dies of SIGBUS or fails with 'No space left on device'",
          "enlarge /dev/shm (`docker run --shm-size=2g`, or remount it larger), or need less of it: "
          "fewer loader workers per rank (--workers 0 passes no batch through /dev/shm), smaller "
          "batches or fan-outs; `df -h /dev/shm` shows its size and what is free"),
    Cause("disk_full", "the filesystem of the run directory ran out of space (or quota)",
          ": a rank could not write its records",
          "free space there or point --out at a filesystem with room (`df -h` on the run directory)"),
    Cause("interrupted",
          "the launcher was stopped from outside by a signal before the run finished (Ctrl-C, kill, "
          "Snakemake cancelling its jobs, a scheduler's time limit or preemption)", "",
          "rerun the command (a Snakemake rerun redoes the run); on a cluster, raise the job's time "
          "limit if it was reached", "interrupted"),
    Cause("fd_limit", "too many open files",
          ": loader workers pass every tensor of a batch to their rank as a file descriptor (torch.multiprocessing's "
          "'file_descriptor' sharing strategy), and a rank or worker reached its open-files limit (`ulimit -n`), "
          "so a batch was lost (its rank waits for it) or its transfer failed",
          "raise the open-files limit in the shell that starts the run (`ulimit -n`; the pre-flight "
          "estimates what a rank needs), or have the workers pass batches through files in /dev/shm "
          "instead: torch.multiprocessing.set_sharing_strategy('file_system') in the rank and worker "
          "processes; or use fewer loader workers (--workers)"),
    Cause("collective_timeout", "a collective waited longer than PyTorch's own process-group timeout",
          ": a hang that PyTorch turned into a crash",
          "find why the culprit rank stopped (its last phase, its error); the harness sets the timeout "
          "above the watchdog's limits, so this means a timeout was lowered or a limit raised", "hang"),
    Cause("crash", "a rank raised an exception", "", "see the error excerpt and the rank's log"),
    Cause("killed", "a rank was killed by a signal (SIGKILL is what the out-of-memory killer sends)", "",
          "check memory use per rank (cpu.csv) and the kernel log (dmesg) for the OOM killer", "killed"),
    Cause("oom", "memory exhaustion",
          ": the kernel's out-of-memory killer killed a process of the run (the run's memory cap or the machine's "
          "memory was reached), and the ranks that depended on it were left waiting or failed",
          "compare the memory model in the pre-flight with the cap; use fewer loader workers per rank "
          "(each holds prefetched batches), smaller batches or fan-outs, fewer ranks per machine, or "
          "more memory", "killed"),
    Cause("memory_pressure", "memory exhaustion without a kill",
          ": the run's memory cgroup stayed at its cap, so every allocation and every read of the memory-mapped "
          "dataset waited for the kernel to reclaim pages (the file-backed dataset is evicted and read back from "
          "disk again and again)",
          "compare the memory model in the pre-flight with the cap; use fewer loader workers per rank, "
          "smaller batches or fan-outs, fewer ranks per machine, or more memory", "hang"),
    Cause("diverged", "the training loss became NaN or infinite",
          ": from that step on the model learns nothing and the run's times describe arithmetic on NaN, not training",
          "check the dataset's features for NaN or infinite values (python -m runners.datasets verify), "
          "then lower the learning rate (--lr) or normalise the features", "diverged"),
    Cause("timeout", "the run exceeded its overall time limit while still making progress", "",
          "raise --time-limit or reduce epochs/dataset size", "timeout"),
    Cause("run_dir_vanished",
          "the run directory was moved or deleted from outside the run while it was going (a `mv` or "
          "`rm -r` of the results, a cleaner of /tmp such as systemd-tmpfiles, a sync tool)",
          ": the watchdog lost its view of the ranks, and what they wrote there is not in this result",
          "find what moved or deleted it and keep it off the results directory while runs are going, "
          "then rerun the point (its command.sh)", "failed"),
    # runners.run's own diagnosis when torchrun could not be started at all (no cause_text of its own).
    Cause("launch", "the ranks could not be started", "", "see the error in the evidence", "error"),
)

# Why a grid point can be skipped (it never ran).
SKIP_CAUSES = _causes(
    Cause("not_enough_devices", "the grid point asks for more GPUs than this node has", "",
          "run it on a node with enough GPUs, or drop it from the grid", "skipped"),
    Cause("over_capacity", "the pre-flight found the run impossible on this machine (memory or processes per core)",
          "", "run the point on a larger machine, or drop it from the grid (--force-launch runs it anyway)", "skipped"),
    Cause("framework_unavailable",
          "the framework cannot be imported in this lane (not installed, or its release does not load on this torch)",
          "", "run the point in a lane that carries the framework (the pair lane carries both), or drop it from "
          "this lane's grid", "skipped"),
)

CAUSES = {**RUN_CAUSES, **SKIP_CAUSES}  # every key result.json's diagnosis.cause may hold

# Other wordings of a cause (its key, remedy and status as in CAUSES): stalled_rank in a run of one
# process, where no other rank waits for it in a collective.
SOLE_RANK = Cause("stalled_rank", "the run's only rank stopped making progress (frozen, or stuck in a call or a loop)",
                  "", RUN_CAUSES["stalled_rank"].remedy, RUN_CAUSES["stalled_rank"].status)
WORDINGS = (SOLE_RANK,)


def label_of(diagnosis: dict) -> str | None:
    """How a summary line names the cause of `diagnosis` (a result's, as written): the label of the
    Cause record whose key and text it holds (CAUSES, or one of WORDINGS). None when no record
    matches: a result written before its cause's wording changed, or one without a cause."""
    key, text = diagnosis.get("cause"), diagnosis.get("cause_text")
    for cause in (*WORDINGS, CAUSES.get(key)):
        if cause is not None and cause.key == key and text in (None, cause.text):
            return cause.label
    return None


PREVIOUS = ("status", "cause")  # what a diagnosis that supersedes another keeps of it, by default


class Diagnosis(dict):
    """A run's diagnosis, as result.json writes it: summary, cause (a key of CAUSES), cause_text,
    remedy, evidence, ranks, culprit_rank, and what its cause adds. A dict, so that the result
    writes it as it is and the launcher may add what it learns later (detected_after_s, hosts)."""

    @classmethod
    def of(cls, key: str, summary: str, evidence: list, ranks: list, culprit_rank=None, *,
           text: str | None = None, remedy: str | None = None, **fields) -> Diagnosis:
        """A first diagnosis of cause `key` (its text and remedy from CAUSES unless given)."""
        cause = CAUSES[key]
        return cls(summary=summary, cause=key, cause_text=text or cause.text, remedy=remedy or cause.remedy,
                   evidence=evidence, ranks=ranks, culprit_rank=culprit_rank, **fields)

    @classmethod
    def superseding(cls, before: dict | None, key: str, summary: str, evidence: list, *,
                    status: str | None = None, previous: tuple = PREVIOUS, **fields) -> Diagnosis:
        """`before` overruled by cause `key`: its other fields kept, `evidence` put before its own, and
        what it said kept as previous_<x> for each x of `previous` ('status': `status`, the run's
        status before; 'cause'; 'summary'). `fields` replace fields (cause_text and remedy default
        to the cause's; culprit_rank stays unless given)."""
        before = dict(before or {})
        cause = CAUSES.get(key)
        d = cls(before)
        d.note_previous(status, before, previous)
        d.update(summary=summary, cause=key)
        d.update({"cause_text": cause.text if cause else None, "remedy": cause.remedy if cause else None, **fields})
        d["evidence"] = list(evidence) + list(before.get("evidence") or [])
        d.setdefault("ranks", [])
        return d

    def note_previous(self, status: str | None, before: dict | None, previous: tuple = PREVIOUS) -> None:
        """Keep what `before` (the diagnosis of a run that ended as `status`) said, as previous_<x>."""
        said = {"status": status, "cause": (before or {}).get("cause"), "summary": (before or {}).get("summary")}
        for x in previous:
            self[f"previous_{x}"] = said[x]


@dataclass
class Findings:
    """What the overrides read (runners.watch.diagnosis.overrides.OVERRIDES), gathered where it
    is seen; None where nothing was gathered. The run's Outcome carries it to the one loop that
    applies the overrides (overrides.apply_overrides)."""

    stop: tuple | None = None  # (exit evidence, detection's time.time()) of a declared hang or time limit
    oom: tuple | None = None  # (OomEvidence or None, MemoryWatch) of a run that did not end ok or interrupted
    vanished: dict | None = None  # diagnose_vanished's run_dir, missing, after_s, whereabouts, ranks; ended
    nodes: Any = None  # runners.watch.nodes.NodeFacts of a run across nodes
    server: Any = None  # runners.partitioned.server.ServerFacts of a partitioned run
    extra: dict = field(default_factory=dict)  # what an override added by register() reads, by its name


@dataclass
class Outcome:
    """How a supervised run ended: its status, diagnosis and what the supervisor had to do."""

    status: str
    diagnosis: dict | None
    detected_after_s: float | None = None
    returncode: int | None = None
    killed_by_watchdog: bool = False
    orphans_killed: list = field(default_factory=list)
    survivors: list = field(default_factory=list)
    note: str | None = None
    findings: Findings = field(default_factory=Findings)  # what the overrides read, until they ran
