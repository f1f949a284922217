"""result.json: built in one place, read back through one upgrade.

A result is a head (schema version, identity, status, times, the rerun command) and the
sections of what the run reached: `Skipped` (a point that never ran), `Failed` (launched, did
not end ok: what was measured and why it stopped) or `Ok` (launched and finished: its
summary). The launcher hands this module what it gathered and nothing else assembles the file;
the analysis reads the sections by the same names.

A result written by an older suite is lifted to SCHEMA_VERSION by `upgrade`, one version at a
time (UPGRADES, as asv upgrades its result files), so a reader sees one shape only; a result
claiming a newer schema than this code knows is refused, naming its version.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

from runners.launch.console import say
from runners.records.rank_rows import write_atomic
from runners.records.rundir import RunDir, relative_files

SCHEMA_VERSION = 2
SCHEMA_PATH = Path(__file__).resolve().parent / "result.schema.json"


class ResultVersionError(ValueError):
    """A result whose schema version this code cannot read (newer than it, or none)."""


# -- the head and the sections -------------------------------------------------------------------

@dataclass(frozen=True)
class Head:
    """What every result starts with: its identity, status, times and the rerun command."""

    run_id: str
    run_name: str
    identity: dict
    status: str
    started_at: str
    finished_at: str
    wall_time_s: float
    command: list  # the argv that reruns the configuration

    def to_json(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "run_id": self.run_id, "run_name": self.run_name,
                "identity": self.identity, "status": self.status, "started_at": self.started_at,
                "finished_at": self.finished_at, "wall_time_s": self.wall_time_s,
                "command": {"argv": self.command, "shell": shlex.join(self.command)}}


class _Sections:
    def to_json(self) -> dict:
        """The sections in field order (the order of result.json's keys)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclass(frozen=True, kw_only=True)
class Skipped(_Sections):
    """A grid point this node or lane cannot run: what was asked, and why not (diagnosis)."""

    config: dict
    env: dict
    seeds: dict
    ranks: list = dataclasses.field(default_factory=list)
    epochs: list = dataclasses.field(default_factory=list)
    validation: list = dataclasses.field(default_factory=list)
    summary: None = None
    diagnosis: dict
    probes: dict


@dataclass(frozen=True, kw_only=True)
class Failed(_Sections):
    """A launched run that did not end ok: everything measured until it stopped, the diagnosis
    of why, and what the launcher and the watchdog saw."""

    config: dict
    env: dict
    seeds: dict
    ranks: list
    epochs: list
    validation: list
    accuracy_reference: Optional[dict]
    summary: None = None
    diagnosis: Optional[dict]
    probes: dict
    preflight: dict
    memory: dict
    machine_load: dict
    watchdog: dict
    files: dict
    timeline: dict


@dataclass(frozen=True, kw_only=True)
class Ok(Failed):
    """A launched run that finished: Failed's sections with its summary."""

    summary: dict = dataclasses.field()  # required (a bare annotation would inherit Failed's None)


def build(head: Head, sections: _Sections) -> dict:
    """result.json of one run."""
    return {**head.to_json(), **sections.to_json()}


# -- sections the launcher's records make ---------------------------------------------------------

def skipped(cfg, env: dict, diagnosis: dict) -> Skipped:
    """The sections of a point that never ran (`diagnosis`: runners.watch.diagnosis.skipped)."""
    return Skipped(config=cfg.to_json(), env=env, seeds={"base": cfg.seed, "per_rank": []}, diagnosis=diagnosis,
                   probes={"nvml": {"available": False, "reason": "the run was skipped"},
                           "cpu": {"available": False, "interval_s": cfg.cpu_sample_interval_s, "cost_s": []}})


def probes(cfg, env: dict, first_info: dict, m: dict) -> dict:
    """`probes`: what was sampled and whether the phase times are measurements."""
    return {
        "nvml": (first_info.get("nvml") or {"available": False,
                                             "reason": env["nvml"]["reason"] or "rank never started"}),
        "cpu": {"available": cfg.probes, "interval_s": cfg.cpu_sample_interval_s,
                "cost_s": [r.get("probe_cost_s") for r in m["ranks"]]},
        "breakdown_synchronised": cfg.device_type == "cuda" and cfg.breakdown,
        # CUDA without breakdown: phase times would be CPU launch times, so none are kept.
        "phases_recorded": cfg.device_type != "cuda" or cfg.breakdown,
    }


def memory(out: Path, local_ranks: list, cfg, pre: dict, cgroup_stats, leftover) -> dict:
    """`memory`: the modelled peak next to the measured one, and the cap."""
    from runners.memory.peak import measured_peak

    peak = measured_peak(out, local_ranks)
    cg_peak = (cgroup_stats or {}).get("peak_bytes")
    return {"limit_bytes": cfg.memory_limit_bytes or None,
            "model_bytes": pre.get("memory_model_bytes"),
            "peak_bytes": peak.get("pss_bytes") or peak.get("uss_bytes"),
            "peak_source": ("rank*/cpu.csv PSS (ranks + loader workers, worst sample)" if peak.get("pss_bytes")
                            else "rank*/cpu.csv USS (ranks + loader workers, worst sample)" if peak.get("uss_bytes")
                            else None),
            "measured": peak, "cgroup_peak_bytes": cg_peak, "cgroup": cgroup_stats,
            "cgroup_leftover_pids": leftover}


def network(env: dict, m: dict) -> dict:
    """A multi-node run's `env.network` with every rank's host: the hosts this node saw, and
    the whole job's once the ranks have exchanged them at the end (harness: `all_ranks`)."""
    if "network" not in env:
        return {}
    all_ranks = next((i["all_ranks"] for i in m["infos"].values() if i.get("all_ranks")), None)
    seen = all_ranks or [{"rank": r["rank"], "host": r.get("host")} for r in m["ranks"]]
    hosts: dict = {}
    for r in sorted(seen, key=lambda r: r["rank"]):
        hosts.setdefault(r.get("host"), []).append(r["rank"])
    return {"network": {**env["network"], "ranks_by_host": hosts, "all_ranks_known": all_ranks is not None}}


def watchdog(outcome) -> dict:
    """`watchdog`: how the supervisor ended the run (a runners.watch.diagnosis.Outcome)."""
    return {"returncode": outcome.returncode, "killed_by_watchdog": outcome.killed_by_watchdog,
            "orphans_killed": outcome.orphans_killed, "survivors": outcome.survivors,
            "detected_after_s": outcome.detected_after_s, "note": outcome.note}


def launched(cfg, m: dict, outcome, env: dict, *, reference: dict, summary: Optional[dict], pre: dict,
             memory_section: dict, busy_before: float, timeline: dict, rank_starter: str) -> Failed:
    """The sections of a launched run from what its ranks wrote (`m`, runners.records.rank_rows's
    collect_measurements) and what the launcher saw (`busy_before`: CPU % just before the
    launch): Ok with its summary, else Failed."""
    first_info = next(iter(m["infos"].values()), {})
    sections = dict(
        config={**cfg.to_json(), "adapter_choices": first_info.get("adapter_choices"),
                "harness_settings": first_info.get("harness") or {"name": cfg.harness},
                "lr_effective": first_info.get("lr_effective")},
        env={**env, "rank_env_vars": first_info.get("env_vars"), "rank_starter": rank_starter, **network(env, m)},
        seeds={"base": cfg.seed, "per_rank": m["seeds"],
               "rule": "rank: (seed*1000003 + rank*10007) mod 2^31; worker w: that + w + 1",
               "split": first_info.get("seed_split")},
        ranks=m["ranks"], epochs=m["epochs"], validation=m["validation"], accuracy_reference=reference,
        diagnosis=outcome.diagnosis, probes=probes(cfg, env, first_info, m), preflight=pre, memory=memory_section,
        machine_load={"cpu_busy_percent_before": busy_before, "loadavg_after": list(os.getloadavg()),
                      "cpu_cores": env["cpu_cores"]},
        watchdog=watchdog(outcome),
        files=relative_files([r["rank"] for r in m["ranks"]]), timeline=timeline)
    return Ok(summary=summary, **sections) if outcome.status == "ok" else Failed(**sections)


# -- writing and checking ------------------------------------------------------------------------

@lru_cache(maxsize=1)
def _validator():
    import jsonschema

    return jsonschema.Draft202012Validator(schema())


def schema() -> dict:
    """result.schema.json with what is declared elsewhere, once: the registered frameworks (their
    names and the env keys they require: registry.required_env), and every cause a diagnosis may
    name (CAUSES)."""
    from runners.adapters import registry
    from runners.watch.diagnosis.causes import CAUSES

    doc = json.loads(SCHEMA_PATH.read_text())
    env = doc["properties"]["env"]
    env["required"] = [*env["required"][:2], *registry.required_env(), *env["required"][2:]]
    doc["properties"]["config"]["properties"]["framework"]["enum"] = list(registry.FRAMEWORK_NAMES)
    doc["properties"]["diagnosis"]["properties"]["cause"]["enum"] = list(CAUSES)
    return doc


def schema_problems(data, message_chars: int = 300) -> list:
    """Where a parsed result breaks result.schema.json, one line each (empty: valid)."""
    errors = sorted(_validator().iter_errors(data), key=lambda e: list(e.absolute_path))
    return [f"{'.'.join(str(x) for x in e.absolute_path) or '(top level)'}: {e.message[:message_chars]}"
            for e in errors]


def write(out: Path, result: dict) -> list:
    """Validate the result against its schema, then write result.json whatever the verdict.

    A violation is a bug of the suite, not of the run: the measurements are kept, the status
    is left as it was, and the errors go into `schema_errors` so that analysis lists the
    result as unusable with the reason instead of reading half-valid fields. Returns them."""
    errors = schema_problems(json.loads(json.dumps(result, default=str)))  # as it will read back
    if errors:
        result["schema_errors"] = errors
        for e in errors:
            say(f"error: result.json breaks its schema: {e}", file=sys.stderr)
    write_atomic(RunDir(out).result, result)
    return errors


# -- reading: older schemas upgraded ---------------------------------------------------------------

def _from_1(data: dict) -> None:
    """Schema 1 -> 2. Settings added after a result was written take what every run did before
    they existed (the fair harness, the pair lane, the framework's first loader); the precision
    of the steady state is named as the runs table names it; the memory model of results from
    before the memory section moves there; a rerun command that said `python` names its lane's
    interpreter."""
    from runners.adapters import registry
    from runners.records.envinfo import lane_interpreter

    cfg = data.get("config") or {}
    cfg["harness"] = cfg.get("harness") or "fair"
    cfg["lane"] = cfg.get("lane") or ((data.get("env") or {}).get("lane") or {}).get("lane") or "pair"
    if not cfg.get("loader") and cfg.get("framework") in registry.FRAMEWORKS:
        cfg["loader"] = registry.framework(cfg["framework"]).loaders[0]
    cfg["strategy"] = cfg.get("strategy") or "replicated"  # every run replicated the graph before --strategy
    precision = (data.get("summary") or {}).get("precision")
    if precision:
        renamed = {"rel_halfwidth": "precision_reached", "mean_s": "steady_epoch_mean_s"}
        data["summary"]["precision"] = {renamed.get(k, k): v for k, v in precision.items()}
    if "preflight" in data and "memory" not in data:
        data["memory"] = {"limit_bytes": cfg.get("memory_limit_bytes") or None,
                          "model_bytes": (data["preflight"] or {}).get("memory_model_bytes"), "peak_bytes": None}
    argv = (data.get("command") or {}).get("argv")
    if argv and argv[0] == "python" and lane_interpreter(cfg["lane"]):
        argv = [lane_interpreter(cfg["lane"])] + argv[1:]
        data["command"] = {"argv": argv, "shell": shlex.join(argv)}


# version -> the function that lifts a result of that version to the next, in place
UPGRADES = {1: _from_1}


def upgrade(data: dict) -> dict:
    """`data` (a parsed result.json) lifted to SCHEMA_VERSION, in place; ResultVersionError for
    a result newer than this code or without a version it knows."""
    version = data.get("schema_version") if isinstance(data, dict) else None
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ResultVersionError(f"schema_version {version!r}: not a result version; this code reads "
                                 f"1..{SCHEMA_VERSION}")
    if version > SCHEMA_VERSION:
        raise ResultVersionError(f"schema_version {version} is newer than this code's {SCHEMA_VERSION}: "
                                 "written by a later gnnscale; read it with that version")
    for v in range(version, SCHEMA_VERSION):
        UPGRADES[v](data)
        data["schema_version"] = v + 1
    return data


def read(path: Path) -> dict:
    """result.json at `path`, upgraded to SCHEMA_VERSION. Raises OSError, ValueError (not
    JSON) or ResultVersionError."""
    return upgrade(json.loads(Path(path).read_text()))
