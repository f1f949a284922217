rule run:
    """One training run of one grid point.

    The runner owns the run directory, writes result.json atomically and exits 0
    for every recorded outcome (hangs and timeouts included), so a bad
    configuration never stops the sweep. Only configuration is a param: editing
    code (analysis, or this rule) never invalidates a finished result.
    """
    input:
        # ancient: re-preparing the same dataset (e.g. after changing raw_dir or
        # download) must not invalidate finished runs; each result records the
        # dataset's content hash instead.
        dataset=ancient("results/datasets/{dataset}/meta.json"),
        partitions=partitions_input,
    output:
        # update: Snakemake neither removes a finished result before a forced rerun nor after a
        # failed one (it restores it); the runner keeps the replaced run under previous/.
        result=update(f"{RUN_DIR}/result.json"),
    log:
        f"results/logs/run/{{dataset}}/{RUN_NAME}.log",
    # Interleaved order: repeat r of every configuration before repeat r + 1 (common.smk).
    priority: run_priority
    conda:
        "../../environment.yml"
    # The whole machine: timings must not share the CPU with another job, and
    # bench=1 (a global limit in profiles/default) keeps runs from overlapping.
    threads: MACHINE_THREADS
    resources:
        **run_resources(),
    params:
        out=lambda wildcards, output: os.path.dirname(output.result),
        settings=run_settings,
        launch=launcher,
        # The lane's interpreter (pair: the Snakemake venv's; others: .venv-LANE).
        python=lane_python,
    message:
        "run {RUN_NUMBER:{output.result}}: {wildcards.kind_prefix}{wildcards.lane_prefix}{wildcards.loader_prefix}"
        "{wildcards.trim_prefix}"
        "{wildcards.framework}"
        " {wildcards.model}"
        " devices={wildcards.devices} batch={wildcards.batch}"
        " workers={wildcards.workers} repeat={wildcards.repeat}"
        " dataset={wildcards.dataset}"
    shell:
        "{params.launch}{params.python} -m runners.run"
        " --framework {wildcards.framework} --model {wildcards.model}"
        " --devices {wildcards.devices} --batch-size {wildcards.batch}"
        " --workers {wildcards.workers} --repeat {wildcards.repeat}"
        " --dataset {wildcards.dataset} --data-root results/datasets"
        " {params.settings} --out {params.out} 2>&1 | tee {log}"
