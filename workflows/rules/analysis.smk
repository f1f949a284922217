# The aggregate's files, listed once (analysis.AGGREGATE_FILES): its outputs, the report's inputs.
AGGREGATE = {
    name: f"results/aggregate/{file}" for name, file in AGGREGATE_FILES.items()
}


rule aggregate:
    """Collect every run directory into one tidy table per level."""
    input:
        # the first round is known before any run; the second once the plan is made
        runs=RUN_RESULTS,
        added=added_run_results,
        plan=adaptive_plan,
        # editing analysis code reruns aggregate and report, never the runs
        code=analysis_sources(),
    output:
        **AGGREGATE,
    log:
        "results/logs/aggregate.log",
    conda:
        "../../environment.yml"
    params:
        run_dirs=lambda wildcards, input: [
            os.path.dirname(f) for f in [*input.runs, *input.added]
        ],
        plan=lambda wildcards, input: f"--plan {input.plan}" if input.plan else "",
        # the report prints it (with --forcerun) beside every run's direct command
        workflow=WORKFLOW_RERUN,
    shell:
        "python -m analysis.aggregate --out-dir results/aggregate --workflow {params.workflow:q}"
        " {params.plan} {params.run_dirs} > {log} 2>&1"


rule report:
    """Tables, plots and the deadlock report, as one self-contained page."""
    input:
        **AGGREGATE,
        code=analysis_sources(),
    output:
        **report_outputs(),
    log:
        "results/logs/report.log",
    conda:
        "../../environment.yml"
    shell:
        "python -m analysis.report --aggregate results/aggregate"
        " --out {output.html} --assets results/report > {log} 2>&1"
