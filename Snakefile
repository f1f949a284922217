# gnnscale: PyG vs DGL data-parallel GNN training benchmark.
#
# config -> dataset -> one run job per grid point -> aggregate -> report.
# See docs/workflow.md for profiles, rerunning one configuration and SLURM.

from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


report: "workflows/report/workflow.rst"


include: "workflows/rules/common.smk"
include: "workflows/rules/dataset.smk"
include: "workflows/rules/partitions.smk"
include: "workflows/rules/run.smk"
include: "workflows/rules/adaptive.smk"
include: "workflows/rules/analysis.smk"


# Every run's result too: Snakemake redoes a deleted file only when a job that wants it runs,
# and it would not run the aggregate again for a run whose result is gone (its own outputs
# exist), so the target names them itself.
rule all:
    default_target: True
    input:
        "results/report/index.html",
        RUN_RESULTS,
        added_run_results,
