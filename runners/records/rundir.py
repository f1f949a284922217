"""Every path of one run directory, handed out by one object (the layout: docs/CONTRACTS.md).

The launcher, the ranks, the watchdog, the evidence it gathers, the history of a point and the
analysis all find a run's files through RunDir, so no module spells a file name of its own.
Standard library only: every side (a rank, Snakemake, the analysis) imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

RESULT = "result.json"
CONFIG = "config.json"


@dataclass(frozen=True)
class RunDir:
    """One run directory (a point's current run, its staging directory or node{k}/ of a
    multi-node run) and the paths of what a run writes into it."""

    path: Path

    def __post_init__(self):
        object.__setattr__(self, "path", Path(self.path))

    # -- the launcher's files
    @property
    def result(self) -> Path:
        return self.path / RESULT

    @property
    def config(self) -> Path:
        return self.path / CONFIG

    @property
    def command(self) -> Path:
        return self.path / "command.sh"

    @property
    def processes(self) -> Path:
        """processes.json: every process of the run, as the watchdog's ledger saw it."""
        return self.path / "processes.json"

    @property
    def launcher_log(self) -> Path:
        return self.path / "logs" / "launcher.log"

    def server_log(self, node: int) -> Path:
        """logs/server{k}.log: the partitioned strategy's graph server of node k (runners.partitioned.server)."""
        return self.launcher_log.parent / f"server{node}.log"

    @property
    def ip_config(self) -> Path:
        """ip_config.txt: the hosts of a partitioned run, as DGL reads them (runners.partitioned.server)."""
        return self.path / "ip_config.txt"

    @property
    def pg_store(self) -> Path:
        """The file store the spawned ranks of one node meet through (runners.launch.spawn)."""
        return self.path / ".pg-store"

    # -- the watchdog's view
    @property
    def heartbeats(self) -> Path:
        return self.path / "heartbeats"

    def heartbeat(self, rank: int) -> Path:
        """heartbeats/rank{R}.hb: the rank's progress (binary, overwritten in place)."""
        return self.heartbeats / f"rank{rank}.hb"

    def heartbeat_files(self) -> list:
        """Every rank's heartbeat file here (a file's stem is its rank's role, rank{R})."""
        return sorted(self.heartbeats.glob("rank*.hb"))

    @property
    def timeline(self) -> Path:
        """heartbeats/timeline.jsonl: progress as the watchdog saw it."""
        return self.heartbeats / "timeline.jsonl"

    @property
    def stacks(self) -> Path:
        """stacks/: py-spy and faulthandler dumps after a hang."""
        return self.path / "stacks"

    @property
    def workers(self) -> Path:
        """workers/: one {pid}.json per loader worker."""
        return self.path / "workers"

    def worker(self, pid: int) -> Path:
        return self.workers / f"{pid}.json"

    def worker_files(self) -> list:
        """Every loader worker's record here, by name."""
        return sorted(self.workers.glob("*.json")) if self.workers.exists() else []

    def stack_dump(self, role: str, pid: int) -> Path:
        """stacks/{role}-pid{P}.txt: the py-spy dump of one process (role: rank1, rank1-worker0)."""
        return self.stacks / f"{role}-pid{pid}.txt"

    def faulthandler_dump(self, rank: int, pid: int, worker: int | None = None) -> Path:
        """stacks/faulthandler-rank{R}[-worker{W}]-pid{P}.txt: where a process dumps its own
        stacks on SIGUSR1."""
        return self.stack_dump(f"faulthandler-rank{rank}" + (f"-worker{worker}" if worker is not None else ""), pid)

    def make(self) -> None:
        """The directories the launcher and the watchdog write into."""
        for d in (self.heartbeats, self.launcher_log.parent, self.stacks):
            d.mkdir(parents=True, exist_ok=True)

    # -- the ranks' records
    def rank(self, rank: int) -> Path:
        """rank{R}/."""
        return self.path / f"rank{rank}"

    def rank_file(self, rank: int, name: str) -> Path:
        """rank{R}/NAME.csv (NAME one of record.RANK_TABLES), or rank{R}/NAME when NAME has a suffix
        (rank.json, error.json)."""
        return self.rank(rank) / (name if "." in name else f"{name}.csv")

    def rank_info(self, rank: int) -> Path:
        """rank{R}/rank.json: the rank's start-up marks, seeds, environment and final figures."""
        return self.rank_file(rank, "rank.json")

    def rank_error(self, rank: int) -> Path:
        """rank{R}/error.json: what the rank raised, written before it exits."""
        return self.rank_file(rank, "error.json")

    def ranks(self) -> list:
        """(rank, directory) of every rank{R}/ here, by rank."""
        found = [(int(d.name[4:]), d) for d in self.path.glob("rank*") if d.is_dir() and d.name[4:].isdigit()]
        return sorted(found)

    def node(self, k: int) -> "RunDir":
        """node{k}/: what node k > 0 of a multi-node run writes beside node 0's result."""
        return RunDir(self.path / f"node{k}")

    def is_run(self) -> bool:
        """Whether a run started here (it wrote its command, config or heartbeats)."""
        return self.command.exists() or self.config.exists() or self.heartbeats.is_dir()


_HERE = RunDir(Path())
# What one run writes into its directory besides rank{R}/ (runners.records.history files these away as
# one run): the top-level entries of its paths, and the temporary files of the atomic writes.
ENTRIES = tuple(dict.fromkeys(
    p.parts[0] for p in (_HERE.result, _HERE.result.with_name(RESULT + ".tmp"), _HERE.config,
                         _HERE.config.with_name(CONFIG + ".tmp"), _HERE.command, _HERE.processes, _HERE.heartbeats,
                         _HERE.launcher_log, _HERE.stacks, _HERE.workers)))


def is_run_entry(name: str) -> bool:
    """Whether an entry of a point's directory named `name` belongs to its current run."""
    return name in ENTRIES or (name.startswith("rank") and name[4:].isdigit())


def relative_files(local_ranks: list) -> dict:
    """result.json's `files`: where the run's records are, relative to its directory."""
    return {"config": str(_HERE.config), "command": str(_HERE.command), "launcher_log": str(_HERE.launcher_log),
            "timeline": str(_HERE.timeline),
            "ranks": {r: {k: str(_HERE.rank_file(r, k)) for k in ("steps", "epochs", "cpu", "validation")}
                      for r in local_ranks}}
