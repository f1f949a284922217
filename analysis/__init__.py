"""Analysis of gnnscale result directories: aggregate -> tables, plots, deadlock report -> HTML.

Pipeline: `python -m analysis.aggregate` turns run directories into a tidy table set;
`python -m analysis.report` turns that into tables, plots and one self-contained HTML page.
The names below are shared by every module so labels and colours agree everywhere.
"""

from __future__ import annotations

from runners import record  # light: no torch or pandas
from runners.adapters import registry  # light: no torch, PyG or DGL
from runners.config import field_names  # light: the settings' declarations

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
    return FRAMEWORK_LABELS.get(str(name), str(name))


def model_label(name) -> str:
    return MODEL_LABELS.get(str(name), str(name))


# Every table and plot analysis.report writes beside index.html (its ASSETS), named once here,
# in a light module, so that the workflow declares them without importing the report's
# dependencies: name -> the section of `snakemake --report` it goes to (and, for a plot, its
# caption's name under workflows/report/).
REPORT_TABLES = {
    "table2": "Timing",
    "speed": "Timing",
    "paper_comparison": "Timing",
    "study_work": "Seed study explained",
    "study_time": "Seed study explained",
    "scaling": "Timing",
    "speedup_gap": "Timing",
    "projection": "Timing",
    "projection_validation": "Timing",
    "workers": "Timing",
    "batch": "Timing",
    "plan": "Timing",
    "adaptive": "Timing",
    "lanes": "Timing",
    "loaders": "Timing",
    "partitioned": "Timing",
    "breakdown": "Timing",
    "throughput": "Timing",
    "accuracy": "Accuracy",
    "deadlocks": "Hangs and failures",
    "environment": "Setup",
    "fairness": "Setup",
    "runs": "Runs",
    "invalid": "Runs",
}
REPORT_PLOTS = {
    "summary": ("Timing", "summary"),
    "status_map": ("Hangs and failures", "status_map"),
    "runtime_vs_devices": ("Timing", "runtime_vs_devices"),
    "runtime_vs_devices_all": ("Timing", "runtime_vs_devices_all"),
    "speedup": ("Timing", "speedup"),
    "speedup_gap": ("Timing", "speedup_gap_plot"),
    "projection": ("Timing", "projection_plot"),
    "breakdown": ("Timing", "breakdown_plot"),
    "breakdown_all": ("Timing", "breakdown_all"),
    "throughput": ("Timing", "throughput_plot"),
    "resources": ("Resources", "resources"),
}
