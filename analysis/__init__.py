"""Analysis of gnnscale result directories: aggregate -> tables, plots, deadlock report -> HTML.

Pipeline: `python -m analysis.aggregate` turns run directories into a tidy table set;
`python -m analysis.report` turns that into tables, plots and one self-contained HTML page.
The names below are shared by every module so labels and colours agree everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from runners.adapters import registry  # light: no torch, PyG or DGL
from runners.config import field_names  # light: the settings' declarations
from runners.records import rank_rows as record  # light: no torch or pandas

# The aggregate's files (analysis.aggregate.Aggregate writes and loads them; the workflow's
# aggregate rule lists them as its outputs and the report rule as its inputs): name -> file.
AGGREGATE_FILES = {"runs": "runs.csv", "epochs": "epochs.csv", "steps": "steps.csv", "invalid": "invalid.csv",
                   "cpu": "cpu.csv", "nvml": "nvml.csv", "history": "history.csv", "failures": "failures.json",
                   "plan": "adaptive.json", "datasets": "datasets.json"}

STATUSES = ("ok", "diverged", "hang", "timeout", "crashed", "killed", "interrupted", "failed", "error", "skipped")

# Colours of the status map and of status cells; "not run" is a grid point with no result.
STATUS_COLOURS = {
    "ok": "#2ca25f",
    "diverged": "#c51b8a",  # the loss became NaN/inf: trained, but measured nothing
    "hang": "#fd8d3c",
    "timeout": "#756bb1",
    "crashed": "#de2d26",
    "killed": "#8c510a",
    "interrupted": "#e7ba52",  # stopped from outside (Ctrl-C, a scheduler): rerun, not a verdict
    "failed": "#6baed6",  # its run directory was moved or deleted from outside: rerun, not a verdict
    "error": "#636363",
    "skipped": "#bdbdbd",  # a grid point this machine cannot run (more GPUs than it has)
    "not run": "#eeeeee",
}

# Most severe first: a cell with mixed repeats is coloured by its worst outcome.
STATUS_SEVERITY = ("error", "crashed", "killed", "timeout", "hang", "diverged", "failed", "interrupted", "skipped",
                   "ok")

# Frameworks and models, their order, labels and colours: from the one registry.
FRAMEWORK_ORDER = registry.FRAMEWORK_NAMES
MODEL_ORDER = registry.MODEL_NAMES
FRAMEWORK_LABELS = {f.name: f.label for f in registry.FRAMEWORKS.values()}
FRAMEWORK_COLOURS = {f.name: f.colour for f in registry.FRAMEWORKS.values()}
MODEL_LABELS = {m.name: m.label for m in registry.MODELS.values()}

PHASE_COLUMNS = record.PHASE_COLUMNS  # the timed phases of a step, as the harness records them
PHASE_LABELS = {
    "load_wait_s": "waiting for loader",
    "prepare_s": "batch preparation (framework)",
    "copy_s": "host-to-device copy",
    "forward_s": "forward",
    "backward_s": "backward + all-reduce",
    "optimizer_s": "optimizer",
}

# The swept axes of one grid point (repeats of the same point are averaged).
GRID_KEYS = ("framework", "model", "devices", "batch_size", "workers")

# Settings that define an "experiment": runs differing in any of these are never mixed in
# one table cell (declared on the settings' fields, runners/settings.py, plus the loader when it
# is not the framework's default). Keys absent from a result (older runners) are simply ignored.
EXPERIMENT_KEYS = field_names("experiment") + ("loader_variant",)

# Settings whose defaults differ per model (the seed study's Table 1): they only split
# experiments when they differ between runs of the SAME model.
MODEL_KEYS = ("layers", "hidden", "heads", "dropout", "epochs")


def framework_label(name) -> str:
    # Read from the registry at each call: a framework declared after import is labelled too.
    f = registry.FRAMEWORKS.get(str(name))
    return f.label if f else str(name)


def model_label(name) -> str:
    return MODEL_LABELS.get(str(name), str(name))


# CPU use (%) by other work before a run's launch above which its timing is suspect: the
# launcher warns at it, the report counts the runs above it.
from runners.records.envinfo import BUSY_WARN_PERCENT  # noqa: E402


# -- the report's assets ----------------------------------------------------------------------

@dataclass(frozen=True)
class Asset:
    """A table or plot analysis.report writes beside index.html (a table as NAME.csv and
    NAME.html, a plot as NAME.png). `section`: where `snakemake --report` files it; `builder`:
    "module:function", the module's dotted path under analysis ("report.plots"), imported only
    when the report renders, called with the attributes `inputs` of the render's
    analysis.report.context.Context ("*name" unpacks one);
    `part`: the key of this asset where the builder returns several; `caption`: its caption
    file under workflows/report/ (default: its name); `optional`: written only when it has rows,
    so the workflow does not declare it."""
    section: str
    builder: str
    inputs: tuple = ()
    part: str = ""
    caption: str = ""
    optional: bool = False


# Declared once here, in a light module, so that the workflow declares the report's outputs
# without importing the report's dependencies; the report builds and writes them in this order.
REPORT_TABLES = {
    "table2": Asset("Timing", "tables.paper:training_time_table", ("points",)),
    "speed": Asset("Timing", "tables.speed:speed_table", ("speed", "perf")),
    "paper_comparison": Asset("Timing", "tables.paper:paper_comparison", ("points", "paper")),
    "study_work": Asset("Seed study explained", "tables.study:study_work_table", ("runs",)),
    "study_time": Asset("Seed study explained", "tables.study:study_time_table", ("points",)),
    "work": Asset("Timing", "tables.work:work_table", ("work", "perf")),
    "scaling": Asset("Timing", "tables.scaling:scaling_table", ("scaling",)),
    "speedup_gap": Asset("Timing", "projection.speedup_gap:gap_table", ("gap",)),
    "projection": Asset("Timing", "projection.predict:report_tables", ("projection",), part="projection"),
    "projection_validation": Asset("Timing", "projection.predict:report_tables", ("projection",),
                                   part="projection_validation"),
    "workers": Asset("Timing", "tables.axes:workers_table", ("points", "runs")),
    "batch": Asset("Timing", "tables.axes:batch_table", ("points", "runs")),
    "plan": Asset("Timing", "report.sweep_record:plan_table", ("plan",)),
    "adaptive": Asset("Timing", "report.sweep_record:adaptive_table", ("agg.plan",)),
    "lanes": Asset("Timing", "variants.lanes:lanes_table", ("runs",)),
    "loaders": Asset("Timing", "variants.loaders:loaders_table", ("runs",)),
    "trim": Asset("Timing", "variants.trim:trim_table", ("runs",)),
    "partitioned": Asset("Timing", "variants.partitioned:partitioned_table", ("runs",)),
    "memory_model": Asset("Resources", "report.sweep_record:memory_table", ("runs",), optional=True),
    "breakdown": Asset("Timing", "tables.steps:breakdown_table", ("points",)),
    "throughput": Asset("Timing", "tables.steps:throughput_table", ("points",)),
    "accuracy": Asset("Accuracy", "tables.accuracy:accuracy_table", ("points",)),
    "deadlocks": Asset("Hangs and failures", "report.sweep_record:deadlocks_table", ("agg.failures",)),
    "environment": Asset("Setup", "report.sweep_record:environment_table", ("runs",)),
    "fairness": Asset("Setup", "report.sweep_record:fairness_table", ("runs",)),
    "runs": Asset("Runs", "report.sweep_record:runs_table", ("runs",)),
    "invalid": Asset("Runs", "report.sweep_record:invalid_table", ("agg.invalid",)),
}
REPORT_PLOTS = {
    "summary": Asset("Timing", "report.plots:framework_ratios", ("main_speed",)),
    "status_map": Asset("Hangs and failures", "report.plots:status_map", ("runs",)),
    "runtime_vs_devices": Asset("Timing", "report.plots:runtime_vs_devices", ("drawn.runtime_vs_devices",)),
    "runtime_vs_devices_all": Asset("Timing", "report.plots:runtime_vs_devices", ("drawn.runtime_vs_devices_all",)),
    "speedup": Asset("Timing", "report.plots:speedup_vs_devices", ("drawn.speedup",)),
    "speedup_all": Asset("Timing", "report.plots:speedup_vs_devices", ("drawn.speedup_all",)),
    "work": Asset("Timing", "tables.work:work_bars", ("work",), caption="work_plot"),
    "speedup_gap": Asset("Timing", "report.plots:gap_bars", ("gap",), caption="speedup_gap_plot"),
    "projection": Asset("Timing", "report.plots:projection_bands", ("*main_projection",), caption="projection_plot"),
    "breakdown": Asset("Timing", "report.plots:breakdown_bars", ("drawn.breakdown",), caption="breakdown_plot"),
    "breakdown_all": Asset("Timing", "report.plots:breakdown_bars", ("drawn.breakdown_all",)),
    "throughput": Asset("Timing", "report.plots:throughput_vs_batch", ("drawn.throughput",), caption="throughput_plot"),
    "resources": Asset("Resources", "report.plots:resources_over_time", ("runs", "agg.cpu", "agg.nvml", "resource_runs")),
}


def declared(assets: dict) -> dict:
    """The assets the workflow declares as outputs: name -> Asset, optional ones left out."""
    return {name: a for name, a in assets.items() if not a.optional}


def caption_name(name: str, asset: Asset) -> str:
    """The caption file's name (without .rst, under workflows/report/) of the asset `name`."""
    return asset.caption or name
