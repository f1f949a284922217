"""How the graph reaches the ranks, as the launcher sees it (--strategy).

`replicated`: every rank loads the whole graph itself; the launcher starts nothing else.
`partitioned`: DistDGL; this host's partition is served by a graph server the launcher starts
before the trainers and stops after them (runners.partitioned.server). Each strategy answers the same
calls, in the order runners.run.main makes them:

    prepare(cfg, env, stage, pre, meta)  before the launch; False: refused (said why)
    trainer_env                          variables the ranks get beside the launcher's own
    watch(run)                           once the ranks are started
    stop(cfg, env, pre, run)             once the tree has exited (or was stopped)
    explain(stage, run)                  after runners.watch.nodes has explained the outcome
"""

from __future__ import annotations

from pathlib import Path

from runners.config import ConfigError, RunConfig
from runners.launch.ranks import vanished


class Replicated:
    """Every rank holds the whole graph: nothing to start, watch or explain beside the ranks."""

    trainer_env: dict = {}

    def memory_model(self, cfg: RunConfig, graph_meta: dict) -> dict:
        """runners.memory.model's peak of the whole process tree."""
        from runners.memory.model import model_peak

        return model_peak(cfg, graph_meta)

    def prepare(self, cfg: RunConfig, env: dict, stage: Path, pre: dict, graph_meta: dict) -> bool:
        return True

    def watch(self, run) -> None:
        pass

    def stop(self, cfg: RunConfig, env: dict, pre: dict, run) -> None:
        pass

    def explain(self, stage: Path, run) -> None:
        pass


class Partitioned(Replicated):
    """DistDGL: this host's graph server (runners.partitioned.server.Server), started by prepare."""

    def __init__(self) -> None:
        self.server = None
        self.trainer_env = {}

    def memory_model(self, cfg: RunConfig, graph_meta: dict) -> dict:
        """This host's partition, graph server and trainers (runners.partitioned.server.model_peak)."""
        from runners.partitioned import server as partitioned

        return partitioned.model_peak(cfg, graph_meta)

    def prepare(self, cfg: RunConfig, env: dict, stage: Path, pre: dict, graph_meta: dict) -> bool:
        """Partitions made or verified, this host's graph server started and the trainers' DGL
        variables kept for the launch; env["partitioned"] records it, and `pre` the memory
        model of the partitions' own files. False (after saying why) when the partitions or
        hosts are unusable."""
        from runners import datasets
        from runners.launch.console import error
        from runners.partitioned import server as partitioned, split as partitions

        try:
            plan = partitioned.plan(cfg, env, stage)
        except (ConfigError, partitions.PartitionError, datasets.DatasetError) as exc:
            error(f"--strategy partitioned: {exc}")
            return False
        env["partitioned"] = plan.describe(cfg)
        self.trainer_env = plan.trainer_env(cfg)
        self.server = partitioned.start_server(cfg, plan, stage)
        pre["memory_model"] = self.memory_model(cfg, graph_meta)
        pre["memory_model_bytes"] = pre["memory_model"]["total_bytes"]
        return True

    def watch(self, run) -> None:
        if run.proc is not None:
            self.server.watch(run.proc.pid)

    def stop(self, cfg: RunConfig, env: dict, pre: dict, run) -> None:
        """The server's state while it runs (a hang, or a crash while it was stopped), then the
        server stopped and recorded in env["partitioned"]."""
        from runners.watch.diagnosis.overrides import preview

        if not vanished(run.outcome):
            # how the run ended as the overrides before the server's will say (the loop runs later, in conclude)
            seen = preview(run.outcome, before="run_dir_vanished") if run.outcome is not None else None
            self.server.gather(seen, run.launch_t)
        env["partitioned"]["server"] = self.server.stop(cfg.kill_grace_s, pre.get("memory_model"))

    def explain(self, stage: Path, run) -> None:
        """This host's graph server, for diagnosis.OVERRIDES' `server` and `remote_server`: its own
        server, dead or stalled, outranks the peers its trainers lost on the way (they were its
        victims), hence after runners.watch.nodes; then another host's server, from that node's result."""
        from runners.partitioned.server import ServerFacts

        if run.outcome is not None:
            run.outcome.findings.server = ServerFacts(self.server, stage, run.started_at)


def of(cfg: RunConfig) -> Replicated:
    """The run's strategy object, fresh for each run."""
    return Partitioned() if cfg.strategy == "partitioned" else Replicated()
